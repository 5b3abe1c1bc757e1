"""Notebook 06's hardware-dependent cells, run against the course's fake machines.

The cells are read from the master (found by what they define, not by their number) and run in one
namespace per machine, as a kernel runs them in order. There ``tf`` is this process's TensorFlow except
for what asks the machine: the TPU calls of section 2, the device lists and the strategies built on
devices, which answer as a :class:`FakeMachine` with a TPU, with GPUs or with CPUs only would. The
strategies that then train are real, on the two virtual CPUs of the test process (tests/conftest.py).
"""

from __future__ import annotations

import json
import linecache
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Optional

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute.tpu_strategy import validate_run_function

from course_utils.lessons.machines import FakeMachine
from course_utils.strategies import mirrored_cpus

ROOT = Path(__file__).resolve().parents[1]
NAME = "06_tpu_and_hardware_detection.ipynb"
MASTER = json.loads((ROOT / "solutions" / NAME).read_text())


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def cell(marker: str) -> dict:
    """The one code cell of the master whose source contains ``marker``."""
    found = [c for c in MASTER["cells"] if c["cell_type"] == "code" and marker in _source(c)]
    assert len(found) == 1, f"{len(found)} code cells of {NAME} contain {marker!r}"
    return found[0]


def stored_stdout(c: dict) -> str:
    return "".join("".join(o["text"]) for o in c["outputs"] if o.get("name") == "stdout")


def untimed(text: str) -> str:
    """``text`` without the durations ``attempt`` prints (``(0.30 s)``, ``within 0.3 s``)."""
    return re.sub(r"\d+\.\d+ s\b", "T s", text)


DETECT = "init_result = attempt("  # section 2: the four calls
READ_ERROR = 'print("this TensorFlow defines the op:"'  # section 2: reading the error
OLD_WAYS = 'for name in ("COLAB_TPU_ADDR"'  # section 3
CHAIN = "def choose_hardware("  # section 4: the chain
BUILD = "def build_strategy("  # section 4: the strategy each answer builds
REAL_CHAIN = "choose_hardware()\nstrategy = build_strategy(kind, found)"  # section 4: this machine
CORES = 'cores = tf.config.list_logical_devices("TPU")'  # section 4: a cell that needs a TPU
NAIVE = "def naive_loop("  # section 7: the eager strategy.run
NAIVE_RUN = "x_toy = rng.normal("  # section 7: naive_loop run on the toy data
INSTALL = "install_tensorflow_tpu()"  # section 1: the guarded install
SOLUTION = "def tpu_ready_loop("  # section 8: the TPU-ready loop

# --------------------------------------------------------------------------- a TensorFlow that asks a fake


class _Namespace:
    """``real`` with some attributes replaced (``tf``, ``tf.config``...)."""

    def __init__(self, real: Any, **replaced: Any) -> None:
        self._real, self._replaced = real, replaced

    def __getattr__(self, name: str) -> Any:
        return self._replaced[name] if name in self._replaced else getattr(self._real, name)


class TPUClusterResolver:
    """Stands in for ``TPUClusterResolver(tpu="local")``, which succeeds on any machine; every other
    ``tpu`` goes to the real class (section 3's errors are this machine's own)."""

    def __new__(cls, tpu: Optional[str] = None, *args: Any, **kwargs: Any) -> Any:
        if tpu != "local":
            return tf.distribute.cluster_resolver.TPUClusterResolver(tpu, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, tpu: Optional[str] = None, *args: Any, **kwargs: Any) -> None:
        self.tpu = tpu

    def __repr__(self) -> str:
        return "TPUClusterResolver(tpu='local')"


class Topology:
    """What ``initialize_tpu_system`` returns on a TPU (``tf.tpu.experimental.Topology``)."""


class TPUStrategy:
    """Stands in for ``TPUStrategy``: a real strategy whose ``run`` refuses a plain Python function
    called eagerly with TensorFlow's own check (``validate_run_function``, what TPUStrategy.run calls),
    then converts every argument to a tensor as ``tpu.replicate`` does (a model there raises)."""

    def __init__(self, resolver: Any) -> None:
        self._strategy = tf.distribute.get_strategy()  # one replica, as on a one-core v5e-1

    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        validate_run_function(fn)
        for leaf in tf.nest.flatten((args, kwargs or {}), expand_composites=True):
            if leaf is not None:
                tf.convert_to_tensor(leaf)
        return self._strategy.run(fn, args=args, kwargs=kwargs, options=options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._strategy, name)


