"""Choosing and describing a ``tf.distribute`` strategy.

:func:`get_strategy` is how every notebook gets its strategy, so the same notebook runs on a
laptop CPU, on virtual CPU replicas, on GPUs and on a TPU. It honours ``COURSE_STRATEGY`` and
``COURSE_REPLICAS`` (see :mod:`course_utils.config`) and prints one line saying what it chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import hardware
from .config import STRATEGY_KINDS, parse_kind, parse_replicas, settings
from .devices import physical_devices, use_virtual_cpus
from .errors import ConfigError, NoTPUError, ReplicaCountError
from .runtime import import_tensorflow as _tf

# --------------------------------------------------------------------------- the builders
# Every strategy object the course makes is constructed in this section, once each.


def mirrored_cpus(n: int, needed_by: str = "This", *, all_reduce: str = "tensorflow") -> Any:
    """A ``MirroredStrategy`` over ``/cpu:0`` ... ``/cpu:{n-1}``, printing nothing.

    The only place the course builds a ``MirroredStrategy`` over CPUs. It keeps TensorFlow's own
    cross-device ops (what ``tf.distribute.MirroredStrategy()`` gives: a collective all-reduce),
    so the course meets the bugs a student's own code meets. ``all_reduce="one_device"`` passes
    ``ReductionToOneDevice`` instead: only where a measurement says it must, namely ``Model.fit``
    with ``steps_per_execution`` > 1, which fails with TensorFlow's collective all-reduce on
    virtual CPUs (``INVALID_ARGUMENT: You must feed a value for placeholder tensor``, TF 2.21,
    Keras 3.15). The same arguments again return the same strategy (see ``_CPU_STRATEGIES``).

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
    if all_reduce not in ALL_REDUCES:
        raise ConfigError(f"all_reduce must be one of {', '.join(ALL_REDUCES)}, not {all_reduce!r}.")
    if (n, all_reduce) not in _CPU_STRATEGIES:
        ops = tf.distribute.ReductionToOneDevice() if all_reduce == "one_device" else None
        devices = [f"/cpu:{i}" for i in range(n)]
        # Keys of its own, as TensorFlow's tests do, so that a MirroredStrategy a notebook cell
        # makes itself (keys from 0) cannot collide with the course's.
        cls = tf.distribute.MirroredStrategy
        saved = cls._collective_key_base
        cls._collective_key_base = saved + 100_000 * (len(_CPU_STRATEGIES) + 1)
        try:
            _CPU_STRATEGIES[n, all_reduce] = cls(devices, cross_device_ops=ops)
        finally:
            cls._collective_key_base = saved
    return _CPU_STRATEGIES[n, all_reduce]


#: ``tensorflow``: TensorFlow's own choice (a collective ring on CPUs); ``one_device``:
#: ``ReductionToOneDevice``.
ALL_REDUCES = ("tensorflow", "one_device")


#: One MirroredStrategy per replica count and process. Every new MirroredStrategy numbers its
#: collective all-reduces from the same keys, so two of them over the same devices can abort each
#: other's collectives ("Collective instance 100 expected type ...", "Shape mismatch in the
#: collective instance 100"), and every later collective of the process with them; re-running a
#: cell or a check therefore gets the same strategy back, with keys no other strategy uses.
_CPU_STRATEGIES: dict[tuple[int, str], Any] = {}


def mirrored_gpus(devices: Optional[list[str]] = None) -> Any:
    """A ``MirroredStrategy`` over these GPUs (all of them when ``None``)."""
    return _tf().distribute.MirroredStrategy(devices)


def one_device(device: str) -> Any:
    """A ``OneDeviceStrategy`` on ``device``."""
    return _tf().distribute.OneDeviceStrategy(device)


def default_strategy() -> Any:
    """The default strategy: one replica, no distribution."""
    return _tf().distribute.get_strategy()


def tpu_strategy(resolver: Any) -> Any:
    """A ``TPUStrategy`` for a connected, initialised resolver (the only one the course builds)."""
    return _tf().distribute.TPUStrategy(resolver)


def connect_tpu(tpu: str = "local") -> Any:
    """Connect to a TPU and return a ``TPUStrategy``; raise :class:`NoTPUError` saying what was tried.

    ``tpu="local"`` is the way on today's TPU VMs (Colab's TPU runtimes included).
    """
    try:
        resolver = hardware.find_local_tpu(tpu)
    except NoTPUError as error:
        raise NoTPUError(
            f"No TPU found. Tried TPUClusterResolver(tpu={tpu!r}): "
            f"{str(error).removeprefix('no TPU: ')}. "
            "On Colab choose Runtime > Change runtime type > TPU (and install TensorFlow there, "
            "see the README); elsewhere use COURSE_STRATEGY=auto to fall back to GPUs or the CPU."
        ) from None
    return tpu_strategy(resolver)


