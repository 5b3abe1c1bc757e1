"""Notebook 06: its scaffolding; the chain, the strategies and the loops are in its cells.

:func:`install_tensorflow_tpu`, the guarded install after the set-up cell; :func:`attempt`, which runs
one detection call and prints its outcome, timed; :class:`FakeMachine`, a pretend machine, so that every
branch of the hardware fallback chain runs on a laptop; :func:`returns_to_python`, which counts Keras's
returns to Python in a short ``Model.fit``; :func:`draw_fallback_chain`, the picture of the chain and of
the two kinds of TPU machine. Importing this module imports no TensorFlow.
"""

from __future__ import annotations

import glob
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import NoTPUError


def install_tensorflow_tpu() -> None:
    """Install ``tensorflow-tpu`` 2.20.0, the last TPU build, only where TensorFlow is missing and TPU
    chips are attached, and print one line saying what it did (then restart the runtime). Chips are
    ``/dev/accel*`` (TPU v2 to v4) or ``/dev/vfio/<n>`` groups holding a device of Google's PCI vendor
    id 0x1ae0 (v5e and later: other devices use VFIO too)."""
    if importlib.util.find_spec("tensorflow") is not None:
        print("Nothing to install: this runtime has TensorFlow.")
        return
    vfio = [group for group in glob.glob("/dev/vfio/[0-9]*")
            if any(Path(v).read_text().strip() == "0x1ae0"  # Google's PCI vendor id
                   for v in glob.glob(f"/sys/kernel/iommu_groups/{Path(group).name}/devices/*/vendor"))]  # fmt: skip
    if not glob.glob("/dev/accel*") + vfio:
        print("Nothing to install: no TPU chips here; use a runtime with TensorFlow.")
    else:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "tensorflow-tpu==2.20.0",
                               "-f", "https://storage.googleapis.com/libtpu-tf-releases/index.html"])  # fmt: skip
        print("Installed tensorflow-tpu 2.20.0, the last TPU build: restart the runtime, then run all.")


def attempt(label: str, call: Callable[[], Any], timings: list[float]) -> Any:
    """Run ``call()`` and print ``label``, what it returned or raised (the error's first line) and the
    seconds it took, which are added to ``timings``: its result, or the exception it raised."""
    start = time.perf_counter()
    try:
        result = call()
    except Exception as error:
        first_line = (str(error).splitlines() or [""])[0].split(" used by ")[0]
        result, outcome = error, f"raised {type(error).__name__}: {first_line}"
    else:
        shown = repr(result) if result is None or isinstance(result, list) else type(result).__name__
        outcome = f"returned {shown}"
    timings.append(time.perf_counter() - start)
    print(f"{label}\n    {outcome} ({timings[-1]:.2f} s)")
    return result


class FakeMachine:
    """A pretend machine for tests and notebook 06: pass its methods where a chain asks the machine.

    ``FakeMachine(tpu=True)`` has a TPU; otherwise ``find_tpu`` raises ``tpu_error`` (default a
    :class:`NoTPUError`, as :func:`find_local_tpu` does). ``gpus`` and ``cpus`` are device counts.
    ``list_devices`` stands for ``tf.config.list_physical_devices`` (one physical CPU, as
    :func:`plan_hardware` expects) and ``list_logical_devices`` for ``tf.config.list_logical_devices``
    (``cpus`` virtual CPUs, as notebook 06's chain expects). ``calls`` records what was asked, in order.
    """

    def __init__(
        self,
        tpu: bool = False,
        gpus: int = 0,
        cpus: int = 1,
        tpu_error: Optional[BaseException] = None,
    ) -> None:
        self.tpu, self.gpus, self.cpus, self.tpu_error = tpu, gpus, cpus, tpu_error
        self.calls: list[str] = []

    def find_tpu(self) -> Any:
        self.calls.append("find_tpu")
        if self.tpu:
            return "fake TPU resolver"
        raise self.tpu_error if self.tpu_error is not None else NoTPUError("no TPU: a fake machine")

    def list_devices(self, device_type: str) -> list[str]:
        self.calls.append(f"list_devices({device_type!r})")
        count = {"GPU": self.gpus, "CPU": 1, "TPU": 8 if self.tpu else 0}.get(device_type.upper(), 0)
        return [f"/physical_device:{device_type.upper()}:{i}" for i in range(count)]

    def list_logical_devices(self, device_type: str) -> list[Any]:
        """``tf.config.LogicalDevice`` entries, as ``tf.config.list_logical_devices`` returns them."""
        import tensorflow as tf

        self.calls.append(f"list_logical_devices({device_type!r})")
        kind = device_type.upper()
        count = {"GPU": self.gpus, "CPU": self.cpus, "TPU": 8 if self.tpu else 0}.get(kind, 0)
        return [tf.config.LogicalDevice(name=f"/device:{kind}:{i}", device_type=kind) for i in range(count)]

    def __repr__(self) -> str:
        error = "" if self.tpu or self.tpu_error is None else f", tpu_error={type(self.tpu_error).__name__}"
        return f"FakeMachine(tpu={self.tpu}, gpus={self.gpus}, cpus={self.cpus}{error})"


