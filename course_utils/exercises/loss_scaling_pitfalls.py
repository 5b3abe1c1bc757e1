"""Notebook 05 (loss-scaling pitfalls): its exercise checks.

Every check runs on 2 replicas next to one device, so that code that is right on one replica and
wrong on two fails. The predictions are measured, never taken on trust; the clipping check
compares training updates with a correct single-device reference
(:func:`course_utils.lessons.diagnostics.update_factor`), with the clip firing and not. The moments
and dropout checks compare what each replica returns with what one device returns for the whole
global batch. A hint names the mistake; it never prints the answer.
"""

from __future__ import annotations

import functools
import math
from numbers import Real
from typing import Any, Callable

import numpy as np

from ..checks import exercise, expect, passed
from ..compare import checking_strategy, distribute
from ..lessons.diagnostics import UpdateFactor, factor_of, step_update, update_factor
from . import Watched, harness, in_kernel

REPLICAS = 2
FEATURES = 4
CLASSES = 3
GLOBAL_BATCH = 8
#: The clip norm of the clipping exercises: far below every gradient norm of these checks (the
#: clip fires), and far above them (it never fires: a MEAN where the SUM belongs shows only there).
CLIP = 0.01
NO_CLIP = 100.0
#: The moments exercise: 3 features; the first rows are centred at 0, the last at SHIFT, so each
#: replica's own statistics are far from the global batch's; 8 rows split 4 + 4, 7 split 4 + 3.
MOMENT_FEATURES = 3
SHIFT = 4.0
#: The dropout exercise: its rate, and the width of the activations it drops.
DROP_RATE = 0.5
#: A second rate for one device, where ``rate`` and ``1 - rate`` differ (``x / rate`` passes at 0.5).
OTHER_DROP_RATE = 0.2
DROP_WIDTH = 6


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


def two_replicas() -> Any:
    """The 2-replica strategy of these checks (:func:`course_utils.compare.checking_strategy`)."""
    return checking_strategy(REPLICAS)


def _measure(step: Any, build: Callable[[], Any], batch: tuple, **kwargs: Any) -> UpdateFactor:
    return update_factor(step, build, batch, strategy=two_replicas(), **kwargs)


def _near(value: Any, target: float, tol: float = 1e-3) -> bool:
    return value is not None and math.isfinite(value) and abs(value - target) <= tol * max(1.0, abs(target))


# --------------------------------------------------------------------------- pitfall_factors

#: Exercise pitfall_factors: the pitfalls of sections 4, 5, 6 and 8, and the mistake each hint names.
PITFALLS = {
    "reduce_mean": "each replica divides by its own examples, and the strategy sums the replicas' gradients",
    "raw penalty": "each replica adds the whole penalty, and the strategy sums the replicas' gradients",
    "Keras default": "in strategy.run Keras 3's default reduction divides each replica's mean by "
    "num_replicas_in_sync, and the strategy sums the replicas' gradients",
    "per-token": "compute_average_loss divides the summed token losses by the examples, whatever the replicas",
}


