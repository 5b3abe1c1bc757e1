"""course_utils.hardware: the fallback chain TPU -> several GPUs -> one GPU -> CPU.

Every branch runs against fakes; the real machine (no TPU, no GPU, 2 virtual CPUs in the test
process) is used only where it is what this machine really has.
"""

from __future__ import annotations

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


def test_find_local_tpu_says_why_there_is_none_here() -> None:
    # How fast it fails is a measurement, not a test (0.2 s after TensorFlow's import on an idle
    # 2-core machine, with or without a network): a timed assert failed under a loaded CI run.
    with pytest.raises(NoTPUError, match="no TPU: NotFoundError: TPUs not found in the cluster"):
        find_local_tpu()


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
        (1, False, ("mirrored", ("/gpu:0", "/gpu:1", "/gpu:2")), ("/gpu:0", "/gpu:1", "/gpu:2"), ("/gpu:0",)),
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


# --------------------------------------------------------------------------- one GPU, two replicas
#
# Colab's GPU runtime has one T4 or L4: the course splits it into logical GPUs, as it splits a CPU,
# so that the lessons keep two replicas. No test here has a GPU: TensorFlow's device lists are faked
# where TensorFlow itself decides (the all-reduce), so the GPU path is untested on real hardware.

SPLIT_WORDS = "auto: found 1 GPU, split into 2 logical GPUs; COURSE_REPLICAS=1 for one device"


def test_one_gpu_is_split_into_two_logical_gpus() -> None:
    from course_utils.strategies import in_words

    plan = _plan(FakeMachine(gpus=1, cpus=2))
    assert (plan.kind, plan.devices) == ("one_gpu", ("/gpu:0", "/gpu:1"))
    assert plan.tried() == "TPU no (no TPU: a fake machine); GPU yes (1 found, split into 2 logical)"
    choice = plan.choice()
    assert (choice.kind, choice.split_gpu, choice.gpus, choice.cpus) == ("mirrored", True, 2, 0)
    assert in_words(choice, reason=True) == f"MirroredStrategy over 2 logical GPUs ({SPLIT_WORDS})"


@pytest.mark.parametrize(
    "gpus, replicas, kind, devices, words",
    [
        (1, None, "mirrored", ("/gpu:0", "/gpu:1"), f"MirroredStrategy over 2 logical GPUs ({SPLIT_WORDS})"),
        (
            1,
            1,
            "one_device",
            ("/gpu:0",),
            "OneDeviceStrategy on /gpu:0 (auto: found 1 GPU, and COURSE_REPLICAS=1: one device)",
        ),
        (2, None, "mirrored", ("/gpu:0", "/gpu:1"), "MirroredStrategy over 2 GPUs (auto: found 2 GPUs)"),
        (
            4,
            1,
            "mirrored",
            ("/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3"),
            "MirroredStrategy over 4 GPUs (auto: found 4 GPUs)",
        ),
    ],
)
def test_auto_on_gpus(gpus, replicas, kind, devices, words, monkeypatch) -> None:
    """One GPU and COURSE_REPLICAS unset: 2 logical GPUs; COURSE_REPLICAS=1: OneDeviceStrategy on
    /gpu:0, the first logical GPU in a notebook (its setup(cpus=2) splits the GPU all the same);
    2 or more GPUs: all of them, as before, whatever COURSE_REPLICAS says."""
    from course_utils import config, hardware
    from course_utils.strategies import in_words

    monkeypatch.setattr(config, "_kept", config.read({}))
    monkeypatch.setattr(hardware, "find_tpu_if_hinted", FakeMachine().find_tpu)
    choice = hardware.choose("auto", replicas, list_devices=FakeMachine(gpus=gpus).list_devices)
    assert (choice.kind, choice.devices, choice.split_gpu) == (kind, devices, gpus == 1 and replicas != 1)
    assert in_words(choice, reason=True) == words


