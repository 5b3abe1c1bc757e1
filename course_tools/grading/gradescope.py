"""Instructors on Gradescope: the autograder of one course notebook (the zip, and its entry point).

``python -m course_tools.grade gradescope NOTEBOOK --out autograder.zip`` writes the zip to
upload as a Gradescope "programming assignment" autograder. At its root:

* ``setup.sh``: run once by Gradescope when it builds the autograder's image (as root, on its
  Ubuntu base image): a virtual environment in ``/autograder/venv`` with ``requirements.txt``;
* ``run_autograder``: run for every submission: it grades the notebook found in
  ``/autograder/submission`` with the local grader's engine (the canonical master, the student's
  code re-injected, the course's checks, per-cell and notebook timeouts) and writes
  ``/autograder/results/results.json``;
* ``config.json`` (the notebook and the run settings), ``requirements.txt`` (the pinned stack,
  without the tools only authors need), and ``course/``: the source of both packages,
  ``course_utils`` (what the notebook imports) and ``course_tools`` (this grader), the master of
  that notebook and the sanitizer configuration.

``/autograder`` can be moved with the environment variable ``COURSE_AUTOGRADER_ROOT`` (the tests
run the autograder in a temporary folder); ``COURSE_AUTOGRADER_PYTHON`` names the Python that
``run_autograder`` uses instead of ``/autograder/venv/bin/python``.

In the container, ``python -m course_tools.grading.gradescope`` is the entry point of
``run_autograder``. A submission that cannot be graded (no notebook in it, a file that is not a
notebook, a kernel that would not start) gets score 0 with the reason shown to the student, never a
silent zero; if even Python cannot start, ``run_autograder`` writes that failure itself.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Optional

from .records import ExerciseResult, Result, Status, number

ROOT_ENV = "COURSE_AUTOGRADER_ROOT"
PYTHON_ENV = "COURSE_AUTOGRADER_PYTHON"
DEFAULT_ROOT = "/autograder"
#: Requirements only authors need (a browser driver, the linter, the JupyterLab app).
AUTHOR_ONLY = {"playwright", "ruff", "jupyterlab"}
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
#: A Gradescope test passes or fails: ours passes when the exercise passed, else it fails (and its
#: output starts with our status).
TEST_STATUSES = (Status.PASSED, Status.FAILED)

#: results.json as this autograder writes it (a subset of Gradescope's format, every field it uses).
RESULTS_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["score", "execution_time", "output", "tests"],
    "properties": {
        "score": {"type": "number", "minimum": 0},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string", "minLength": 1},
        "visibility": {"enum": list(VISIBILITIES)},
        "stdout_visibility": {"enum": list(VISIBILITIES)},
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "number", "score", "max_score", "status", "output", "visibility"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "number": {"type": "string", "minLength": 1},
                    "score": {"type": "number", "minimum": 0},
                    "max_score": {"type": "number", "minimum": 0},
                    "status": {"enum": [str(s) for s in TEST_STATUSES]},
                    "output": {"type": "string"},
                    "visibility": {"enum": list(VISIBILITIES)},
                    "extra_data": {"type": "object"},
                },
            },
        },
    },
}

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: a virtual environment
# with the course's pinned stack. Choose the Ubuntu 24.04 base image (Python 3.12): the stack needs
# Python 3.11 or later. The course package itself is not installed: run_autograder puts course/
# on PYTHONPATH, so the code that grades is exactly the code in this zip.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${COURSE_AUTOGRADER_ROOT:-/autograder}"
if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y --no-install-recommends python3 python3-venv python3-pip
fi
PYTHON=""
for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        PYTHON="$candidate"
        break
    fi
done
if [ -z "$PYTHON" ]; then
    echo "setup.sh: the course needs Python 3.11 or later; pick Gradescope's Ubuntu 24.04 base image." >&2
    exit 1
fi
"$PYTHON" -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install --no-cache-dir --upgrade pip
"$ROOT/venv/bin/python" -m pip install --no-cache-dir -r "$HERE/requirements.txt"
# Fail the build now, not at the first submission, if anything the grader imports is missing.
PYTHONPATH="$HERE/course" "$ROOT/venv/bin/python" -c \\
    "import nbval, ipykernel, tensorflow, course_utils, course_tools.grading.gradescope"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission (from /autograder): it grades the notebook in
# /autograder/submission with the course's grader and writes /autograder/results/results.json.
# COURSE_AUTOGRADER_ROOT moves /autograder (the course's tests use a temporary folder);
# COURSE_AUTOGRADER_PYTHON replaces /autograder/venv/bin/python.
set -u
ROOT="${COURSE_AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
PYTHON="${COURSE_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
COURSE_AUTOGRADER_ROOT="$ROOT" PYTHONPATH="$SOURCE/course" \\
    "$PYTHON" -m course_tools.grading.gradescope --root "$ROOT"
status=$?
if [ ! -s "$RESULTS" ]; then
    # Python itself could not run: say so to the student rather than give a silent zero.
    cat >"$RESULTS" <<EOF
{"score": 0, "execution_time": 0, "visibility": "visible",
 "output": "The autograder could not run (exit status $status), so this submission was not graded. This is not a problem with your notebook: tell your instructor.",
 "tests": [{"name": "autograder", "number": "0", "score": 0, "max_score": 0, "status": "failed",
            "output": "The autograder could not run (exit status $status).", "visibility": "visible"}]}
EOF
fi
exit 0
"""


