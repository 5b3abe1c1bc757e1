"""Notebook 00: the checks of its exercises (setup and hardware)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..checks import exercise, expect, passed
from ..strategies import mirrored_cpus
from . import Watched, one_batch, unseen


def _uneven_means() -> tuple[float, float]:
    """The MEAN reduce of per-replica means of the batch 1..7: on one device, and on 2 replicas."""
    import tensorflow as tf

    numbers = tf.data.Dataset.range(1, 8).map(lambda i: tf.cast(i, tf.float32)).batch(7)
    found = []
    for strategy in (tf.distribute.get_strategy(), mirrored_cpus(2, needed_by="The check of uneven_mean")):
        batch = next(iter(strategy.experimental_distribute_dataset(numbers)))
        means = strategy.run(tf.reduce_mean, args=(batch,))
        found.append(float(strategy.reduce(tf.distribute.ReduceOp.MEAN, means, axis=None)))
    return found[0], found[1]


def check_uneven_mean(uneven_mean: Callable[[], float]) -> None:
    """``uneven_mean()`` returns the student's prediction of the MEAN reduce on 2 replicas."""
    with exercise("uneven_mean"):
        guess = uneven_mean()
        try:
            guess = float(guess)
        except (TypeError, ValueError):
            expect(False, f"Return one number (a float), not {guess!r}.")
        one, two = _uneven_means()

        def near(value: float) -> bool:
            return abs(guess - value) < 1e-3

        expect(
            not near(one),
            f"{one:g} is one device's answer, the mean of all 7 numbers. On 2 replicas each "
            "replica averages only its own slice, and MEAN then averages the 2 replica means: "
            "a slice of 4 numbers and a slice of 3 do not weigh the same.",
        )
        expect(
            not near(2 * two),
            f"{guess:g} is the SUM of the 2 replica means; ReduceOp.MEAN divides that sum by the "
            "number of replicas.",
        )
        expect(
            not near((2.0 + 5.5) / 2),
            f"{guess:g} gives the first replica 3 numbers (1-3) and the second 4 (4-7); TensorFlow "
            "gives the first replica the larger slice.",
        )
        expect(
            near(two),
            f"{guess:g} is not what the MEAN reduce prints on 2 replicas. Write each replica's slice "
            "(contiguous, the first replica's the larger), the mean of each, then the mean of those 2.",
        )
    passed(
        "uneven_mean",
        f"on 2 replicas the MEAN of the replica means is {two:g}; one device's mean is {one:g}.",
    )


#: ``global_batch``'s hints for the wrong answers real code contains.
_HALF = "On 2 replicas each got half of what you asked for: the dataset's batch is the global one."
_TWICE = (
    "On 1 replica it got twice what you asked for: ask the strategy how many replicas it has (a 2 "
    "written in holds on 2 replicas only)."
)
_QUARTER = (
    "On 2 replicas each got a quarter of what you asked for: you divided, but the dataset's batch is "
    "split over the replicas; it holds all of their examples."
)