@pytest.mark.parametrize("kind", ["mirrored", "central_storage"])
def test_named_kinds_split_one_gpu_too(kind, monkeypatch) -> None:
    from course_utils import config, hardware

    monkeypatch.setattr(config, "_kept", config.read({}))
    one_gpu = FakeMachine(gpus=1).list_devices
    assert hardware.choose(kind, None, list_devices=one_gpu).devices == ("/gpu:0", "/gpu:1")
    assert hardware.choose(kind, 1, list_devices=one_gpu).devices == ("/gpu:0",)
    assert hardware.choose("one_device", None, list_devices=one_gpu).devices == ("/gpu:0",)


def _tensorflow_sees_gpus(monkeypatch, physical: int, logical: int) -> None:
    """TensorFlow's own device lists say: ``physical`` GPUs, ``logical`` logical ones."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    from course_utils import strategies

    fake = {
        "physical": [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(physical)],
        "logical": [tf.config.LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(logical)],
    }
    for which in ("physical", "logical"):
        name = f"list_{which}_devices"
        real = getattr(context.Context, name)

        def listed(self, device_type=None, real=real, which=which):
            return fake[which] if device_type == "GPU" else real(self, device_type)

        monkeypatch.setattr(context.Context, name, listed)
    monkeypatch.setattr(strategies, "gpu_count", lambda: logical)
    monkeypatch.setattr(strategies, "_MIRRORED", {})  # strategies built over fake GPUs stay in this test


def test_split_gpu_strategy_uses_tensorflows_ring_all_reduce(monkeypatch) -> None:
    """The course passes no cross-device ops, and TensorFlow gives a MirroredStrategy over the
    logical GPUs of one GPU its collective all-reduce with RING, not NCCL (NCCL needs a physical GPU
    per replica). An upgrade that changes TensorFlow's choice fails this test."""
    from course_utils.strategies import build_strategy, in_words

    _tensorflow_sees_gpus(monkeypatch, physical=1, logical=2)
    choice = _plan(FakeMachine(gpus=1, cpus=2)).choice()
    strategy = build_strategy(choice)
    ops = strategy.extended._cross_device_ops
    assert strategy.num_replicas_in_sync == 2
    assert (type(ops).__name__, ops._options.implementation.name) == ("CollectiveAllReduce", "RING")
    assert strategy.extended._collective_key_base >= 100_000  # keys of its own, as on CPUs
    assert build_strategy(choice) is strategy  # one per process: re-running a cell reuses it
    assert (
        in_words(choice, strategy, reason=True)
        == f"MirroredStrategy with 2 replicas on GPU:0, GPU:1 ({SPLIT_WORDS})"
    )


def test_several_gpus_keep_nccl(monkeypatch) -> None:
    """2 physical GPUs: all of them, with TensorFlow's NCCL all-reduce, as before the split existed."""
    from course_utils.strategies import build_strategy

    _tensorflow_sees_gpus(monkeypatch, physical=2, logical=2)
    choice = _plan(FakeMachine(gpus=2, cpus=2)).choice()
    assert (choice.kind, choice.devices, choice.split_gpu) == ("mirrored", ("/gpu:0", "/gpu:1"), False)
    ops = build_strategy(choice).extended._cross_device_ops
    assert (type(ops).__name__, ops._options.implementation.name) == ("CollectiveAllReduce", "NCCL")


def test_split_gpu_strategy_without_the_split_says_restart(monkeypatch) -> None:
    """TensorFlow has no logical GPUs (listed as none, whatever this machine has): building says what
    to do, in one line, naming COURSE_REPLICAS (use_virtual_gpus refuses a machine with several GPUs)."""
    from course_utils import strategies
    from course_utils.errors import ReplicaCountError
    from course_utils.strategies import build_strategy

    monkeypatch.setattr(strategies, "gpu_count", lambda: 0)
    with pytest.raises(ReplicaCountError) as info:
        build_strategy(_plan(FakeMachine(gpus=1, cpus=2)).choice())
    assert str(info.value) == (
        "The strategy needs 2 replicas, but TensorFlow has 0 GPU devices. Restart the kernel and run the "
        "notebook from the top: its set-up cell splits the GPU (course_utils.setup(cpus=2), or "
        "COURSE_REPLICAS=2, before anything else uses TensorFlow)."
    )


