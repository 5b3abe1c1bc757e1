"""Notebook 02 (and every notebook, through ``get_strategy``): building a strategy and saying what it is.

:mod:`course_utils.hardware` decides which strategy a machine gets (a :class:`Choice`); this
module builds it (:func:`build_strategy`, the one place the course constructs a strategy) and puts
it into words (:func:`in_words`, the one sentence every report, plan and announcement prints).
:func:`describe` prints the table of a strategy that exists, the course's or your own.

Every kind of ``COURSE_STRATEGY`` is one row of :data:`STRATEGIES`: the name a student knows its strategy
by, where it runs, how it combines gradients, and its builder. Adding a kind is one row here, one
entry in :data:`course_utils.config.STRATEGY_KINDS` and one row in the README's settings table
(``tests/test_strategies.py`` names whatever is missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .devices import cpu_count, find_local_tpu, gpu_count, import_tensorflow
from .errors import ConfigError, NoTPUError, ReplicaCountError

_tf = import_tensorflow


# --------------------------------------------------------------------------- a decision


@dataclass(frozen=True)
class Choice:
    """A strategy decided on and not built yet (:func:`course_utils.hardware.choose` makes one).

    ``kind`` is a row of :data:`STRATEGIES`; ``devices`` are its compute devices (``/cpu:0``,
    ``/gpu:1``...), empty where the strategy finds its own (a TPU's cores, a cluster's workers);
    ``resolver`` is a connected TPU's (when the chain found one); ``auto`` says the chain of
    ``COURSE_STRATEGY=auto`` chose it; ``cluster`` says ``TF_CONFIG`` names a cluster
    (``multi_worker``); ``split_gpu`` says its GPUs are logical GPUs of this machine's one GPU.
    """

    kind: str
    devices: tuple[str, ...] = ()
    resolver: Any = None
    auto: bool = False
    cluster: bool = False
    split_gpu: bool = False

    @property
    def cpus(self) -> int:
        """How many virtual CPUs building it needs (0 when it runs on other devices)."""
        return sum(1 for d in self.devices if d.lower().startswith("/cpu:"))

    @property
    def gpus(self) -> int:
        """How many GPUs (logical ones, when ``split_gpu``) it runs on."""
        return sum(1 for d in self.devices if d.lower().startswith("/gpu:"))


# --------------------------------------------------------------------------- the builders


def _names(kind: str, n: int, needed_by: str) -> list[str]:
    """``/cpu:0`` ... ``/cpu:{n-1}`` (or ``/gpu:``), or :class:`ReplicaCountError` when TensorFlow has fewer."""
    have = cpu_count() if kind == "cpu" else gpu_count()
    if have < n:  # a GPU: COURSE_REPLICAS, as use_virtual_gpus refuses a machine with several GPUs
        how = f"course_utils.use_virtual_cpus({n})" if kind == "cpu" else f"COURSE_REPLICAS={n},"
        raise ReplicaCountError(
            f"{needed_by} needs {n} replicas, but TensorFlow has {have} {kind.upper()} device"
            f"{'s' if have != 1 else ''}. Restart the kernel and run the notebook from the top: its set-up "
            f"cell splits the {kind.upper()} (course_utils.setup(cpus={n}), or {how} before anything else "
            "uses TensorFlow)."
        )
    return [f"/{kind}:{i}" for i in range(n)]


def mirrored_cpus(n: int, needed_by: str = "This", *, all_reduce: str = "tensorflow") -> Any:
    """A ``MirroredStrategy`` over ``/cpu:0`` ... ``/cpu:{n-1}``, printing nothing.

    The only place the course builds a ``MirroredStrategy`` over CPUs. It keeps TensorFlow's own
    cross-device ops (what ``tf.distribute.MirroredStrategy()`` gives: a collective all-reduce),
    so the course meets the bugs a student's own code meets. ``all_reduce="one_device"`` passes
    ``ReductionToOneDevice`` instead: only where a measurement says it must, namely ``Model.fit``
    with ``steps_per_execution`` > 1, which fails with TensorFlow's collective all-reduce on
    virtual CPUs (``INVALID_ARGUMENT: You must feed a value for placeholder tensor``, TF 2.21,
    Keras 3.15). The same arguments again return the same strategy (see ``_MIRRORED``).

    It splits nothing: it uses the first ``n`` of the virtual CPUs the set-up cell made, and when
    there are fewer it raises :class:`ReplicaCountError` saying what to do (``needed_by`` names the
    caller in the message).
    """
    return _mirrored(_names("cpu", n, needed_by), all_reduce)


def _mirrored(devices: list[str], all_reduce: str = "tensorflow") -> Any:
    """The one ``MirroredStrategy`` of this process over ``devices`` (made on first use)."""
    if all_reduce not in ALL_REDUCES:
        raise ConfigError(f"all_reduce must be one of {', '.join(ALL_REDUCES)}, not {all_reduce!r}.")
    key = (tuple(devices), all_reduce)
    if key not in _MIRRORED:
        tf = _tf()
        ops = tf.distribute.ReductionToOneDevice() if all_reduce == "one_device" else None
        # Keys of its own, as TensorFlow's tests do, so that a MirroredStrategy a notebook cell
        # makes itself (keys from 0) cannot collide with the course's.
        cls = tf.distribute.MirroredStrategy
        saved = cls._collective_key_base
        cls._collective_key_base = saved + 100_000 * (len(_MIRRORED) + 1)
        try:
            _MIRRORED[key] = cls(devices, cross_device_ops=ops)
        finally:
            cls._collective_key_base = saved
    return _MIRRORED[key]


#: ``tensorflow``: TensorFlow's own choice (a collective ring on CPUs and on the logical GPUs of one
#: GPU, NCCL on several GPUs); ``one_device``: ``ReductionToOneDevice``.
ALL_REDUCES = ("tensorflow", "one_device")


#: One MirroredStrategy per set of devices (CPUs or GPUs) and process. Every new MirroredStrategy
#: numbers its collective all-reduces from the same keys, so two of them can abort each other's
#: collectives ("Collective instance 100 expected type ...", "Shape mismatch in the collective
#: instance 100"), and every later collective of the process with them; re-running a cell or a
#: check therefore gets the same strategy back, with keys no other strategy uses.
_MIRRORED: dict[tuple[tuple[str, ...], str], Any] = {}


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
        resolver = find_local_tpu(tpu)
    except NoTPUError as error:
        raise NoTPUError(
            f"No TPU found. Tried TPUClusterResolver(tpu={tpu!r}): "
            f"{str(error).removeprefix('no TPU: ')}. "
            "A Colab TPU runtime has no TensorFlow: notebook 06 installs tensorflow-tpu 2.20 (untested), "
            "notebook 11 runs Keras on JAX; elsewhere COURSE_STRATEGY=auto falls back to GPUs or the CPU."
        ) from None
    return tpu_strategy(resolver)


def _build_mirrored(choice: Choice) -> Any:
    if choice.cpus:
        return mirrored_cpus(choice.cpus, needed_by="The strategy")
    return _mirrored(_names("gpu", choice.gpus, "The strategy"))  # these GPUs, logical ones on one GPU


def _build_central_storage(choice: Choice) -> Any:
    devices = _names("cpu" if choice.cpus else "gpu", len(choice.devices), "The strategy")
    return _tf().distribute.experimental.CentralStorageStrategy(
        compute_devices=devices, parameter_device="/cpu:0"
    )


def _build_tpu(choice: Choice) -> Any:
    return tpu_strategy(choice.resolver) if choice.resolver is not None else connect_tpu()


@dataclass(frozen=True)
class StrategyKind:
    """One kind of ``COURSE_STRATEGY``: its strategy's name, where it runs, how it combines
    gradients when TensorFlow's object does not say, and how to build it.

    ``spread`` is ``one`` (one device: a GPU, else the CPU), ``many`` (all GPUs, else
    ``COURSE_REPLICAS`` virtual CPUs) or ``own`` (the strategy finds its devices itself).
    ``classes`` are the names TensorFlow gives its class, when they differ from ``name``.
    """

    name: str
    spread: str
    build: Callable[[Choice], Any]
    combines: str = ""
    classes: tuple[str, ...] = ()


_ONE_REPLICA = "none (one replica: nothing to aggregate)"

#: Every strategy ``COURSE_STRATEGY`` can name (``auto`` is not one: the chain of notebook 06
#: chooses one of these).
STRATEGIES: dict[str, StrategyKind] = {
    "default": StrategyKind(
        "default strategy",
        "one",
        lambda c: default_strategy(),
        _ONE_REPLICA,
        ("_DefaultDistributionStrategy",),
    ),
    "one_device": StrategyKind("OneDeviceStrategy", "one", lambda c: one_device(c.devices[0]), _ONE_REPLICA),
    "mirrored": StrategyKind("MirroredStrategy", "many", _build_mirrored),
    "central_storage": StrategyKind(
        "CentralStorageStrategy",
        "many",
        _build_central_storage,
        "gradients reduced onto the parameter device",
    ),
    "multi_worker": StrategyKind(
        "MultiWorkerMirroredStrategy",
        "own",
        lambda c: _tf().distribute.MultiWorkerMirroredStrategy(),
        "CollectiveAllReduce (collective ops between workers)",
        ("CollectiveAllReduceStrategy",),
    ),
    "tpu": StrategyKind(
        "TPUStrategy", "own", _build_tpu, "TPU all-reduce over the interconnect", ("TPUStrategyV2",)
    ),
}


def build_strategy(choice: Choice) -> Any:
    """Build the strategy of a :class:`Choice`: the one place the course constructs a strategy."""
    kind = STRATEGIES.get(choice.kind)
    if kind is None:
        raise ValueError(f"unknown strategy kind {choice.kind!r} (one of {', '.join(STRATEGIES)})")
    return kind.build(choice)


# --------------------------------------------------------------------------- in words


def _kind_of(strategy: Any) -> Optional[StrategyKind]:
    name = type(strategy).__name__
    return next((k for k in STRATEGIES.values() if name == k.name or name in k.classes), None)


def strategy_name(strategy: Any) -> str:
    """The name a student knows a strategy by (``MirroredStrategy``, ``default strategy``...)."""
    kind = _kind_of(strategy)
    return kind.name if kind is not None else type(strategy).__name__


def _short_device(name: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:1`` or ``/cpu:1`` -> ``CPU:1``."""
    if "device:" in name:
        return name.split("device:")[-1]
    return name.rsplit("/", 1)[-1].upper() if name.startswith("/") else name


