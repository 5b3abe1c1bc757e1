"""Checks for notebook 05, loss-scaling pitfalls.

Every check runs the student's code on 2 replicas next to a correct single-device reference with
:func:`course_utils.diagnostics.update_factor`, so that a step that is right on one replica and
wrong on two fails, and the hint names the factor (``2.00x``) and its usual cause.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from ..checks import exercise, expect, passed
from ..diagnostics import UpdateFactor, cpu_replicas, update_factor

REPLICAS = 2
FEATURES = 4
CLASSES = 3
#: Loss multiplier of the mixed-precision exercise: it puts the gradients below float16's range.
TINY = 1e-8


# --------------------------------------------------------------------------- shared pieces


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=n).astype("int32")
    return x, y


def _classifier(l2: Optional[float] = None) -> Callable[[], Any]:
    """A small classifier; with ``l2`` (even 0.0) its first kernel has an L2 regularizer."""

    def build() -> Any:
        import keras

        reg = keras.regularizers.L2(l2) if l2 is not None else None
        return keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(
                    8,
                    activation="relu",
                    kernel_initializer=keras.initializers.GlorotUniform(seed=11),
                    kernel_regularizer=reg,
                ),
                keras.layers.Dense(
                    CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=12)
                ),
            ]
        )

    return build


def _reference_step(regularized: bool = False) -> Callable[..., Any]:
    """The correct step on one device: the mean loss over the batch (plus the penalty)."""
    import keras
    import tensorflow as tf

    mean_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = mean_loss(y, model(x, training=True))
            if regularized and model.losses:
                loss += tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def _measure(step: Any, build: Callable[[], Any], batch: tuple, **kwargs: Any) -> UpdateFactor:
    return update_factor(step, build, batch, strategy=cpu_replicas(REPLICAS), **kwargs)


def _near(value: float, target: float, tol: float = 1e-3) -> bool:
    return value is not None and math.isfinite(value) and abs(value - target) <= tol * max(1.0, abs(target))


def _factor_text(result: UpdateFactor) -> str:
    text = f"On {result.replicas} replicas your step's update is {result.factor:.2f}x the correct single-device update"
    if result.mismatch > 1e-3:
        text += f" and points in another direction too ({100 * result.mismatch:.1f}% mismatch)"
    return text + "."


def _scaling_hint(result: UpdateFactor) -> str:
    n = result.replicas
    if _near(result.factor, n, 1e-2):
        return (
            f"{_factor_text(result)} Each replica averaged over its own examples only "
            "(tf.reduce_mean, or a mean computed some other way) and the strategy then SUMS the "
            "replicas' gradients. Sum the per-example losses and divide by the GLOBAL batch: "
            "tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)."
        )
    if _near(result.factor, 1.0 / n, 1e-2):
        return (
            f"{_factor_text(result)} You divided by the number of replicas once too often: "
            "compute_average_loss already divides by the global batch."
        )
    return (
        f"{_factor_text(result)} Divide the sum of the per-example losses by the global batch, "
        "once: tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)."
    )


# --------------------------------------------------------------------------- exercises


def check_fix_reduce_mean(train_step: Callable[..., Any], global_batch: int = 8) -> None:
    """The fixed step must update exactly like the single-device mean loss on 2 replicas."""
    with exercise("fix_reduce_mean"):
        result = _measure(
            train_step, _classifier(), _data(global_batch), reference_step=_reference_step()
        )
        expect(result.ok, _scaling_hint(result))
        reported = "not a number" if result.loss_factor is None else f"{result.loss_factor:.2f}x"
        expect(
            _near(result.loss_factor, 1.0, 1e-3),
            f"The update is right, but the loss your step returns, summed over the replicas, is "
            f"{reported} the true mean loss. Return the scaled loss you took the gradient of, as "
            "a scalar.",
        )
    passed("fix_reduce_mean", "on 2 replicas the update is 1.00x the single-device update.")


def check_fix_regularization(train_step: Callable[..., Any], global_batch: int = 8) -> None:
    """With an L2 penalty, the fixed step must match the single-device update on 2 replicas."""
    batch = _data(global_batch, seed=1)
    with exercise("fix_regularization"):
        result = _measure(
            train_step, _classifier(l2=0.05), batch, reference_step=_reference_step(True)
        )
        if not result.ok:
            # The same step with a zero penalty tells the data loss apart from the penalty.
            plain = _measure(train_step, _classifier(l2=0.0), batch, reference_step=_reference_step())
            expect(plain.ok, "Without a penalty your step is already wrong. " + _scaling_hint(plain))
            expect(
                False,
                f"{_factor_text(result)} With a zero penalty the same step is right, so the "
                f"penalty is the problem: every replica adds sum(model.losses) and the strategy sums "
                f"the replicas' gradients, so the penalty counts {result.replicas} times. Add "
                "tf.nn.scale_regularization_loss(tf.add_n(model.losses)) instead; it divides by "
                "the number of replicas.",
            )
    passed("fix_regularization", "data loss and L2 penalty both count once on 2 replicas.")


def _sequence_data(n: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, steps, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=(n, steps)).astype("int32")
    return x, y


def _sequence_model(steps: int) -> Callable[[], Any]:
    def build() -> Any:
        import keras

        return keras.Sequential(
            [
                keras.Input((steps, FEATURES)),
                keras.layers.Dense(
                    CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=13)
                ),
            ]
        )

    return build


def check_fix_multidim_labels(
    train_step: Callable[..., Any], global_batch: int = 8, time_steps: int = 5
) -> None:
    """Per-token losses ``(batch, time)``: the fixed step must match the mean over all tokens."""
    with exercise("fix_multidim_labels"):
        result = _measure(
            train_step,
            _sequence_model(time_steps),
            _sequence_data(global_batch, time_steps),
            reference_step=_reference_step(),
        )
        if not result.ok and _near(result.factor, time_steps, 1e-2):
            expect(
                False,
                f"{_factor_text(result)} That is the number of time steps ({time_steps}): "
                "compute_average_loss summed every token's loss and divided by the number of "
                "sequences. Average each example's losses over the extra axis first: "
                "per_example = tf.reduce_mean(per_token, axis=1).",
            )
        expect(result.ok, _scaling_hint(result))
    passed("fix_multidim_labels", f"{time_steps} time steps per example, update 1.00x on 2 replicas.")


def check_average_loss(average_loss: Callable[[Any], Any], global_batch: int = 8) -> None:
    """``average_loss(per_example_loss)`` must be right on full, short and empty replica batches."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = average_loss(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    with exercise("average_loss"):
        for size, split in [(global_batch, "full batch"), (3, "short batch split 2 + 1"),
                            (1, "batch of 1: the second replica gets 0 examples")]:
            result = _measure(step, _classifier(), _data(size, seed=3), reference_step=_reference_step())
            expect(
                result.loss is not None and math.isfinite(result.loss),
                f"On a {split} your loss is {result.loss}: a replica with no examples divided 0 "
                "by 0. Use tf.math.divide_no_nan (or compute_average_loss, which does).",
            )
            if result.ok:
                continue
            if size == global_batch:
                expect(False, f"On a {split}: " + _scaling_hint(result))
            if _near(result.factor, size / global_batch, 1e-2):
                expect(
                    False,
                    f"On a {split} of {size} examples: {_factor_text(result)} You divide by the "
                    f"full global batch ({global_batch}) even when the batch is shorter. Divide by "
                    "the number of examples actually in this global batch: all-reduce the local "
                    "counts with tf.distribute.get_replica_context().all_reduce(...).",
                )
            expect(
                False,
                f"On a {split}: {_factor_text(result)} The default denominator of "
                "compute_average_loss is (this replica's batch) x (replicas), which weights the "
                "examples of a smaller replica batch more. Divide by the total number of examples "
                "of the global batch, summed over the replicas with "
                "tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, ...).",
            )
    passed("average_loss", "full, short and empty replica batches all match the single-device mean.")


