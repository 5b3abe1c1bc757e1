"""Notebook 00: devices, virtual CPU replicas, and TensorFlow started quietly.

A laptop has one CPU, but TensorFlow can split it into several *logical* devices. A
``MirroredStrategy`` over them runs real replicas with real all-reduces, which is how this
course shows distribution without an accelerator. TensorFlow fixes the split when it first
initialises its devices, so :func:`use_virtual_cpus` must run before anything touches a device;
the set-up cell does it (``course_utils.setup(cpus=N)``). A runtime with one GPU (Colab's T4 or
L4) is split the same way, into logical GPUs (:func:`use_virtual_gpus`), so that the lessons
still have two replicas there.

This is the lowest layer that touches TensorFlow: :mod:`~course_utils.strategies` builds on it,
:mod:`~course_utils.hardware` decides on both, :mod:`~course_utils.runtime` sets up on all three.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Iterator

from .errors import ConfigError, NoTPUError, ReplicaCountError, describe_error


@contextlib.contextmanager
def quiet_native_logs() -> Iterator[None]:
    """Hide what native code writes to stderr (file descriptor 2) while the block runs.

    TensorFlow's C++ start-up lines are written there before its logging can be configured, and
    some ops print a note on some machines only (the first float16 op on a CPU without AVX-512):
    hidden, a notebook's output is the same everywhere.
    """
    try:
        saved = os.dup(2)
    except OSError:  # no real stderr (some embedded runtimes): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            sys.stderr.flush()
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow() -> Any:
    """Import TensorFlow without its start-up chatter and return the module."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    with quiet_native_logs():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the first device query prints CUDA probing lines
    tf.get_logger().setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    tf.autograph.set_verbosity(0)
    return tf


_tf = import_tensorflow


def physical_devices(device_type: str) -> list:
    """The physical devices of one type (``"CPU"``, ``"GPU"`` or ``"TPU"``); never initialises them."""
    return list(_tf().config.list_physical_devices(device_type))


def cpu_count() -> int:
    """How many logical CPU devices TensorFlow has, or will have when it starts (never starts it)."""
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    config = tf.config.get_logical_device_configuration(cpu)
    return len(config) if config else 1


def gpu_count() -> int:
    """How many logical GPUs TensorFlow has, or will have when it starts (never starts it)."""
    tf = _tf()
    return sum(len(tf.config.get_logical_device_configuration(g) or [g]) for g in physical_devices("GPU"))


#: Memory (MB) the logical GPUs of a split GPU share (equal parts, at least 1024): within a T4's 15 GB
#: and an L4's 22 GB. TensorFlow requires a limit per logical GPU (eager/context.py).
GPU_SPLIT_MB = 8192


def _split(kind: str, n: int, configs: list) -> list[str]:
    """Give the first physical device of ``kind`` the logical ``configs`` (``n`` of them), once."""
    tf = _tf()
    device = tf.config.list_physical_devices(kind)[0]
    current = tf.config.get_logical_device_configuration(device)
    names = [f"/device:{kind}:{i}" for i in range(n)]
    if (len(current) if current else 1) == n and (current or n == 1):
        return names
    try:
        tf.config.set_logical_device_configuration(device, configs)
    except RuntimeError:
        have = len(tf.config.list_logical_devices(kind))
        if have == n:
            return names
        raise ReplicaCountError(
            f"TensorFlow already started with {have} {kind} device{'s' if have != 1 else ''}; "
            f"it cannot be split into {n} now. Restart the kernel (Colab: Runtime > Restart "
            f"session), then set COURSE_REPLICAS={n} or call use_virtual_{kind.lower()}s({n}) before "
            "anything else uses TensorFlow."
        ) from None
    return names


def use_virtual_cpus(n: int) -> list[str]:
    """Split the CPU into ``n`` logical devices and return their names.

    Calling it again with the same ``n`` is a no-op. Once TensorFlow has initialised its devices
    (after the first op, or after a strategy was created), a different ``n`` raises
    :class:`ReplicaCountError` telling how many devices exist: restart the kernel to change it.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"use_virtual_cpus needs a whole number >= 1, not {n!r}.")
    return _split("CPU", n, [_tf().config.LogicalDeviceConfiguration() for _ in range(n)])


def use_virtual_gpus(n: int) -> list[str]:
    """Split this machine's one GPU into ``n`` logical GPUs of ``GPU_SPLIT_MB / n`` MB (at least 1024)
    and return their names: :func:`use_virtual_cpus` for a GPU (untested on a real one). Why, and
    which all-reduce a ``MirroredStrategy`` gets there: :func:`course_utils.hardware.plan_hardware`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"use_virtual_gpus needs a whole number >= 1, not {n!r}.")
    if (gpus := len(physical_devices("GPU"))) != 1:
        raise ConfigError(f"use_virtual_gpus splits one GPU; this machine has {gpus}.")
    memory = max(1024, GPU_SPLIT_MB // n)
    return _split("GPU", n, [_tf().config.LogicalDeviceConfiguration(memory_limit=memory)] * n)


def find_local_tpu(tpu: str = "local") -> Any:
    """Resolve, connect to and initialise the TPU attached to this machine; return the resolver.

    Raises :class:`NoTPUError` (saying what failed) when there is none. Without a TPU it fails
    in well under a second: ``TPUClusterResolver(tpu="local")`` and the connection succeed (they
    only describe the local machine) and ``initialize_tpu_system`` raises ``NotFoundError``.
    """
    tf = _tf()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as error:  # ValueError, NotFoundError, RuntimeError... depending on the setup
        raise NoTPUError(f"no TPU: {describe_error(error)}") from None
    return resolver


def cores() -> int:
    """How many CPU cores this process may use (its CPU affinity where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def in_colab() -> bool:
    """True inside Google Colab."""
    from importlib.util import find_spec  # "google" first: without it, find_spec("google.colab") raises

    return "COLAB_RELEASE_TAG" in os.environ or bool(find_spec("google") and find_spec("google.colab"))


def in_ci() -> bool:
    """True when a CI service runs the notebooks (``CI`` is set)."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}
