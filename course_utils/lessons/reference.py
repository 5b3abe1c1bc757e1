"""Notebook 04's checks and the doctor: the single-device reference step and the check batch.

Notebook 04 writes its one-step program in its cells (``one_step``) and compares 2 replicas with
one device there. This module is the same comparison for the checks (notebooks 04 and 10) and the
doctor: :func:`reference_step` is one SGD step written out on one device, :func:`run_train_step`
runs a step factory on a strategy through :mod:`course_utils.compare`, :func:`step_with_loss`
makes a step factory around any loss function.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..compare import Run, flat, run
from ..compare import checking_strategy as checking_strategy  # the doctor calls them from here
from ..compare import factor as factor
from ..models import tutorial_train_step as tutorial_train_step  # the right step (checks, doctor)
from ..runtime import import_tensorflow as _tf

#: Examples in the check batch; L2 factor of the check model (large, so a penalty counted twice
#: shows); SGD's learning rate (Adam divides each gradient by its own size and hides a 2x gradient).
CHECK_BATCH = 16
CHECK_L2 = 1e-2
CHECK_LEARNING_RATE = 0.1


def check_batch(size: int = CHECK_BATCH, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``size`` Fashion-MNIST-like images (``float32`` in [0, 1], 28x28x1) and ``int64`` labels."""
    from .. import synthetic

    images, labels = synthetic.make_images("fashion_mnist", size, seed=seed)
    return images.astype(np.float32) / np.float32(255.0), labels.astype(np.int64)


def check_model(seed: int = 0) -> Any:
    """The course CNN (:func:`course_utils.models.custom_training_cnn`) with ``l2=CHECK_L2``."""
    from ..models import custom_training_cnn

    return custom_training_cnn(l2=CHECK_L2, seed=seed)


def initial_weights(seed: int = 0) -> list[np.ndarray]:
    """The starting weights every run of a comparison copies (built outside any strategy)."""
    return [np.array(w) for w in check_model(seed).get_weights()]


def reference_step(
    weights: Sequence[np.ndarray],
    images: np.ndarray,
    labels: np.ndarray,
    learning_rate: float = CHECK_LEARNING_RATE,
) -> Run:
    """One SGD step on one device, written out: loss = mean cross-entropy over the whole batch +
    the model's penalties; update = -learning_rate x its gradient; the accuracy as the metric."""
    tf = _tf()
    import keras

    model = check_model()
    model.set_weights(list(weights))
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.reduce_mean(per_example(labels, logits)) + tf.add_n(model.losses)
    update = -learning_rate * flat(tape.gradient(loss, model.trainable_variables))
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=-1) == labels))
    return Run(1, (float(loss),), update, update, (accuracy,))


def run_train_step(
    strategy: Any,
    make_train_step: Callable[..., Any],
    weights: Sequence[np.ndarray],
    images: np.ndarray,
    labels: np.ndarray,
    learning_rate: float = CHECK_LEARNING_RATE,
    *,
    optimizer: str = "sgd",
) -> Run:
    """One step of ``make_train_step(model, optimizer, accuracy, global_batch_size)`` under
    ``strategy`` from ``weights`` (the check model; ``"sgd"`` or ``"adam"``, built in the scope:
    keras-team/keras#23085)."""
    import keras

    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', not {optimizer!r}")
    make = keras.optimizers.Adam if optimizer == "adam" else keras.optimizers.SGD
    return run(
        strategy,
        lambda strategy, model, opt, accuracy: make_train_step(model, opt, accuracy, len(labels)),
        [images, labels],
        make_model=check_model,
        weights=weights,
        make_optimizer=lambda: make(learning_rate),
        make_metric=lambda: keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
    )


def same(actual: Any, expected: Any, rtol: float = 1e-3) -> bool:
    """True when ``actual`` matches ``expected`` to ``rtol`` of the reference's largest entry."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = float(np.max(np.abs(e))) if e.size else 0.0
    return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=rtol * max(scale, 1e-12)))


def step_with_loss(
    loss_fn: Callable[..., Any], clip: Optional[Callable[..., Any]] = None, clip_norm: float = 1.0
) -> Any:
    """A per-replica step factory ``(model, optimizer, metric, global_batch_size)`` around
    ``loss_fn(labels, logits, [sample_weight,] model_losses, global_batch_size)`` (the sample
    weights when the batch holds them: notebook 10's checks) and, if given, ``clip(gradients, clip_norm)``."""

    def make_train_step(
        model: Any, optimizer: Any, metric: Any, global_batch_size: int
    ) -> Callable[[Any], Any]:
        tf = _tf()

        def train_step(inputs: Any) -> Any:
            images, labels, *weights = inputs
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = loss_fn(labels, logits, *weights, model.losses, global_batch_size)
            gradients = tape.gradient(loss, model.trainable_variables)
            if clip is not None:
                gradients = clip(gradients, clip_norm)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            if metric is not None:
                metric.update_state(labels, logits, sample_weight=weights[0] if weights else None)
            return loss

        return train_step

    return make_train_step
