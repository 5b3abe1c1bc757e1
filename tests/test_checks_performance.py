"""The checks of notebook 09 pass the reference answers and catch the usual mistakes with a hint."""

from __future__ import annotations

import statistics

import pytest

from course_utils import bench
from course_utils.errors import ExerciseError
from course_utils.exercises import performance as ex


def _pipelined(input_rate: float, compute_rate: float, prefetch: bool) -> float:
    if prefetch:
        return min(input_rate, compute_rate)
    return 1 / (1 / input_rate + 1 / compute_rate)


def test_reference_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_median_throughput(lambda s, n, w: bench.median_throughput(s, n, w))
    ex.check_scaling_efficiency(bench.scaling_efficiency)
    ex.check_conv2d_flops(bench.conv2d_flops)
    ex.check_pipelined_throughput(_pipelined)
    out = capsys.readouterr().out
    for name in ("median_throughput", "scaling_efficiency", "conv2d_flops", "pipelined_throughput"):
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
        (lambda t, t1, n: t / t1, "speed-up"),
        (lambda t, t1, n: 100 * t / (n * t1), "not a percentage"),
        (lambda t, t1, n: n * t1 / t, "upside down"),
        (lambda t, t1, n: t / (t1 + n), "expected 0.9"),
    ],
    ids=["speed-up", "percent", "inverted", "other"],
)
def test_scaling_efficiency_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise scaling_efficiency") as error:
        ex.check_scaling_efficiency(answer)
    assert hint in str(error.value)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda h, w, c, f, k: (h - k + 1) * (w - k + 1) * f * k * k * c, "multiply by 2"),
        (lambda h, w, c, f, k: 2 * h * w * f * k * k * c, "used the input size"),
        (lambda h, w, c, f, k: 2 * (h - k + 1) * (w - k + 1) * f * k * k, "input channels"),
        (lambda h, w, c, f, k: 2 * (h - k) * (w - k) * f * k * k * c, "should be 4,460,544"),
    ],
    ids=["multiply-adds", "input size", "no channels", "off by one"],
)
def test_conv2d_flops_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise conv2d_flops") as error:
        ex.check_conv2d_flops(answer)
    assert hint in str(error.value)


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
