"""Notebooks 04, 05 and 10 (and their checks): a training step on N replicas against one device.

:func:`run` runs a step from given weights on a strategy (:func:`checking_strategy`: one device, or
the course's ``MirroredStrategy`` over N virtual CPUs); :func:`factor` and :func:`mismatch` say how
two updates differ; :func:`same_update` and :func:`check_same_update` are the capstone's check for
any step: every replica count against one device, within a tolerance taken from the step's own float
noise, diagnosed by probes that drive each trap into view. ``docs/capstone.md`` is its manual.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .errors import ConfigError, ExerciseError, describe_raised
from .runtime import import_tensorflow as _tf
from .strategies import strategy_name

__all__ = ["Run", "SameUpdate", "checking_strategy", "run", "factor", "mismatch"]
__all__ += ["same_update", "check_same_update", "sum_replicas", "flat", "below", "percent"]

#: One seed for every model the check builds, so the same step always gets the same hint.
SEED = 0
#: The tolerance: this many times the step's own float noise (examples reordered), at least the floor.
NOISE_FACTOR, NOISE_FLOOR = 16.0, 1e-6
#: Probes multiply the data loss's gradient by 0 (the penalty alone), 2^-10 (too small to clip) and
#: 2^20 (large enough to clip), and the learning rate by 2^14 (a 1e-6 decay then moves float32 weights
#: visibly): each trap becomes an effect of order 1, judged with a fixed tolerance.
SMALL, LARGE, PROBE_LR, PROBE_RTOL = 2.0**-10, 2.0**20, 2.0**14, 1e-3
#: The batch-wide probe multiplies the data loss's gradient by 2^10 (a penalty's part becomes noise).
BOOST = 2.0**10
#: A model computing in 16 bits: the tolerance is at least this many units of its rounding (2^-11 for
#: float16, 2^-8 for bfloat16), since each replica rounds its own share before the all-reduce.
ROUNDING, UNIT = 4.0, {"float16": 2.0**-11, "bfloat16": 2.0**-8}

#: ``make_step(strategy, model, optimizer, metric) -> step``: what :func:`run` calls in each run.
Binder = Callable[[Any, Any, Any, Any], Callable[[Any], Any]]


def checking_strategy(replicas: int = 2) -> Any:
    """The default strategy for 1, else ``mirrored_cpus(replicas)`` (cached; ReplicaCountError says
    what to do when TensorFlow has fewer CPU devices): the one route of every check."""
    from .strategies import default_strategy, mirrored_cpus

    if replicas == 1:
        return default_strategy()
    return mirrored_cpus(replicas, needed_by="The check (your step on several replicas against one device)")


def flat(values: Sequence[Any]) -> np.ndarray:
    """Variables or arrays concatenated into one ``float64`` vector (empty for none)."""
    parts = [np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float64).ravel() for v in values]
    return np.concatenate(parts) if parts else np.zeros(0)


def factor(actual: Any, expected: Any) -> float:
    """``f`` that best explains ``actual`` as ``f x expected`` (least squares); nan for a zero reference."""
    a, e = np.asarray(actual, np.float64).ravel(), np.asarray(expected, np.float64).ravel()
    d = float(np.dot(e, e))
    return float(np.dot(a, e) / d) if d > 0 and a.shape == e.shape else float("nan")


def mismatch(actual: Any, expected: Any) -> float:
    """``|actual - expected| / |expected|``: 0 for the same update (inf for another shape)."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != e.shape:
        return float("inf")
    d = float(np.linalg.norm(e))
    return float(np.linalg.norm(a - e) / d) if d > 0 else (0.0 if not a.any() else float("inf"))


def below(tolerance: float) -> str:
    """How a pass line states a difference that a check found within ``tolerance``: ``"below 1e-4"``.

    Such a difference is float noise, and its digits differ between CPUs (vector units, oneDNN's
    kernels, thread counts): printed as a number, it would make a stored output hold on one machine.
    """
    exponent = math.floor(math.log10(tolerance))
    mantissa = math.ceil(round(tolerance / 10**exponent, 9))  # rounded up: still a true bound
    return f"below {mantissa}e{exponent}" if mantissa < 10 else f"below 1e{exponent + 1}"


def percent(relative: float, floor: float = 0.01) -> str:
    """A relative difference in per cent as the lessons print it: ``"36.1%"``, or ``"under 1%"``
    below ``floor``, where float noise and 16-bit rounding live and their digits differ between CPUs."""
    return f"under {100 * floor:g}%" if relative < floor else f"{100 * relative:.1f}%"


def sum_replicas(strategy: Any, per_replica: Any) -> Any:
    """``strategy.reduce(SUM, per_replica, axis=None)``; the first of a tuple; None stays None."""
    if isinstance(per_replica, (tuple, list)):
        per_replica = per_replica[0] if per_replica else None
    return (
        None
        if per_replica is None
        else strategy.reduce(_tf().distribute.ReduceOp.SUM, per_replica, axis=None)
    )


