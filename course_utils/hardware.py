"""Every notebook (the chain is taught in notebook 06): which strategy this machine gets.

:func:`get_strategy` is how every notebook gets its strategy, so the same notebook runs on a laptop
CPU, virtual CPU replicas, GPUs and a TPU. :func:`choose` is the one place the course decides:
``COURSE_STRATEGY`` names a kind, or ``auto`` (the default) runs the chain TPU -> several GPUs ->
one GPU -> CPU; :mod:`course_utils.strategies` builds the choice and puts it into words.
:func:`detect_strategy` runs the chain, builds its choice and prints what it tried ("Tried: TPU no
(NotFoundError ...); GPU none; CPU 2 logical", then "Chose: ..."); :func:`plan_hardware` decides
without building. Every step that touches the machine can be replaced, so that tests and notebook
06 exercise every branch with fakes: ``find_tpu()`` (a connected ``TPUClusterResolver``, default
:func:`find_local_tpu`, the way on today's TPU VMs), ``list_devices(device_type)`` (default
``tf.config.list_physical_devices``) and ``build(plan)`` (default
:func:`course_utils.strategies.build_strategy` of the plan's :class:`Choice`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .config import parse_kind, parse_replicas, settings
from .devices import find_local_tpu as find_local_tpu  # notebook 06 finds it here
from .devices import physical_devices
from .errors import NoTPUError
from .errors import describe_error as describe_error  # notebook 06 imports it from here
from .strategies import STRATEGIES, Choice, build_strategy, in_words

#: What the chain can choose, in the order it tries.
KINDS: tuple[str, ...] = ("tpu", "multi_gpu", "one_gpu", "cpu")

FindTPU = Callable[[], Any]
ListDevices = Callable[[str], Sequence[Any]]


#: Signs that this machine is a TPU VM (Colab's TPU runtimes included): device files and variables.
TPU_HINT_PATHS = ("/dev/accel0", "/dev/vfio/0")
TPU_HINT_VARIABLES = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "COLAB_TPU_ADDR")


def tpu_hint() -> bool:
    """A cheap look for signs of a TPU (its device files, its variables), before paying ~0.6 s to
    connect to one."""
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

    def choice(self) -> Choice:
        """The strategy this plan gets: ``tpu`` -> ``TPUStrategy``, ``multi_gpu``, ``one_gpu`` split
        into logical GPUs and ``cpu`` over several virtual CPUs -> ``MirroredStrategy``, ``one_gpu``
        whole -> ``OneDeviceStrategy``, one CPU -> the default strategy."""
        if self.kind == "tpu":
            return Choice("tpu", (), self.resolver, auto=True)
        if self.kind == "one_gpu" and len(self.devices) > 1:
            return Choice("mirrored", self.devices, auto=True, split_gpu=True)
        if self.kind == "one_gpu" or (self.kind == "cpu" and len(self.devices) == 1):
            return Choice("one_device" if self.kind == "one_gpu" else "default", self.devices, auto=True)
        if self.kind in {"multi_gpu", "cpu"}:
            return Choice("mirrored", self.devices, auto=True)
        raise ValueError(f"unknown hardware kind {self.kind!r} (one of {', '.join(KINDS)})")

    def strategy_description(self) -> str:
        """The strategy this plan gets, in words (without building it)."""
        return in_words(self.choice())


def plan_hardware(
    *,
    find_tpu: Optional[FindTPU] = None,
    list_devices: Optional[ListDevices] = None,
    cpu_replicas: Optional[int] = None,
) -> HardwarePlan:
    """Decide, without building a strategy: a TPU if ``find_tpu()`` works, else all GPUs
    (``multi_gpu`` when there are 2 or more, ``one_gpu`` for one), else the CPU.

    ``cpu_replicas`` (default: ``COURSE_REPLICAS``, else 2) is the replica count on one device: that
    many virtual CPUs (one: the default strategy), or logical GPUs of a single GPU (one:
    ``OneDeviceStrategy``), which :func:`course_utils.setup` makes. Why one GPU is split, untested on
    a real GPU: TensorFlow's own tf.distribute tests split one GPU into two logical GPUs of 2048 MB
    (``distribute/test_util.py``), and a ``MirroredStrategy`` over them gets TensorFlow's collective
    all-reduce with the RING implementation, TensorFlow's rule wherever GPUs are split into logical ones
    (``_make_collective_ops_with_fallbacks`` in ``mirrored_strategy.py``, TensorFlow 2.20 and 2.21).
    """
    if find_tpu is None:
        find_tpu = find_local_tpu
    if list_devices is None:
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

    n = max(1, int(cpu_replicas if cpu_replicas is not None else settings().cpu_replicas))
    gpus = list(list_devices("GPU"))
    if len(gpus) >= 2:
        attempts.append(Attempt("GPU", True, f"{len(gpus)} found"))
        names = tuple(f"/gpu:{i}" for i in range(len(gpus)))
        return HardwarePlan("multi_gpu", names, None, tuple(attempts))
    if len(gpus) == 1:
        attempts.append(Attempt("GPU", True, "1 found" + (f", split into {n} logical" if n > 1 else "")))
        return HardwarePlan("one_gpu", tuple(f"/gpu:{i}" for i in range(n)), None, tuple(attempts))
    attempts.append(Attempt("GPU", False, "none found"))
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
    plan = plan_hardware(find_tpu=find_tpu, list_devices=list_devices, cpu_replicas=cpu_replicas)
    strategy = build(plan) if build is not None else build_strategy(plan.choice())
    if verbose:
        print(f"Tried: {plan.tried()}")
        print(f"Chose: {in_words(plan.choice(), strategy)}")
    return strategy


# --------------------------------------------------------------------------- the course's choice


def _gpu_names(count: Optional[int], list_devices: ListDevices) -> tuple[str, ...]:
    gpus = list(list_devices("GPU"))
    return tuple(f"/gpu:{i}" for i in range(len(gpus)))[: count or len(gpus)]


def _no_connection() -> Any:
    """The chain's TPU step when nothing may connect yet: a sign of a TPU stands for one."""
    if not tpu_hint():
        raise NoTPUError("no sign of one on this machine")
    return None


