"""The grading run (pytest, started by the runner): the plugin ``-p course_tools.grading.plugin`` loads.

It is loaded by name from the installed package, never from the run's folder, so nothing a
student hands in can replace it. For each notebook cell nbval runs, it

* sets the cell's timeout: ``--grade-cell-timeout`` for the student's cells and their checks
  (``--grade-student-cells``), nbval's ``--nbval-cell-timeout`` for the course's own cells;
* watches the kernel process, to tell a crash (the kernel died) from a slow cell, and stops
  waiting for a dead kernel's messages at once (out of memory, say), not at the cell's timeout;
* writes one JSON line per cell (how it ended, the exception, the outputs) to the file
  descriptor ``--grade-fd``, a pipe to the grader that the kernel does not inherit.

Lines are written as each cell finishes, so a run killed at the notebook timeout still says
which cells finished.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from typing import Any, Callable, Optional

import pytest

from . import protocol

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_TEXT = 20_000
MAX_IMAGE = 2_000_000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("course-grade", "course_utils grading run")
    group.addoption("--grade-fd", type=int, default=None, help="pipe to the grader")
    group.addoption("--grade-student-cells", default="", help="code-cell numbers (comma separated)")
    group.addoption("--grade-cell-timeout", type=float, default=None, help="seconds, for those cells")


class Recorder:
    def __init__(self, config: pytest.Config) -> None:
        self.fd: int = config.getoption("--grade-fd")
        os.set_inheritable(self.fd, False)
        cells = config.getoption("--grade-student-cells")
        self.student_cells = {int(c) for c in cells.split(",") if c.strip()}
        self.cell_timeout: Optional[float] = config.getoption("--grade-cell-timeout")
        self.course_timeout: float = config.getoption("nbval_cell_timeout")
        self.kernel_pid_sent = False
        self.setup_error_sent = False
        self.died_at: Optional[float] = None
        self.started: float = 0.0
        self.lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self.lock:
            while data:
                written = os.write(self.fd, data)
                data = data[written:]


_recorder: Optional[Recorder] = None


def pytest_configure(config: pytest.Config) -> None:
    global _recorder
    if config.getoption("--grade-fd") is not None:
        _recorder = Recorder(config)
        _recorder.send(protocol.encode({"event": protocol.START}))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _recorder is not None:
        _recorder.send(protocol.encode({"event": protocol.DONE, "exitstatus": int(exitstatus)}))


def _kernel(item: pytest.Item) -> Any:
    return getattr(item.parent, "kernel", None)


def _alive(kernel: Any) -> bool:
    try:
        return bool(kernel is not None and kernel.is_alive())
    except Exception:
        return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    rec = _recorder
    if rec is None or not hasattr(item, "cell_num"):
        yield
        return
    timeout = rec.course_timeout
    if item.cell_num in rec.student_cells and rec.cell_timeout:
        timeout = rec.cell_timeout
    item.config.option.nbval_cell_timeout = timeout
    kernel = _kernel(item)
    if not rec.kernel_pid_sent and kernel is not None:
        rec.kernel_pid_sent = True
        pid = getattr(getattr(getattr(kernel, "km", None), "provisioner", None), "pid", None)
        rec.send(protocol.encode({"event": protocol.KERNEL, "pid": pid}))
    rec.died_at = None
    rec.started = time.monotonic()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            if not _alive(kernel):
                rec.died_at = time.monotonic()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    if _alive(kernel):
        watcher.start()
    if kernel is not None:
        kernel.get_message = _until_dead(kernel, kernel.get_message, rec)
    try:
        yield
    finally:
        stop.set()
        if kernel is not None and "get_message" in vars(kernel):
            del kernel.get_message  # the class's own again
        item.config.option.nbval_cell_timeout = rec.course_timeout
    item._grade_timeout = timeout  # type: ignore[attr-defined]


#: How often a wait for the kernel's next message looks whether the kernel is still alive.
POLL = 0.5


def _dead(kernel: Any) -> bool:
    """Whether the kernel process has ended: its manager says so (an error asking is not a death)."""
    try:
        return kernel is not None and kernel.is_alive() is False
    except Exception:
        return False


def _until_dead(kernel: Any, get_message: Callable[..., Any], rec: Recorder) -> Callable[..., Any]:
    """nbval's ``kernel.get_message(stream, timeout)``, waiting in slices of :data:`POLL` seconds
    and raising ``queue.Empty`` (as a timeout does) once the kernel is dead and one more slice
    brought nothing (what it sent before it died is still read): a kernel killed for memory would
    otherwise hold the cell for its whole timeout (the course cells' timeout is 300 s in the
    autograder, 600 s by default)."""

    def wait(stream: str, timeout: Optional[float] = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        last_slice = False
        while True:
            left = POLL if deadline is None else min(POLL, max(0.0, deadline - time.monotonic()))
            try:
                return get_message(stream, timeout=left)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if last_slice:
                    rec.died_at = rec.died_at or time.monotonic()
                    raise
                last_slice = _dead(kernel)

    return wait


def _outputs(item: pytest.Item) -> list[dict[str, Any]]:
    """The cell's outputs, text capped at MAX_TEXT characters per cell in all."""
    out: list[dict[str, Any]] = []
    budget = MAX_TEXT
    for output in getattr(item, "test_outputs", None) or []:
        kind = output.get("output_type")
        if kind == "stream":
            text = str(output.get("text", ""))
            if budget <= 0:
                continue
            if len(text) > budget:
                text = text[:budget] + "\n[... more output, cut by the grader]\n"
            budget -= len(text)
            if out and out[-1]["output_type"] == "stream" and out[-1]["name"] == output.get("name"):
                out[-1]["text"] += text
            else:
                out.append({"output_type": "stream", "name": output.get("name", "stdout"), "text": text})
        elif kind in ("display_data", "execute_result"):
            data = {}
            for mime, value in (output.get("data") or {}).items():
                if mime in ("text/plain", "text/markdown") and isinstance(value, str) and budget > 0:
                    data[mime] = value[:budget]
                    budget -= len(data[mime])
                elif mime == "image/png" and isinstance(value, str) and len(value) < MAX_IMAGE:
                    data[mime] = value
            if data:
                out.append({"output_type": "display_data", "data": data, "metadata": {}})
        elif kind == "error":
            out.append(
                {
                    "output_type": "error",
                    "ename": str(output.get("ename", "")),
                    "evalue": str(output.get("evalue", ""))[:MAX_TEXT],
                    "traceback": [str(t)[:MAX_TEXT] for t in (output.get("traceback") or [])[-40:]],
                }
            )
    return out


