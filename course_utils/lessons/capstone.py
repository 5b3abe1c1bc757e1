"""The same update on 1, 2 and 4 replicas: the capstone's check, for your own code too.

A distributed training step is right when it does on N replicas what it does on one: the same
weights after the same steps from the same start, the same reported loss, the same metric.
:func:`same_update` measures exactly that, and :func:`check_same_update` raises
:class:`~course_utils.errors.ExerciseError` with a one-line hint naming what differs::

    from course_utils.lessons.capstone import check_same_update

    check_same_update(
        make_train_step,            # (model, optimizer, metric, global_batch_size) -> train_step
        features, labels, sample_weight,   # NumPy arrays: `steps` global batches in a row
        make_model=make_model,      # () -> a new Keras model (called inside each strategy's scope)
    )

``train_step(inputs)`` is your *per-replica* step: ``inputs`` is that replica's
``(features, labels, sample_weight)`` (``(features, labels)`` when ``sample_weight`` is
``None``); it returns that replica's loss. The check runs it with ``strategy.run`` and adds the
replicas' losses (``ReduceOp.SUM``), so the *reported loss* is the global loss only when each
replica returns its share. With ``distributed=True`` the factory is
``(strategy, model, optimizer, metric, global_batch_size)`` and its step takes the distributed
batch and returns the reported loss itself (your own ``strategy.run`` and ``reduce``).

Each run starts from the same weights (``make_model()`` built once, copied into every run) and
sees the same global batches: 1 replica is the default strategy, N > 1 a ``MirroredStrategy``
over N virtual CPUs (call ``course_utils.use_virtual_cpus(4)`` before TensorFlow starts). The
optimizer is created and built (``optimizer.build``, keras-team/keras#23085) in each scope;
use SGD, the default, because Adam divides each gradient by its own size and hides a factor.

When the weights differ, the hint comes from measurements, not guesses: the runs are repeated
with every sample weight set to 0 (only the penalty moves the weights) and with the sample
weights divided by 100 (gradients too small for any clipping), so the penalty's part, the data
loss's part and the clipping are compared one by one. One probe on one replica sets half the
sample weights to 0: when nothing changes, the step ignores them. Pass ``reference=`` (your
single-device step, same factory form) to compare with it instead of with your port on one
replica. Taught in notebook 10 (capstone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import ConfigError, ExerciseError, describe_raised
from ..runtime import import_tensorflow as _tf

__all__ = ["Run", "Comparison", "SameUpdate", "same_update", "check_same_update", "checking_strategy"]

#: ``make_train_step(model, optimizer, metric, global_batch_size) -> train_step(inputs)``.
TrainStepFactory = Callable[..., Callable[[Any], Any]]

DEFAULT_REPLICAS = (1, 2, 4)
#: Relative differences below these are float rounding (an all-reduce adds in another order).
WEIGHT_RTOL = 1e-4
LOSS_RTOL = 1e-5
METRIC_ATOL = 1e-6
#: The probes: sample weights times 0 (the penalty alone) and divided by 100 (small gradients).
SMALL = 1e-2
PROBE_RTOL = 2e-3


# --------------------------------------------------------------------------- strategies


def checking_strategy(replicas: int) -> Any:
    """The default strategy for 1, else the course's ``MirroredStrategy`` over ``/cpu:0`` ...
    (no line printed; one per replica count and process, with collective keys of its own, so its
    all-reduces cannot collide with other strategies in this process)."""
    from ..strategies import default_strategy, mirrored_cpus

    if replicas == 1:
        return default_strategy()
    return mirrored_cpus(replicas, needed_by="The same-update check (1, 2 and 4 replicas)")


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class Run:
    """One run of a step: the loss it reported at each step, the weights' change, the metric."""

    replicas: int
    losses: tuple[float, ...] = ()
    update: np.ndarray = field(default_factory=lambda: np.zeros(0))
    first_update: np.ndarray = field(default_factory=lambda: np.zeros(0))
    metric: Optional[float] = None
    error: str = ""


def _flat(variables: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in variables])