@pytest.mark.parametrize(
    "gpus, environ, cpus, split",
    [
        (1, {}, 2, [2]),  # Colab's GPU runtime, no settings: two logical GPUs
        (1, {"COURSE_REPLICAS": "4"}, 2, [4]),
        (1, {"COURSE_REPLICAS": "1"}, None, []),  # one device: the whole GPU
        (1, {"COURSE_REPLICAS": "1"}, 2, [2]),  # a notebook's cells ask for 2 by name, as on a CPU
        (2, {}, 2, []),  # several GPUs: used as they are
        (0, {}, 2, []),  # no GPU: the CPU path, untouched
    ],
)
def test_setup_splits_one_gpu_before_tensorflow_starts(gpus, environ, cpus, split, monkeypatch) -> None:
    """setup() splits one GPU like the CPU, and turns TensorFloat-32 off wherever there is a GPU."""
    import tensorflow as tf

    from course_utils import hardware, runtime

    machine = FakeMachine(gpus=gpus)
    for name in ("COURSE_REPLICAS", "COURSE_STRATEGY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(runtime, "physical_devices", machine.list_devices)
    monkeypatch.setattr(hardware, "physical_devices", machine.list_devices)
    monkeypatch.setattr(runtime, "gpu_count", lambda: gpus)
    splits, tf32 = [], []
    monkeypatch.setattr(runtime, "use_virtual_gpus", splits.append)
    monkeypatch.setattr(tf.config.experimental, "enable_tensor_float_32_execution", tf32.append)
    runtime.setup(cpus=cpus, show_report=False, seed=None)
    assert splits == split
    assert tf32 == ([False] if gpus else [])


def test_the_report_says_the_gpu_is_split(monkeypatch) -> None:
    from course_utils import config, hardware, runtime

    machine = FakeMachine(gpus=1)
    monkeypatch.setattr(runtime, "physical_devices", machine.list_devices)
    monkeypatch.setattr(hardware, "physical_devices", machine.list_devices)
    monkeypatch.setattr(runtime, "gpu_count", lambda: 2)
    assert runtime.devices_line() == "CPU x1 (split into 2 logical), GPU x1 (split into 2 logical), TPU x0"
    assert runtime.training_line(config.read({})) == f"MirroredStrategy over 2 logical GPUs ({SPLIT_WORDS})"


@pytest.mark.parametrize("gpus", [0, 2])
def test_use_virtual_gpus_needs_one_gpu(gpus, monkeypatch) -> None:
    from course_utils import devices
    from course_utils.devices import use_virtual_gpus
    from course_utils.errors import ConfigError

    monkeypatch.setattr(devices, "physical_devices", FakeMachine(gpus=gpus).list_devices)
    with pytest.raises(ConfigError, match=f"use_virtual_gpus splits one GPU; this machine has {gpus}"):
        use_virtual_gpus(2)
    with pytest.raises(ConfigError, match="whole number"):
        use_virtual_gpus(0)


def test_one_device_checks_run_on_the_cpu_where_there_is_a_gpu(monkeypatch) -> None:
    """compare.run puts the default strategy (the checks' one device) on the CPU when TensorFlow
    sees a GPU, as the checks' replicas are virtual CPUs; without a GPU it places nothing."""
    import numpy as np
    import tensorflow as tf

    from course_utils import compare

    placed, real_device = [], tf.device
    monkeypatch.setattr(tf, "device", lambda name: placed.append(name) or real_device(name))

    def make_model():
        import keras

        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

    def make_step(strategy, model, optimizer, metric):
        def step(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            )
            return loss

        return step

    data = [np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32)]
    weights = [np.ones((2, 1), np.float32), np.zeros(1, np.float32)]
    one = compare.checking_strategy(1)
    compare.run(one, make_step, data, make_model=make_model, weights=weights)
    assert placed == []
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda t=None: ["GPU:0"] if t == "GPU" else real_list(t)
    )
    compare.run(one, make_step, data, make_model=make_model, weights=weights)
    assert placed == ["/cpu:0"]
    placed.clear()
    compare.run(compare.checking_strategy(2), make_step, data, make_model=make_model, weights=weights)
    assert placed == []  # the replicas are placed by their strategy
