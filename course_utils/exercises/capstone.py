"""Notebook 10 (capstone): its checks, graded by :func:`course_utils.compare.same_update`.

The capstone's single-device script (the same constants and code as the notebook's cell) is here
too: it is the one-device reference the checks compare the student's distributed step with, so a
student's capstone gets the same verdict and hint as ``check_same_update`` gives any step.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from ..lessons.reference import check_batch, step_with_loss
from ..runtime import import_tensorflow as _tf

#: The script's settings: an L2 penalty, shirts weighted 3x, clipping by the global norm.
L2 = 1e-3
SHIRT = 6
SHIRT_WEIGHT = 3.0
CLIP_NORM = 1.0
LEARNING_RATE = 0.1
CHECK_BATCH = 32  # global batch of the checks: 8 examples per replica on 4
CHECK_STEPS = 2


def make_model(seed: int = 0) -> Any:
    """Flatten -> Dense(32, ReLU, L2 penalty) -> Dense(10) logits."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(
                32, activation="relu", kernel_initializer=init, kernel_regularizer=keras.regularizers.L2(L2)
            ),
            keras.layers.Dense(10, kernel_initializer=init),
        ],
        name="capstone_mlp",
    )


def sample_weights(labels: Any) -> np.ndarray:
    """3.0 for shirts, 1.0 for everything else."""
    return np.where(np.asarray(labels) == SHIRT, SHIRT_WEIGHT, 1.0).astype(np.float32)


def check_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``CHECK_STEPS`` global batches of the course's built-in Fashion-MNIST-like images."""
    images, labels = check_batch(CHECK_BATCH * CHECK_STEPS, seed=3)
    return images, labels, sample_weights(labels)


def replica_counts() -> tuple[int, ...]:
    """1, 2 and 4 replicas when TensorFlow has 4 CPU devices (the notebook splits its CPU into 4),
    else 1 and 2 (the unit tests' process has 2)."""
    cpus = len(_tf().config.list_logical_devices("CPU"))
    return (1, 2, 4) if cpus >= 4 else (1, 2)


def _counts() -> str:
    counts = [str(n) for n in replica_counts()]
    return ", ".join(counts[:-1]) + " and " + counts[-1]


def make_optimizer() -> Any:
    import keras

    return keras.optimizers.SGD(LEARNING_RATE)


def make_metric() -> Any:
    import keras

    return keras.metrics.SparseCategoricalAccuracy(name="weighted_accuracy")


def _script_loss(labels: Any, logits: Any, weights: Any, model_losses: Any, global_batch_size: int) -> Any:
    import keras

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return loss_fn(labels, logits, sample_weight=weights) + _tf().add_n(model_losses)


def _script_clip(gradients: Any, clip_norm: float) -> Any:
    return _tf().clip_by_global_norm(gradients, clip_norm)[0]


#: The single-device script's step, in the factory form the check runs (the reference) ...
make_script_step = step_with_loss(_script_loss, _script_clip, CLIP_NORM)
#: ... and without its clipping: the reference for the loss alone.
_unclipped_script_step = step_with_loss(_script_loss)


def same_update(
    make_train_step: Any, *, reference: Any = make_script_step, **kwargs: Any
) -> compare.SameUpdate:
    """:func:`course_utils.compare.same_update` on the capstone's model, data and optimizer,
    compared with the script's step on one device (``reference=None``: with the port's own run on
    1 replica)."""
    options: dict[str, Any] = dict(
        make_model=make_model,
        make_optimizer=make_optimizer,
        make_metric=make_metric,
        reference=reference,
        replicas=replica_counts(),
    )
    options.update(kwargs)
    return compare.same_update(make_train_step, *check_data(), **options)


# --------------------------------------------------------------------------- the checks