def check_track_loss(epoch_training_loss: Callable[[Any, Any, int], Any]) -> None:
    """``epoch_training_loss(strategy, dataset, global_batch_size)``: the mean of the step losses."""
    import tensorflow as tf

    cases = [
        ([2.0, 3.0, 4.0, 5.0], 3.5),
        ([2.0, 3.0, 4.0, 5.0, 1.0, 1.0, 1.0, 1.0], 2.25),
    ]
    with exercise("track_loss"):
        for strategy, where in [(cpu_replicas(REPLICAS), "2 replicas"),
                                (tf.distribute.get_strategy(), "1 device")]:
            for values, want in cases:
                dataset = tf.data.Dataset.from_tensor_slices(tf.constant(values)).batch(4)
                got = epoch_training_loss(strategy, dataset, 4)
                got = float(got.numpy() if hasattr(got, "numpy") else got)
                if math.isclose(got, want, rel_tol=1e-5):
                    continue
                ratio = got / want
                hint = (
                    f"On {where}, per-example losses {values} in global batches of 4 should give a "
                    f"training loss of {want}, got {got:.4g} ({ratio:.2f}x)."
                )
                if math.isclose(ratio, 0.5, rel_tol=1e-3):
                    hint += (
                        " A Mean metric fed the replicas' scaled losses averages them, and each is "
                        "already divided by the global batch. Sum them with "
                        "strategy.reduce(SUM, ...) instead (or feed the metric the unscaled "
                        "per-example losses)."
                    )
                elif math.isclose(ratio, len(values) / 4, rel_tol=1e-3):
                    hint += " Divide the total over the steps by the number of steps."
                expect(False, hint)
    passed("track_loss", "3.5 for the tutorial's example, on 2 replicas and on 1 device.")


