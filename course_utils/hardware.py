"""Which hardware is here? A fallback chain TPU -> several GPUs -> one GPU -> CPU.

:func:`detect_strategy` tries each step in turn and returns the strategy of the first that
works, after printing what it tried::

    strategy = detect_strategy()
    # Tried: TPU no (NotFoundError: TPUs not found in the cluster...); GPU none; CPU 2 logical
    # Chose: MirroredStrategy with 2 replicas on CPU:0, CPU:1

Every step that touches the machine is a function you can replace, so that tests (and notebook
06) exercise every branch with fakes, without a TPU or a GPU:

* ``find_tpu()`` returns a connected and initialised ``TPUClusterResolver`` or raises
  (default :func:`find_local_tpu`, the way on today's TPU VMs, Colab's TPU runtimes included);
* ``list_devices(device_type)`` lists physical devices (default
  ``tf.config.list_physical_devices``);
* ``build(plan)`` turns the decision into a strategy (default
  :func:`course_utils.strategies.build_strategy`).

This module decides; :mod:`course_utils.strategies` builds. :func:`plan_hardware` makes the
decision without building anything, and ``COURSE_STRATEGY=auto`` (every notebook's default) runs
this same chain. Taught in notebook 06.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .errors import NoTPUError
from .errors import describe_error as describe_error  # notebook 06 imports it from here
from .runtime import import_tensorflow as _tf

#: What the chain can choose, in the order it tries.
KINDS: tuple[str, ...] = ("tpu", "multi_gpu", "one_gpu", "cpu")

FindTPU = Callable[[], Any]
ListDevices = Callable[[str], Sequence[Any]]


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


#: Signs that this machine is a TPU VM (Colab's TPU runtimes included): device files and variables.
TPU_HINT_PATHS = ("/dev/accel0", "/dev/vfio/0")
TPU_HINT_VARIABLES = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "COLAB_TPU_ADDR")


def tpu_hint() -> bool:
    """A cheap look for signs of a TPU (its device files, its variables), before paying ~0.6 s to
    connect to one."""
    import os

    from .devices import physical_devices

    return (
        bool(physical_devices("TPU"))
        or any(os.path.exists(p) for p in TPU_HINT_PATHS)
        or any(os.environ.get(v) for v in TPU_HINT_VARIABLES)
    )


def find_tpu_if_hinted() -> Any:
    """:func:`find_local_tpu` on a machine that shows signs of a TPU; otherwise raise
    :class:`NoTPUError` at once (what ``COURSE_STRATEGY=auto`` uses as its first step)."""
    if not tpu_hint():
        raise NoTPUError("no sign of one on this machine")
    return find_local_tpu()


@dataclass(frozen=True)
class Attempt:
    """One step of the chain: what was looked for, whether it was found, and the detail."""

    step: str
    found: bool
    detail: str

    def __str__(self) -> str:
        return f"{self.step} {'yes' if self.found else 'no'} ({self.detail})"


@dataclass(frozen=True)
class HardwarePlan:
    """The chain's decision: the kind of hardware, its devices, and what was tried to get there.

    ``kind`` is one of :data:`KINDS`; ``devices`` are device names for ``multi_gpu``,
    ``one_gpu`` and ``cpu`` (several names: several virtual CPU replicas); ``resolver`` is the
    TPU resolver for ``tpu``.
    """

    kind: str
    devices: tuple[str, ...] = ()
    resolver: Any = None
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)

    def tried(self) -> str:
        """``"TPU no (...); GPU no (none found); CPU yes (2 logical)"``: every attempt, one line."""
        return "; ".join(str(a) for a in self.attempts)

    def strategy_description(self) -> str:
        """What :func:`~course_utils.strategies.build_strategy` makes of this plan, in words (without building it)."""
        if self.kind == "tpu":
            return "TPUStrategy over the TPU's cores"
        if self.kind == "multi_gpu":
            return f"MirroredStrategy over {len(self.devices)} GPUs"
        if self.kind == "one_gpu":
            return "OneDeviceStrategy on /gpu:0"
        if len(self.devices) > 1:
            return f"MirroredStrategy over {len(self.devices)} virtual CPUs"
        return "the default strategy on the CPU"


def _cpu_replicas(cpu_replicas: Optional[int]) -> int:
    if cpu_replicas is not None:
        return int(cpu_replicas)
    from .config import settings

    return settings().cpu_replicas


def plan_hardware(
    *,
    find_tpu: Optional[FindTPU] = None,
    list_devices: Optional[ListDevices] = None,
    cpu_replicas: Optional[int] = None,
) -> HardwarePlan:
    """Decide, without building a strategy: a TPU if ``find_tpu()`` works, else all GPUs
    (``multi_gpu`` when there are 2 or more, ``one_gpu`` for one), else the CPU.

    On the CPU, ``cpu_replicas`` virtual CPUs (default: ``COURSE_REPLICAS``, else 2) become that
    many replicas; one means the default strategy.
    """
    if find_tpu is None:
        find_tpu = find_local_tpu
    if list_devices is None:
        from .devices import physical_devices

        list_devices = physical_devices
    attempts: list[Attempt] = []
    try:
        resolver = find_tpu()
    except Exception as error:  # any failure means "no usable TPU": fall back, never crash
        detail = str(error) if isinstance(error, NoTPUError) else describe_error(error)
        attempts.append(Attempt("TPU", False, detail))
    else:
        attempts.append(Attempt("TPU", True, "connected and initialised"))
        return HardwarePlan("tpu", (), resolver, tuple(attempts))

    gpus = list(list_devices("GPU"))
    if len(gpus) >= 2:
        attempts.append(Attempt("GPU", True, f"{len(gpus)} found"))
        names = tuple(f"/gpu:{i}" for i in range(len(gpus)))
        return HardwarePlan("multi_gpu", names, None, tuple(attempts))
    if len(gpus) == 1:
        attempts.append(Attempt("GPU", True, "1 found"))
        return HardwarePlan("one_gpu", ("/gpu:0",), None, tuple(attempts))
    attempts.append(Attempt("GPU", False, "none found"))

    n = _cpu_replicas(cpu_replicas)
    if n < 1:
        n = 1
    attempts.append(Attempt("CPU", True, f"{n} logical"))
    return HardwarePlan("cpu", tuple(f"/cpu:{i}" for i in range(n)), None, tuple(attempts))


def detect_strategy(
    *,
    find_tpu: Optional[FindTPU] = None,
    list_devices: Optional[ListDevices] = None,
    build: Optional[Callable[[HardwarePlan], Any]] = None,
    cpu_replicas: Optional[int] = None,
    verbose: bool = True,
) -> Any:
    """Run the chain TPU -> several GPUs -> one GPU -> CPU and return the first strategy that works.

    Prints two lines unless ``verbose=False``: what was tried, and what was chosen. The
    arguments replace the parts that touch the machine (see the module documentation).
    """
    if build is None:
        from .strategies import build_strategy as build
    plan = plan_hardware(find_tpu=find_tpu, list_devices=list_devices, cpu_replicas=cpu_replicas)
    strategy = build(plan)
    if verbose:
        print(f"Tried: {plan.tried()}")
        print(f"Chose: {describe_choice(plan, strategy)}")
    return strategy


class FakeMachine:
    """A pretend machine for tests and notebook 06: pass its methods to :func:`plan_hardware`.

    ``FakeMachine(tpu=True)`` has a TPU; otherwise ``find_tpu`` raises ``tpu_error`` (default a
    :class:`NoTPUError`, as :func:`find_local_tpu` does). ``gpus`` and ``cpus`` are device counts.
    ``calls`` records what was asked, in order.
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

    def __repr__(self) -> str:
        error = "" if self.tpu or self.tpu_error is None else f", tpu_error={type(self.tpu_error).__name__}"
        return f"FakeMachine(tpu={self.tpu}, gpus={self.gpus}, cpus={self.cpus}{error})"


def describe_choice(plan: HardwarePlan, strategy: Any) -> str:
    """``"MirroredStrategy with 2 replicas on CPU:0, CPU:1"`` (or the fake's repr)."""
    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if replicas is None:
        return f"{plan.kind}: {strategy!r}"
    from .strategies import strategy_name

    where = ", ".join(d.split("/")[-1].upper().replace("/", "") for d in plan.devices)
    if plan.kind == "tpu":
        where = "the TPU's cores"
    elif not where:
        where = "CPU:0"
    return f"{strategy_name(strategy)} with {replicas} replica{'s' if replicas != 1 else ''} on {where}"
