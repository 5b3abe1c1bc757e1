"""Notebooks 07 and 08 (and 02's support matrix): cluster descriptions, free ports, ``TF_CONFIG``."""

from __future__ import annotations

import socket
from typing import Any, Mapping, Optional, Sequence

from ..errors import ConfigError

#: The order of task types in a cluster and in printed summaries.
TASK_TYPES = ("chief", "worker", "ps", "evaluator")


def pick_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports, chosen by ``portpicker`` (never fixed numbers)."""
    try:
        import portpicker
    except ImportError:  # pragma: no cover - portpicker is pinned; a bare socket is the fallback
        portpicker = None
    ports: list[int] = []
    while len(ports) < count:
        if portpicker is not None:
            port = portpicker.pick_unused_port()
        else:  # pragma: no cover
            with socket.socket() as s:
                s.bind(("localhost", 0))
                port = s.getsockname()[1]
        if port not in ports:
            ports.append(port)
    return ports


def cluster_spec(
    workers: int = 2,
    ps: int = 0,
    chief: int = 0,
    evaluator: int = 0,
    *,
    host: str = "localhost",
    ports: Optional[Sequence[int]] = None,
) -> dict[str, list[str]]:
    """A cluster description ``{"worker": ["localhost:PORT", ...], ...}`` on free ports.

    Jobs with no task are left out. ``ports`` (one per task, in the order chief, worker, ps,
    evaluator) are picked with :func:`pick_ports` unless given.
    """
    counts = {"chief": chief, "worker": workers, "ps": ps, "evaluator": evaluator}
    for kind, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"{kind}={n!r}: give a whole number of tasks >= 0.")
    if counts["chief"] > 1 or counts["evaluator"] > 1:
        raise ConfigError("A cluster has at most one chief and one evaluator.")
    total = sum(counts.values())
    if total == 0:
        raise ConfigError("A cluster needs at least one task (workers=1 or more).")
    ports = list(ports) if ports is not None else pick_ports(total)
    if len(ports) != total:
        raise ConfigError(f"Give one port per task: {total} tasks, {len(ports)} ports.")
    spec: dict[str, list[str]] = {}
    it = iter(ports)
    for kind in TASK_TYPES:
        if counts[kind]:
            spec[kind] = [f"{host}:{next(it)}" for _ in range(counts[kind])]
    return spec


def make_tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, task_index: int) -> dict[str, Any]:
    """The ``TF_CONFIG`` of one task: the whole cluster, and which task this process is."""
    if task_type not in cluster:
        raise ConfigError(f"There is no {task_type!r} job in this cluster (jobs: {', '.join(cluster)}).")
    if not 0 <= task_index < len(cluster[task_type]):
        raise ConfigError(
            f"The {task_type!r} job has {len(cluster[task_type])} task(s): index {task_index} does not exist."
        )
    return {
        "cluster": {kind: list(addresses) for kind, addresses in cluster.items()},
        "task": {"type": task_type, "index": int(task_index)},
    }


def chief_of(cluster: Mapping[str, Sequence[str]]) -> str:
    """The task that acts as chief: the ``chief`` task if there is one, else ``worker 0``."""
    if cluster.get("chief"):
        return "chief 0"
    if cluster.get("worker"):
        return "worker 0"
    return f"{next(iter(cluster))} 0"


def describe_jobs(cluster: Mapping[str, Sequence[str]]) -> str:
    """The jobs of a cluster in words: ``"1 chief, 2 workers, 1 ps"``."""
    return ", ".join(
        f"{len(addresses)} {job}{'s' if len(addresses) != 1 and job != 'ps' else ''}"
        for job, addresses in cluster.items()
    )


def tasks_of(cluster: Mapping[str, Sequence[str]]) -> list[tuple[str, int]]:
    """Every ``(task_type, index)`` of a cluster, chief first."""
    order = {kind: i for i, kind in enumerate(TASK_TYPES)}
    kinds = sorted(cluster, key=lambda k: order.get(k, len(order)))
    return [(kind, i) for kind in kinds for i in range(len(cluster[kind]))]


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``port`` and it can be bound again (used by the tests)."""
    try:
        import portpicker

        return bool(portpicker.is_port_free(port))
    except ImportError:  # pragma: no cover
        with socket.socket() as s:
            try:
                s.bind(("", port))
                return True
            except OSError:
                return False
