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

import contextlib
import copy
import hashlib
import hmac
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
from typing import Any, Mapping, Optional

import course_utils
from course_utils.processes import PeakMemory

from . import judge, protocol, sandbox
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
    #: The judge's verdicts (:mod:`.judge`): exercise id -> ``(status, message)``.
    judged: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: The judged exercises whose verdicts rest on what the kernel reported (a harness, a recipe).
    observed: frozenset[str] = frozenset()
    #: Why the judge's verdicts cannot be used ("" when they can, or when nothing was judged).
    judge_failed: str = ""
    #: Why no grade of this run can be trusted ("" when it can): the course's packages changed.
    tampered: str = ""


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
        COURSE_JUDGE_SOCKET=str(work / judge.SOCKET),
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


#: PR_SET_CHILD_SUBREAPER of prctl(2): orphaned descendants are re-parented to this process.
_PR_SET_CHILD_SUBREAPER = 36
_reaping: list[bool] = []


def adopt_orphans() -> bool:
    """Make the grader the reaper of its descendants (Linux): a process a run leaves behind, even
    one that changed its session, double-forked or cleared its environment, becomes the grader's
    child when its parent exits, so :func:`end_orphans` can find it. False where it cannot."""
    if not _reaping:
        import ctypes

        try:
            ok = sys.platform == "linux" and ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            ok = False
        _reaping.append(ok)
    return _reaping[0]


