"""The checks of notebook 06 pass on right answers and fail, with the right hint, on planted mistakes."""

from __future__ import annotations

from checking import blank, fails_with

from course_utils.exercises import tpu_and_hardware_detection as ex

# --------------------------------------------------------------------------- choose_hardware


def chain(caught: type = Exception):
    """The fallback chain, catching ``caught`` when looking for a TPU (the right answer: Exception)."""

    def choose(find_tpu, list_devices):
        try:
            find_tpu()
            return "tpu"
        except caught:
            pass
        gpus = len(list_devices("GPU"))
        return "multi_gpu" if gpus > 1 else "one_gpu" if gpus == 1 else "cpu"

    return choose


right_chain = chain()


def test_choose_hardware(capsys) -> None:
    ex.check_choose_hardware(right_chain)
    assert "[pass] choose_hardware" in capsys.readouterr().out


def test_choose_hardware_catching_only_value_error() -> None:
    only_value_error = chain(ValueError)  # the old tutorial code: except ValueError

    fails_with(
        ex.check_choose_hardware,
        only_value_error,
        "Exercise choose_hardware",
        "raised NotFoundError",
        "catch Exception",
    )


def test_choose_hardware_gpus_first() -> None:
    def gpus_first(find_tpu, list_devices):
        gpus = len(list_devices("GPU"))
        if gpus:
            return "multi_gpu" if gpus > 1 else "one_gpu"
        return right_chain(find_tpu, list_devices)

    fails_with(
        ex.check_choose_hardware, gpus_first, "expected 'tpu', got 'multi_gpu'", "Call find_tpu() first"
    )


def test_choose_hardware_one_gpu_is_not_several() -> None:
    def any_gpu_is_multi(find_tpu, list_devices):
        kind = right_chain(find_tpu, list_devices)
        return "multi_gpu" if kind == "one_gpu" else kind

    fails_with(
        ex.check_choose_hardware,
        any_gpu_is_multi,
        "expected 'one_gpu', got 'multi_gpu'",
        "exactly 1 is 'one_gpu'",
    )


def test_choose_hardware_unknown_kind_and_blank() -> None:
    fails_with(ex.check_choose_hardware, lambda f, l: "TPU", "Return one of 'tpu'")
    fails_with(ex.check_choose_hardware, blank, "not done yet")


# --------------------------------------------------------------------------- last_step_split
# The session has 2 virtual CPUs (tests/conftest.py): each check judges the answer on 2 replicas.


def test_last_step_split(capsys) -> None:
    ex.check_last_step_split(lambda: [1, 0])
    assert "[pass] last_step_split" in capsys.readouterr().out


def test_last_step_split_one_device_answer() -> None:
    fails_with(ex.check_last_step_split, lambda: [1], "Exercise last_step_split", "one device's last batch")


def test_last_step_split_halves_or_copies() -> None:
    # Plausible: the one example is shared, or copied to both replicas.
    fails_with(ex.check_last_step_split, lambda: [0.5, 0.5], "never cuts an example in two")
    fails_with(ex.check_last_step_split, lambda: [1, 1], "add up to 2", "neither copies nor pads")
    fails_with(ex.check_last_step_split, lambda: [2, 2], "9 - 2 x 4 = 1")


def test_last_step_split_wrong_way_round_and_blank() -> None:
    fails_with(ex.check_last_step_split, lambda: [0, 1], "the first replica takes the larger share")
    fails_with(ex.check_last_step_split, lambda: 1, "Return a list")
    fails_with(ex.check_last_step_split, blank, "not done yet")


# --------------------------------------------------------------------------- global_batches

RIGHT = {"v2-8": 512, "v5e-1": 64, "4 GPUs": 256, "this CPU": 128}


def test_global_batches(capsys) -> None:
    ex.check_global_batches(lambda: dict(RIGHT))
    out = capsys.readouterr().out
    assert "[pass] global_batches" in out and "this CPU 128" in out


def test_global_batches_every_tpu_has_8_cores() -> None:
    fails_with(
        ex.check_global_batches,
        lambda: {**RIGHT, "v5e-1": 512},
        "single chip with one core",
        "Not every TPU runtime has 8 cores",
    )


def test_global_batches_counting_chips() -> None:
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "v2-8": 256}, "counts its 4 chips")


def test_global_batches_cpu_as_one_device() -> None:
    # Right on the default strategy, wrong on the course's 2 CPU replicas.
    fails_with(
        ex.check_global_batches, lambda: {**RIGHT, "this CPU": 64}, "one device's batch", "2 virtual CPUs"
    )


def test_global_batches_gpus_and_shape() -> None:
    fails_with(ex.check_global_batches, lambda: {**RIGHT, "4 GPUs": 64}, "MirroredStrategy over 4 GPUs")
    fails_with(ex.check_global_batches, lambda: [512, 64, 256, 128], "Return a dict")
    fails_with(ex.check_global_batches, blank, "not done yet")