def build_strategy(plan: hardware.HardwarePlan) -> Any:
    """The strategy for a hardware plan: ``TPUStrategy``, ``MirroredStrategy`` (several GPUs or
    several virtual CPUs), ``OneDeviceStrategy`` (one GPU), or the default strategy (one CPU)."""
    if plan.kind == "tpu":
        return tpu_strategy(plan.resolver)
    if plan.kind == "multi_gpu":
        return mirrored_gpus(list(plan.devices))
    if plan.kind == "one_gpu":
        return one_device(plan.devices[0])
    if plan.kind == "cpu":
        if len(plan.devices) > 1:
            return mirrored_cpus(len(plan.devices), needed_by="The strategy")
        return default_strategy()
    raise ValueError(f"unknown hardware kind {plan.kind!r} (one of {', '.join(hardware.KINDS)})")


def _gpu_names(count: Optional[int]) -> list[str]:
    gpus = physical_devices("GPU")
    return [f"/gpu:{i}" for i in range(len(gpus))][: count or len(gpus)]


def _auto(count: Optional[int]) -> tuple[Any, str]:
    plan = hardware.plan_hardware(
        find_tpu=hardware.find_tpu_if_hinted, cpu_replicas=count or settings().cpu_replicas
    )
    strategy = build_strategy(plan)
    if plan.kind == "tpu":
        return strategy, "auto: found a TPU"
    if plan.kind in {"multi_gpu", "one_gpu"}:
        gpus = len(plan.devices)
        return strategy, f"auto: found {gpus} GPU{'s' if gpus != 1 else ''}"
    n = len(plan.devices)
    if n > 1:
        return strategy, f"auto: no TPU or GPU, so {n} virtual CPUs; COURSE_REPLICAS=1 for one device"
    return strategy, "auto: no TPU or GPU, and COURSE_REPLICAS=1: one device"


def _mirrored(count: Optional[int]) -> tuple[Any, str]:
    if physical_devices("GPU"):
        return mirrored_gpus(_gpu_names(count)), ""
    return mirrored_cpus(count or settings().cpu_replicas, needed_by="COURSE_STRATEGY=mirrored"), ""


def _central_storage(count: Optional[int]) -> tuple[Any, str]:
    tf = _tf()
    if physical_devices("GPU"):
        devices = _gpu_names(count)
    else:
        n = count or settings().cpu_replicas
        use_virtual_cpus(n)
        devices = [f"/cpu:{i}" for i in range(n)]
    strategy = tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=devices, parameter_device="/cpu:0"
    )
    return strategy, ""


def _multi_worker(count: Optional[int]) -> tuple[Any, str]:
    import os

    strategy = _tf().distribute.MultiWorkerMirroredStrategy()
    if not os.environ.get("TF_CONFIG"):
        return strategy, "no TF_CONFIG: a single worker; notebook 07 starts a real cluster"
    return strategy, ""


def _one_device(count: Optional[int]) -> tuple[Any, str]:
    return one_device("/gpu:0" if physical_devices("GPU") else "/cpu:0"), ""


#: ``COURSE_STRATEGY`` value -> builder(replicas or None) -> (strategy, note for the one line).
#: Adding a kind is one builder here, one entry in ``config.STRATEGY_KINDS`` and one README row.
BUILDERS: dict[str, Callable[[Optional[int]], tuple[Any, str]]] = {
    "auto": _auto,
    "default": lambda count: (default_strategy(), ""),
    "one_device": _one_device,
    "mirrored": _mirrored,
    "central_storage": _central_storage,
    "multi_worker": _multi_worker,
    "tpu": lambda count: (connect_tpu(), ""),
}


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


def get_strategy(kind: Optional[str] = None, replicas: Optional[int] = None, *, verbose: bool = True) -> Any:
    """Return the strategy the course should use here, and print one line saying which.

    ``kind`` and ``replicas`` default to ``COURSE_STRATEGY`` (``auto``) and ``COURSE_REPLICAS``.

    * ``auto``: the chain notebook 06 teaches (:func:`course_utils.hardware.plan_hardware`): a
      TPU if there is one, else ``MirroredStrategy`` over all GPUs (``OneDeviceStrategy`` on a
      single GPU), else a ``MirroredStrategy`` over ``COURSE_REPLICAS`` virtual CPUs (2 when
      unset; ``COURSE_REPLICAS=1`` gives the default strategy on one device).
    * ``default``, ``one_device``, ``mirrored``, ``central_storage``, ``multi_worker``, ``tpu``:
      that strategy. ``mirrored`` and ``central_storage`` on a CPU use ``COURSE_REPLICAS``
      virtual CPUs (2 when unset). ``tpu`` raises :class:`NoTPUError` when there is none.
    """
    kind = parse_kind(kind) if kind is not None else settings().strategy
    count = parse_replicas(replicas, "replicas") if replicas is not None else settings().replicas
    builder = BUILDERS.get(kind)
    if builder is None:  # parse_kind already refused anything else
        raise AssertionError(f"unhandled strategy kind {kind!r} (valid: {STRATEGY_KINDS})")
    strategy, note = builder(count)
    if verbose:
        _announce(strategy, note)
    return strategy


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
