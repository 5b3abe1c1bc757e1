"""Notebook 05 (loss-scaling pitfalls): by what factor a distributed step's update differs from one device's.

A loop right on one device can be wrong on several: a ``tf.reduce_mean`` loss makes every update N
times too large on N replicas, an unscaled penalty counts N times, and nothing raises.
:func:`update_factor` runs ``step(model, optimizer, x, y)`` once on one device and once on N
replicas (:func:`course_utils.compare.run`), from the same weights on the same global batch::

    result = update_factor(train_step, make_model, (x, y), replicas=2)
    print(result)          # 2.00x

The exercise checks of notebook 05 use it too; :func:`count_all_reduces` counts the all-reduces in a
replica's step (its BatchNorm section).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from .. import compare
from ..errors import CourseError

#: A train step: ``step(model, optimizer, x, y) -> loss``, run in replica context.
Step = Callable[[Any, Any, Any, Any], Any]

#: Relative tolerances under which a factor counts as "the same update".
FACTOR_TOLERANCE = 1e-3
MISMATCH_TOLERANCE = 1e-3
#: The summary line names a mismatch from 1% on. Below, 16-bit rounding (bfloat16: about 0.1%) and
#: float noise live, their digits differ between CPUs, and a stored line must not depend on them.
SHOWN_MISMATCH = 1e-2


@dataclass(frozen=True)
class UpdateFactor:
    """What :func:`update_factor` measured: ``factor`` best explains the distributed update as
    ``factor`` times the single-device one (least squares); ``mismatch`` is the rest, relative to
    the reference update; ``loss`` is the distributed step's reported loss (summed over replicas)."""

    replicas: int
    factor: float
    mismatch: float
    loss: Optional[float]
    reference_loss: Optional[float]
    update: np.ndarray
    reference_update: np.ndarray

    @property
    def loss_factor(self) -> Optional[float]:
        """Reported loss on N replicas divided by the single-device loss (None if unknown)."""
        if self.loss is None or self.reference_loss is None or self.reference_loss == 0:
            return None
        return self.loss / self.reference_loss

    @property
    def ok(self) -> bool:
        """True when the distributed update equals the single-device one (1.00x, no mismatch)."""
        return abs(self.factor - 1.0) <= FACTOR_TOLERANCE and self.mismatch <= MISMATCH_TOLERANCE

    def __str__(self) -> str:
        return f"{self.factor:.2f}x"

    def summary(self) -> str:
        """One line: the factor, what the step reported as its loss, and any mismatch."""
        text = f"update on {self.replicas} replicas = {self.factor:.2f}x the single-device update"
        if self.mismatch >= SHOWN_MISMATCH:
            text += f", and differs in direction too ({compare.percent(self.mismatch)} mismatch)"
        if self.loss_factor is not None:
            text += f"; reported loss {self.loss_factor:.2f}x the single-device loss"
        return text


def compare_updates(update: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """``(factor, mismatch)``: ``factor`` = <update, reference> / |reference|^2, ``mismatch`` =
    |update - factor x reference| / |reference|; ``nan`` for an all-zero reference."""
    u, r = np.asarray(update, np.float64).ravel(), np.asarray(reference, np.float64).ravel()
    if u.shape != r.shape:
        raise CourseError(f"the two updates have different sizes ({u.size} and {r.size}).")
    f = compare.factor(u, r)
    return (f, float(np.linalg.norm(u - f * r) / np.linalg.norm(r))) if np.isfinite(f) else (f, f)


def update_factor(
    step: Step,
    make_model: Callable[[], Any],
    batch: tuple,
    *,
    replicas: int = 2,
    strategy: Any = None,
    make_optimizer: Optional[Callable[[], Any]] = None,
    reference_step: Optional[Step] = None,
    make_reference_model: Optional[Callable[[], Any]] = None,
    steps: int = 1,
    show: bool = False,
) -> UpdateFactor:
    """Measure by what factor ``step``'s update on N replicas differs from the single-device one.

    ``step(model, optimizer, x, y)`` applies its gradients and returns its loss; ``make_model()``
    builds the model (``make_reference_model`` the single-device one, when it must differ);
    ``batch`` is one global batch ``(x, y)``, run ``steps`` times. ``strategy`` defaults to
    ``replicas`` virtual CPUs, ``make_optimizer`` to ``SGD(0.1)``; ``reference_step`` (default:
    ``step`` itself) runs on the single device. ``show=True`` prints the summary line.
    """
    if steps < 1:
        raise CourseError(f"steps must be at least 1, not {steps!r}.")
    strategy = strategy or compare.checking_strategy(replicas)
    reference_builder = make_reference_model or make_model
    weights = [np.asarray(w) for w in reference_builder().get_weights()]
    options: dict[str, Any] = dict(steps=steps, make_optimizer=make_optimizer)
    single = compare.checking_strategy(1)
    reference = step_update(single, reference_step or step, reference_builder, weights, batch, **options)
    run = step_update(strategy, step, make_model, weights, batch, **options)
    result = factor_of(run, reference)
    if show:
        print(result.summary())
    return result


def step_update(
    strategy: Any,
    step: Step,
    make_model: Callable[[], Any],
    weights: Sequence[np.ndarray],
    batch: tuple,
    *,
    steps: int = 1,
    make_optimizer: Optional[Callable[[], Any]] = None,
) -> dict[str, Any]:
    """``step`` run ``steps`` times on the global batch ``batch`` under ``strategy``, from ``weights``:
    plain data, ``{"update": the weights' change, "loss": the last loss summed over the replicas,
    "replicas": N}`` (what a grader's harness sends back: :func:`factor_of` compares two)."""
    data = [np.concatenate([np.asarray(column)] * steps) for column in batch]

    def per_replica(model: Any, optimizer: Any) -> Any:
        return lambda inputs: step(model, optimizer, *inputs)

    run = compare.run(
        strategy,
        lambda strategy, model, optimizer, metric: per_replica(model, optimizer),
        data,
        batch=len(batch[0]),
        make_model=make_model,
        weights=[np.asarray(w) for w in weights],
        make_optimizer=make_optimizer,
    )
    return {"update": np.asarray(run.update), "loss": run.loss, "replicas": int(run.replicas)}


def factor_of(run: Mapping[str, Any], reference: Mapping[str, Any]) -> UpdateFactor:
    """The :class:`UpdateFactor` of one :func:`step_update` against another (the single device's)."""
    update, reference_update = (
        np.asarray(run["update"], np.float64),
        np.asarray(reference["update"], np.float64),
    )
    if update.shape != reference_update.shape:
        raise CourseError(
            f"the step's model has {update.size} weights, the single device's {reference_update.size}."
        )
    factor, mismatch = compare_updates(update, reference_update)
    loss = None if run.get("loss") is None else float(run["loss"])
    reference_loss = None if reference.get("loss") is None else float(reference["loss"])
    return UpdateFactor(
        int(run["replicas"]), factor, mismatch, loss, reference_loss, update, reference_update
    )


def count_all_reduces(strategy: Any, fn: Callable[..., Any], *args: Any) -> int:
    """How many all-reduces one replica runs in ``strategy.run(fn, args)``: the ``CollectiveReduceV2``
    ops of :func:`course_utils.all_reduce_ops` (traced, never run), divided by the replicas."""
    from ..strategies import all_reduce_ops

    ops = all_reduce_ops(strategy, fn, *args)
    return sum(op.startswith("CollectiveReduceV2") for op in ops) // strategy.num_replicas_in_sync
