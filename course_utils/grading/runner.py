"""One grading run: a graded notebook through pytest + nbval, isolated, with timeouts.

Each run gets a fresh folder of its own (its current directory, ``HOME`` and ``TMPDIR``), a
process of its own (a new session, plus new namespaces when the sandbox is on) and an
environment built from scratch (the grader's own variables are not passed on). What the run
reports comes back through a pipe, cell by cell; :func:`exercise_results` turns it into one
status per exercise.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import sandbox
from .extract import GradedNotebook

#: Variables of the grader's environment that a run may see; nothing else is passed on.
PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES", "SYSTEMROOT")


@dataclass
class RunOptions:
    cell_timeout: float = 120.0
    course_cell_timeout: float = 600.0
    notebook_timeout: float = 1200.0
    kernel_startup_timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    sandbox: bool = False
    keep: bool = False
    sanitize: str = ""


@dataclass
class RunResult:
    cells: dict[int, dict[str, Any]] = field(default_factory=dict)
    started: bool = False
    done: bool = False
    setup_error: str = ""
    notebook_timed_out: bool = False
    returncode: Optional[int] = None
    log: str = ""
    seconds: float = 0.0
    workdir: Optional[Path] = None


_active: set[subprocess.Popen] = set()
_active_lock = threading.Lock()


def stop_all() -> None:
    """Kill every run still going (the grader was interrupted)."""
    with _active_lock:
        for proc in list(_active):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass


def _package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])


def run_environment(work: Path, options: RunOptions, token: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    home, tmp = work / "home", work / "tmp"
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp),
        COURSE_SCRATCH=str(work / "scratch"),
        KERAS_HOME=str(home / ".keras"),
        MPLBACKEND="Agg",
        MPLCONFIGDIR=str(home / ".config" / "matplotlib"),
        IPYTHONDIR=str(home / ".ipython"),
        JUPYTER_RUNTIME_DIR=str(home / ".jupyter-runtime"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONPATH=_package_parent(),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        COURSE_GRADE_RUN=token,
    )
    env.update(options.env)
    return env


def pytest_command(notebook: str, graded: GradedNotebook, options: RunOptions, fd: int) -> list[str]:
    student_cells = sorted({c for ex in graded.exercises for c in (ex.solution, ex.check)})
    return [
        sys.executable, "-m", "pytest", notebook,
        "-c", "pytest.ini", "--rootdir", ".", "--noconftest",
        "-p", "no:cacheprovider", "-p", "nbval.plugin", "-p", "course_utils.grading.plugin",
        "-q", "--tb=short", "-W", "ignore::DeprecationWarning",
        "--nbval-lax", "--nbval-current-env",
        "--nbval-sanitize-with", "nbval_sanitize.cfg",
        "--nbval-cell-timeout", f"{options.course_cell_timeout:g}",
        "--nbval-kernel-startup-timeout", f"{options.kernel_startup_timeout:g}",
        "--grade-fd", str(fd),
        "--grade-student-cells", ",".join(map(str, student_cells)),
        "--grade-cell-timeout", f"{options.cell_timeout:g}",
    ]


def _kill_leftovers(token: str) -> None:
    """Kill the processes of one run that outlived it (they carry its COURSE_GRADE_RUN token)."""
    from ..processes import processes_marked

    for pid in processes_marked("COURSE_GRADE_RUN", token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def run(graded: GradedNotebook, name: str, work_root: Path, options: RunOptions) -> RunResult:
    """Run one graded notebook in a new folder under ``work_root`` (deleted afterwards)."""
    import nbformat

    work = Path(tempfile.mkdtemp(prefix="run-", dir=work_root)).resolve()
    for sub in ("home", "tmp", "scratch"):
        (work / sub).mkdir()
    notebook = f"{name}.ipynb"
    (work / notebook).write_text(nbformat.writes(graded.notebook))
    (work / "pytest.ini").write_text("[pytest]\n")
    (work / "nbval_sanitize.cfg").write_text(options.sanitize)
    log_path = work_root / f"{work.name}.log"
    token = secrets.token_hex(8)
    read_end, write_end = os.pipe()
    argv = pytest_command(notebook, graded, options, write_end)
    if options.sandbox:
        argv = sandbox.command(work, argv)
    result = RunResult(workdir=work)
    start = time.monotonic()
    lines: list[bytes] = []

    def reader() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                lines.append(line)

    thread = threading.Thread(target=reader, daemon=True)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                argv, cwd=work, env=run_environment(work, options, token),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(write_end,), start_new_session=True,
            )
        finally:
            os.close(write_end)
        with _active_lock:
            _active.add(proc)
        thread.start()
        try:
            result.returncode = proc.wait(timeout=options.notebook_timeout)
        except subprocess.TimeoutExpired:
            result.notebook_timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            result.returncode = proc.wait()
        finally:
            with _active_lock:
                _active.discard(proc)
    _kill_leftovers(token)
    thread.join(timeout=10)
    result.seconds = time.monotonic() - start
    for raw in lines:
        try:
            record = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        event = record.get("event")
        if event == "start":
            result.started = True
        elif event == "done":
            result.done = True
        elif event == "setup-error":
            result.setup_error = str(record.get("message", ""))
        elif event == "cell" and isinstance(record.get("cell"), int):
            result.cells[record["cell"]] = record
    try:
        result.log = log_path.read_text(errors="replace")[-6000:]
    except OSError:
        result.log = ""
    if not options.keep:
        shutil.rmtree(work, ignore_errors=True)
        log_path.unlink(missing_ok=True)
    return result


# --------------------------------------------------------------------------- exercise statuses


def _stdout(record: Optional[dict[str, Any]]) -> str:
    if not record:
        return ""
    return "".join(o.get("text", "") for o in record.get("outputs", []) if o.get("output_type") == "stream")


def _pass_line(text: str, ident: str) -> Optional[str]:
    for line in text.splitlines():
        if line.startswith(f"[pass] {ident}"):
            return line[len(f"[pass] {ident}"):].lstrip(": ").strip()
    return None


def _exception(record: dict[str, Any]) -> str:
    ename, evalue = record.get("ename") or "an exception", (record.get("evalue") or "").strip()
    return f"{ename}: {evalue}" if evalue else ename


def exercise_results(
    graded: GradedNotebook, result: RunResult, options: RunOptions
) -> tuple[str, list[dict[str, str]], list[str]]:
    """The notebook status, one ``{id, status, message}`` per exercise, and notes for the grader."""
    notes: list[str] = []
    stopped_after_timeout = any(
        r.get("result") == "timeout" and r.get("kernel_stopped") for r in result.cells.values()
    )
    died = [n for n, r in result.cells.items() if r.get("result") == "died"]
    grader_failed = ""
    if result.setup_error:
        grader_failed = f"the notebook's kernel did not start: {result.setup_error.strip().splitlines()[-1][:300]}"
    elif not result.started and not result.notebook_timed_out:
        tail = result.log.strip().splitlines()[-1:] or ["no output"]
        grader_failed = f"the grading run did not start (exit code {result.returncode}): {tail[0][:300]}"
    first_student = min((ex.solution for ex in graded.exercises), default=None)
    for number, record in sorted(result.cells.items()):
        if number in graded.student_cells or any(number == ex.check for ex in graded.exercises):
            continue
        if record.get("result") in ("error", "timeout", "died"):
            what = _exception(record) if record.get("result") == "error" else record.get("result")
            if first_student is not None and number < first_student and not grader_failed:
                grader_failed = f"{_where(graded, number)} failed before any student code ran: {what}"
            else:
                notes.append(f"{_where(graded, number)} (not an exercise) failed after the student's "
                             f"code ran: {what}")
    exercises = []
    for ex in graded.exercises:
        answer = graded.answers.get(ex.id)
        sol, chk = result.cells.get(ex.solution), result.cells.get(ex.check)
        states = {r.get("result") for r in (sol, chk) if r}
        if answer is None or answer.source is None:
            status, message = "missing", (
                f"No code for exercise {ex.id} was found in this notebook. Keep your answer in a "
                "code cell that defines " + ", ".join(f"`{n}`" for n in _names(graded, ex.id))
                + ", then hand the notebook in again."
            )
        elif grader_failed:
            status, message = "error", f"Not graded: {grader_failed}."
        elif "timeout" in states:
            record = sol if sol and sol.get("result") == "timeout" else chk
            seconds = float(record.get("timeout") or options.cell_timeout)
            where = "your exercise cell" if record is sol else "the check (which calls your code)"
            status, message = "timeout", (
                f"Exercise {ex.id}: {where} did not finish within {seconds:g} s and was stopped. "
                "Look for a loop that never ends or a step much slower than it should be."
            )
        elif "died" in states:
            status, message = "error", (
                f"Exercise {ex.id}: the Python kernel died while running your code (it crashed, "
                "ran out of memory or called exit). Run the notebook from the top and watch that cell."
            )
        elif sol is None or chk is None or "not-run" in states:
            if result.notebook_timed_out or stopped_after_timeout:
                status, message = "timeout", (
                    f"Exercise {ex.id} was not reached: the notebook ran out of time "
                    f"({options.notebook_timeout:g} s in all) or was stopped after an earlier timeout."
                )
            else:
                status, message = "error", (
                    f"Exercise {ex.id} was not reached: the kernel had stopped before it (an earlier "
                    "cell crashed it)."
                )
        elif sol.get("result") == "error":
            status, message = "error", (
                f"Exercise {ex.id}: your exercise cell raised {_exception(sol)}. Fix the cell so that "
                "it runs without an error, then run its check again."
            )
        elif chk.get("result") == "error" and chk.get("ename") == "ExerciseError":
            status, message = "failed", (chk.get("evalue") or "").strip()
        elif chk.get("result") == "error":
            status, message = "error", f"Exercise {ex.id}: the check could not run: {_exception(chk)}."
        elif chk.get("result") == "skipped":
            status, message = "error", f"Exercise {ex.id}: the check was skipped."
        else:
            line = _pass_line(_stdout(chk), ex.id)
            if line is None:
                status, message = "error", (
                    f"Exercise {ex.id}: the check ended without printing its [pass] line "
                    "(did your code redirect or silence the output?)."
                )
            else:
                status, message = "passed", line
        exercises.append({"id": ex.id, "status": status, "message": message})
    if grader_failed:
        notebook_status = "error"
        notes.insert(0, f"Not graded: {grader_failed}.")
    elif result.notebook_timed_out or stopped_after_timeout:
        notebook_status = "timeout"
        notes.insert(0, "The notebook did not run to the end: "
                     + ("it hit the notebook timeout." if result.notebook_timed_out
                        else "a cell could not be interrupted after its timeout, so the kernel was stopped."))
    elif died:
        notebook_status = "error"
        notes.insert(0, f"The kernel died in {_where(graded, died[0])}; later cells did not run.")
    else:
        notebook_status = "graded"
    return notebook_status, exercises, notes


def _where(graded: GradedNotebook, number: int) -> str:
    """A code cell of the graded notebook, as a grader would name it."""
    for ex in graded.exercises:
        if number == ex.solution:
            return f"the exercise cell of {ex.id}"
        if number == ex.check:
            return f"the check cell of {ex.id}"
    return f"code cell {number + 1} of the course"


def _names(graded: GradedNotebook, ident: str) -> list[str]:
    return list(graded.names.get(ident, ())) or [ident]
