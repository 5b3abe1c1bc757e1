"""The checks of notebook 06 pass on right answers and fail, with the right hint, on planted mistakes.

The session has 2 virtual CPUs (tests/conftest.py): each coding check judges the answer on one
device and on 2 replicas.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from checking import blank, fails_with

from course_utils.errors import ExerciseError
from course_utils.exercises import tpu_and_hardware_detection as ex

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


def test_tpu_ready_loop_optimizer_built_outside_the_scope() -> None:
    # On 2 replicas MirroredStrategy raises RuntimeError: Need to be inside "with strategy.scope()" for
    # <... object at 0x...>; the hint names the fix, not the object.
    inner = loop(build=False)

    def built_outside(strategy, model, optimizer, x, y, global_batch, steps_per_call):
        optimizer.build(model.trainable_variables)
        return inner(strategy, model, optimizer, x, y, global_batch, steps_per_call)

    message = fails_with(
        ex.check_tpu_ready_loop,
        built_outside,
        "On 2 replicas, a variable was made outside strategy.scope(): build the optimizer inside",
    )
    assert " at 0x" not in message


def test_tpu_ready_loop_no_drop_remainder() -> None:
    fails_with(ex.check_tpu_ready_loop, loop(drop=False), "batch dimension is None", "drop_remainder=True")


def test_tpu_ready_loop_one_call_per_step() -> None:
    fails_with(
        ex.check_tpu_ready_loop, loop(per_call=False), "one call per step", "several steps inside one call"
    )


def test_tpu_ready_loop_python_steps_retrace() -> None:
    fails_with(
        ex.check_tpu_ready_loop, loop(tensor_steps=False), "traced 2 times", "a new trace for each new value"
    )


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
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "v2-8": 64}, "count TPU devices (cores on a v2)")
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "v5e-1": 32}, "one replica x 64 examples per")


def test_global_batches_gpus_and_shape() -> None:
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "4 GPUs": 64}, "MirroredStrategy over all 4 GPUs")
    fails_with(ex.check_global_batches, lambda: [512, 64, 256], "Return a dict")
    fails_with(ex.check_global_batches, blank, "not done yet")


# --------------------------------------------------------------------------- more planted mistakes


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


# --------------------------------------------------------------------------- trace_count

SHORT, DROPPED = ex.TRACE_KEYS


def traces(short, dropped):
    return {SHORT: short, DROPPED: dropped}


def test_trace_count(capsys) -> None:
    ex.check_trace_count(traces(2, 1))
    out = capsys.readouterr().out
    assert "[pass] trace_count: 2 epochs, traced for [(4,), (2,)] without drop_remainder and [(4,)]" in out


def test_trace_count_reference_is_counted() -> None:
    assert ex.traced_shapes(False) == [(4,), (2,)] and ex.traced_shapes(True) == [(4,)]


@pytest.mark.parametrize(
    "short, dropped, hint",
    [
        (
            6,
            4,
            "batch(4): 6 is the number of steps in the whole run, but tf.function traces only for an input "
            "shape it has not seen; a step of a known shape reuses its graph.",
        ),
        (3, 2, "batch(4): 3 is the number of steps per epoch, but tf.function traces only"),
        (6, 1, "batch(4): 6 is the number of steps in the whole run, but tf.function traces only"),
        (2, 4, "batch(4, drop_remainder=True): 4 is the number of steps in the whole run, but tf.function"),
        (4, 1, "batch(4): 4 traces an epoch's shapes again each epoch"),
        (1, 1, "batch(4): 1: 10 numbers by 4 end on a short batch; count the distinct shapes the step sees"),
        (5, 1, "count the distinct shapes the step sees, not the steps"),
        (3, 1, "batch(4): 3 is the number of steps per epoch"),
        (2, 2, "drop_remainder=True drops the short batch: how many distinct shapes are left?"),
        (2.5, 1, "TRACES['batch(4)'] should be a whole number"),
    ],
)
def test_trace_count_mistakes(short, dropped, hint) -> None:
    fails_with(ex.check_trace_count, traces(short, dropped), "Exercise trace_count", hint)


def test_trace_count_placeholder_and_shape() -> None:
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_trace_count(traces(None, None))
    fails_with(ex.check_trace_count, [2, 1], "Set TRACES to a dict")


# --------------------------------------------------------------------------- replica_batches

RIGHT_BATCHES = [[4, 4]] * 5 + [[2, 1]]


def test_replica_batches(capsys) -> None:
    assert ex.replica_batch_sizes() == RIGHT_BATCHES
    ex.check_replica_batches(RIGHT_BATCHES)
    assert "[pass] replica_batches: 5 steps of [4, 4] and a last step of [2, 1]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "guess, hint",
    [
        ([[8, 8]] * 5 + [[3, 3]], "Each replica got the whole global batch of 8"),
        ([[4, 4]] * 5, "5 steps: without drop_remainder the 3 examples left over make a step of their own"),
        ([[4, 4]] * 11, "11 steps count each replica's batches one after the other"),
        ([[4, 4]] * 6, "The last step holds only the 3 examples left over, not 8: nothing pads it"),
        (
            [[4, 4]] * 5 + [[2, 2]],
            "The last step holds only the 3 examples left over, not 4: nothing pads it",
        ),
        ([[4, 4]] * 5 + [[3, 0]], "The last global batch is split between the replicas as evenly"),
        (
            [[4, 4]] * 5 + [[1, 2]],
            "The last step's shares are on the wrong replicas: which replica gets the extra example",
        ),
        ([[4, 4]] * 5 + [[1, 1]], "Count the steps (the whole global batches, plus one for the rest)"),
        (
            [[4, 4]] * 4 + [[3, 3], [2, 1]],
            "Count the steps (the whole global batches, plus one for the rest)",
        ),
        ([[4]] * 11, "Set BATCHES to a list with one [replica 0, replica 1] pair"),
    ],
)
def test_replica_batches_mistakes(guess, hint) -> None:
    fails_with(ex.check_replica_batches, guess, "Exercise replica_batches", hint)


def test_replica_batches_placeholder() -> None:
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_replica_batches(None)


# --------------------------------------------------------------------------- hints keep the answer


def _message(check, answer) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer)
    return str(info.value)


def test_prediction_hints_never_give_the_answer() -> None:
    """A wrong prediction is told its mistake, not the run's numbers: a second try could copy them
    (the pass line, after a right answer, may state them)."""
    wrong_traces = [(6, 4), (3, 2), (6, 1), (2, 4), (4, 1), (1, 1), (3, 1), (5, 1), (2, 2), (1, 2), (4, 4)]
    for short, dropped in wrong_traces:
        message = _message(ex.check_trace_count, traces(short, dropped))
        for told in ("traces in all", "so 2", "so 1", "(2,)", "(4,)", "not 1", "not 2"):
            assert told not in message, message
    wrong_batches = [[[8, 8]] * 5 + [[3, 3]], [[4, 4]] * 5, [[4, 4]] * 11, [[4, 4]] * 6]
    wrong_batches += [[[4, 4]] * 5 + [last] for last in ([2, 2], [3, 0], [1, 2], [1, 1], [0, 3])]
    wrong_batches += [[[4, 4]] * 4 + [[3, 3], [2, 1]], [[5, 3]] * 5 + [[2, 1]]]
    for guess in wrong_batches:
        message = _message(ex.check_replica_batches, guess)
        for told in ("[2, 1]", "2 and 1", "4 each", "step 6", "6 steps", "replica 0 gets", "larger share"):
            assert told not in message, message
    wrong_machines = [
        {"v2-8": v28, "v5e-1": v5e, "4 GPUs": four}
        for v28 in (512, 256, 64, 1024)
        for v5e in (64, 512, 32, 128)
        for four in (256, 64, 1024)
    ]
    for guess in wrong_machines:
        if guess == RIGHT:
            continue
        message = _message(ex.check_global_batches, lambda guess=guess: dict(guess))
        told_back = message.replace(f"said {guess['v5e-1']}", "").replace(f"said {guess['4 GPUs']}", "")
        told_back = told_back.replace(f"v2-8: {guess['v2-8']}", "").replace(f"v5e-1: {guess['v5e-1']}", "")
        assert "512" not in told_back and "256" not in told_back, message
        assert "8 x 64" not in message and "4 x 64" not in message, message


# --------------------------------------------------------------------------- masked_last_batch


def evaluate_all_with(
    pad=True,
    mask=True,
    use_mask=True,
    drop=True,
    divide_by="real",
    reduce="SUM",
    compiled=True,
    jit=False,
    loop="graph",
    from_logits=True,
    steps_before_padding=False,
    calls=1,
    means=False,
):
    """The notebook's evaluate_all; each argument changed plants one mistake (``loop="python"``: one
    call per batch, notebook 04's way; ``means``: each replica's masked mean, then the batches')."""

    def evaluate_all(strategy, model, x, y, global_batch):
        n = len(x)
        missing = -n % global_batch if pad else 0
        weights = np.concatenate([np.ones(n), np.zeros(missing)]).astype("float32")
        x = np.concatenate([x, np.zeros((missing, *x.shape[1:]), x.dtype)])
        y = np.concatenate([y, np.zeros(missing, y.dtype)])
        parts = (x, y, weights) if mask else (x, y)
        batches = tf.data.Dataset.from_tensor_slices(parts).batch(global_batch, drop_remainder=drop)
        steps = len(x) // global_batch if drop else -(-len(x) // global_batch)
        steps = n // global_batch if steps_before_padding else steps  # the padded batch forgotten

        def replica_sum(images, labels, *weight):
            logits = model(images, training=False)
            per_example = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=from_logits
            )
            if weight and use_mask:
                per_example = per_example * weight[0]
            if means:
                return tf.math.divide_no_nan(tf.reduce_sum(per_example), tf.reduce_sum(weight[0]))
            return tf.reduce_sum(per_example)

        def one_batch(batch):
            per_replica = strategy.run(replica_sum, args=batch)
            return strategy.reduce(getattr(tf.distribute.ReduceOp, reduce), per_replica, axis=None)

        step = tf.function(one_batch, jit_compile=True) if jit == "step" else one_batch

        def every_batch(iterator):
            total = tf.constant(0.0)
            for _ in tf.range(steps):
                total += step(next(iterator))
            return total

        if loop == "python":
            eval_step = (
                tf.function(lambda *batch: one_batch(batch), jit_compile=bool(jit)) if compiled else None
            )
            eval_step = eval_step or (lambda *batch: one_batch(batch))
            results = [
                float(eval_step(*batch)) for batch in strategy.experimental_distribute_dataset(batches)
            ]
            total = float(np.mean(results)) * n if means else sum(results)
            return eval_step, total / (n if divide_by == "real" else len(x))
        eval_all = tf.function(every_batch, jit_compile=jit is True) if compiled else every_batch
        for _ in range(calls):
            total = float(eval_all(iter(strategy.experimental_distribute_dataset(batches))))
        total = total / steps * n if means else total
        return eval_all, total / (n if divide_by == "real" else len(x))

    return evaluate_all


