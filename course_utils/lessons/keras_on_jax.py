"""Notebook 11: Keras on JAX, chosen before Keras is imported, and its runtime report (no TensorFlow).

``course_utils.setup(backend="jax", cpus=2)`` (the set-up cell of notebook 11) comes here. Keras reads
``KERAS_BACKEND`` once, when it is first imported, and XLA reads ``XLA_FLAGS`` once, when JAX first
starts a backend: both are set here, before either happens. Without an accelerator the CPU becomes
``cpus`` JAX devices (``--xla_force_host_platform_device_count``), as the other notebooks split it into
TensorFlow's virtual CPUs. Nothing here imports TensorFlow: Colab's TPU runtimes have none.
"""

from __future__ import annotations

import os
import platform
import random
import re
import sys
from typing import Any, Optional

import numpy as np

from ..config import Settings
from ..devices import in_ci, in_colab
from ..errors import ConfigError, last_error_line

#: The XLA flag that splits the host CPU into several JAX devices.
CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def use_jax_backend(cpus: int, environ: Optional[dict[str, str]] = None) -> None:
    """Set ``KERAS_BACKEND=jax`` and ask XLA for ``cpus`` CPU devices (a flag already there is kept).

    Raises :class:`ConfigError` when Keras was already imported with another backend: only a restart
    of the kernel changes it.
    """
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend") and keras.backend.backend() != "jax":
        raise ConfigError(
            f"Keras was imported with the {keras.backend.backend()} backend before the set-up cell: "
            "restart the kernel and run the set-up cell first."
        )
    env = os.environ if environ is None else environ
    env["KERAS_BACKEND"] = "jax"
    flags = env.get("XLA_FLAGS", "")
    if CPU_DEVICES_FLAG not in flags:
        env["XLA_FLAGS"] = f"{flags} {CPU_DEVICES_FLAG}={cpus}".strip()


def devices_line() -> str:
    """``"cpu x2 (the default backend)"``: the devices JAX found, by platform."""
    import jax

    counts: dict[str, int] = {}
    for name in ("tpu", "gpu", "cpu"):
        try:
            counts[name] = len(jax.devices(name))
        except RuntimeError:  # no such platform here
            continue
    return ", ".join(f"{name} x{n}" for name, n in counts.items()) + f" (default: {jax.default_backend()})"


def report(*, show: bool = True) -> str:
    """The runtime report of a JAX notebook: versions, JAX's devices, Colab or CI, the settings."""
    import jax
    import keras

    from ..config import settings

    where = "Google Colab" if in_colab() else "local Jupyter or Python"
    if in_ci():
        where += " (CI)"
    rows = [
        ("Python", platform.python_version()),
        ("Keras", f"{keras.__version__} on the {keras.backend.backend()} backend"),
        ("JAX", jax.__version__),
        ("devices", devices_line()),
        ("runtime", where),
        ("settings", "  ".join(f"{k}={v}" for k, v in settings().as_dict().items())),
        ("training", "keras.distribution over JAX's devices; COURSE_STRATEGY does not apply"),
    ]
    width = max(len(k) for k, _ in rows)
    rule = "-" * 72
    text = "\n".join(["runtime report " + rule[15:]] + [f"{k:<{width}}  {v}" for k, v in rows] + [rule])
    if show:
        print(text)
    return text


def setup_jax(
    env: Settings, *, cpus: int = 2, seed: Optional[int] = 42, show_report: bool = True
) -> Settings:
    """Notebook 11's set-up: Keras on JAX with ``cpus`` CPU devices when there is no accelerator.

    ``env`` is the ``COURSE_*`` settings :func:`course_utils.setup` read (only ``COURSE_FAST`` and
    ``COURSE_OFFLINE`` apply here); it sets the backend, seeds Python and NumPy (``keras.utils.set_random_seed`` would import TensorFlow
    where it is installed: the notebook seeds its initializers and layers itself) and reports.
    """
    use_jax_backend(cpus)
    import jax  # noqa: F401 - starts JAX with the flags above
    import keras  # noqa: F401 - reads KERAS_BACKEND now

    if seed is not None:
        random.seed(seed)
        np.random.seed(seed)
    if show_report:
        report()
    return env


#: Notebook 05, section 4: tf.reduce_mean in a strategy.run step, SGD, 2 replicas (its stored output).
NOTEBOOK_05_FACTOR = 2.00

#: Notebook 05's pitfall, run with tf.distribute in a fresh process (Keras picks its backend once).
TF_STEP = """
import numpy as np, tensorflow as tf, keras
from course_utils.compare import factor
cpu, = tf.config.list_physical_devices("CPU")  # 2 virtual CPUs, before TensorFlow starts
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
rng = np.random.default_rng(11)
x, y = rng.normal(size=(16, 8)).astype("float32"), rng.integers(0, 3, 16).astype("int32")
per_example_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

def update(strategy):
    with strategy.scope():
        init = keras.initializers.GlorotUniform(seed=1)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, kernel_initializer=init)])
        optimizer = keras.optimizers.SGD(learning_rate=0.1)
    start = model.get_weights()[0]
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(per_example_loss(y, model(x, training=True)))  # the pitfall
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    tf.function(lambda x, y: strategy.run(replica_step, args=(x, y)))(*batch)
    return model.get_weights()[0] - start

mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print(f"{factor(update(mirrored), update(tf.distribute.OneDeviceStrategy('/cpu:0'))):.2f}")
"""


def tensorflow_mean_factor() -> tuple[float, str, bool]:
    """Notebook 05's pitfall (``tf.reduce_mean`` in a ``strategy.run`` step, 2 replicas of
    ``MirroredStrategy``): ``(update on 2 replicas / one device's, where the number comes from, measured)``.

    With TensorFlow installed it runs :data:`TF_STEP` in a fresh process with Keras on TensorFlow;
    without it (Colab's TPU runtime) it returns notebook 05's stored result.
    """
    import importlib.util

    from ..processes import run_python

    if importlib.util.find_spec("tensorflow") is None:
        return NOTEBOOK_05_FACTOR, "not installed; notebook 05's stored result", False
    result = run_python(TF_STEP, env={"KERAS_BACKEND": "tensorflow", "XLA_FLAGS": ""})
    if not result.ok:
        raise RuntimeError(
            f"the tf.distribute step failed: {last_error_line(result.stderr) or result.returncode}"
        )
    return float(result.stdout.split()[-1]), "measured now in a fresh process", True


def draw_runtimes(stacks: dict[str, list[str]]) -> Any:
    """Notebook 11, section 2: each runtime's software stack as a column of boxes, top down (a part
    starting with "no" greyed out); return the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.5 * len(stacks), 2.4))
    for col, (name, stack) in enumerate(stacks.items()):
        ax.text(col * 3 + 1, 3.4, name, ha="center", weight="bold")
        for row, part in enumerate(stack):
            shade = "lightgrey" if part.startswith("no") else "tab:blue"
            ax.add_patch(plt.Rectangle((col * 3, 2 - row), 2, 0.8, color=shade, alpha=0.6))
            ax.text(col * 3 + 1, 2.4 - row, part, ha="center", va="center")
    ax.set(xlim=(-0.5, 3 * len(stacks) - 0.5), ylim=(-0.2, 3.8))
    ax.axis("off")
    return fig


def size_named(error: BaseException) -> str:
    """Notebook 11, section 4: the size JAX's error says it could not split over the devices ("?"
    when its wording, which varies between versions, names none)."""
    size = re.search(r"(?:equal to|dimension size is) (\d+)", str(error))
    return size.group(1) if size else "?"
