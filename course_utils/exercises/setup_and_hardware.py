"""Checks for notebook 00, setup and hardware."""

from __future__ import annotations

from typing import Any, Callable

from ..strategies import mirrored_cpus
from ..checks import exercise, expect, passed


def check_replica_ids(replica_ids: Callable[[Any], list[int]]) -> None:
    """``replica_ids(strategy)`` must return every replica's id, in order, as Python ints."""
    import tensorflow as tf

    from ..devices import cpu_count

    with exercise("replica_ids"):
        single = replica_ids(tf.distribute.get_strategy())
        expect(
            list(single) == [0],
            f"On the default strategy (1 replica) expected [0], got {single!r}. Run a function "
            "with strategy.run that returns the replica id, then list the per-replica results.",
        )
        n = cpu_count()
        if n >= 2:
            strategy = mirrored_cpus(n)
            ids = replica_ids(strategy)
            expect(
                isinstance(ids, list),
                f"Return a Python list (got {type(ids).__name__}): wrap the local results in list(...).",
            )
            ids = [int(i) for i in ids]
            expect(
                ids == list(range(n)),
                f"On {n} replicas expected {list(range(n))}, got {ids}. "
                "strategy.experimental_local_results(per_replica) gives one value per replica; "
                "did you reduce them into one number instead?",
            )
    passed("replica_ids", "every replica reported its own id.")


def check_per_replica_batch(per_replica_batch: Callable[[int, int], int]) -> None:
    """``per_replica_batch(global_batch, replicas)``: the share of each replica, or ValueError."""
    with exercise("per_replica_batch"):
        for global_batch, replicas, want in [(256, 1, 256), (256, 2, 128), (256, 4, 64), (96, 3, 32)]:
            got = per_replica_batch(global_batch, replicas)
            expect(
                got == want and isinstance(got, int),
                f"per_replica_batch({global_batch}, {replicas}) should be {want} (an int), got {got!r}. "
                "Each replica gets the global batch divided by the number of replicas.",
            )
        try:
            per_replica_batch(100, 3)
        except ValueError:
            pass
        else:
            expect(
                False,
                "per_replica_batch(100, 3) should raise ValueError: 100 examples cannot be split "
                "evenly over 3 replicas, and the course asks you to say so rather than round.",
            )
    passed("per_replica_batch", "global batches split evenly, uneven ones refused.")
