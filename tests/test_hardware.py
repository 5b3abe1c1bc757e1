"""course_utils.hardware: the fallback chain TPU -> several GPUs -> one GPU -> CPU.

Every branch runs against fakes; the real machine (no TPU, no GPU, 2 virtual CPUs in the test
process) is used only where it is what this machine really has.
"""

from __future__ import annotations

import time

import pytest

from course_utils.errors import NoTPUError, describe_error
from course_utils.hardware import (
    KINDS,
    HardwarePlan,
    detect_strategy,
    find_local_tpu,
    plan_hardware,
)
from course_utils.lessons.machines import FakeMachine


def _plan(machine: FakeMachine) -> HardwarePlan:
    return plan_hardware(
        find_tpu=machine.find_tpu, list_devices=machine.list_devices, cpu_replicas=machine.cpus
    )


def test_tpu_wins_and_nothing_else_is_asked() -> None:
    machine = FakeMachine(tpu=True, gpus=4)
    plan = _plan(machine)
    assert plan.kind == "tpu" and plan.resolver == "fake TPU resolver"
    assert machine.calls == ["find_tpu"]
    assert plan.tried() == "TPU yes (connected and initialised)"
    assert plan.strategy_description() == "TPUStrategy over the TPU's cores"


@pytest.mark.parametrize(
    "gpus, kind, devices, description",
    [
        (4, "multi_gpu", ("/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3"), "MirroredStrategy over 4 GPUs"),
        (2, "multi_gpu", ("/gpu:0", "/gpu:1"), "MirroredStrategy over 2 GPUs"),
        (1, "one_gpu", ("/gpu:0",), "OneDeviceStrategy on /gpu:0"),
    ],
)
def test_gpu_branches(gpus, kind, devices, description) -> None:
    plan = _plan(FakeMachine(gpus=gpus))
    assert (plan.kind, plan.devices) == (kind, devices)
    assert plan.strategy_description() == description
    assert plan.tried() == f"TPU no (no TPU: a fake machine); GPU yes ({gpus} found)"


@pytest.mark.parametrize(
    "cpus, description", [(1, "the default strategy on the CPU"), (2, "MirroredStrategy over 2 virtual CPUs")]
)
def test_cpu_branch(cpus, description) -> None:
    plan = _plan(FakeMachine(cpus=cpus))
    assert plan.kind == "cpu" and len(plan.devices) == cpus
    assert plan.strategy_description() == description
    assert plan.tried().endswith(f"GPU no (none found); CPU yes ({cpus} logical)")


def test_every_tpu_failure_falls_back() -> None:
    import tensorflow as tf

    errors = [
        ValueError("Please provide a TPU Name to connect to."),
        KeyError("COLAB_TPU_ADDR"),
        RuntimeError("TPU is not yet ready"),
        IndexError("index 0 is out of bounds for axis 0 with size 0"),
        tf.errors.NotFoundError(
            None,
            None,
            "TPUs not found in the cluster. Failed in "
            "initialization: No OpKernel was registered to support Op "
            "'ConfigureDistributedTPU' used by {{node X}} with these attrs: [a=1]",
        ),
    ]
    for error in errors:
        plan = _plan(FakeMachine(gpus=1, tpu_error=error))
        assert plan.kind == "one_gpu"
        assert plan.attempts[0].detail.startswith(type(error).__name__)
    assert "used by" not in plan.attempts[0].detail
    assert plan.attempts[0].detail.endswith("'ConfigureDistributedTPU'")


def test_describe_error() -> None:
    assert describe_error(ValueError("")) == "ValueError"
    assert describe_error(KeyError("COLAB_TPU_ADDR")) == "KeyError: 'COLAB_TPU_ADDR'"
    assert describe_error(RuntimeError("first\nsecond")) == "RuntimeError: first"
    long = describe_error(RuntimeError("x" * 500), limit=40)
    assert len(long) == len("RuntimeError: ") + 40 and long.endswith("...")


