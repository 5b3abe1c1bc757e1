"""The checks of notebook 04 pass on right answers and fail, with their hint, on plausible wrong ones.

Each wrong answer below is right (or looks right) on one device and is caught on 2 replicas,
or is the padding mistake the check names; the blank student version fails with "not done yet".
"""

from __future__ import annotations

import pytest
from checking import fails_with

from course_utils.exercises import custom_training_loops as ex


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


def make_loss_object():
    """The notebook's ``loss_object`` (its answers use it): per-example cross-entropy of logits."""
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


@pytest.fixture(scope="module")
def loss_object():
    return make_loss_object()


def blank(*args, **kwargs):
    raise NotImplementedError("Exercise padded_loss: replace this line with your code")


# --------------------------------------------------------------------------- mean_loss_factor


def test_mean_loss_factor_is_measured_as_the_replica_count() -> None:
    """4 replicas (a fresh process: this one has 2 CPUs), each tf.reduce_mean + the whole penalty."""
    assert ex.mean_loss_factor() == pytest.approx(4.0, abs=1e-5)


def test_mean_loss_prediction_passes(capsys) -> None:
    ex.check_mean_loss_factor(4)
    ex.check_mean_loss_factor(14.8 / 3.7)
    assert capsys.readouterr().out.count("[pass] mean_loss_factor") == 2


def test_mean_loss_prediction_blank() -> None:
    fails_with(ex.check_mean_loss_factor, None, "is not done yet")


@pytest.mark.parametrize(
    "prediction, hint",
    [
        (1.0, "divides by the examples it holds"),  # tf.reduce_mean taken for the global mean
        (14.2 / 3.7, "adds the whole penalty"),  # the means summed, the penalty counted once
        (3.84, "adds the whole penalty"),
        (4.3 / 3.7, "never averages them"),  # the means averaged, the penalty counted 4 times
        (2.0, "4 replicas here"),  # the doubling on 2 replicas, carried over
        (0.25, "nothing divides them"),
        (16.0, "over its own example"),
        (3.0, "write what each of the 4 replicas returns"),
        (14.8, "that is the sum itself"),  # the right sum, not as a factor
        (3.7, "that is one device's loss"),
        (14.2, "that is a sum, not a factor"),  # a sum, and the penalty counted once
        (3.98, "write what each of the 4 replicas returns"),  # the window is 4 +- 0.02, both sides
    ],
)
def test_mean_loss_wrong_predictions(prediction, hint) -> None:
    message = fails_with(ex.check_mean_loss_factor, prediction, "Exercise mean_loss_factor", hint)
    for shown in ("4.00", "4.0x", "measured", "= 4", "is 4"):  # one line, never the answer
        assert shown not in message, message
    assert "\n" not in message


def test_mean_loss_window_is_even_on_both_sides(capsys) -> None:
    for near in (3.985, 4.015):
        ex.check_mean_loss_factor(near)
    assert capsys.readouterr().out.count("[pass] mean_loss_factor") == 2


def test_mean_loss_prediction_not_a_number() -> None:
    fails_with(ex.check_mean_loss_factor, "4x", "one number")
    fails_with(ex.check_mean_loss_factor, True, "one number")
    fails_with(ex.check_mean_loss_factor, float("nan"), "one number")


def test_mean_loss_on_two_replicas_is_twice(two_replicas) -> None:
    """The notebook's two-replica cell: the same sum on 2 replicas is 2 x 3.7."""
    assert ex.summed_mean_loss(2) == pytest.approx(7.4, abs=1e-5)


# --------------------------------------------------------------------------- adam_update_factor


def test_adam_factor_is_measured_near_one() -> None:
    assert ex.adam_update_factor() == pytest.approx(1.0, abs=0.05)


def test_adam_prediction_passes(capsys) -> None:
    ex.check_adam_update_factor(1.0)
    assert "[pass] adam_update_factor" in capsys.readouterr().out


def test_adam_prediction_blank() -> None:
    fails_with(ex.check_adam_update_factor, None, "is not done yet")


def test_adam_prediction_two() -> None:
    """The plausible wrong answer: the gradients are 2x on 2 replicas, so the update must be too."""
    fails_with(ex.check_adam_update_factor, 2.0, "you predicted 2", "what does Adam divide")


@pytest.mark.parametrize("prediction", [2.0, 0.5, 4.0])
def test_adam_hints_never_show_the_measured_factor(prediction) -> None:
    message = fails_with(ex.check_adam_update_factor, prediction, "you predicted")
    for shown in (f"{ex.adam_update_factor():.2f}", f"{ex.adam_update_factor():.1f}", "measured", "cancels"):
        assert shown not in message, message


def test_adam_prediction_not_a_number() -> None:
    fails_with(ex.check_adam_update_factor, "2x", "one number")


# --------------------------------------------------------------------------- padded_loss


