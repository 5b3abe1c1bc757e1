"""Notebook 07: the checks of its exercises (multi-worker training)."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

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
                expect(
                    False,
                    f"batch_sizes({per_replica}, {workers}, {local}): the global batch "
                    f"{global_batch} counts only one worker's replicas. It spans every replica of "
                    "every worker: per_replica x workers x replicas_per_worker.",
                )
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
                        expect(
                            False,
                            f"examples_seen({count}, {global_batch}, {workers}, {worker}, 'DATA'): "
                            "you took every n-th example. Under DATA each *global batch* is split: "
                            "worker w gets the w-th slice of global_batch // workers examples of it.",
                        )
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


# --------------------------------------------------------------------------- the worker program

#: The training schedule of the notebook's worker program (its constants).
STEPS_PER_EPOCH, EPOCHS, SAVE_EVERY = 4, 3, 5


def _function_from_program(program: Any, name: str) -> Callable:
    """The function ``name`` of the worker program file, without running the program."""
    path = Path(program)
    expect(
        path.is_file(),
        f"There is no worker program at {path.name}: run the cell that writes it "
        "(the one starting with %%writefile).",
    )
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    expect(nodes, f"The worker program has no function {name}(): keep its name and arguments.")
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=list[ast.stmt](nodes), type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def _data(run: Any, task: str) -> dict:
    return dict(run[task].data) if run is not None else {}


def _examples_by_epoch(killed: Any, resumed: Any, restored: int) -> dict[int, list[int]]:
    """Every example id trained, per epoch, by both workers: the interrupted run up to the
    checkpoint it left, then the restarted run."""
    seen: dict[int, list[int]] = {}
    for run, keep in ((killed, lambda step: step <= restored), (resumed, lambda step: True)):
        for task in ("worker 0", "worker 1"):
            for step, epoch, _loss, ids, _time in _data(run, task).get("steps", []):
                if keep(step):
                    seen.setdefault(int(epoch), []).extend(int(i) for i in ids)
    return seen


def check_resume_point(program: Any, killed: Any, resumed: Any, uninterrupted: Any = None) -> None:
    """The worker program's ``resume_point(global_step, steps_per_epoch)``, judged by the cluster.

    ``killed`` is the result of the run whose worker 1 was killed (``WorkerFailed.result``),
    ``resumed`` the result of the restarted cluster (``None`` when it failed), ``uninterrupted``
    the result of a run of the same program that was never stopped.
    """
    with exercise("resume_point"):
        resume_point = _function_from_program(program, "resume_point")
        first = resume_point(5, STEPS_PER_EPOCH)
        expect(
            isinstance(first, (tuple, list)) and len(first) == 2,
            f"Return a pair (epoch, skip); resume_point(5, 4) returned {first!r}.",
        )
        expect(
            resumed is not None,
            "The restarted cluster did not finish (its cell shows why): fix resume_point, run the "
            "cell that writes the program, then the two cluster cells, then this check.",
        )
        chief, other = _data(resumed, "worker 0"), _data(resumed, "worker 1")
        restored: Any = chief.get("restored")
        expect(
            restored is not None,
            "The restarted cluster restored no checkpoint: run the cell that "
            "kills a worker first, then the restart, with the same run folder.",
        )
        expect(
            [s[2] for s in chief["steps"]] == [s[2] for s in other["steps"]],
            "After the restart the two workers reported different losses: every worker must resume "
            "at the same place, so resume_point must depend only on its arguments.",
        )
        per_epoch = _examples_by_epoch(killed, resumed, restored)
        epoch_size = STEPS_PER_EPOCH * 16
        for epoch in range(EPOCHS):
            ids = per_epoch.get(epoch, [])
            twice = len(ids) - len(set(ids))
            missing = epoch_size - len(set(ids))
            expect(
                twice == 0,
                f"Epoch {epoch + 1} trained {twice} examples twice: after the restart the "
                "workers redid batches that the checkpoint already held. The checkpoint's global step "
                "counts every batch trained since the start, across epochs: skip the ones of this epoch.",
            )
            expect(
                missing == 0,
                f"Epoch {epoch + 1} never trained {missing} of its {epoch_size} examples: "
                "after the restart the workers skipped batches that the checkpoint did not hold. "
                "optimizer.iterations is the number of steps done, so the next batch has that index.",
            )
        final = chief["steps"][-1][0]
        expect(
            final == EPOCHS * STEPS_PER_EPOCH,
            f"The restarted run ended at global step {final}, not {EPOCHS * STEPS_PER_EPOCH}: "
            "the epochs after the restart were not the ones the checkpoint left unfinished.",
        )
        if uninterrupted is not None:
            expect(
                chief.get("weights") == _data(uninterrupted, "worker 0").get("weights"),
                "The resumed run's final weights differ from the run that was never stopped.",
            )
        for step in (0, 4, 6, 11, 7):
            want = divmod(step, STEPS_PER_EPOCH if step != 7 else 3)
            got = tuple(int(v) for v in resume_point(step, STEPS_PER_EPOCH if step != 7 else 3))
            expect(
                got == want,
                f"resume_point({step}, {4 if step != 7 else 3}) should be {want}, got {got}: "
                "your answer fits this cluster's numbers only.",
            )
    passed(
        "resume_point",
        f"the restarted cluster resumed at global step {restored + 1}, trained every "
        "example once per epoch on both workers and ended with the weights of the run never stopped.",
    )


def check_restart_step(prediction: Any, killed: Any, resumed: Any = None) -> None:
    """Predict-then-run: the first global step the restarted cluster computes."""
    with exercise("restart_step"):
        expect(prediction is not None, "Set PREDICTION to a whole number before running the cluster cells.")
        expect(
            isinstance(prediction, (int, np.integer)) and not isinstance(prediction, bool),
            f"PREDICTION should be a whole number (a global step), got {prediction!r}.",
        )
        saved = [int(step) for step, _time in _data(killed, "worker 0").get("saved", [])]
        held = max(int(s[0]) for s in _data(killed, "worker 0").get("steps", [[0]]))
        expect(saved, "The interrupted run saved no checkpoint: run the cell that kills a worker first.")
        actual = saved[-1] + 1
        if resumed is not None:
            actual = int(_data(resumed, "worker 0")["steps"][0][0])
        ends = [s for s in saved if s % STEPS_PER_EPOCH == 0]
        if prediction == held + 1:
            expect(
                False,
                f"You predicted {prediction}, the cluster computed step {actual} first: step {held} "
                f"was trained but never saved, and a restart begins from the last checkpoint (step {saved[-1]}).",
            )
        if ends and prediction == ends[-1] + 1 and actual != prediction:
            expect(
                False,
                f"You predicted {prediction}, the cluster computed step {actual} first: you counted the "
                f"end-of-epoch saves only; the chief also saves every {SAVE_EVERY} global steps.",
            )
        expect(
            int(prediction) == actual,
            f"You predicted {prediction}, the cluster computed step {actual} first: the checkpoints were "
            f"written after steps {saved} and a restart continues after the last one.",
        )
    passed("restart_step", f"the restarted cluster began at global step {actual}.")
