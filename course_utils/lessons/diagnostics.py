"""By what factor does a distributed train step's update differ from the single-device update?

A custom training loop that is right on one device can be wrong on several: a ``tf.reduce_mean``
loss makes every update N times too large on N replicas, an unscaled regularization loss counts
the penalty N times, and nothing raises. :func:`update_factor` measures it. It runs the same
train step once on a single device and once on N replicas, from the same starting weights and
on the same global batch, and compares the two weight updates::

    def train_step(model, optimizer, x, y):      # runs on each replica
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.reduce_mean(per_example)   # the bug
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    result = update_factor(train_step, make_model, (x, y), replicas=2)
    print(result)          # 2.00x

Taught in notebook 05 (loss-scaling pitfalls); the exercise checks of that notebook use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import CourseError
from ..runtime import import_tensorflow as _tf

#: A train step: ``step(model, optimizer, x, y) -> loss``, run in replica context.
Step = Callable[[Any, Any, Any, Any], Any]

#: Relative tolerances under which a factor counts as "the same update".
FACTOR_TOLERANCE = 1e-3
MISMATCH_TOLERANCE = 1e-3


@dataclass(frozen=True)
class UpdateFactor:
    """What :func:`update_factor` measured.

    ``factor`` is the scalar ``f`` that best explains the distributed update as ``f`` times the
    single-device one (a least-squares fit over all weights); ``mismatch`` is the part that is not
    a scaling, relative to the size of the reference update (0 for a pure scaling).
    ``loss`` is what the distributed step reported (the per-replica losses summed with
    ``strategy.reduce``) and ``reference_loss`` what the single-device step reported.
    """

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
        if self.mismatch > MISMATCH_TOLERANCE:
            percent = 100 * self.mismatch
            text += f", and differs in direction too ({percent:.1f}% mismatch)"
        if self.loss_factor is not None:
            text += f"; reported loss {self.loss_factor:.2f}x the single-device loss"
        return text


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def compare_updates(update: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """``(factor, mismatch)`` of ``update`` against ``reference`` (flat arrays of one size).

    ``factor`` = <update, reference> / <reference, reference>; ``mismatch`` =
    |update - factor * reference| / |reference|. An all-zero reference gives ``nan``.
    """
    u = np.asarray(update, dtype=np.float64).ravel()
    r = np.asarray(reference, dtype=np.float64).ravel()
    if u.shape != r.shape:
        raise CourseError(f"the two updates have different sizes ({u.size} and {r.size}).")
    norm2 = float(np.dot(r, r))
    if norm2 == 0.0:
        return float("nan"), float("nan")
    factor = float(np.dot(u, r) / norm2)
    mismatch = float(np.linalg.norm(u - factor * r) / np.sqrt(norm2))
    return factor, mismatch


def cpu_replicas(n: int = 2) -> Any:
    """A ``MirroredStrategy`` over the first ``n`` logical CPUs (``use_virtual_cpus(n)`` made them).

    Raises :class:`ReplicaCountError` with what to do when this runtime has fewer logical CPUs.
    """
    from ..strategies import mirrored_cpus

    return mirrored_cpus(n, needed_by="update_factor")


def _flat_weights(model: Any) -> np.ndarray:
    return np.concatenate([_numpy(v).ravel() for v in model.trainable_variables])


def _run(
    strategy: Any,
    step: Step,
    make_model: Callable[[], Any],
    make_optimizer: Callable[[], Any],
    weights: Sequence[np.ndarray],
    batch: tuple,
    steps: int,
) -> tuple[np.ndarray, np.ndarray, Optional[float]]:
    """Run ``steps`` steps of ``step`` under ``strategy``; return (start, end, last loss)."""
    tf = _tf()
    with strategy.scope():
        model = make_model()
        model.set_weights(list(weights))
        optimizer = make_optimizer()
        # Keras 3 optimizers create their slots lazily, which fails inside a distributed
        # tf.function (keras-team/keras#23085); building them here, in the scope, avoids it.
        optimizer.build(model.trainable_variables)
    start = _flat_weights(model)
    size = int(np.shape(batch[0])[0])
    dataset = tf.data.Dataset.from_tensor_slices(tuple(batch)).batch(max(size, 1))
    if strategy.num_replicas_in_sync > 1:
        dataset = strategy.experimental_distribute_dataset(dataset)

    def replica_fn(x: Any, y: Any) -> Any:
        return step(model, optimizer, x, y)

    @tf.function
    def distributed_step(x: Any, y: Any) -> Any:
        per_replica = strategy.run(replica_fn, args=(x, y))
        if per_replica is None:
            return tf.constant(float("nan"))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    element = next(iter(dataset))
    loss = None
    for _ in range(steps):
        loss = distributed_step(*element)
    end = _flat_weights(model)
    value = float(_numpy(loss)) if loss is not None and np.size(_numpy(loss)) == 1 else None
    return start, end, value


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

    * ``step(model, optimizer, x, y)``: one training step as it runs on each replica; it applies
      its gradients and returns its loss.
    * ``make_model()``: builds the model (called once per run; both runs start from the same
      weights). ``make_reference_model`` builds the single-device model instead, when it must
      differ (a float32 reference for a mixed-precision model).
    * ``batch``: ``(x, y)``, one global batch (NumPy arrays); the N replicas split it as
      ``strategy.experimental_distribute_dataset`` does.
    * ``strategy``: the N-replica strategy; default :func:`cpu_replicas` (``replicas`` virtual
      CPUs). ``make_optimizer`` defaults to ``SGD(learning_rate=0.1)``, with which the update is
      proportional to the gradient.
    * ``reference_step``: the step run on the single device; default ``step`` itself, which
      answers "does this step do on N replicas what it does on one?". Pass a known-correct step to
      also catch mistakes that are wrong on one device.

    Returns an :class:`UpdateFactor` (``str()`` gives ``"2.00x"``); ``show=True`` prints its
    summary line.
    """
    import keras

    tf = _tf()
    if steps < 1:
        raise CourseError(f"steps must be at least 1, not {steps!r}.")
    if strategy is None:
        strategy = cpu_replicas(replicas)
    if make_optimizer is None:

        def make_optimizer() -> Any:
            return keras.optimizers.SGD(learning_rate=0.1)

    reference_builder = make_reference_model or make_model
    initial = reference_builder()
    weights = [_numpy(w) for w in initial.get_weights()]
    single = tf.distribute.get_strategy()  # the default strategy: one replica, no scope needed
    ref_start, ref_end, ref_loss = _run(
        single, reference_step or step, reference_builder, make_optimizer, weights, batch, steps
    )
    start, end, loss = _run(strategy, step, make_model, make_optimizer, weights, batch, steps)
    if start.shape != ref_start.shape:
        raise CourseError("make_model and make_reference_model build models of different sizes.")
    reference_update = ref_end - ref_start
    update = end - start
    factor, mismatch = compare_updates(update, reference_update)
    result = UpdateFactor(
        replicas=int(strategy.num_replicas_in_sync),
        factor=factor,
        mismatch=mismatch,
        loss=loss,
        reference_loss=ref_loss,
        update=update,
        reference_update=reference_update,
    )
    if show:
        print(result.summary())
    return result
