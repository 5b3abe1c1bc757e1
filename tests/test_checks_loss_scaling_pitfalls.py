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


# --------------------------------------------------------------------------- pitfall_factors

RIGHT_FACTORS = {"reduce_mean": 2.0, "raw penalty": 2.0, "Keras default": 1.0, "per-token": 5.0}


def test_pitfall_factors(capsys) -> None:
    measured = ex.measured_pitfall_factors()
    assert all(abs(measured[k] - v) < 1e-3 for k, v in RIGHT_FACTORS.items()), measured  # what 05 teaches
    ex.check_pitfall_factors(RIGHT_FACTORS)
    ex.check_pitfall_factors({"reduce_mean": 2, "raw penalty": 4 / 2, "Keras default": 1, "per-token": 5})
    assert capsys.readouterr().out.count("[pass] pitfall_factors") == 2
    # The plausible wrong answers: Keras's default reduction taken for a plain mean (2), nothing off
    # anywhere (all 1), the per-token factor times the replicas (10), a penalty scaled per example;
    # each hint names the entries that are off and why, on one line, never a factor.
    hints = [
        fails_with(
            ex.check_pitfall_factors,
            {**RIGHT_FACTORS, "Keras default": 2.0},
            "Exercise pitfall_factors",
            "1 of 4 off: 'Keras default'",
            "num_replicas_in_sync",
        ),
        fails_with(
            ex.check_pitfall_factors,
            dict.fromkeys(RIGHT_FACTORS, 1.0),
            "3 of 4 off: 'reduce_mean'",
            "its own examples",
            "'raw penalty': each replica adds the whole penalty",
            "'per-token'",
        ),
        fails_with(
            ex.check_pitfall_factors,
            {**RIGHT_FACTORS, "per-token": 10},
            "'per-token'",
            "whatever the replicas",
        ),
        fails_with(
            ex.check_pitfall_factors, {**RIGHT_FACTORS, "raw penalty": 0.5}, "1 of 4 off: 'raw penalty'"
        ),
    ]
    for hint in hints:
        assert "\n" not in hint and not any(f in hint for f in ("2.0", "5.0", "1.0", "2x", "5x", "1x")), hint
    fails_with(ex.check_pitfall_factors, None, "Set FACTORS to a dict with the keys")
    fails_with(ex.check_pitfall_factors, [2, 2, 1, 5], "Set FACTORS to a dict with the keys")
    fails_with(ex.check_pitfall_factors, {"reduce_mean": 2.0}, "Set FACTORS to a dict with the keys")
    placeholder = dict.fromkeys(RIGHT_FACTORS)
    fails_with(ex.check_pitfall_factors, placeholder, "Set FACTORS['reduce_mean'] to a number", "not None")
    fails_with(
        ex.check_pitfall_factors, {**RIGHT_FACTORS, "per-token": "5"}, "Set FACTORS['per-token'] to a number"
    )


# --------------------------------------------------------------------------- predict_clip_factor


def test_predict_clip_factor(capsys) -> None:
    assert abs(ex.measured_clip_factor() - 2.0) < 1e-3  # what the notebook teaches
    ex.check_predict_clip_factor(2.0)
    assert "[pass] predict_clip_factor" in capsys.readouterr().out
    # The plausible wrong answers: the clip acts after the sum (1.0), or on half the gradient; each
    # hint names the mistake in one line and never shows the answer or the measured factor.
    hints = [
        fails_with(
            ex.check_predict_clip_factor, 1.0, "Exercise predict_clip_factor", "Not 1", "summed gradient"
        ),
        fails_with(ex.check_predict_clip_factor, 0.5, "half gradient", "far above the clip norm"),
        fails_with(ex.check_predict_clip_factor, 4, "Not 4", "far above the clip norm"),
        fails_with(ex.check_predict_clip_factor, None, "Set PREDICTION to a number"),
    ]
    for hint in hints:
        assert "2.0" not in hint and "2x" not in hint and "measured" not in hint and "\n" not in hint, hint


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

    fails_with(ex.check_clip_after_sum, local_clip, "On 2 replicas", "Each replica clipped its own gradient")

    def not_divided(grads, clip_norm):  # clips the sum, forgets that apply_gradients sums again
        total, _ = _summed(tf, grads)
        return tf.clip_by_global_norm(total, clip_norm)[0]

    fails_with(ex.check_clip_after_sum, not_divided, "2.00x", "SUMS what the 2 replicas pass")

    def hard_coded(grads, clip_norm):  # right on 2 replicas only
        total, _ = _summed(tf, grads)
        return [g / 2 for g in tf.clip_by_global_norm(total, clip_norm)[0]]

    fails_with(ex.check_clip_after_sum, hard_coded, "On 1 device", "0.50x")
    fails_with(ex.check_clip_after_sum, lambda grads, clip_norm: grads, "not clipped")

    def per_tensor(grads, clip_norm):  # clips the sum, but each tensor apart (clipnorm, not global)
        total, n = _summed(tf, grads)
        return [tf.clip_by_norm(g, clip_norm) / n for g in total]

    fails_with(ex.check_clip_after_sum, per_tensor, "On 1 device", "tf.clip_by_norm on each tensor?")

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


