"""The checks of notebook 01 pass on right answers and give the right hint for planted mistakes.

The checks that run an epoch do it on 2 replicas (the session's two virtual CPUs, see conftest)
next to one device."""

from __future__ import annotations

import numpy as np
import pytest
from checking import fails_with as _fails

from course_utils.exercises import data_parallelism as ex

RIGHT = ex.reference_solutions()


def test_all_checks_pass_on_reference_solutions(capsys) -> None:
    ex.check_replica_step(RIGHT["replica_step"])
    ex.check_data_parallel_gradient(RIGHT["data_parallel_gradient"])
    ex.check_updates_per_epoch(RIGHT["updates_per_epoch"])
    ex.check_epoch_traffic(RIGHT["epoch_traffic"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [
        "[pass] replica_step",
        "[pass] data_parallel_gradient",
        "[pass] updates_per_epoch",
        "[pass] epoch_traffic",
    ]
    assert "16 updates on 2 replicas (64 examples each, the last 20 + 20), 32 on one device" in out[2]


def test_checks_of_an_unfinished_exercise_say_so() -> None:
    def blank(*args, **kwargs):
        raise NotImplementedError("Exercise x: replace this line with your code")

    for check, ident, answer in [
        (ex.check_replica_step, "replica_step", blank),
        (ex.check_data_parallel_gradient, "data_parallel_gradient", blank),
        (ex.check_updates_per_epoch, "updates_per_epoch", None),
        (ex.check_epoch_traffic, "epoch_traffic", blank),
    ]:
        _fails(check, answer, f"Exercise {ident} is not done yet")


# --------------------------------------------------------------------------- data_parallel_gradient


def _combine(weights):
    """An answer that adds the local means, each times ``weights(sizes)[r]``."""

    def answer(local_means, shard_sizes):
        w = weights(shard_sizes)
        return {k: sum(wr * g[k] for wr, g in zip(w, local_means)) for k in local_means[0]}

    return answer


def test_data_parallel_gradient_right_answers_written_other_ways(capsys) -> None:
    def weighted_mean(local_means, shard_sizes):  # sum(n_r g_r) / sum(n_r)
        return {
            k: sum(n * g[k] for n, g in zip(shard_sizes, local_means)) / sum(shard_sizes)
            for k in ("kernel", "bias")
        }

    def in_place(local_means, shard_sizes):  # scales the arrays it was given
        for n, g in zip(shard_sizes, local_means):
            for k in g:
                g[k] *= n / sum(shard_sizes)
        return {k: sum(g[k] for g in local_means) for k in local_means[0]}

    for answer in (weighted_mean, in_place):
        ex.check_data_parallel_gradient(answer)
    assert capsys.readouterr().out.count("[pass] data_parallel_gradient") == 2


@pytest.mark.parametrize(
    "weights, needles",
    [
        (lambda n: [1] * len(n), ["On shards 12 + 12", "weight 1 each", "N times", "2.00x"]),
        (
            lambda n: [1 / len(n)] * len(n),
            ["On shards 4 + 4 + 2", "every replica alike", "the short shard counted as much as a full one"],
        ),
        (lambda n: [1 / len(n) ** 2] * len(n), ["number of replicas twice", "0.50x"]),
        (lambda n: [k / sum(n) / len(n) for k in n], ["after weighting", "never averages"]),
        (lambda n: [1 / sum(n)] * len(n), ["divided each local mean by the global batch", "0.08x"]),
        (lambda n: list(n), ["never divided by the global batch", "24.00x"]),
        (lambda n: [k / (n[0] * len(n)) for k in n], ["On shards 4 + 4 + 2", "first shard's size x N"]),
        (lambda n: [k / (max(n) * len(n)) for k in n], ["first shard's size x N", "SUM of the shard sizes"]),
        (lambda n: [k / len(n) for k in n], ["number of replicas where the global batch"]),
        (lambda n: [k / 64 for k in n], ["the notebook's GLOBAL_BATCH (64)"]),
    ],
    ids=[
        "sum of local means",
        "mean of local means",
        "divided by N twice",
        "weighted then averaged",
        "each mean over the global batch",
        "shard sizes without the global batch",
        "global batch from the first shard",
        "global batch from the largest shard",
        "N for the global batch",
        "the notebook's GLOBAL_BATCH",
    ],
)
def test_data_parallel_gradient_names_each_mistake(weights, needles) -> None:
    _fails(ex.check_data_parallel_gradient, _combine(weights), "Exercise data_parallel_gradient", *needles)


def test_data_parallel_gradient_other_wrong_weights_get_the_mistake_not_the_answer() -> None:
    message = _fails(
        ex.check_data_parallel_gradient,
        _combine(lambda n: [k / sum(n) for k in reversed(n)]),  # each replica given another's share
        "On shards 4 + 4 + 2",
        "a local mean divides by its own shard, one device by the whole batch",
    )
    assert "alike" not in message and "expected" not in message and "shard size /" not in message


def test_data_parallel_gradient_splits_as_tf_distribute_does(capsys, two_replicas) -> None:
    """The check's shards are tf.distribute's (ceil(B/N) each until the batch runs out), as the
    notebook's ``shard`` teaches, not np.array_split's (10 over 3: 4 + 4 + 2, not 4 + 3 + 3)."""
    import tensorflow as tf

    assert [len(s) for s in ex.shard(np.arange(10), 3)] == [4, 4, 2]
    assert [len(s) for s in ex.shard(np.arange(23), 5)] == [5, 5, 5, 5, 3]
    batch = tf.data.Dataset.range(7).batch(7)
    split = two_replicas.experimental_local_results(
        next(iter(two_replicas.experimental_distribute_dataset(batch)))
    )
    assert [int(t.shape[0]) for t in split] == [len(s) for s in ex.shard(np.arange(7), 2)] == [4, 3]
    ex.check_data_parallel_gradient(RIGHT["data_parallel_gradient"])
    assert "uneven shards (4 + 4 + 2, 5 + 5 + 5 + 5 + 3, 4 + 3) included." in capsys.readouterr().out


def test_data_parallel_gradient_drawn_cases_give_every_replica_an_example() -> None:
    """At grading time a drawn (replicas, batch) that would leave a replica nothing (6 over 5:
    2 + 2 + 2 + 0 + 0, a mean of no examples) is drawn again."""
    import random

    from course_utils import exercises

    seen = []

    def recorded(local_means, shard_sizes):
        seen.append(list(shard_sizes))
        return RIGHT["data_parallel_gradient"](local_means, shard_sizes)

    for seed in range(40):
        exercises.UNSEEN = random.Random(seed)
        try:
            ex.check_data_parallel_gradient(recorded)
        finally:
            exercises.UNSEEN = None
    assert min(min(sizes) for sizes in seen) > 0
    assert {tuple(sizes) for sizes in seen} - {
        tuple(len(s) for s in ex.shard(np.arange(b), n)) for n, b in ex.GRADIENT_CASES
    }


def test_data_parallel_gradient_wrong_return_type() -> None:
    def as_list(local_means, shard_sizes):
        return [sum(g[k] for g in local_means) for k in ("kernel", "bias")]

    _fails(ex.check_data_parallel_gradient, as_list, "Return a dict", "got list")

    def flat(local_means, shard_sizes):
        return {
            k: np.ravel(sum(n / sum(shard_sizes) * g[k] for n, g in zip(shard_sizes, local_means)))
            for k in ("kernel", "bias")
        }

    _fails(ex.check_data_parallel_gradient, flat, "'kernel' gradient must have the shape", "(4, 3)")


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
    message = _fails(
        ex.check_updates_per_epoch, 32, "what ONE device makes", "32 examples on EACH replica, 64 in all"
    )
    assert "16" not in message  # the count the run made is the answer: no hint shows it


def test_updates_per_epoch_dropping_the_last_batch() -> None:
    message = _fails(
        ex.check_updates_per_epoch, 15, "FULL global batches only", "(20 + 20 examples", "an update too"
    )
    assert "16" not in message


def test_updates_per_epoch_not_a_whole_number() -> None:
    _fails(ex.check_updates_per_epoch, 1000 / 64, "whole number of updates")


def test_updates_per_epoch_other_guess() -> None:
    for guess in (8, 17):
        message = _fails(
            ex.check_updates_per_epoch, guess, f"You predicted {guess}, not what the run", "short one too"
        )
        assert "16" not in message


# --------------------------------------------------------------------------- epoch_traffic


def test_epoch_traffic_steps_of_the_per_replica_batch() -> None:
    def per_replica_steps(m, examples, batch, n, b=4):
        return -(-examples // batch) * 2 * (n - 1) / n * m * b

    message = _fails(
        ex.check_epoch_traffic,
        per_replica_steps,
        "replicas=2",
        "on EACH of 2 replicas",
        "count global batches",
        "(yours: 128,000 bytes)",  # 32 steps x 4,000 bytes: the student's own number
    )
    _no_answer(message)


def test_epoch_traffic_forgetting_the_last_batch() -> None:
    def floor(m, examples, batch, n, b=4):
        return examples // (batch * n) * 2 * (n - 1) / n * m * b

    message = _fails(
        ex.check_epoch_traffic, floor, "dropped the last, shorter batch", "(yours: 60,000 bytes)"
    )
    _no_answer(message)


def test_epoch_traffic_one_step_only() -> None:
    message = _fails(
        ex.check_epoch_traffic, lambda m, e, batch, n, b=4: 2 * (n - 1) / n * m * b, "ONE step's traffic"
    )
    _no_answer(message)


def test_epoch_traffic_bytes_that_grow_with_the_batch() -> None:
    def batch_sized(m, examples, batch, n, b=4):  # thinks a bigger batch sends a bigger gradient
        return -(-examples // (batch * n)) * 2 * (n - 1) / n * m * b * batch

    message = _fails(ex.check_epoch_traffic, batch_sized, "per_replica_batch=32", "whatever the batch size")
    _no_answer(message)


def test_epoch_traffic_one_device_sends_nothing() -> None:
    def no_special_case(m, examples, batch, n, b=4):
        return -(-examples // (batch * n)) * 2 * max(n - 1, 1) / n * m * b

    _fails(ex.check_epoch_traffic, no_special_case, "should be 0")


def _no_answer(message: str) -> None:
    """An epoch_traffic hint shows neither the steps of the notebook's epoch (16 on 2 replicas) nor
    the right bytes (64,000 there) nor a ratio to them: only the student's own number."""
    assert "16" not in message and "64,000" not in message and "x" not in message.split("(yours")[-1]
    assert "steps, not" not in message


def _ring(m, n, w):
    return 2 * (n - 1) / n * m * w


def _epoch_steps(e, b, n):
    return -(-e // (b * n))


@pytest.mark.parametrize(
    "answer, needles",
    [
        (lambda m, e, b, n, w=4: e / (b * n) * _ring(m, n, w), ["steps are whole", "not a fraction"]),
        (lambda m, e, b, n, w=4: round(e / (b * n)) * _ring(m, n, w), ["round the steps UP", "replicas=8"]),
        (
            lambda m, e, b, n, w=4: _epoch_steps(e, b, n) * (n - 1) / n * m * w,
            ["reduce-scatter alone", "(yours: 32,000 bytes)"],
        ),
        (
            lambda m, e, b, n, w=4: _epoch_steps(e, b, n) * 2 * (n - 1) * m * w,
            ["ONE chunk, 1/N", "128,000 bytes"],
        ),
        (lambda m, e, b, n, w=4: _epoch_steps(e, b, n) * n * m * w, ["one parameter server's traffic"]),
        (lambda m, e, b, n, w=4: _epoch_steps(e, b, n) * 2 * m * w, ["the ring's bound, not its traffic"]),
        (
            lambda m, e, b, n, w=4: _epoch_steps(e, b, n) * _ring(m, n, 4),
            ["ignored bytes_per_param (2 here)"],
        ),
        (
            lambda m, e, b, n, w=4: _epoch_steps(e, b, n) * _ring(m, n, 1),
            ["numbers, not bytes", "16,000 bytes"],
        ),
    ],
    ids=[
        "fractional steps",
        "rounded steps",
        "reduce-scatter only",
        "whole gradients as chunks",
        "a parameter server's traffic",
        "twice the model",
        "bytes_per_param ignored",
        "numbers, not bytes",
    ],
)
def test_epoch_traffic_names_each_mistake(answer, needles) -> None:
    message = _fails(ex.check_epoch_traffic, answer, "Exercise epoch_traffic", *needles)
    assert "steps, not" not in message and "x" not in message.split("(yours")[-1]  # no ratio
    assert "64,000" not in message  # the right bytes of the notebook's first case


# --------------------------------------------------------------------------- replica_step


def _step(loss="global", all_reduce=False, returns="grads"):
    """A ``make_replica_step`` as real code writes it: each replica's loss (``loss``), its gradients
    returned as they are or all-reduced first (``all_reduce``, as if it were the optimizer)."""

    def make_replica_step(kernel, bias, global_batch):
        import tensorflow as tf

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ kernel + bias)
                if loss == "global":
                    value = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                elif loss == "mean":  # one-device code: tf.reduce_mean
                    value = tf.reduce_mean(per_example)
                elif loss == "default size":  # compute_average_loss's own global batch
                    value = tf.nn.compute_average_loss(per_example)
                elif loss == "notebook batch":  # the notebook's GLOBAL_BATCH, not the argument
                    value = tf.reduce_sum(per_example) / 64.0
                elif loss == "two replicas":  # a replica count written in
                    value = tf.reduce_sum(per_example) / (tf.cast(tf.shape(x)[0], tf.float32) * 2)
                elif loss == "mean over replicas":  # right on even shards only
                    replicas = tf.distribute.get_replica_context().num_replicas_in_sync
                    value = tf.reduce_mean(per_example) / replicas
            if returns == "outside the tape":
                value = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ kernel + bias))
            grads = tape.gradient(value, [kernel, bias])
            if all_reduce:
                return tf.distribute.get_replica_context().all_reduce(all_reduce, grads)
            if returns == "swapped":
                return grads[::-1]
            if returns == "kernel only":
                return [grads[0]]
            return grads

        return replica_step

    return make_replica_step


@pytest.mark.parametrize(
    "answer, needles",
    [
        (_step(loss="mean"), ["2 replicas, a global batch of 16", "2.00x", "averages over its own examples"]),
        (_step(all_reduce="SUM"), ["2.00x", "returns the all-reduced gradient", "own gradient"]),
        (_step(all_reduce="MEAN"), ["add up right", "its own share"]),
        (_step(loss="mean over replicas"), ["a global batch of 7 split unevenly", "divide by global_batch"]),
        (_step(returns="outside the tape"), ["tape.gradient gave None"]),
        (_step(returns="swapped"), ["in that order", "(3,), (4, 3)"]),
        (_step(returns="kernel only"), ["[kernel, bias]", "list of 1"]),
        (
            _step(loss="default size"),
            ["a global batch of 7 split unevenly", "compute_average_loss's default"],
        ),
        (_step(loss="notebook batch"), ["on 1 replica, a global batch of 16", "0.25x", "you divide by 64"]),
        (_step(loss="two replicas"), ["on 1 replica", "0.50x", "you divide by 32"]),
    ],
    ids=[
        "reduce_mean",
        "all-reduced twice",
        "MEAN all-reduce",
        "mean over replicas",
        "loss outside the tape",
        "swapped",
        "kernel only",
        "default batch size",
        "notebook's 64",
        "2 written in",
    ],
)
def test_replica_step_names_each_mistake(answer, needles) -> None:
    _fails(ex.check_replica_step, answer, *needles)


def test_replica_step_wrong_returns() -> None:
    _fails(ex.check_replica_step, lambda kernel, bias, global_batch: 3, "must return the function")

    def loss_only(kernel, bias, global_batch):
        return lambda x, y: tf_sum(x)

    def tf_sum(x):
        import tensorflow as tf

        return tf.reduce_sum(x)

    _fails(ex.check_replica_step, loss_only, "this replica's gradients [kernel, bias]")


def test_epoch_traffic_an_unnamed_mistake_gets_no_answer() -> None:
    def three_times(m, examples, batch, n, b=4):  # no mistake the check knows by name
        return 1.5 * -(-examples // (batch * n)) * 2 * (n - 1) / n * m * b

    message = _fails(ex.check_epoch_traffic, three_times, "count the steps of an epoch")
    assert "expected" not in message and "x the reference" not in message
