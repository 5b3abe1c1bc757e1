"""Graders: the report files, report.json, report.csv, gradebook.csv, report.md, feedback/, graded/.

Points: an exercise that passed earns its points (``metadata.course.points`` of the master's
solution cell, default 1), any other status earns 0. A notebook's points are the sum over its
exercises; a student's total is the sum over the notebooks they handed in, out of the sum of the
maximum points of every notebook in the report.

``report.json`` holds everything the other files are written from (results with their notes,
sources and run times; each notebook's points; how the runs were set up), so that
``python -m course_tools.grade merge`` rebuilds the whole report from the shards' JSON files.
When the grader's environment holds ``COURSE_GRADE_KEY`` (a secret the grading runs never see),
report.json carries an HMAC of its content (``"signature"``) that ``merge`` verifies.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from course_utils.errors import first_line

from .records import NOTEBOOK_STATUSES, Result, Status, number

#: The environment variable with the key that signs report.json (never passed to a grading run).
KEY_VARIABLE = "COURSE_GRADE_KEY"

#: The note every result graded without the sandbox carries (and the gradebook's ``sandbox`` column).
NO_SANDBOX = (
    "graded without the sandbox: the student's code could reach every file and process your user "
    'can, and could outlive its run (see docs/grading.md, "Who decides a grade")'
)


def signing_key() -> Optional[bytes]:
    """The key of :data:`KEY_VARIABLE`, read now (None when it is not set)."""
    value = os.environ.get(KEY_VARIABLE, "")
    return value.encode() if value else None


def signature(data: dict[str, Any], key: bytes) -> str:
    """The HMAC-SHA256 of report.json's content (everything but its ``signature``)."""
    body = json.dumps({k: v for k, v in data.items() if k != "signature"}, sort_keys=True, ensure_ascii=False)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


ICONS = {
    Status.PASSED: "✅",
    Status.FAILED: "❌",
    Status.ERROR: "⚠️",
    Status.TIMEOUT: "⏱️",
    Status.MISSING: "➖",
    Status.FLAGGED: "🚩",
}


def gradebook_notebooks(results: list[Result], notebooks: dict[str, dict[str, float]]) -> list[str]:
    """The gradebook's columns: the course notebooks (with exercises) somebody handed in, in order."""
    present = {r.notebook for r in results}
    return [name for name in sorted(notebooks) if name in present and notebooks[name]]