def distribute(strategy: Any, arrays: Sequence[Any], batch: Optional[int] = None) -> Any:
    """``arrays`` in global batches of ``batch`` (all of them: one) as ``strategy`` splits them."""
    tf = _tf()
    size = int(np.shape(arrays[0])[0])
    dataset = tf.data.Dataset.from_tensor_slices(tuple(arrays)).batch(max(batch or size, 1))
    return strategy.experimental_distribute_dataset(dataset)


@dataclass(frozen=True)
class Run:
    """One run: the loss reported at each step (None: returned nothing), the weights' change, metrics."""

    replicas: int
    losses: tuple[Optional[float], ...] = ()
    update: np.ndarray = field(default_factory=lambda: np.zeros(0))
    first_update: np.ndarray = field(default_factory=lambda: np.zeros(0))
    metrics: tuple[float, ...] = ()
    error: str = ""
    metric_names: tuple[str, ...] = ()
    #: Variables the step created while it ran (not in the scope, before it): made lazily.
    created: tuple[str, ...] = ()

    @property
    def loss(self) -> Optional[float]:
        """The last reported loss (None when the step returned nothing)."""
        return self.losses[-1] if self.losses else None


def _scalar(value: Any) -> Optional[float]:
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else np.nan if value is None else value)
    if array.size != 1:
        raise ExerciseError(f"The loss your step returns should be one number, not of shape {array.shape}.")
    return None if value is None else float(array.reshape(-1)[0])


def _results(metric: Any) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """Each metric's result(s) and name(s) (``name[i]`` for a metric of several values)."""
    metrics = metric if isinstance(metric, (list, tuple)) else [] if metric is None else [metric]
    values, names = [], []
    for m in metrics:
        array = np.asarray(_tf().nest.flatten(m.result()), np.float64).ravel()
        values += [float(v) for v in array]
        names += [m.name] if array.size == 1 else [f"{m.name}[{i}]" for i in range(array.size)]
    return tuple(values), tuple(names)


def _layers(model: Any) -> list[Any]:
    return list(model._flatten_layers(include_self=True))


def _adjust(model: Any, adjust: Sequence[str]) -> None:
    """For a probe: "calm" random layers (Dropout's rate, GaussianNoise's stddev set to 0), "sync"
    BatchNormalization's statistics across replicas, "freeze" it (batch statistics off), "float32"
    computation in every layer (a 16-bit policy's rounding and overflow kept out of the probes)."""
    for layer in _layers(model):
        for name in ("rate", "stddev") if "calm" in adjust and hasattr(layer, "seed_generator") else ():
            if isinstance(getattr(layer, name, None), (int, float)):
                setattr(layer, name, 0.0)
        if hasattr(layer, "synchronized"):
            layer.synchronized = layer.synchronized or "sync" in adjust
            layer.trainable = layer.trainable and "freeze" not in adjust
        if "float32" in adjust and layer.dtype_policy.compute_dtype != "float32":
            layer.dtype_policy = "float32"


