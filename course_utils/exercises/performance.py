"""Notebook 09: the checks of its exercises (performance)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from ..checks import exercise, expect, passed


def _number(value: Any, what: str) -> float:
    expect(
        not isinstance(value, (str, bytes, bool)) and hasattr(value, "__float__"),
        f"{what} should return a number, got {type(value).__name__}.",
    )
    number = float(value)
    expect(math.isfinite(number), f"{what} returned {number}; expected a finite number.")
    return number


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def check_median_throughput(median_throughput: Callable[[list[float], int, int], float]) -> None:
    """``median_throughput(seconds, examples_per_run, warmup_runs)``: examples/s of the median
    timed run, the first ``warmup_runs`` runs left out."""
    with exercise("median_throughput"):
        # A slow first run (tracing) and one run slowed down by another program.
        seconds = [5.0, 0.5, 0.4, 0.6, 3.0]
        got = _number(median_throughput(list(seconds), 1000, 1), "median_throughput")
        want = 1000 / statistics.median(seconds[1:])
        wrong = {
            "mean": 1000 / statistics.fmean(seconds[1:]),
            "warm-up": 1000 / statistics.median(seconds),
            "mean-all": 1000 / statistics.fmean(seconds),
            "inverse": statistics.median(seconds[1:]) / 1000,
            "fastest": 1000 / min(seconds[1:]),
            "per-step": 1 / statistics.median(seconds[1:]),
        }
        hints = (
            (
                ("inverse",),
                "You returned seconds per example; throughput is "
                "examples per second: examples_per_run / median_seconds.",
            ),
            (
                ("per-step",),
                "You returned runs per second; multiply by the examples in one run (examples_per_run).",
            ),
            (
                ("mean", "mean-all"),
                "You averaged the times: one run slowed down by another program (3.0 s here) "
                "pulls a mean up. Use the median (statistics.median) of the timed runs.",
            ),
            (
                ("warm-up",),
                "The first warmup_runs runs include tracing and must be left out: take "
                "seconds[warmup_runs:] before the median.",
            ),
            (
                ("fastest",),
                "You took the fastest run: that is the best case, not the typical one. Use the median.",
            ),
        )
        for keys, hint in hints:
            expect(not any(_close(got, wrong[key]) for key in keys), hint)
        expect(
            _close(got, want),
            f"For times {seconds} s, 1,000 examples per run and 1 warm-up run, expected "
            f"{want:.1f} examples/s (1000 / median of the last four), got {got:.1f}.",
        )
        for secs, examples, warmup in [([0.2, 0.2, 0.2], 64, 0), ([9.0, 1.0, 2.0, 4.0], 500, 2)]:
            got = _number(median_throughput(list(secs), examples, warmup), "median_throughput")
            want = examples / statistics.median(secs[warmup:])
            expect(
                _close(got, want),
                f"median_throughput({secs}, {examples}, {warmup}) should be {want:.1f}, got {got:.1f}.",
            )
    passed("median_throughput", "warm-up left out, the median run, in examples per second.")


def check_pipelined_throughput(pipelined_throughput: Callable[[float, float, bool], float]) -> None:
    """``pipelined_throughput(input_rate, compute_rate, prefetch)``: examples/s of training when
    the input alone delivers ``input_rate`` and the step alone consumes ``compute_rate``."""
    with exercise("pipelined_throughput"):
        got = _number(pipelined_throughput(2_000.0, 3_000.0, True), "pipelined_throughput")
        expect(
            not _close(got, 1_200.0),
            "With prefetch the input of the next step is prepared "
            "while this one trains: the two overlap, so the slower of the two sets the pace.",
        )
        expect(
            not _close(got, 3_000.0),
            "With prefetch the slower side sets the pace: here the input (2,000 examples/s), not the step.",
        )
        expect(
            _close(got, 2_000.0),
            f"Input 2,000 and compute 3,000 examples/s with prefetch: expected 2,000, got {got:,.1f}.",
        )
        got = _number(pipelined_throughput(2_000.0, 3_000.0, False), "pipelined_throughput")
        expect(
            not _close(got, 2_000.0),
            "Without prefetch each step first waits for its batch, "
            "then trains: the times per example add up (1/2000 + 1/3000 s), they do not overlap.",
        )
        expect(
            _close(got, 1_200.0),
            f"Without prefetch: 1 / (1/2000 + 1/3000) = 1,200 examples/s expected, got {got:,.1f}.",
        )
        for args, want in [((5_000.0, 1_000.0, True), 1_000.0), ((1_000.0, 1_000.0, False), 500.0)]:
            got = _number(pipelined_throughput(*args), "pipelined_throughput")
            expect(_close(got, want), f"pipelined_throughput{args} should be {want:,.1f}, got {got:,.1f}.")
    passed("pipelined_throughput", "the slower side sets the pace with prefetch; times add up without.")


#: The epoch of exercise ``scaling_batches``: 6,000 examples, 32 per step on one device.
EPOCH_EXAMPLES = 6_000
ONE_DEVICE_BATCH = 32
SCALING_KEYS = ("global_batch", "per_replica", "steps")


def measure_batches(strategy: Any, global_batch: int, examples: int = EPOCH_EXAMPLES) -> dict[str, int]:
    """Distribute one epoch of ``examples`` in global batches (last partial batch dropped) over
    ``strategy`` and count: the global batch, the examples one replica gets, the steps."""
    import tensorflow as tf

    dataset = tf.data.Dataset.range(examples).batch(global_batch, drop_remainder=True)
    steps, per_replica = 0, None
    for batch in strategy.experimental_distribute_dataset(dataset):
        if per_replica is None:
            per_replica = int(strategy.experimental_local_results(batch)[0].shape[0])
        steps += 1
    return {"global_batch": global_batch, "per_replica": int(per_replica or 0), "steps": steps}


def check_scaling_batches(prediction: Any) -> None:
    """``prediction``: ``{"weak": {...}, "strong": {...}}``, each with ``global_batch``,
    ``per_replica`` and ``steps`` for one epoch of 6,000 examples on 2 replicas, where one device
    trains with batches of 32. Checked against a real distributed dataset on 2 replicas."""
    import tensorflow as tf

    from ..strategies import mirrored_cpus

    with exercise("scaling_batches"):
        expect(
            isinstance(prediction, dict)
            and set(prediction) == {"weak", "strong"}
            and all(
                isinstance(prediction[k], dict) and set(prediction[k]) == set(SCALING_KEYS)
                for k in prediction
            ),
            'Set PREDICTION to {"weak": {"global_batch": ..., "per_replica": ..., "steps": ...}, '
            f'"strong": {{...the same keys...}}}}, got {prediction!r}.',
        )
        one = measure_batches(tf.distribute.OneDeviceStrategy("/cpu:0"), ONE_DEVICE_BATCH)
        two = mirrored_cpus(2, needed_by="The check of scaling_batches")
        real = {
            "weak": measure_batches(two, ONE_DEVICE_BATCH * 2),  # 32 per replica, as on one device
            "strong": measure_batches(two, ONE_DEVICE_BATCH),  # the one-device global batch, split
        }
        print(
            f"one device : global batch {one['global_batch']}, {one['per_replica']} per replica, {one['steps']} steps"
        )
        for kind in ("weak", "strong"):
            r = real[kind]
            print(
                f"{kind:<6} x 2 : global batch {r['global_batch']}, {r['per_replica']} per replica, {r['steps']} steps"
            )
        weak, strong = prediction["weak"], prediction["strong"]
        expect(
            weak["global_batch"] != ONE_DEVICE_BATCH,
            "weak: the global batch is not 32. Weak scaling keeps the per-replica batch (32): 2 "
            "replicas take 2 x 32 examples per step.",
        )
        expect(
            strong["per_replica"] != ONE_DEVICE_BATCH,
            "strong: each replica does not get 32. Strong scaling keeps the global batch (32) and "
            "splits it: each of 2 replicas gets half.",
        )
        for kind in ("weak", "strong"):
            for key in SCALING_KEYS:
                got, want = prediction[kind][key], real[kind][key]
                if key == "steps" and got == one["steps"] and want != got:
                    expect(
                        False,
                        f"{kind}: {got} steps is the one-device epoch. A step now takes a "
                        f"global batch of {real[kind]['global_batch']}: {EPOCH_EXAMPLES:,} // "
                        f"{real[kind]['global_batch']} steps.",
                    )
                expect(got == want, f"{kind}: {key} = {got!r}, measured on 2 replicas: {want}.")
    passed("scaling_batches", "weak scaling doubles the global batch and halves the steps; strong splits it.")


def reference_speedup_bound(compute_ms: float, overhead_ms: float, replicas: int) -> float:
    """Strong scaling on ``replicas`` devices: the compute of a step is divided, the overhead is not."""
    return (compute_ms + overhead_ms) / (compute_ms / replicas + overhead_ms)


def check_speedup_bound(speedup_bound: Callable[[float, float, int], float]) -> None:
    """``speedup_bound(compute_ms, overhead_ms, replicas)``: the best strong-scaling speed-up."""
    with exercise("speedup_bound"):
        got = _number(speedup_bound(8.0, 2.0, 4), "speedup_bound")
        expect(
            not _close(got, 4.0),
            "4.0 is the ideal: it ignores the overhead. Only the compute is "
            "divided among the replicas; the 2 ms of overhead stay in every step.",
        )
        expect(
            not _close(got, 8.0 / (2.0 + 2.0)),
            "On one device the step also pays the overhead: (compute + overhead) / (compute / n + overhead).",
        )
        expect(
            not _close(got, 0.4),
            "Your ratio is upside down: the speed-up is the one-device step "
            "time over the n-replica step time, larger than 1.",
        )
        expect(
            _close(got, 2.5),
            f"8 ms of compute and 2 ms of overhead on 4 replicas: (8 + 2) / "
            f"(8 / 4 + 2) = 2.5, got {got:.4g}.",
        )
        for args in [(10.0, 0.0, 8), (5.0, 5.0, 2), (100.0, 1.0, 64), (3.0, 1.0, 1)]:
            got = _number(speedup_bound(*args), "speedup_bound")
            want = reference_speedup_bound(*args)
            expect(_close(got, want), f"speedup_bound{args} should be {want:.4g}, got {got:.4g}.")
        many = _number(speedup_bound(8.0, 2.0, 10_000), "speedup_bound")
        expect(many < 5.0, "With many replicas the bound approaches (compute + overhead) / overhead.")
    passed("speedup_bound", "compute divided by n, overhead not: the bound is (c + o) / (c / n + o).")