def fake_tf(machine: FakeMachine) -> _Namespace:
    """``tf`` as the cells see it on ``machine``."""

    def initialize_tpu_system(resolver: Any) -> Any:
        machine.find_tpu()  # raises the machine's error where it has no TPU
        return Topology()

    def tpu_strategy(resolver: Any) -> Any:
        if not machine.tpu:  # what TPUStrategy does without an initialised TPU (stored in the master)
            raise IndexError("index 0 is out of bounds for axis 0 with size 0")
        return TPUStrategy(resolver)

    def list_logical_devices(device_type: Optional[str] = None) -> list:
        kinds = [device_type] if device_type else ["CPU", "GPU", "TPU"]
        return [device for kind in kinds for device in machine.list_logical_devices(kind)]

    def mirrored(devices: list) -> Any:  # the same number of replicas, on this process's CPUs
        return mirrored_cpus(len(devices))

    def one_device(device: str) -> Any:
        return tf.distribute.OneDeviceStrategy("/cpu:0")

    return _Namespace(
        tf,
        config=_Namespace(
            tf.config,
            list_logical_devices=list_logical_devices,
            experimental_connect_to_cluster=lambda resolver: None,
        ),
        tpu=_Namespace(
            tf.tpu, experimental=_Namespace(tf.tpu.experimental, initialize_tpu_system=initialize_tpu_system)
        ),
        distribute=_Namespace(
            tf.distribute,
            TPUStrategy=tpu_strategy,
            MirroredStrategy=mirrored,
            OneDeviceStrategy=one_device,
            cluster_resolver=_Namespace(
                tf.distribute.cluster_resolver, TPUClusterResolver=TPUClusterResolver
            ),
        ),
    )


# --------------------------------------------------------------------------- the machines


@pytest.fixture(scope="module")
def no_tpu_error() -> BaseException:
    """What initialize_tpu_system raises on this CPU machine: the error of every machine without a TPU."""
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    with pytest.raises(tf.errors.NotFoundError) as raised:
        tf.tpu.experimental.initialize_tpu_system(resolver)
    assert "Registered devices: [CPU]" in str(raised.value)
    return raised.value


def gpu_error(cpu_error: BaseException) -> BaseException:
    """The same error on a GPU machine, whose TensorFlow registers GPU devices too (read, not run)."""
    message = str(cpu_error).replace("Registered devices: [CPU]", "Registered devices: [CPU, GPU]")
    return tf.errors.NotFoundError(None, None, message)


def run_cells(machine: FakeMachine, capsys: pytest.CaptureFixture, *markers: str) -> tuple[dict, dict]:
    """Run the cells in order in one namespace, as a kernel would: (what each printed, the namespace)."""
    namespace: dict[str, Any] = {"tf": fake_tf(machine), "np": np, "keras": keras, "os": os}
    printed = {}
    capsys.readouterr()
    for marker in markers:
        source, filename = _source(cell(marker)), f"{NAME}: {marker}"
        # AutoGraph reads a function's source (a tf.range loop in a tf.function): keep the cell's.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
        printed[marker] = capsys.readouterr().out
    return printed, namespace


ALL = (DETECT, READ_ERROR, OLD_WAYS, CHAIN, BUILD, REAL_CHAIN, CORES, NAIVE, NAIVE_RUN)


def test_on_a_tpu_every_cell_takes_the_tpu_branch(capsys) -> None:
    machine = FakeMachine(tpu=True)
    out, ns = run_cells(machine, capsys, *ALL)
    assert ns["tpu_found"] is True and ns["kind"] == "TPU"
    assert "initialize_tpu_system(resolver)\n    returned Topology" in out[DETECT]
    assert "TPUStrategy(resolver)\n    returned TPUStrategy" in out[DETECT]
    assert "returned [LogicalDevice(name='/device:TPU:0'" in out[DETECT]
    assert out[DETECT].splitlines()[-1].startswith("a TPU: every call returned, in ")
    assert out[READ_ERROR] == "initialize_tpu_system found a TPU: no error to read.\n"
    assert "raised KeyError: 'COLAB_TPU_ADDR'" in out[OLD_WAYS]  # no timing assert on a TPU
    assert out[REAL_CHAIN].splitlines() == [
        "tried: TPU: found",
        "chose: TPUStrategy on TPUClusterResolver(tpu='local'), 1 replicas in sync",
    ]
    assert out[CORES].startswith("8 TPU cores: ['/device:TPU:0',")
    # The eager strategy.run is refused, and the cell shows the error instead of raising it.
    assert (
        "TPUStrategy refused the first step: TPUStrategy.run(fn, ...) does not support pure eager execution.\n"
        in out[NAIVE_RUN]
    )
    assert "calls for" not in out[NAIVE_RUN]
    assert out[NAIVE_RUN].endswith("per-replica batch shapes on 1 replicas, step by step:\n    [(8, 6)]\n")


