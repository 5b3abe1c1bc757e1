"""Graders (the runner and the plugin): what a grading run and the grader say to each other, a record a line.

The pytest plugin (:mod:`.plugin`, inside the run) writes the records; the runner
(:mod:`.runner`, in the grader) reads them; the verdict (:mod:`.verdict`) reads the cell records.
Every string they share is defined here, once, and a cell's record is one type,
:class:`CellRecord`, that the plugin writes and the runner reads back.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

#: Events, in the order a run sends them.
START = "start"  # pytest started, the plugin is loaded
KERNEL = "kernel"  # the notebook's kernel is up (its process id)
SETUP_ERROR = "setup-error"  # the kernel did not start
CELL = "cell"  # one code cell ran (or did not): its outputs and its result
DONE = "done"  # pytest finished


class CellResult(str, enum.Enum):
    """How one cell ended."""

    OK = "ok"
    SKIPPED = "skipped"
    NOT_RUN = "not-run"  # the kernel had stopped before this cell
    DIED = "died"  # the kernel died while the cell ran
    TIMEOUT = "timeout"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class CellRecord:
    """One code cell of a run, as the plugin saw it end."""

    #: The cell's number among the graded notebook's code cells (0-based, as nbval counts).
    cell: int
    result: CellResult
    seconds: float = 0.0
    #: Its outputs, as nbformat dicts (text and images capped by the plugin).
    outputs: tuple[dict[str, Any], ...] = ()
    #: The exception it raised ("" when none): its name, its value and the traceback's text.
    ename: str = ""
    evalue: str = ""
    traceback: str = ""
    #: What pytest said when the cell failed.
    message: str = ""
    #: For a timeout: the limit, and whether the kernel had to be stopped (not only interrupted).
    timeout: Optional[float] = None
    kernel_stopped: bool = False

    def exception(self) -> str:
        """The exception, as a hint names it: ``NameError: name 'x' is not defined``."""
        ename, evalue = self.ename or "an exception", self.evalue.strip()
        return f"{ename}: {evalue}" if evalue else ename

    def encode(self) -> bytes:
        return encode({"event": CELL, **asdict(self)})

    @classmethod
    def from_wire(cls, record: dict[str, Any]) -> Optional["CellRecord"]:
        """The cell record a decoded ``cell`` event holds, or None when it does not hold one."""
        if not isinstance(record.get("cell"), int):
            return None
        try:
            known = {f.name for f in fields(cls)}
            values = {k: v for k, v in record.items() if k in known and v is not None}
            values["result"] = CellResult(values["result"])
            values["outputs"] = tuple(values.get("outputs", ()))
            return cls(**values)
        except (KeyError, TypeError, ValueError):
            return None


def encode(record: dict[str, Any]) -> bytes:
    """One record as a line of the pipe."""
    return (json.dumps(record) + "\n").encode()


def decode(line: bytes) -> Optional[dict[str, Any]]:
    """A record from a line of the pipe, or None for a line that is not one."""
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None
