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
import sys
from typing import Optional

import numpy as np

from ..config import Settings
from ..devices import in_ci, in_colab
from ..errors import ConfigError

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
