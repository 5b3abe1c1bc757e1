"""Notebook 08 teaches it in a cell; notebook 02's probes use this copy: an in-process
parameter-server cluster, as in the TensorFlow parameter-server tutorial.

:func:`in_process_cluster` starts one ``tf.distribute.Server`` per worker and parameter server
in the calling process, on free ports, and returns the resolver a ``ParameterServerStrategy``
takes. The process that creates the strategy becomes the cluster's coordinator for good (its
devices are renamed ``/job:chief/...``), so call it in a process of its own or, as notebook 08
does, once per kernel.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from ..cluster.spec import pick_ports


def in_process_cluster(tf: Any, num_workers: int, num_ps: int) -> Any:
    """Start ``num_workers`` worker servers and ``num_ps`` parameter servers in this process.

    This is the TensorFlow tutorial's ``create_in_process_cluster``: every server listens on a
    free port; the returned resolver tells ``ParameterServerStrategy`` where they are. A worker
    gets ``num_workers + 1`` inter-op threads when the machine has fewer cores than that (on 2
    cores, 2 workers without it never finish a step).
    """
    ports = pick_ports(num_workers + num_ps)
    cluster = {
        "worker": [f"localhost:{p}" for p in ports[:num_workers]],
        "ps": [f"localhost:{p}" for p in ports[num_workers:]],
    }
    spec = tf.train.ClusterSpec(cluster)
    worker_config = tf.compat.v1.ConfigProto()
    if multiprocessing.cpu_count() < num_workers + 1:
        worker_config.inter_op_parallelism_threads = num_workers + 1
    for i in range(num_workers):
        tf.distribute.Server(spec, job_name="worker", task_index=i, config=worker_config, protocol="grpc")
    for i in range(num_ps):
        tf.distribute.Server(spec, job_name="ps", task_index=i, protocol="grpc")
    return tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