class AutograderError(Exception):
    """The autograder cannot grade this submission (the message is shown to the student)."""


# --------------------------------------------------------------------------- building the zip


def grading_requirements(root: Path) -> str:
    """The course's requirements.txt without the tools only authors need."""
    path = root / "requirements.txt"
    if not path.is_file():
        return "nbformat\nnbclient\nnbval\npytest\nipykernel\nnumpy\nmatplotlib\npsutil\ntensorflow\n"
    kept = []
    for line in path.read_text().splitlines():
        name = re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower()
        if line.strip() and not line.lstrip().startswith("#") and name in AUTHOR_ONLY:
            continue
        kept.append(line)
    return "\n".join(kept).rstrip() + "\n"


def package_dirs() -> dict[str, Path]:
    """The packages the zip ships under ``course/``, by name: the notebooks' helpers and the grader."""
    import course_utils

    return {
        "course_utils": Path(course_utils.__file__).resolve().parent,
        "course_tools": Path(__file__).resolve().parents[1],
    }


def _package_files(package: Path) -> list[Path]:
    return sorted(
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".pyc", ".pyo"}
    )


def resolve_notebook(name: str, notebooks: list[str]) -> str:
    """A course notebook from a name, a number prefix (``00``) or a path to its master."""
    stem = Path(name).name.removesuffix(".ipynb")
    if stem in notebooks:
        return stem
    matches = [n for n in notebooks if n.startswith(stem)]
    if len(matches) == 1:
        return matches[0]
    raise ValueError(
        f"{name}: not one course notebook"
        + (f" (it could be {', '.join(matches)})" if matches else f" (there are {', '.join(notebooks)})")
    )


