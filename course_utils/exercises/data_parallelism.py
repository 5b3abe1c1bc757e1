"""Notebook 01: the checks of its exercises (data parallelism)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..checks import exercise, expect, expect_close, passed
from ..strategies import mirrored_cpus


def mean_loss_gradient(params: dict, x: np.ndarray, y: np.ndarray) -> dict:
    """The checks' own reference: the gradient of the mean softmax cross-entropy of ``x`` on one
    device, ``{"kernel": ..., "bias": ...}``."""
    logits = x @ params["kernel"] + params["bias"]
    dlogits = np.exp(logits - logits.max(axis=1, keepdims=True))
    dlogits /= dlogits.sum(axis=1, keepdims=True)
    dlogits[np.arange(len(y)), y] -= 1.0
    return {"kernel": x.T @ dlogits / len(x), "bias": dlogits.mean(axis=0)}


def check_data_parallel_gradient(
    data_parallel_gradient: Callable[[dict, np.ndarray, np.ndarray, int], dict],
) -> None:
    """Combined from the local means of N replicas, the gradient must equal one device's on the batch."""
    rng = np.random.default_rng(7)
    params = {"kernel": 0.3 * rng.normal(size=(4, 3)), "bias": 0.1 * rng.normal(size=3)}
    x_all, y_all = rng.normal(size=(24, 4)), rng.integers(0, 3, size=24)
    with exercise("data_parallel_gradient"):
        for replicas, batch in [(2, 24), (1, 24), (4, 24), (3, 10), (5, 23)]:
            x, y = x_all[:batch], y_all[:batch]
            reference = mean_loss_gradient(params, x, y)
            got = data_parallel_gradient(params, x, y, replicas)
            expect(
                isinstance(got, dict) and set(got) == {"kernel", "bias"},
                "Return a dict with the same keys as loss_gradients gives: 'kernel' and 'bias' "
                f"(got {type(got).__name__}{' with keys ' + str(sorted(got)) if isinstance(got, dict) else ''}).",
            )
            uneven = batch % replicas != 0
            for name in ("kernel", "bias"):
                expect_close(
                    got[name],
                    reference[name],
                    f"On {replicas} replica(s) with a global batch of {batch}"
                    f"{' (uneven shards)' if uneven else ''}, the '{name}' gradient differs from the "
                    "single-device gradient of the whole batch. A replica's mean divides its sum of "
                    "per-example losses by its own shard size; one device divides the whole sum by the "
                    f"GLOBAL batch size ({batch}): weight each replica's mean by its shard size / {batch}, "
                    "then SUM the replicas' gradients"
                    + (
                        " (averaging the replicas' local means is only right when every shard has "
                        "the same size)"
                        if uneven
                        else ""
                    ),
                    rtol=0,
                    atol=1e-6,
                )
    passed(
        "data_parallel_gradient",
        "equals the single-device gradient on 1 to 5 replicas, even and uneven shards.",
    )


#: The epoch of ``updates_per_epoch``: examples in the data set, examples per replica per step.
EPOCH_EXAMPLES, PER_REPLICA_BATCH = 1_000, 32


def epoch_batches(strategy: Any, examples: int, per_replica_batch: int) -> list[list[int]]:
    """Run one epoch of ``range(examples)`` through ``strategy`` with ``per_replica_batch``
    examples per replica; for each step (one update), the number of examples on each replica."""
    import tensorflow as tf

    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(examples).batch(global_batch)
    return [
        [int(t.shape[0]) for t in strategy.experimental_local_results(batch)]
        for batch in strategy.experimental_distribute_dataset(dataset)
    ]


def _two_replicas() -> Any:
    return mirrored_cpus(2, needed_by="This check")


def _one_device() -> Any:
    import tensorflow as tf

    return tf.distribute.get_strategy()


