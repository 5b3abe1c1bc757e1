"""Checks for notebook 09, performance."""

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
        expect(not _close(got, wrong["inverse"]), "You returned seconds per example; throughput is "
               "examples per second: examples_per_run / median_seconds.")
        expect(not _close(got, wrong["per-step"]), "You returned runs per second; multiply by the "
               "examples in one run (examples_per_run).")
        expect(not _close(got, wrong["mean"]) and not _close(got, wrong["mean-all"]),
               "You averaged the times: one run slowed down by another program (3.0 s here) pulls "
               "a mean up. Use the median (statistics.median) of the timed runs.")
        expect(not _close(got, wrong["warm-up"]),
               "The first warmup_runs runs include tracing and must be left out: take "
               "seconds[warmup_runs:] before the median.")
        expect(not _close(got, wrong["fastest"]),
               "You took the fastest run: that is the best case, not the typical one. Use the median.")
        expect(_close(got, want),
               f"For times {seconds} s, 1,000 examples per run and 1 warm-up run, expected "
               f"{want:.1f} examples/s (1000 / median of the last four), got {got:.1f}.")
        for secs, examples, warmup in [([0.2, 0.2, 0.2], 64, 0), ([9.0, 1.0, 2.0, 4.0], 500, 2)]:
            got = _number(median_throughput(list(secs), examples, warmup), "median_throughput")
            want = examples / statistics.median(secs[warmup:])
            expect(_close(got, want), f"median_throughput({secs}, {examples}, {warmup}) should be "
                   f"{want:.1f}, got {got:.1f}.")
    passed("median_throughput", "warm-up left out, the median run, in examples per second.")


def check_scaling_efficiency(scaling_efficiency: Callable[[float, float, int], float]) -> None:
    """``scaling_efficiency(throughput, single_replica_throughput, replicas)`` in [0, 1] when
    scaling is sub-linear: 14,400 examples/s on 8 GPUs against 2,000 on one is 0.9."""
    with exercise("scaling_efficiency"):
        got = _number(scaling_efficiency(14_400.0, 2_000.0, 8), "scaling_efficiency")
        expect(not _close(got, 7.2), "7.2 is the speed-up (throughput / single-replica "
               "throughput). Efficiency divides the speed-up by the number of replicas.")
        expect(not _close(got, 90.0), "Return a fraction (0.9), not a percentage.")
        expect(not _close(got, 1 / 0.9), "Your ratio is upside down: efficiency is the throughput "
               "you measured over the ideal one, replicas x single-replica throughput.")
        expect(_close(got, 0.9), f"14,400 examples/s on 8 replicas against 2,000 on one: expected "
               f"0.9 (14,400 / (8 x 2,000)), got {got:.4g}.")
        for args, want in [((3_000.0, 3_000.0, 2), 0.5), ((1_000.0, 1_000.0, 1), 1.0), ((900.0, 600.0, 4), 0.375)]:
            got = _number(scaling_efficiency(*args), "scaling_efficiency")
            expect(_close(got, want), f"scaling_efficiency{args} should be {want}, got {got:.4g}.")
    passed("scaling_efficiency", "measured throughput over replicas x single-replica throughput.")


def check_conv2d_flops(conv2d_flops: Callable[[int, int, int, int, int], int]) -> None:
    """``conv2d_flops(height, width, in_channels, filters, kernel)``: forward FLOPs of a 'valid',
    stride-1 convolution on one example (a multiply and an add per weight per output value)."""
    from ..bench import conv2d_flops as reference

    with exercise("conv2d_flops"):
        # The second convolution of the course's CNN: 13x13x32 in, 64 filters of 3x3.
        got = _number(conv2d_flops(13, 13, 32, 64, 3), "conv2d_flops")
        want = reference(13, 13, 32, 64, 3)
        expect(not _close(got, want / 2), "That is the number of multiply-adds; each is two "
               "floating-point operations (a multiply and an add): multiply by 2.")
        expect(not _close(got, 2 * 13 * 13 * 64 * 9 * 32) and not _close(got, 13 * 13 * 64 * 9 * 32),
               "You used the input size: a 'valid' 3x3 convolution of a 13x13 image has 11x11 "
               "outputs (height - kernel + 1).")
        expect(not _close(got, 2 * 11 * 11 * 64 * 9), "Each output value is a dot product over "
               "kernel x kernel x in_channels inputs: you left out the input channels.")
        expect(_close(got, want), f"conv2d_flops(13, 13, 32, 64, 3) should be {want:,} "
               f"(2 x 11 x 11 x 64 x 3 x 3 x 32), got {got:,.0f}.")
        for args in [(28, 28, 1, 32, 3), (32, 32, 3, 16, 5), (7, 7, 8, 8, 1)]:
            got = _number(conv2d_flops(*args), "conv2d_flops")
            expect(_close(got, reference(*args)), f"conv2d_flops{args} should be "
                   f"{reference(*args):,}, got {got:,.0f}.")
    passed("conv2d_flops", "2 x outputs x (kernel x kernel x in_channels) for the course's CNN and others.")


def check_pipelined_throughput(pipelined_throughput: Callable[[float, float, bool], float]) -> None:
    """``pipelined_throughput(input_rate, compute_rate, prefetch)``: examples/s of training when
    the input alone delivers ``input_rate`` and the step alone consumes ``compute_rate``."""
    with exercise("pipelined_throughput"):
        got = _number(pipelined_throughput(2_000.0, 3_000.0, True), "pipelined_throughput")
        expect(not _close(got, 1_200.0), "With prefetch the input of the next step is prepared "
               "while this one trains: the two overlap, so the slower of the two sets the pace.")
        expect(not _close(got, 3_000.0), "With prefetch the slower side sets the pace: here the "
               "input (2,000 examples/s), not the step.")
        expect(_close(got, 2_000.0), f"Input 2,000 and compute 3,000 examples/s with prefetch: "
               f"expected 2,000, got {got:,.1f}.")
        got = _number(pipelined_throughput(2_000.0, 3_000.0, False), "pipelined_throughput")
        expect(not _close(got, 2_000.0), "Without prefetch each step first waits for its batch, "
               "then trains: the times per example add up (1/2000 + 1/3000 s), they do not overlap.")
        expect(_close(got, 1_200.0), "Without prefetch: 1 / (1/2000 + 1/3000) = 1,200 examples/s "
               f"expected, got {got:,.1f}.")
        for args, want in [((5_000.0, 1_000.0, True), 1_000.0), ((1_000.0, 1_000.0, False), 500.0)]:
            got = _number(pipelined_throughput(*args), "pipelined_throughput")
            expect(_close(got, want), f"pipelined_throughput{args} should be {want:,.1f}, got {got:,.1f}.")
    passed("pipelined_throughput", "the slower side sets the pace with prefetch; times add up without.")
