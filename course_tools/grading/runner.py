"""Graders (inside the engine): one grading run, a graded notebook through pytest + nbval, isolated.

Each run gets a fresh folder of its own (its current directory, ``HOME`` and ``TMPDIR``), a
process of its own (a new session, plus new namespaces when the sandbox is on) and an
environment built from scratch (the grader's own variables are not passed on). What the run
reports comes back through a pipe, cell by cell (:mod:`.protocol`), and is read into one frozen
:class:`RunResult` when the run is over; :mod:`.verdict` turns it into one status per exercise.
The run sees both packages, ``course_utils`` (what the notebook imports) and ``course_tools`` (the
plugin, the sandbox), on its ``PYTHONPATH``.
"""

from __future__ import annotations

import copy
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
from typing import Any, Mapping, Optional

import course_utils
from course_utils.processes import PeakMemory

from . import protocol, sandbox
from .extract import GradedNotebook

#: Variables of the grader's environment that a run may see; nothing else is passed on.
PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES", "SYSTEMROOT")


@dataclass(frozen=True)
class RunOptions:
    cell_timeout: float = 120.0
    course_cell_timeout: float = 600.0
    notebook_timeout: float = 1200.0
    kernel_startup_timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    sandbox: bool = False
    keep: bool = False
    sanitize: str = ""
    #: Run every course cell before the last check, not only the checks' context.
    whole_notebook: bool = False


@dataclass(frozen=True)
class RunResult:
    """What one run said (:func:`read`) and how it ended."""

    #: Code-cell number -> its record, in the order the cells ran.
    cells: Mapping[int, protocol.CellRecord] = field(default_factory=dict)
    started: bool = False
    done: bool = False
    setup_error: str = ""
    notebook_timed_out: bool = False
    returncode: Optional[int] = None
    log: str = ""
    seconds: float = 0.0
    workdir: Optional[Path] = None
    #: Peak resident memory, sampled: the notebook's kernel with its children, and the whole run
    #: (pytest, nbval and the kernel).
    kernel_peak_bytes: int = 0
    run_peak_bytes: int = 0


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


def package_path() -> str:
    """``PYTHONPATH`` of a run: the folders holding ``course_utils`` and ``course_tools`` (one, in a
    checkout or the Gradescope zip; two when they were installed apart)."""
    folders = [Path(course_utils.__file__).resolve().parents[1], Path(__file__).resolve().parents[2]]
    return os.pathsep.join(dict.fromkeys(str(f) for f in folders))


def run_environment(work: Path, options: RunOptions, token: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    home, tmp = work / "home", work / "tmp"
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        TMP=str(tmp),
        TEMP=str(tmp),
        COURSE_SCRATCH=str(work / "scratch"),
        KERAS_HOME=str(home / ".keras"),
        MPLBACKEND="Agg",
        MPLCONFIGDIR=str(home / ".config" / "matplotlib"),
        IPYTHONDIR=str(home / ".ipython"),
        JUPYTER_RUNTIME_DIR=str(home / ".jupyter-runtime"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONPATH=package_path(),
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
        sys.executable,
        "-m",
        "pytest",
        notebook,
        "-c",
        "pytest.ini",
        "--rootdir",
        ".",
        "--noconftest",
        "-p",
        "no:cacheprovider",
        "-p",
        "nbval.plugin",
        "-p",
        "course_tools.grading.plugin",
        "-q",
        "--tb=short",
        "-W",
        "ignore::DeprecationWarning",
        "--nbval-lax",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        "nbval_sanitize.cfg",
        "--nbval-cell-timeout",
        f"{options.course_cell_timeout:g}",
        "--nbval-kernel-startup-timeout",
        f"{options.kernel_startup_timeout:g}",
        "--grade-fd",
        str(fd),
        "--grade-student-cells",
        ",".join(map(str, student_cells)),
        "--grade-cell-timeout",
        f"{options.cell_timeout:g}",
    ]


def _kill_leftovers(token: str) -> None:
    """Kill the processes of one run that outlived it (they carry its COURSE_GRADE_RUN token)."""
    from course_utils.processes import processes_marked

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
    start = time.monotonic()
    lines: list[bytes] = []
    timed_out = False

    def reader() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                lines.append(line)

    thread = threading.Thread(target=reader, daemon=True)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=work,
                env=run_environment(work, options, token),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        finally:
            os.close(write_end)
        with _active_lock:
            _active.add(proc)
        peak = PeakMemory(proc.pid, part="ipykernel_launcher").start()
        thread.start()
        try:
            returncode = proc.wait(timeout=options.notebook_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            returncode = proc.wait()
        finally:
            with _active_lock:
                _active.discard(proc)
    _kill_leftovers(token)
    thread.join(timeout=10)
    peak.stop()
    seconds = time.monotonic() - start
    try:
        text = log_path.read_text(errors="replace")[-6000:]
    except OSError:
        text = ""
    if not options.keep:
        shutil.rmtree(work, ignore_errors=True)
        log_path.unlink(missing_ok=True)
    return read(
        lines,
        notebook_timed_out=timed_out,
        returncode=returncode,
        log=text,
        seconds=seconds,
        workdir=work,
        kernel_peak_bytes=peak.part_bytes,
        run_peak_bytes=peak.bytes,
    )


def read(lines: list[bytes], **how_it_ended: Any) -> RunResult:
    """The run's result: what its records said (``lines``, from the pipe) and ``how_it_ended``."""
    records = [r for r in map(protocol.decode, lines) if r is not None]
    events = [r.get("event") for r in records]
    setup_errors = [str(r.get("message", "")) for r in records if r.get("event") == protocol.SETUP_ERROR]
    cells: dict[int, protocol.CellRecord] = {}
    for record in records:
        if record.get("event") == protocol.CELL and (cell := protocol.CellRecord.from_wire(record)):
            cells[cell.cell] = cell
    return RunResult(
        cells=cells,
        started=protocol.START in events,
        done=protocol.DONE in events,
        setup_error=setup_errors[-1] if setup_errors else "",
        **how_it_ended,
    )


def with_outputs(notebook: Any, cells: Mapping[int, protocol.CellRecord]) -> Any:
    """A copy of a graded notebook with the outputs its run gave each code cell (for graded/)."""
    import nbformat

    nb = copy.deepcopy(notebook)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code_cells):
        record = cells.get(number)
        if record is None:
            continue
        outputs = []
        for output in record.outputs:
            try:
                outputs.append(nbformat.from_dict(output))
            except Exception:
                continue
        cell.outputs = outputs
    return nb
