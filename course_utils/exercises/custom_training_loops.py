"""Checks for notebook 04, custom training loops.

Every check runs the student's code twice from the same weights and the same global batch: on
one device and on a 2-replica ``MirroredStrategy`` over virtual CPUs, and compares both runs with
a single-device reference (:mod:`course_utils.reference`). A step that averages over the
replica's own examples (``tf.reduce_mean``) is right on one replica and exactly 2x off on two,
so these checks catch it whatever strategy the notebook itself runs under.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import reference as ref
from ..checks import exercise, expect, expect_close, passed
from ..errors import ExerciseError, ReplicaCountError

#: Penalties passed as ``model_losses`` in the compute_loss check (their sum is 0.5).
PENALTIES = (0.3, 0.2)


def _tf() -> Any:
    from ..runtime import import_tensorflow

    return import_tensorflow()


def _two_replicas() -> Any:
    try:
        return ref.checking_strategy()
    except ReplicaCountError as error:
        raise ExerciseError(str(error)) from None


def _unfinished_dependency(error: NotImplementedError, own_id: str) -> None:
    """Raise a clear hint when the placeholder that fired belongs to another exercise."""
    text = str(error)
    for other in ("compute_loss", "train_step", "distributed_train_step"):
        if other != own_id and f"Exercise {other}:" in text:
            raise ExerciseError(
                f"your code calls the function of exercise {other}, which is not done yet. "
                f"Finish {other} (and run its cell) first, then run this check again."
            ) from None


def _cross_entropy(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


def _scalar(value: Any, what: str) -> float:
    tf = _tf()
    expect(
        not isinstance(value, tf.distribute.DistributedValues),
        f"{what} is still one value per replica (a PerReplica). Combine the replicas' losses into "
        "one number with strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None).",
    )
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    expect(
        array.shape == (),
        f"{what} should be one number (shape ()), got shape {array.shape}. Sum the per-example "
        "losses and divide by the global batch size: tf.nn.compute_average_loss does both.",
    )
    return float(array)


# --------------------------------------------------------------------------- compute_loss


def check_compute_loss(compute_loss: Callable[[Any, Any, Any, int], Any]) -> None:
    """``compute_loss(labels, logits, model_losses, global_batch_size)``: the loss one replica
    contributes, so that the replicas' losses summed equal the single-device loss."""
    tf = _tf()
    with exercise("compute_loss"):
        _, labels = ref.check_batch(ref.CHECK_BATCH)
        logits = np.random.default_rng(4).normal(0.0, 2.0, (len(labels), 10)).astype(np.float32)
        cross_entropy = _cross_entropy(labels, logits.astype(np.float64))
        penalties = [tf.constant(p) for p in PENALTIES]
        penalty = float(sum(PENALTIES))
        n = len(labels)

        # 1. One device, no strategy.
        value = _scalar(compute_loss(tf.constant(labels), tf.constant(logits), penalties, n), "Your loss")
        if abs(value - cross_entropy.mean()) < 1e-4:
            raise ExerciseError(
                "on one device your loss is the mean cross-entropy without the penalties: add the "
                "regularization losses, tf.nn.scale_regularization_loss(tf.add_n(model_losses)), "
                "when model_losses is not empty."
            )
        expect_close(
            value,
            cross_entropy.mean() + penalty,
            "On one device, with no strategy, the loss should be the mean cross-entropy over the "
            "batch plus the sum of model_losses. Use the per-example loss (reduction=None).",
            rtol=1e-4,
        )

        # 2. Two replicas, each with half the batch; the per-replica losses are summed.
        strategy = _two_replicas()

        def two_replicas(global_batch_size: int, model_losses: list) -> float:
            dataset = tf.data.Dataset.from_tensor_slices((labels, logits)).batch(n)
            inputs = next(iter(strategy.experimental_distribute_dataset(dataset)))

            @tf.function
            def run(inputs: Any) -> Any:
                def replica_fn(batch_labels: Any, batch_logits: Any) -> Any:
                    return compute_loss(batch_labels, batch_logits, model_losses, global_batch_size)

                per_replica = strategy.run(replica_fn, args=inputs)
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            return _scalar(run(inputs), "The loss of one replica")

        try:
            data_part = two_replicas(n, [])
        except (ExerciseError, NotImplementedError):
            raise
        except Exception as error:
            raise ExerciseError(
                f"with model_losses=[] (a model without regularizers) your code raised "
                f"{type(error).__name__}. Add the penalty only when there is one: "
                "`if model_losses: loss += ...`."
            ) from None
        expect_close(
            data_part,
            cross_entropy.mean(),
            "On 2 replicas (8 examples each) the replicas' losses summed should equal the "
            "single-device mean cross-entropy, and they do not, although one device was right. "
            "Each replica must divide the sum of its per-example losses by the GLOBAL batch size, "
            "not average over its own examples (tf.reduce_mean): "
            "tf.nn.compute_average_loss(per_example_loss, "
            "global_batch_size=global_batch_size)",
            rtol=1e-4,
        )
        with_penalty = two_replicas(n, penalties)
        counted = (with_penalty - data_part) / penalty
        expect(
            abs(counted - 1.0) < 1e-3,
            f"On 2 replicas the penalties count {counted:.2f} times in the summed loss instead of "
            "once: every replica adds them, so each must add its share. Wrap them in "
            "tf.nn.scale_regularization_loss(tf.add_n(model_losses)), which divides by the number "
            "of replicas.",
        )

        # 3. A short last batch: 16 examples when a full global batch has 32.
        short = two_replicas(2 * n, penalties)
        expect_close(
            short,
            cross_entropy.sum() / (2 * n) + penalty,
            "Divide by the global_batch_size argument, not by the size of the batch at hand: "
            "called with 16 examples and global_batch_size=32 (the short last batch of an "
            "epoch), the loss should be the sum of the per-example losses / 32. Pass "
            "global_batch_size=global_batch_size to tf.nn.compute_average_loss.",
            rtol=1e-4,
        )
    passed("compute_loss", "on 2 replicas the summed loss equals the single-device loss, penalties counted once.")


