"""Graders on a batch system: a class graded in shards (``--shard K/N``), and ``merge`` of their reports.

``--shard K/N`` grades the K-th of N slices of the class (K from 1 to N). Every task reads the
same submissions, sorts them by (notebook, student, file) and keeps every N-th one starting at
the K-th: the slices are disjoint, cover the class, differ in size by one at most, and mix the
notebooks (a slow notebook does not land on one task). A shard's ``report.json`` records which
shard it is and a digest of the whole class, so that

``python -m course_tools.grade merge DIR... --out DIR`` can refuse to combine shards of different
classes, or an incomplete set, instead of writing a gradebook with students silently missing.
The merged report is written from the shards' ``report.json`` files by the same code as an
unsharded run's, and the graded notebooks are copied over.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from . import course as course_mod
from . import report
from .course import Course
from .records import Result, number
from .submissions import Submission

EXIT_OK, EXIT_USAGE, EXIT_GRADER = 0, 2, 3


class ShardError(Exception):
    """A ``--shard`` value or a set of shard reports that cannot be used."""


def parse(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with 1 <= K <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise ShardError(f"--shard {text}: write it K/N (for example 2/8), K from 1 to N.")
    k, n = int(match.group(1)), int(match.group(2))
    if n < 1 or not 1 <= k <= n:
        raise ShardError(f"--shard {text}: K must be between 1 and N (and N at least 1).")
    return k, n


def _key(sub: Submission) -> tuple[str, str, str, str]:
    notebook = sub.notebook or sub.path.name
    return (notebook, sub.student.lower(), sub.student, sub.path.name)


def class_digest(subs: list[Submission]) -> str:
    """A digest of the class (who handed in which notebook), the same on every task that reads it."""
    lines = sorted(f"{s.student}\0{s.notebook or s.path.name}" for s in subs)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def select(subs: list[Submission], k: int, n: int) -> tuple[list[Submission], dict[str, Any]]:
    """The K-th of N slices of the class, and what report.json records about it."""
    ordered = sorted(subs, key=_key)
    mine = ordered[k - 1 :: n]
    info = {"index": k, "count": n, "class_size": len(subs), "class_digest": class_digest(subs)}
    return mine, info


# --------------------------------------------------------------------------- merging


def _load(folder: Path) -> dict[str, Any]:
    path = folder / "report.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShardError(f"{folder}: no report.json (did this shard finish?).") from None
    except (OSError, ValueError) as error:
        raise ShardError(f"{path}: cannot be read ({error}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ShardError(f"{path}: not a grader's report.json.")
    if "run" not in data or "notebooks" not in data:
        raise ShardError(f"{path}: written by an older grader (no points or run settings); grade it again.")
    return data


def check_complete(reports: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Problems that forbid merging: shards of different classes or counts, missing or repeated shards."""
    shards = [(folder, data["run"].get("shard")) for folder, data in reports]
    if not any(info for _, info in shards):
        return []
    problems = []
    whole = [str(folder) for folder, info in shards if not info]
    if whole:
        problems.append("these reports are not shards (no --shard): " + ", ".join(whole))
    infos = [(folder, info) for folder, info in shards if info]
    counts = {info["count"] for _, info in infos}
    digests = {info["class_digest"] for _, info in infos}
    if len(counts) > 1:
        problems.append(f"the shards were cut into different numbers of slices: {sorted(counts)}")
    if len(digests) > 1:
        problems.append("the shards graded different classes (their lists of submissions differ)")
    if not problems:
        count = counts.pop()
        seen: dict[int, list[str]] = {}
        for folder, info in infos:
            seen.setdefault(int(info["index"]), []).append(str(folder))
        missing = [k for k in range(1, count + 1) if k not in seen]
        if missing:
            problems.append(f"shard(s) {', '.join(f'{k}/{count}' for k in missing)} missing")
        for k, folders in sorted(seen.items()):
            if len(folders) > 1:
                problems.append(f"shard {k}/{count} given twice: {', '.join(folders)}")
    return problems