def build_zip(root: Path, notebook: str, out: Path, config: dict[str, Any]) -> list[str]:
    """Write the autograder zip for ``notebook`` of the course at ``root``; return its member names."""
    members: list[tuple[str, bytes, int]] = [
        ("setup.sh", SETUP_SH.encode(), 0o755),
        ("run_autograder", RUN_AUTOGRADER.encode(), 0o755),
        ("config.json", (json.dumps({"notebook": notebook, **config}, indent=2) + "\n").encode(), 0o644),
        ("requirements.txt", grading_requirements(root).encode(), 0o644),
    ]
    for name, package in package_dirs().items():
        for path in _package_files(package):
            members.append(
                (f"course/{name}/{path.relative_to(package).as_posix()}", path.read_bytes(), 0o644)
            )
    extra = {
        "course/pyproject.toml": root / "pyproject.toml",
        f"course/solutions/{notebook}.ipynb": root / "solutions" / f"{notebook}.ipynb",
        "course/tests/nbval_sanitize.cfg": root / "tests" / "nbval_sanitize.cfg",
    }
    for name, path in extra.items():
        if path.is_file():
            members.append((name, path.read_bytes(), 0o644))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buffer.getvalue())
    return [name for name, _, _ in members]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.grade gradescope",
        description="Write a Gradescope autograder (a zip with setup.sh and run_autograder) that grades "
        "one course notebook with this grader.",
    )
    parser.add_argument(
        "notebook", metavar="NOTEBOOK", help="the course notebook: its name, number or master"
    )
    parser.add_argument("--out", default="autograder.zip", metavar="FILE", help="default: autograder.zip")
    parser.add_argument("--course", metavar="DIR", help="the course folder (default: this checkout)")
    parser.add_argument(
        "--cell-timeout", type=float, default=120.0, metavar="S", help="per exercise or check cell (120)"
    )
    parser.add_argument(
        "--course-cell-timeout", type=float, default=300.0, metavar="S", help="per course cell (300)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=480.0,
        metavar="S",
        help="for the whole notebook (480: under Gradescope's default limit of 10 minutes; raise both together)",
    )
    parser.add_argument("--strategy", default="default", help="COURSE_STRATEGY of the runs (default)")
    parser.add_argument("--replicas", type=int, help="COURSE_REPLICAS of the runs (unset)")
    parser.add_argument(
        "--visibility",
        choices=VISIBILITIES,
        default="visible",
        help="when students see the results (default: visible, at once)",
    )
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m course_tools.grade gradescope NOTEBOOK --out FILE``."""
    from course_utils.config import ConfigError, parse_kind

    from . import course as course_mod
    from .engine import run_env

    args = build_parser().parse_args(argv)
    try:
        strategy = parse_kind(args.strategy)
        root = course_mod.find_course_root(args.course)
        course = course_mod.load_course(root)
        notebook = resolve_notebook(args.notebook, list(course.notebooks))
    except (ConfigError, course_mod.CourseNotFound, ValueError) as error:
        print(f"grade gradescope: {error}", file=sys.stderr)
        return 2
    if min(args.cell_timeout, args.course_cell_timeout, args.timeout) <= 0:
        print("grade gradescope: the timeouts must be positive.", file=sys.stderr)
        return 2
    if not course.notebooks[notebook].exercises:
        print(f"grade gradescope: {notebook} has no exercise to grade.", file=sys.stderr)
        return 2
    config = {
        "cell_timeout": args.cell_timeout,
        "course_cell_timeout": args.course_cell_timeout,
        "timeout": args.timeout,
        "env": run_env(strategy, replicas=args.replicas),
        "visibility": args.visibility,
    }
    out = Path(args.out).expanduser()
    try:
        members = build_zip(root, notebook, out, config)
    except OSError as error:
        print(f"grade gradescope: cannot write {args.out}: {error}", file=sys.stderr)
        return 3
    nb = course.notebooks[notebook]
    print(
        f"wrote {out} ({len(members)} files): the autograder of {notebook}, "
        f"{len(nb.exercises)} exercise(s) worth {sum(ex.points for ex in nb.exercises):g} point(s). "
        "Upload it as the assignment's autograder (Ubuntu 24.04 base image).",
        file=sys.stderr,
    )
    return 0


# --------------------------------------------------------------------------- inside the container


def failure(reason: str, exercises: Optional[list[tuple[str, float]]] = None, seconds: float = 0) -> dict:
    """results.json for a submission that could not be graded: score 0 and the reason, visible."""
    message = f"Not graded: {reason}"
    tests = [
        {
            "name": ident,
            "number": str(n),
            "score": 0,
            "max_score": number(points),
            "status": Status.FAILED,
            "output": message,
            "visibility": "visible",
        }
        for n, (ident, points) in enumerate(exercises or [], start=1)
    ] or [
        {
            "name": "autograder",
            "number": "0",
            "score": 0,
            "max_score": 0,
            "status": Status.FAILED,
            "output": message,
            "visibility": "visible",
        }
    ]
    return {
        "score": 0,
        "execution_time": round(seconds),
        "output": message,
        "visibility": "visible",
        "tests": tests,
    }


def _find_notebooks(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    skip = {".ipynb_checkpoints", "__MACOSX"}
    return sorted(
        p
        for p in folder.rglob("*.ipynb")
        if p.is_file()
        and not p.name.startswith(".")
        and not any(part.startswith(".") or part in skip for part in p.relative_to(folder).parts[:-1])
    )


def pick_submission(folder: Path, course: Any, notebook: str) -> tuple[Any, list[str]]:
    """The submission to grade among the notebooks in ``folder``, and notes for the student."""
    from . import submissions

    files = _find_notebooks(folder)
    if not files:
        raise AutograderError(
            "no .ipynb file was found in your submission. Upload the notebook itself "
            "(in Colab: File > Download > Download .ipynb)."
        )
    subs = []
    for path in files:
        sub = submissions.Submission("student", path, "file")
        submissions.read(sub)
        submissions.match(sub, course)
        subs.append(sub)
    matched = [s for s in subs if not s.error and s.notebook == notebook]
    readable = [s for s in subs if not s.error]
    notes = []
    if matched:
        # The file named after the notebook first, then the most recently written one.
        matched.sort(key=lambda s: (notebook not in s.path.name, -s.path.stat().st_mtime, s.path.name))
        chosen = matched[0]
    elif readable:
        chosen = readable[0]
        notes.append(f"{chosen.path.name} does not look like {notebook}; it was graded as {notebook} anyway.")
        chosen.error, chosen.notebook = "", notebook
    else:
        chosen = subs[0]
        chosen.notebook = notebook
    others = [s.path.name for s in subs if s is not chosen]
    if others:
        notes.append(f"Graded {chosen.path.name}; not graded: {', '.join(others)}.")
    return chosen, notes


def results_json(result: Result, course_nb: Any, seconds: float, notes: list[str], visibility: str) -> dict:
    """Gradescope's results.json for one graded submission."""
    tests = []
    found = {e.id: e for e in result.exercises}
    for n, ex in enumerate(course_nb.exercises, start=1):
        e = found.get(ex.id) or ExerciseResult(ex.id, Status.MISSING, "Not graded.")
        message = e.message.strip()
        if e.status not in TEST_STATUSES:
            message = f"({e.status}) {message}"
        tests.append(
            {
                "name": ex.id,
                "number": str(n),
                "score": number(e.points),
                "max_score": number(ex.points),
                "status": Status.PASSED if e.status is Status.PASSED else Status.FAILED,
                "output": message,
                "visibility": visibility,
                "extra_data": {"status": e.status},
            }
        )
    lines = [
        f"{course_nb.name}: {result.passed} of {result.total} exercises passed, "
        f"{number(result.points)} of {number(result.max_points)} points."
    ]
    if result.status is not Status.GRADED:
        lines.append(
            f"The notebook's status is {result.status}: "
            + (result.notes[0] if result.notes else "see each exercise.")
        )
    lines += notes
    return {
        "score": number(result.points),
        "execution_time": round(seconds),
        "output": "\n".join(lines),
        "visibility": visibility,
        "stdout_visibility": "hidden",
        "extra_data": {"notebook": course_nb.name, "notebook_status": result.status},
        "tests": tests,
    }