@functools.lru_cache(maxsize=1)
def _pitfall_factors() -> tuple[tuple[str, float], ...]:
    import keras
    import tensorflow as tf

    loss_fn, mean_loss = _loss_fn(), keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(loss_of: Callable[[Any, Any, Any], Any]) -> Callable[..., Any]:
        def train(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_of(y, model(x, training=True), model)
            pairs = zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            optimizer.apply_gradients([(g, v) for g, v in pairs if g is not None])  # a penalty: kernels only
            return loss

        return train

    def dense(shape: tuple, **penalty: Any) -> Callable[[], Any]:  # one layer: the factors hold for any model
        return lambda: keras.Sequential([keras.Input(shape), keras.layers.Dense(CLASSES, **penalty)])

    x, y = _data(GLOBAL_BATCH * 5, seed=3)  # 8 examples of 5 time steps, for the per-token loss
    found = {
        "reduce_mean": _measure(step(lambda y, p, m: tf.reduce_mean(loss_fn(y, p))), dense((4,)), _data(8)),
        "raw penalty": _measure(
            step(lambda y, p, m: tf.add_n(m.losses)), dense((4,), kernel_regularizer="l2"), _data(8)
        ),
        "Keras default": _measure(step(lambda y, p, m: mean_loss(y, p)), dense((4,)), _data(8)),
        "per-token": _measure(
            step(lambda y, p, m: tf.nn.compute_average_loss(loss_fn(y, p), global_batch_size=GLOBAL_BATCH)),
            dense((5, FEATURES)),
            (x.reshape(GLOBAL_BATCH, 5, FEATURES), y.reshape(GLOBAL_BATCH, 5)),
            reference_step=step(lambda y, p, m: mean_loss(y, p)),  # one device's mean over every token
        ),
    }
    return tuple((name, result.factor) for name, result in found.items())


def measured_pitfall_factors() -> dict[str, float]:
    """The factors of exercise pitfall_factors on 2 replicas (SGD, a global batch of 8):
    ``tf.reduce_mean``; an L2 penalty alone, unscaled; a Keras loss at its default reduction in
    ``strategy.run``; per-token losses in ``compute_average_loss``, against a mean over tokens."""
    return dict(_pitfall_factors())


def check_pitfall_factors(prediction: Any) -> None:
    """``FACTORS = {pitfall: factor}`` for :data:`PITFALLS`: the hint names the entries that are off
    and why, never a factor."""
    with exercise("pitfall_factors"):
        names = list(PITFALLS)
        expect(
            isinstance(prediction, dict) and set(prediction) == set(names),
            f"Set FACTORS to a dict with the keys {names}, each the factor you expect (got {prediction!r}).",
        )
        for name, value in prediction.items():
            expect(
                isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value),
                f"Set FACTORS[{name!r}] to a number, the factor you expect, not {value!r}.",
            )
        measured = measured_pitfall_factors()
        off = [name for name in names if abs(prediction[name] - measured[name]) > 0.05]
        expect(not off, f"{len(off)} of 4 off: " + "; ".join(f"{n!r}: {PITFALLS[n]}" for n in off) + ".")
    passed(
        "pitfall_factors",
        ", ".join(f"{n} {f:.2f}x" for n, f in measured.items()) + "; sections 4 to 8 show why.",
    )


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
        if _near(prediction, 1.0, 0.05):
            expect(
                False,
                "Not 1: that holds only if the clip acts on the summed gradient. Where does "
                "apply_gradients clip under a strategy?",
            )
        if _near(prediction, 0.5, 0.05):
            expect(False, "Not 0.5: each replica's half gradient is still far above the clip norm.")
        expect(
            False,
            f"Not {prediction:g}: each replica's gradient is far above the clip norm, so what "
            "norm does each replica pass on, and what does the strategy do with them?",
        )


@harness
def clip_update(
    clip_summed_gradients: Callable[[Any, float], Any], strategy: Any, clip: float, weights: list
) -> dict[str, Any]:
    """One step under ``strategy`` from ``weights`` on :func:`_data`'s global batch, the replicas'
    gradients put through ``clip_summed_gradients(grads, clip)``: :func:`step_update`'s plain data."""
    import tensorflow as tf

    loss_fn = _loss_fn()

    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            per_example_loss = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)
        grads = clip_summed_gradients(tape.gradient(loss, model.trainable_variables), clip)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step_update(strategy, step, _classifier(), weights, _data(GLOBAL_BATCH))