def _linear(dtype: str) -> Callable[[], Any]:
    def build() -> Any:
        import keras

        return keras.Sequential(
            [keras.Input((FEATURES,)), keras.layers.Dense(1, kernel_initializer="zeros", dtype=dtype)]
        )

    return build


def check_fix_loss_scale(train_step: Callable[..., Any], global_batch: int = 8) -> None:
    """In mixed_float16, the fixed step must recover the float32 update of a tiny loss."""
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(4)
    x = rng.normal(size=(global_batch, FEATURES)).astype("float32")
    y = rng.normal(size=global_batch).astype("float32")

    def reference(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            pred = tf.cast(model(x, training=True), tf.float32)[:, 0]
            loss = tf.reduce_mean(TINY * tf.square(y - pred))
            scaled = optimizer.scale_loss(loss)  # exact in float32: the scale is a power of 2
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def scaling_optimizer() -> Any:
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.1))

    with exercise("fix_loss_scale"):
        try:
            result = _measure(
                train_step,
                _linear("mixed_float16"),
                (x, y),
                make_reference_model=_linear("float32"),
                reference_step=reference,
                make_optimizer=scaling_optimizer,
            )
        except AttributeError as error:
            if "get_scaled_loss" in str(error) or "get_unscaled_gradients" in str(error):
                expect(
                    False,
                    "Keras 3 removed get_scaled_loss and get_unscaled_gradients. Multiply the loss "
                    "with optimizer.scale_loss(loss) before tape.gradient; apply_gradients "
                    "unscales the gradients itself.",
                )
            raise
        expect(
            not _near(result.factor, 0.0, 1e-2),
            f"{_factor_text(result)} The gradients underflowed to zero in float16. Take the "
            "gradient of optimizer.scale_loss(loss) (the loss times 32768 at first) instead of "
            "the loss; the LossScaleOptimizer's apply_gradients divides it back out.",
        )
        expect(
            _near(result.factor, 1.0, 1e-2) and result.mismatch < 1e-2,
            f"{_factor_text(result)} Scale the loss with optimizer.scale_loss(loss) only, and "
            "pass the gradients of that scaled loss to apply_gradients unchanged: it unscales them.",
        )
    passed("fix_loss_scale", "in mixed_float16 the tiny gradients survive: update 1.00x the float32 one.")