def student_totals(results: list[Result], notebooks: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One entry per student: points per notebook (None when not handed in) and the total."""
    columns = gradebook_notebooks(results, notebooks)
    most = number(sum(sum(notebooks[n].values()) for n in columns))
    rows: dict[str, dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (r.student.lower(), r.student)):
        row = rows.setdefault(
            r.student,
            {"student": r.student, "notebooks": {n: None for n in columns}, "points": 0, "max_points": most},
        )
        if r.notebook in row["notebooks"]:
            row["notebooks"][r.notebook] = number((row["notebooks"][r.notebook] or 0) + r.points)
    for row in rows.values():
        row["points"] = number(sum(v or 0 for v in row["notebooks"].values()))
    return list(rows.values())


def safe_name(text: str) -> str:
    """A file name for a student id: letters, digits, ``-_.#`` and nothing else."""
    name = re.sub(r"[^\w.#-]+", "_", text, flags=re.UNICODE).strip("._") or "student"
    return name[:100]


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _short(ident: str, message: str) -> str:
    line = first_line(message)
    return re.sub(rf"^Exercise {re.escape(ident)}:\s*", "", line)


def write_json(
    results: list[Result], path: Path, notebooks: dict[str, dict[str, float]], run: dict[str, Any]
) -> None:
    present = {r.notebook for r in results}
    data = {
        "results": [r.as_json() for r in results],
        "students": student_totals(results, notebooks),
        "notebooks": {
            name: {
                "exercises": {i: number(p) for i, p in worth.items()},
                "max_points": number(sum(worth.values())),
            }
            for name, worth in sorted(notebooks.items())
            if name in present
        },
        "run": run,
    }
    key = signing_key()
    if key is not None:
        data["signature"] = signature(json.loads(json.dumps(data, ensure_ascii=False)), key)
    # Written whole or not at all: a merge job may be waiting for this file to appear.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


CSV_COLUMNS = [
    "student",
    "notebook",
    "notebook_status",
    "exercise",
    "status",
    "message",
    "passed",
    "total",
    "points",
    "max_points",
    "notebook_points",
    "notebook_max_points",
]


def write_csv(results: list[Result], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            totals = [number(r.points), number(r.max_points)]
            if not r.exercises:
                writer.writerow(
                    [r.student, r.notebook, r.status, "", "", "; ".join(r.notes), r.passed, r.total, "", ""]
                    + totals
                )
            for e in r.exercises:
                writer.writerow(
                    [r.student, r.notebook, r.status, e.id, e.status, e.message, r.passed, r.total]
                    + [number(e.points), number(e.max_points)]
                    + totals
                )


def write_gradebook(results: list[Result], path: Path, notebooks: dict[str, dict[str, float]]) -> None:
    """One row per student, one column per notebook (points earned, empty when not handed in), a total."""
    columns = gradebook_notebooks(results, notebooks)
    # Where any notebook was graded without the sandbox, a last column says so on every row.
    exposed = {r.student for r in results if NO_SANDBOX in r.notes}
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", *columns, "total", *(["sandbox"] if exposed else [])])
        for row in student_totals(results, notebooks):
            cells = ["" if row["notebooks"][n] is None else row["notebooks"][n] for n in columns]
            flag = ["off" if row["student"] in exposed else "on"] if exposed else []
            writer.writerow([row["student"], *cells, row["points"], *flag])


def write_markdown(
    results: list[Result], path: Path, header: list[str], notebooks: dict[str, dict[str, float]]
) -> None:
    lines = ["# Grades", ""] + header + [""]
    by_notebook: dict[str, list[Result]] = {}
    for r in results:
        by_notebook.setdefault(r.notebook, []).append(r)
    for notebook in sorted(by_notebook):
        rows = by_notebook[notebook]
        worth = notebooks.get(notebook, {})
        ids = list(worth) or sorted({e.id for r in rows for e in r.exercises})
        lines += [f"## {notebook}", ""]
        if worth:
            lines += [
                "Points: "
                + ", ".join(f"`{i}` {number(p)}" for i, p in worth.items())
                + f"; {number(sum(worth.values()))} in all.",
                "",
            ]
        head = ["student", "status", "points", "passed"] + [f"`{i}`" for i in ids] + ["time"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in sorted(rows, key=lambda r: r.student.lower()):
            found = {e.id: e for e in r.exercises}
            cells = [
                _cell(r.student),
                r.status,
                f"{number(r.points)}/{number(r.max_points)}",
                f"{r.passed}/{r.total}",
            ]
            for ident in ids:
                e = found.get(ident)
                if e is None:
                    cells.append("")
                elif e.status is Status.PASSED:
                    cells.append(f"{ICONS[Status.PASSED]} {Status.PASSED}")
                else:
                    cells.append(_cell(f"{ICONS.get(e.status, '')} {e.status}: {_short(ident, e.message)}"))
            cells.append(f"{r.seconds:.0f} s" if r.seconds is not None else "")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    columns = gradebook_notebooks(results, notebooks)
    if columns:
        lines += ["## Totals", "", "Points per student and notebook (the same numbers as gradebook.csv).", ""]
        head = ["student", *columns, "total"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for row in student_totals(results, notebooks):
            cells = [_cell(row["student"])]
            cells += ["" if row["notebooks"][n] is None else str(row["notebooks"][n]) for n in columns]
            cells.append(f"{row['points']}/{row['max_points']}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    flagged = [(r, e) for r in results for e in r.exercises if e.status is Status.FLAGGED]
    if flagged:
        lines += [
            "## Flagged for review",
            "",
            "These answers reach for the course's checks, the grader or Python's back doors (see "
            "docs/grading.md). They earn no points until a person has looked; the check's own result "
            "ends each line.",
            "",
        ]
        for r, e in sorted(flagged, key=lambda pair: (pair[0].notebook, pair[0].student.lower())):
            lines.append(f"- **{_cell(r.student)}**, {r.notebook}, `{e.id}`: {_cell(e.message)}")
        lines.append("")
    noted = [r for r in results if r.notes]
    if noted:
        lines += ["## Notes", ""]
        for r in sorted(noted, key=lambda r: (r.notebook, r.student.lower())):
            lines.append(f"- **{_cell(r.student)}**, {r.notebook} (`{_cell(r.source)}`):")
            lines += [f"  - {_cell(n)}" for n in r.notes]
        lines.append("")
    path.write_text("\n".join(lines))


def feedback_text(student: str, results: list[Result]) -> str:
    lines = [f"# Feedback for {student}", ""]
    for r in sorted(results, key=lambda r: r.notebook):
        lines += [
            f"## {r.notebook}: {r.passed} of {r.total} exercises passed, "
            f"{number(r.points)} of {number(r.max_points)} points",
            "",
        ]
        if r.status is Status.INVALID:
            lines += [
                "Your notebook could not be graded: "
                + (r.notes[0] if r.notes else "it could not be read")
                + ".",
                "",
            ]
        elif r.status in (Status.TIMEOUT, Status.ERROR):
            lines += [f"Grading note ({r.status}): " + (r.notes[0] if r.notes else ""), ""]
        for e in r.exercises:
            lines += [f"### `{e.id}`: {e.status} ({number(e.points)}/{number(e.max_points)})", ""]
            message = e.message.strip()
            if message:
                lines += [message, ""]
    return "\n".join(lines).rstrip() + "\n"


def write_all(
    results: list[Result],
    out: Path,
    header: list[str],
    notebooks: dict[str, dict[str, float]],
    run: Optional[dict[str, Any]] = None,
) -> list[Result]:
    """Every report file. ``notebooks`` maps each course notebook to its exercises' points; ``run``
    says how the runs were set up (report.json). Returns the results with ``graded_path`` set
    where their graded notebook (with its run's outputs) was written."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    by_student: dict[str, list[Result]] = {}
    for r in results:
        by_student.setdefault(r.student, []).append(r)
    files: dict[str, str] = {}
    used: set[str] = set()
    for student in sorted(by_student):
        name = safe_name(student)
        while name.lower() in used:
            name += "_"
        used.add(name.lower())
        files[student] = name
    feedback = out / "feedback"
    feedback.mkdir(exist_ok=True)
    for old in feedback.glob("*.md"):
        old.unlink()
    for student, rows in by_student.items():
        (feedback / f"{files[student]}.md").write_text(feedback_text(student, rows))
    graded = out / "graded"
    if graded.is_dir():
        for old in graded.glob("*/*.ipynb"):
            old.unlink()
    placed = []
    for r in results:
        path = ""
        if r.graded_notebook is not None:
            folder = graded / files[r.student]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{r.notebook}.ipynb").write_text(nbformat.writes(r.graded_notebook))
            path = f"graded/{files[r.student]}/{r.notebook}.ipynb"
        placed.append(replace(r, graded_path=path))
    write_csv(placed, out / "report.csv")
    write_gradebook(placed, out / "gradebook.csv", notebooks)
    write_markdown(placed, out / "report.md", header, notebooks)
    # Last: a report.json means every other file of this report is there (a merge waits for it).
    write_json(placed, out / "report.json", notebooks, run or {})
    return placed


def counts(results: list[Result]) -> dict[str, int]:
    """How many notebooks have each status."""
    return {s: sum(r.status == s for r in results) for s in NOTEBOOK_STATUSES}


def header(results: list[Result], run: dict[str, Any]) -> list[str]:
    """The report's opening lines: what was graded, how the runs were set up, what statuses mean.

    ``run``: ``env`` (the runs' environment variables), ``limits`` (timeouts and sandbox, as a
    sentence), ``skipped`` (course notebooks that could not be read), ``changed`` (submissions
    changed on disk during grading), ``shard`` (``{"index", "count", "class_size"}`` for one shard).
    """
    found = counts(results)
    lines = [
        f"{len(results)} submission(s) from {len({r.student for r in results})} student(s): "
        + ", ".join(f"{n} {s}" for s, n in found.items() if n)
        + "."
        if results
        else "No submission in this report.",
    ]
    shard = run.get("shard")
    if shard:
        lines += [
            "",
            f"Shard {shard['index']} of {shard['count']}: {len(results)} of the class's "
            f"{shard['class_size']} submission(s). Combine the shards with "
            "`python -m course_tools.grade merge`.",
        ]
    lines += [
        "",
        "Runs: " + " ".join(f"{k}={v}" for k, v in run.get("env", {}).items()) + f"; {run.get('limits', '')}",
        "",
        "Exercise status: **passed** the judge's check passed (the exercise earns its points); "
        "**failed** the check raised ExerciseError: the answer is wrong, or the student's code raised "
        "while the check called it (the hint says why); **error** the student's exercise cell raised, "
        "or the grader could not call the student's code; **timeout** did not finish in time; "
        "**missing** no code found; **flagged** a pass the audit asks a person to look at (no points "
        "until then).",
    ]
    for note in run.get("notes", []):
        lines += ["", note]
    if run.get("skipped"):
        lines += ["", "Course notebooks skipped: " + "; ".join(run["skipped"])]
    if run.get("changed"):
        lines += [
            "",
            "**Warning:** these submissions changed on disk during grading (run with the "
            "sandbox to prevent it): " + ", ".join(run["changed"]),
        ]
    return lines
