"""The checks of notebook 06 pass on right answers and fail, with the right hint, on planted mistakes.

The session has 2 virtual CPUs (tests/conftest.py): each coding check judges the answer on one
device and on 2 replicas.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from checking import blank, fails_with

from course_utils.exercises import tpu_and_hardware_detection as ex

# --------------------------------------------------------------------------- tpu_input_fn


def input_fn(per_replica: bool = True, drop: bool = True, shard: bool = True):
    """The TPU guide's dataset_fn; each flag off plants one mistake."""

    def make_dataset_fn(x, y, global_batch):
        def dataset_fn(ctx):
            dataset = tf.data.Dataset.from_tensor_slices((x, y))
            if shard:
                dataset = dataset.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            size = ctx.get_per_replica_batch_size(global_batch) if per_replica else global_batch
            return dataset.batch(size, drop_remainder=drop)

        return dataset_fn

    return make_dataset_fn


def test_tpu_input_fn(capsys) -> None:
    ex.check_tpu_input_fn(input_fn())
    assert "[pass] tpu_input_fn" in capsys.readouterr().out


def test_tpu_input_fn_global_batch_on_every_replica() -> None:
    fails_with(
        ex.check_tpu_input_fn,
        input_fn(per_replica=False),
        "Exercise tpu_input_fn",
        "the whole global batch",
        "get_per_replica_batch_size",
    )


def test_tpu_input_fn_short_last_batch() -> None:
    fails_with(ex.check_tpu_input_fn, input_fn(drop=False), "batch dimension is None", "drop_remainder=True")


def test_tpu_input_fn_every_host_reads_everything() -> None:
    fails_with(ex.check_tpu_input_fn, input_fn(shard=False), "both read examples", "dataset.shard(")


def test_tpu_input_fn_shuffled_and_blank() -> None:
    def shuffled(x, y, global_batch):
        def dataset_fn(ctx):
            dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=1)
            return dataset.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

        return dataset_fn

    fails_with(ex.check_tpu_input_fn, shuffled, "On one device, the batches should be the examples in order")
    fails_with(ex.check_tpu_input_fn, lambda x, y, g: None, "should return a function")
    fails_with(ex.check_tpu_input_fn, blank, "not done yet")


# --------------------------------------------------------------------------- tpu_ready_loop


def replica_step(model, optimizer, images, labels, global_batch, mean=False):
    """The notebook's replica step (``mean=True``: the tf.reduce_mean mistake)."""
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        loss = (
            tf.reduce_mean(per_example)
            if mean
            else tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        )
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def whole_batches(n, global_batch):
    return n // global_batch


def loop(
    build=True,
    drop=True,
    tensor_steps=True,
    per_call=True,
    mean=False,
    op="SUM",
    restart=False,
    closure=True,
    steps_of=whole_batches,
    repeat=False,
    extra_call=False,
):
    """The TPU-ready loop; each flag off (``mean`` on, ``op="MEAN"``, ``restart`` on: a new
    iterator for every call; ``closure`` off: the model and optimizer in ``strategy.run``'s args,
    which TPUStrategy.run converts to tensors and fails) plants one mistake. The off-by-ones:
    ``steps_of(len(x), global_batch)`` other than the number of whole batches, ``repeat`` (the TPU
    guide's repeated dataset, which never runs out), ``extra_call`` (whole // steps_per_call + 1 calls:
    right for 5 steps in calls of 2, one call of 0 steps too many for 6)."""

    def tpu_ready_loop(strategy, model, optimizer, x, y, global_batch, steps_per_call):
        if build:
            with strategy.scope():
                optimizer.build(model.trainable_variables)
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        dataset = (dataset.repeat() if repeat else dataset).batch(global_batch, drop_remainder=drop)
        distributed = strategy.experimental_distribute_dataset(dataset)
        iterator = iter(distributed)

        def step(images, labels):
            return replica_step(model, optimizer, images, labels, global_batch, mean)

        @tf.function
        def train_steps(iterator, steps):
            total = tf.constant(0.0)
            for _ in tf.range(steps):
                images, labels = next(iterator)
                if closure:
                    per_replica = strategy.run(step, args=(images, labels))
                else:
                    per_replica = strategy.run(
                        replica_step, args=(model, optimizer, images, labels, global_batch, mean)
                    )
                total += strategy.reduce(op, per_replica, axis=None)
            return total / tf.cast(steps, tf.float32)

        whole = steps_of(len(x), global_batch)
        chunk = steps_per_call if per_call else 1
        losses = []
        calls = whole // chunk + 1 if extra_call else -(-whole // chunk)  # whole // chunk + 1: off by one
        for start in range(0, calls * chunk, chunk):
            steps = max(0, min(chunk, whole - start))
            steps = tf.constant(steps) if tensor_steps else steps
            losses.append(float(train_steps(iter(distributed) if restart else iterator, steps)))
        return train_steps, losses

    return tpu_ready_loop


