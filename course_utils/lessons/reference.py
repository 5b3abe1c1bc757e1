"""A single-device reference for custom training steps: the yardstick of notebook 04's checks.

A custom training step can be right on one replica and wrong on two: a ``tf.reduce_mean`` loss,
an unscaled regularization penalty or a ``MEAN`` reduction gives exactly the single-device
numbers when there is one replica, and numbers off by a factor of 2 on two. So a check runs the
student's step twice from the same weights and the same global batch: once on a 2-replica
``MirroredStrategy`` (:func:`checking_strategy`) and once as plain single-device TensorFlow
(:func:`reference_step`), and compares the losses and the weight updates.

* :func:`checking_strategy`: a ``MirroredStrategy`` over the first two virtual CPUs, whatever
  strategy the notebook itself runs under (call ``course_utils.use_virtual_cpus(2)`` early);
* :func:`check_batch`, :func:`check_model`: a fixed global batch and the course CNN with a
  penalty large enough that mistakes in its scaling show up;
* :func:`reference_step`: one SGD step written out on one device, no strategy involved;
* :func:`run_train_step`: one step of a ``make_train_step(model, optimizer, accuracy,
  global_batch_size)`` factory under any strategy; :func:`tutorial_train_step` is the right one,
  :func:`step_with_loss` makes one around any loss function;
* :func:`factor`: by how much one update or loss is a multiple of the reference;
* :func:`stable_error_line`: the error a fresh process died of, in one line that does not vary
  (it lives in :mod:`course_utils.errors`; notebook 04 calls it from here).

Taught in notebook 04 (custom training loops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import stable_error_line as stable_error_line  # notebook 04 calls it from here
from ..models import tutorial_train_step  # noqa: F401 - the right step, compared with here (notebook 04)
from ..runtime import import_tensorflow as _tf

#: Replicas of the checking strategy, examples in the check batch, and the step's settings.
CHECK_REPLICAS = 2
CHECK_BATCH = 16
#: L2 factor of the check model: large, so a penalty counted twice changes the loss visibly.
CHECK_L2 = 1e-2
#: SGD, not Adam: Adam divides each gradient by its own size, which would hide a 2x gradient.
CHECK_LEARNING_RATE = 0.1

#: ``make_train_step(model, optimizer, accuracy, global_batch_size) -> train_step(inputs)``.
TrainStepFactory = Callable[[Any, Any, Any, int], Callable[[Any], Any]]


# --------------------------------------------------------------------------- what is compared


def checking_strategy(replicas: int = CHECK_REPLICAS) -> Any:
    """A ``MirroredStrategy`` over ``/cpu:0`` ... ``/cpu:{replicas-1}`` (no line printed).

    It needs that many logical CPUs: call ``course_utils.use_virtual_cpus(2)`` (or more) before
    anything else uses TensorFlow. Otherwise :class:`~course_utils.errors.ReplicaCountError`
    says what to do.
    """
    from ..strategies import mirrored_cpus

    return mirrored_cpus(replicas, needed_by="The check (your step on several replicas against one device)")


def check_batch(size: int = CHECK_BATCH, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``size`` Fashion-MNIST-like images (``float32`` in [0, 1], 28x28x1) and ``int64`` labels."""
    from .. import _synthetic

    images, labels = _synthetic.make_images("fashion_mnist", size, seed=seed)
    return images.astype(np.float32) / np.float32(255.0), labels.astype(np.int64)


def check_model(seed: int = 0) -> Any:
    """The course CNN (:func:`course_utils.models.custom_training_cnn`) with ``l2=CHECK_L2``.

    Build it inside a strategy's scope to get distributed variables.
    """
    from ..models import custom_training_cnn

    return custom_training_cnn(l2=CHECK_L2, seed=seed)


def initial_weights(seed: int = 0) -> list[np.ndarray]:
    """The starting weights every run of a comparison copies (built outside any strategy)."""
    return [np.array(w) for w in check_model(seed).get_weights()]


def flat(values: Sequence[Any]) -> np.ndarray:
    """Concatenate variables or arrays into one ``float64`` vector."""
    return np.concatenate(
        [np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float64).ravel() for v in values]
    )


@dataclass(frozen=True)
class StepResult:
    """One training step: the loss it reported, the change of every weight, the accuracy metric."""

    replicas: int
    loss: float
    update: np.ndarray
    accuracy: Optional[float] = None