def test_cpu_replicas_default(monkeypatch) -> None:
    """The chain's CPU count is the kept settings' (COURSE_REPLICAS as the set-up cell read it)."""
    from course_utils import config

    monkeypatch.setattr(config, "_kept", config.read({}))
    machine = FakeMachine()
    plan = plan_hardware(find_tpu=machine.find_tpu, list_devices=machine.list_devices)
    assert len(plan.devices) == 2  # COURSE_REPLICAS unset: 2, so students see distribution
    monkeypatch.setattr(config, "_kept", config.read({"COURSE_REPLICAS": "3"}))
    plan = plan_hardware(find_tpu=machine.find_tpu, list_devices=machine.list_devices)
    assert len(plan.devices) == 3


def test_detect_strategy_with_fakes(capsys) -> None:
    machine = FakeMachine(gpus=4, tpu_error=ValueError("Please provide a TPU Name to connect to."))
    built = []
    result = detect_strategy(
        find_tpu=machine.find_tpu,
        list_devices=machine.list_devices,
        build=lambda plan: built.append(plan) or "fake strategy",
    )
    assert result == "fake strategy" and built[0].kind == "multi_gpu"
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Tried: TPU no (ValueError: Please provide a TPU Name to connect to.); GPU yes (4 found)",
        "Chose: MirroredStrategy over 4 GPUs: 'fake strategy'",
    ]


# --------------------------------------------------------------------------- this machine


def test_find_local_tpu_fails_fast_here() -> None:
    start = time.perf_counter()
    with pytest.raises(NoTPUError, match="no TPU: NotFoundError: TPUs not found in the cluster"):
        find_local_tpu()
    assert time.perf_counter() - start < 30  # about 1 s on an idle machine


def test_build_strategy_on_cpus() -> None:
    import tensorflow as tf

    from course_utils.strategies import Choice, build_strategy

    two = build_strategy(HardwarePlan("cpu", ("/cpu:0", "/cpu:1")).choice())
    assert isinstance(two, tf.distribute.MirroredStrategy) and two.num_replicas_in_sync == 2
    one = build_strategy(HardwarePlan("cpu", ("/cpu:0",)).choice())
    assert one is tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="unknown hardware kind"):
        HardwarePlan("quantum").choice()
    with pytest.raises(ValueError, match="unknown strategy kind 'quantum'"):
        build_strategy(Choice("quantum"))
    assert KINDS == ("tpu", "multi_gpu", "one_gpu", "cpu")


def test_detect_strategy_here(capsys) -> None:
    strategy = detect_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    tried, chose = capsys.readouterr().out.splitlines()
    assert tried.startswith("Tried: TPU no (no TPU: NotFoundError: TPUs not found in the cluster")
    assert tried.endswith("; GPU no (none found); CPU yes (2 logical)")
    assert chose == "Chose: MirroredStrategy with 2 replicas on CPU:0, CPU:1"


def test_no_sign_of_a_tpu_is_a_fast_no(monkeypatch) -> None:
    from course_utils import hardware

    for name in hardware.TPU_HINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(NoTPUError, match="no sign of one"):
        hardware.find_tpu_if_hinted()


@pytest.mark.parametrize(
    "gpus, tpu, auto, mirrored, one_device",
    [
        (0, False, ("mirrored", ("/cpu:0", "/cpu:1", "/cpu:2")), ("/cpu:0", "/cpu:1", "/cpu:2"), ("/cpu:0",)),
        (1, False, ("one_device", ("/gpu:0",)), ("/gpu:0",), ("/gpu:0",)),
        (4, False, ("mirrored", ("/gpu:0", "/gpu:1", "/gpu:2")), ("/gpu:0", "/gpu:1", "/gpu:2"), ("/gpu:0",)),
        (2, True, ("tpu", ()), ("/gpu:0", "/gpu:1"), ("/gpu:0",)),
    ],
)
def test_choose_decides_without_building(gpus, tpu, auto, mirrored, one_device, monkeypatch) -> None:
    """choose(): auto is the chain (its first GPUs up to the count), other kinds follow their row."""
    from course_utils import hardware

    machine = FakeMachine(gpus=gpus)
    monkeypatch.setattr(hardware, "find_tpu_if_hinted", FakeMachine(tpu=tpu).find_tpu)
    choice = hardware.choose("auto", 3, list_devices=machine.list_devices)
    assert (choice.kind, choice.devices[:3], choice.auto) == (*auto, True)
    assert hardware.choose("mirrored", 3, list_devices=machine.list_devices).devices == mirrored
    assert hardware.choose("one_device", 3, list_devices=machine.list_devices).devices == one_device
