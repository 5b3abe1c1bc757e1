"""The checks of notebook 05 pass on right answers and fail, with the right hint, on each pitfall."""

from __future__ import annotations

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import loss_scaling_pitfalls as ex

GLOBAL_BATCH = 8
TIME_STEPS = 5


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


@pytest.fixture(scope="module")
def loss_fn():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def make_step(tf, compute_loss):
    def step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = compute_loss(model, x, y)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def blank(*args, **kwargs):
    raise NotImplementedError("Exercise: replace this line with your code")


def fails_with(check, answer, *needles, **kwargs) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer, **kwargs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    return message


# --------------------------------------------------------------------------- fix_reduce_mean


def test_fix_reduce_mean(tf, loss_fn, capsys) -> None:
    def scaled(model, x, y):
        return tf.nn.compute_average_loss(loss_fn(y, model(x)), global_batch_size=GLOBAL_BATCH)

    ex.check_fix_reduce_mean(make_step(tf, scaled), global_batch=GLOBAL_BATCH)
    assert "[pass] fix_reduce_mean" in capsys.readouterr().out

    def local_mean(model, x, y):  # the planted pitfall: the notebook's buggy_step
        per_example = loss_fn(y, model(x))
        return tf.reduce_sum(per_example) / tf.cast(tf.shape(per_example)[0], tf.float32)

    fails_with(ex.check_fix_reduce_mean, make_step(tf, local_mean), "Exercise fix_reduce_mean",
               "2.00x", "SUMS", "compute_average_loss")

    def twice(model, x, y):
        return scaled(model, x, y) / 2.0

    fails_with(ex.check_fix_reduce_mean, make_step(tf, twice), "0.50x", "once too often")

    def reports_local_mean(model, optimizer, x, y):  # right update, wrong reported loss
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return tf.reduce_mean(per_example)

    fails_with(ex.check_fix_reduce_mean, reports_local_mean, "The update is right", "2.00x")
    fails_with(ex.check_fix_reduce_mean, blank, "not done yet")


# --------------------------------------------------------------------------- fix_regularization


def test_fix_regularization(tf, loss_fn, capsys) -> None:
    def data(model, x, y):
        return tf.nn.compute_average_loss(loss_fn(y, model(x)), global_batch_size=GLOBAL_BATCH)

    def scaled_penalty(model, x, y):
        return data(model, x, y) + tf.nn.scale_regularization_loss(tf.add_n(model.losses))

    ex.check_fix_regularization(make_step(tf, scaled_penalty), global_batch=GLOBAL_BATCH)
    assert "[pass] fix_regularization" in capsys.readouterr().out

    def raw_penalty(model, x, y):  # the planted pitfall: section 5's penalty_step
        return data(model, x, y) + tf.add_n(model.losses)

    fails_with(ex.check_fix_regularization, make_step(tf, raw_penalty), "counts 2 times",
               "scale_regularization_loss")

    def wrong_data(model, x, y):
        loss = tf.reduce_mean(loss_fn(y, model(x)))
        if model.losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        return loss

    fails_with(ex.check_fix_regularization, make_step(tf, wrong_data), "Without a penalty your step is already wrong", "2.00x")
    fails_with(ex.check_fix_regularization, blank, "not done yet")


# --------------------------------------------------------------------------- fix_multidim_labels


def test_fix_multidim_labels(tf, loss_fn, capsys) -> None:
    def averaged(model, x, y):
        per_example = tf.reduce_mean(loss_fn(y, model(x)), axis=1)
        return tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)

    ex.check_fix_multidim_labels(make_step(tf, averaged), global_batch=GLOBAL_BATCH,
                                 time_steps=TIME_STEPS)
    assert "[pass] fix_multidim_labels" in capsys.readouterr().out

    def per_token(model, x, y):  # the planted pitfall: buggy_tagger_step
        return tf.nn.compute_average_loss(loss_fn(y, model(x)), global_batch_size=GLOBAL_BATCH)

    fails_with(ex.check_fix_multidim_labels, make_step(tf, per_token), "5.00x",
               "number of time steps (5)", "axis=1", global_batch=GLOBAL_BATCH,
               time_steps=TIME_STEPS)

    def local_mean(model, x, y):
        return tf.reduce_mean(loss_fn(y, model(x)))

    fails_with(ex.check_fix_multidim_labels, make_step(tf, local_mean), "2.00x")
    fails_with(ex.check_fix_multidim_labels, blank, "not done yet")