def _amplify(model: Any, scale: float) -> None:
    """Multiply every gradient that flows back through the model's outputs by ``scale`` (the data
    loss's; a penalty on the weights does not flow through them); the forward pass is unchanged.
    Sub-models too (a ``train_step`` may call ``self.student`` directly), each once: not again
    when called from inside another model that already scales."""
    import keras

    tf, depth = _tf(), [0]

    @tf.custom_gradient
    def amplified(x: Any) -> Any:
        return tf.identity(x), lambda dy: dy * tf.cast(scale, dy.dtype)

    def patch(target: Any) -> None:
        call = target.call

        def outer(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            try:
                out = call(*args, **kwargs)
            finally:
                depth[0] -= 1
            return out if depth[0] else tf.nest.map_structure(amplified, out)

        target.call = outer

    for layer in _layers(model):
        if isinstance(layer, keras.Model):
            patch(layer)


def _fresh(value: Any) -> Any:
    """``value`` with each Keras metric object in it made anew from its config: a metric passed to
    ``compile`` keeps its state, and every run compiles the same ``fit`` arguments."""
    import keras

    if isinstance(value, keras.metrics.Metric):
        return type(value).from_config(value.get_config())
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    return value


def _built(model: Any, example: Any) -> Any:
    if not model.weights:  # a subclassed model gets its weights on its first call (Keras 3)
        model(np.asarray(example[:1]))
    if not model.trainable_variables:
        raise ConfigError("make_model() built a model without trainable weights: nothing to compare.")
    return model


def run(
    strategy: Any,
    make_step: Optional[Binder],
    data: Sequence[Any],
    *,
    batch: Optional[int] = None,
    make_model: Callable[[], Any],
    weights: Sequence[np.ndarray],
    make_optimizer: Optional[Callable[[], Any]] = None,
    make_metric: Optional[Callable[[], Any]] = None,
    distributed: bool = False,
    build_optimizer: bool = True,
    scale: Optional[float] = None,
    lr_scale: float = 1.0,
    seed: Optional[int] = None,
    fit: Optional[dict[str, Any]] = None,
    adjust: Sequence[str] = (),
    created: Optional[list[str]] = None,
) -> Run:
    """One step per global batch of ``batch`` examples of ``data`` (all: one) under ``strategy``;
    errors propagate. Model (from ``weights``), optimizer (``SGD(0.1)``; built in the scope,
    keras-team/keras#23085) and metric are made in the scope; ``make_step(...)`` is run by
    ``strategy.run`` and summed in a ``tf.function`` (``distributed=True``: it takes the distributed
    batch); with ``fit`` (``compile`` arguments) ``model.fit`` runs instead, one epoch unshuffled.
    ``scale``/``lr_scale`` multiply the data loss's gradients / the learning rate, ``adjust`` calms
    random layers and more (:func:`_adjust`): probes. Variables made while steps run go to ``created``."""
    import keras

    tf = _tf()
    if seed is not None:
        keras.utils.set_random_seed(seed)
    made = [] if created is None else created

    def record(next_creator: Any, **kwargs: Any) -> Any:
        variable = next_creator(**kwargs)
        name = str(kwargs.get("name") or variable.name)
        if "replica_" not in name and name not in made:  # a mirrored variable's copies: named once
            made.append(name)
        return variable

    # One device (the default strategy) runs on the CPU, like the checks' replicas: on a machine with a
    # GPU its ops would go there, and a GPU's float32 kernels round differently from the CPU's.
    on_cpu = strategy_name(strategy) == "default strategy" and tf.config.list_physical_devices("GPU")
    with tf.device("/cpu:0") if on_cpu else contextlib.nullcontext():
        with strategy.scope():
            model = _built(make_model(), data[0])
            model.set_weights(list(weights))
            _adjust(model, adjust)
            optimizer = make_optimizer() if make_optimizer else keras.optimizers.SGD(0.1)
            if build_optimizer:
                optimizer.build(model.trainable_variables)
            metric = make_metric() if make_metric else None
            if fit is not None:
                model.compile(optimizer=optimizer, **_fresh(fit))
        if lr_scale != 1.0:
            optimizer.learning_rate.assign(optimizer.learning_rate.numpy() * lr_scale)
        if scale is not None:
            _amplify(model, scale)
        before = flat(model.trainable_variables)
        losses: list[Optional[float]] = []
        first: list[np.ndarray] = []
        # model.fit's logs at the epoch's end: its logs after a batch average the replicas' own results
        # of each metric (a weighted accuracy on 2 replicas read 0.128 where one device's is 0.118)
        last: dict[str, Any] = {}

        def stepped(loss: Any) -> None:
            losses.append(_scalar(loss))
            first.append(flat(model.trainable_variables) - before)

        def on_batch(batch: int, logs: Optional[dict[str, Any]] = None) -> None:
            stepped((logs or {})["loss"])

        with tf.variable_creator_scope(record):
            if fit is not None:
                x, y, *w = data
                model.fit(
                    x,
                    y,
                    sample_weight=w[0] if w else None,
                    batch_size=batch or len(y),
                    epochs=1,
                    shuffle=False,
                    verbose=0,
                    callbacks=[
                        keras.callbacks.LambdaCallback(
                            on_train_batch_end=on_batch,
                            on_epoch_end=lambda _, logs=None: last.update(logs or {}),
                        )
                    ],
                )
            elif make_step is not None:
                step = make_step(strategy, model, optimizer, metric)
                if not distributed:
                    replica_step = step

                    @tf.function
                    def step(inputs: Any) -> Any:
                        return sum_replicas(strategy, strategy.run(replica_step, args=(inputs,)))

                for inputs in distribute(strategy, data, batch):
                    stepped(step(inputs))
        update = flat(model.trainable_variables) - before
    names = [k for k in last if k != "loss"]
    metrics, metric_names = (tuple(float(last[k]) for k in names), tuple(names)) if fit else _results(metric)
    return Run(
        int(strategy.num_replicas_in_sync),
        tuple(losses),
        update,
        first[0] if first else update,
        metrics,
        metric_names=metric_names,
        created=tuple(made),
    )


# --------------------------------------------------------------------------- the same-update check

#: Every diagnosis, one line each (``docs/capstone.md`` tables the common ones); ``{on}`` is "on N replicas".
HINTS = {
    "raised_one": "on one device the step raised {error}; make it run on one device first",
    "no_training": "the step does not train: on one device the weights did not move (does it apply the gradients of its loss?)",
    "weights_ignored": "sample weights ignored: on one replica, setting half of them to 0 changes nothing; pass sample_weight= to the per-example loss before averaging over the global batch",
    "raised": "{on} the step raised {error}",
    "lazy": "{on} the step raised {error}; it made variables while it ran ({names}): inside strategy.run a variable made on the first call must be mirrored; make every layer and the optimizer's slots in strategy.scope() before the step (call the layer once, optimizer.build(...))",
    "random": "the step is random: on one device, the same step from the same weights with another seed moved the weights differently (mismatch {m:.1e}), so no replica count can be compared with it; seed its random ops or turn them off for the check",
    "batchnorm": "{on} BatchNormalization normalizes each replica's examples by their own mean and variance, not the global batch's: with synchronized=True the update matches one device; build it with BatchNormalization(synchronized=True) (or freeze it)",
    "coupled": "{on} each replica's loss sees only its own examples, while on one device every example meets the whole batch (in-batch negatives, a contrastive or batch-wide term): the update matches the replicas' own batches trained apart; gather what the loss needs from every replica (ctx.all_gather(embeddings, axis=0)) before computing it",
    "per_replica": " (it ran on one): a per-replica value from strategy.run was used outside it, such as a metric updated outside the replicas; update metrics inside the replica step",
    "summed_twice": "{on} the penalty's and the data loss's parts of the update are both {f:.2f}x: the gradients are summed twice (all-reduced by hand, then by apply_gradients) or every replica adds the whole loss; each replica's loss must be its share",
    "extra_penalty": "{on} your step adds a penalty that the one-device step does not have",
    "no_penalty": "{on} the penalty is missing (its part of the update is 0.00x): add the model's regularization losses, sum(model.losses)",
    "penalty_every_replica": "{on} the penalty is added on every replica (its part of the update is {f:.2f}x, measured with the data loss's gradient set to 0): scale it with tf.nn.scale_regularization_loss",
    "penalty": "{on} the penalty's part of the update is {f:.2f}x one device's (mismatch {m:.1e})",
    "local_mean": "{on} the data loss's part of the update is {f:.2f}x: each replica averages over its own examples, not over the global batch",
    "local_normalizer": "{on} the data loss's part of the update is {f:.2f}x (mismatch {m:.1e}): each replica normalizes its loss by something of its own (its sum of sample weights?), not the global batch's",
    "clipped_copies": "{on} with gradients large enough to clip, the update is {f:.2f}x one device's, parallel: every replica passes the same clipped, all-reduced gradient and apply_gradients adds the {n} copies",
    "not_clipped": "{on} the gradients are not clipped as on one device: with gradients large enough to clip, the update is {f:.1e}x one device's",
    "clipped": "{on} the gradients are clipped where one device does not clip: with gradients large enough to clip, the update is {f:.1e}x one device's",
    "clip_per_replica": "{on} with gradients large enough to clip, the update is {f:.2f}x one device's (mismatch {m:.1e}) while the penalty's and the data loss's parts match: {where}; clip once, after the all-reduce",
    "optimizer_clips": "your optimizer's {clipping} clips each replica's gradient inside apply_gradients, before the all-reduce (remove it)",
    "step_clips": "each replica clips its own gradient before the all-reduce (tf.clip_by_global_norm in the replica step?)",
    "weights": "{on} the weights moved {f:.2f}x as far as on one device at the first step (mismatch {m:.1e})",
    "weights_n": "{on} the weights moved {f:.2f}x as far as on one device at the first step: every gradient is {n}x; each replica's loss must be its share",
    "loss_n": "{on} the weights match but the reported loss is {f:.2f}x one device's (its MEAN reading matches): each replica returns a whole loss (a per-replica mean, or the global loss), not its share, so their SUM is too big",
    "loss_1_n": "{on} the weights match but the reported loss is {f:.2f}x (1/{n}) one device's: the replicas' shares were averaged (ReduceOp.MEAN), though each is already a share of the global batch's loss",
    "fit_loss_1_n": "{on} the weights match but the loss fit reports is {f:.2f}x (1/{n}) one device's: your train_step feeds the loss metric what compute_loss returns, which Keras divides by the replica count; feed it loss * self.distribute_strategy.num_replicas_in_sync",
    "loss": "{on} the weights match but the reported loss is {got:.6g}, not {want:.6g}: the loss you return is not the loss you differentiate (does it leave out the sample weights or the penalty?)",
    "metric_share": "{on} the metric {name} reads {got:.6g}, not {want:.6g} ({f:.2f}x), although the weights and the loss match: it is fed each replica's share of the loss (already divided by the global batch); feed it per-example values",
    "metric": "{on} the metric {name} reads {got:.6g}, not {want:.6g}, although the weights and the loss match: it does not count every replica's examples and sample weights as one device does; update it inside the replica step with that replica's labels, predictions and sample weights",
    "metric_missing": "{on} the metrics are {got}, not {want}: a metric missing or added on some replica count",
}


def _binder(factory: Callable[..., Any], distributed: bool, g: int) -> Binder:
    """Any factory form: ``(model, optimizer, metric, g)``, with a ``strategy`` parameter (first or
    by name), or ``distributed=True``: ``(strategy, model, optimizer, metric, g)``."""
    try:
        names = list(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        names = []

    def bind(strategy: Any, model: Any, optimizer: Any, metric: Any) -> Callable[[Any], Any]:
        if distributed or names[:1] == ["strategy"]:
            return factory(strategy, model, optimizer, metric, g)
        extra = {"strategy": strategy} if "strategy" in names else {}
        return factory(model, optimizer, metric, g, **extra)

    return bind


def _rel(a: Optional[float], b: Optional[float]) -> float:
    return 0.0 if a is None or b is None else abs(a - b) / max(abs(b), 1e-3)


def _near(value: float, target: float, rel: float = 0.02) -> bool:
    return bool(np.isfinite(value) and abs(value - target) <= rel * max(abs(target), 1e-3))


@dataclass(frozen=True)
class Comparison:
    """One replica count against the baseline, judged within the check's tolerance."""

    replicas: int
    run: Run
    weight_factor: float
    weight_mismatch: float
    weights_same: bool
    loss_same: bool
    metric_same: bool

    @property
    def same(self) -> bool:
        return self.weights_same and self.loss_same and self.metric_same


def _compare(n: int, run: Run, base: Run, tol: float) -> Comparison:
    m, ok = mismatch(run.update, base.update), not run.error
    pairs = list(zip(run.metrics, base.metrics))
    metrics = ok and len(run.metrics) == len(base.metrics) and all(_rel(a, b) <= tol for a, b in pairs)
    loss = ok and _rel(run.loss, base.loss) <= tol
    return Comparison(n, run, factor(run.update, base.update), m, ok and m <= tol, loss, metrics)


def _row(name: str, run: Run, weights: str, verdict: str = "") -> str:
    if run.error:
        return f"{name:>8}  {verdict + '  ' if verdict else ''}raised {run.error}"
    loss = "-" if run.loss is None else f"{run.loss:.5f}"
    return (
        f"{name:>8}  {verdict:<7}  {weights}  {loss:>9}  {' '.join(f'{m:.4f}' for m in run.metrics) or '-'}"
    )


@dataclass
class SameUpdate:
    """What :func:`same_update` measured: each run and comparison, the tolerance, the diagnosis."""

    baseline: Run
    runs: dict[int, Run]
    comparisons: dict[int, Comparison]
    problems: list[str]
    compared_with: str = "your step on 1 replica"
    tolerance: float = NOISE_FLOOR
    noise: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:  # every replica count gave the baseline's update, loss and metrics
        return not self.problems

    @property
    def hint(self) -> str:  # the diagnosis in one line ("" when everything matches)
        return "; also ".join(self.problems)

    def table(self) -> str:
        """One line per replica count: its verdict (the weights, loss and metrics together), the
        weights' factor and mismatch ("ok" within the tolerance, so that float noise does not change the
        table), the last step's loss, the metrics."""
        lines = [
            f"compared with {self.compared_with} (the same: within {NOISE_FACTOR:g} x the step's own "
            f"float noise, at least {NOISE_FLOOR:.0e}):",
            f"{'replicas':>8}  {'verdict':<7}  {'factor':>7}  {'mismatch':>9}  {'last loss':>9}  metrics",
        ]
        for n, c in sorted(self.comparisons.items()):
            off = "ok" if c.weights_same else f"{c.weight_mismatch:.1e}"
            lines.append(
                _row(
                    str(n),
                    c.run,
                    f"{c.weight_factor:6.3f}x  {off:>9}",
                    "same" if c.same else "DIFFERS",
                )
            )
        lines.append(_row("baseline", self.baseline, f"{'1.000x':>7}  {'-':>9}"))
        return "\n".join(lines + [f"note: {note}" for note in self.notes])

    def __str__(self) -> str:
        return self.table()


@dataclass
class _Check:
    """What every run of one check shares; runs are cached by (step, replicas, probe, tag)."""

    steps: dict[str, tuple[Optional[Binder], bool, Optional[dict]]]  # "port"/"base": (step, distributed, fit)
    options: dict[str, Any]
    data: list[np.ndarray]
    cache: dict[tuple, Run] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the check could not look at, said, not judged
    calm: tuple[str, ...] = ()  # ("calm",) when the model has random layers: every run calms them
    batchnorm: bool = False  # the model has a BatchNormalization layer that is not synchronized
    runner: Optional[Callable[..., Run]] = None  # "port"'s attempt_run elsewhere (a grader's kernel)

    def run(
        self, which: str, n: int, scale: Optional[float] = None, data: Any = None, tag: str = "", **extra: Any
    ) -> Run:
        if which == "base" and self.steps["base"] is self.steps["port"]:
            which = "port"  # no reference: the baseline is the step itself on one replica
        key = (which, n, scale, tag)
        if key not in self.cache:
            make_step, distributed, fit = self.steps[which]
            probe: dict[str, Any] = {} if scale is None else {"scale": scale, "lr_scale": PROBE_LR}
            adjust = self.calm + (("float32", "freeze") if probe else ()) + tuple(extra.pop("adjust", ()))
            data = data or ([c[: self.options["batch"]] for c in self.data] if probe else self.data)
            options = {**self.options, "adjust": adjust, **probe, **extra}
            attempt = self.runner if which == "port" and self.runner else attempt_run
            self.cache[key] = attempt(n, make_step, data, distributed=distributed, fit=fit, **options)
        return self.cache[key]


def attempt_run(n: int, make_step: Optional[Binder], data: Sequence[Any], **options: Any) -> Run:
    """:func:`run` on ``checking_strategy(n)``; a step that raises gives a Run with its error."""
    created: list[str] = []
    try:
        return run(checking_strategy(n), make_step, data, created=created, **options)
    except (ExerciseError, ConfigError):
        raise
    except Exception as error:  # the step failed: a finding, not a crash ...
        placeholder = not str(error) or str(error).startswith("Exercise")
        if isinstance(error, NotImplementedError) and placeholder:
            raise  # ... but an unfinished exercise's placeholder: its check says so
        return Run(n, error=describe_raised(error), created=tuple(created))


def _on(n: int) -> str:
    return f"on {n} replica{'s' * (n != 1)}"


def _probe(check: _Check, n: int, clipping: str) -> str:
    """Drive each trap into view on ``n`` replicas: the diagnosis, or "" when every probe matches."""
    runs = {(w, s): check.run(w, m, s) for w, m in (("port", n), ("base", 1)) for s in (0, SMALL, LARGE)}
    failed = next((r.error for r in runs.values() if r.error), "")
    if failed:  # e.g. a LearningRateSchedule, which a probe cannot scale: said in a note, not judged
        check.notes.append(
            f"the probes could not run on {n} replicas ({failed}); they scale the learning rate, so the "
            "penalty and clipping traps were looked for only in the runs themselves"
        )
        return ""
    got = {key: r.first_update for key, r in runs.items()}
    pen_n, pen_1 = got["port", 0], got["base", 0]
    dat_n, dat_1 = (got["port", SMALL] - pen_n) / SMALL, (got["base", SMALL] - pen_1) / SMALL
    pen: dict[str, Any] = dict(on=_on(n), n=n, f=factor(pen_n, pen_1), m=mismatch(pen_n, pen_1))
    dat: dict[str, Any] = dict(on=_on(n), n=n, f=factor(dat_n, dat_1), m=mismatch(dat_n, dat_1))
    big_n, big_1 = got["port", LARGE], got["base", LARGE]
    big: dict[str, Any] = dict(on=_on(n), f=factor(big_n, big_1), m=mismatch(big_n, big_1))
    pen_n_x, dat_n_x = n > 1 and _near(pen["f"], n), n > 1 and _near(dat["f"], n)
    if pen["m"] > PROBE_RTOL and dat["m"] > PROBE_RTOL and pen_n_x and dat_n_x:
        return HINTS["summed_twice"].format(**pen)
    if pen["m"] > PROBE_RTOL:
        key = "no_penalty" if _near(pen["f"], 0, 0.05) else "penalty_every_replica" if pen_n_x else "penalty"
        return HINTS[key if pen_1.any() else "extra_penalty"].format(**pen)
    if dat["m"] > PROBE_RTOL:
        return HINTS["local_mean" if dat_n_x else "local_normalizer"].format(**dat)
    if big["m"] <= PROBE_RTOL:
        return ""
    if not 0.1 < big["f"] < 10:
        return HINTS["not_clipped" if big["f"] >= 10 else "clipped"].format(**big)
    if n > 1 and _near(big["f"], n) and mismatch(big_n, big["f"] * big_1) <= PROBE_RTOL:  # N x, parallel
        return HINTS["clipped_copies"].format(n=n, **big)
    where = HINTS["optimizer_clips"].format(clipping=clipping) if clipping else HINTS["step_clips"]
    return HINTS["clip_per_replica"].format(where=where, **big)


def _batch_wide(check: _Check, n: int, base: Run, tol: float) -> str:
    """What couples a replica's examples: BatchNormalization's statistics (the step on ``n`` replicas
    with it synchronized matches one device), or a loss over the whole batch (one SGD step on ``n``
    replicas is the sum of the replicas' own batches trained apart, and one device's update is no
    mix of those)."""
    if check.batchnorm:
        synced = check.run("port", n, tag="sync", adjust=("sync",))
        if not synced.error and _compare(n, synced, base, tol).weights_same:
            return HINTS["batchnorm"].format(on=_on(n))
    sgd: dict[str, Any] = dict(scale=BOOST, make_optimizer=None)  # a penalty 2^-10 as large as before
    g, parts = check.options["batch"], []
    first = [c[:g] for c in check.data]
    for k in range(n):  # one device on each replica's examples alone, from the same weights
        share = [c[k * g // n : (k + 1) * g // n] for c in first]
        parts.append(check.run("base", 1, data=share, tag=f"part {k}/{n}", batch=g // n, **sgd))
    whole = check.run("base", 1, data=first, tag="whole", **sgd)
    port = check.run("port", n, data=first, tag="whole", **sgd)
    if any(r.error for r in parts + [whole, port]):
        return ""
    # one device's update is no mix of the parts' (a normalizer of its own only rescales each part) ...
    stacked = np.stack([r.first_update for r in parts], axis=1)
    mixed = stacked @ np.linalg.lstsq(stacked, whole.first_update, rcond=None)[0]
    apart = stacked.sum(axis=1)  # ... while the replicas' update is the parts' sum
    alone = factor(port.first_update, apart) * apart
    coupled = (
        mismatch(mixed, whole.first_update) > PROBE_RTOL and mismatch(port.first_update, alone) <= PROBE_RTOL
    )
    return HINTS["coupled"].format(on=_on(n)) if coupled else ""


def _loss_or_metric(n: int, c: Comparison, base: Run, tol: float, fit: bool) -> str:
    if not c.loss_same:
        f = c.run.loss / base.loss if c.run.loss is not None and base.loss else float("nan")
        key = "loss_n" if n > 1 and _near(f, n) else "loss_1_n" if n > 1 and _near(f, 1 / n) else "loss"
        key = "fit_loss_1_n" if fit and key == "loss_1_n" else key
        return HINTS[key].format(on=_on(n), n=n, f=f, got=c.run.loss, want=base.loss)
    if len(c.run.metrics) != len(base.metrics):
        listed = [", ".join(r.metric_names) or "none" for r in (c.run, base)]
        return HINTS["metric_missing"].format(on=_on(n), got=listed[0], want=listed[1])
    names = base.metric_names or tuple(f"#{i + 1}" for i in range(len(base.metrics)))
    for name, value, expected in zip(names, c.run.metrics, base.metrics):
        if _rel(value, expected) > tol:  # each metric judged and named on its own
            f = value / expected if expected else float("nan")
            key = "metric_share" if n > 1 and _near(f, 1 / n) else "metric"
            return HINTS[key].format(on=_on(n), name=name, got=value, want=expected, f=f)
    return ""


def _diagnose(check: _Check, result: SameUpdate, probe: int, clipping: str, weighted: bool) -> str:
    """The weights on every replica count first (errors, probes, the first step's factor), then the
    reported loss, then the metrics: one finding, on the smallest replica count that shows it."""
    base, comparisons = result.baseline, sorted(result.comparisons.items())
    if base.error:
        return HINTS["raised_one"].format(error=base.error)
    if not base.update.any():
        return HINTS["no_training"]
    one = result.runs.get(1)
    if weighted and one is not None and not one.error:
        x, y, w = (c[: check.options["batch"]] for c in check.data)
        half_zero = np.where(np.arange(len(w)) % 2, w, 0).astype(np.float32)
        half = check.run("port", 1, data=[x, y, half_zero], tag="half")
        if not half.error and mismatch(half.update, one.first_update) <= NOISE_FLOOR:
            return HINTS["weights_ignored"]
    for n, c in comparisons:
        if c.run.error:
            if c.run.created:
                names = ", ".join(c.run.created[:3]) + ", ..." * (len(c.run.created) > 3)
                return HINTS["lazy"].format(on=_on(n), error=c.run.error, names=names)
            return HINTS["raised"].format(on=_on(n), error=c.run.error) + HINTS["per_replica"] * (
                "PerReplica" in c.run.error
            )
    reseeded = check.run("base", 1, tag="seed", seed=SEED + 1)
    if not reseeded.error and mismatch(reseeded.update, base.update) > NOISE_FLOOR:
        return HINTS["random"].format(m=mismatch(reseeded.update, base.update))
    differ = [n for n, c in comparisons if not c.weights_same and n > 1]
    found = _batch_wide(check, differ[0], base, result.tolerance) if differ else ""  # the fewest replicas
    if found:
        return found
    for n in sorted({probe} | {n for n, c in comparisons if not c.weights_same}):
        found = _probe(check, n, clipping)
        if found:
            return found
    for n, c in comparisons:
        if not c.weights_same:
            f = factor(c.run.first_update, base.first_update)
            key = "weights_n" if n > 1 and _near(f, n, 0.005) else "weights"
            return HINTS[key].format(on=_on(n), n=n, f=f, m=c.weight_mismatch)
    fit = check.steps["port"][2] is not None
    return next(
        (_loss_or_metric(n, c, base, result.tolerance, fit) for n, c in comparisons if not c.same), ""
    )


def _clipping(make_optimizer: Optional[Callable[[], Any]]) -> str:
    """``"global_clipnorm=1.0"`` when the optimizer clips (a hint names it), else ""."""
    optimizer = make_optimizer() if make_optimizer else None
    found = [(k, getattr(optimizer, k, None)) for k in ("clipnorm", "global_clipnorm", "clipvalue")]
    return ", ".join(f"{k}={v}" for k, v in found if v)


def same_update(
    make_train_step: Optional[Callable[..., Any]],
    features: Any,
    labels: Any,
    sample_weight: Any = None,
    *,
    make_model: Callable[[], Any],
    make_optimizer: Optional[Callable[[], Any]] = None,
    make_metric: Optional[Callable[[], Any]] = None,
    global_batch_size: Optional[int] = None,
    steps: int = 2,
    replicas: Sequence[int] = (1, 2, 4),
    distributed: bool = False,
    reference: Optional[Callable[..., Any]] = None,
    fit: Optional[dict[str, Any]] = None,
    runner: Optional[Callable[..., Run]] = None,
) -> SameUpdate:
    """Run ``make_train_step`` for ``steps`` steps on each replica count and compare with one device;
    with ``make_train_step=None`` and ``fit`` (``model.compile``'s arguments but the optimizer),
    what ``model.fit`` does. ``runner`` runs the step's runs in place of :func:`attempt_run`.

    ``docs/capstone.md`` gives the contract. Returns a :class:`SameUpdate`; it never raises for a
    wrong step (see ``.hint``), only for a call it cannot run (:class:`ConfigError`)."""
    import keras

    counts = sorted({int(n) for n in replicas})
    g = global_batch_size or len(labels) // max(steps, 1)
    if not counts or min(counts + [steps, g]) < 1 or g * steps > len(labels) or any(g % n for n in counts):
        raise ConfigError(
            f"same_update needs replica counts >= 1, steps x global batch <= {len(labels)} examples and a "
            f"global batch that every replica count {counts} divides; got {steps} steps of {g}."
        )
    if (make_train_step is None) == (fit is None):
        raise ConfigError("same_update takes a step factory, or make_train_step=None and fit=dict(loss=...).")
    weights = [] if sample_weight is None else [np.asarray(sample_weight, np.float32)]
    data = [np.asarray(c)[: g * steps] for c in [features, labels, *weights]]
    keras.utils.set_random_seed(SEED)
    model = _built(make_model(), data[0])
    start = [np.array(w) for w in model.get_weights()]
    random = [layer.name for layer in _layers(model) if hasattr(layer, "seed_generator")]
    low = sorted({layer.compute_dtype for layer in _layers(model)} & set(UNIT))
    options = dict(batch=g, make_model=make_model, weights=start, make_optimizer=make_optimizer, seed=SEED)
    port = (_binder(make_train_step, distributed, g) if make_train_step else None, distributed, fit)
    base = (_binder(reference, False, g), False, None) if reference else port
    check = _Check({"port": port, "base": base}, dict(options, make_metric=make_metric), data, runner=runner)
    check.batchnorm = any(getattr(layer, "synchronized", True) is False for layer in _layers(model))
    if random:
        check.calm = ("calm",)
        check.notes.append(
            f"random layers ({', '.join(random[:3])}) ran with rate 0 in every run: each replica draws "
            "its own examples' masks, which cannot equal one device's, so the rest of the step was compared"
        )
    runs = {n: check.run("port", n) for n in counts}
    baseline = check.run("base", 1)
    order = np.concatenate([i * g + np.random.default_rng(SEED).permutation(g) for i in range(steps)])
    shuffled = check.run("base", 1, data=[c[order] for c in data], tag="noise")
    pairs = zip(shuffled.losses + shuffled.metrics, baseline.losses + baseline.metrics)
    noise = max([mismatch(shuffled.update, baseline.update)] + [_rel(a, b) for a, b in pairs])
    rounding = max([ROUNDING * UNIT[d] for d in low], default=0.0)
    tolerance = max(
        NOISE_FACTOR * (0.0 if baseline.error or shuffled.error else noise), NOISE_FLOOR, rounding
    )
    if rounding:
        check.notes.append(
            f"the model computes in {', '.join(low)}: the tolerance is at least {ROUNDING:g} units of its rounding"
        )
    compared = {n: r for n, r in runs.items() if reference or n != 1}
    comparisons = (
        {} if baseline.error else {n: _compare(n, r, baseline, tolerance) for n, r in compared.items()}
    )
    described = "your reference step on one device" if reference else "your step on 1 replica"
    result = SameUpdate(baseline, runs, comparisons, [], described, tolerance, noise)
    probe = ([n for n in counts if n > 1] or [1])[0]
    hint = _diagnose(check, result, probe, _clipping(make_optimizer), sample_weight is not None)
    result.problems = [hint] if hint else []
    result.notes = check.notes
    return result


def check_same_update(*args: Any, **kwargs: Any) -> SameUpdate:
    """:func:`same_update`, then raise :class:`ExerciseError` with its one-line hint when any
    replica count differs from one device. Prints one line when everything matches."""
    result = same_update(*args, **kwargs)
    if not result.ok:
        raise ExerciseError(f"Not the same update: {result.hint}.")
    counts = ", ".join(str(n) for n in sorted(result.runs))
    notes = "".join(f" Note: {note}." for note in result.notes)
    print(
        f"[same update] weights, loss and metric match on {counts} replicas ({result.compared_with}).{notes}"
    )
    return result
