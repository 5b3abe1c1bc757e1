"""Devices: virtual CPU replicas, and what hardware this runtime has.

A laptop has one CPU, but TensorFlow can split it into several *logical* devices. A
``MirroredStrategy`` over them runs real replicas with real all-reduces, which is how this
course shows distribution without an accelerator. TensorFlow fixes the split when it first
initialises its devices, so :func:`use_virtual_cpus` must run before anything touches a device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ConfigError, ReplicaCountError, TensorFlowStartedError

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf


def _tf() -> "tf":
    import tensorflow as tf

    return tf


def physical_devices(device_type: str) -> list:
    """The physical devices of one type (``"CPU"``, ``"GPU"`` or ``"TPU"``); never initialises them."""
    return list(_tf().config.list_physical_devices(device_type))


def cpu_count() -> int:
    """How many logical CPU devices TensorFlow has (or will have) after virtual splitting."""
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    config = tf.config.get_logical_device_configuration(cpu)
    return len(config) if config else 1


def use_virtual_cpus(n: int) -> list[str]:
    """Split the CPU into ``n`` logical devices and return their names.

    Calling it again with the same ``n`` is a no-op. Once TensorFlow has initialised its devices
    (after the first op, or after a strategy was created), a different ``n`` raises
    :class:`ReplicaCountError` telling how many devices exist: restart the kernel to change it.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"use_virtual_cpus needs a whole number >= 1, not {n!r}.")
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    have = len(current) if current else 1
    if have == n and (current or n == 1):
        return [f"/device:CPU:{i}" for i in range(n)]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == n:
            return [f"/device:CPU:{i}" for i in range(n)]
        raise ReplicaCountError(
            f"TensorFlow already started with {have} CPU device{'s' if have != 1 else ''}; "
            f"it cannot be split into {n} now. Restart the kernel (Colab: Runtime > Restart "
            f"session), then set COURSE_REPLICAS={n} or call use_virtual_cpus({n}) before "
            "anything else uses TensorFlow."
        ) from None
    return [f"/device:CPU:{i}" for i in range(n)]


def cores() -> int:
    """How many CPU cores this process may use (its CPU affinity where the system has one)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def threads_per_replica(replicas: int, available: int | None = None) -> int:
    """The cores each of ``replicas`` replicas gets when they divide the machine between them
    (at least 1: four replicas on two cores get one thread each and take turns)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ConfigError(f"threads_per_replica needs a whole number of replicas >= 1, not {replicas!r}.")
    return max(1, (available or cores()) // replicas)


def use_op_threads(n: int) -> int:
    """Let each TensorFlow operation run on at most ``n`` threads (TensorFlow's *intra-op*
    parallelism; by default an operation may use every core). Returns ``n``.

    Virtual CPUs share the machine's cores, and by default the operations of every replica ask
    for all of them. With ``n = threads_per_replica(replicas)`` the operations of different
    replicas run next to each other, each on its share of the cores (it adds no core). Like the
    device split, it must be set before TensorFlow starts; the same ``n`` again does nothing.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"use_op_threads needs a whole number of threads >= 1, not {n!r}.")
    tf = _tf()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
    except RuntimeError:
        have = tf.config.threading.get_intra_op_parallelism_threads() or "all the cores"
        raise TensorFlowStartedError(
            f"TensorFlow already started with {have} thread(s) per operation; it cannot be "
            f"changed to {n} now. Restart the kernel, then call use_op_threads({n}) before "
            "anything else uses TensorFlow."
        ) from None
    return n


def in_colab() -> bool:
    """True inside Google Colab."""
    import importlib.util
    import os

    return "COLAB_RELEASE_TAG" in os.environ or importlib.util.find_spec("google.colab") is not None


def in_ci() -> bool:
    """True when a CI service runs the notebooks (``CI`` is set)."""
    import os

    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}
