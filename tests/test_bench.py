"""The benchmark command (course_tools.bench) and its loops, at tiny sizes.

The end-to-end test runs the real command on one loop at 1 and 2 replicas (fresh processes, so a
few seconds each); it checks the JSON rows and the table, not the speed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from course_tools import bench
from course_tools import bench as bench_command
from course_tools.bench import loops
from course_utils.errors import CourseError


def _measurement(loop: str, replicas: int, seconds: tuple[float, ...]) -> bench.Measurement:
    return bench.Measurement(loop, replicas, 64 * replicas, 10, seconds)


def test_measurement_uses_the_median_run() -> None:
    m = _measurement("ctl", 2, (1.0, 0.5, 9.0))
    assert m.median_seconds == 1.0
    assert m.examples_per_s == pytest.approx(128 * 10 / 1.0)
    assert m.median_step_ms == pytest.approx(100.0)
    assert list(m.row()) == list(bench.ROW_KEYS)


def test_median_throughput_and_efficiency() -> None:
    assert bench.median_throughput([5.0, 1.0, 2.0, 3.0], 100, warmup_runs=1) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        bench.median_throughput([1.0], 100, warmup_runs=1)
    assert bench.scaling_efficiency(14_400, 2_000, 8) == pytest.approx(0.9)


def test_config_is_validated() -> None:
    with pytest.raises(CourseError, match="multiple of steps_per_call"):
        bench.BenchConfig(steps=10, steps_per_call=4)
    with pytest.raises(CourseError, match="Unknown loop"):
        bench.BenchConfig(loops=("fast_loop",))
    with pytest.raises(CourseError):
        bench.BenchConfig(replicas=(0,))
    with pytest.raises(CourseError, match="per-replica"):
        bench.BenchConfig(threads="many")
    with pytest.raises(CourseError):
        bench.BenchConfig(threads="0")


def test_thread_settings() -> None:
    from course_utils.devices import cores

    assert bench.BenchConfig(threads="default").op_threads(2) is None
    assert bench.BenchConfig(threads="3").op_threads(2) == 3
    per_replica = bench.BenchConfig()
    assert per_replica.threads == "per-replica"
    assert per_replica.op_threads(1) == cores()
    assert per_replica.op_threads(4) == max(1, cores() // 4)
    assert "cores // replicas" in per_replica.threads_text()


def test_flops_of_the_course_cnn() -> None:
    from course_utils.models import custom_training_cnn

    flops = bench.model_flops(custom_training_cnn(seed=1))
    assert [layer.kind for layer in flops.layers] == ["Conv2D", "Conv2D", "Dense", "Dense"]
    assert flops.forward == 389_376 + 4_460_544 + 204_800 + 1_280
    assert flops.training == 3 * flops.forward
    assert "4,460,544" in flops.table()
    limit = bench.MachineLimit(100.0, 1024, flops)
    assert limit.share(limit.examples_per_s_limit) == pytest.approx(1.0)


def test_matmul_rate_is_a_positive_number() -> None:
    rate = bench.matmul_gflops(size=128, repeats=3, warmup=1)
    assert math.isfinite(rate) and rate > 0


def test_table_and_ratios() -> None:
    ms = [
        _measurement("naive_ctl", 1, (0.2,)),
        _measurement("ctl", 1, (0.1,)),
        _measurement("fit", 1, (0.125,)),
    ]
    ratios = bench.ratios(ms)
    assert ratios[1]["ctl/fit"] == pytest.approx(1.25)
    assert ratios[1]["ctl/naive_ctl"] == pytest.approx(2.0)
    text = bench.table(ms)
    assert text.splitlines()[0].split() == ["loop", "replicas", "examples/s", "step", "(ms)"]
    assert "6,400" in text  # 64 x 10 examples in 0.1 s


def test_custom_loops_compute_the_same_training(two_replicas) -> None:
    """Several steps per call and a prefetched pipeline change the speed, not the arithmetic."""
    from course_utils.data import load_fashion_mnist

    data = load_fashion_mnist(fast=True, quiet=True)
    x, y = data.train_images[:512], data.train_labels[:512]
    naive = loops.make_naive_ctl(two_replicas, x, y, loops.LoopOptions(per_replica_batch=16))
    ctl = loops.make_ctl(two_replicas, x, y, loops.LoopOptions(per_replica_batch=16, steps_per_call=3))
    assert naive.global_batch == ctl.global_batch == 32
    losses_naive = [naive.run(3) for _ in range(2)]
    losses_ctl = [ctl.run(3) for _ in range(2)]
    np.testing.assert_allclose(losses_ctl, losses_naive, rtol=1e-5)
    with pytest.raises(ValueError, match="multiple of steps_per_call"):
        ctl.run(4)
    ctl.steps_per_call = 2  # another value reuses the compiled loop
    assert math.isfinite(ctl.run(4))


def test_fit_times_epochs_of_one_call() -> None:
    # The benchmark's strategy: Model.fit with steps_per_execution > 1 fails on the collective
    # all-reduce over virtual CPUs (tests/test_strategies.py keeps a strict xfail for it).
    from course_utils.strategies import mirrored_cpus

    two_replicas = mirrored_cpus(2, all_reduce="one_device")
    from course_utils.data import load_fashion_mnist

    data = load_fashion_mnist(fast=True, quiet=True)
    trainer = loops.make_fit(
        two_replicas,
        data.train_images[:256],
        data.train_labels[:256],
        loops.LoopOptions(16, steps_per_call=2),
    )
    calls = []
    seconds = trainer.time_runs(
        4, 2, 1, before_run=lambda: calls.append("before"), after_run=lambda: calls.append("after")
    )
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    assert calls == ["before", "after", "before", "after"]
    assert trainer.steps_done == 12


def test_command_writes_rows_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = bench_command.main(
        [
            "--loops",
            "ctl",
            "--replicas",
            "1",
            "2",
            "--examples",
            "600",
            "--per-replica-batch",
            "8",
            "--steps-per-call",
            "2",
            "--steps",
            "4",
            "--runs",
            "2",
            "--jobs",
            "2",
            "--matmul-size",
            "128",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    rows = json.loads(out.read_text())
    assert isinstance(rows, list) and len(rows) == 2
    for row, replicas in zip(rows, (1, 2)):
        assert set(row) == set(bench.ROW_KEYS)
        assert row["loop"] == "ctl" and row["replicas"] == replicas
        assert row["examples_per_s"] > 0 and row["median_step_ms"] > 0
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("loop"))
    assert lines[header].split()[:4] == ["loop", "replicas", "examples/s", "step"]
    assert [line.split()[:2] for line in lines[header + 2 : header + 4]] == [["ctl", "1"], ["ctl", "2"]]
    assert "GFLOP/s" in printed and "Load average" in printed
    assert "A MirroredStrategy over 1 to 2 virtual CPUs" in printed and "cores // replicas" in printed


def test_command_refuses_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_command.main(["--steps", "7", "--steps-per-call", "2", "--no-limit"]) == 2
    assert "multiple of steps_per_call" in capsys.readouterr().err