def _children() -> list[int]:
    """The process ids whose parent is this process (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            found.append(int(entry))
    return found


def end_orphans() -> int:
    """Kill every child of the grader that is not a run or a judge in progress: what a run left
    behind (it was re-parented here, :func:`adopt_orphans`). How many there were."""
    if not (_reaping and _reaping[0]):
        return 0
    ended = 0
    for _ in range(5):  # an orphan's own children are re-parented here when it dies
        with _active_lock:
            ours = {proc.pid for proc in _active}
            strays = [pid for pid in _children() if pid not in ours]
            for pid in strays:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.waitpid(pid, os.WNOHANG)  # a zombie left now is reaped by the next sweep
        if not strays:
            break
        ended += len(strays)
    return ended


class JudgeProcess:
    """A judge (:mod:`.judge`): a fresh process, outside the sandbox, that never runs student code.
    It serves the grader's runs one after another (:class:`Judge`), so its TensorFlow starts once."""

    def __init__(self, work_root: Path, options: RunOptions) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="judge-", dir=work_root))
        for sub in ("home", "tmp"):
            (self.home / sub).mkdir()
        env = run_environment(self.home, options, "")
        env.pop("COURSE_GRADE_RUN", None)
        env["CUDA_VISIBLE_DEVICES"] = ""  # the references run on CPUs; a GPU stays the kernel's
        with _active_lock:  # a child that is not in _active would be taken for an orphan
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "course_tools.grading.judge"],
                cwd=self.home,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            _active.add(self.proc)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()

    def close(self, *, kill: bool = False) -> None:
        """End the judge: its stdin closed (it ends by itself), or killed."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=0 if kill else 30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with _active_lock:
            _active.discard(self.proc)
        shutil.rmtree(self.home, ignore_errors=True)


#: Judges between two runs, by the folder and settings they were started with.
_idle_judges: dict[str, list[JudgeProcess]] = {}
_judges_lock = threading.Lock()


def _judge_for(work_root: Path, options: RunOptions) -> JudgeProcess:
    """An idle judge started with these settings, else a new one."""
    with _judges_lock:
        idle = _idle_judges.get(_judge_key(work_root, options), [])
        while idle:
            process = idle.pop()
            if process.proc.poll() is None:
                return process
            process.close(kill=True)
    return JudgeProcess(work_root, options)


def _judge_key(work_root: Path, options: RunOptions) -> str:
    return json.dumps([str(work_root), options.env], sort_keys=True)


def close_judges() -> None:
    """End every idle judge (the grader is done)."""
    with _judges_lock:
        idle = [p for processes in _idle_judges.values() for p in processes]
        _idle_judges.clear()
    for process in idle:
        process.close()


class Judge:
    """The judge of one run: a :class:`JudgeProcess`, idle or new, given this run's job (its socket,
    ``judge.sock`` in the run's folder, its exercises and a key of its own) before the notebook starts."""

    def __init__(self, work: Path, graded: GradedNotebook, options: RunOptions) -> None:
        self.key = secrets.token_bytes(32)
        self.records: list[dict[str, Any]] = []
        self.settings = (work.parent, options)
        self.process = _judge_for(work.parent, options)
        self.process.send(
            {
                "socket": str(work / judge.SOCKET),
                "exercises": graded.judged,
                "timeout": options.cell_timeout + 30,
                "seed": secrets.randbits(32),
                "key": self.key.hex(),
            }
        )
        self.listening = self._next() is not None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _next(self) -> Optional[dict[str, Any]]:
        """The next record that verifies under this run's key (lines that do not are skipped)."""
        stdout = self.process.proc.stdout
        assert stdout is not None
        while line := stdout.readline():
            try:
                signed = json.loads(line)
                record, tag = signed["record"], str(signed["mac"])
            except (ValueError, TypeError, KeyError):
                continue
            if isinstance(record, dict) and hmac.compare_digest(
                tag, judge.mac(self.key, json.dumps(record, sort_keys=True))
            ):
                return record
        return None

    def _read(self) -> None:
        """Records until this run's end record (the judge then waits for its next run) or EOF."""
        while (record := self._next()) is not None:
            self.records.append(record)
            if record.get("end"):
                return

    def watch(self, run_pid: int) -> None:
        """Tell the judge which process runs the notebook: only its descendants are answered."""
        self.process.send({"run": run_pid})

    def finish(self) -> tuple[dict[str, tuple[str, str]], str, frozenset[str]]:
        """Tell the judge the run is over and wait for its end record: its verdicts (the first for
        each exercise), why exercises without one were not judged ("" when it ended normally), and
        the exercises whose verdicts rest on what the kernel reported it saw (``observed``).
        A judge that ended normally waits for the next run; one that did not is ended."""
        self.process.send({"end": True})
        self.thread.join(timeout=30)
        ended = not self.thread.is_alive() and any(r.get("end") for r in self.records)
        if ended and self.process.proc.poll() is None:
            with _judges_lock:
                _idle_judges.setdefault(_judge_key(*self.settings), []).append(self.process)
        else:
            self.process.close(kill=True)
        verdicts: dict[str, tuple[str, str]] = {}
        observed = frozenset(
            str(r["exercise"]) for r in self.records if "exercise" in r and r.get("observed")
        )
        for r in self.records:
            if "exercise" in r:
                verdicts.setdefault(str(r["exercise"]), (str(r.get("status")), str(r.get("message", ""))))
        if not self.listening:
            return {}, "the judge did not start", frozenset()
        if not ended:
            return verdicts, f"the judge did not finish (exit code {self.process.proc.returncode})", observed
        return verdicts, "", observed


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
    adopt_orphans()
    before = course_digest()
    _first_digest[:] = _first_digest[:1] or [before]
    judging = Judge(work, graded, options) if graded.judged else None

    def reader() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                lines.append(line)

    thread = threading.Thread(target=reader, daemon=True)
    with open(log_path, "wb") as log:
        try:
            with _active_lock:  # a child that is not in _active would be taken for an orphan
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
                _active.add(proc)
        except BaseException:
            if judging is not None:
                judging.finish()
            raise
        finally:
            os.close(write_end)
        if judging is not None:
            judging.watch(proc.pid)
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
    # What the run left behind: its process group, then whatever escaped it (re-parented here).
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    end_orphans()
    thread.join(timeout=10)
    peak.stop()
    judged, judge_failed, observed = judging.finish() if judging else ({}, "", frozenset())
    changed = course_changed(before)
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
        judged=judged,
        observed=observed,
        judge_failed=judge_failed,
        tampered=changed,
    )


def course_digest() -> str:
    """A digest of both packages' files, ``course_utils`` and ``course_tools``, as they are now."""
    digest = hashlib.sha256()
    for package in (Path(course_utils.__file__).resolve().parent, Path(__file__).resolve().parents[1]):
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(package.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


#: Both packages' digest when the grader's first run began (set by :func:`run`).
_first_digest: list[str] = []


def course_changed(before: str) -> str:
    """ "" while both packages are as the grader's first run found them and as this run (which
    began with digest ``before``) found them; else why no grade can be trusted."""
    now = course_digest()
    if now == before == _first_digest[0]:
        return ""
    return (
        "the course's packages (course_utils, course_tools) changed on disk while the grader ran: a "
        "submission rewrote them; restore them and grade again (this and every later run)"
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
