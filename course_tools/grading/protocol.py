"""What a grading run and the grader say to each other: one JSON record per line on a pipe.

The pytest plugin (:mod:`.plugin`, inside the run) writes the records; the runner
(:mod:`.runner`, in the grader) reads them; the verdict (:mod:`.verdict`) reads the cell results.
Every string they share is defined here, once.
"""

from __future__ import annotations

import json
from typing import Any, Optional

#: Events, in the order a run sends them.
START = "start"  # pytest started, the plugin is loaded
KERNEL = "kernel"  # the notebook's kernel is up (its process id)
SETUP_ERROR = "setup-error"  # the kernel did not start
CELL = "cell"  # one code cell ran (or did not): its outputs and its result
DONE = "done"  # pytest finished

#: The result of one cell.
OK = "ok"
SKIPPED = "skipped"
NOT_RUN = "not-run"  # the kernel had stopped before this cell
DIED = "died"  # the kernel died while the cell ran
TIMEOUT = "timeout"
ERROR = "error"

#: The line a check prints when an exercise is right: ``[pass] ID: what was verified``.
PASS_PREFIX = "[pass] "


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