def test_masked_last_batch(capsys) -> None:
    ex.check_masked_last_batch(evaluate_all_with())
    assert "[pass] masked_last_batch" in capsys.readouterr().out


def test_masked_last_batch_one_call_per_batch() -> None:
    # Notebook 04's way, padded and masked, one compiled step called from Python for each batch.
    message = fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(loop="python"),
        "On one device, 6 calls for 6 batches, one call per batch",
        "inside the tf.function and call it once",
    )
    assert "\n" not in message.strip().splitlines()[-1]
    for planted in (dict(drop=False), dict(pad=False, drop=False), dict(jit=True)):
        fails_with(
            ex.check_masked_last_batch, evaluate_all_with(loop="python", **planted), "one call per batch"
        )


def test_masked_last_batch_called_more_than_once() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(calls=2),
        "On one device, the compiled function was called 2 times for 12 batches",
        "in one call",
    )


def test_masked_last_batch_steps_counted_before_padding() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(steps_before_padding=True),
        "On one device, your loop ran 5 steps, but the padded dataset holds 6 batches",
    )


def test_masked_last_batch_padded_without_drop_remainder() -> None:
    # Whole batches only, but a loop inside a tf.function compiles for the dataset's batch size: None.
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(drop=False),
        "On one device, eval_all was compiled for per-replica batches of [None] examples",
        "a loop inside a tf.function compiles for the dataset's batch size, None without drop_remainder=True",
        "which drops nothing once the data fill whole batches",
    )