# --------------------------------------------------------------------------- average_loss


def test_average_loss(tf, capsys) -> None:
    def right(per_example_loss):
        context = tf.distribute.get_replica_context()
        count = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                   tf.cast(tf.shape(per_example_loss)[0], tf.float32))
        return tf.math.divide_no_nan(tf.reduce_sum(per_example_loss), count)

    ex.check_average_loss(right, global_batch=GLOBAL_BATCH)
    assert "[pass] average_loss" in capsys.readouterr().out

    fails_with(ex.check_average_loss, lambda l: tf.nn.compute_average_loss(l),
               "short batch split 2 + 1", "default denominator", "all_reduce")
    fails_with(ex.check_average_loss,
               lambda l: tf.nn.compute_average_loss(l, global_batch_size=GLOBAL_BATCH),
               "full global batch (8)", "3 examples")
    fails_with(ex.check_average_loss, tf.reduce_mean, "full batch", "2.00x")

    def nan_on_empty(per_example_loss):
        context = tf.distribute.get_replica_context()
        local = tf.cast(tf.shape(per_example_loss)[0], tf.float32)
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, local)
        return tf.reduce_mean(per_example_loss) * local / total

    fails_with(ex.check_average_loss, nan_on_empty, "nan", "divide_no_nan")
    fails_with(ex.check_average_loss, blank, "not done yet")


# --------------------------------------------------------------------------- track_loss


def test_track_loss(tf, capsys) -> None:
    import keras

    def right(strategy, dataset, global_batch_size):
        total, steps = 0.0, 0
        for batch in strategy.experimental_distribute_dataset(dataset):
            scaled = strategy.run(
                lambda l: tf.nn.compute_average_loss(l, global_batch_size=global_batch_size),
                args=(batch,))
            total += float(strategy.reduce(tf.distribute.ReduceOp.SUM, scaled, axis=None))
            steps += 1
        return total / steps

    ex.check_track_loss(right)
    assert "[pass] track_loss" in capsys.readouterr().out

    def mean_metric(strategy, dataset, global_batch_size):  # the planted pitfall
        with strategy.scope():
            metric = keras.metrics.Mean()

        def replica_fn(l):
            metric.update_state(tf.nn.compute_average_loss(l, global_batch_size=global_batch_size))

        for batch in strategy.experimental_distribute_dataset(dataset):
            strategy.run(replica_fn, args=(batch,))
        return float(metric.result())

    fails_with(ex.check_track_loss, mean_metric, "got 1.75", "0.50x", "strategy.reduce(SUM")

    def not_averaged(strategy, dataset, global_batch_size):
        return right(strategy, dataset, global_batch_size) * (
            sum(1 for _ in dataset))

    fails_with(ex.check_track_loss, not_averaged, "number of steps")
    fails_with(ex.check_track_loss, blank, "not done yet")


# --------------------------------------------------------------------------- fix_loss_scale


def _tiny_loss(tf, model, x, y):
    prediction = tf.cast(model(x, training=True), tf.float32)[:, 0]
    return tf.nn.compute_average_loss(ex.TINY * tf.square(y - prediction),
                                      global_batch_size=GLOBAL_BATCH)


def test_fix_loss_scale(tf, capsys) -> None:
    def scaled(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = _tiny_loss(tf, model, x, y)
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    ex.check_fix_loss_scale(scaled, global_batch=GLOBAL_BATCH)
    assert "[pass] fix_loss_scale" in capsys.readouterr().out

    def unscaled(model, optimizer, x, y):  # the planted pitfall: section 10's unscaled_step
        with tf.GradientTape() as tape:
            loss = _tiny_loss(tf, model, x, y)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    fails_with(ex.check_fix_loss_scale, unscaled, "0.00x", "underflowed", "scale_loss")

    def by_hand(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = _tiny_loss(tf, model, x, y) * 1024.0
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    fails_with(ex.check_fix_loss_scale, by_hand, "0.03x", "optimizer.scale_loss(loss) only")

    def keras2(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = optimizer.get_scaled_loss(_tiny_loss(tf, model, x, y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    fails_with(ex.check_fix_loss_scale, keras2, "removed get_scaled_loss")
    fails_with(ex.check_fix_loss_scale, blank, "not done yet")
