"""The checks of notebook 01 pass on right answers and give the right hint for planted mistakes.

The checks that run an epoch do it on 2 replicas (the session's two virtual CPUs, see conftest)
next to one device."""

from __future__ import annotations

import numpy as np
from checking import fails_with as _fails

from course_utils.exercises import data_parallelism as ex

RIGHT = ex.reference_solutions()


def test_all_checks_pass_on_reference_solutions(capsys) -> None:
    ex.check_data_parallel_gradient(RIGHT["data_parallel_gradient"])
    ex.check_updates_per_epoch(RIGHT["updates_per_epoch"])
    ex.check_epoch_traffic(RIGHT["epoch_traffic"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [
        "[pass] data_parallel_gradient",
        "[pass] updates_per_epoch",
        "[pass] epoch_traffic",
    ]
    assert "16 updates on 2 replicas (64 examples each, the last 20 + 20), 32 on one device" in out[1]


def test_checks_of_an_unfinished_exercise_say_so() -> None:
    def blank(*args, **kwargs):
        raise NotImplementedError("Exercise x: replace this line with your code")

    for check, ident, answer in [
        (ex.check_data_parallel_gradient, "data_parallel_gradient", blank),
        (ex.check_updates_per_epoch, "updates_per_epoch", None),
        (ex.check_epoch_traffic, "epoch_traffic", blank),
    ]:
        _fails(check, answer, f"Exercise {ident} is not done yet")


# --------------------------------------------------------------------------- data_parallel_gradient


def _local_means(params, x, y, replicas):
    """Each replica's mean gradient of its own shard, as tf.reduce_mean gives (and the exercise starts from)."""
    return [
        ex.mean_loss_gradient(params, xs, ys)
        for xs, ys in zip(np.array_split(x, replicas), np.array_split(y, replicas))
    ]


def test_data_parallel_gradient_local_mean_then_sum_is_n_times() -> None:
    def local_mean_sum(params, x, y, replicas):
        grads = _local_means(params, x, y, replicas)
        return {k: sum(g[k] for g in grads) for k in grads[0]}

    message = _fails(
        ex.check_data_parallel_gradient, local_mean_sum, "On 2 replica(s)", "GLOBAL batch size (24)", "2.00x"
    )
    assert "uneven" not in message


def test_data_parallel_gradient_mean_of_local_means_fails_on_uneven_shards() -> None:
    def mean_of_means(params, x, y, replicas):
        grads = _local_means(params, x, y, replicas)
        return {k: sum(g[k] for g in grads) / replicas for k in grads[0]}

    _fails(
        ex.check_data_parallel_gradient,
        mean_of_means,
        "global batch of 10 (uneven shards)",
        "only right when",
        "shard size / 10",
    )


def test_data_parallel_gradient_weights_by_the_replicas_not_the_shards() -> None:
    def per_replica_weight(params, x, y, replicas):  # each mean weighted 1/N, the shard sizes ignored
        grads = _local_means(params, x, y, replicas)
        return {k: sum(g[k] / replicas for g in grads) for k in grads[0]}

    _fails(ex.check_data_parallel_gradient, per_replica_weight, "(uneven shards)", "only right when")


def test_data_parallel_gradient_wrong_return_type() -> None:
    def as_list(params, x, y, replicas):
        g = ex.mean_loss_gradient(params, x, y)
        return [g["kernel"], g["bias"]]

    _fails(ex.check_data_parallel_gradient, as_list, "Return a dict", "got list")


def test_the_reference_gradient_is_the_mean_loss_gradient() -> None:
    """The checks' own NumPy gradient against finite differences of the mean softmax cross-entropy."""
    rng = np.random.default_rng(3)
    params = {"kernel": rng.normal(size=(4, 3)), "bias": rng.normal(size=3)}
    x, y = rng.normal(size=(9, 4)), rng.integers(0, 3, size=9)

    def loss(p):
        logits = x @ p["kernel"] + p["bias"]
        return float(np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(y)), y]))

    analytic = ex.mean_loss_gradient(params, x, y)
    for name, value in params.items():
        for index in np.ndindex(value.shape):
            nudge = np.zeros_like(value)
            nudge[index] = 1e-6
            slope = (loss({**params, name: value + nudge}) - loss({**params, name: value - nudge})) / 2e-6
            assert abs(slope - analytic[name][index]) < 1e-7


# --------------------------------------------------------------------------- updates_per_epoch


def test_updates_per_epoch_one_device_count() -> None:
    _fails(
        ex.check_updates_per_epoch,
        32,
        "what ONE device makes",
        "32 examples on EACH replica, 64 in all",
        "the run made 16 updates",
    )


def test_updates_per_epoch_dropping_the_last_batch() -> None:
    _fails(ex.check_updates_per_epoch, 15, "FULL global batches", "40 examples (20 + 20", "the run made 16")


def test_updates_per_epoch_not_a_whole_number() -> None:
    _fails(ex.check_updates_per_epoch, 1000 / 64, "whole number of updates")


def test_updates_per_epoch_other_guess() -> None:
    _fails(ex.check_updates_per_epoch, 8, "You predicted 8; the run made 16 updates on 2 replicas")


# --------------------------------------------------------------------------- epoch_traffic


def test_epoch_traffic_steps_of_the_per_replica_batch() -> None:
    def per_replica_steps(m, examples, batch, n, b=4):
        return -(-examples // batch) * 2 * (n - 1) / n * m * b

    _fails(
        ex.check_epoch_traffic,
        per_replica_steps,
        "replicas=2",
        "on EACH of the 2 replicas",
        "16 steps, not 32",
    )


def test_epoch_traffic_forgetting_the_last_batch() -> None:
    def floor(m, examples, batch, n, b=4):
        return examples // (batch * n) * 2 * (n - 1) / n * m * b

    _fails(ex.check_epoch_traffic, floor, "last, shorter batch is a step too", "16 steps, not 15")


def test_epoch_traffic_one_step_only() -> None:
    _fails(ex.check_epoch_traffic, lambda m, e, batch, n, b=4: 2 * (n - 1) / n * m * b, "ONE step's traffic")


def test_epoch_traffic_bytes_that_grow_with_the_batch() -> None:
    def batch_sized(m, examples, batch, n, b=4):  # thinks a bigger batch sends a bigger gradient
        return -(-examples // (batch * n)) * 2 * (n - 1) / n * m * b * batch

    _fails(ex.check_epoch_traffic, batch_sized, "per_replica_batch=32", "whatever the batch size", "32.00x")


def test_epoch_traffic_one_device_sends_nothing() -> None:
    def no_special_case(m, examples, batch, n, b=4):
        return -(-examples // (batch * n)) * 2 * max(n - 1, 1) / n * m * b

    _fails(ex.check_epoch_traffic, no_special_case, "should be 0")