def choose(
    kind: Optional[str] = None,
    replicas: Optional[int] = None,
    *,
    connect: bool = True,
    list_devices: Optional[ListDevices] = None,
) -> Choice:
    """Decide the strategy, building nothing: the one place the course decides which strategy it uses.

    ``kind`` and ``replicas`` default to the kept settings (``COURSE_STRATEGY``, ``COURSE_REPLICAS``).
    ``auto`` runs :func:`plan_hardware` with :func:`find_tpu_if_hinted`; any other kind runs on one
    device, on ``many`` (all GPUs, a single GPU split into ``replicas`` logical GPUs, else
    ``replicas`` virtual CPUs; 2 when unset) or on the devices it finds itself, as its row of
    :data:`course_utils.strategies.STRATEGIES` says.
    ``connect=False`` touches no TPU (a sign of one is taken for one): what the runtime report
    and the set-up cell's CPU split need.
    """
    kind = parse_kind(kind) if kind is not None else settings().strategy
    count = parse_replicas(replicas, "replicas") if replicas is not None else settings().replicas
    cpus = count or settings().cpu_replicas
    list_devices = list_devices or physical_devices
    if kind == "auto":
        find = find_tpu_if_hinted if connect else _no_connection
        return plan_hardware(find_tpu=find, list_devices=list_devices, cpu_replicas=cpus).choice()
    spread = STRATEGIES[kind].spread
    gpus = _gpu_names(count if spread == "many" else 1, list_devices)
    if spread == "one":
        return Choice(kind, gpus[:1] or ("/cpu:0",))
    if spread == "many" and len(gpus) == 1 and cpus > 1:  # one GPU: split, as plan_hardware does
        return Choice(kind, tuple(f"/gpu:{i}" for i in range(cpus)), split_gpu=True)
    if spread == "many":
        return Choice(kind, gpus or tuple(f"/cpu:{i}" for i in range(cpus)))
    return Choice(kind, cluster=bool(os.environ.get("TF_CONFIG")))


def get_strategy(kind: Optional[str] = None, replicas: Optional[int] = None, *, verbose: bool = True) -> Any:
    """Return the strategy the course should use here, and print one line saying which.

    ``kind`` and ``replicas`` default to ``COURSE_STRATEGY`` (``auto``) and ``COURSE_REPLICAS``.

    * ``auto``: the chain notebook 06 teaches (:func:`plan_hardware`): a TPU if there is one, else
      ``MirroredStrategy`` over all GPUs (a single GPU split into ``COURSE_REPLICAS`` logical GPUs,
      2 when unset; ``COURSE_REPLICAS=1``: ``OneDeviceStrategy``), else a ``MirroredStrategy`` over
      ``COURSE_REPLICAS`` virtual CPUs (2 when unset; 1 gives the default strategy on one device).
    * ``default``, ``one_device``, ``mirrored``, ``central_storage``, ``multi_worker``, ``tpu``:
      that strategy. ``mirrored`` and ``central_storage`` on a CPU use ``COURSE_REPLICAS``
      virtual CPUs (2 when unset), which the set-up cell made. ``tpu`` raises
      :class:`NoTPUError` when there is none.
    """
    choice = choose(kind, replicas)
    strategy = build_strategy(choice)
    if verbose:
        print(f"Strategy: {in_words(choice, strategy, reason=True)}")
    return strategy
