"""The checks of notebook 04 pass on the tutorial's step and fail, with a hint, on each mistake.

Each check must fail on the blank student version (the placeholder) and on a step that uses
``tf.reduce_mean`` for the loss: right on one replica, 2x off on two.
"""

from __future__ import annotations

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import custom_training_loops as ex


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


@pytest.fixture(scope="module")
def loss_object():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def blank(*args, **kwargs):
    raise NotImplementedError("Exercise compute_loss: replace this line with your code")


def fails_with(check, answer, *needles) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    return message


# --------------------------------------------------------------------------- compute_loss


@pytest.fixture(scope="module")
def right_loss(tf, loss_object):
    def compute_loss(labels, logits, model_losses, global_batch_size):
        per_example_loss = loss_object(labels, logits)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    return compute_loss


def test_compute_loss_passes(right_loss, capsys) -> None:
    ex.check_compute_loss(right_loss)
    assert "[pass] compute_loss" in capsys.readouterr().out


def test_compute_loss_blank() -> None:
    fails_with(ex.check_compute_loss, blank, "Exercise compute_loss is not done yet")


def test_compute_loss_reduce_mean(tf, loss_object) -> None:
    def compute_loss(labels, logits, model_losses, global_batch_size):
        loss = tf.reduce_mean(loss_object(labels, logits))
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    fails_with(ex.check_compute_loss, compute_loss, "On 2 replicas", "GLOBAL batch size", "2.00x")


def test_compute_loss_keras_default_reduction(tf) -> None:
    """Keras 3 divides a default-reduction loss by the replicas itself (right for even splits),
    but it ignores global_batch_size, which the short-last-batch case catches."""
    import keras

    default = keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # sum_over_batch_size

    def compute_loss(labels, logits, model_losses, global_batch_size):
        loss = default(labels, logits)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    fails_with(ex.check_compute_loss, compute_loss, "global_batch_size=32")


def test_compute_loss_unscaled_penalty(tf, loss_object) -> None:
    def compute_loss(labels, logits, model_losses, global_batch_size):
        loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=global_batch_size)
        if model_losses:
            loss += tf.add_n(model_losses)
        return loss

    fails_with(ex.check_compute_loss, compute_loss, "count 2.00 times", "scale_regularization_loss")


def test_compute_loss_without_penalty(tf, loss_object) -> None:
    def compute_loss(labels, logits, model_losses, global_batch_size):
        return tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=global_batch_size)

    fails_with(ex.check_compute_loss, compute_loss, "without the penalties")


def test_compute_loss_empty_penalties(tf, loss_object) -> None:
    def compute_loss(labels, logits, model_losses, global_batch_size):
        loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=global_batch_size)
        return loss + tf.nn.scale_regularization_loss(tf.add_n(model_losses))

    fails_with(ex.check_compute_loss, compute_loss, "model_losses=[]", "if model_losses")


def test_compute_loss_ignores_global_batch_size(tf, loss_object) -> None:
    def compute_loss(labels, logits, model_losses, global_batch_size):
        loss = tf.nn.compute_average_loss(loss_object(labels, logits))  # per-replica size x replicas
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    fails_with(ex.check_compute_loss, compute_loss, "global_batch_size=32")


# --------------------------------------------------------------------------- train_step


