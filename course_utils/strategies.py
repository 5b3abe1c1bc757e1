"""Choosing and describing a ``tf.distribute`` strategy.

:func:`get_strategy` is how every notebook gets its strategy, so the same notebook runs on a
laptop CPU, on virtual CPU replicas, on GPUs and on a TPU. It honours ``COURSE_STRATEGY`` and
``COURSE_REPLICAS`` (see :mod:`course_utils.config`) and prints one line saying what it chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .config import STRATEGY_KINDS, parse_kind, parse_replicas, settings
from .devices import physical_devices, use_virtual_cpus
from .errors import NoTPUError, ReplicaCountError

#: Replicas used by ``mirrored`` and ``central_storage`` on a CPU when ``COURSE_REPLICAS`` is unset.
DEFAULT_CPU_REPLICAS = 2


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _cpu_devices(n: int) -> list[str]:
    use_virtual_cpus(n)
    return [f"/cpu:{i}" for i in range(n)]


def _mirrored_on_cpus(devices: list[str]) -> Any:
    """A ``MirroredStrategy`` over these CPUs with ``ReductionToOneDevice`` (the course's choice)."""
    tf = _tf()
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def mirrored_cpus(n: int, needed_by: str = "This") -> Any:
    """A ``MirroredStrategy`` over ``/cpu:0`` ... ``/cpu:{n-1}`` with ``ReductionToOneDevice``
    (the course's choice on CPUs), printing nothing: what the checks, the diagnostics and the
    benchmark compare with one device.

    Before TensorFlow starts it splits the CPU into ``n`` virtual CPUs; afterwards it uses the
    first ``n`` of those TensorFlow has, and when there are fewer it raises
    :class:`ReplicaCountError` saying what to do (``needed_by`` names the caller in the message).
    """
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu) or []
    if len(configured) < n:
        try:
            use_virtual_cpus(n)
        except ReplicaCountError:
            pass  # TensorFlow has started: count what it has
    have = len(tf.config.list_logical_devices("CPU"))
    if have < n:
        raise ReplicaCountError(
            f"{needed_by} needs {n} replicas, but TensorFlow has {have} CPU device"
            f"{'s' if have != 1 else ''}. Restart the kernel and run the notebook from the top: "
            f"its first cells call course_utils.use_virtual_cpus({n}) before anything else uses "
            "TensorFlow."
        )
    return _mirrored_on_cpus([f"/cpu:{i}" for i in range(n)])


def connect_tpu(tpu: str = "local") -> Any:
    """Connect to a TPU and return a ``TPUStrategy``; raise :class:`NoTPUError` saying what was tried.

    ``tpu="local"`` is the way on today's TPU VMs (Colab's TPU runtimes included).
    """
    tf = _tf()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as error:  # TF raises ValueError, NotFoundError or RuntimeError here
        text = str(error).strip()
        first_line = text.splitlines()[0].split(". ")[0].rstrip(".") if text else ""
        raise NoTPUError(
            f"No TPU found. Tried TPUClusterResolver(tpu={tpu!r}): "
            f"{type(error).__name__}: {first_line[:120]}. "
            "On Colab choose Runtime > Change runtime type > TPU (and install TensorFlow there, "
            "see the README); elsewhere use COURSE_STRATEGY=auto to fall back to GPUs or the CPU."
        ) from None


_DISPLAY_NAMES = {
    "_DefaultDistributionStrategy": "default strategy",
    "CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
}


def strategy_name(strategy: Any) -> str:
    """The name a student knows a strategy by (``MirroredStrategy``, ``default strategy``...)."""
    name = type(strategy).__name__
    return _DISPLAY_NAMES.get(name, name)


def _announce(strategy: Any, note: str = "") -> None:
    devices = ", ".join(_short_device(d) for d in _strategy_devices(strategy))
    line = (
        f"Strategy: {strategy_name(strategy)} with {strategy.num_replicas_in_sync} "
        f"replica{'s' if strategy.num_replicas_in_sync != 1 else ''} on {devices}"
    )
    print(line + (f" ({note})" if note else ""))


def get_strategy(
    kind: Optional[str] = None, replicas: Optional[int] = None, *, verbose: bool = True
) -> Any:
    """Return the strategy the course should use here, and print one line saying which.

    ``kind`` and ``replicas`` default to ``COURSE_STRATEGY`` (``auto``) and ``COURSE_REPLICAS``.

    * ``auto``: a TPU if there is one, else ``MirroredStrategy`` over all GPUs (or
      ``OneDeviceStrategy`` on a single GPU), else on the CPU a ``MirroredStrategy`` over
      ``COURSE_REPLICAS`` virtual CPUs when that is above 1, else the default strategy.
    * ``default``, ``one_device``, ``mirrored``, ``central_storage``, ``multi_worker``, ``tpu``:
      that strategy. ``mirrored`` and ``central_storage`` on a CPU use ``COURSE_REPLICAS``
      virtual CPUs (2 when unset). ``tpu`` raises :class:`NoTPUError` when there is none.
    """
    tf = _tf()
    env = settings()
    kind = parse_kind(kind) if kind is not None else env.strategy
    count = parse_replicas(replicas, "replicas") if replicas is not None else env.replicas
    gpus = physical_devices("GPU")
    note = ""

    if kind == "auto":
        strategy, note = _auto(tf, gpus, count)
    elif kind == "default":
        strategy = tf.distribute.get_strategy()
    elif kind == "one_device":
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    elif kind == "mirrored":
        if gpus:
            names = [f"/gpu:{i}" for i in range(len(gpus))][: count or len(gpus)]
            strategy = tf.distribute.MirroredStrategy(names)
        else:
            strategy = _mirrored_on_cpus(_cpu_devices(count or DEFAULT_CPU_REPLICAS))
    elif kind == "central_storage":
        devices = (
            [f"/gpu:{i}" for i in range(len(gpus))]
            if gpus
            else _cpu_devices(count or DEFAULT_CPU_REPLICAS)
        )
        strategy = tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=devices, parameter_device="/cpu:0"
        )
    elif kind == "multi_worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "tpu":
        strategy = connect_tpu()
    else:  # parse_kind already refused anything else
        raise AssertionError(f"unhandled strategy kind {kind!r} (valid: {STRATEGY_KINDS})")
    if verbose:
        _announce(strategy, note)
    return strategy