def _strategy_devices(strategy: Any) -> list[str]:
    try:
        worker_devices = strategy.extended.worker_devices
    except (RuntimeError, AttributeError, NotImplementedError):  # the default strategy has none
        worker_devices = None
    if worker_devices:
        return list(worker_devices)
    return ["/device:CPU:0"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _reason(choice: Choice) -> str:
    """Why this choice, when it needs saying: the chain's finding, or a missing cluster."""
    if choice.auto:
        if choice.kind == "tpu":
            return "auto: found a TPU"
        gpus = choice.gpus
        if choice.split_gpu:
            return f"auto: found 1 GPU, split into {gpus} logical GPUs; COURSE_REPLICAS=1 for one device"
        if gpus == 1:
            return "auto: found 1 GPU, and COURSE_REPLICAS=1: one device"
        if gpus:
            return f"auto: found {_plural(gpus, 'GPU')}"
        if choice.cpus > 1:
            return f"auto: no TPU or GPU, so {choice.cpus} virtual CPUs; COURSE_REPLICAS=1 for one device"
        return "auto: no TPU or GPU, and COURSE_REPLICAS=1: one device"
    if choice.kind == "multi_worker" and not choice.cluster:
        return "no TF_CONFIG: a single worker; notebook 07 starts a real cluster"
    return ""


def in_words(choice: Choice, strategy: Any = None, *, reason: bool = False) -> str:
    """The choice in one phrase: the one place the course puts a strategy into words.

    Before it is built: ``"MirroredStrategy over 2 virtual CPUs"``. Built (``strategy`` given):
    ``"MirroredStrategy with 2 replicas on CPU:0, CPU:1"``. ``reason=True`` adds why, in brackets,
    when there is something to say (``"(auto: found 4 GPUs)"``).
    """
    name = STRATEGIES[choice.kind].name if choice.kind in STRATEGIES else choice.kind
    if strategy is not None and hasattr(strategy, "num_replicas_in_sync"):
        replicas = int(strategy.num_replicas_in_sync)
        where = ", ".join(_short_device(d) for d in _strategy_devices(strategy))
        text = f"{strategy_name(strategy)} with {_plural(replicas, 'replica')} on {where}"
    else:
        cpus, gpus = choice.cpus, choice.gpus
        if choice.kind == "tpu":
            text = f"{name} over the TPU's cores"
        elif choice.kind == "multi_worker":
            text = f"{name} over the workers of TF_CONFIG" if choice.cluster else f"{name} on a single worker"
        elif choice.kind == "default":
            text = f"the {name} on {'the CPU' if cpus else choice.devices[0]}"
        elif len(choice.devices) == 1 and STRATEGIES[choice.kind].spread == "one":
            text = f"{name} on {choice.devices[0]}"
        else:
            gpu = "logical GPU" if choice.split_gpu else "GPU"
            text = f"{name} over {_plural(gpus, gpu) if gpus else _plural(cpus, 'virtual CPU')}"
        if strategy is not None:  # not a strategy: a stand-in (notebook 06 builds fakes)
            text += f": {strategy!r}"
    why = _reason(choice) if reason else ""
    return f"{text} ({why})" if why else text


# --------------------------------------------------------------------------- describing


def _cross_device_ops(strategy: Any) -> str:
    kind = _kind_of(strategy)
    ops = getattr(strategy.extended, "_cross_device_ops", None)
    if kind is not None and kind.combines == _ONE_REPLICA and strategy.num_replicas_in_sync == 1:
        return _ONE_REPLICA
    if ops is not None:
        return type(ops).__name__
    if kind is not None and kind.combines:
        return kind.combines
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


def all_reduce_ops(strategy: Any, fn: Optional[Callable[..., Any]] = None, *args: Any) -> list[str]:
    """The ops that combine the replicas' values in a step that all-reduces, read from its graph.

    Traces (never runs) a ``tf.function`` in which every replica runs ``fn(*args)`` (by default it
    sums a small vector with ``get_replica_context().all_reduce``) and lists the graph's combining ops,
    for example ``CollectiveReduceV2 (ring) on CPU:0``: what the strategy's cross-device ops put in a step.
    """
    tf = _tf()

    def replica_fn() -> Any:
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.ones([2]))

    graph = tf.function(lambda *a: strategy.run(fn or replica_fn, args=a)).get_concrete_function(*args).graph
    found = []
    for op in graph.get_operations():
        if op.type.startswith(("Collective", "Nccl")) or op.type == "AddN":
            attrs = op.node_def.attr
            hint = attrs["communication_hint"].s.decode() if "communication_hint" in attrs else ""
            found.append(f"{op.type}{f' ({hint})' if hint else ''} on {_short_device(op.device)}")
    return sorted(found)
