"""``python -m course_utils.grade SUBMISSION... --out DIR``: grade a class.

Exit status: 0 when the class was graded (whatever the students scored); 2 when the command
line or the course folder is wrong; 3 when the grader itself could not work (no run could even
start, the sandbox was required and is unavailable, the report could not be written).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Optional

from . import course as course_mod
from . import extract, report, runner, sandbox, submissions, verdict

EXIT_OK, EXIT_USAGE, EXIT_GRADER = 0, 2, 3


def default_jobs() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.grade",
        description="Grade submitted notebooks of the course: run each student's exercise code "
        "inside the canonical notebook with the canonical checks, and write a report.",
    )
    parser.add_argument(
        "submissions",
        nargs="+",
        metavar="SUBMISSION",
        help="a notebook, a student's folder (its name is the student id), or a folder of such folders",
    )
    parser.add_argument(
        "--out", default="grades", metavar="DIR", help="where the reports go (default: grades)"
    )
    parser.add_argument(
        "--course", metavar="DIR", help="the course folder holding solutions/ (default: this checkout)"
    )
    parser.add_argument("--notebook", metavar="NAME", help="grade every submission as this course notebook")
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=default_jobs(),
        help=f"submissions graded at the same time (default: half the cores, here {default_jobs()})",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds for each exercise cell and each check cell (default: 120)",
    )
    parser.add_argument(
        "--course-cell-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds for each of the course's own cells (default: 600)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1200.0,
        metavar="S",
        help="seconds for a whole notebook, kernel start included (default: 1200)",
    )
    parser.add_argument(
        "--strategy", default="default", help="COURSE_STRATEGY of the runs (default: default)"
    )
    parser.add_argument("--replicas", type=int, help="COURSE_REPLICAS of the runs (default: unset)")
    parser.add_argument(
        "--full", action="store_true", help="run with full data and steps (COURSE_FAST unset)"
    )
    parser.add_argument(
        "--online", action="store_true", help="let the runs use the network (COURSE_OFFLINE unset)"
    )
    parser.add_argument(
        "--sandbox",
        choices=("auto", "on", "off"),
        default="auto",
        help="read-only file system outside each run's folder (Linux): auto uses it where "
        "the machine allows it, on refuses to grade without it (default: auto)",
    )
    parser.add_argument(
        "--workdir", metavar="DIR", help="where the temporary run folders go (default: the system's)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run folders and logs (for debugging)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    return parser


def _say(text: str, quiet: bool = False) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from ..config import ConfigError, parse_kind

    try:
        strategy = parse_kind(args.strategy)
    except ConfigError as error:
        print(f"grade: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs < 1 or min(args.cell_timeout, args.course_cell_timeout, args.timeout) <= 0:
        print("grade: -j and the timeouts must be positive.", file=sys.stderr)
        return EXIT_USAGE
    try:
        root = course_mod.find_course_root(args.course)
        course = course_mod.load_course(root)
    except course_mod.CourseNotFound as error:
        print(f"grade: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.notebook and args.notebook not in course.notebooks:
        print(
            f"grade: --notebook {args.notebook}: not a course notebook ({', '.join(course.notebooks)}).",
            file=sys.stderr,
        )
        return EXIT_USAGE
    for problem in course.problems:
        _say(f"note: {problem}", args.quiet)
    out = Path(args.out).expanduser().resolve()

    # 1. Read every submission before any student code runs.
    try:
        subs = submissions.load(args.submissions, course, exclude=[out], forced=args.notebook)
    except submissions.UsageError as error:
        print(f"grade: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not subs:
        print("grade: no notebook found in the given submissions.", file=sys.stderr)
        return EXIT_USAGE
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        print(f"grade: cannot write the report to {args.out}: {error}", file=sys.stderr)
        return EXIT_GRADER

    # 2. The sandbox.
    use_sandbox, why = False, "turned off (--sandbox off)"
    if args.sandbox != "off":
        use_sandbox, why = sandbox.available()
        if not use_sandbox and args.sandbox == "on":
            print(f"grade: --sandbox on, but {why}.", file=sys.stderr)
            return EXIT_GRADER
    _say(f"sandbox: {'on' if use_sandbox else 'off'} ({why})", args.quiet)

    env = {"COURSE_STRATEGY": strategy}
    if not args.full:
        env["COURSE_FAST"] = "1"
    if not args.online:
        env["COURSE_OFFLINE"] = "1"
    if args.replicas is not None:
        env["COURSE_REPLICAS"] = str(args.replicas)
    options = runner.RunOptions(
        cell_timeout=args.cell_timeout,
        course_cell_timeout=args.course_cell_timeout,
        notebook_timeout=args.timeout,
        env=env,
        sandbox=use_sandbox,
        keep=args.keep,
        sanitize=course.sanitize,
    )

    # 3. Build every graded notebook (still no student code run).
    results: list[report.Result] = []
    jobs: list[tuple[report.Result, extract.GradedNotebook]] = []
    for sub in subs:
        nb = course.notebooks.get(sub.notebook)
        result = report.Result(
            student=sub.student,
            notebook=sub.notebook or sub.path.name,
            status="invalid",
            exercises=[],
            passed=0,
            total=len(nb.exercises) if nb else 0,
            source=_display(sub.path),
            notes=list(sub.notes),
        )
        results.append(result)
        if sub.error or nb is None:
            result.notes.insert(0, sub.error or "no matching course notebook")
            if nb is not None:
                result.exercises = [
                    {
                        "id": ex.id,
                        "status": "missing",
                        "message": f"Not graded: {sub.error or 'the notebook could not be read'}.",
                    }
                    for ex in nb.exercises
                ]
            continue
        answers = extract.find_answers(sub, nb)
        result.notes += [f"answer to {line}" for line in extract.describe(answers, sub)]
        if not nb.exercises:
            result.status = "graded"
            continue
        jobs.append((result, extract.build(nb, answers)))

    # 4. Run them, in parallel, each in its own folder and process.
    work_root = Path(tempfile.mkdtemp(prefix="course-grade-", dir=args.workdir)).resolve()
    os.chmod(work_root, 0o700)
    run_cells: dict[int, dict[int, dict]] = {}
    grader_errors = 0
    started = time.monotonic()
    _say(
        f"grading {len(jobs)} notebook(s) of {len({s.student for s in subs})} student(s) "
        f"with {args.jobs} job(s) ({len(results) - len(jobs)} not runnable)",
        args.quiet,
    )

    def grade_one(result: report.Result, graded: extract.GradedNotebook) -> runner.RunResult:
        outcome = runner.run(graded, result.notebook, work_root, options)
        if outcome.setup_error and not outcome.cells:  # a kernel that failed to start: once more
            outcome = runner.run(graded, result.notebook, work_root, options)
        return outcome

    done = 0
    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(grade_one, r, g): (r, g) for r, g in jobs}
            for future in as_completed(futures):
                result, graded = futures[future]
                try:
                    outcome = future.result()
                    status, exercises, notes = verdict.exercise_results(graded, outcome, options)
                except Exception as error:  # the grader's own bug: this submission only
                    outcome = None
                    status, notes = (
                        "error",
                        [f"the grader failed on this submission: {type(error).__name__}: {error}"],
                    )
                    exercises = [
                        {"id": ex.id, "status": "error", "message": f"Not graded: {notes[0]}."}
                        for ex in graded.exercises
                    ]
                result.status, result.exercises = status, exercises
                result.notes = notes + result.notes
                result.passed = sum(e["status"] == "passed" for e in exercises)
                result.graded_notebook = graded.notebook
                if outcome is not None:
                    result.seconds = outcome.seconds
                    run_cells[id(result)] = outcome.cells
                    if not outcome.started and not outcome.notebook_timed_out:
                        grader_errors += 1
                done += 1
                _say(
                    f"[{done}/{len(jobs)}] {result.student} · {result.notebook}: {result.status}, "
                    f"{result.passed}/{result.total} passed"
                    + (f" ({result.seconds:.0f} s)" if result.seconds is not None else ""),
                    args.quiet,
                )
    except KeyboardInterrupt:
        runner.stop_all()
        print("grade: interrupted; no report written.", file=sys.stderr)
        return 130
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(work_root, ignore_errors=True)
        else:
            _say(f"run folders kept in {work_root}", args.quiet)

    # 5. Were the submissions left alone?
    changed = []
    for sub in subs:
        try:
            now = hashlib.sha256(sub.path.read_bytes()).hexdigest() if sub.digest else ""
        except OSError:
            now = "gone"
        if sub.digest and now != sub.digest:
            changed.append(_display(sub.path))

    # 6. The report.
    results.sort(key=lambda r: (r.notebook, r.student.lower()))
    counts = {s: sum(r.status == s for r in results) for s in verdict.NOTEBOOK_STATUSES}
    limits = (
        f"timeouts {args.cell_timeout:g} s per exercise or check cell, {args.course_cell_timeout:g} s "
        f"per course cell, {args.timeout:g} s per notebook; sandbox "
        + ("on." if use_sandbox else f"off ({why}).")
    )
    header = report.header(results, counts, env, limits, course.problems, changed)
    if changed:
        print(
            "grade: WARNING: submissions changed on disk during grading: " + ", ".join(changed),
            file=sys.stderr,
        )
    exercise_ids = {name: nb.exercise_ids() for name, nb in course.notebooks.items()}
    try:
        report.write_all(results, out, header, exercise_ids, run_cells)
    except OSError as error:
        print(f"grade: cannot write the report to {args.out}: {error}", file=sys.stderr)
        return EXIT_GRADER
    total_passed = sum(r.passed for r in results)
    total = sum(r.total for r in results)
    print(
        f"graded {len(results)} submission(s) in {time.monotonic() - started:.0f} s: "
        + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f"; {total_passed}/{total} exercises passed. Report: {_display(out / 'report.md')}",
        file=sys.stderr,
    )
    if jobs and grader_errors == len(jobs):
        print(
            "grade: no grading run could start: the grader itself is not working here "
            "(see the notes in the report).",
            file=sys.stderr,
        )
        return EXIT_GRADER
    return EXIT_OK