# --------------------------------------------------------------------------- lone_example_factor


def test_lone_example_factor(capsys) -> None:
    assert abs(ex.measured_lone_example_factor() - 1.5) < 1e-6  # what the notebook teaches
    ex.check_lone_example_factor(1.5)
    ex.check_lone_example_factor(3 / 2)
    assert capsys.readouterr().out.count("[pass] lone_example_factor") == 2
    # The plausible wrong answers: the global count (1), the paired examples' factor (0.75), the
    # lone example's weight itself (0.5), a factor of the replicas (2); none is shown the answer.
    hints = [
        fails_with(
            ex.check_lone_example_factor, 1, "Exercise lone_example_factor", "Not 1", "global_batch_size"
        ),
        fails_with(ex.check_lone_example_factor, 0.75, "the other two examples"),
        fails_with(ex.check_lone_example_factor, 0.5, "weight on 2 replicas, not its factor"),
        fails_with(ex.check_lone_example_factor, 2.0, "Not 2", "its own batch times the replicas"),
        fails_with(ex.check_lone_example_factor, 1.4, "Not 1.4"),
        fails_with(ex.check_lone_example_factor, None, "Set LONE_EXAMPLE_FACTOR to a number"),
        fails_with(ex.check_lone_example_factor, True, "Set LONE_EXAMPLE_FACTOR to a number"),
        fails_with(ex.check_lone_example_factor, float("nan"), "Set LONE_EXAMPLE_FACTOR to a number"),
    ]
    for hint in hints:
        assert "1.5" not in hint and "3/2" not in hint and "\n" not in hint, hint


# --------------------------------------------------------------------------- global_moments


def test_global_moments(tf, capsys) -> None:
    def right(x):
        context = tf.distribute.get_replica_context()
        count = tf.cast(tf.shape(x)[0], x.dtype)
        total, squares, count = context.all_reduce(
            tf.distribute.ReduceOp.SUM, [tf.reduce_sum(x, 0), tf.reduce_sum(x * x, 0), count]
        )
        mean = total / count
        return mean, squares / count - mean * mean

    ex.check_global_moments(right)
    assert "[pass] global_moments" in capsys.readouterr().out

    def local(x):  # per-replica statistics, what BatchNormalization() without synchronized does
        return tf.nn.moments(x, axes=[0])

    hint = fails_with(
        ex.check_global_moments, local, "Exercise global_moments", "On 2 replicas", "its own examples"
    )
    assert "[" not in hint, hint  # the global batch's moments are never shown

    def averaged(x):  # all-reduce each replica's moments with MEAN
        mean, var = tf.nn.moments(x, axes=[0])
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, [mean, var])

    fails_with(ex.check_global_moments, averaged, "the mean is right", "averages the replicas' variances")

    def local_count(x):  # divides by its own count times the replicas: right on an even split only
        context = tf.distribute.get_replica_context()
        n = tf.cast(tf.shape(x)[0] * context.num_replicas_in_sync, x.dtype)
        total, squares = context.all_reduce(
            tf.distribute.ReduceOp.SUM, [tf.reduce_sum(x, 0), tf.reduce_sum(x * x, 0)]
        )
        return total / n, squares / n - (total / n) ** 2

    fails_with(ex.check_global_moments, local_count, "split 4 + 3", "even split only", "all-reduced count")

    def unbiased(x):  # the sample variance, divided by count - 1
        context = tf.distribute.get_replica_context()
        count = tf.cast(tf.shape(x)[0], x.dtype)
        total, squares, count = context.all_reduce(
            tf.distribute.ReduceOp.SUM, [tf.reduce_sum(x, 0), tf.reduce_sum(x * x, 0), count]
        )
        mean = total / count
        return mean, (squares - count * mean * mean) / (count - 1)

    fails_with(ex.check_global_moments, unbiased, "count - 1", "divides by the count")
    fails_with(ex.check_global_moments, lambda x: tf.nn.moments(x, axes=[1]), "shape (3,)")
    fails_with(ex.check_global_moments, blank, "not done yet")


