"""Graders: the command, ``python -m course_tools.grade SUBMISSION... --out DIR`` (or ``course_utils.grade``).

Three more commands share the entry point: ``python -m course_tools.grade gradescope NOTEBOOK --out
autograder.zip`` writes a Gradescope autograder (:mod:`.gradescope`), ``python -m course_tools.grade
merge DIR... --out DIR`` combines the shards of a class graded with ``--shard K/N``
(:mod:`.shards`), and ``python -m course_tools.grade throughput`` measures the grader
(:mod:`.throughput`).

Exit status: 0 when the class was graded (whatever the students scored); 2 when the command
line or the course folder is wrong; 3 when the grader itself could not work (no run could even
start, the sandbox was required and is unavailable, the report could not be written).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Optional

from . import course as course_mod
from . import engine, report, runner, sandbox, shards, submissions

EXIT_OK, EXIT_USAGE, EXIT_GRADER = 0, 2, 3


def default_jobs() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.grade",
        description="Grade submitted notebooks of the course: run each student's exercise code "
        "inside the canonical notebook with the canonical checks, and write a report.",
        epilog="Also: `python -m course_tools.grade gradescope NOTEBOOK --out autograder.zip` writes a "
        "Gradescope autograder; `python -m course_tools.grade merge DIR... --out DIR` combines the "
        "reports of shards graded with --shard K/N (see docs/grading.md).",
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
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only the K-th of N slices of the class (a batch system's array task); "
        "combine the shards' reports with `python -m course_tools.grade merge`",
    )
    parser.add_argument(
        "--whole-notebook",
        action="store_true",
        help="run every course cell before the last check, not only the cells the checks and "
        "answers depend on (slower; the verdicts are the same)",
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "merge":
        return shards.merge_main(argv[1:])
    if argv and argv[0] == "gradescope":
        from . import gradescope

        return gradescope.main(argv[1:])
    if argv and argv[0] == "throughput":
        from . import throughput

        return throughput.main(argv[1:])
    args = build_parser().parse_args(argv)
    from course_utils.config import ConfigError, parse_kind

    try:
        strategy = parse_kind(args.strategy)
    except ConfigError as error:
        print(f"grade: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs < 1 or min(args.cell_timeout, args.course_cell_timeout, args.timeout) <= 0:
        print("grade: -j and the timeouts must be positive.", file=sys.stderr)
        return EXIT_USAGE
    shard: Optional[tuple[int, int]] = None
    if args.shard:
        try:
            shard = shards.parse(args.shard)
        except shards.ShardError as error:
            print(f"grade: {error}", file=sys.stderr)
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
    shard_info = None
    if shard is not None:
        subs, shard_info = shards.select(subs, *shard)
        _say(
            f"shard {shard[0]}/{shard[1]}: {len(subs)} of the class's {shard_info['class_size']} submission(s)",
            args.quiet,
        )
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

    env = engine.run_env(strategy, full=args.full, online=args.online, replicas=args.replicas)
    options = runner.RunOptions(
        cell_timeout=args.cell_timeout,
        course_cell_timeout=args.course_cell_timeout,
        notebook_timeout=args.timeout,
        env=env,
        sandbox=use_sandbox,
        keep=args.keep,
        sanitize=course.sanitize,
        whole_notebook=args.whole_notebook,
    )

    # 3. Build the graded notebooks and run them, in parallel, each in its own folder and process.
    started = time.monotonic()
    try:
        graded = engine.grade(
            subs, course, options, jobs=args.jobs, workdir=args.workdir, say=lambda t: _say(t, args.quiet)
        )
    except KeyboardInterrupt:
        print("grade: interrupted; no report written.", file=sys.stderr)
        return 130

    # 4. Were the submissions left alone?
    changed = []
    for sub in subs:
        try:
            now = hashlib.sha256(sub.path.read_bytes()).hexdigest() if sub.digest else ""
        except OSError:
            now = "gone"
        if sub.digest and now != sub.digest:
            changed.append(_display(sub.path))

    # 5. The report.
    results = sorted(graded.results, key=lambda r: (r.notebook, r.student.lower()))
    limits = (
        f"timeouts {args.cell_timeout:g} s per exercise or check cell, {args.course_cell_timeout:g} s "
        f"per course cell, {args.timeout:g} s per notebook; sandbox "
        + ("on." if use_sandbox else f"off ({why}).")
    )
    run = {
        "env": env,
        "limits": limits,
        "skipped": list(course.problems),
        "changed": changed,
        "notes": [],
        "shard": shard_info,
    }
    if changed:
        print(
            "grade: WARNING: submissions changed on disk during grading: " + ", ".join(changed),
            file=sys.stderr,
        )
    worth = {name: nb.points() for name, nb in course.notebooks.items()}
    try:
        results = report.write_all(results, out, report.header(results, run), worth, run)
    except OSError as error:
        print(f"grade: cannot write the report to {args.out}: {error}", file=sys.stderr)
        return EXIT_GRADER
    counts = report.counts(results)
    total_passed = sum(r.passed for r in results)
    total = sum(r.total for r in results)
    print(
        f"graded {len(results)} submission(s) in {time.monotonic() - started:.0f} s: "
        + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f"; {total_passed}/{total} exercises passed. Report: {_display(out / 'report.md')}",
        file=sys.stderr,
    )
    if graded.runs and graded.grader_errors == graded.runs:
        print(
            "grade: no grading run could start: the grader itself is not working here "
            "(see the notes in the report).",
            file=sys.stderr,
        )
        return EXIT_GRADER
    return EXIT_OK
