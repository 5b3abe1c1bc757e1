"""The checks of notebook 09 pass the reference answers and catch the usual mistakes with a hint."""

from __future__ import annotations

import statistics

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import performance as ex
from course_utils.lessons import bench


def _pipelined(input_rate: float, compute_rate: float, prefetch: bool) -> float:
    if prefetch:
        return min(input_rate, compute_rate)
    return 1 / (1 / input_rate + 1 / compute_rate)


def test_reference_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_median_throughput(lambda s, n, w: bench.median_throughput(s, n, w))
    ex.check_pipelined_throughput(_pipelined)
    ex.check_speedup_bound(ex.reference_speedup_bound)
    out = capsys.readouterr().out
    for name in ("median_throughput", "pipelined_throughput", "speedup_bound"):
        assert f"[pass] {name}: " in out


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda s, n, w: n / statistics.fmean(s[w:]), "Use the median"),
        (lambda s, n, w: n / statistics.median(s), "must be left out"),
        (lambda s, n, w: statistics.median(s[w:]) / n, "seconds per example"),
        (lambda s, n, w: n / min(s[w:]), "fastest run"),
        (lambda s, n, w: 1 / statistics.median(s[w:]), "examples in one run"),
        (lambda s, n, w: "fast", "should return a number"),
    ],
    ids=["mean", "warm-up kept", "inverted", "fastest", "runs per second", "not a number"],
)
def test_median_throughput_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise median_throughput") as error:
        ex.check_median_throughput(answer)
    assert hint in str(error.value)


def test_unfinished_placeholder_is_named() -> None:
    def placeholder(*args):
        raise NotImplementedError("Exercise median_throughput: write your solution here")

    with pytest.raises(ExerciseError, match="is not done yet"):
        ex.check_median_throughput(placeholder)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda i, c, p: 1 / (1 / i + 1 / c), "overlap"),
        (lambda i, c, p: max(i, c) if p else 1 / (1 / i + 1 / c), "not the step"),
        (lambda i, c, p: min(i, c), "add up"),
    ],
    ids=["never overlaps", "faster side", "always overlaps"],
)
def test_pipelined_throughput_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise pipelined_throughput") as error:
        ex.check_pipelined_throughput(answer)
    assert hint in str(error.value)


def test_reference_conv_flops_match_the_model_count() -> None:
    """The exercise's formula is the one the benchmark uses for the course's CNN."""
    from course_utils.models import custom_training_cnn

    counted = bench.model_flops(custom_training_cnn(seed=1))
    convs = [layer.forward for layer in counted.layers if layer.kind == "Conv2D"]
    assert convs == [bench.conv2d_flops(28, 28, 1, 32, 3), bench.conv2d_flops(13, 13, 32, 64, 3)]
    assert counted.forward == 5_056_000
    assert counted.training == 3 * counted.forward


RIGHT_BATCHES = {
    "weak": {"global_batch": 64, "per_replica": 32, "steps": 93},
    "strong": {"global_batch": 32, "per_replica": 16, "steps": 187},
}


def test_scaling_batches(two_replicas, capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_scaling_batches(RIGHT_BATCHES)
    out = capsys.readouterr().out
    assert "weak   x 2 : global batch 64, 32 per replica, 93 steps" in out
    assert "[pass] scaling_batches" in out


@pytest.mark.parametrize(
    ("kind", "wrong", "hint"),
    [
        ("weak", {"global_batch": 32, "per_replica": 32, "steps": 187}, "keeps the per-replica batch"),
        ("strong", {"global_batch": 32, "per_replica": 32, "steps": 187}, "keeps the global batch"),
        ("weak", {"global_batch": 64, "per_replica": 32, "steps": 187}, "one-device epoch"),
        ("strong", {"global_batch": 32, "per_replica": 16, "steps": 93}, "steps = 93"),
        ("strong", {"global_batch": 64, "per_replica": 16, "steps": 187}, "global_batch = 64"),
    ],
    ids=[
        "weak keeps the global batch",
        "strong keeps the per-replica batch",
        "weak steps of one device",
        "strong steps halved",
        "strong global doubled",
    ],
)
def test_scaling_batches_mistakes(two_replicas, kind, wrong, hint: str) -> None:
    prediction = {k: dict(v) for k, v in RIGHT_BATCHES.items()}
    prediction[kind] = wrong
    with pytest.raises(ExerciseError, match="Exercise scaling_batches") as error:
        ex.check_scaling_batches(prediction)
    assert hint in str(error.value)


def test_scaling_batches_needs_the_shape() -> None:
    with pytest.raises(ExerciseError, match="Set PREDICTION"):
        ex.check_scaling_batches(None)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda c, o, n: float(n), "ignores the overhead"),
        (lambda c, o, n: c / (c / n + o), "also pays the overhead"),
        (lambda c, o, n: (c / n + o) / (c + o), "upside down"),
        (lambda c, o, n: (c + o) / (c / n + o / n), "ignores the overhead"),
        (lambda c, o, n: (c + o) / (c / n + n * o), "= 2.5, got 1"),
    ],
    ids=["ideal", "no overhead on one device", "inverted", "overhead divided too", "overhead grows"],
)
def test_speedup_bound_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise speedup_bound") as error:
        ex.check_speedup_bound(answer)
    assert hint in str(error.value)
