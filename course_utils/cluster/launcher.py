"""Notebooks 07 and 08: the launcher, :class:`LocalCluster`, with :func:`run_cluster` and :func:`run_module`.

:class:`LocalCluster` starts real task processes, waits until they are ready, shows their logs
and stops them; :func:`run_cluster` and :func:`run_module` run one to its end.

Its settings: the common ones are keyword arguments; the rarely changed ones are one
:class:`ClusterOptions` record (``options=ClusterOptions(start_timeout=300)``).
"""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from ..errors import ConfigError, CourseError, summarize_error
from ..processes import RESULT_MARKER, parse_result
from . import registry
from .logs import NOISE, PORT_CLASH, READY_MARKER, SERVER_STARTED, ClusterResult, TaskLog, read_lines
from .spec import chief_of, cluster_spec, describe_jobs, make_tf_config, pick_ports, tasks_of


class ClusterError(CourseError):
    """The local cluster could not start or did not finish in time."""


class WorkerFailed(CourseError):
    """A task of the cluster ended with an error or was killed.

    ``task`` names the first task that failed (``"worker 1"``), ``reason`` says how it ended,
    ``last_lines`` are its last printed lines and ``result`` holds what every task printed.
    """

    def __init__(
        self, message: str, task: str, reason: str, last_lines: list[str], result: ClusterResult
    ) -> None:
        super().__init__(message)
        self.task = task
        self.reason = reason
        self.last_lines = last_lines
        self.result = result


@dataclass(frozen=True)
class ClusterOptions:
    """The rarely changed settings of a :class:`LocalCluster`, with their defaults.

    * ``evaluator``: how many evaluator tasks (0 or 1) run beside the workers;
    * ``start_timeout``: seconds to wait until every task's server has started;
    * ``wait_ready``: whether ``start()`` waits for the servers (``False`` for a program that
      starts none, such as notebook 08's in-process cluster);
    * ``name``: starting a cluster first stops a running one of the same name (a re-run cell);
      ``None`` names it after its target;
    * ``announce``: print the launcher's own ``[cluster] ...`` lines;
    * ``prefix``: print each line of a task after its name (``[worker 0] ...``);
    * ``use_gpus``: let the tasks see the GPUs (by default they run on the CPU);
    * ``tf_config``: give each task its ``TF_CONFIG``.
    """

    evaluator: int = 0
    start_timeout: float = 180.0
    wait_ready: bool = True
    name: Optional[str] = None
    announce: bool = True
    prefix: bool = True
    use_gpus: bool = False
    tf_config: bool = True


#: The options of :func:`run_module`: one process that starts no server and reads no ``TF_CONFIG``.
ONE_PROCESS = ClusterOptions(wait_ready=False, announce=False, prefix=False, tf_config=False)


