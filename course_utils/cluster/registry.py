"""Notebooks 07 and 08: the registry of running clusters and of every process they started.

It is how nothing is left behind: a re-run cell stops the cluster it replaces
(:func:`stop_named`), the interpreter's exit stops every cluster still running (:func:`stop_all`),
and :func:`leftover_processes` lists whatever still runs (``[]`` after a cluster ends).

Importing this module changes nothing: the exit hook is registered the first time a cluster
is added (:func:`add`), never on import.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import weakref
from typing import Protocol

from ..processes import alive, processes_marked


class Stoppable(Protocol):
    """What the registry needs of a cluster: its name, whether it runs, and a way to stop it."""

    name: str

    @property
    def running(self) -> bool: ...

    def stop(self, *, quiet: bool = False) -> None: ...


# Every task process started from this interpreter (for leftover_processes()).
_started: list[int] = []
# Every cluster that is running, so that the exit hook and a re-run cell can stop it.
_running: "weakref.WeakSet[Stoppable]" = weakref.WeakSet()
_lock = threading.RLock()


@functools.lru_cache(maxsize=None)
def _stop_all_at_exit() -> None:
    """Register :func:`stop_all` with ``atexit``, once (called with the lock held)."""
    atexit.register(stop_all)


def add(cluster: Stoppable) -> None:
    """Record a cluster that is starting; the first time, also stop every cluster at exit."""
    with _lock:
        _stop_all_at_exit()
        _running.add(cluster)


def discard(cluster: Stoppable) -> None:
    """Forget a cluster that has stopped (nothing happens if it was never added)."""
    with _lock:
        _running.discard(cluster)


def add_process(pid: int) -> None:
    """Record a task process (its id is then checked by :func:`leftover_processes`)."""
    _started.append(pid)


def running_clusters() -> list[Stoppable]:
    """The clusters started from this interpreter that are still running."""
    with _lock:
        return [c for c in _running if c.running]


def stop_named(name: str) -> list[Stoppable]:
    """Stop every running cluster called ``name`` (the one a re-run cell replaces); return them."""
    previous = [c for c in running_clusters() if c.name == name]
    for cluster in previous:
        cluster.stop(quiet=True)
    return previous


def stop_all() -> None:
    """Stop every cluster started from this interpreter (registered with ``atexit`` by :func:`add`)."""
    for cluster in running_clusters():
        try:
            cluster.stop(quiet=True)
        except Exception:
            pass


def leftover_processes() -> list[int]:
    """Process ids of everything the launchers of this interpreter started that still runs.

    That is every task process and anything those tasks started in turn (found by the
    ``COURSE_CLUSTER_PARENT`` variable they all inherit). After a cluster ends it must be ``[]``.
    """
    found = {pid for pid in _started if alive(pid)}
    found.update(processes_marked("COURSE_CLUSTER_PARENT", str(os.getpid())))
    return sorted(found)
