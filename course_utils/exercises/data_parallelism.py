"""Checks for notebook 01, data parallelism."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .. import simulation as sim
from ..checks import exercise, expect, expect_close, passed


def check_shard_batch(shard_batch: Callable[[np.ndarray, int], Sequence[np.ndarray]]) -> None:
    """``shard_batch(batch, replicas)``: contiguous shards in order, sizes as even as possible."""
    with exercise("shard_batch"):
        for size, replicas in [(8, 2), (8, 1), (12, 4), (10, 3), (7, 7), (9, 2)]:
            batch = np.arange(size * 2).reshape(size, 2)  # a batch of examples with 2 features
            shards = shard_batch(batch, replicas)
            shards = list(shards)
            expect(
                len(shards) == replicas,
                f"shard_batch(<{size} examples>, {replicas}) returned {len(shards)} shards; "
                f"return one shard per replica ({replicas}).",
            )
            sizes = [len(s) for s in shards]
            expect(
                sum(sizes) == size,
                f"Splitting {size} examples over {replicas} replicas gave shards of {sizes} examples, "
                f"{sum(sizes)} in total: every example must land in exactly one shard, none dropped "
                "(when the split is uneven, give the first shards one example more).",
            )
            want = sim.shard_sizes(size, replicas)
            expect(
                sizes == want,
                f"Splitting {size} examples over {replicas} replicas should give shards of {want} "
                f"examples, got {sizes}: as even as possible, the first shards one example more "
                "(like np.array_split).",
            )
            expect(
                all(np.array_equal(np.asarray(s), e) for s, e in zip(shards, sim.shard(batch, replicas))),
                f"The shards of {size} examples over {replicas} replicas are not contiguous slices in "
                "order: replica 0 takes the first examples, replica 1 the next ones, and so on "
                "(no striding, no shuffling), which is how tf.distribute splits a global batch.",
            )
            expect(
                all(np.asarray(s).shape[1:] == batch.shape[1:] for s in shards),
                "Split along the first axis only (examples); each shard keeps the feature axis.",
            )
    passed("shard_batch", "contiguous shards, in order, as even as possible, nothing lost.")


def check_data_parallel_gradient(
    data_parallel_gradient: Callable[[dict, np.ndarray, np.ndarray, int], dict]
) -> None:
    """The all-reduced gradient of N replicas must equal the single-device gradient of the batch."""
    problem = sim.make_problem(examples=24, features=4, classes=3, seed=7)
    with exercise("data_parallel_gradient"):
        for replicas, batch in [(2, 24), (1, 24), (4, 24), (3, 10), (5, 23)]:
            p = problem.head(batch)
            reference = sim.single_device_gradients(p.params, p.x, p.y)
            got = data_parallel_gradient(p.params, p.x, p.y, replicas)
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
                    "single-device gradient of the whole batch. Each replica must divide its sum of "
                    f"per-example losses by the GLOBAL batch size ({batch}), not by its own shard size, "
                    "and the per-replica gradients are then SUMMED"
                    + (
                        " (averaging the replicas' local means is only right when every shard has "
                        "the same size)"
                        if uneven
                        else ""
                    ),
                    rtol=0,
                    atol=1e-6,
                )
    passed("data_parallel_gradient", "equals the single-device gradient on 1 to 5 replicas, even and uneven shards.")


def check_all_reduce(all_reduce: Callable[[list], list]) -> None:
    """``all_reduce(per_replica)``: every replica gets its own copy of the SUM."""
    rng = np.random.default_rng(3)
    with exercise("all_reduce"):
        for replicas in (2, 1, 3):
            per_replica = [
                {"kernel": rng.normal(size=(4, 3)), "bias": rng.normal(size=3)} for _ in range(replicas)
            ]
            originals = [{k: v.copy() for k, v in g.items()} for g in per_replica]
            total = sim.tree_sum(originals)
            result = all_reduce(per_replica)
            expect(
                isinstance(result, (list, tuple)) and len(result) == replicas,
                f"With {replicas} replicas, return a list of {replicas} gradient dicts, one per "
                f"replica (got {type(result).__name__}"
                f"{' of length ' + str(len(result)) if isinstance(result, (list, tuple)) else ''}): "
                "after an all-reduce EVERY replica holds the result.",
            )
            for r, grads in enumerate(result):
                for name in ("kernel", "bias"):
                    expect_close(
                        grads[name],
                        total[name],
                        f"Replica {r} of {replicas} holds the wrong '{name}'. An all-reduce here SUMS "
                        "the per-replica gradients (each was already divided by the global batch), "
                        "it does not average them",
                    )
            for r in range(replicas):
                for name in ("kernel", "bias"):
                    expect(
                        np.array_equal(per_replica[r][name], originals[r][name]),
                        "Do not modify the per-replica gradients you were given (an in-place += "
                        "changed replica {r}'s input); build new arrays for the result.".format(r=r),
                    )
            if replicas > 1:
                first = result[0]["kernel"]
                expect(
                    all(np.asarray(g["kernel"]) is not first and not np.shares_memory(g["kernel"], first) for g in result[1:]),
                    "Every replica needs its own copy of the result, not the same array: after the "
                    "all-reduce each device updates its own copy of the variables (that is what a "
                    "mirrored variable is). Use .copy() for each replica.",
                )
    passed("all_reduce", "every replica holds its own copy of the sum.")


def check_ring_bytes(ring_bytes: Callable[..., float]) -> None:
    """``ring_bytes(num_params, replicas, bytes_per_param=4)``: bytes each device sends."""
    cases = [
        (1_000, 2, 4, 4_000.0),
        (1_000, 4, 4, 6_000.0),
        (1_000, 1, 4, 0.0),
        (121_930, 8, 4, 853_510.0),
        (25_636_712, 16, 2, 96_137_670.0),
    ]
    with exercise("ring_bytes"):
        for params, n, width, want in cases:
            got = ring_bytes(params, n, width)
            expect(
                got is not None and np.isfinite(float(got)),
                f"ring_bytes({params}, {n}, {width}) returned {got!r}; return a number of bytes.",
            )
            hint = f"ring_bytes({params:,}, replicas={n}, bytes_per_param={width}) should be {want:,.0f} bytes"
            if n == 1:
                hint += ": a single device has nobody to talk to, so it sends nothing"
            else:
                hint += (
                    ". A ring all-reduce has 2 phases (reduce-scatter, then all-gather) of N-1 steps; "
                    "in each step a device sends one chunk of 1/N of the model: 2 (N-1)/N x model bytes"
                )
            expect_close(float(got), want, hint, rtol=1e-9, atol=1e-6)
        default = ring_bytes(1_000, 2)
        expect(
            default is not None and abs(float(default) - 4_000.0) < 1e-6,
            "Without bytes_per_param, count float32 values: give bytes_per_param a default of 4.",
        )
    passed("ring_bytes", "2 (N-1)/N x model bytes, nothing on one device.")


def reference_solutions() -> dict[str, Any]:
    """Correct versions of the four exercises (for tests and instructors)."""

    def shard_batch(batch, replicas):
        return sim.shard(batch, replicas)

    def data_parallel_gradient(params, x, y, replicas):
        return sim.all_reduce_sum(sim.replica_gradients(params, x, y, replicas))[0]

    def all_reduce(per_replica):
        return sim.all_reduce_sum(per_replica)

    def ring_bytes(num_params, replicas, bytes_per_param=4):
        return 2 * (replicas - 1) / replicas * num_params * bytes_per_param

    return {
        "shard_batch": shard_batch,
        "data_parallel_gradient": data_parallel_gradient,
        "all_reduce": all_reduce,
        "ring_bytes": ring_bytes,
    }