# --------------------------------------------------------------------------- replica_dropout


def test_replica_dropout(tf, capsys) -> None:
    def right(x, rate, step):
        context = tf.distribute.get_replica_context()
        rows = tf.shape(x)[0]
        shape = tf.concat([[rows * context.num_replicas_in_sync], tf.shape(x)[1:]], axis=0)
        keep = tf.random.stateless_uniform(shape, seed=[1, step]) >= rate
        first = context.replica_id_in_sync_group * rows
        return tf.where(keep[first : first + rows], x / (1 - rate), tf.zeros_like(x))

    ex.check_replica_dropout(right)
    assert "[pass] replica_dropout" in capsys.readouterr().out

    def stateful(x, rate, step):  # a new mask at every call
        return tf.nn.dropout(x, rate)

    # Unseeded, it is caught as not reproducible; where the process set a global seed, the op's seed
    # repeats and the mask does not change with the step: wrong either way, and named either way.
    hint = fails_with(ex.check_replica_dropout, stateful, "Exercise replica_dropout")
    assert "not reproducible" in hint or "put the step into the seed" in hint, hint

    def same_seed(x, rate, step):  # every replica draws the same mask, as keras.layers.Dropout does
        keep = tf.random.stateless_uniform(tf.shape(x), seed=[1, step]) >= rate
        return tf.where(keep, x / (1 - rate), tf.zeros_like(x))

    fails_with(ex.check_replica_dropout, same_seed, "On 2 replicas both replicas drew the same mask")

    def replica_seed(x, rate, step):  # replicas differ, but the masks depend on the replica count
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        keep = tf.random.stateless_uniform(tf.shape(x), seed=[replica, step]) >= rate
        return tf.where(keep, x / (1 - rate), tf.zeros_like(x))

    fails_with(ex.check_replica_dropout, replica_seed, "not one device's", "its id in the seed")

    def unscaled(x, rate, step):
        return right(x, rate, step) * (1 - rate)

    fails_with(ex.check_replica_dropout, unscaled, "divided by 1 - rate")

    def over_rate(x, rate, step):  # x / rate: the same as x / (1 - rate) at rate 0.5 only
        return right(x, rate, step) * (1 - rate) / rate

    fails_with(ex.check_replica_dropout, over_rate, "not divided by 1 - rate", "At rate=0.2")

    def keeps_below_rate(x, rate, step):  # keeps where the draw is < rate: half either way at 0.5
        return right(x, 1 - rate, step) * rate / (1 - rate)

    fails_with(ex.check_replica_dropout, keeps_below_rate, "At rate=0.2 yours drops 0.", "not about 0.2")

    def no_step(x, rate, step):
        return right(x, rate, 0)

    fails_with(ex.check_replica_dropout, no_step, "put the step into the seed")

    def op_seed(x, rate, step):  # the step as a stateful op's seed: passed when each step was a new trace
        context = tf.distribute.get_replica_context()
        rows = tf.shape(x)[0]
        shape = tf.concat([[rows * context.num_replicas_in_sync], tf.shape(x)[1:]], axis=0)
        keep = tf.random.uniform(shape, seed=step) >= rate
        first = context.replica_id_in_sync_group * rows
        return tf.where(keep[first : first + rows], x / (1 - rate), tf.zeros_like(x))

    # In one traced function, where training runs every step, the step is a tensor: the op refuses it.
    fails_with(
        ex.check_replica_dropout, op_seed, "your code raised", "tf.Tensor"
    )  # TypeError or its subclass

    fails_with(ex.check_replica_dropout, blank, "not done yet")