def _last_error(outputs: list[dict[str, Any]]) -> tuple[str, str, str]:
    for output in reversed(outputs):
        if output["output_type"] == "error":
            trace = _ANSI.sub("", "\n".join(output.get("traceback", [])))
            return output["ename"], output["evalue"], trace
    return "", "", ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    yield
    rec = _recorder
    if rec is None or not hasattr(item, "cell_num"):
        return
    if call.when == "setup":
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            if not rec.setup_error_sent:
                rec.setup_error_sent = True
                message = _ANSI.sub("", str(call.excinfo.value))[-2000:]
                rec.send(protocol.encode({"event": protocol.SETUP_ERROR, "message": message}))
        return
    if call.when != "call":
        return
    outputs = _outputs(item)
    ename, evalue, trace = _last_error(outputs)
    timeout = getattr(item, "_grade_timeout", rec.course_timeout)
    died = rec.died_at is not None and rec.died_at - rec.started < timeout
    result, message, stopped = protocol.CellResult.OK, "", False
    if call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception):
        result = protocol.CellResult.SKIPPED
    elif call.excinfo is not None:
        message = _ANSI.sub("", str(call.excinfo.value))
        if "Kernel dead on test start" in message:
            result = protocol.CellResult.NOT_RUN
        elif died:
            result = protocol.CellResult.DIED
        elif message.startswith("Timeout of"):
            result = protocol.CellResult.TIMEOUT
            stopped = "Failed to interrupt" in message or "waiting for output" in message
        else:
            result = protocol.CellResult.ERROR
            if not ename and type(call.excinfo.value).__name__ != "NbCellError":
                ename, evalue = type(call.excinfo.value).__name__, message[:2000]
    record = protocol.CellRecord(
        cell=item.cell_num,
        result=result,
        seconds=round(call.duration, 3),
        outputs=tuple(outputs),
        ename=ename,
        evalue=evalue,
        traceback=trace[-8000:],
        message=message[-2000:],
        timeout=timeout if result is protocol.CellResult.TIMEOUT else None,
        kernel_stopped=stopped,
    )
    rec.send(record.encode())