def reference_step(
    weights: Sequence[np.ndarray],
    images: np.ndarray,
    labels: np.ndarray,
    learning_rate: float = CHECK_LEARNING_RATE,
) -> StepResult:
    """One SGD step on one device, written out: the numbers a distributed step must reproduce.

    loss = mean cross-entropy over the whole batch + the model's regularization penalties;
    update = -learning_rate x gradient of that loss.
    """
    tf = _tf()
    import keras

    model = check_model()
    model.set_weights(list(weights))
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.reduce_mean(per_example(labels, logits)) + tf.add_n(model.losses)
    gradients = tape.gradient(loss, model.trainable_variables)
    correct = np.argmax(logits.numpy(), axis=-1) == labels
    return StepResult(
        replicas=1,
        loss=float(loss),
        update=-learning_rate * flat(gradients),
        accuracy=float(np.mean(correct)),
    )


def distribute_batch(strategy: Any, images: np.ndarray, labels: np.ndarray) -> Any:
    """The global batch as ``strategy`` hands it to ``strategy.run``: split evenly over replicas."""
    tf = _tf()
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(len(labels))
    return next(iter(strategy.experimental_distribute_dataset(dataset)))


def step_with_loss(loss_fn: Callable[[Any, Any, Any, int], Any]) -> TrainStepFactory:
    """A train-step factory like :func:`tutorial_train_step` whose loss is
    ``loss_fn(labels, logits, model_losses, global_batch_size)``: to try a loss under a strategy."""
    tf = _tf()

    def make_train_step(
        model: Any, optimizer: Any, accuracy: Any, global_batch_size: int
    ) -> Callable[[Any], Any]:
        def train_step(inputs: Any) -> Any:
            images, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = loss_fn(labels, logits, model.losses, global_batch_size)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            accuracy.update_state(labels, logits)
            return loss

        return train_step

    return make_train_step


def build_for_step(
    strategy: Any,
    weights: Sequence[np.ndarray],
    learning_rate: float = CHECK_LEARNING_RATE,
    *,
    optimizer: str = "sgd",
    build_optimizer: bool = True,
) -> tuple[Any, Any, Any]:
    """Model (with ``weights``), optimizer and accuracy metric, all in ``strategy``'s scope.

    ``optimizer`` is ``"sgd"`` (what the checks use) or ``"adam"``; ``build_optimizer=True``
    creates its variables in the scope before the first step (keras-team/keras#23085).
    """
    import keras

    with strategy.scope():
        model = check_model()
        model.set_weights(list(weights))
        if optimizer == "adam":
            opt = keras.optimizers.Adam(learning_rate)
        elif optimizer == "sgd":
            opt = keras.optimizers.SGD(learning_rate)
        else:
            raise ValueError(f"optimizer must be 'sgd' or 'adam', not {optimizer!r}")
        if build_optimizer:
            opt.build(model.trainable_variables)  # in scope, before the first step
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    return model, opt, accuracy


def run_train_step(
    strategy: Any,
    make_train_step: TrainStepFactory,
    weights: Sequence[np.ndarray],
    images: np.ndarray,
    labels: np.ndarray,
    learning_rate: float = CHECK_LEARNING_RATE,
    *,
    optimizer: str = "sgd",
    build_optimizer: bool = True,
) -> StepResult:
    """One step of ``make_train_step(...)`` under ``strategy`` (in a ``tf.function``, losses summed).

    The model, optimizer (SGD unless told otherwise) and accuracy metric are created in the
    strategy's scope from ``weights``; the global batch is split over the replicas as a
    distributed dataset would.
    """
    tf = _tf()
    model, optimizer, accuracy = build_for_step(
        strategy, weights, learning_rate, optimizer=optimizer, build_optimizer=build_optimizer
    )
    train_step = make_train_step(model, optimizer, accuracy, len(labels))

    @tf.function
    def distributed_train_step(inputs: Any) -> Any:
        per_replica = strategy.run(train_step, args=(inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    before = flat(model.trainable_variables)
    loss = distributed_train_step(distribute_batch(strategy, images, labels))
    return StepResult(
        replicas=int(strategy.num_replicas_in_sync),
        loss=float(loss),
        update=flat(model.trainable_variables) - before,
        accuracy=float(accuracy.result()),
    )


def factor(actual: Any, expected: Any) -> float:
    """The number ``f`` that best explains ``actual`` as ``f x expected`` (least squares): 2.0 for
    a doubled update, 1.0 for a right one. ``nan`` when the reference is zero."""
    a = np.asarray(actual, np.float64).ravel()
    e = np.asarray(expected, np.float64).ravel()
    denominator = float(np.dot(e, e))
    return float(np.dot(a, e) / denominator) if denominator > 0 else float("nan")


def same(actual: Any, expected: Any, rtol: float = 1e-3) -> bool:
    """True when ``actual`` matches ``expected`` to ``rtol`` of the reference's largest entry."""
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if a.shape != e.shape:
        return False
    scale = float(np.max(np.abs(e))) if e.size else 0.0
    return bool(np.allclose(a, e, rtol=rtol, atol=rtol * max(scale, 1e-12)))
