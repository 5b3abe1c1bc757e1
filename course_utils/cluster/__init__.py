"""Notebooks 07 and 08: a local cluster of real TensorFlow processes.

Multi-worker training runs one process per task; each process learns its place in the cluster
from the ``TF_CONFIG`` environment variable. :class:`LocalCluster` does on one machine what a
cluster manager does on many:

* it picks free ports (never fixed ones) and writes each task's ``TF_CONFIG``;
* it starts one real Python process per task, running a worker module shipped with the course
  (``python -m course_utils.workers.NAME``) or any module or script you give it;
* it waits until every task's gRPC server has started, by watching the task's log for
  TensorFlow's ``Started server with target`` line (never by sleeping), with a time limit;
* it shows what the tasks print, prefixed by the task (``[worker 0] ...``), without TensorFlow's
  start-up noise, timestamps, ports or process ids;
* it always cleans up: after a normal end, on an exception, on a keyboard interrupt and when the
  interpreter exits, it stops the whole process group of every task. Starting a cluster again
  from a re-run cell first stops the one it replaces, so ports never clash and nothing is left.

A task that dies stops the others (with ``MultiWorkerMirroredStrategy`` they would wait forever
for it) and raises :class:`WorkerFailed`, whose message names the task, says how it ended and
quotes its last lines.

Usage::

    from course_utils.cluster import run_cluster
    result = run_cluster("course_utils.workers.multi_worker", ["--epochs", "3"], workers=2)
    result["worker 1"].lines      # what worker 1 printed
    result["worker 0"].data       # what it reported with course_utils.workers.common.report()

or, to act on the cluster while it runs (stop a worker in the middle of training)::

    with LocalCluster("course_utils.workers.multi_worker", args, workers=2) as cluster:
        cluster.wait_for_line("worker 1", "holding still")
        cluster.kill("worker 1")
        cluster.wait()            # raises WorkerFailed naming worker 1

The common settings are keyword arguments (``workers``, ``ps``, ``chief``, ``env``, ``cwd``,
``stream``, ``timeout``, ``verbose``); the rarely changed ones are one record,
``options=ClusterOptions(start_timeout=300, name="my cell")``.

Its parts: :mod:`.spec` (ports and ``TF_CONFIG``), :mod:`.launcher` (:class:`LocalCluster`),
:mod:`.logs` (what tasks print) and :mod:`.registry` (the running clusters and their processes:
nothing is left behind). Importing any of them starts nothing and registers nothing: the exit
hook is registered when the first cluster starts.
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