def check_naive_loss_prediction(prediction: Any, measured: float) -> None:
    """``PREDICTION``: the loss the naive port reports on 4 replicas at its first step."""
    with exercise("naive_loss_prediction"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        expect(
            isinstance(prediction, (int, float, np.floating)) and not isinstance(prediction, bool),
            f"Set PREDICTION to a number (got {prediction!r}).",
        )
        data, penalty = script_first_loss()
        value = float(prediction)
        if abs(value - (data + penalty)) < 1e-3 and abs(measured - (data + penalty)) > 1e-3:
            expect(
                False,
                f"You predicted the one-device loss {data + penalty:.4f}. The naive port "
                "adds the whole penalty on each of the 4 replicas, and SUM adds the 4 "
                f"replicas' losses: it reported {measured:.4f}.",
            )
        if abs(value - 4 * (data + penalty)) < 1e-3:
            expect(
                False,
                "Each replica's data loss is its share of the global batch "
                "(compute_average_loss divides by the global batch), so the 4 shares add up to "
                f"the one-device data loss {data:.4f}, not 4x it; it reported {measured:.4f}.",
            )
        expect(
            abs(value - measured) < 1e-3,
            f"You predicted {value:.4f}; the naive port reported {measured:.4f} on 4 replicas "
            f"(data loss {data:.4f}, penalty {penalty:.4f} on one device).",
        )
    passed(
        "naive_loss_prediction",
        f"{measured:.4f} = the data loss + 4 x the penalty: SUM adds the penalty 4 times.",
    )


def script_first_loss() -> tuple[float, float]:
    """The script's first-step data loss and penalty on the check data, on one device."""
    tf = _tf()
    import keras

    images, labels, weights = check_data()
    model = make_model()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logits = model(images[:CHECK_BATCH], training=True)
    data = float(loss_fn(labels[:CHECK_BATCH], logits, sample_weight=weights[:CHECK_BATCH]))
    return data, float(tf.add_n(model.losses))


def check_capstone_loss(capstone_loss: Callable[..., Any]) -> None:
    """``capstone_loss(labels, logits, sample_weight, model_losses, global_batch_size)``: the
    per-replica loss whose SUM over replicas is the script's loss, with the same gradients."""
    with exercise("capstone_loss"):
        result = same_update(step_with_loss(capstone_loss), reference=_unclipped_script_step)
        expect(result.ok, result.hint)
    passed("capstone_loss", f"the script's update, loss and metric on {_counts()} replicas.")


def check_capstone_clip(capstone_clip: Callable[[list, float], Any]) -> None:
    """``capstone_clip(gradients, clip_norm)``, called in each replica: what each replica hands to
    ``apply_gradients`` (which adds them up) so that the sum is the one-device clipped gradient."""
    tf = _tf()
    with exercise("capstone_clip"):
        # Two replicas whose gradients are each shorter than the clip norm; their sum is longer.
        shares = [np.array([0.6, 0.0, 0.2], np.float32), np.array([0.5, 0.3, 0.0], np.float32)]
        big = [np.array([3.0, -1.0, 0.0], np.float32), np.array([0.0, 2.0, 1.0], np.float32)]
        for case, clip_norm in ((shares, 1.0), (big, 1.0), (shares, 5.0)):
            total = np.sum(case, axis=0)
            want, _ = tf.clip_by_global_norm([tf.constant(total)], clip_norm)
            want = want[0].numpy()
            one = np.asarray(capstone_clip([tf.constant(total)], clip_norm)[0])
            expect(
                np.allclose(one, want, atol=1e-6),
                f"On one device, clipping {total.tolist()} to norm {clip_norm} should give "
                f"{np.round(want, 4).tolist()}, got {np.round(one, 4).tolist()}.",
            )
            strategy = compare.checking_strategy(2)
            values = tf.constant(np.stack(case))

            @tf.function
            def run(values: Any = values, clip_norm: float = clip_norm) -> Any:
                def replica() -> Any:
                    index = tf.distribute.get_replica_context().replica_id_in_sync_group
                    return capstone_clip([tf.gather(values, index)], clip_norm)[0]

                return compare.sum_replicas(strategy, strategy.run(replica))

            got = run().numpy()
            if np.allclose(got, want, atol=1e-5):
                continue
            local = sum(tf.clip_by_global_norm([tf.constant(s)], clip_norm)[0][0].numpy() for s in case)
            expect(
                not np.allclose(got, local, atol=1e-5),
                f"Each replica clipped its own gradient (norms {', '.join(f'{np.linalg.norm(s):.2f}' for s in case)}) "
                f"against {clip_norm}, but one device clips their sum (norm {np.linalg.norm(total):.2f}): "
                "clip by the norm of the all-reduced gradient (tf.distribute.get_replica_context().all_reduce).",
            )
            f = compare.factor(got, want)
            expect(
                not abs(f - 2.0) < 1e-3,
                "The replicas' results add up to 2.00x the clipped gradient: apply_gradients adds "
                "the replicas' gradients itself, so each replica must return its own share, "
                "scaled, not the all-reduced total.",
            )
            expect(
                False,
                f"On 2 replicas the clipped gradients add up to {np.round(got, 4).tolist()}; "
                f"one device gives {np.round(want, 4).tolist()} ({f:.2f}x).",
            )
    passed("capstone_clip", "the replicas' shares add up to the one-device clipped gradient.")


def check_capstone_step(make_train_step: Callable[..., Any]) -> compare.SameUpdate:
    """``make_train_step(model, optimizer, metric, global_batch_size)``: the whole per-replica
    step, compared with the single-device script on 1, 2 and 4 replicas."""
    with exercise("capstone_step"):
        result = same_update(make_train_step)
        expect(result.ok, result.hint)
    passed("capstone_step", f"weights, loss and weighted accuracy match the script on {_counts()} replicas.")
    return result
