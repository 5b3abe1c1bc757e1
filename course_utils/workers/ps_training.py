"""Notebook 08: the program of an in-process parameter-server cluster with ``ClusterCoordinator``.

As in the TensorFlow parameter-server tutorial, one process hosts the whole cluster: it starts
``tf.distribute.Server`` objects for the workers and the parameter servers on free ports, then
acts as the coordinator. It runs in a fresh process (started by the notebook through
:func:`course_utils.cluster.run_module`) because connecting to a cluster changes TensorFlow's
context for good: the notebook's own kernel keeps its devices, and re-running the cell starts
a new cluster on new ports instead of clashing with the old one.

    python -m course_utils.workers.ps_training train      # async training, counted
    python -m course_utils.workers.ps_training partition  # which ps holds which shard
    python -m course_utils.workers.ps_training keras      # Model.fit: Keras 3 vs tf-keras
    python -m course_utils.workers.ps_training shards     # the run of exercise shard_count

Lines that depend on timing (who ran which step, how stale an update was) start with
``[async, varies per run]``; everything else is the same on every run.
"""

from __future__ import annotations

import argparse
import multiprocessing
from typing import Any, Callable

import numpy as np

from ..cluster.spec import pick_ports
from ..errors import shorten_error
from .common import FEATURES, make_examples, report, say, start

VARIES = "[async, varies per run]"


