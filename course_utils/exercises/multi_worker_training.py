"""Checks for notebook 07, multi-worker training."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Optional, Sequence

from ..checks import exercise, expect, passed


def _resolver_for(config_text: str) -> Any:
    """What TensorFlow itself reads from a TF_CONFIG string."""
    import tensorflow as tf

    saved = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = config_text
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return resolver.task_type, resolver.task_id, resolver.cluster_spec().as_dict()
    finally:
        if saved is None:
            os.environ.pop("TF_CONFIG", None)
        else:
            os.environ["TF_CONFIG"] = saved


def check_tf_config(tf_config: Callable[[Sequence[str], int], str]) -> None:
    """``tf_config(workers, index)``: the TF_CONFIG string of worker ``index``."""
    with exercise("tf_config"):
        workers = ["host-a:2222", "host-b:2222", "host-c:2222"]
        text = tf_config(list(workers), 2)
        expect(
            isinstance(text, str),
            f"Return a string (got {type(text).__name__}): TF_CONFIG is an environment variable, "
            "so the dictionary must be turned into JSON text with json.dumps(...).",
        )
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            expect(False, "The string is not valid JSON: build a dictionary and return json.dumps(it).")
        expect(
            isinstance(config, dict) and set(config) >= {"cluster", "task"},
            "TF_CONFIG needs two keys: 'cluster' (every task's address, by job) and 'task' "
            "(which one this process is).",
        )
        expect(
            config["cluster"] == {"worker": workers},
            f"'cluster' should be {{'worker': {workers}}}: the same full list of addresses on every "
            f"worker, in the same order; got {config['cluster']!r}.",
        )
        expect(
            config["task"] == {"type": "worker", "index": 2},
            f"'task' should be {{'type': 'worker', 'index': 2}} for index 2 (an int, not a string); "
            f"got {config['task']!r}.",
        )
        task_type, task_id, spec = _resolver_for(text)
        expect(
            (task_type, task_id) == ("worker", 2) and spec == {"worker": workers},
            f"TFConfigClusterResolver read task {task_type} {task_id} and cluster {spec}: not what you meant.",
        )
        other = json.loads(tf_config(list(workers), 0))
        expect(
            other["cluster"] == config["cluster"] and other["task"]["index"] == 0,
            "Every worker gets the same 'cluster'; only 'task' changes from one worker to the next.",
        )
    passed("tf_config", "TensorFlow reads your TF_CONFIG as worker 2 of a 3-worker cluster.")


def check_batch_sizes(batch_sizes: Callable[[int, int, int], tuple[int, int]]) -> None:
    """``batch_sizes(per_replica, workers, replicas_per_worker)`` -> ``(global, per_worker)``."""
    import tensorflow as tf

    with exercise("batch_sizes"):
        for per_replica, workers, local in [(8, 2, 1), (32, 4, 2), (64, 1, 8), (16, 3, 4)]:
            got = batch_sizes(per_replica, workers, local)
            expect(
                isinstance(got, tuple) and len(got) == 2,
                f"Return a tuple (global_batch, per_worker_batch); got {got!r}.",
            )
            global_batch, per_worker = (int(v) for v in got)
            want = (per_replica * workers * local, per_replica * local)
            if global_batch == per_replica * local and workers > 1:
                expect(False, f"batch_sizes({per_replica}, {workers}, {local}): the global batch "
                       f"{global_batch} counts only one worker's replicas. It spans every replica of "
                       "every worker: per_replica x workers x replicas_per_worker.")
            expect(
                (global_batch, per_worker) == want,
                f"batch_sizes({per_replica}, {workers}, {local}) should be {want}, got {got!r}. "
                "The global batch spans every replica of every worker; each worker's pipeline "
                "delivers the batches of its own replicas.",
            )
            # What TensorFlow computes from the global batch on each input pipeline (one per worker).
            context = tf.distribute.InputContext(
                num_input_pipelines=workers, input_pipeline_id=0, num_replicas_in_sync=workers * local
            )
            expect(
                context.get_per_replica_batch_size(global_batch) == per_replica,
                f"TensorFlow splits a global batch of {global_batch} into a per-replica batch of "
                f"{context.get_per_replica_batch_size(global_batch)}, not {per_replica}.",
            )
    passed("batch_sizes", "global batch = per-replica batch x all replicas of all workers.")


def check_checkpoint_dir(checkpoint_dir: Callable[[str, str, int, dict], str]) -> None:
    """``checkpoint_dir(base, task_type, task_id, cluster)``: the real folder or a temporary one."""
    from ..workers.multi_worker import write_dir

    two_workers = {"worker": ["a:1", "b:1"]}
    with_chief = {"chief": ["c:1"], "worker": ["a:1", "b:1"]}
    cases = [
        (two_workers, "worker", 0),
        (two_workers, "worker", 1),
        (with_chief, "chief", 0),
        (with_chief, "worker", 0),
        (with_chief, "worker", 1),
    ]
    with exercise("checkpoint_dir"):
        for cluster, task_type, task_id in cases:
            got = os.path.normpath(str(checkpoint_dir("run", task_type, task_id, cluster)))
            want = os.path.normpath(write_dir("run", task_type, task_id, cluster))
            if got != want and task_type == "worker" and task_id == 0 and "chief" in cluster:
                expect(False, "In a cluster with a 'chief' job, worker 0 is an ordinary worker: only "
                       f"the chief writes to run/checkpoints; worker 0 writes to {want}.")
            expect(
                got == want,
                f"checkpoint_dir('run', {task_type!r}, {task_id}, {cluster}) should be {want!r}, got {got!r}. "
                "The chief (the 'chief' task, or worker 0 when there is none) writes to "
                "base/checkpoints; every other task to base/workertemp_<task_id>/checkpoints.",
            )
    passed("checkpoint_dir", "only the chief writes to the real checkpoint folder.")


def _reference_examples(count: int, global_batch: int, workers: int, worker: int, policy: str) -> list[int]:
    ids = list(range(count))
    batches = [ids[i : i + global_batch] for i in range(0, count, global_batch)]
    if policy == "OFF":
        return ids
    share = global_batch // workers
    return [i for batch in batches for i in batch[worker * share : (worker + 1) * share]]


def check_examples_seen(
    examples_seen: Callable[[int, int, int, int, str], list[int]],
    observed: Optional[dict[str, dict[str, list[int]]]] = None,
) -> None:
    """``examples_seen(count, global_batch, workers, worker, policy)`` for ``range(count).batch(global_batch)``.

    ``observed`` is what the workers of the notebook's cluster reported (``{"worker 0":
    {"DATA": [...], "OFF": [...]}, ...}``): the answer must agree with the real run.
    """
    with exercise("examples_seen"):
        cases = [(16, 4, 2), (24, 6, 3), (32, 8, 4)]
        for count, global_batch, workers in cases:
            for worker in range(workers):
                for policy in ("DATA", "OFF"):
                    got = [int(i) for i in examples_seen(count, global_batch, workers, worker, policy)]
                    want = _reference_examples(count, global_batch, workers, worker, policy)
                    if policy == "DATA" and sorted(got) == list(range(worker, count, workers)):
                        expect(False, f"examples_seen({count}, {global_batch}, {workers}, {worker}, 'DATA'): "
                               "you took every n-th example. Under DATA each *global batch* is split: "
                               "worker w gets the w-th slice of global_batch // workers examples of it.")
                    expect(
                        got == want,
                        f"examples_seen({count}, {global_batch}, {workers}, {worker}, {policy!r}) should be "
                        f"{want}, got {got}. DATA: each global batch is cut into one consecutive slice "
                        "per worker. OFF: no sharding, every worker reads everything.",
                    )
        if observed:
            for task, seen in observed.items():
                worker = int(task.split()[-1])
                for policy, ids in seen.items():
                    name = "OFF" if policy.startswith("OFF") else "DATA" if "DATA" in policy else None
                    if name is None:
                        continue
                    expect(
                        [int(i) for i in examples_seen(16, 4, 2, worker, name)] == list(ids),
                        f"The cluster's {task} read {ids} under {policy}; your function disagrees.",
                    )
    passed("examples_seen", "your sharding matches what the workers of the cluster read.")