def naive_loop(strategy, model, optimizer, x, y, global_batch, steps_per_call):
    """The notebook's naive loop: eager strategy.run, a short last batch, one step at a time."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    losses = []
    for images, labels in strategy.experimental_distribute_dataset(dataset):
        per_replica = strategy.run(replica_step, args=(model, optimizer, images, labels, global_batch))
        losses.append(float(strategy.reduce("SUM", per_replica, axis=None)))
    return None, losses


def test_tpu_ready_loop(capsys) -> None:
    ex.check_tpu_ready_loop(loop())
    assert "[pass] tpu_ready_loop" in capsys.readouterr().out


def test_tpu_ready_loop_naive_loop_runs_eagerly() -> None:
    fails_with(ex.check_tpu_ready_loop, naive_loop, "Exercise tpu_ready_loop", "runs eagerly", "@tf.function")


def test_tpu_ready_loop_model_in_strategy_run_args() -> None:
    # The loop that passed on MirroredStrategy and fails on a TPU: TypeError, "Failed to convert
    # elements of <Sequential ...> to Tensor".
    fails_with(
        ex.check_tpu_ready_loop,
        loop(closure=False),
        "On one device, strategy.run got a Sequential, a SGD in its args",
        "pass only tensors to strategy.run; close over the model and optimizer",
    )


def test_tpu_ready_loop_unbuilt_optimizer() -> None:
    # A second trace on one device; the crash of keras-team/keras#23085 on 2 replicas.
    fails_with(ex.check_tpu_ready_loop, loop(build=False), "On one device", "never built", "optimizer.build(")


def test_tpu_ready_loop_no_drop_remainder() -> None:
    fails_with(ex.check_tpu_ready_loop, loop(drop=False), "batch dimension is None", "drop_remainder=True")


def test_tpu_ready_loop_one_call_per_step() -> None:
    fails_with(ex.check_tpu_ready_loop, loop(per_call=False), "one call per step", "tf.range(steps)")


def test_tpu_ready_loop_python_steps_retrace() -> None:
    fails_with(ex.check_tpu_ready_loop, loop(tensor_steps=False), "traced 2 times", "tf.constant(n)")


def test_tpu_ready_loop_reduce_mean_and_blank() -> None:
    fails_with(ex.check_tpu_ready_loop, loop(mean=True), "On 2 replicas, the weights moved", "replica_step")
    fails_with(ex.check_tpu_ready_loop, blank, "not done yet")


# --------------------------------------------------------------------------- global_batches

RIGHT = {"v2-8": 512, "v5e-1": 64, "4 GPUs": 256}


def test_global_batches(capsys) -> None:
    ex.check_global_batches(lambda: dict(RIGHT))
    out = capsys.readouterr().out
    assert "[pass] global_batches" in out and "4 GPUs 256" in out


def test_global_batches_every_tpu_has_8_cores() -> None:
    fails_with(
        ex.check_global_batches,
        lambda: {**RIGHT, "v5e-1": 512},
        "single chip with one core",
        "Not every TPU runtime has 8 cores",
    )


def test_global_batches_counting_chips() -> None:
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "v2-8": 256}, "counts its 4 chips")


def test_global_batches_gpus_and_shape() -> None:
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "4 GPUs": 64}, "MirroredStrategy over all 4 GPUs")
    fails_with(ex.check_global_batches, lambda: [512, 64, 256], "Return a dict")
    fails_with(ex.check_global_batches, blank, "not done yet")


# --------------------------------------------------------------------------- more planted mistakes


def test_tpu_input_fn_repeating_dataset_passes(capsys) -> None:
    # The TPU guide's training datasets repeat: the check reads one pass and must not hang.
    def repeating(x, y, global_batch):
        def dataset_fn(ctx):
            dataset = tf.data.Dataset.from_tensor_slices((x, y))
            dataset = dataset.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).repeat()
            return dataset.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

        return dataset_fn

    ex.check_tpu_input_fn(repeating)
    assert "[pass] tpu_input_fn" in capsys.readouterr().out


def test_tpu_input_fn_sharded_by_replica() -> None:
    def by_replica(x, y, global_batch):
        def dataset_fn(ctx):
            dataset = tf.data.Dataset.from_tensor_slices((x, y))
            dataset = dataset.shard(ctx.num_replicas_in_sync, ctx.input_pipeline_id)
            return dataset.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

        return dataset_fn

    fails_with(ex.check_tpu_input_fn, by_replica, "On 2 replicas the examples of a step are not one device's")


def test_tpu_ready_loop_mean_of_replica_losses() -> None:
    fails_with(
        ex.check_tpu_ready_loop, loop(op="MEAN"), "On 2 replicas, the losses of the calls", "reduce(SUM"
    )


def test_tpu_ready_loop_new_iterator_per_call() -> None:
    fails_with(
        ex.check_tpu_ready_loop,
        loop(restart=True),
        "On one device",
        "started a new iterator",
        "Make the iterator once",
    )


# --------------------------------------------------------------------------- off by one
# 44 examples leave 4 over; the check also trains on 48 (6 whole batches, calls of 2, 2, 2), where
# a count that the remainder hides is off. Before the second data, (n - 1) // g and one call too
# many passed; one step too many raised a bare OutOfRangeError or blamed drop_remainder.


def test_tpu_ready_loop_one_step_too_few() -> None:
    fails_with(
        ex.check_tpu_ready_loop,
        loop(steps_of=lambda n, g: (n - 1) // g),
        "On one device and 48 examples, the optimizer took 5 steps, 1 too few",
        "6 whole batches of 8 (len(x) // global_batch)",
    )


def test_tpu_ready_loop_one_step_too_many() -> None:
    ceil = lambda n, g: -(-n // g)  # noqa: E731
    fails_with(
        ex.check_tpu_ready_loop,
        loop(steps_of=ceil),
        "On one device, a step asked for a batch after the last",
        "44 examples make 5 whole batches of 8",
        "the last call taking only the rest",
    )
    fails_with(
        ex.check_tpu_ready_loop,
        loop(steps_of=ceil, repeat=True),
        "On one device, the optimizer took 6 steps, 1 too many",
        "44 examples make 5 whole batches",
    )


def test_tpu_ready_loop_one_call_too_many() -> None:
    fails_with(
        ex.check_tpu_ready_loop,
        loop(extra_call=True),
        "On one device and 48 examples, expected 3 calls of at most 2 steps",
        "got 4 losses",
    )


def test_tpu_ready_loop_one_step_too_many_without_drop_remainder() -> None:
    # The short last batch trained on as a 6th step: the shape that a TPU compiles again is named.
    fails_with(
        ex.check_tpu_ready_loop,
        loop(steps_of=lambda n, g: -(-n // g), drop=False),
        "batch dimension is None",
        "drop_remainder=True",
    )