def in_graph(pad=True, drop=True, mask=True):
    """evaluate_all with a `for` over the distributed dataset inside one tf.function (``mask=False``:
    padded, but no mask to tell the padding from the data)."""

    def evaluate_all(strategy, model, x, y, global_batch):
        n = len(x)
        missing = -n % global_batch if pad else 0
        weights = np.concatenate([np.ones(n), np.zeros(missing)]).astype("float32")
        x = np.concatenate([x, np.zeros((missing, *x.shape[1:]), x.dtype)])
        y = np.concatenate([y, np.zeros(missing, y.dtype)])
        parts = (x, y, weights) if mask else (x, y)
        batches = tf.data.Dataset.from_tensor_slices(parts).batch(global_batch, drop_remainder=drop)
        distributed = strategy.experimental_distribute_dataset(batches)

        def replica_sum(images, labels, *weight):
            logits = model(images, training=False)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            return tf.reduce_sum(per_example * weight[0] if weight else per_example)

        @tf.function
        def eval_all(distributed):
            total = tf.constant(0.0)
            for batch in distributed:
                total += strategy.reduce("SUM", strategy.run(replica_sum, args=batch), axis=None)
            return total

        return eval_all, float(eval_all(distributed)) / n

    return evaluate_all


def test_masked_last_batch_in_graph_loop(capsys) -> None:
    # On 2 Mirrored replicas this `for` loses the per-replica shape (None) though the dataset's is static.
    ex.check_masked_last_batch(in_graph())
    assert "[pass] masked_last_batch" in capsys.readouterr().out
    fails_with(
        ex.check_masked_last_batch,
        in_graph(pad=False, drop=False),
        "batches of [None] examples",
        "pad the data to whole global batches, then batch with drop_remainder=True",
    )
    fails_with(
        ex.check_masked_last_batch, in_graph(drop=False), "batches of [None] examples", "drops nothing once"
    )
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(pad=False, drop=False),
        "batches of [None] examples",
        "pad the data to whole global batches",
    )