def in_process_cluster(tf: Any, num_workers: int, num_ps: int) -> Any:
    """Start ``num_workers`` worker servers and ``num_ps`` parameter servers in this process.

    This is the TensorFlow tutorial's ``create_in_process_cluster``: every server listens on a
    free port; the returned resolver tells ``ParameterServerStrategy`` where they are.
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


def cluster_ports(resolver: Any) -> list[int]:
    """The ports of every server of a cluster (the notebook checks they are free afterwards)."""
    spec = resolver.cluster_spec().as_dict()
    return [int(address.rsplit(":", 1)[1]) for job in spec.values() for address in job]


def short_device(device: str) -> str:
    """``/job:ps/replica:0/task:1/device:CPU:0`` -> ``ps 1``."""
    parts = dict(p.split(":", 1) for p in device.strip("/").split("/") if ":" in p)
    return f"{parts.get('job', '?')} {parts.get('task', '?')}"


def tf_variable(v: Any) -> Any:
    """The ``tf.Variable`` behind a Keras 3 variable (or the variable itself)."""
    return getattr(v, "value", v) if hasattr(v, "path") else v


def show_shards(variable: Any, detail: Callable[[Any], str] = lambda shard: "") -> list[list]:
    """Say which rows each shard of a (partitioned) variable holds and where it lives, one line a
    shard (``detail(shard)`` adds to the line); return ``[[first row, end row, "ps N"], ...]``."""
    layout: list[list] = []
    for i, shard in enumerate(shards_of(variable)):
        start, rows, device = layout[-1][1] if layout else 0, int(shard.shape[0]), short_device(shard.device)
        say(f"  shard {i}: rows {start}-{start + rows - 1}{detail(shard)} on {device}")
        layout.append([start, start + rows, device])
    return layout


def shards_of(variable: Any) -> list[Any]:
    """The shards of a partitioned variable (a variable that is not partitioned is one shard)."""
    v = tf_variable(variable)
    return list(getattr(v, "variables", [v]))


# ----------------------------------------------------------------------------- parts


def part_train(tf: Any, steps: int, global_batch: int) -> None:
    import keras

    resolver = in_process_cluster(tf, num_workers=2, num_ps=2)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    say(
        "in-process cluster: 2 workers and 2 parameter servers (4 tf.distribute.Server objects on free ports)"
    )
    say(
        f"ParameterServerStrategy: {strategy.num_replicas_in_sync} replica per step; this process is the coordinator"
    )
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential(
            [keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
        )
        optimizer = keras.optimizers.SGD(learning_rate=0.02)
        optimizer.build(model.trainable_variables)
        updates = tf.Variable(0, dtype=tf.int64, name="updates")  # tf.Variable: atomic assign_add

    say("where the variables live:")
    rows = [(v.path, tuple(v.shape), short_device(tf_variable(v).device)) for v in model.trainable_variables]
    rows.append(("updates (our counter)", (), short_device(updates.device)))
    width = max(len(r[0]) for r in rows)
    for name, shape, device in rows:
        say(f"  {name:<{width}}  {str(shape):<8}  on {device}")

    x, y = make_examples(1024)

    contexts = []

    def dataset_fn(input_context: Any) -> Any:
        # With ParameterServerStrategy every worker gets input_pipeline_id 0 of 1 pipeline: no
        # sharding. Each worker shuffles its own copy (seeded with the worker's index, or all
        # workers would read the same order) and repeats it forever: training counts steps.
        contexts.append((input_context.input_pipeline_id, input_context.num_input_pipelines))
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        batch = input_context.get_per_replica_batch_size(global_batch)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=tf.cast(worker, tf.int64))
        return dataset.repeat().batch(batch).prefetch(2)

    per_worker_dataset = coordinator.create_per_worker_dataset(
        strategy.distribute_datasets_from_function(dataset_fn)
    )
    per_worker_iterator = iter(per_worker_dataset)
    ids = sorted({c[0] for c in contexts})
    pipelines = sorted({c[1] for c in contexts})
    say(
        f"dataset_fn got input_pipeline_id {ids} of num_input_pipelines {pipelines}: no sharding by TensorFlow"
    )

    @tf.function
    def train_step(iterator: Any) -> Any:
        def replica_fn(batch: Any) -> Any:
            features, labels = batch
            # The optimizer's step counter as this step found it: two steps that run at the same
            # time on different workers read the same value.
            seen = tf.identity(optimizer.iterations)
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(features, training=True) - labels), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            updates.assign_add(1)  # a tf.Variable's assign_add is atomic: no increment is lost
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            return loss, seen, worker, tf.reduce_sum(labels)

        return strategy.run(replica_fn, args=(next(iterator),))

    results = [coordinator.schedule(train_step, args=(per_worker_iterator,)) for _ in range(steps)]
    say(f"scheduled {steps} steps: schedule() returned a RemoteValue at once for each; join() waited for all")
    coordinator.join()
    values = [r.fetch() for r in results]
    losses = [float(v[0]) for v in values]
    seen = [int(v[1]) for v in values]
    workers = [int(v[2]) for v in values]
    firsts = {w: float(values[workers.index(w)][3]) for w in (0, 1) if w in workers}
    counted = int(updates.numpy())
    iterations = int(optimizer.iterations.numpy())
    overlapped = sum(seen.count(value) - 1 for value in set(seen))
    say(
        f"updates applied to the parameter servers: {counted} (one per step: nothing is averaged across workers)"
    )
    say(f"examples used: {steps} steps x {global_batch} = {steps * global_batch}")
    say(
        f"the first batches of worker 0 and worker 1 differ (each shuffled its own copy): {firsts.get(0) != firsts.get(1)}"
    )
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    say(f"mean of the first 5 steps loss={first:.4f}, of the last 5 steps loss={last:.4f}")
    say(f"{VARIES} steps run by worker 0: {workers.count(0)}, by worker 1: {workers.count(1)}")
    say(
        f"{VARIES} {overlapped} steps ran at the same time as another (they read the same optimizer.iterations)"
    )
    say(f"{VARIES} optimizer.iterations = {iterations} of {steps} (Keras 3 adds 1 by a read, then a write)")
    report(
        ports=cluster_ports(resolver),
        steps=steps,
        updates=counted,
        iterations=iterations,
        losses=losses,
        seen=seen,
        overlapped=overlapped,
        workers=workers,
        first=first,
        last=last,
    )


def part_partition(tf: Any) -> None:
    import keras

    resolver = in_process_cluster(tf, num_workers=1, num_ps=2)
    partitioners = tf.distribute.experimental.partitioners
    min_size = partitioners.MinSizePartitioner(min_shard_bytes=64 << 10, max_shards=2)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=min_size)
    say("in-process cluster: 1 worker and 2 parameter servers")
    say("partitioner: MinSizePartitioner(min_shard_bytes=64 KiB, max_shards=2)")
    with strategy.scope():
        embedding = keras.layers.Embedding(1000, 32, name="embedding")
        embedding.build((None,))
        dense = keras.layers.Dense(4, name="dense")
        dense.build((None, 32))
    layout: dict[str, list] = {}
    for label, variable in [
        ("embedding (1000, 32) float32 = 125 KiB", embedding.embeddings),
        ("dense kernel (32, 4) float32 = 512 bytes", dense.kernel),
    ]:
        count = len(shards_of(variable))
        say(f"{label}: {type(tf_variable(variable)).__name__} with {count} shard{'s' if count != 1 else ''}")
        layout[label.split(" ")[0]] = show_shards(variable, lambda shard: f" {tuple(shard.shape)}")

    # A lookup gathers rows from every shard that holds one of the ids.
    ids = tf.constant([3, 731])
    vectors = embedding(ids)
    say(
        f"embedding lookup of ids [3, 731] -> shape {tuple(vectors.shape)} (row 3 from ps 0, row 731 from ps 1)"
    )

    fixed = tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=partitioners.FixedShardsPartitioner(num_shards=3)
    )
    with fixed.scope():
        small = tf.Variable(tf.zeros((10, 4)), name="small")
    say("FixedShardsPartitioner(num_shards=3) on a (10, 4) variable, 2 parameter servers:")
    layout["fixed"] = show_shards(small)
    report(layout=layout, ports=cluster_ports(resolver))


def part_keras(tf: Any) -> None:
    import keras

    resolver = in_process_cluster(tf, num_workers=2, num_ps=1)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    say(f"Keras {keras.__version__}:")
    found: dict[str, Any] = {}
    try:
        keras.utils.experimental.DatasetCreator
        found["dataset_creator"] = "present"
    except AttributeError as error:
        found["dataset_creator"] = shorten_error(f"AttributeError: {error}")
    say(f"  keras.utils.experimental.DatasetCreator -> {found['dataset_creator']}")
    x, y = make_examples(256)
    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    try:
        model.fit(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat(),
            epochs=1,
            steps_per_epoch=4,
            verbose=0,
        )
        found["fit"] = "works"
    except Exception as error:
        found["fit"] = shorten_error(f"{type(error).__name__}: {error}")
    say(f"  model.fit(dataset) -> {found['fit']}")

    import tf_keras

    say(f"tf-keras {tf_keras.__version__} (what tf.keras is with TF_USE_LEGACY_KERAS=1):")
    with strategy.scope():
        legacy = tf_keras.Sequential([tf_keras.Input((FEATURES,)), tf_keras.layers.Dense(1)])
        legacy.compile(optimizer=tf_keras.optimizers.SGD(0.05), loss="mse", steps_per_execution=2)

    def dataset_fn(input_context: Any) -> Any:
        batch = input_context.get_per_replica_batch_size(16)
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat().batch(batch)

    history = legacy.fit(
        tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=2, steps_per_epoch=8, verbose=0
    )
    losses = [float(v) for v in history.history["loss"]]
    say(
        f"  model.fit(DatasetCreator(dataset_fn), epochs=2, steps_per_epoch=8) -> works, {len(losses)} epochs"
    )
    found["legacy_losses"] = losses
    report(ports=cluster_ports(resolver), **found)


def part_shards(tf: Any) -> None:
    """Two embeddings under ``MinSizePartitioner(16 KiB, 4)`` on 2 parameter servers: the run that
    exercise ``shard_count`` predicts (how many shards each gets) and ``ps_placement`` explains."""
    import keras

    resolver = in_process_cluster(tf, num_workers=1, num_ps=2)
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=16 << 10, max_shards=4
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    say("in-process cluster: 1 worker and 2 parameter servers")
    say("partitioner: MinSizePartitioner(min_shard_bytes=16 KiB, max_shards=4)")
    layout: dict[str, list] = {}
    with strategy.scope():
        for rows in (300, 1000):  # created in this order
            embedding = keras.layers.Embedding(rows, 32, name=f"embedding_{rows}")
            embedding.build((None,))
            count = len(shards_of(embedding.embeddings))
            say(
                f"embedding_{rows} ({rows}, 32) float32 = {rows * 32 * 4 / 1024:g} KiB: "
                f"{count} shard{'s' if count != 1 else ''}"
            )
            layout[f"embedding_{rows}"] = show_shards(
                embedding.embeddings, lambda shard: f" ({int(shard.shape[0]) * 32 * 4 / 1024:g} KiB)"
            )
    report(layout=layout, ports=cluster_ports(resolver))


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils.workers.ps_training")
    parser.add_argument("part", choices=["train", "partition", "keras", "shards"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--global-batch", type=int, default=16)
    args = parser.parse_args(argv)
    tf = start()
    if args.part == "train":
        part_train(tf, args.steps, args.global_batch)
    elif args.part == "partition":
        part_partition(tf)
    elif args.part == "shards":
        part_shards(tf)
    else:
        part_keras(tf)


if __name__ == "__main__":
    main()
