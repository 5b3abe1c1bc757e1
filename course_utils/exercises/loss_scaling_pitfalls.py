"""Notebook 05 (loss-scaling pitfalls): its exercise checks.

Every check runs the student's code on 2 replicas next to a correct single-device reference with
:func:`course_utils.lessons.diagnostics.update_factor` (on :mod:`course_utils.compare`), so that code
that is right on one replica and wrong on two fails, and the hint names the factor it found
(``2.00x``) and the usual cause. A check about clipping runs with the clip firing and not.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Callable

import numpy as np

from ..checks import exercise, expect, passed
from ..compare import checking_strategy
from ..lessons.diagnostics import UpdateFactor, update_factor

REPLICAS = 2
FEATURES = 4
CLASSES = 3
GLOBAL_BATCH = 8
#: The clip norm of the clipping exercises: far below every gradient norm of these checks (the
#: clip fires), and far above them (it never fires: a MEAN where the SUM belongs shows only there).
CLIP = 0.01
NO_CLIP = 100.0
#: Sequence length and real (unpadded) lengths of the masked-token exercise: the first replica's
#: 4 sequences hold 19 real tokens, the second's 6, so a per-replica count is visibly wrong.
TIME_STEPS = 5
LENGTHS = (5, 5, 4, 5, 1, 2, 1, 2)


# --------------------------------------------------------------------------- shared pieces


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=n).astype("int32")
    return x, y


def _classifier() -> Callable[[], Any]:
    """A small seeded classifier: 4 features -> 8 relu units -> 3 logits."""

    def build() -> Any:
        import keras

        return keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(
                    8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=11)
                ),
                keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=12)),
            ]
        )

    return build


def _loss_fn() -> Any:
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def _reference_step() -> Callable[..., Any]:
    """The correct step on one device: the mean loss over the batch."""
    import keras
    import tensorflow as tf

    mean_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = mean_loss(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def two_replicas() -> Any:
    """The 2-replica strategy of these checks (:func:`course_utils.compare.checking_strategy`)."""
    return checking_strategy(REPLICAS)


def _measure(step: Any, build: Callable[[], Any], batch: tuple, **kwargs: Any) -> UpdateFactor:
    return update_factor(step, build, batch, strategy=two_replicas(), **kwargs)


def _near(value: Any, target: float, tol: float = 1e-3) -> bool:
    return value is not None and math.isfinite(value) and abs(value - target) <= tol * max(1.0, abs(target))


def _factor_text(result: UpdateFactor) -> str:
    text = (
        f"On {result.replicas} replicas your step's update is {result.factor:.2f}x the correct "
        "single-device update"
    )
    if result.mismatch > 1e-3:
        text += f" and points in another direction too ({100 * result.mismatch:.1f}% mismatch)"
    return text + "."


def _scaling_hint(result: UpdateFactor) -> str:
    if _near(result.factor, result.replicas, 1e-2):
        return (
            f"{_factor_text(result)} Each replica averaged over its own examples only and the "
            "strategy then SUMS the replicas' gradients: divide by the whole global batch."
        )
    return f"{_factor_text(result)} Divide the sum of the losses by the whole global batch, once."


# --------------------------------------------------------------------------- clipping


def twin_batch(seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A global batch of 8 that holds the same 4 examples twice: each replica gets the same 4."""
    x, y = _data(GLOBAL_BATCH // 2, seed=seed)
    return np.concatenate([x, x]), np.concatenate([y, y])


def _scaled_step() -> Callable[..., Any]:
    """The correct step for replicas: compute_average_loss over the global batch of 8."""
    import tensorflow as tf

    loss_fn = _loss_fn()

    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            per_example_loss = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def measured_clip_factor() -> float:
    """The factor of exercise predict_clip_factor, measured: correct step, global_clipnorm=CLIP."""
    import keras

    result = _measure(
        _scaled_step(),
        _classifier(),
        twin_batch(),
        make_optimizer=lambda: keras.optimizers.SGD(learning_rate=0.1, global_clipnorm=CLIP),
    )
    return result.factor


def check_predict_clip_factor(prediction: Any) -> None:
    """The predicted factor of a correct step with ``global_clipnorm`` on 2 replicas, twin halves."""
    with exercise("predict_clip_factor"):
        expect(
            isinstance(prediction, Real) and not isinstance(prediction, bool),
            f"Set PREDICTION to a number (the update on 2 replicas divided by the update on one "
            f"device), not {prediction!r}.",
        )
        measured = measured_clip_factor()
        prediction = float(prediction)
        if abs(prediction - measured) <= 0.05:
            passed(
                "predict_clip_factor",
                f"{measured:.2f}x on 2 replicas: each replica clipped its own gradient, then the "
                "strategy summed them.",
            )
            return
        said = f"You predicted {prediction:g}; measured: {measured:.2f}x."
        if _near(prediction, 1.0, 0.05):
            expect(
                False,
                f"{said} 1.0 would be right if the clip acted on the summed gradient, as on one "
                "device. Keras 3's optimizer clips inside apply_gradients, on each replica, BEFORE "
                "the all-reduce: each replica's gradient was clipped to the clip norm, and the "
                "strategy then summed 2 of them.",
            )
        if _near(prediction, 0.5, 0.05):
            expect(
                False,
                f"{said} Each replica's gradient is half the batch's gradient, but both halves are "
                "still far above the clip norm, so each is clipped to the full clip norm before "
                "the strategy sums them.",
            )
        expect(
            False,
            f"{said} Every gradient here is far above the clip norm. Work out the norm of the "
            "update on one device, then on each replica before the sum, then after it.",
        )


def check_clip_after_sum(clip_summed_gradients: Callable[[Any, float], Any]) -> None:
    """``clip_summed_gradients(grads, clip_norm)`` makes 2 replicas clip like one device, with the
    clip firing (``CLIP``) and not (``NO_CLIP``: there a MEAN where the SUM belongs shows)."""
    import keras
    import tensorflow as tf

    loss_fn = _loss_fn()
    mean_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def steps(clip: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
        def reference(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mean_loss(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            grads, _ = tf.clip_by_global_norm(grads, clip)  # what global_clipnorm does on one device
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                per_example_loss = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)
            grads = clip_summed_gradients(tape.gradient(loss, model.trainable_variables), clip)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return step, reference

    regimes = [(CLIP, "the clip firing"), (NO_CLIP, "a clip norm no gradient reaches")]
    places = [("2 replicas", two_replicas()), ("1 device", tf.distribute.get_strategy())]
    with exercise("clip_after_sum"):
        for (clip, regime), (where, strategy) in ((r, p) for r in regimes for p in places):
            step, reference = steps(clip)
            result = update_factor(
                step, _classifier(), _data(GLOBAL_BATCH), strategy=strategy, reference_step=reference
            )
            if result.ok:
                continue
            off = f", {100 * result.mismatch:.1f}% off in direction" if result.mismatch > 1e-3 else ""
            found = (
                f"On {where}, with clip_norm={clip:g} ({regime}), the update is {result.factor:.2f}x the "
                f"single-device global_clipnorm update{off}."
            )
            n = result.replicas
            scaled = n > 1 and result.mismatch < 1e-3
            if scaled and _near(result.factor, n, 1e-2):
                expect(
                    False,
                    f"{found} apply_gradients SUMS what the {n} replicas pass, so a clipped sum passed by "
                    f"every replica counts {n} times. Pass 1/N of it (N = num_replicas_in_sync of the "
                    "replica context).",
                )
            if scaled and _near(result.factor, 1 / n, 1e-2):
                expect(
                    False,
                    f"{found} The replicas' gradients were averaged (ReduceOp.MEAN) or divided by N twice: "
                    "all-reduce with ReduceOp.SUM, clip, then pass 1/N of it.",
                )
            if result.factor > 5:
                expect(
                    False,
                    f"{found} The gradients were not clipped: the update is as large as without clipping.",
                )
            if n > 1 and result.mismatch > 1e-3:
                expect(
                    False,
                    f"{found} Each replica clipped its own gradient, as the optimizer's global_clipnorm "
                    "does. Clip the SUM of the replicas' gradients: sum them across replicas first (an "
                    "all-reduce), then clip by global norm.",
                )
            expect(
                False,
                f"{found} On one device the optimizer clips the batch's gradient to global norm "
                "clip_norm and applies it; make the applied gradient that same one.",
            )
    passed(
        "clip_after_sum",
        "2 replicas and 1 device clip the summed gradient, with the clip firing and not: "
        "1.00x the single-device update.",
    )


# --------------------------------------------------------------------------- masked tokens


def padded_batch(seed: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of TIME_STEPS tokens; label -1 marks padding (LENGTHS real tokens each)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(GLOBAL_BATCH, TIME_STEPS, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=(GLOBAL_BATCH, TIME_STEPS)).astype("int32")
    for i, length in enumerate(LENGTHS):
        y[i, length:] = -1
    return x, y


def _tagger() -> Callable[[], Any]:
    def build() -> Any:
        import keras

        return keras.Sequential(
            [
                keras.Input((TIME_STEPS, FEATURES)),
                keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=13)),
            ]
        )

    return build


def check_masked_token_mean(masked_mean_loss: Callable[[Any, Any], Any]) -> None:
    """``masked_mean_loss(per_token_loss, mask)``: the mean over the real tokens of the global batch."""
    import tensorflow as tf

    loss_fn = _loss_fn()

    def token_losses(model: Any, x: Any, y: Any) -> tuple[Any, Any]:
        per_token_loss = loss_fn(tf.maximum(y, 0), model(x, training=True))
        return per_token_loss, tf.cast(y >= 0, per_token_loss.dtype)

    def reference(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            per_token_loss, mask = token_losses(model, x, y)
            loss = tf.reduce_sum(per_token_loss * mask) / tf.reduce_sum(mask)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            per_token_loss, mask = token_losses(model, x, y)
            loss = masked_mean_loss(per_token_loss, mask)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    real = sum(LENGTHS)
    half = len(LENGTHS) // 2
    with exercise("masked_token_mean"):
        result = _measure(step, _tagger(), padded_batch(), reference_step=reference)
        if not result.ok:
            if _near(result.factor, real / GLOBAL_BATCH, 1e-2) and result.mismatch < 1e-3:
                expect(
                    False,
                    f"{_factor_text(result)} That is {real} real tokens / {GLOBAL_BATCH} sequences: "
                    "you divided by the number of sequences (what compute_average_loss divides "
                    "by, with or without sample_weight=mask), not by the number of real tokens.",
                )
            if result.mismatch > 1e-3:
                expect(
                    False,
                    f"{_factor_text(result)} Some tokens weigh more than others: you divided by a "
                    f"count that differs between replicas or sequences (the first replica holds "
                    f"{sum(LENGTHS[:half])} real tokens, the second {sum(LENGTHS[half:])}). Every "
                    "real token of the global batch must be divided by the same number.",
                )
            expect(False, _scaling_hint(result))
        expect(
            _near(result.loss_factor, 1.0, 1e-3),
            "The update is right, but the loss your step returns, summed over the replicas, is "
            f"{result.loss_factor}x the single-device loss: return the loss you differentiate.",
        )
    passed("masked_token_mean", f"the mean over the {real} real tokens, 1.00x on 2 replicas.")


# --------------------------------------------------------------------------- kept exercises


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
        for size, split in [
            (global_batch, "full batch"),
            (3, "short batch split 2 + 1"),
            (1, "batch of 1: the second replica gets 0 examples"),
        ]:
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
        for strategy, where in [(two_replicas(), "2 replicas"), (tf.distribute.get_strategy(), "1 device")]:
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