def merge(folders: list[Path], out: Path, course: Optional[Course] = None) -> list[Result]:
    """Combine the reports in ``folders`` into one report in ``out``; ShardError when they do not fit.

    Every exercise's points are computed again from its status and the points of ``course``'s
    masters (else of the reports), never taken from the files; with ``COURSE_GRADE_KEY`` set, a
    report whose signature does not verify is refused."""
    import nbformat

    reports = [(folder, _load(folder)) for folder in folders]
    problems = check_complete(reports)
    secret = report.signing_key()
    for folder, data in reports:
        mark = data.get("signature")
        if secret is not None and not (
            isinstance(mark, str) and hmac.compare_digest(mark, report.signature(data, secret))
        ):
            problems.append(
                f"{folder / 'report.json'} does not verify with {report.KEY_VARIABLE}: it was changed after "
                "the grader wrote it, or signed with another key (or none)"
            )
    results: list[Result] = []
    seen: dict[tuple[str, str, str], Path] = {}
    notebooks: dict[str, dict[str, float]] = {}
    for folder, data in reports:
        for name, info in data["notebooks"].items():
            worth = {str(i): float(p) for i, p in info.get("exercises", {}).items()}
            if course is not None:
                if name not in course.notebooks:
                    problems.append(f"{folder}: notebook {name} is not in the course")
                    continue
                worth = {i: float(p) for i, p in course.notebooks[name].points().items()}
            if name in notebooks and notebooks[name] != worth:
                problems.append(f"{folder}: notebook {name} has other points than in another report")
            notebooks[name] = worth
        for item in data["results"]:
            result = Result.from_json(item)
            worth = notebooks.get(result.notebook, {})
            result = replace(  # the points again, from the statuses: never the file's numbers
                result,
                exercises=tuple(e.scored(worth) for e in result.exercises),
                max_points=number(sum(worth.values())),
            )
            key = (result.student, result.notebook, result.source)
            if key in seen:
                problems.append(
                    f"{result.student} · {result.notebook} ({result.source}) is in {seen[key]} and {folder}"
                )
                continue
            seen[key] = folder
            if result.graded_path:
                try:
                    graded = nbformat.read(folder / result.graded_path, as_version=4)
                    result = replace(result, graded_notebook=graded)
                except (OSError, ValueError) as error:
                    note = f"the graded notebook could not be copied from {folder}: {error}"
                    result = replace(result, notes=(*result.notes, note))
            results.append(result)
    if problems:
        raise ShardError("cannot merge: " + "; ".join(problems) + ".")
    first = reports[0][1]["run"] if reports else {}
    run: dict[str, Any] = {
        "env": first.get("env", {}),
        "limits": first.get("limits", ""),
        "skipped": sorted({s for _, d in reports for s in d["run"].get("skipped", [])}),
        "changed": sorted({c for _, d in reports for c in d["run"].get("changed", [])}),
        "notes": [],
        "shard": None,
        "merged_from": [str(folder) for folder in folders],
    }
    settings = {json.dumps([d["run"].get("env"), d["run"].get("limits")]) for _, d in reports}
    if len(settings) > 1:
        run["notes"] = ["**Note:** the merged reports were graded with different settings (see each one)."]
    if secret is None:
        run["notes"].append(
            f"**Note:** the reports were merged without {report.KEY_VARIABLE}, so nothing proves they are "
            "as the grader wrote them (the points were computed again from the statuses)."
        )
    results.sort(key=lambda r: (r.notebook, r.student.lower()))
    return report.write_all(results, out, report.header(results, run), notebooks, run)


def merge_main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.grade merge",
        description="Combine the reports of a class graded in shards (--shard K/N) into one report.",
    )
    parser.add_argument("folders", nargs="+", metavar="DIR", help="the --out folder of each shard")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the merged report goes")
    parser.add_argument(
        "--course",
        metavar="DIR",
        help="the course folder whose masters give the points (default: this checkout)",
    )
    args = parser.parse_args(argv)
    folders = [Path(f).expanduser().resolve() for f in args.folders]
    out = Path(args.out).expanduser().resolve()
    if out in folders:
        print("grade merge: --out must be a new folder, not one of the shards.", file=sys.stderr)
        return EXIT_USAGE
    try:
        course = course_mod.load_course(course_mod.find_course_root(args.course))
        results = merge(folders, out, course)
    except (ShardError, course_mod.CourseNotFound) as error:
        print(f"grade merge: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"grade merge: cannot write the report to {args.out}: {error}", file=sys.stderr)
        return EXIT_GRADER
    found = report.counts(results)
    print(
        f"merged {len(folders)} report(s): {len(results)} submission(s), "
        + ", ".join(f"{n} {s}" for s, n in found.items() if n)
        + f". Report: {out / 'report.md'}",
        file=sys.stderr,
    )
    return EXIT_OK
