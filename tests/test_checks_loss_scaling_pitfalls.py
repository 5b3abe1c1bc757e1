"""The checks of notebook 05 pass on right answers and fail, with the right hint, on each pitfall.

Every wrong answer below is run on 2 replicas (the checks compare 2 replicas with one device).
"""

from __future__ import annotations

import pytest
from checking import blank, fails_with

from course_utils.exercises import loss_scaling_pitfalls as ex

GLOBAL_BATCH = 8


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


# --------------------------------------------------------------------------- predict_clip_factor


def test_predict_clip_factor(capsys) -> None:
    assert abs(ex.measured_clip_factor() - 2.0) < 1e-3  # what the notebook teaches
    ex.check_predict_clip_factor(2.0)
    assert "[pass] predict_clip_factor" in capsys.readouterr().out
    # The plausible wrong answers: the clip acts after the sum (1.0), or on half the gradient.
    fails_with(
        ex.check_predict_clip_factor,
        1.0,
        "Exercise predict_clip_factor",
        "measured: 2.00x",
        "BEFORE the all-reduce",
    )
    fails_with(ex.check_predict_clip_factor, 0.5, "half the batch's gradient")
    fails_with(ex.check_predict_clip_factor, 4, "Work out the norm")
    fails_with(ex.check_predict_clip_factor, None, "Set PREDICTION to a number")


# --------------------------------------------------------------------------- clip_after_sum


def _summed(tf, grads):
    context = tf.distribute.get_replica_context()
    return context.all_reduce(tf.distribute.ReduceOp.SUM, grads), context.num_replicas_in_sync


def test_clip_after_sum(tf, capsys) -> None:
    def right(grads, clip_norm):
        total, n = _summed(tf, grads)
        clipped, _ = tf.clip_by_global_norm(total, clip_norm)
        return [g / n for g in clipped]

    ex.check_clip_after_sum(right)
    assert "[pass] clip_after_sum" in capsys.readouterr().out

    def local_clip(grads, clip_norm):  # what the optimizer's global_clipnorm does
        return tf.clip_by_global_norm(grads, clip_norm)[0]

    fails_with(ex.check_clip_after_sum, local_clip, "On 2 replicas", "Each replica clipped its own")

    def not_divided(grads, clip_norm):  # clips the sum, forgets that apply_gradients sums again
        total, _ = _summed(tf, grads)
        return tf.clip_by_global_norm(total, clip_norm)[0]

    fails_with(ex.check_clip_after_sum, not_divided, "2.00x", "SUMS what the 2 replicas pass")

    def hard_coded(grads, clip_norm):  # right on 2 replicas only
        total, _ = _summed(tf, grads)
        return [g / 2 for g in tf.clip_by_global_norm(total, clip_norm)[0]]

    fails_with(ex.check_clip_after_sum, hard_coded, "On 1 device", "0.50x")
    fails_with(ex.check_clip_after_sum, lambda grads, clip_norm: grads, "not clipped")

    def mean_then_divided(grads, clip_norm):  # a MEAN where the SUM belongs: right while the clip fires
        context = tf.distribute.get_replica_context()
        mean = context.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
        return [g / context.num_replicas_in_sync for g in tf.clip_by_global_norm(mean, clip_norm)[0]]

    fails_with(
        ex.check_clip_after_sum,
        mean_then_divided,
        "On 2 replicas, with clip_norm=100 (a clip norm no gradient reaches)",
        "0.50x",
        "ReduceOp.MEAN",
    )

    def mean_clipped(grads, clip_norm):  # a MEAN passed whole: right while no clip fires
        mean = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, grads)
        return tf.clip_by_global_norm(mean, clip_norm)[0]

    fails_with(
        ex.check_clip_after_sum, mean_clipped, "with clip_norm=0.01 (the clip firing)", "2.00x", "SUMS"
    )
    fails_with(ex.check_clip_after_sum, blank, "not done yet")


# --------------------------------------------------------------------------- masked_token_mean


def test_masked_token_mean(tf, capsys) -> None:
    def right(per_token_loss, mask):
        context = tf.distribute.get_replica_context()
        real = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(mask))
        return tf.math.divide_no_nan(tf.reduce_sum(per_token_loss * mask), real)

    ex.check_masked_token_mean(right)
    assert "[pass] masked_token_mean" in capsys.readouterr().out

    def with_sample_weight(per_token_loss, mask):  # compute_average_loss's own sample_weight
        return tf.nn.compute_average_loss(per_token_loss, sample_weight=mask, global_batch_size=GLOBAL_BATCH)

    fails_with(
        ex.check_masked_token_mean,
        with_sample_weight,
        "Exercise masked_token_mean",
        "update is 3.1",
        "25 real tokens / 8 sequences",
        "sample_weight=mask",
    )

    def local_count(per_token_loss, mask):  # right on one device
        return tf.reduce_sum(per_token_loss * mask) / tf.reduce_sum(mask)

    fails_with(ex.check_masked_token_mean, local_count, "mismatch", "19 real tokens, the second 6")

    def mean_of_sequences(per_token_loss, mask):
        per_sequence = tf.reduce_sum(per_token_loss * mask, axis=1) / tf.reduce_sum(mask, axis=1)
        return tf.nn.compute_average_loss(per_sequence, global_batch_size=GLOBAL_BATCH)

    fails_with(ex.check_masked_token_mean, mean_of_sequences, "Some tokens weigh more")
    fails_with(ex.check_masked_token_mean, blank, "not done yet")


# --------------------------------------------------------------------------- average_loss


def test_average_loss(tf, capsys) -> None:
    def right(per_example_loss):
        context = tf.distribute.get_replica_context()
        count = context.all_reduce(
            tf.distribute.ReduceOp.SUM, tf.cast(tf.shape(per_example_loss)[0], tf.float32)
        )
        return tf.math.divide_no_nan(tf.reduce_sum(per_example_loss), count)

    ex.check_average_loss(right, global_batch=GLOBAL_BATCH)
    assert "[pass] average_loss" in capsys.readouterr().out

    fails_with(
        ex.check_average_loss,
        lambda l: tf.nn.compute_average_loss(l),
        "short batch split 2 + 1",
        "default denominator",
        "all_reduce",
    )
    fails_with(
        ex.check_average_loss,
        lambda l: tf.nn.compute_average_loss(l, global_batch_size=GLOBAL_BATCH),
        "full global batch (8)",
        "3 examples",
    )
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
                lambda l: tf.nn.compute_average_loss(l, global_batch_size=global_batch_size), args=(batch,)
            )
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
        return right(strategy, dataset, global_batch_size) * (sum(1 for _ in dataset))

    fails_with(ex.check_track_loss, not_averaged, "number of steps")
    fails_with(ex.check_track_loss, blank, "not done yet")