def right_compute_loss(tf, loss_object):
    """The notebook's padded_loss answer."""

    def compute_loss(labels, logits, mask, model_losses):
        per_example_loss = loss_object(labels, logits)
        context = tf.distribute.get_replica_context()
        real = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(mask))
        loss = tf.nn.compute_average_loss(
            per_example_loss, sample_weight=mask, global_batch_size=tf.cast(real, tf.int32)
        )
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    return compute_loss


@pytest.fixture(scope="module")
def right_loss(tf, loss_object):
    return right_compute_loss(tf, loss_object)


def test_padded_loss_passes(right_loss, capsys) -> None:
    ex.check_padded_loss(right_loss)
    assert "[pass] padded_loss" in capsys.readouterr().out


def test_padded_loss_blank() -> None:
    fails_with(ex.check_padded_loss, blank, "Exercise padded_loss is not done yet")


def with_penalty(tf, data_loss):
    """A padded_loss answer: ``data_loss(labels, logits, mask)`` plus the penalty, scaled right."""

    def compute_loss(labels, logits, mask, model_losses):
        loss = data_loss(labels, logits, mask)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    return compute_loss


# Wrong data losses that real answers contain, and the words of their hints.
WRONG_DATA_LOSSES = {
    # Right on one device: the weighted mean of the replica's own real examples.
    "own_count": (
        lambda tf, ce: lambda y, z, m: tf.reduce_sum(ce(y, z) * m) / tf.reduce_sum(m),
        ("on 2 replicas", "OWN count", "across the replicas"),
    ),
    # compute_average_loss with the mask as sample_weight still divides by every slot.
    "sample_weight_slots": (
        lambda tf, ce: lambda y, z, m: tf.nn.compute_average_loss(ce(y, z), sample_weight=m),
        ("divides by all 16 slots",),
    ),
    "no_mask": (
        lambda tf, ce: lambda y, z, m: tf.nn.compute_average_loss(ce(y, z)),
        ("padding examples count",),
    ),
    # Right on one device: the real examples counted with ReduceOp.MEAN, half the global count.
    "mean_of_counts": (
        lambda tf, ce: lambda y, z, m: tf.reduce_sum(ce(y, z) * m)
        / tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, tf.reduce_sum(m)),
        ("twice the single-device", "ReduceOp.SUM"),
    ),
}


@pytest.mark.parametrize("mistake", list(WRONG_DATA_LOSSES))
def test_padded_loss_wrong_data_loss(tf, loss_object, mistake) -> None:
    make, words = WRONG_DATA_LOSSES[mistake]
    fails_with(ex.check_padded_loss, with_penalty(tf, make(tf, loss_object)), *words)


def unscaled_penalty(tf, right_loss):
    """A padded_loss answer whose replicas each add the whole penalty (no scale_regularization_loss)."""

    def compute_loss(labels, logits, mask, model_losses):
        loss = right_loss(labels, logits, mask, [])
        if model_losses:
            loss += tf.add_n(model_losses)
        return loss

    return compute_loss


def test_padded_loss_unscaled_penalty(tf, right_loss) -> None:
    fails_with(ex.check_padded_loss, unscaled_penalty(tf, right_loss), "count 2.00 times")


def test_padded_loss_without_penalty(right_loss) -> None:
    fails_with(ex.check_padded_loss, lambda l, g, m, p: right_loss(l, g, m, []), "without the penalties")


# --------------------------------------------------------------------------- per_replica_dataset_fn


def make_dataset_factory(tf, how="right"):
    def make_dataset_fn(images, labels, global_batch_size):
        def dataset_fn(input_context):
            dataset = tf.data.Dataset.from_tensor_slices((images, labels))
            per_replica = input_context.get_per_replica_batch_size(global_batch_size)
            if how == "right":
                dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            elif how == "shard_by_replicas":
                dataset = dataset.shard(input_context.num_replicas_in_sync, input_context.input_pipeline_id)
            elif how == "global_batch":
                dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
                per_replica = global_batch_size
            elif how == "unbatched":
                dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
                return dataset
            elif how in ("repeat2", "repeat_forever"):  # an epoch loop's habit: one pass is the caller's
                dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
                dataset = dataset.repeat(2 if how == "repeat2" else None)
            elif how == "shuffled":
                dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
                dataset = dataset.shuffle(len(labels))
            return dataset.batch(per_replica)

        return dataset_fn

    return make_dataset_fn


def test_dataset_fn_passes(tf, capsys) -> None:
    ex.check_per_replica_dataset_fn(make_dataset_factory(tf))
    assert "[pass] per_replica_dataset_fn" in capsys.readouterr().out


def test_dataset_fn_blank() -> None:
    def make_dataset_fn(images, labels, global_batch_size):
        raise NotImplementedError("Exercise per_replica_dataset_fn: replace this line with your code")

    fails_with(ex.check_per_replica_dataset_fn, make_dataset_fn, "is not done yet")


def test_dataset_fn_global_batch(tf) -> None:
    """Right on one device: every replica gets the whole global batch on two."""
    fails_with(
        ex.check_per_replica_dataset_fn,
        make_dataset_factory(tf, "global_batch"),
        "On 2 replicas",
        "8 examples per step, 16 in all",
        "get_per_replica_batch_size",
    )