# --------------------------------------------------------------------------- train_step


def _run_own_step(strategy: Any, make_train_step: Any, weights: Any, images: Any, labels: Any) -> ref.StepResult:
    try:
        return ref.run_train_step(strategy, make_train_step, weights, images, labels)
    except NotImplementedError as error:
        _unfinished_dependency(error, "train_step")
        raise


def _diagnose_update(result: ref.StepResult, reference: ref.StepResult, where: str) -> None:
    if np.allclose(result.update, 0.0):
        raise ExerciseError(
            f"{where} the weights did not change. Compute the gradients of the loss with the "
            "tape and apply them: optimizer.apply_gradients(zip(gradients, "
            "model.trainable_variables))."
        )
    if ref.same(result.update, reference.update):
        return
    f = ref.factor(result.update, reference.update)
    if where.startswith("On 2") and abs(f - 2.0) < 0.05:
        raise ExerciseError(
            f"{where} every weight moved {f:.2f}x as far as on a single device, although one "
            "replica was right. The loss a replica returns must be its per-example losses summed "
            "and divided by the GLOBAL batch size (compute_loss with global_batch_size), not "
            "tf.reduce_mean over its own examples: the strategy sums the replicas' gradients."
        )
    raise ExerciseError(
        f"{where} the update of the weights differs from the single-device reference (it is "
        f"{f:.2f}x the reference). Compute the loss with compute_loss(labels, logits, "
        "model.losses, global_batch_size) inside the GradientTape, with training=True, and apply "
        "the gradients of exactly that loss once."
    )