@pytest.mark.parametrize(
    "gpus, strategy, shapes",
    [(2, "MirroredStrategy", "[(4, 6), (4, 6)]"), (1, "OneDeviceStrategy", "[(8, 6)]")],
)
def test_on_gpus_the_cells_take_the_no_tpu_branch(capsys, no_tpu_error, gpus, strategy, shapes) -> None:
    machine = FakeMachine(gpus=gpus, tpu_error=gpu_error(no_tpu_error))
    out, ns = run_cells(machine, capsys, *ALL)
    assert ns["tpu_found"] is False and ns["kind"] == "GPU"
    assert (
        "initialize_tpu_system(resolver)\n    raised NotFoundError: TPUs not found in the cluster."
        in out[DETECT]
    )
    assert "TPUStrategy(resolver)\n    raised IndexError" in out[DETECT]
    assert out[DETECT].splitlines()[-1].startswith("every call returned or failed within ")
    assert out[READ_ERROR] == (
        "Registered devices: [CPU, GPU]\nRegistered kernels:\n<no registered kernels>\n"
        "this TensorFlow defines the op: True\ndevices in this process: ['CPU', 'GPU']\n"
    )
    names = [f"/device:GPU:{i}" for i in range(gpus)]
    assert out[REAL_CHAIN].splitlines() == [
        f"tried: TPU: NotFoundError; GPU: {gpus}",
        f"chose: {strategy} on {names}, {gpus} replicas in sync",
    ]
    assert out[CORES] == "No TPU on this runtime (GPU): skipped listing the TPU cores.\n"
    assert "6 calls for 6 steps; tf.function that ran them: None\n" in out[NAIVE_RUN]
    assert f"shapes on {gpus} replicas, step by step:\n    {shapes}\n" in out[NAIVE_RUN]


def test_on_cpus_the_cells_print_what_the_master_stores(capsys, no_tpu_error) -> None:
    """The CPU fake answers as this machine does: the cells print the master's stored outputs."""
    machine = FakeMachine(cpus=2, tpu_error=no_tpu_error)
    out, ns = run_cells(machine, capsys, *ALL)
    assert ns["tpu_found"] is False and ns["kind"] == "CPU"
    for marker in ALL:
        assert untimed(out[marker]) == untimed(stored_stdout(cell(marker))), marker


def test_an_unexpected_failure_to_find_a_tpu_still_stops_the_notebook(capsys) -> None:
    """Only NotFoundError is the lesson's "no TPU": any other failure of initialize_tpu_system raises."""
    machine = FakeMachine(tpu_error=RuntimeError("TPU is already in use by another process"))
    with pytest.raises(AssertionError):
        run_cells(machine, capsys, DETECT)


def test_the_tpu_ready_loop_gives_a_tpu_only_tensors(capsys) -> None:
    """TPUStrategy.run converts every argument to a tensor: the solution closes over the model and
    optimizer and trains on the fake TPU, where a model in strategy.run's args raises."""
    out, ns = run_cells(FakeMachine(tpu=True), capsys, *ALL, SOLUTION)
    strategy = ns["strategy"]
    with strategy.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    train_steps, losses = ns["tpu_ready_loop"](strategy, model, optimizer, ns["x_toy"], ns["y_toy"], 8, 2)
    assert train_steps.experimental_get_tracing_count() == 1 and len(losses) == 3

    @tf.function
    def model_in_args(images, labels):
        return strategy.run(ns["replica_step"], args=(model, optimizer, images, labels, 8))

    with pytest.raises(TypeError, match="Failed to convert elements of <Sequential"):
        model_in_args(ns["x_toy"][:8], ns["y_toy"][:8])


def test_re_running_the_chain_cells_reuses_the_strategy(capsys, no_tpu_error) -> None:
    """Two MirroredStrategy objects with collective all-reduces over the same devices can abort each
    other's: running the chain's cells again (run all, twice) returns the strategy already built."""
    machine = FakeMachine(cpus=2, tpu_error=no_tpu_error)
    made = []
    fake = fake_tf(machine)

    def mirrored(devices: list) -> Any:
        made.append(devices)
        return types.SimpleNamespace(num_replicas_in_sync=len(devices))

    fake._replaced["distribute"]._replaced["MirroredStrategy"] = mirrored
    namespace: dict[str, Any] = {"tf": fake}
    for _ in range(2):
        for marker in (CHAIN, BUILD, REAL_CHAIN):
            exec(compile(_source(cell(marker)), f"{NAME}: {marker}", "exec"), namespace)
    assert len(made) == 1