def check_global_batch(global_batch: Callable[[Any, int], Any]) -> None:
    """``global_batch(strategy, per_replica)``: a dataset batched by it, distributed on 1 and 2
    replicas, must give each replica ``per_replica`` examples."""
    import tensorflow as tf

    with exercise("global_batch"):
        cases = [(2, 32), (1, 32), (2, 5)]  # (replicas, per_replica); 2 first, where most mistakes show
        if (rng := unseen()) is not None:  # grading: a size the student never saw
            cases.append((rng.choice([1, 2]), rng.randint(3, 60)))
        for replicas, per_replica in cases:
            strategy = (
                mirrored_cpus(2, needed_by="The check") if replicas > 1 else tf.distribute.get_strategy()
            )
            want = [per_replica] * replicas  # the examples each replica should receive
            got = global_batch(Watched(strategy), per_replica)
            on = f"On {replicas} replica{'s' * (replicas > 1)}, asking for {per_replica} examples each"
            expect(
                isinstance(got, (int, np.integer)) and not isinstance(got, bool),
                f"{on}: return the batch size as a whole number (an int), not {got!r}.",
            )
            expect(0 < got <= 1000 * per_replica, f"{on}: {got} is not a batch size for them.")
            batch = strategy.experimental_distribute_dataset(tf.data.Dataset.range(got).batch(got))
            sizes = [int(t.shape[0]) for t in strategy.experimental_local_results(next(iter(batch)))]
            hint = {(2, per_replica): _HALF, (1, 2 * per_replica): _TWICE, (2, per_replica // 2): _QUARTER}
            expect(
                sizes == want,
                hint.get((replicas, got))
                or f"{on}, the replicas got {' + '.join(map(str, sizes))}: the batch must hold "
                f"{per_replica} for each.",
            )
    passed(
        "global_batch", "a dataset batched by it gave every replica what it asked for, on 1 and 2 replicas."
    )


def check_global_mean(global_mean: Callable[[Any, Any], Any]) -> None:
    """``global_mean(strategy, dataset)``: the mean of a one-batch dataset, computed by the replicas,
    on one device and on 2 replicas whose slices differ in size."""
    import tensorflow as tf

    with exercise("global_mean"):
        cases = [np.arange(1, 8, dtype=np.float32), np.array([1, 2, 3, 10, 20], np.float32)]
        if (rng := unseen()) is not None:  # grading: numbers the student never saw
            cases.append(
                np.array([rng.uniform(-5, 50) for _ in range(rng.choice([5, 7, 9, 11]))], np.float32)
            )
        for replicas in (2, 1):  # 2 first: most mistakes show there
            strategy = (
                tf.distribute.get_strategy() if replicas == 1 else mirrored_cpus(2, needed_by="The check")
            )
            for values in cases:
                watched = Watched(strategy)
                got = global_mean(watched, one_batch(values))
                try:
                    got = float(got)
                except (TypeError, ValueError):
                    expect(False, f"Return one number (a float), not {got!r}.")
                want, half = float(np.mean(values)), (len(values) + 1) // 2
                slices = np.mean(values[:half]), np.mean(values[half:])

                def near(value: float) -> bool:
                    return abs(got - value) <= 1e-5 * max(1.0, abs(value))

                expect(
                    watched.distributed > 0,
                    "Your function never gave the dataset to strategy.experimental_distribute_dataset: "
                    "every replica then gets the whole batch, not its slice. Distribute it first.",
                )
                expect(
                    watched.runs > 0,
                    "Your function never called strategy.run: the replicas computed nothing. Return each "
                    "replica's sum and count from a function that strategy.run runs.",
                )
                on = f"on {replicas} replica{'s' * (replicas > 1)}, the numbers {values.tolist()}"
                expect(
                    near(want) or replicas == 1 or not near(float(np.mean(slices))),
                    f"{on}: {got:g} is the MEAN of the replicas' means; a slice of {half} numbers and one "
                    f"of {len(values) - half} do not weigh the same. Add sums and counts with ReduceOp.SUM, "
                    "then divide.",
                )
                expect(
                    not near(float(values.sum())),
                    f"{on}: {got:g} is their sum; divide it by how many numbers there are (a count summed "
                    "over the replicas too).",
                )
                expect(
                    near(want) or not near(float(values.sum()) / replicas),
                    f"{on}: {got:g} divides the sum by the number of replicas, not the number of numbers.",
                )
                expect(  # the first replica's count x the replicas, on 2 replicas
                    near(want) or replicas == 1 or not near(float(values.sum()) / (half * replicas)),
                    f"{on}: {got:g} takes the first replica's count x the replicas for the count; the "
                    "slices differ in size: add the replicas' counts with ReduceOp.SUM.",
                )
                expect(  # SUM as asked, or MEAN of both (the same ratio): combined by the strategy
                    watched.reduces >= 2,
                    f"{on}: add the replicas' sums and counts with strategy.reduce(ReduceOp.SUM, ...).",
                )
                expect(near(want), f"{on}: {got:g} is not their mean; add sums and counts with ReduceOp.SUM.")
    passed(
        "global_mean", "sums and counts added over the replicas give one device's mean on 1 and 2 replicas."
    )
