"""The checks of notebook 00 pass on right answers and fail, with the right hint, on planted mistakes.

The session's TensorFlow has 2 virtual CPUs (tests/conftest.py): ``check_uneven_mean`` runs the
batch on 2 replicas and on one device, so every wrong prediction below is judged on 2 replicas.
"""

from __future__ import annotations

from checking import blank, fails_with

from course_utils.exercises import setup_and_hardware as ex

# --------------------------------------------------------------------------- uneven_mean


def test_uneven_mean_right_prediction(capsys) -> None:
    ex.check_uneven_mean(lambda: 4.25)
    out = capsys.readouterr().out
    assert "[pass] uneven_mean" in out and "4.25" in out and "4" in out


def test_uneven_mean_one_device_answer() -> None:
    # The plausible mistake: a MEAN across replicas is the mean of the batch.
    fails_with(
        ex.check_uneven_mean,
        lambda: 4.0,
        "Exercise uneven_mean",
        "one device's answer",
        "averages only its own slice",
    )


def test_uneven_mean_sum_of_means() -> None:
    fails_with(ex.check_uneven_mean, lambda: 8.5, "SUM of the 2 replica means")


def test_uneven_mean_wrong_way_round() -> None:
    fails_with(ex.check_uneven_mean, lambda: 3.75, "first replica the larger slice")


def test_uneven_mean_other_number_and_type() -> None:
    fails_with(ex.check_uneven_mean, lambda: 5.0, "On 2 replicas the MEAN reduce prints 4.25")
    fails_with(ex.check_uneven_mean, lambda: [2.5, 6.0], "Return one number")
    fails_with(ex.check_uneven_mean, blank, "not done yet")


# --------------------------------------------------------------------------- per_replica_batch


def right_split(global_batch, replicas):
    if global_batch % replicas:
        raise ValueError(f"{global_batch} examples cannot be split evenly over {replicas} replicas")
    return global_batch // replicas


def test_per_replica_batch(capsys) -> None:
    ex.check_per_replica_batch(right_split)
    assert "[pass] per_replica_batch" in capsys.readouterr().out


def test_per_replica_batch_float_share_on_two_replicas() -> None:
    fails_with(
        ex.check_per_replica_batch,
        lambda g, n: g / n,
        "per_replica_batch(256, 2) should be 128 (an int), got 128.0",
    )


def test_per_replica_batch_global_batch_on_every_replica() -> None:
    # Each replica takes the whole global batch: right on one replica, wrong on two.
    fails_with(
        ex.check_per_replica_batch,
        lambda g, n: g,
        "per_replica_batch(256, 2) should be 128",
        "divided by the number of replicas",
    )


def test_per_replica_batch_never_refuses() -> None:
    fails_with(
        ex.check_per_replica_batch, lambda g, n: g // n, "per_replica_batch(100, 3) should raise ValueError"
    )
    fails_with(ex.check_per_replica_batch, blank, "not done yet")


# --------------------------------------------------------------------------- global_mean


def _reduced(op: str, per_replica: str):
    """A ``global_mean`` that has each replica return ``per_replica`` and reduces with ``op``."""
    import tensorflow as tf

    def global_mean(strategy, dataset):
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))

        def replica(values):
            count = tf.cast(tf.size(values), tf.float32)
            return {
                "mean": tf.reduce_mean(values),
                "sum": tf.reduce_sum(values),
                "both": (tf.reduce_sum(values), count),
            }[per_replica]

        out = strategy.run(replica, args=(batch,))
        reduce_op = getattr(tf.distribute.ReduceOp, op)
        if per_replica == "both":
            total, count = (strategy.reduce(reduce_op, part, axis=None) for part in out)
            return float(total / count)
        return float(strategy.reduce(reduce_op, out, axis=None))

    return global_mean


def test_global_mean_right(capsys) -> None:
    ex.check_global_mean(_reduced("SUM", "both"))
    ex.check_global_mean(_reduced("MEAN", "both"))  # a MEAN of sums over a MEAN of counts: the same ratio
    assert "[pass] global_mean" in capsys.readouterr().out


def test_global_mean_the_wrong_answers_real_code_contains() -> None:
    import numpy as np

    fails_with(ex.check_global_mean, _reduced("MEAN", "mean"), "MEAN of the replicas' means", "4.25")
    fails_with(ex.check_global_mean, _reduced("SUM", "sum"), "is their sum")
    fails_with(ex.check_global_mean, _reduced("MEAN", "sum"), "by the number of replicas")
    # no replica computes anything: the right number, but not from the replicas
    fails_with(ex.check_global_mean, lambda s, d: float(np.mean(list(d)[0])), "never gave the dataset")
    fails_with(ex.check_global_mean, lambda s, d: [4.0], "Return one number")
    fails_with(ex.check_global_mean, blank, "not done yet")


def test_global_mean_on_an_undistributed_batch_fails() -> None:
    """Every replica gets the whole batch: the sum/count ratio is right, but nothing was split."""
    import tensorflow as tf

    def undistributed(strategy, dataset):
        batch = next(iter(dataset))
        sums, counts = strategy.run(
            lambda v: (tf.reduce_sum(v), tf.cast(tf.size(v), tf.float32)), args=(batch,)
        )
        return float(strategy.reduce("SUM", sums, axis=None) / strategy.reduce("SUM", counts, axis=None))

    fails_with(
        ex.check_global_mean,
        undistributed,
        "never gave the dataset to strategy.experimental_distribute_dataset",
    )