#: The memory a grading run of any course notebook fits in (measured: every master graded, all
#: passed, in a 1 GB cgroup; in 768 MB, Gradescope's default, 8 of the 12 lose their kernel or
#: the judge to the kernel's out-of-memory killer). docs/grading.md, section 5.
NEEDED_MB = 1024
#: Below this, the results say so (a "1 GB" setting may be 10**9 bytes: no note for that).
WARN_BELOW_MB = 900


def memory_limit_mb(
    cgroup: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")
) -> Optional[int]:
    """This process's memory limit in MB: the smallest ``memory.max`` (cgroup v2) or
    ``memory.limit_in_bytes`` (v1) of its own cgroup, as ``own`` names it, and of every cgroup
    above it up to the root (in a container, the root is its own); None when there is none or it
    cannot be read. Never raises."""
    try:
        folders: list[Path] = [cgroup, cgroup / "memory"]
        try:
            lines = own.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        for line in lines:
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            base = (
                cgroup if parts[1] == "" else cgroup / "memory" if "memory" in parts[1].split(",") else None
            )
            if base is None:
                continue
            where = [p for p in parts[2].split("/") if p and p != ".."]
            folders += [base.joinpath(*where[:n]) for n in range(1, len(where) + 1)]
        limits = []
        for folder in folders:
            for name in ("memory.max", "memory.limit_in_bytes"):
                try:
                    text = (folder / name).read_text().strip()
                except (OSError, UnicodeDecodeError, ValueError):
                    continue
                if text.isdigit() and int(text) < 1 << 50:
                    limits.append(int(text) // (1024 * 1024))
        return min(limits) if limits else None
    except Exception:
        return None


def memory_note(limit_mb: Optional[int]) -> list[str]:
    """A line for the results when the container has less memory than a grading run needs."""
    if limit_mb is None or limit_mb >= WARN_BELOW_MB:
        return []
    return [
        f"This autograder has {limit_mb} MB of memory; the course's grading needs {NEEDED_MB} MB (the "
        "notebook's kernel and the grader's judge each load TensorFlow or JAX), so a kernel may be "
        "killed and show as 'the kernel died'. Instructor: raise the memory in the assignment's "
        "Autograder Settings."
    ]


def grade_submission(root: Path) -> dict:
    """Grade ``ROOT/submission`` with the configuration in ``ROOT/source``; the results.json content."""
    from . import course as course_mod
    from . import engine, runner, sandbox

    started = time.monotonic()
    source = root / "source"
    config = json.loads((source / "config.json").read_text())
    notebook = str(config["notebook"])
    course = course_mod.load_course(source / "course")
    if notebook not in course.notebooks:
        raise AutograderError(
            f"the autograder holds no usable master of {notebook} ({'; '.join(course.problems)})"
        )
    course_nb = course.notebooks[notebook]
    exercises = [(ex.id, ex.points) for ex in course_nb.exercises]
    try:
        sub, notes = pick_submission(root / "submission", course, notebook)
    except AutograderError as error:
        return failure(str(error), exercises, time.monotonic() - started)
    notes += memory_note(memory_limit_mb())
    use_sandbox, _ = sandbox.available()
    options = runner.RunOptions(
        cell_timeout=float(config.get("cell_timeout", 120)),
        course_cell_timeout=float(config.get("course_cell_timeout", 300)),
        notebook_timeout=float(config.get("timeout", 480)),
        env=dict(config.get("env", {})),
        sandbox=use_sandbox,
        sanitize=course.sanitize,
    )
    graded = engine.grade([sub], course, options, jobs=1, say=lambda text: print(text, flush=True))
    result = graded.results[0]
    if graded.runs and graded.grader_errors:
        reason = result.notes[0] if result.notes else "the grading run did not start"
        return failure(
            f"the autograder could not run your notebook ({reason}). This is not a problem with your "
            "code: tell your instructor.",
            exercises,
            time.monotonic() - started,
        )
    visibility = str(config.get("visibility", "visible"))
    return results_json(result, course_nb, time.monotonic() - started, notes, visibility)


def write_results(root: Path, results: dict) -> Path:
    path = root / "results" / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def autograder_main(argv: Optional[list[str]] = None) -> int:
    """The entry point of ``run_autograder``: always writes results.json, whatever happens."""
    parser = argparse.ArgumentParser(prog="python -m course_tools.grading.gradescope")
    parser.add_argument("--root", default=os.environ.get(ROOT_ENV, DEFAULT_ROOT))
    args = parser.parse_args(argv)
    root = Path(args.root)
    started = time.monotonic()
    try:
        results = grade_submission(root)
    except AutograderError as error:
        results = failure(str(error), seconds=time.monotonic() - started)
    except Exception as error:  # the autograder's own failure: still a visible result
        import traceback

        traceback.print_exc()
        results = failure(
            f"the autograder failed ({type(error).__name__}: {error}). This is not a problem with your "
            "code: tell your instructor.",
            seconds=time.monotonic() - started,
        )
    path = write_results(root, results)
    print(f"wrote {path}: score {results['score']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(autograder_main())