@dataclass
class _Task:
    name: str
    kind: str
    index: int
    log: TaskLog
    process: Optional[subprocess.Popen] = None
    ready: bool = False
    eof: int = 0  # streams closed (2 when both are)
    stderr: collections.deque = field(default_factory=lambda: collections.deque(maxlen=400))
    readers: list = field(default_factory=list)


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process group of ``process`` (the task and everything it started)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(process: subprocess.Popen) -> bool:
    """Whether ``process`` or anything left in its process group still runs."""
    if process.poll() is None:
        return True
    try:
        os.killpg(process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class LocalCluster:
    """A cluster of real processes on this machine; see the documentation of :mod:`course_utils.cluster`.

    ``target`` is a module run with ``python -m`` (``"course_utils.workers.multi_worker"``) or
    the path of a ``.py`` script; ``args`` are its command-line arguments. ``workers``, ``ps``
    and ``chief`` count the tasks of each kind.

    ``env`` adds environment variables to every task (``{"TF_USE_LEGACY_KERAS": "1"}``).
    The notebook's ``COURSE_STRATEGY`` and ``COURSE_REPLICAS`` are not passed on, so a worker
    behaves the same whatever the notebook runs under; set them in ``env`` to pass them.
    ``cwd`` is the tasks' working folder.

    ``stream`` chooses what is printed while the cluster runs: ``"chief"`` (the default) prints
    the chief's lines as they arrive and every other task's lines after the run, one task after
    the other, so the output is the same every time; ``"all"`` prints every line as it arrives
    (interleaved); ``"none"`` prints only the launcher's own lines (see :meth:`ClusterResult.show`).
    ``verbose=False`` prints nothing at all.

    ``timeout`` limits the whole run, in seconds. The rarely changed settings are one
    :class:`ClusterOptions` record, ``options``.
    """

    def __init__(
        self,
        target: Union[str, Path],
        args: Sequence[Any] = (),
        *,
        workers: int = 2,
        ps: int = 0,
        chief: int = 0,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Union[str, Path]] = None,
        stream: str = "chief",
        timeout: float = 300.0,
        verbose: bool = True,
        options: ClusterOptions = ClusterOptions(),
    ) -> None:
        if stream not in {"chief", "all", "none"}:
            raise ConfigError(f"stream={stream!r}: use 'chief', 'all' or 'none'.")
        if not isinstance(options, ClusterOptions):
            raise ConfigError(f"options={options!r}: give a ClusterOptions(...) record.")
        self.target = str(target)
        self.args = [str(a) for a in args]
        self.counts = {"chief": chief, "worker": workers, "ps": ps, "evaluator": options.evaluator}
        self._spec(list(range(1, 1 + sum(self.counts.values()))))  # validates the counts
        self.env = dict(env or {})
        self.cwd = str(cwd) if cwd is not None else None
        self.stream = stream
        self.timeout = float(timeout)
        self.verbose = verbose
        self.options = options
        self.name = options.name or self.target
        self.announce = options.announce and verbose
        self.cluster: dict[str, list[str]] = {}
        self.ports: list[int] = []
        self._tasks: dict[str, _Task] = {}
        self._events: "queue.Queue[tuple[str, str, Optional[str]]]" = queue.Queue()
        self._started_at = 0.0
        self._deadline = 0.0
        self._printed: dict[str, int] = {}
        self._held: list[tuple[str, str]] = []
        self._running = False
        self._killed: set[str] = set()

    # ------------------------------------------------------------------ properties

    @property
    def chief(self) -> str:
        return chief_of(self.cluster) if self.cluster else ("chief 0" if self.counts["chief"] else "worker 0")

    @property
    def running(self) -> bool:
        """Whether the cluster was started and not stopped since."""
        return self._running

    @property
    def pids(self) -> dict[str, int]:
        """The process id of every task started (for tests and for the curious; never printed)."""
        return {n: t.process.pid for n, t in self._tasks.items() if t.process is not None}

    def alive(self) -> list[str]:
        """The tasks whose process group still has a live process."""
        return [n for n, t in self._tasks.items() if t.process is not None and _group_alive(t.process)]

    def _spec(self, ports: list[int]) -> dict[str, list[str]]:
        c = self.counts
        return cluster_spec(c["worker"], c["ps"], c["chief"], c["evaluator"], ports=ports)

    def _task(self, name: str) -> _Task:
        if name not in self._tasks:
            raise ConfigError(f"No task {name!r} in this cluster (tasks: {', '.join(self._tasks)}).")
        return self._tasks[name]

    def _limit(self, timeout: Optional[float]) -> float:
        """The moment a wait of ``timeout`` seconds ends (never after the cluster's own limit)."""
        return min(self._deadline, time.monotonic() + timeout) if timeout else self._deadline

    def _give_up(self, message: str, names: Sequence[str]) -> ClusterError:
        """Stop the cluster; the error to raise, with the last lines of the tasks ``names``."""
        self.stop(quiet=True)
        self._finish_logs()
        return ClusterError(f"{message} {_last_lines_text(self._tasks, names)}")

    # ------------------------------------------------------------------ starting

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:  # a cluster object dropped without stop(): leave nothing behind
        try:
            # The garbage collector may run this while another cluster holds the registry lock
            # (for example while a re-run cell looks for the cluster it replaces): never take it.
            self.stop(quiet=True, _finalizing=True)
        except Exception:
            pass

    def start(self) -> "LocalCluster":
        """Start every task and wait until all of them are ready; returns the cluster."""
        if self._running:
            raise ClusterError("This cluster is already running; call stop() first.")
        if not hasattr(os, "killpg"):
            raise ClusterError(
                "The local cluster needs Linux or macOS (process groups); on Windows, use WSL or Colab."
            )
        if registry.stop_named(self.name) and self.announce:
            print(f"[cluster] stopped the earlier cluster running {self.name} (a re-run cell)")
        attempts = 3
        for attempt in range(attempts):
            self._launch()
            try:
                if self.options.wait_ready:
                    self._wait_ready()
                return self
            except _PortClash:
                self.stop(quiet=True)
                if attempt == attempts - 1:
                    raise ClusterError(
                        "Could not find free ports for the cluster after 3 attempts: another program "
                        "keeps taking them. Try again in a moment."
                    ) from None
            except BaseException:
                self.stop(quiet=True)
                raise
        return self  # pragma: no cover

    def _task_env(self, base_env: Mapping[str, str], kind: str, index: int) -> dict[str, str]:
        """The environment of one task: the notebook's, the launcher's variables, ``env``."""
        env = dict(base_env)
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                # INFO level, so that TensorFlow logs "Started server with target" on stderr
                # (the readiness signal); stderr is never shown, only searched.
                "TF_CPP_MIN_LOG_LEVEL": "0",
                "COURSE_CLUSTER_PARENT": str(os.getpid()),
                "COURSE_CLUSTER_DEADLINE": str(time.time() + self.timeout + 30),
                "COURSE_TASK": f"{kind} {index}",
            }
        )
        if not self.options.use_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        if self.options.tf_config:
            env["TF_CONFIG"] = json.dumps(make_tf_config(self.cluster, kind, index))
        env.update(self.env)
        return env

    def _launch(self) -> None:
        total = sum(self.counts.values())
        self.ports = pick_ports(total)
        self.cluster = self._spec(self.ports)
        self._events = queue.Queue()
        self._tasks = {}
        self._printed = {}
        self._held = []
        self._killed = set()
        self._started_at = time.monotonic()
        self._deadline = self._started_at + self.timeout
        base_env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"COURSE_STRATEGY", "COURSE_REPLICAS", "TF_CONFIG"}
        }
        base_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_package_root(), base_env.get("PYTHONPATH", "")) if p
        )
        registry.add(self)
        self._running = True
        python = [sys.executable, "-u"] + (
            [self.target] if self.target.endswith(".py") else ["-m", self.target]
        )
        for kind, index in tasks_of(self.cluster):
            name = f"{kind} {index}"
            task = _Task(name, kind, index, TaskLog(name))
            self._tasks[name] = task
            self._printed[name] = 0
            task.process = subprocess.Popen(
                [*python, *self.args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._task_env(base_env, kind, index),
                cwd=self.cwd,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                start_new_session=True,  # its own process group: stop() kills it and its children
            )
            registry.add_process(task.process.pid)
            for stream_name, pipe in (("out", task.process.stdout), ("err", task.process.stderr)):
                reader = threading.Thread(
                    target=read_lines, args=(pipe, name, stream_name, self._events), daemon=True
                )
                reader.start()
                task.readers.append(reader)
        if self.announce:
            print(
                f"[cluster] started {describe_jobs(self.cluster)} as separate processes on this machine "
                f"({'TF_CONFIG written for each, ' if self.options.tf_config else ''}free ports picked at random)"
            )

    def _wait_ready(self) -> None:
        limit = time.monotonic() + self.options.start_timeout
        while not all(t.ready for t in self._tasks.values()):
            self._pump(0.1)
            for task in self._tasks.values():
                if task.ready:
                    continue
                code = task.process.poll() if task.process else None
                if code is not None:
                    self._drain(task)
                    if code != 0 and any(PORT_CLASH.search(l) for l in task.stderr):
                        raise _PortClash()
                    if code == 0:
                        task.ready = True
                        continue
                    self._raise_failed(task.name)
            if time.monotonic() > limit:
                waiting = [t.name for t in self._tasks.values() if not t.ready]
                raise self._give_up(
                    f"The cluster did not start within {self.options.start_timeout:.0f} s: "
                    f"{', '.join(waiting)} never reported a started server.",
                    waiting,
                )
        if self.announce:
            names = ", ".join(self._tasks)
            print(f"[cluster] ready: {names} {'is' if len(self._tasks) == 1 else 'are'} up")
        self._release_held()

    # ------------------------------------------------------------------ running

    def _pump(self, wait: float) -> None:
        """Handle what the reader threads saw (printing happens here, in the caller's thread)."""
        try:
            event = self._events.get(timeout=wait)
        except queue.Empty:
            return
        while True:
            self._handle(*event)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break

    def _handle(self, name: str, stream_name: str, line: Optional[str]) -> None:
        task = self._tasks.get(name)
        if task is None:
            return
        if line is None:
            task.eof += 1
            return
        line = line.rstrip("\n")
        if stream_name == "err":
            task.stderr.append(line)
            if SERVER_STARTED.search(line):
                task.ready = True
            return
        if line.startswith(RESULT_MARKER):
            data = parse_result(line)
            if isinstance(data, dict):
                task.log.data.update(data)
            return
        if line.strip() == READY_MARKER:
            task.ready = True
            return
        if NOISE.match(line):
            return
        task.log.lines.append(line)
        self._show(name, line)

    def _show(self, name: str, line: str) -> None:
        if not self.verbose or self.stream == "none":
            return
        live = self.stream == "all" or name == self.chief
        all_ready = all(t.ready for t in self._tasks.values())
        if live and (all_ready or not self.options.wait_ready):
            self._release_held()
            self._print(name, line)
        elif live:
            self._held.append((name, line))

    def _print(self, name: str, line: str) -> None:
        print(f"[{name}] {line}" if self.options.prefix else line, flush=True)
        self._printed[name] += 1

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for name, line in held:
            self._print(name, line)

    def _print_rest(self) -> None:
        """After the run: the lines not printed live, task after task."""
        self._release_held()
        if not self.verbose or self.stream == "none":
            return
        for name, task in self._tasks.items():
            for line in task.log.lines[self._printed[name] :]:
                self._print(name, line)

    def wait_for_line(self, task: str, pattern: str, timeout: Optional[float] = None) -> str:
        """Wait until ``task`` prints a line matching the regular expression ``pattern``; return it.

        Raises :class:`WorkerFailed` when a task fails first, :class:`ClusterError` after
        ``timeout`` seconds (default: what is left of the cluster's own time limit).
        """
        log = self._task(task).log
        regex = re.compile(pattern)
        limit = self._limit(timeout)
        seen = 0
        try:
            while True:
                for line in log.lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(log.lines)
                self._check_failures()
                if time.monotonic() > limit:
                    raise self._give_up(
                        f"{task} did not print a line matching {pattern!r} in time; the cluster was stopped.",
                        [task],
                    )
                self._pump(0.1)
        except BaseException:
            if self._running and not isinstance(sys.exc_info()[1], (WorkerFailed, ClusterError)):
                self.stop(quiet=True)
            raise

    def kill(self, task: str, sig: int = signal.SIGKILL) -> None:
        """Kill one task now (``SIGKILL`` by default: like a machine losing power)."""
        process = self._task(task).process
        if process is not None and process.poll() is None:
            self._killed.add(task)
            _signal_group(process, sig)

    def _check_failures(self) -> None:
        # A task killed on purpose is the failure to report, even if another one died of it.
        ordered = sorted(self._tasks.values(), key=lambda t: t.name not in self._killed)
        for task in ordered:
            code = task.process.poll() if task.process else None
            if code is not None and code != 0:
                self._raise_failed(task.name)

    def _raise_failed(self, name: str) -> None:
        task = self._tasks[name]
        self._drain(task)  # its last lines first, then stop the others
        others = [n for n, t in self._tasks.items() if n != name and t.process and t.process.poll() is None]
        self.stop(quiet=True)
        for other in others:
            self._tasks[other].log.stopped_by_launcher = True
        self._finish_logs()
        self._print_rest()
        task.log.returncode = task.process.returncode if task.process else None
        reason = task.log.how_it_ended()
        last = task.log.lines[-3:]
        message = f"{name} failed: {reason}."
        if last:
            message += " Its last lines:\n" + "\n".join(f"  [{name}] {line}" for line in last)
        if others:
            message += (
                f"\nThe launcher stopped the other task{'s' if len(others) > 1 else ''} "
                f"({', '.join(others)}); no process of this cluster is left."
            )
        raise WorkerFailed(message, name, reason, last, self._result())

    def wait(self, timeout: Optional[float] = None, *, stop_on_failure: bool = True) -> ClusterResult:
        """Wait until every task has ended; return their logs, or raise when one failed.

        A failed task stops the others at once; with ``stop_on_failure=False`` they are left to end
        by themselves (what do they do when a task dies?), then the failure is raised. Whatever
        happens (a failure, the time limit, an interrupt), the cluster is stopped.
        """
        limit = self._limit(timeout)
        try:
            while True:
                if stop_on_failure:
                    self._check_failures()
                if all(t.process is not None and t.process.poll() is not None for t in self._tasks.values()):
                    for task in self._tasks.values():
                        self._drain(task)
                    self._check_failures()
                    break
                if time.monotonic() > limit:
                    running = self.alive()
                    raise self._give_up(
                        f"The cluster did not finish within its time limit ({self.timeout:.0f} s): "
                        f"{', '.join(running)} still running, stopped by the launcher.",
                        running or list(self._tasks),
                    )
                self._pump(0.1)
        except BaseException:
            self.stop(quiet=True)
            raise
        self.stop(quiet=True)  # also ends anything the tasks left running, which closes their pipes
        self._finish_logs()
        self._print_rest()
        if self.announce:
            print(f"[cluster] finished: {self._finished_text()}; no process left")
        return self._result()

    def _finished_text(self) -> str:
        codes = {t.log.returncode for t in self._tasks.values()}
        if codes == {0}:
            n = len(self._tasks)
            return (
                "exit code 0"
                if n == 1
                else ("both tasks" if n == 2 else f"all {n} tasks") + " exited with code 0"
            )
        return ", ".join(f"{n}: {t.log.how_it_ended()}" for n, t in self._tasks.items())

    def _drain(self, task: _Task, seconds: float = 1.0) -> None:
        """Let an ended task's pipes deliver their last lines (a child it left running may keep
        them open: then give up after ``seconds``; stop() ends the child)."""
        limit = time.monotonic() + seconds
        while task.eof < 2 and time.monotonic() < limit:
            self._pump(0.05)

    def _finish_logs(self) -> None:
        for task in self._tasks.values():
            if task.process is not None and task.process.poll() is not None:
                for reader in task.readers:
                    reader.join(timeout=0.5)
        self._pump(0.0)
        for task in self._tasks.values():
            if task.process is not None:
                task.log.returncode = task.process.poll()
            task.log.stderr_tail = list(task.stderr)[-60:]

    def _result(self) -> ClusterResult:
        return ClusterResult({n: t.log for n, t in self._tasks.items()}, dict(self.cluster))

    # ------------------------------------------------------------------ stopping

    def stop(self, *, quiet: bool = False, grace: float = 2.0, _finalizing: bool = False) -> None:
        """Stop every task's process group (SIGTERM, then SIGKILL); safe to call many times."""
        tasks = list(self._tasks.values())
        for task in tasks:
            process = task.process
            if process is not None and process.poll() is None:
                task.log.stopped_by_launcher = True
                _signal_group(process, signal.SIGTERM)
        limit = time.monotonic() + grace
        for task in tasks:
            process = task.process
            if process is None:
                continue
            try:
                process.wait(timeout=max(0.0, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Kill the whole group: the task, and anything it started, even after it exited.
            _signal_group(process, signal.SIGKILL)
            try:
                process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
        for task in tasks:
            for reader in task.readers:
                reader.join(timeout=2.0)
            for pipe in (task.process.stdout, task.process.stderr) if task.process else ():
                try:
                    if pipe is not None:
                        pipe.close()
                except Exception:
                    pass
            if task.process is not None:
                task.log.returncode = task.process.returncode
        self._running = False
        if not _finalizing:  # a finalized object has already left the weak registry
            registry.discard(self)


class _PortClash(Exception):
    pass


def _last_lines_text(tasks: Mapping[str, _Task], names: Sequence[str]) -> str:
    parts = []
    for name in names:
        lines = tasks[name].log.lines[-3:]
        error = summarize_error(list(tasks[name].stderr))
        if lines:
            parts.append(f"Last lines of {name}:\n" + "\n".join(f"  [{name}] {l}" for l in lines))
        if error:
            parts.append(f"{name} reported: {error}")
    return "\n".join(parts) if parts else "Nothing was printed."


def run_cluster(target: Union[str, Path], args: Sequence[Any] = (), **settings: Any) -> ClusterResult:
    """Start a :class:`LocalCluster`, wait for every task to end, stop it; return the logs.

    Takes the same settings as :class:`LocalCluster`; raises :class:`WorkerFailed` when a task
    fails (after stopping the others) and :class:`ClusterError` on a time limit.
    """
    with LocalCluster(target, args, **settings) as cluster:
        return cluster.wait()


def run_module(
    target: Union[str, Path],
    args: Sequence[Any] = (),
    *,
    options: ClusterOptions = ONE_PROCESS,
    **settings: Any,
) -> TaskLog:
    """Run one module (or script) in a fresh process with the launcher's care; return its log.

    For a program that builds its own cluster inside one process (notebook 08's in-process
    parameter-server cluster): by default (:data:`ONE_PROCESS`) no ``TF_CONFIG``, no wait for a
    server, no ``[cluster]`` lines and no task prefix; the same clean-up and output. ``settings``
    are those of :class:`LocalCluster` but ``workers``.
    """
    return run_cluster(target, args, workers=1, options=options, **settings)["worker 0"]