def check_updates_per_epoch(prediction: Any) -> None:
    """``UPDATES_ON_2_REPLICAS``: the updates of one epoch on 2 replicas, counted by running it."""
    with exercise("updates_per_epoch"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        expect(
            isinstance(prediction, (int, float, np.integer, np.floating)) and float(prediction).is_integer(),
            f"Predict a whole number of updates (got {prediction!r}): every step makes one update, "
            "and a step cannot be split.",
        )
        guess = int(prediction)
        two = epoch_batches(_two_replicas(), EPOCH_EXAMPLES, PER_REPLICA_BATCH)
        one = epoch_batches(_one_device(), EPOCH_EXAMPLES, PER_REPLICA_BATCH)
        measured, full = len(two), EPOCH_EXAMPLES // (2 * PER_REPLICA_BATCH)
        expect(
            guess != len(one) or len(one) == measured,
            f"You predicted {guess}, what ONE device makes with batches of {PER_REPLICA_BATCH}. On 2 "
            f"replicas every update takes {PER_REPLICA_BATCH} examples on EACH replica, "
            f"{2 * PER_REPLICA_BATCH} in all; the run made {measured} updates.",
        )
        expect(
            guess != full or full == measured,
            f"You predicted {guess}, the number of FULL global batches. The rest, "
            f"{sum(two[-1])} examples ({' + '.join(map(str, two[-1]))} on the replicas), is one more "
            f"step and one more update: the run made {measured}.",
        )
        expect(
            guess == measured,
            f"You predicted {guess}; the run made {measured} updates on 2 replicas. One update "
            f"consumes the global batch: {PER_REPLICA_BATCH} examples per replica x 2 replicas.",
        )
    passed(
        "updates_per_epoch",
        f"{measured} updates on 2 replicas ({sum(two[0])} examples each, the last "
        f"{' + '.join(map(str, two[-1]))}), {len(one)} on one device ({sum(one[0])} each, the last {sum(one[-1])}).",
    )


def _ring_bytes(num_params: int, replicas: int, width: int) -> float:
    """Bytes each device sends in one ring all-reduce: 2 (N-1)/N x the gradient's bytes."""
    return 2 * (replicas - 1) / replicas * num_params * width


def check_epoch_traffic(epoch_traffic: Callable[..., float]) -> None:
    """``epoch_traffic(num_params, examples, per_replica_batch, replicas, bytes_per_param=4)``."""
    cases = [  # (parameters, examples, per-replica batch, replicas, bytes per parameter)
        (1_000, EPOCH_EXAMPLES, PER_REPLICA_BATCH, 2, 4),
        (1_000, EPOCH_EXAMPLES, 2 * PER_REPLICA_BATCH, 2, 4),
        (1_000, EPOCH_EXAMPLES, PER_REPLICA_BATCH, 1, 4),
        (121_930, 60_000, 64, 8, 4),
        (25_636_712, 1_281_167, 32, 64, 2),
    ]
    with exercise("epoch_traffic"):
        steps_two = len(epoch_batches(_two_replicas(), EPOCH_EXAMPLES, PER_REPLICA_BATCH))
        for params, examples, batch, n, width in cases:
            got = epoch_traffic(params, examples, batch, n, width)
            expect(
                got is not None and np.isfinite(float(got)),
                f"epoch_traffic({params}, {examples}, {batch}, {n}, {width}) returned {got!r}; return "
                "a number of bytes.",
            )
            got = float(got)
            if n == 2 and examples == EPOCH_EXAMPLES and batch == PER_REPLICA_BATCH:
                steps = steps_two  # counted by running the epoch on 2 replicas
            else:
                steps = -(-examples // (batch * n))
            per_step = _ring_bytes(params, n, width)
            want = steps * per_step
            case = (
                f"epoch_traffic({params:,}, examples={examples:,}, per_replica_batch={batch}, replicas={n})"
            )
            if n == 1:
                expect(
                    abs(got) < 1e-9, f"{case} should be 0: one device has nobody to send to (got {got:,.0f})."
                )
                continue
            expect(
                not np.isclose(got, per_step),
                f"{case}: {got:,.0f} bytes is ONE step's traffic; an epoch makes {steps} steps, and every "
                "step all-reduces the whole gradient once.",
            )
            expect(
                not np.isclose(got, -(-examples // batch) * per_step),
                f"{case}: you counted steps of {batch} examples, but one step takes {batch} examples on "
                f"EACH of the {n} replicas ({batch * n} in all): {steps} steps, not {-(-examples // batch)}.",
            )
            expect(
                not np.isclose(got, (examples // (batch * n)) * per_step) or examples % (batch * n) == 0,
                f"{case}: the last, shorter batch is a step too, with a full-size gradient to all-reduce: "
                f"{steps} steps, not {examples // (batch * n)}.",
            )
            expect_close(
                got,
                want,
                f"{case}: each device sends 2 (N-1)/N x the gradient's bytes per step "
                f"({per_step:,.0f} here, whatever the batch size), times {steps} steps",
                rtol=1e-9,
                atol=1e-6,
            )
    passed(
        "epoch_traffic",
        "steps of the global batch (the last one too) x 2 (N-1)/N x gradient bytes; nothing on one device.",
    )


def reference_solutions() -> dict[str, Any]:
    """Correct versions of the exercises (for tests and instructors)."""

    def data_parallel_gradient(params, x, y, replicas):
        shards = zip(np.array_split(x, replicas), np.array_split(y, replicas))
        local_means = [(len(xs), mean_loss_gradient(params, xs, ys)) for xs, ys in shards]
        return {k: sum(size / len(x) * g[k] for size, g in local_means) for k in ("kernel", "bias")}

    def epoch_traffic(num_params, examples, per_replica_batch, replicas, bytes_per_param=4):
        steps = -(-examples // (per_replica_batch * replicas))
        return steps * 2 * (replicas - 1) / replicas * num_params * bytes_per_param

    return {
        "data_parallel_gradient": data_parallel_gradient,
        "updates_per_epoch": 16,
        "epoch_traffic": epoch_traffic,
    }
