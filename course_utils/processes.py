"""Notebooks 00, 02, 03, 04 and the tools: running a piece of Python in a fresh process.

TensorFlow fixes its device list when it starts, so a demonstration that needs a particular
number of replicas (1, 2 and 4 side by side, or a bug that only appears on 2) runs in a process of
its own. Its output is then the same whatever strategy the notebook itself runs under.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from .errors import CourseError, stable_error_line

#: Environment that keeps TensorFlow's start-up chatter out of the captured output.
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}


@dataclass(frozen=True)
class ProcessResult:
    """What a fresh process printed and how it ended (:attr:`error`: what it died of, in one line)."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def error(self) -> str:
        """What the process died of, in one line that does not vary (empty when it ended well)."""
        return "" if self.ok else stable_error_line(self.stderr)


def run_python(
    code: str,
    *,
    replicas: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 300.0,
    gpus: bool = False,
) -> ProcessResult:
    """Run ``code`` in a new Python process and return what it printed.

    ``replicas`` sets ``COURSE_REPLICAS`` for that process (call
    ``course_utils.use_virtual_cpus`` or ``get_strategy`` inside ``code`` to use it). ``env``
    adds or overrides variables. The process sees no GPU unless ``gpus=True`` (then it sees the
    GPUs this process sees). A process still running after ``timeout`` seconds is killed and
    :class:`CourseError` is raised.
    """
    full_env = {**os.environ, **QUIET_TF}
    if gpus:
        full_env.pop("CUDA_VISIBLE_DEVICES")
        if "CUDA_VISIBLE_DEVICES" in os.environ:
            full_env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    if replicas is not None:
        full_env["COURSE_REPLICAS"] = str(replicas)
    if env:
        full_env.update(env)
    # Its own process group, so a timeout stops whatever the code started too.
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException as error:  # a timeout, or the notebook interrupted: stop the group
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.communicate()
        if isinstance(error, subprocess.TimeoutExpired):
            raise CourseError(f"The process did not finish within {timeout:.0f} s and was stopped.") from None
        raise
    return ProcessResult(process.returncode, stdout, stderr)


def run_side_by_side(
    code: str,
    envs: Sequence[Mapping[str, str]],
    *,
    replicas: Optional[int] = None,
    timeout: float = 300.0,
) -> list[ProcessResult]:
    """Run the same ``code`` once per entry of ``envs`` (variables added for that run), each in a
    fresh process, all at the same time; return the results in the order of ``envs``."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, len(envs))) as pool:
        futures = [pool.submit(run_python, code, replicas=replicas, env=env, timeout=timeout) for env in envs]
        return [future.result() for future in futures]


def run_for_replicas(
    code: str,
    counts: tuple[int, ...] = (1, 2, 4),
    *,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 300.0,
) -> dict[int, ProcessResult]:
    """:func:`run_side_by_side` with ``COURSE_REPLICAS=n`` for each ``n`` of ``counts``: three
    TensorFlow start-ups cost about as long as one on a machine with spare cores."""
    envs = [{**(env or {}), "COURSE_REPLICAS": str(n)} for n in counts]
    return dict(zip(counts, run_side_by_side(code, envs, timeout=timeout)))


# --------------------------------------------------------------------------- finding processes


def alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, ended and waiting to be reaped, is not running)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def processes_marked(variable: str, value: str) -> list[int]:
    """Process ids of this user's running processes whose environment has ``variable=value``
    (how a launcher finds what its children started in turn). Works on Linux, macOS and Windows
    through psutil; a process whose environment cannot be read is skipped."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.pid != os.getpid() and process.environ().get(variable) == value and alive(process.pid):
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return sorted(found)


class PeakMemory:
    """The peak resident memory of a process and everything it started, sampled in a thread
    (``with PeakMemory(pid) as peak: ...``; then ``peak.bytes``). With ``part``, also the peak of
    the sub-tree rooted at the first descendant whose command line contains ``part``
    (``peak.part_bytes``; the notebook's kernel, say). Sampling every ``interval`` seconds misses a
    spike shorter than that; pages shared between processes count once per process."""

    def __init__(self, pid: int, part: str = "", interval: float = 0.2) -> None:
        import threading

        self.pid, self.part, self.interval = pid, part, interval
        self.bytes = self.part_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _rss(processes: list[Any]) -> int:
        import psutil

        total = 0
        for process in processes:
            try:
                total += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return total

    def _sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        part_root = None
        while not self._stop.is_set():
            try:
                family = [root, *root.children(recursive=True)]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return
            self.bytes = max(self.bytes, self._rss(family))
            if self.part and part_root is None:
                for process in family[1:]:
                    try:
                        if any(self.part in arg for arg in process.cmdline()):
                            part_root = process
                            break
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        continue
            if part_root is not None:
                try:
                    subtree = [part_root, *part_root.children(recursive=True)]
                    self.part_bytes = max(self.part_bytes, self._rss(subtree))
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self._stop.wait(self.interval)

    def start(self) -> "PeakMemory":
        """Start sampling (in a daemon thread); returns ``self``."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling; ``bytes`` and ``part_bytes`` then hold the peaks seen."""
        self._stop.set()
        self._thread.join(timeout=2)

    def __enter__(self) -> "PeakMemory":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- a child's result line

#: How a child process hands a result to its parent: one line, this prefix, then JSON. Used by the
#: cluster's tasks (``workers.common.report``), the benchmark's and the doctor's children.
RESULT_MARKER = "@@result "


def print_result(data: Any) -> None:
    """Print ``data`` (JSON-serialisable) as a result line for the parent process."""
    import json

    print(RESULT_MARKER + json.dumps(data), flush=True)


def parse_result(line: str) -> Any:
    """The data of a result line, or ``None`` when ``line`` is not one (or not valid JSON)."""
    import json

    if not line.startswith(RESULT_MARKER):
        return None
    try:
        return json.loads(line[len(RESULT_MARKER) :])
    except ValueError:
        return None


def last_result(stdout: str) -> Any:
    """The data of the last result line in ``stdout``; raises ``ValueError`` when there is none."""
    for line in reversed(stdout.splitlines()):
        data = parse_result(line)
        if data is not None:
            return data
    raise ValueError("no result line")