#: Signs that this machine is a TPU VM (Colab's TPU runtimes included): device files and variables.
_TPU_HINT_PATHS = ("/dev/accel0", "/dev/vfio/0")
_TPU_HINT_VARIABLES = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "COLAB_TPU_ADDR")


def _tpu_hint() -> bool:
    """A cheap look for a TPU before ``auto`` tries to connect to one (which costs ~0.6 s)."""
    import os

    return bool(physical_devices("TPU")) or any(
        os.path.exists(p) for p in _TPU_HINT_PATHS
    ) or any(os.environ.get(v) for v in _TPU_HINT_VARIABLES)


def _auto(tf: Any, gpus: list, count: Optional[int]) -> tuple[Any, str]:
    if _tpu_hint():
        try:
            return connect_tpu(), "auto: found a TPU"
        except NoTPUError:
            pass
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy(), f"auto: found {len(gpus)} GPUs"
    if len(gpus) == 1:
        return tf.distribute.OneDeviceStrategy("/gpu:0"), "auto: found 1 GPU"
    if count and count > 1:
        strategy = _mirrored_on_cpus(_cpu_devices(count))
        return strategy, f"auto: no accelerator, {count} virtual CPUs from COURSE_REPLICAS"
    return (
        tf.distribute.get_strategy(),
        "auto: no TPU or GPU found; set COURSE_REPLICAS=2 for 2 virtual CPU replicas",
    )


# --------------------------------------------------------------------------- describing


def _short_device(name: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:1`` -> ``CPU:1``."""
    return name.split("device:")[-1] if "device:" in name else name


def _strategy_devices(strategy: Any) -> list[str]:
    try:
        worker_devices = strategy.extended.worker_devices
    except (RuntimeError, AttributeError, NotImplementedError):  # the default strategy has none
        worker_devices = None
    if worker_devices:
        return list(worker_devices)
    return ["/device:CPU:0"]


def _cross_device_ops(strategy: Any) -> str:
    if strategy.num_replicas_in_sync == 1 and type(strategy).__name__ in {
        "_DefaultDistributionStrategy",
        "OneDeviceStrategy",
    }:
        return "none (one replica: nothing to aggregate)"
    ops = getattr(strategy.extended, "_cross_device_ops", None)
    if ops is not None:
        return type(ops).__name__
    name = type(strategy).__name__
    if name == "MultiWorkerMirroredStrategy":
        return "CollectiveAllReduce (collective ops between workers)"
    if name == "CentralStorageStrategy":
        return "gradients reduced onto the parameter device"
    if name == "TPUStrategy":
        return "TPU all-reduce over the interconnect"
    return "chosen by TensorFlow at run time"


@dataclass(frozen=True)
class StrategyDescription:
    """What :func:`describe` found out about a strategy."""

    name: str
    replicas: int
    devices: tuple[str, ...]
    variable_type: str
    variable_devices: tuple[str, ...]
    cross_device_ops: str

    def table(self) -> str:
        rows = [
            ("strategy", self.name),
            ("replicas in sync", str(self.replicas)),
            ("compute devices", ", ".join(self.devices)),
            ("a variable is a", self.variable_type),
            ("variables live on", ", ".join(self.variable_devices)),
            ("cross-device ops", self.cross_device_ops),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def __str__(self) -> str:
        return self.table()


def describe(strategy: Any, *, show: bool = True) -> StrategyDescription:
    """Describe a strategy: replicas, devices, where its variables live, its cross-device ops.

    It creates one small variable in the strategy's scope to see what type of variable the
    strategy makes and where the copies live. Prints the table unless ``show=False``.
    """
    tf = _tf()
    with strategy.scope():
        probe = tf.Variable(0.0, name="describe_probe")
    inner = getattr(probe, "values", None)
    if inner is None:
        inner = getattr(probe, "_values", None)
    if inner:
        var_devices = tuple(_short_device(v.device) for v in inner)
    else:
        var_devices = (_short_device(probe.device),)
    info = StrategyDescription(
        name=strategy_name(strategy),
        replicas=int(strategy.num_replicas_in_sync),
        devices=tuple(_short_device(d) for d in _strategy_devices(strategy)),
        variable_type=type(probe).__name__,
        variable_devices=var_devices,
        cross_device_ops=_cross_device_ops(strategy),
    )
    if show:
        print(info.table())
    return info
