"""Graders sizing a machine: how fast the grader grades, and in how much memory (a benchmark).

    python -m course_tools.grade throughput                   # each notebook: one honest submission
    python -m course_tools.grade throughput 00 --class-size 30 --jobs 1 2   # a class, -j 1 and -j 2

Each measurement runs the real command (``python -m course_tools.grade``) on copies of the
masters (the honest answers, as a student who solved everything hands them in) and reads back
``report.json``: the run's seconds and its peak memory (the whole run and the kernel alone, as
sampled by :class:`course_utils.processes.PeakMemory`). To measure under a container's limits,
run this command inside them (docs/grading.md, section 5, gives the course's numbers under
Gradescope-like memory and CPU limits).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from . import course as course_mod
from .records import Status


def _grade(
    subs: list[Path], out: Path, course: Path, jobs: int, options: Sequence[str] = ()
) -> tuple[float, dict[str, Any], str]:
    command = [sys.executable, "-m", "course_tools.grade", *map(str, subs), "--course", str(course)]
    command += ["-j", str(jobs), "--out", str(out), "--quiet", *options]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    report = out / "report.json"
    data = json.loads(report.read_text()) if report.is_file() else {"results": []}
    return wall, data, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def per_notebook(
    course: Path, names: list[str], work: Path, options: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """One honest submission of each notebook, graded alone (``-j 1``; ``options`` go to the grader)."""
    rows = []
    for name in names:
        folder = work / name / "student"
        folder.mkdir(parents=True)
        shutil.copy(course / "solutions" / f"{name}.ipynb", folder / f"{name}.ipynb")
        wall, data, last = _grade([folder], work / name / "out", course, 1, options)
        result = (data["results"] or [{}])[0]
        rows.append(
            {
                "notebook": name,
                "wall_s": round(wall, 1),
                "run_s": result.get("seconds"),
                "memory_mb": result.get("memory_mb"),
                "kernel_mb": result.get("kernel_mb"),
                "status": result.get("status", f"no report ({last})"),
                "passed": f"{result.get('passed', 0)}/{result.get('total', 0)}",
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def a_class(
    course: Path, name: str, size: int, jobs: list[int], work: Path, options: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """``size`` honest submissions of one notebook, graded at each ``-j``."""
    klass = work / "class"
    for n in range(1, size + 1):
        (klass / f"student{n:03d}").mkdir(parents=True)
        shutil.copy(course / "solutions" / f"{name}.ipynb", klass / f"student{n:03d}" / f"{name}.ipynb")
    rows = []
    for j in jobs:
        wall, data, last = _grade([klass], work / f"out-j{j}", course, j, options)
        results = data["results"]
        runs = [r["seconds"] for r in results if r.get("seconds") is not None]
        rows.append(
            {
                "notebook": name,
                "students": size,
                "jobs": j,
                "wall_s": round(wall, 1),
                "per_hour": round(size / wall * 3600),
                "mean_run_s": round(sum(runs) / len(runs), 1) if runs else None,
                "max_memory_mb": max((r.get("memory_mb") or 0 for r in results), default=None),
                "graded": sum(r.get("status") == Status.GRADED for r in results),
                "all_passed": all(r.get("passed") == r.get("total") for r in results) and bool(results),
                "last_line": last,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools.grade throughput", description=__doc__)
    parser.add_argument("notebooks", nargs="*", help="notebook numbers or names (default: every master)")
    parser.add_argument("--class-size", type=int, default=0, help="grade a class of this many copies")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1], help="with --class-size: each -j")
    parser.add_argument("--course", default=None, help="the course folder (default: this checkout)")
    parser.add_argument("--out", default="build/grading-throughput.json", help="where the numbers go")
    parser.add_argument("--timeout", type=float, default=None, help="the grader's --timeout (s per notebook)")
    args = parser.parse_args(argv)
    options = ["--timeout", f"{args.timeout:g}"] if args.timeout else []
    try:
        root = course_mod.find_course_root(args.course)
    except course_mod.CourseNotFound as error:
        print(f"throughput: {error}", file=sys.stderr)
        return 2
    masters = sorted(p.stem for p in (root / "solutions").glob("*.ipynb"))
    names = [m for m in masters if not args.notebooks or any(m.startswith(n) for n in args.notebooks)]
    if not names or (args.class_size and len(names) != 1):
        print("throughput: name one notebook with --class-size, or notebooks that exist.", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="grade-throughput-"))
    try:
        if args.class_size:
            rows = a_class(root, names[0], args.class_size, args.jobs, work, options)
        else:
            rows = per_notebook(root, names, work, options)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {out}")
    return 0