@dataclass(frozen=True)
class _Setup:
    make_model: Callable[[], Any]
    make_optimizer: Callable[[], Any]
    make_metric: Optional[Callable[[], Any]]
    start: list[np.ndarray]
    features: np.ndarray
    labels: np.ndarray
    global_batch_size: int
    steps: int


def _run(
    setup: _Setup,
    factory: TrainStepFactory,
    distributed: bool,
    replicas: int,
    sample_weight: Optional[np.ndarray],
    steps: Optional[int] = None,
) -> Run:
    tf = _tf()
    steps = steps or setup.steps
    strategy = checking_strategy(replicas)
    try:
        with strategy.scope():
            model = setup.make_model()
            model.set_weights(setup.start)
            optimizer = setup.make_optimizer()
            optimizer.build(model.trainable_variables)  # in scope, before the first step
            metric = setup.make_metric() if setup.make_metric else None
        g = setup.global_batch_size
        n = steps * g
        columns = [setup.features[:n], setup.labels[:n]]
        if sample_weight is not None:
            columns.append(np.asarray(sample_weight[:n], np.float32))
        dataset = tf.data.Dataset.from_tensor_slices(tuple(columns)).batch(g)
        batches = strategy.experimental_distribute_dataset(dataset)
        if distributed:
            step = factory(strategy, model, optimizer, metric, g)
        else:
            train_step = factory(model, optimizer, metric, g)

            @tf.function
            def step(inputs: Any) -> Any:
                per_replica = strategy.run(train_step, args=(inputs,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        before = _flat(model.trainable_variables)
        losses, first = [], None
        for batch in batches:
            losses.append(float(step(batch)))
            if first is None:
                first = _flat(model.trainable_variables) - before
        after = _flat(model.trainable_variables)
        value = None if metric is None else float(metric.result())
    except ExerciseError:
        raise
    except NotImplementedError:
        raise
    except Exception as error:  # the student's step failed: a finding, not a crash
        return Run(replicas, error=describe_raised(error))
    return Run(replicas, tuple(losses), after - before, first, value)


# --------------------------------------------------------------------------- comparing


def factor(actual: np.ndarray, expected: np.ndarray) -> float:
    """``f`` that best explains ``actual`` as ``f x expected`` (least squares); nan if 0."""
    e = np.asarray(expected, np.float64).ravel()
    d = float(np.dot(e, e))
    return float(np.dot(np.asarray(actual, np.float64).ravel(), e) / d) if d > 0 else float("nan")


def mismatch(actual: np.ndarray, expected: np.ndarray) -> float:
    """``|actual - expected| / |expected|``: 0 for the same update."""
    e = np.asarray(expected, np.float64)
    d = float(np.linalg.norm(e))
    a = np.asarray(actual, np.float64)
    if a.shape != e.shape:
        return float("inf")
    return float(np.linalg.norm(a - e) / d) if d > 0 else float(np.linalg.norm(a))


@dataclass(frozen=True)
class Comparison:
    """One replica count against the baseline (one device)."""

    replicas: int
    weight_factor: float
    weight_mismatch: float
    loss: float
    baseline_loss: float
    metric: Optional[float]
    baseline_metric: Optional[float]
    error: str = ""

    @property
    def weights_same(self) -> bool:
        return not self.error and self.weight_mismatch <= WEIGHT_RTOL

    @property
    def loss_same(self) -> bool:
        return not self.error and _close(self.loss, self.baseline_loss, LOSS_RTOL)

    @property
    def metric_same(self) -> bool:
        if self.error:
            return False
        if self.metric is None or self.baseline_metric is None:
            return self.metric is None and self.baseline_metric is None
        return abs(self.metric - self.baseline_metric) <= METRIC_ATOL

    @property
    def same(self) -> bool:
        return self.weights_same and self.loss_same and self.metric_same


def _close(a: float, b: float, rtol: float) -> bool:
    return bool(np.isclose(a, b, rtol=rtol, atol=rtol * 1e-3))


def _compare(run: Run, base: Run) -> Comparison:
    if run.error:
        nan = float("nan")
        return Comparison(run.replicas, nan, nan, nan, base.losses[-1], None, base.metric, run.error)
    return Comparison(
        replicas=run.replicas,
        weight_factor=factor(run.update, base.update),
        weight_mismatch=mismatch(run.update, base.update),
        loss=run.losses[-1],
        baseline_loss=base.losses[-1],
        metric=run.metric,
        baseline_metric=base.metric,
    )


@dataclass
class SameUpdate:
    """What :func:`same_update` measured: each run, each comparison, and the diagnosis."""

    baseline: Run
    runs: dict[int, Run]
    comparisons: dict[int, Comparison]
    problems: list[str]
    compared_with: str = "your step on 1 replica"

    @property
    def ok(self) -> bool:
        """True when every replica count gave the baseline's update, loss and metric."""
        return not self.problems

    @property
    def hint(self) -> str:
        """The diagnosis in one line ("" when everything matches)."""
        return "; also ".join(self.problems)

    def table(self) -> str:
        """One line per replica count: weight factor and mismatch, last loss, metric."""
        lines = [
            f"compared with {self.compared_with}:",
            "replicas  weights (factor, mismatch)  loss      metric",
        ]
        for n, c in sorted(self.comparisons.items()):
            if c.error:
                lines.append(f"{n:>8}  raised {c.error}")
                continue
            metric = "-" if c.metric is None else f"{c.metric:.4f}"
            flag = "same" if c.same else "DIFFERS"
            off = "   < 1e-4" if c.weights_same else f"{c.weight_mismatch:9.2e}"
            lines.append(f"{n:>8}  {c.weight_factor:6.3f}x  {off}      {c.loss:.5f}  {metric}  {flag}")
        base_metric = "-" if self.baseline.metric is None else f"{self.baseline.metric:.4f}"
        lines.append(f"baseline  {'1.000x':>7}  {'0':>9}      {self.baseline.losses[-1]:.5f}  {base_metric}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# --------------------------------------------------------------------------- diagnosing


def _near(value: float, target: float, rel: float = 0.02) -> bool:
    return bool(np.isfinite(value) and abs(value - target) <= rel * max(abs(target), 1.0))


def _weights_diagnosis(
    setup: _Setup,
    port: tuple[TrainStepFactory, bool],
    base: tuple[TrainStepFactory, bool],
    n: int,
    comparison: Comparison,
    sample_weight: Optional[np.ndarray],
    weights_ignored: bool,
) -> str:
    on = f"on {n} replica{'s' if n != 1 else ''}"
    head = (
        f"{on} the weights moved {comparison.weight_factor:.2f}x as far as on one device "
        f"(mismatch {comparison.weight_mismatch:.1%})"
    )
    if sample_weight is None or weights_ignored:
        if _near(comparison.weight_factor, n, 0.005) and n > 1:
            return (
                f"{head}: every gradient is {n}x, so the loss is a per-replica mean (or the "
                "gradients are summed twice); each replica's loss must be its share of the "
                "global batch's loss"
            )
        return head
    zero, small = sample_weight * 0.0, sample_weight * SMALL
    p_n = _run(setup, *port, n, zero, steps=1)
    p_1 = _run(setup, *base, 1, zero, steps=1)
    s_n = _run(setup, *port, n, small, steps=1)
    s_1 = _run(setup, *base, 1, small, steps=1)
    if any(r.error for r in (p_n, p_1, s_n, s_1)):
        return head
    pen_f, pen_m = factor(p_n.update, p_1.update), mismatch(p_n.update, p_1.update)
    data_n, data_1 = s_n.update - p_n.update, s_1.update - p_1.update
    dat_f, dat_m = factor(data_n, data_1), mismatch(data_n, data_1)
    if not (np.isfinite(pen_m) and np.isfinite(dat_m)):
        if n == 1:
            return (
                f"{head}: your step differs from your reference on one device already; "
                "compare the two losses term by term"
            )
        return head
    pen_ok, dat_ok = pen_m <= PROBE_RTOL, dat_m <= PROBE_RTOL
    if pen_ok and dat_ok:
        return (
            f"{head}, yet the penalty's and the data loss's parts match when the gradients "
            "are small: something that depends on the gradient's size differs, most likely "
            "clipping. Optimizer clipnorm/global_clipnorm and tf.clip_by_global_norm in the "
            "replica step clip each replica's local gradient before the all-reduce; clip by "
            "the norm of the all-reduced gradient instead"
        )
    if not pen_ok and not dat_ok and _near(pen_f, n) and _near(dat_f, n) and n > 1:
        return (
            f"{head}: the penalty's part and the data loss's part are both {n}x, so the "
            "gradients are summed twice (all-reduced by hand, then again by apply_gradients) "
            "or every replica adds the whole loss; each replica's loss must be its share"
        )
    reasons = []
    if not pen_ok:
        if _near(pen_f, 0.0, 0.05):
            reasons.append(
                "the penalty is missing (its part of the update is 0.00x): add the "
                "model's regularization losses, sum(model.losses)"
            )
        elif _near(pen_f, n) and n > 1:
            reasons.append(
                f"the penalty is added on every replica (its part of the update is "
                f"{pen_f:.2f}x): scale it with tf.nn.scale_regularization_loss"
            )
        else:
            reasons.append(f"the penalty's part of the update is {pen_f:.2f}x (mismatch {pen_m:.1%})")
    if not dat_ok:
        if _near(dat_f, n) and n > 1:
            reasons.append(
                f"the data loss's part is {dat_f:.2f}x: each replica averages over its "
                "own examples; divide by the global batch with "
                "tf.nn.compute_average_loss(..., global_batch_size=...)"
            )
        else:
            reasons.append(
                f"the data loss's part is {dat_f:.2f}x (mismatch {dat_m:.1%}): each "
                "replica normalizes its loss by something of its own (its batch size "
                "or its sum of sample weights?) instead of the global batch"
            )
    return f"{head}: " + "; ".join(reasons)


def _diagnose(
    setup: _Setup,
    port: tuple[TrainStepFactory, bool],
    base: tuple[TrainStepFactory, bool],
    baseline: Run,
    runs: dict[int, Run],
    comparisons: dict[int, Comparison],
    sample_weight: Optional[np.ndarray],
) -> list[str]:
    if baseline.error:
        return [f"on one device the step raised {baseline.error}"]
    problems: list[str] = []
    ignored = False
    one = runs.get(1)
    if sample_weight is not None and one is not None and not one.error:
        half = np.array(sample_weight, np.float32, copy=True)
        half[::2] = 0.0
        probe = _run(setup, *port, 1, half, steps=1)
        if not probe.error and (
            mismatch(probe.first_update, one.first_update) <= 1e-6
            and _close(probe.losses[0], one.losses[0], 1e-7)
        ):
            ignored = True
            problems.append(
                "sample weights ignored: on one replica, setting half of them to 0 "
                "changes neither the update nor the loss; pass sample_weight= to the "
                "per-example loss before averaging over the global batch"
            )
    for n, c in sorted(comparisons.items()):
        if c.same or ignored:
            continue
        on = f"on {n} replica{'s' if n != 1 else ''}"
        if c.error:
            why = f"{on} the step raised {c.error}"
            if "PerReplica" in c.error:
                why += (
                    " (it ran on one): a per-replica value from strategy.run was used outside "
                    "it, such as a metric updated outside the replicas; update metrics inside "
                    "the replica step"
                )
            problems.append(why)
        elif not c.weights_same:
            problems.append(_weights_diagnosis(setup, port, base, n, c, sample_weight, ignored))
        elif not c.loss_same:
            ratio = c.loss / c.baseline_loss if c.baseline_loss else float("nan")
            if _near(ratio, n) and n > 1:
                problems.append(
                    f"{on} the reported loss is {ratio:.2f}x the one-device loss but the weights "
                    "match: the loss you return is not each replica's share (a per-replica mean, "
                    "or the global loss on every replica), so the SUM over replicas is too big"
                )
            else:
                problems.append(
                    f"{on} the reported loss is {c.loss:.6g}, not {c.baseline_loss:.6g}, but the "
                    "weights match: the loss you return is not the loss you differentiate (does it "
                    "leave out the sample weights or the penalty, or scale them otherwise?)"
                )
        else:
            problems.append(
                f"{on} the metric is {c.metric}, not {c.baseline_metric}, although the weights and "
                "the loss match: it does not count every replica's examples and sample weights "
                "the way one device does; update it inside the replica step (strategy.run) with "
                "that replica's labels, predictions and sample weights"
            )
        break  # the smallest replica count that differs: fix it, then check again
    return problems


# --------------------------------------------------------------------------- the public check


def same_update(
    make_train_step: TrainStepFactory,
    features: Any,
    labels: Any,
    sample_weight: Any = None,
    *,
    make_model: Callable[[], Any],
    make_optimizer: Optional[Callable[[], Any]] = None,
    make_metric: Optional[Callable[[], Any]] = None,
    global_batch_size: Optional[int] = None,
    steps: int = 2,
    replicas: Sequence[int] = DEFAULT_REPLICAS,
    distributed: bool = False,
    reference: Optional[TrainStepFactory] = None,
) -> SameUpdate:
    """Run ``make_train_step`` for ``steps`` steps on each replica count and compare with one device.

    ``features``, ``labels`` and ``sample_weight`` hold ``steps`` global batches in a row
    (``global_batch_size`` defaults to ``len(labels) // steps`` and must divide by every replica
    count). ``make_optimizer`` defaults to ``keras.optimizers.SGD(0.1)``; ``make_metric``
    (``None``: no metric) to nothing. ``reference``: your single-device step in the same factory
    form, run on one device as the baseline (otherwise the baseline is your step on 1 replica).
    Returns a :class:`SameUpdate`; it never raises for a wrong step (see ``.hint``).
    """
    import keras

    features = np.asarray(features)
    labels = np.asarray(labels)
    weights = None if sample_weight is None else np.asarray(sample_weight, np.float32)
    counts = sorted({int(n) for n in replicas})
    if not counts or counts[0] < 1:
        raise ConfigError(f"replicas must be whole numbers >= 1, not {list(replicas)!r}.")
    g = global_batch_size or len(labels) // max(steps, 1)
    if steps < 1 or g < 1 or g * steps > len(labels) or any(g % n for n in counts):
        raise ConfigError(
            f"same_update needs steps x global batch <= {len(labels)} examples and a global batch "
            f"that every replica count {counts} divides; got {steps} steps of {g}."
        )
    start_model = make_model()
    setup = _Setup(
        make_model=make_model,
        make_optimizer=make_optimizer or (lambda: keras.optimizers.SGD(0.1)),
        make_metric=make_metric,
        start=[np.array(w) for w in start_model.get_weights()],
        features=features,
        labels=labels,
        global_batch_size=g,
        steps=steps,
    )
    port = (make_train_step, distributed)
    base = (reference, False) if reference is not None else port
    runs = {n: _run(setup, *port, n, weights) for n in counts}
    if reference is not None:
        baseline = _run(setup, *base, 1, weights)
        compared = dict(runs)
        described = "your reference step on one device"
    else:
        baseline = runs.get(1) or _run(setup, *port, 1, weights)
        compared = {n: r for n, r in runs.items() if n != 1}
        described = "your step on 1 replica"
    if baseline.error:
        comparisons: dict[int, Comparison] = {}
    else:
        comparisons = {n: _compare(r, baseline) for n, r in compared.items()}
    problems = _diagnose(setup, port, base, baseline, runs, comparisons, weights)
    return SameUpdate(baseline, runs, comparisons, problems, described)


def check_same_update(*args: Any, **kwargs: Any) -> SameUpdate:
    """:func:`same_update`, then raise :class:`ExerciseError` with its one-line hint when any
    replica count differs from one device. Prints one line when everything matches."""
    result = same_update(*args, **kwargs)
    if not result.ok:
        raise ExerciseError(f"Not the same update: {result.hint}.")
    counts = ", ".join(str(n) for n in sorted(result.runs))
    print(f"[same update] weights, loss and metric match on {counts} replicas ({result.compared_with}).")
    return result
