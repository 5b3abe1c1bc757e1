"""The checks of notebook 06 pass on right answers and fail, with the right hint, on planted mistakes."""

from __future__ import annotations

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import tpu_and_hardware_detection as ex


def blank(*args, **kwargs):
    raise NotImplementedError("Exercise: replace this line with your code")


def fails_with(check, answer, *needles) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    return message


# --------------------------------------------------------------------------- choose_hardware


def right_chain(find_tpu, list_devices):
    try:
        find_tpu()
        return "tpu"
    except Exception:
        pass
    gpus = len(list_devices("GPU"))
    return "multi_gpu" if gpus > 1 else "one_gpu" if gpus == 1 else "cpu"


def test_choose_hardware(capsys) -> None:
    ex.check_choose_hardware(right_chain)
    assert "[pass] choose_hardware" in capsys.readouterr().out


def test_choose_hardware_catching_only_value_error() -> None:
    def only_value_error(find_tpu, list_devices):  # the old tutorial code: except ValueError
        try:
            find_tpu()
            return "tpu"
        except ValueError:
            pass
        gpus = len(list_devices("GPU"))
        return "multi_gpu" if gpus > 1 else "one_gpu" if gpus == 1 else "cpu"

    fails_with(ex.check_choose_hardware, only_value_error, "Exercise choose_hardware",
               "raised NotFoundError", "catch Exception")


def test_choose_hardware_gpus_first() -> None:
    def gpus_first(find_tpu, list_devices):
        gpus = len(list_devices("GPU"))
        if gpus:
            return "multi_gpu" if gpus > 1 else "one_gpu"
        return right_chain(find_tpu, list_devices)

    fails_with(ex.check_choose_hardware, gpus_first, "expected 'tpu', got 'multi_gpu'",
               "Call find_tpu() first")


def test_choose_hardware_one_gpu_is_not_several() -> None:
    def any_gpu_is_multi(find_tpu, list_devices):
        kind = right_chain(find_tpu, list_devices)
        return "multi_gpu" if kind == "one_gpu" else kind

    fails_with(ex.check_choose_hardware, any_gpu_is_multi, "expected 'one_gpu', got 'multi_gpu'",
               "exactly 1 is 'one_gpu'")


def test_choose_hardware_unknown_kind_and_blank() -> None:
    fails_with(ex.check_choose_hardware, lambda f, l: "TPU", "Return one of 'tpu'")
    fails_with(ex.check_choose_hardware, blank, "not done yet")


# --------------------------------------------------------------------------- tpu_friendly


def test_tpu_friendly(capsys) -> None:
    ex.check_tpu_friendly(lambda d, per, n: d.batch(per * n, drop_remainder=True).prefetch(2))
    assert "[pass] tpu_friendly" in capsys.readouterr().out


def test_tpu_friendly_planted_mistakes() -> None:
    fails_with(ex.check_tpu_friendly, lambda d, per, n: d.batch(per * n),
               "unknown (None)", "drop_remainder=True")
    fails_with(ex.check_tpu_friendly, lambda d, per, n: d.batch(per, drop_remainder=True),
               "4 x 8 = 32", "yours hold 4")
    fails_with(ex.check_tpu_friendly, lambda d, per, n: d.repeat().batch(per * n, drop_remainder=True).take(5),
               "should give 3 full batches; yours gave 5")
    fails_with(ex.check_tpu_friendly, lambda d, per, n: list(d), "Return a tf.data.Dataset")
    fails_with(ex.check_tpu_friendly, blank, "not done yet")