def check_train_step(make_train_step: ref.TrainStepFactory) -> None:
    """``make_train_step(model, optimizer, accuracy, global_batch_size)`` returns ``train_step(inputs)``:
    its update on 1 device and on 2 replicas must equal the single-device reference."""
    tf = _tf()
    with exercise("train_step"):
        images, labels = ref.check_batch(ref.CHECK_BATCH)
        weights = ref.initial_weights()
        reference = ref.reference_step(weights, images, labels)

        for strategy, where in (
            (tf.distribute.get_strategy(), "On one device,"),
            (_two_replicas(), "On 2 replicas,"),
        ):
            result = _run_own_step(strategy, make_train_step, weights, images, labels)
            _diagnose_update(result, reference, where)
            expect_close(
                result.loss,
                reference.loss,
                f"{where} the loss your step returns (summed over the replicas) should be the "
                "single-device loss: mean cross-entropy plus the penalties. Return the loss that "
                "compute_loss gave you.",
                rtol=1e-4,
            )
            expect(
                result.accuracy is not None and abs(result.accuracy - reference.accuracy) < 1e-6,
                f"{where} the accuracy metric reads {result.accuracy:.4f} after the step, expected "
                f"{reference.accuracy:.4f}: update it once per step with "
                "accuracy.update_state(labels, logits).",
            )
    passed("train_step", "1 device and 2 replicas both apply the single-device update.")


# --------------------------------------------------------------------------- distributed_train_step


def check_distributed_train_step(make_distributed_train_step: Callable[[Any, Any], Any]) -> None:
    """``make_distributed_train_step(strategy, train_step)`` returns a ``tf.function`` that runs
    ``train_step`` on every replica and returns the global loss: checked on 1 and 2 replicas."""
    tf = _tf()
    with exercise("distributed_train_step"):
        images, labels = ref.check_batch(ref.CHECK_BATCH)
        weights = ref.initial_weights()
        reference = ref.reference_step(weights, images, labels)

        for strategy, where in (
            (tf.distribute.get_strategy(), "On one device,"),
            (_two_replicas(), "On 2 replicas,"),
        ):
            model, optimizer, accuracy = ref.build_for_step(strategy, weights, ref.CHECK_LEARNING_RATE)
            train_step = ref.tutorial_train_step(model, optimizer, accuracy, len(labels))
            step = make_distributed_train_step(strategy, train_step)
            expect(
                callable(step),
                "make_distributed_train_step should return a function (the distributed step), "
                f"got {type(step).__name__}.",
            )
            expect(
                isinstance(step, tf.types.experimental.PolymorphicFunction),
                "Decorate the distributed step with @tf.function: the replicas then run as one "
                "graph, and a step does not go back to Python.",
            )
            before = ref.flat(model.trainable_variables)
            loss = _scalar(step(ref.distribute_batch(strategy, images, labels)), "The value your step returns")
            update = ref.flat(model.trainable_variables) - before
            if where.startswith("On 2") and abs(loss / reference.loss - 0.5) < 0.01:
                raise ExerciseError(
                    f"{where} your step returns {loss:.4f}, half the single-device loss "
                    f"{reference.loss:.4f}, although one replica was right. Each replica's loss is "
                    "already divided by the global batch size, so the global loss is their SUM: "
                    "strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None), "
                    "not ReduceOp.MEAN or tf.reduce_mean of the replicas' losses."
                )
            expect_close(
                loss,
                reference.loss,
                f"{where} the step should return the single-device loss: run train_step on every "
                "replica with strategy.run(train_step, args=(dataset_inputs,)) and reduce the "
                "per-replica losses with ReduceOp.SUM.",
                rtol=1e-4,
            )
            expect(
                ref.same(update, reference.update),
                f"{where} the weights moved {ref.factor(update, reference.update):.2f}x as far as "
                "one single-device step: call strategy.run(train_step, ...) exactly once per step.",
            )
    passed("distributed_train_step", "1 device and 2 replicas both return the single-device loss and apply one update.")