def make_factory(tf, loss_fn, *, apply=True, update_metric=True):
    def make_train_step(model, optimizer, accuracy, global_batch_size):
        def train_step(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = loss_fn(labels, logits, model.losses, global_batch_size)
            gradients = tape.gradient(loss, model.trainable_variables)
            if apply:
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            if update_metric:
                accuracy.update_state(labels, logits)
            return loss

        return train_step

    return make_train_step


def test_train_step_passes(tf, right_loss, capsys) -> None:
    ex.check_train_step(make_factory(tf, right_loss))
    assert "[pass] train_step" in capsys.readouterr().out


def test_train_step_blank() -> None:
    def make_train_step(model, optimizer, accuracy, global_batch_size):
        def train_step(inputs):
            images, labels = inputs
            raise NotImplementedError("Exercise train_step: replace this line with your code")

        return train_step

    fails_with(ex.check_train_step, make_train_step, "Exercise train_step is not done yet")


def test_train_step_blank_compute_loss(tf) -> None:
    fails_with(ex.check_train_step, make_factory(tf, blank), "exercise compute_loss, which is not done yet")


def test_train_step_reduce_mean(tf, loss_object) -> None:
    def mean_loss(labels, logits, model_losses, global_batch_size):
        return tf.reduce_mean(loss_object(labels, logits)) + tf.add_n(model_losses)

    fails_with(ex.check_train_step, make_factory(tf, mean_loss), "On 2 replicas", "2.00x", "tf.reduce_mean")


def test_train_step_without_update(tf, right_loss) -> None:
    fails_with(ex.check_train_step, make_factory(tf, right_loss, apply=False), "did not change")


def test_train_step_without_metric(tf, right_loss) -> None:
    fails_with(ex.check_train_step, make_factory(tf, right_loss, update_metric=False), "accuracy.update_state")


# --------------------------------------------------------------------------- distributed_train_step


def test_distributed_train_step_passes(tf, capsys) -> None:
    def make_distributed_train_step(strategy, train_step):
        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

        return distributed_train_step

    ex.check_distributed_train_step(make_distributed_train_step)
    assert "[pass] distributed_train_step" in capsys.readouterr().out


def test_distributed_train_step_blank() -> None:
    def make_distributed_train_step(strategy, train_step):
        raise NotImplementedError("Exercise distributed_train_step: replace this line with your code")

    fails_with(ex.check_distributed_train_step, make_distributed_train_step, "is not done yet")


def test_distributed_train_step_reduce_mean(tf) -> None:
    def make_distributed_train_step(strategy, train_step):
        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return tf.reduce_mean(strategy.experimental_local_results(per_replica_losses))

        return distributed_train_step

    fails_with(ex.check_distributed_train_step, make_distributed_train_step, "On 2 replicas", "half", "SUM")


def test_distributed_train_step_mean_reduction(tf) -> None:
    def make_distributed_train_step(strategy, train_step):
        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica_losses, axis=None)

        return distributed_train_step

    fails_with(ex.check_distributed_train_step, make_distributed_train_step, "half", "ReduceOp.SUM")


def test_distributed_train_step_not_reduced(tf) -> None:
    def make_distributed_train_step(strategy, train_step):
        @tf.function
        def distributed_train_step(dataset_inputs):
            return strategy.run(train_step, args=(dataset_inputs,))

        return distributed_train_step

    fails_with(ex.check_distributed_train_step, make_distributed_train_step, "PerReplica")


def test_distributed_train_step_without_tf_function(tf) -> None:
    def make_distributed_train_step(strategy, train_step):
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

        return distributed_train_step

    fails_with(ex.check_distributed_train_step, make_distributed_train_step, "@tf.function")


# --------------------------------------------------------------------------- reference helpers


def test_reference_matches_tutorial_step_on_two_replicas(two_replicas) -> None:
    from course_utils import reference as ref

    images, labels = ref.check_batch()
    weights = ref.initial_weights()
    expected = ref.reference_step(weights, images, labels)
    got = ref.run_train_step(two_replicas, ref.tutorial_train_step, weights, images, labels)
    assert got.replicas == 2
    assert ref.same(got.update, expected.update)
    assert abs(got.loss - expected.loss) < 1e-4 * expected.loss
    assert got.accuracy == pytest.approx(expected.accuracy)
    assert ref.factor(2 * got.update, expected.update) == pytest.approx(2.0)


def test_stable_error_line() -> None:
    from course_utils.reference import stable_error_line

    stderr = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "Traceback (most recent call last):\n"
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:\n"
        "Detected at node cond/Placeholder_1 defined at (most recent call last):\n"
        "2 root error(s) found.\n"
        "  (0) INVALID_ARGUMENT:  You must feed a value for placeholder tensor "
        "'cond/else/_1/cond/Placeholder_1' with dtype int32\n"
        "0 successful operations. [Op:__inference_fn_with_cond_1815]\n"
    )
    assert stable_error_line(stderr) == (
        "InvalidArgumentError: You must feed a value for placeholder tensor '...'"
    )
    assert stable_error_line("ValueError: at 0x7f00aa [Op:Add]") == "ValueError: at 0x..."
    assert stable_error_line("all good") == ""
