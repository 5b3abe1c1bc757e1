"""Notebooks 07 and 08: what the tasks of a cluster print (markers, noise), their logs and how they ended."""

from __future__ import annotations

import queue
import re
import signal
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

from ..errors import summarize_error

#: TensorFlow's log line when a task's gRPC server is up (the launcher's readiness signal).
SERVER_STARTED = re.compile(r"Started server with target: grpc://")
#: A line a worker may print on stdout to say it is ready without starting a server.
READY_MARKER = "@@ready"
#: What a failed gRPC bind looks like: the launcher then retries with new ports.
PORT_CLASH = re.compile(r"address already in use|Failed to add port|Could not start gRPC server", re.I)
#: TensorFlow/absl log lines and Python warnings that are noise in a notebook.
NOISE = re.compile(
    r"^(?:[IWEF]\d{4} [\d:. ]+\d+ [\w.]+:\d+\]|WARNING: All log messages before absl|"
    r"WARNING:tensorflow:|WARNING:absl:|\S+\.py:\d+: \w*Warning:)"
)


@dataclass
class TaskLog:
    """What one task printed and how it ended."""

    task: str
    returncode: Optional[int] = None
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    stderr_tail: list[str] = field(default_factory=list)
    stopped_by_launcher: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def how_it_ended(self) -> str:
        """``exit code 0``, ``exit code 1 (ValueError: ...)``, ``killed by signal SIGKILL``..."""
        code = self.returncode
        if code is None:
            return "still running"
        if self.stopped_by_launcher:
            return "stopped by the launcher"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"killed by signal {name}"
        if code == 0:
            return "exit code 0"
        error = summarize_error(self.stderr_tail)
        return f"exit code {code}" + (f" ({error})" if error else "")


@dataclass
class ClusterResult:
    """The logs of every task of a finished cluster, in cluster order."""

    tasks: dict[str, TaskLog]
    cluster: dict[str, list[str]]

    def __getitem__(self, task: str) -> TaskLog:
        return self.tasks[task]

    def __iter__(self) -> Iterator[TaskLog]:
        return iter(self.tasks.values())

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tasks.values())

    def lines(self, task: str) -> list[str]:
        return self.tasks[task].lines

    def show(self, tasks: Optional[Iterable[str]] = None) -> None:
        """Print the logs, one task after the other (a deterministic order)."""
        for name in tasks or self.tasks:
            for line in self.tasks[name].lines:
                print(f"[{name}] {line}")


def read_lines(pipe: Any, name: str, stream_name: str, events: "queue.Queue[Any]") -> None:
    """Put every line of ``pipe`` on ``events`` as ``(name, stream_name, line)``, then a ``None``
    line at its end (run in a thread per pipe; the launcher handles the events)."""
    try:
        for line in iter(pipe.readline, ""):
            events.put((name, stream_name, line))
    except (ValueError, OSError):  # the pipe was closed by stop()
        pass
    finally:
        events.put((name, stream_name, None))