def check_clip_after_sum(clip_summed_gradients: Callable[[Any, float], Any]) -> None:
    """``clip_summed_gradients(grads, clip_norm)`` makes 2 replicas clip like one device, with the
    clip firing (``CLIP``) and not (``NO_CLIP``: there a MEAN where the SUM belongs shows)."""
    import keras
    import tensorflow as tf

    mean_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    build, batch = _classifier(), _data(GLOBAL_BATCH)
    weights = [np.asarray(w) for w in build().get_weights()]

    def reference(clip: float) -> Callable[..., Any]:
        def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mean_loss(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            grads, _ = tf.clip_by_global_norm(grads, clip)  # what global_clipnorm does on one device
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return step

    regimes = [(CLIP, "the clip firing"), (NO_CLIP, "a clip norm no gradient reaches")]
    # One device first: a mistake that is wrong there too (clipping each tensor apart) is named as
    # such, before 2 replicas blame it on clipping per replica.
    places = [("1 device", tf.distribute.get_strategy()), ("2 replicas", two_replicas())]
    with exercise("clip_after_sum"):
        for (clip, regime), (where, strategy) in ((r, p) for r in regimes for p in places):
            single = step_update(checking_strategy(1), reference(clip), build, weights, batch)
            result = factor_of(
                in_kernel(clip_update, clip_summed_gradients, Watched(strategy), clip, weights), single
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
                    f"{found} apply_gradients SUMS what the {n} replicas pass: the clipped sum "
                    f"counts {n} times.",
                )
            if scaled and _near(result.factor, 1 / n, 1e-2):
                expect(
                    False,
                    f"{found} The replicas' gradients were averaged (ReduceOp.MEAN) or divided by N twice.",
                )
            if result.factor > 5:
                expect(False, f"{found} The gradients were not clipped.")
            if n > 1 and result.mismatch > 1e-3:
                expect(False, f"{found} Each replica clipped its own gradient, not their sum.")
            expect(
                False,
                f"{found} Not clipped by the global norm of the whole list "
                "(tf.clip_by_norm on each tensor?).",
            )
    passed(
        "clip_after_sum",
        "2 replicas and 1 device clip the summed gradient, with the clip firing and not: "
        "1.00x the single-device update.",
    )


# --------------------------------------------------------------------------- lone_example_factor


def measured_lone_example_factor() -> float:
    """The factor of exercise lone_example_factor, measured: a global batch of 3 examples split
    2 + 1 on 2 replicas, each replica's loss ``compute_average_loss`` with its default denominator;
    the lone example's weight in the summed gradient over its weight on one device (1/3)."""
    import tensorflow as tf

    strategy = two_replicas()
    with strategy.scope():
        v = tf.Variable(tf.zeros(3))  # example i's loss is v[i]: its gradient is the example's weight

    def replica_fn(index: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.gather(v, index))
        return tf.convert_to_tensor(tape.gradient(loss, v))

    (index,) = next(iter(distribute(strategy, [np.arange(3)])))
    weights = strategy.reduce("SUM", strategy.run(replica_fn, args=(index,)), axis=None).numpy()
    return float(weights[2] * 3)


def check_lone_example_factor(prediction: Any) -> None:
    """The predicted factor of the lone example of a batch of 3 split 2 + 1, default denominator."""
    with exercise("lone_example_factor"):
        expect(
            isinstance(prediction, Real) and not isinstance(prediction, bool) and math.isfinite(prediction),
            f"Set LONE_EXAMPLE_FACTOR to a number (its weight on 2 replicas over its weight on one "
            f"device), not {prediction!r}.",
        )
        measured, guess = measured_lone_example_factor(), float(prediction)
        if abs(guess - measured) <= 0.05:
            passed(
                "lone_example_factor",
                f"{measured:.2f}x: its replica divided by 1 x 2 replicas, one device by 3.",
            )
            return
        mistakes = {
            1.0: "Not 1: without global_batch_size the denominator is not the global batch's 3 examples.",
            0.75: "0.75 is the factor of each of the other two examples, whose replica holds 2.",
            0.5: "0.5 is the lone example's weight on 2 replicas, not its factor.",
        }
        for value, hint in mistakes.items():
            expect(not _near(guess, value, 0.05), hint)
        expect(
            False, f"Not {guess:g}: the lone example's replica divides by its own batch times the replicas."
        )


# --------------------------------------------------------------------------- running on replicas


def _on_replicas(strategy: Any, fn: Callable[..., Any], arrays: list[np.ndarray]) -> list[Any]:
    """``fn`` on each replica's share of one global batch of ``arrays`` (in a ``tf.function``, as in
    training): one NumPy result (or tuple of them) per replica."""
    import tensorflow as tf

    inputs = next(iter(distribute(strategy, arrays)))
    values = tf.function(lambda *args: strategy.run(fn, args=args))(*inputs)
    parts = [strategy.experimental_local_results(v) for v in tf.nest.flatten(values)]
    return [tuple(np.asarray(p[i]) for p in parts) for i in range(len(parts[0]) if parts else 0)]


@harness
def moments_on_replicas(global_moments: Callable[[Any], Any], strategy: Any, x: np.ndarray) -> list[Any]:
    """``global_moments`` on each replica's share of the global batch ``x``: ``(mean, variance)``
    as NumPy arrays, one pair per replica."""
    return _on_replicas(strategy, lambda rows: tuple(global_moments(rows)), [x])


def _split(rows: int) -> list[slice]:
    """The rows each of 2 replicas gets of a global batch of ``rows`` (the first gets the extra one)."""
    first = (rows + 1) // 2
    return [slice(0, first), slice(first, rows)]


# --------------------------------------------------------------------------- global_moments


def moments_batch(rows: int = GLOBAL_BATCH, seed: int = 7) -> np.ndarray:
    """``rows`` x 3 features; the second replica's rows are shifted by SHIFT."""
    x = np.random.default_rng(seed).normal(size=(rows, MOMENT_FEATURES))
    x[_split(rows)[1]] += SHIFT
    return x.astype("float32")


def check_global_moments(global_moments: Callable[[Any], Any]) -> None:
    """``global_moments(x)``, on each replica: the mean and variance of each feature over the whole
    global batch (what a synchronized BatchNorm normalizes with), on 2 replicas (split 4 + 4 and
    4 + 3) and on one device."""
    places = [("2 replicas", two_replicas()), ("1 device", checking_strategy(1))]
    with exercise("global_moments"):
        for rows in (GLOBAL_BATCH, GLOBAL_BATCH - 1):
            x = moments_batch(rows)
            x64 = x.astype(np.float64)
            want = np.stack([x64.mean(axis=0), x64.var(axis=0)])
            for where, strategy in places:
                parts = _split(rows) if strategy.num_replicas_in_sync > 1 else [slice(0, rows)]
                results = in_kernel(moments_on_replicas, global_moments, Watched(strategy), x)
                expect(
                    len(results) == strategy.num_replicas_in_sync,
                    f"On {where} the step returned {len(results)} results, not one per replica.",
                )
                for replica, result in enumerate(results):
                    result = [np.asarray(r) for r in result]
                    expect(
                        len(result) == 2 and all(r.shape == (MOMENT_FEATURES,) for r in result),
                        f"Return (mean, variance), each of shape ({MOMENT_FEATURES},) (one per feature), "
                        f"not shapes {[r.shape for r in result]}.",
                    )
                    got = np.stack(result).astype(np.float64)
                    if np.allclose(got, want, rtol=1e-4, atol=1e-5):
                        continue
                    sizes = " + ".join(str(len(range(rows)[p])) for p in parts)
                    said = f"On {where}, global batch of {rows} split {sizes}, replica {replica}:"
                    if np.allclose(got[0], want[0], rtol=1e-4, atol=1e-5) and np.allclose(
                        got[1], want[1] * rows / (rows - 1), rtol=1e-4, atol=1e-5
                    ):
                        expect(
                            False,
                            f"{said} the variance divides by count - 1; BatchNorm's divides by the count.",
                        )
                    local = x64[parts[replica]]
                    if np.allclose(got, [local.mean(0), local.var(0)], rtol=1e-4, atol=1e-5):
                        expect(False, f"{said} those are its own examples' moments, not the global batch's.")
                    local_vars = np.mean([x64[p].var(0) for p in parts], axis=0)
                    if np.allclose(got[0], want[0], rtol=1e-4, atol=1e-5) and np.allclose(
                        got[1], local_vars, rtol=1e-4, atol=1e-5
                    ):
                        expect(
                            False,
                            f"{said} the mean is right; the variance averages the replicas' variances, "
                            "not the batch's.",
                        )
                    if rows != GLOBAL_BATCH and strategy.num_replicas_in_sync > 1:
                        expect(
                            False,
                            f"{said} right on an even split only: not divided by the all-reduced count.",
                        )
                    expect(False, f"{said} not the moments of every example of the global batch.")
    passed(
        "global_moments",
        "every replica returns the global batch's mean and variance (split 4 + 4 and 4 + 3), as one device.",
    )


# --------------------------------------------------------------------------- replica_dropout


def dropout_batch() -> np.ndarray:
    """A global batch of activations, all different and none 0 (so a 0 is a dropped one)."""
    return (np.arange(GLOBAL_BATCH * DROP_WIDTH, dtype="float32").reshape(GLOBAL_BATCH, DROP_WIDTH) + 1) / 8


@harness
def dropout_on_replicas(
    replica_dropout: Callable[[Any, float, Any], Any], strategy: Any, x: np.ndarray, rate: float
) -> list[list[np.ndarray]]:
    """``replica_dropout(rows, rate, step)`` on each replica's rows of ``x`` at steps 0, 0 and 1 of one
    traced function: per step, one NumPy output per replica."""
    import tensorflow as tf

    (rows,) = next(iter(distribute(strategy, [x])))
    run = tf.function(lambda s, r: strategy.run(lambda r: replica_dropout(r, rate, s), args=(r,)))
    local = strategy.experimental_local_results
    return [[np.asarray(v) for v in local(run(tf.constant(s, tf.int64), rows))] for s in (0, 0, 1)]


def check_replica_dropout(replica_dropout: Callable[[Any, float, Any], Any]) -> None:
    """``replica_dropout(x, rate, step)`` at steps 0, 0 and 1 of one traced function (``step`` an int64
    tensor, as in training): 2 replicas give one device's output, the same again, another mask at 1.
    One device also runs it at a second rate, where ``rate`` and ``1 - rate`` differ."""
    x = dropout_batch()

    def outputs(strategy: Any, rate: float = DROP_RATE) -> list[list[np.ndarray]]:
        steps = in_kernel(dropout_on_replicas, replica_dropout, Watched(strategy), x, rate)
        expect(
            len(steps) == 3 and all(len(s) == strategy.num_replicas_in_sync for s in steps),
            "The traced step did not return one output per replica at each of steps 0, 0 and 1.",
        )
        return [[np.asarray(v) for v in replicas] for replicas in steps]

    with exercise("replica_dropout"):
        for rate in (OTHER_DROP_RATE, DROP_RATE):  # the notebook's rate last: the checks below use it
            one, again, one_1 = (replicas[0] for replicas in outputs(checking_strategy(1), rate))
            expect(
                one.shape == x.shape,
                f"Return an array of the shape of x, {x.shape[1:]} per example, not {one.shape[1:]}.",
            )
            kept = one != 0
            expect(
                np.allclose(one[kept], x[kept] / (1 - rate), rtol=1e-5),
                f"At rate={rate} the kept activations are not divided by 1 - rate.",
            )
            # 48 draws: the kept share of a right mask lies within 4 standard deviations (0.29 at most).
            expect(
                abs(kept.mean() - (1 - rate)) < 0.3,
                f"At rate={rate} yours drops {1 - kept.mean():.2f} of the activations, not about {rate:g}.",
            )
        expect(
            np.array_equal(again, one),
            "On one device, step 0 run twice gave two different masks: the run is not reproducible.",
        )
        expect(
            not np.array_equal(one_1 != 0, kept),
            "Steps 0 and 1 drew the same mask in one traced function: put the step into the seed.",
        )
        two, _, two_1 = outputs(two_replicas())
        expect(
            not np.array_equal(two[0] != 0, two[1] != 0),
            "On 2 replicas both replicas drew the same mask for their 4 examples, as "
            "keras.layers.Dropout does.",
        )
        expect(
            np.array_equal(np.concatenate(two), one) and np.array_equal(np.concatenate(two_1), one_1),
            "On 2 replicas the masks differ but are not one device's: they depend on the replica "
            "(its id in the seed?).",
        )
    passed(
        "replica_dropout",
        "2 replicas drop what one device drops, example by example, at steps 0 and 1 of one traced function.",
    )
