"""Notebooks 07 and 08: a local cluster of real TensorFlow processes.

Multi-worker training runs one process per task, each learning its place from ``TF_CONFIG``.
:class:`LocalCluster` does on one machine what a cluster manager does on many: it picks free ports
and writes each task's ``TF_CONFIG``; starts one Python process per task (a worker module of the
course, ``python -m course_utils.workers.NAME``, or any module or script); waits for each task's
``Started server with target`` log line (never sleeps), with a time limit; shows what the tasks
print, prefixed by the task (``[worker 0] ...``), without TensorFlow's start-up noise; and always
cleans up (normal end, exception, interrupt, interpreter exit), stopping every task's process
group, also the cluster a re-run cell replaces. A task that dies stops the others and raises
:class:`WorkerFailed`, naming the task, how it ended and its last lines.

Usage::

    result = run_cluster("course_utils.workers.multi_worker", ["--epochs", "3"], workers=2)
    result["worker 1"].lines      # what worker 1 printed; .data: what it report()-ed

    with LocalCluster("course_utils.workers.multi_worker", args, workers=2) as cluster:
        cluster.wait_for_line("worker 1", "holding still")
        cluster.kill("worker 1")
        cluster.wait()            # raises WorkerFailed naming worker 1

Keyword arguments: ``workers``, ``ps``, ``chief``, ``env``, ``cwd``, ``stream``, ``timeout``,
``verbose``; the rare ones in ``options=ClusterOptions(...)``. Parts: :mod:`.spec` (ports,
``TF_CONFIG``), :mod:`.launcher`, :mod:`.logs`, :mod:`.registry` (running clusters). Importing
starts and registers nothing: the exit hook comes with the first cluster.
"""

from __future__ import annotations

from ..processes import RESULT_MARKER
from .launcher import (
    ONE_PROCESS,
    ClusterError,
    ClusterOptions,
    LocalCluster,
    WorkerFailed,
    run_cluster,
    run_module,
)
from .logs import READY_MARKER, SERVER_STARTED, ClusterResult, TaskLog
from .registry import leftover_processes, running_clusters, stop_all
from .spec import (
    TASK_TYPES,
    chief_of,
    cluster_spec,
    describe_jobs,
    make_tf_config,
    pick_ports,
    port_is_free,
    tasks_of,
)

__all__ = [
    "ONE_PROCESS",
    "READY_MARKER",
    "RESULT_MARKER",
    "SERVER_STARTED",
    "TASK_TYPES",
    "ClusterError",
    "ClusterOptions",
    "ClusterResult",
    "LocalCluster",
    "TaskLog",
    "WorkerFailed",
    "chief_of",
    "cluster_spec",
    "describe_jobs",
    "leftover_processes",
    "make_tf_config",
    "pick_ports",
    "port_is_free",
    "run_cluster",
    "run_module",
    "running_clusters",
    "stop_all",
    "tasks_of",
]
