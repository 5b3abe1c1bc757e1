"""The benchmark's report: a table, the ratios between loops."""

from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Sequence

from course_utils.devices import cores

from .flops import MachineLimit
from .settings import BenchConfig, Measurement


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or 'n/a' where the system has none."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except (OSError, AttributeError):
        return "n/a"


def rows(measurements: Iterable[Measurement]) -> list[dict[str, Any]]:
    return [m.row() for m in measurements]


def table(
    measurements: Sequence[Measurement],
    limit: Optional[MachineLimit] = None,
) -> str:
    """The benchmark table: throughput, step time, achieved GFLOP/s and share of the limit."""
    head = f"{'loop':<10} {'replicas':>8} {'examples/s':>11} {'step (ms)':>10}"
    if limit:
        head += f" {'GFLOP/s':>8} {'of matmul':>9}"
    lines = [head, "-" * len(head)]
    for m in measurements:
        line = f"{m.loop:<10} {m.replicas:>8} {m.examples_per_s:>11,.0f} {m.median_step_ms:>10.2f}"
        if limit:
            achieved = m.examples_per_s * limit.flops.training / 1e9
            line += f" {achieved:>8.1f} {limit.share(m.examples_per_s):>9.0%}"
        lines.append(line)
    return "\n".join(lines)


def ratios(measurements: Sequence[Measurement]) -> dict[int, dict[str, float]]:
    """Per replica count: ctl / fit and ctl / naive_ctl throughput (where both were measured)."""
    by = {(m.loop, m.replicas): m.examples_per_s for m in measurements}
    out: dict[int, dict[str, float]] = {}
    for n in sorted({m.replicas for m in measurements}):
        if ("ctl", n) not in by:
            continue
        out[n] = {
            f"ctl/{other}": by[("ctl", n)] / by[(other, n)]
            for other in ("fit", "naive_ctl")
            if (other, n) in by
        }
    return out


def report(
    measurements: Sequence[Measurement],
    limit: Optional[MachineLimit],
    config: BenchConfig,
    loads: tuple[str, str] = ("n/a", "n/a"),
) -> str:
    lines = [
        "Training throughput of the custom-training CNN on the offline Fashion-MNIST stand-in "
        f"({config.examples:,} training images)",
        f"{config.per_replica_batch} examples per replica per step; ctl and fit run "
        f"{config.steps_per_call} steps per call; median of {config.runs * config.rounds} runs of "
        f"{config.steps} steps after {config.warmup_runs} warm-up run(s); each (loop, replicas) "
        "in a fresh process"
        + (f", {config.jobs} processes at a time taking turns run by run." if config.jobs > 1 else "."),
        f"A MirroredStrategy over 1 to {max(config.replicas)} virtual CPUs on {cores()} core(s); "
        f"{config.threads_text()}.",
        "",
        table(measurements, limit),
        "",
    ]
    for n, values in ratios(measurements).items():
        if values:
            lines.append(f"{n} replica(s): " + ", ".join(f"{k} = {v:.2f}x" for k, v in values.items()))
    if limit:
        lines += [
            "",
            f"Arithmetic limit: float32 matmul {limit.matmul_size}x{limit.matmul_size} runs at "
            f"{limit.matmul_gflops:.1f} GFLOP/s here.",
            f"Model: {limit.flops.forward / 1e6:.2f} MFLOP forward per example, counted from the "
            "layer shapes (Conv2D and Dense multiply-adds x2)"
            + (
                f"; TensorFlow's graph profiler counts {limit.profiler_forward / 1e6:.2f} MFLOP "
                "(it adds biases and pooling)"
                if limit.profiler_forward
                else ""
            )
            + ".",
            f"Training: ~3x forward = {limit.flops.training / 1e6:.2f} MFLOP per example, so at "
            f"most ~{limit.examples_per_s_limit:,.0f} examples/s at the matmul rate.",
        ]
    lines += ["", f"Load average (1, 5, 15 min): {loads[0]} before, {loads[1]} after."]
    return "\n".join(lines)
