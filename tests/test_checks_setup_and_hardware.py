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
    message = fails_with(
        ex.check_uneven_mean, lambda: 5.0, "5 is not what the MEAN reduce prints", "each replica's slice"
    )
    assert "4.25" not in message  # a hint never prints the answer
    fails_with(ex.check_uneven_mean, lambda: [2.5, 6.0], "Return one number")
    fails_with(ex.check_uneven_mean, blank, "not done yet")


# --------------------------------------------------------------------------- global_batch


def test_global_batch_right(capsys) -> None:
    ex.check_global_batch(lambda strategy, per_replica: per_replica * strategy.num_replicas_in_sync)
    assert "[pass] global_batch" in capsys.readouterr().out


def test_global_batch_the_per_replica_size_given_to_the_dataset() -> None:
    # Right on one replica, half on two: the dataset's batch is split over the replicas.
    fails_with(
        ex.check_global_batch,
        lambda strategy, per_replica: per_replica,
        "On 2 replicas each got half of what you asked for",
        "the dataset's batch is the global one",
    )


def test_global_batch_two_replicas_written_in() -> None:
    # Right on 2 replicas, twice too big on one device.
    fails_with(
        ex.check_global_batch,
        lambda strategy, per_replica: per_replica * 2,
        "On 1 replica it got twice what you asked for",
    )


def test_global_batch_divided_by_the_replicas() -> None:
    fails_with(
        ex.check_global_batch,
        lambda strategy, per_replica: per_replica // strategy.num_replicas_in_sync,
        "each got a quarter of what you asked for",
    )


def test_global_batch_other_numbers_and_types() -> None:
    fails_with(ex.check_global_batch, lambda s, p: p * s.num_replicas_in_sync + 1, "the replicas got 33 + 32")
    fails_with(ex.check_global_batch, lambda s, p: p * s.num_replicas_in_sync / 1, "(an int), not 64.0")
    fails_with(ex.check_global_batch, lambda s, p: 0, "0 is not a batch size")
    fails_with(ex.check_global_batch, blank, "not done yet")


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
    assert "[pass] global_mean" in capsys.readouterr().out


def test_global_mean_without_a_sum_reduce_fails() -> None:
    """The right number, but not combined over the replicas with strategy.reduce."""
    import numpy as np
    import tensorflow as tf

    def concatenated(strategy, dataset):  # the replicas' slices gathered and averaged in NumPy
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        local = strategy.experimental_local_results(strategy.run(tf.identity, args=(batch,)))
        return float(np.mean(np.concatenate([t.numpy() for t in local])))

    hint = "add the replicas' sums and counts with strategy.reduce(ReduceOp.SUM, ...)"
    fails_with(ex.check_global_mean, concatenated, hint)


def test_global_mean_of_means_of_sums_and_counts_is_right_too(capsys) -> None:
    """A MEAN of the sums over a MEAN of the counts is the same ratio: a right answer passes."""
    ex.check_global_mean(_reduced("MEAN", "both"))
    assert "[pass] global_mean" in capsys.readouterr().out


def test_global_mean_first_replicas_count_times_the_replicas() -> None:
    import tensorflow as tf

    def first_count(strategy, dataset):
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        sums, counts = strategy.run(
            lambda v: (tf.reduce_sum(v), tf.cast(tf.size(v), tf.float32)), args=(batch,)
        )
        count = strategy.experimental_local_results(counts)[0] * strategy.num_replicas_in_sync
        return float(strategy.reduce("SUM", sums, axis=None) / count)

    message = fails_with(ex.check_global_mean, first_count, "the first replica's count x the replicas")
    assert "3.5 takes" in message and "4 " not in message  # its own number; never the true mean, 4


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