def test_masked_last_batch_padded_in_tf_data_passes(capsys) -> None:
    # Padding made with tf.data, fed through distribute_datasets_from_function, a Mean metric: as right.
    def evaluate_all(strategy, model, x, y, global_batch):
        real = tf.data.Dataset.from_tensor_slices((x, y, tf.ones(len(x))))
        padding = tf.data.Dataset.from_tensors((tf.zeros(x.shape[1:]), tf.constant(0, y.dtype), 0.0))
        data = real.concatenate(padding.repeat(-len(x) % global_batch))

        def dataset_fn(ctx):
            return data.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

        with strategy.scope():
            mean = keras.metrics.Mean()

        def replica_step(images, labels, weight):
            logits = model(images, training=False)
            losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            mean.update_state(losses, sample_weight=weight)

        @tf.function
        def eval_all(iterator):
            for _ in tf.range(-(-len(x) // global_batch)):
                strategy.run(replica_step, args=next(iterator))

        eval_all(iter(strategy.distribute_datasets_from_function(dataset_fn)))
        return eval_all, float(mean.result())

    ex.check_masked_last_batch(evaluate_all)
    assert "[pass] masked_last_batch" in capsys.readouterr().out


def test_masked_last_batch_drop_remainder_loses_examples() -> None:
    message = fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(pad=False),
        "Exercise masked_last_batch",
        "On one device, 4 of the 44 examples never reached the model",
        "Pad the last batch",
    )
    assert "\n" not in message.strip().splitlines()[-1]


def test_masked_last_batch_padding_without_a_mask() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(mask=False),
        "the padding examples were counted as data, with nothing to tell them apart",
    )


def test_masked_last_batch_mask_ignored() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(use_mask=False),
        "the padding examples were counted as data, your mask never reaches the loss",
    )


def test_masked_last_batch_divided_by_the_padded_count() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(divide_by="padded"),
        "your mean divides by the 48 examples of the padded data",
    )


def test_masked_last_batch_mean_of_the_replicas() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(reduce="MEAN"),
        "On 2 replicas with 44 examples, ReduceOp.MEAN divides by the replica count",
        "strategy.reduce(SUM",
    )


def test_masked_last_batch_mean_of_masked_means() -> None:
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(means=True, reduce="MEAN"),
        "On one device, your loss averages means (each replica's masked mean with ReduceOp.MEAN, then each "
        "batch's)",
        "divide once by the real examples",
    )
    fails_with(ex.check_masked_last_batch, evaluate_all_with(means=True), "averages means (each batch's)")


def test_masked_last_batch_probabilities_for_logits() -> None:
    message = fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(from_logits=False),
        "On one device, your loss reads the model's outputs as probabilities (from_logits=False)",
    )
    assert "strategy.reduce" not in message and "replica" not in message, message


def test_masked_last_batch_eager_and_blank() -> None:
    fails_with(
        ex.check_masked_last_batch, evaluate_all_with(compiled=False), "no tf.function ran strategy.run"
    )
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(compiled=False, loop="python"),
        "no tf.function ran strategy.run",
    )
    fails_with(ex.check_masked_last_batch, lambda *a: 0.5, "should return (eval_all, loss)")
    fails_with(ex.check_masked_last_batch, blank, "not done yet")


def test_masked_last_batch_whole_data_at_once() -> None:
    # One compiled call on every example: one device's loss, but no dataset went through the strategy.
    def whole(strategy, model, x, y, global_batch):
        @tf.function
        def eval_step(x, y):
            def replica(x, y):
                logits = model(x, training=False)
                return tf.reduce_mean(
                    keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                )

            return strategy.reduce("MEAN", strategy.run(replica, args=(x, y)), axis=None)

        return eval_step, eval_step(tf.constant(x), tf.constant(y))

    fails_with(ex.check_masked_last_batch, whole, "no dataset went through the strategy")


def test_masked_last_batch_jit_compiled() -> None:
    # XLA cannot compile the loop's dataset reads; a jit-compiled step (strategy.run and reduce) inside a
    # plain loop runs on one device, but on 2 MirroredStrategy replicas it cannot reach CPU:1's variables.
    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(jit=True),
        "On one device, a jit_compile=True function is one XLA program, and XLA cannot read a dataset",
        "plain @tf.function",
    )

    fails_with(
        ex.check_masked_last_batch,
        evaluate_all_with(jit="step"),
        "On 2 replicas with 44 examples, a jit_compile=True function is one XLA program",
        "the variables on the other replica's device",
    )
