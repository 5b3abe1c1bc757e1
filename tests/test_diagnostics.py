"""course_utils.lessons.diagnostics (notebook 05): the update factor of a distributed train step."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from course_utils.compare import checking_strategy
from course_utils.errors import CourseError
from course_utils.lessons.diagnostics import UpdateFactor, compare_updates, count_all_reduces, update_factor

GLOBAL_BATCH = 8


def _batch(n: int = GLOBAL_BATCH):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype("float32"), rng.integers(0, 3, size=n).astype("int32")


def _make_model():
    import keras

    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(
                8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
            ),
            keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
        ]
    )


def _step(reduce):
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = reduce(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def _correct():
    import tensorflow as tf

    return _step(lambda l: tf.nn.compute_average_loss(l, global_batch_size=GLOBAL_BATCH))


def _reduce_mean():
    import tensorflow as tf

    return _step(tf.reduce_mean)


# --------------------------------------------------------------------------- pure parts


def test_compare_updates_scaling_and_direction() -> None:
    reference = np.array([1.0, -2.0, 3.0])
    assert compare_updates(2 * reference, reference) == pytest.approx((2.0, 0.0))
    factor, mismatch = compare_updates(np.array([2.0, 1.0, 0.0]), reference)  # orthogonal
    assert factor == pytest.approx(0.0) and mismatch == pytest.approx((5 / 14) ** 0.5)
    factor, mismatch = compare_updates(reference, np.zeros(3))
    assert math.isnan(factor) and math.isnan(mismatch)
    with pytest.raises(CourseError):
        compare_updates(np.ones(2), np.ones(3))


def test_update_factor_result_text() -> None:
    result = UpdateFactor(2, 2.0, 0.0, 3.0, 1.5, np.ones(2), np.ones(2))
    assert str(result) == "2.00x"
    assert result.loss_factor == pytest.approx(2.0)
    assert not result.ok
    assert result.summary() == (
        "update on 2 replicas = 2.00x the single-device update; reported loss 2.00x the single-device loss"
    )
    skewed = UpdateFactor(2, 1.18, 0.361, None, 1.0, np.ones(2), np.ones(2))
    assert "differs in direction too (36.1% mismatch)" in skewed.summary()
    assert skewed.loss_factor is None and "reported loss" not in skewed.summary()
    assert UpdateFactor(2, 1.0000001, 1e-7, 1.0, 1.0, np.ones(2), np.ones(2)).ok


# --------------------------------------------------------------------------- with TensorFlow


def test_correct_step_is_one(two_replicas) -> None:
    result = update_factor(_correct(), _make_model, _batch(), strategy=two_replicas)
    assert result.ok and result.replicas == 2
    assert result.loss == pytest.approx(result.reference_loss, rel=1e-6)


def test_reduce_mean_doubles_sgd_but_not_adam(two_replicas) -> None:
    import keras

    sgd = update_factor(_reduce_mean(), _make_model, _batch(), strategy=two_replicas)
    assert sgd.factor == pytest.approx(2.0, abs=1e-4) and sgd.mismatch < 1e-4
    assert sgd.loss_factor == pytest.approx(2.0, abs=1e-4)
    adam = update_factor(
        _reduce_mean(),
        _make_model,
        _batch(),
        strategy=two_replicas,
        make_optimizer=lambda: keras.optimizers.Adam(0.01),
    )
    assert adam.factor == pytest.approx(1.0, abs=1e-2) and adam.factor != 1.0
    assert adam.loss_factor == pytest.approx(2.0, abs=1e-4)


def test_default_strategy_is_created_from_replicas() -> None:
    result = update_factor(_reduce_mean(), _make_model, _batch(), replicas=2, show=False)
    assert result.replicas == 2 and str(result) == "2.00x"


def test_reference_step_and_short_batch(two_replicas) -> None:
    import tensorflow as tf

    default_denominator = _step(tf.nn.compute_average_loss)
    # the same step on one device: on a 3-example batch split 2 + 1 the weights differ
    result = update_factor(
        default_denominator, _make_model, _batch(3), strategy=two_replicas, reference_step=_reduce_mean()
    )
    assert result.mismatch > 0.01
    # a fixed global batch of 8 on a batch of 3: 3/8 of the mean, a pure scaling
    result = update_factor(
        _correct(), _make_model, _batch(3), strategy=two_replicas, reference_step=_reduce_mean()
    )
    assert result.factor == pytest.approx(3 / 8, abs=1e-4) and result.mismatch < 1e-4


def test_several_steps_and_show(two_replicas, capsys) -> None:
    result = update_factor(_reduce_mean(), _make_model, _batch(), strategy=two_replicas, steps=3, show=True)
    assert result.factor > 1.5
    assert capsys.readouterr().out.startswith("update on 2 replicas = ")
    with pytest.raises(CourseError):
        update_factor(_correct(), _make_model, _batch(), strategy=two_replicas, steps=0)


def test_checking_strategy_says_what_to_do() -> None:
    assert checking_strategy(2).num_replicas_in_sync == 2
    assert checking_strategy(2) is checking_strategy(2)  # one per count and process
    assert checking_strategy(1).num_replicas_in_sync == 1
    with pytest.raises(CourseError, match=r"use_virtual_cpus\(3\)"):
        checking_strategy(3)


def test_quiet_native_logs(capfd) -> None:
    from course_utils import quiet_native_logs

    with quiet_native_logs():
        os.write(2, b"native noise\n")
    os.write(2, b"visible\n")
    assert capfd.readouterr().err == "visible\n"


def test_count_all_reduces_reads_a_replicas_step(two_replicas) -> None:
    """Two all-reduces in a replica's step are counted once per replica; none on one device."""
    import tensorflow as tf

    def two_sums(x):
        context = tf.distribute.get_replica_context()
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, x)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, total * total)

    for strategy, want in [(two_replicas, 2), (checking_strategy(1), 0)]:
        x = strategy.experimental_distribute_values_from_function(lambda _: tf.constant([1.0, 2.0]))
        assert count_all_reduces(strategy, two_sums, x) == want