def test_dataset_fn_shard_by_replicas(tf) -> None:
    """Right on one device (one replica: shard(1, 0)); on two, half of the examples are skipped."""
    fails_with(
        ex.check_per_replica_dataset_fn,
        make_dataset_factory(tf, "shard_by_replicas"),
        "On 2 replicas",
        "skipped or reordered",
        "num_input_pipelines (not num_replicas_in_sync)",
    )


def test_dataset_fn_no_shard(tf) -> None:
    """Right on one worker: caught only with two input pipelines (two workers)."""
    fails_with(
        ex.check_per_replica_dataset_fn,
        make_dataset_factory(tf, "no_shard"),
        "2 input pipelines",
        "trained on twice",
        "dataset.shard(",
    )


@pytest.mark.parametrize("how", ["repeat2", "repeat_forever"])
def test_dataset_fn_repeated(tf, how) -> None:
    """Two passes gave a hint about skipped examples; an endless repeat kept the check reading."""
    message = fails_with(
        ex.check_per_replica_dataset_fn,
        make_dataset_factory(tf, how),
        "On one device",
        "more than one pass",
        "do not repeat in dataset_fn",
    )
    assert "skipped" not in message


def test_dataset_fn_unbatched(tf) -> None:
    fails_with(
        ex.check_per_replica_dataset_fn,
        make_dataset_factory(tf, "unbatched"),
        "one example, not a batch",
        "get_per_replica_batch_size",
    )


def test_dataset_fn_shuffled(tf) -> None:
    fails_with(
        ex.check_per_replica_dataset_fn,
        make_dataset_factory(tf, "shuffled"),
        "skipped or reordered",
        "shuffle",
    )


# --------------------------------------------------------------------------- distributed_test_step


def make_test_factory(tf, loss_object, how="right"):
    def make_distributed_test_step(strategy, model, loss_metric, accuracy):
        def test_step(inputs):
            images, labels, mask = inputs
            logits = model(images, training=False)
            loss_metric.update_state(loss_object(labels, logits), sample_weight=mask)
            accuracy.update_state(labels, logits, sample_weight=mask)

        def forward(inputs):
            images, labels, mask = inputs
            return model(images, training=False)

        @tf.function
        def distributed_test_step(inputs):
            if how == "right":
                strategy.run(test_step, args=(inputs,))
            elif how == "outside":  # the metrics updated outside strategy.run
                logits = strategy.run(forward, args=(inputs,))
                images, labels, mask = inputs
                loss_metric.update_state(loss_object(labels, logits), sample_weight=mask)
                accuracy.update_state(labels, logits, sample_weight=mask)
            elif how == "first_replica":  # outside strategy.run, on replica 0's values only
                logits = strategy.experimental_local_results(strategy.run(forward, args=(inputs,)))[0]
                images, labels, mask = (strategy.experimental_local_results(v)[0] for v in inputs)
                loss_metric.update_state(loss_object(labels, logits), sample_weight=mask)
                accuracy.update_state(labels, logits, sample_weight=mask)
            elif how == "times_mask":  # the mask multiplied in: padding still counts in the Mean

                def times_mask(inputs):
                    images, labels, mask = inputs
                    logits = model(images, training=False)
                    loss_metric.update_state(loss_object(labels, logits) * mask)
                    accuracy.update_state(labels, logits, sample_weight=mask)

                strategy.run(times_mask, args=(inputs,))
            elif how == "unmasked":

                def unmasked(inputs):
                    images, labels, mask = inputs
                    logits = model(images, training=False)
                    loss_metric.update_state(loss_object(labels, logits))
                    accuracy.update_state(labels, logits)

                strategy.run(unmasked, args=(inputs,))

        return distributed_test_step

    return make_distributed_test_step


def test_distributed_test_step_passes(tf, loss_object, capsys) -> None:
    ex.check_distributed_test_step(make_test_factory(tf, loss_object))
    assert "[pass] distributed_test_step" in capsys.readouterr().out


def test_distributed_test_step_blank() -> None:
    def make_distributed_test_step(strategy, model, loss_metric, accuracy):
        raise NotImplementedError("Exercise distributed_test_step: replace this line with your code")

    fails_with(ex.check_distributed_test_step, make_distributed_test_step, "is not done yet")


@pytest.mark.parametrize(
    "mistake, words",
    [
        ("outside", ("On 2 replicas", "outside strategy.run", "inside the function that strategy.run runs")),
        # Right on one device (one replica is all there is), wrong on two.
        ("first_replica", ("On 2 replicas", "One device was right", "inside strategy.run")),
        ("unmasked", ("padding examples were counted",)),
        ("times_mask", ("On one device", "multiplying by the mask", "sample_weight=mask")),
    ],
)
def test_distributed_test_step_mistakes(tf, loss_object, mistake, words) -> None:
    fails_with(ex.check_distributed_test_step, make_test_factory(tf, loss_object, mistake), *words)
