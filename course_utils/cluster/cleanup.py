"""Cleaning up after clusters: the registry of running clusters and started processes,
stopping process groups, and what is left over (nothing, after a cluster ends)."""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
import weakref
from typing import TYPE_CHECKING

from ..processes import alive, processes_marked

if TYPE_CHECKING:  # pragma: no cover
    from .launcher import LocalCluster

# Every task process ever started from this interpreter (for leftover_processes()).
_STARTED: list[int] = []
# Every cluster that is running, so that atexit and a re-run cell can stop it.
_RUNNING: "weakref.WeakSet[LocalCluster]" = weakref.WeakSet()
_RUNNING_LOCK = threading.RLock()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(process: subprocess.Popen) -> bool:
    if process.poll() is None:
        return True
    try:
        os.killpg(process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop_previous(name: str) -> None:
    with _RUNNING_LOCK:
        previous = [c for c in _RUNNING if c.name == name and c._running]
    for cluster in previous:
        cluster.stop(quiet=True)
        if cluster.announce:
            print(f"[cluster] stopped the earlier cluster running {name} (a re-run cell)")


def leftover_processes() -> list[int]:
    """Process ids of everything the launchers of this interpreter started that still runs.

    That is every task process and anything those tasks started in turn (found by the
    ``COURSE_CLUSTER_PARENT`` variable they all inherit). After a cluster ends it must be ``[]``.
    """
    found = {pid for pid in _STARTED if alive(pid)}
    found.update(processes_marked("COURSE_CLUSTER_PARENT", str(os.getpid())))
    return sorted(found)


def running_clusters() -> list[LocalCluster]:
    """The clusters started from this interpreter that are still running."""
    with _RUNNING_LOCK:
        return [c for c in _RUNNING if c._running]


def stop_all() -> None:
    """Stop every cluster started from this interpreter (also registered with ``atexit``)."""
    for cluster in running_clusters():
        try:
            cluster.stop(quiet=True)
        except Exception:
            pass


atexit.register(stop_all)