def returns_to_python(strategy: Any, steps_per_execution: int, steps: int = 8) -> str:
    """Train a tiny model ``steps`` steps with ``Model.fit`` under ``strategy``: ``"8 steps ran, N returns
    to Python"`` (``on_train_batch_end`` calls), or how keras-team/keras#23085 crashed it."""
    import keras
    import numpy as np
    import tensorflow as tf

    class CountCalls(keras.callbacks.Callback):
        calls = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.calls += 1

    x = np.random.default_rng(0).normal(size=(8 * steps, 4)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, (x.sum(axis=1) > 0).astype("int32")))
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=steps_per_execution)  # fmt: skip
    counter = CountCalls()
    try:
        model.fit(data.batch(8, drop_remainder=True), verbose=0, shuffle=False, callbacks=[counter])
    except tf.errors.InvalidArgumentError as error:
        if "You must feed a value for placeholder tensor" not in str(error):
            raise
        return "crashed: InvalidArgumentError, You must feed a value for placeholder tensor..."
    return f"{steps} steps ran, {counter.calls} returns to Python"


def draw_fallback_chain(kind: str, found: Any, tried: list[str]) -> Any:
    """The chain with what this machine tried and chose (top), and a TPU VM and a TPU node (bottom):
    the figure, for ``plt.show()``."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig = plt.figure(figsize=(11, 6))
    chain, vm, node = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 2, 3), fig.add_subplot(2, 2, 4)
    for ax in (chain, vm, node):
        ax.set_xlim(0, 10), ax.set_ylim(0, 4), ax.axis("off")

    def box(ax: Any, x: float, y: float, w: float, h: float, text: str, face: str = "white",
            edge: str = "black", lw: float = 1.2) -> None:  # fmt: skip
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=face, ec=edge, lw=lw))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)

    def arrow(ax: Any, a: tuple, b: tuple, text: str = "") -> None:
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, color="black", lw=1.3))
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 0.2, text, ha="center", fontsize=8)

    # The chain, from this machine's answer: tried and failed (red), chosen (green), not reached (grey).
    steps = [("TPU", "TPUStrategy"), ("several GPUs", "MirroredStrategy"), ("one GPU", "OneDeviceStrategy"),
             ("CPU", "MirroredStrategy over\nvirtual CPUs (default\nstrategy on one)")]  # fmt: skip
    chosen = {"TPU": 0, "GPU": 1 if len(found) > 1 else 2, "CPU": 3}[kind]
    for i, (name, built) in enumerate(steps):
        x = 0.2 + 2.5 * i
        face, edge, note = (
            ("#e6f5e1", "green", "chosen here") if i == chosen
            else ("#fde2e1", "firebrick", "tried: no") if i < chosen
            else ("#f0f0f0", "gray", "not reached")
        )  # fmt: skip
        box(chain, x, 2.0, 1.9, 1.2, f"{name}\n-> {built}", face, edge, lw=3 if i == chosen else 1.2)
        chain.text(x + 0.95, 1.65, note, ha="center", fontsize=9, color=edge, weight="bold")
        if i < len(steps) - 1:
            arrow(chain, (x + 1.95, 2.6), (x + 2.45, 2.6), "no")
    chain.text(5, 0.9, "this machine: " + "; ".join(tried), ha="center", fontsize=8, wrap=True)
    chain.set_title("The fallback chain (choose_hardware, and COURSE_STRATEGY=auto)")

    # TPU VM: the TPU is attached to the machine that runs Python.
    box(vm, 0.5, 0.4, 9, 3.0, "", "#f7f7f7", "gray")
    vm.text(5, 3.1, "one machine", ha="center", fontsize=9, color="dimgray")
    box(vm, 1.0, 1.2, 3.2, 1.2, "Python + tensorflow-tpu\n(on Colab: installed by\nthe cell after set-up)",
        "#fff7d6")  # fmt: skip
    box(vm, 6.0, 1.2, 3.0, 1.2, "TPU chips", "#e3f0fb")
    arrow(vm, (4.3, 1.8), (5.9, 1.8), 'tpu="local"')
    vm.set_title("TPU VM (today, Colab included)", fontsize=10)

    # TPU node: the TPU sits in another machine, reached over the network.
    box(node, 0.2, 1.0, 3.6, 1.6, "your VM\nPython + TensorFlow", "#fff7d6")
    box(node, 6.2, 1.0, 3.6, 1.6, "TPU host\n(another machine)\nTPU chips", "#e3f0fb")
    arrow(node, (3.9, 1.8), (6.1, 1.8), "gRPC, port 8470")
    node.text(5, 0.4, 'tpu="grpc://" + COLAB_TPU_ADDR: gone since 2024', ha="center", fontsize=8)
    node.set_title("TPU node (before 2024)", fontsize=10)
    fig.tight_layout()
    return fig
