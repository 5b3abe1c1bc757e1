"""Notebook 07 (and notebook 02's probes): what every worker program shares.

* :func:`start` starts a watchdog thread: a worker whose launcher has gone away (the notebook
  kernel was killed) or that outlives its time limit ends itself, so no process is orphaned;
  then it imports TensorFlow quietly and returns it.
* :func:`say` prints one line at once (the launcher shows it, prefixed by the task).
* :func:`report` prints a machine-readable line that the launcher hides from the output and
  stores in ``TaskLog.data`` for the notebook to read.
* :func:`make_examples` is the small regression problem :mod:`.multi_worker` trains on.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Optional

import numpy as np

from ..cluster.logs import READY_MARKER
from ..processes import print_result

#: The features of an example of :func:`make_examples`.
FEATURES = 8


def _watch(parent: int, deadline: float) -> None:
    while True:
        if parent and os.getppid() != parent:
            os._exit(70)  # the launcher is gone: never outlive it
        if deadline and time.time() > deadline:
            os._exit(71)  # past the launcher's time limit
        time.sleep(0.5)


def start_watchdog() -> None:
    """End this process when its launcher dies or its time is up (see the module doc)."""
    parent = int(os.environ.get("COURSE_CLUSTER_PARENT", "0") or 0)
    deadline = float(os.environ.get("COURSE_CLUSTER_DEADLINE", "0") or 0)
    if parent or deadline:
        threading.Thread(target=_watch, args=(parent, deadline), name="watchdog", daemon=True).start()


def start() -> Any:
    """Start the watchdog, import TensorFlow without its start-up chatter, return the module."""
    start_watchdog()
    from ..runtime import import_tensorflow

    return import_tensorflow()


def say(*parts: Any) -> None:
    """Print one line at once (the launcher shows it, after the task's name)."""
    print(*parts, flush=True)


def ready() -> None:
    """Tell the launcher this task is ready (for programs that start no TensorFlow server)."""
    print(READY_MARKER, flush=True)


def report(**data: Any) -> None:
    """Hand results to the notebook: ``report(losses=[...])`` -> ``TaskLog.data["losses"]``."""
    print_result(data)


def make_examples(count: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """A fixed regression problem, ``y = x . w + noise``: the same in every process for a seed."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, FEATURES)).astype("float32")
    w = rng.normal(size=(FEATURES, 1)).astype("float32")
    return x, (x @ w + 0.1 * rng.normal(size=(count, 1))).astype("float32")


def task_from_tf_config() -> tuple[Optional[str], Optional[int], dict]:
    """``(task_type, task_index, cluster)`` read from ``TF_CONFIG`` (``None``s without one)."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None, None, {}
    config = json.loads(raw)
    task = config.get("task", {})
    return task.get("type"), task.get("index"), config.get("cluster", {})