# --------------------------------------------------------------------------- the guarded install


@pytest.mark.parametrize(
    "tensorflow, devices, vendor, says",
    [
        (True, ["/dev/accel0"], "", "Nothing to install: this runtime has TensorFlow."),
        (False, [], "", "Nothing to install: no TPU chips here"),
        (False, ["/dev/vfio/0"], "0x10de", "Nothing to install: no TPU chips here"),  # a VFIO GPU
        (False, ["/dev/accel0"], "", "Installed tensorflow-tpu 2.20.0"),  # TPU v2 to v4
        (False, ["/dev/vfio/0"], "0x1ae0", "Installed tensorflow-tpu 2.20.0"),  # v5e and later
    ],
)
def test_the_install_cell_installs_only_where_a_tpu_lacks_tensorflow(
    capsys, monkeypatch, tmp_path, tensorflow, devices, vendor, says
) -> None:
    import glob
    import importlib.util

    (tmp_path / "vendor").write_text(vendor + "\n")
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "check_call", lambda args, **kwargs: calls.append(args))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if tensorflow else None)

    def fake_glob(pattern: str) -> list[str]:
        if pattern.startswith("/sys/kernel/iommu_groups/"):
            return [str(tmp_path / "vendor")]
        return [d for d in devices if d.startswith(pattern.split("*")[0].split("[")[0])]

    monkeypatch.setattr(glob, "glob", fake_glob)
    install = cell(INSTALL)
    sources = [_source(c) for c in MASTER["cells"] if c["cell_type"] == "code"]
    assert "course_utils.setup(" in sources[0] and sources[1] == _source(install), "right after the set-up"
    assert "restart the runtime" in sources[1], "it says when"

    exec(_source(install), {})
    out = capsys.readouterr().out
    assert out.startswith(says) and len(out.splitlines()) == 1
    installs = says.startswith("Installed")
    assert calls == (
        [
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "tensorflow-tpu==2.20.0",
                "-f",
                "https://storage.googleapis.com/libtpu-tf-releases/index.html",
            ]
        ]
        if installs
        else []
    )


def test_without_tensorflow_the_set_up_cell_points_to_the_install_cell(monkeypatch) -> None:
    """On a TPU runtime without TensorFlow the set-up cell stops first: its one line says where to go."""
    import importlib.util

    from course_utils import runtime
    from course_utils.errors import CourseError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "tensorflow" else real(name)
    )
    with pytest.raises(CourseError, match="notebook 06's cell after its set-up cell installs tensorflow-tpu"):
        runtime.setup(cpus=2, show_report=False)


def test_the_stored_install_cell_found_tensorflow() -> None:
    assert stored_stdout(cell(INSTALL)) == "Nothing to install: this runtime has TensorFlow.\n"


def test_the_notebook_asks_colab_for_a_cpu_runtime() -> None:
    """Colab's v2-8 TPU runtime (accelerator TPU, gpuType V28) is retired; 06 opens where it runs."""
    student = json.loads((ROOT / "notebooks" / NAME).read_text())
    for nb in (MASTER, student):
        assert "accelerator" not in nb["metadata"]
        assert "gpuType" not in nb["metadata"].get("colab", {})


# --------------------------------------------------------------------------- predictions before reveals


@pytest.mark.parametrize(
    "exercise, reveal, answer",
    [
        ("trace_count", "def count_compilations(dataset):", "compiled for [(4,), (2,)]"),
        ("replica_batches", NAIVE_RUN, "[(2, 6), (1, 6)]"),
    ],
)
def test_each_prediction_is_asked_before_the_cell_that_shows_it(exercise, reveal, answer) -> None:
    """The reveal is a demo the section has anyway: it comes after the check, and no cell above the
    question prints the answer."""
    cells = MASTER["cells"]
    asked = next(
        i for i, c in enumerate(cells) if c["metadata"].get("course", {}).get("exercise") == exercise
    )
    shown = cells.index(cell(reveal))
    assert asked < shown
    assert answer in stored_stdout(cells[shown])
    assert not any(answer in stored_stdout(c) for c in cells[:asked] if c["cell_type"] == "code")
