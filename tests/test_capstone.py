"""Notebook 10: the same-update check (course_utils.compare, imported as lessons.capstone) on the capstone.

Each trap of docs/capstone.md's table is planted in an otherwise right capstone step and run on 1
and 2 replicas (the test process has 2 virtual CPUs); the hint must name it. The traps: the
penalty not scaled, the sample weights ignored, clipping that differs from one device (the
optimizer's global_clipnorm, and tf.clip_by_global_norm in the replica step), a metric updated
outside the replicas or from one replica, a reported loss that is a per-replica mean. Steps written
as other real code writes them are in test_compare.py.
"""

from __future__ import annotations

import textwrap

import pytest

from course_utils import run_python
from course_utils.errors import ExerciseError
from course_utils.exercises import capstone as ex
from course_utils.lessons import capstone

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SUM = "SUM"


def _tf():
    from course_utils.runtime import import_tensorflow

    return import_tensorflow()


def _per_example(labels, logits, weights):
    import keras

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return loss(labels, logits, sample_weight=weights)


def right_loss(labels, logits, weights, model_losses, global_batch_size):
    tf = _tf()
    return tf.nn.compute_average_loss(
        _per_example(labels, logits, weights), global_batch_size=global_batch_size
    ) + tf.nn.scale_regularization_loss(tf.add_n(model_losses))


def right_clip(gradients, clip_norm):
    tf = _tf()
    total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)
    return tf.clip_by_global_norm(gradients, clip_norm, use_norm=tf.linalg.global_norm(total))[0]


def _check(factory, **kwargs):
    data = ex.check_data()
    options = dict(
        make_model=ex.make_model,
        make_optimizer=ex.make_optimizer,
        make_metric=ex.make_metric,
        replicas=(1, 2),
    )
    options.update(kwargs)
    return capstone.check_same_update(factory, *data, **options)


def test_right_step_passes(capsys: pytest.CaptureFixture[str]) -> None:
    result = _check(ex.step_with_loss(right_loss, right_clip))
    assert result.ok and result.comparisons[2].same
    assert "[same update] weights, loss and metric match on 1, 2 replicas" in capsys.readouterr().out


def test_right_step_matches_the_single_device_script() -> None:
    result = _check(ex.step_with_loss(right_loss, right_clip), reference=ex.make_script_step)
    assert result.ok and set(result.comparisons) == {1, 2}


def test_penalty_not_scaled() -> None:
    def loss(labels, logits, weights, model_losses, global_batch_size):
        tf = _tf()
        return tf.nn.compute_average_loss(
            _per_example(labels, logits, weights), global_batch_size=global_batch_size
        ) + tf.add_n(model_losses)

    with pytest.raises(ExerciseError) as error:
        _check(ex.step_with_loss(loss, right_clip))
    assert "the penalty is added on every replica (its part of the update is 2.00x" in str(error.value)
    assert "tf.nn.scale_regularization_loss" in str(error.value)


def test_sample_weights_ignored() -> None:
    def loss(labels, logits, weights, model_losses, global_batch_size):
        return right_loss(labels, logits, None, model_losses, global_batch_size)

    with pytest.raises(ExerciseError, match="sample weights ignored: on one replica, setting half"):
        _check(ex.step_with_loss(loss, right_clip))


def test_clipping_in_the_optimizer_differs_from_one_device() -> None:
    import keras

    with pytest.raises(ExerciseError) as error:
        _check(
            ex.step_with_loss(right_loss),
            make_optimizer=lambda: keras.optimizers.SGD(ex.LEARNING_RATE, global_clipnorm=ex.CLIP_NORM),
        )
    assert "your optimizer's global_clipnorm=1.0 clips each replica's gradient" in str(error.value)


def test_clipping_each_replica_differs_from_one_device() -> None:
    def local_clip(gradients, clip_norm):
        return _tf().clip_by_global_norm(gradients, clip_norm)[0]

    with pytest.raises(ExerciseError, match="each replica clips its own gradient before the all-reduce"):
        _check(ex.step_with_loss(right_loss, local_clip))


def _distributed(metric_outside: str):
    tf = _tf()

    def make_step(strategy, model, optimizer, metric, global_batch_size):
        def replica_step(inputs):
            images, labels, weights = inputs
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = right_loss(labels, logits, weights, model.losses, global_batch_size)
            gradients = right_clip(tape.gradient(loss, model.trainable_variables), ex.CLIP_NORM)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            if metric_outside == "no":
                metric.update_state(labels, logits, sample_weight=weights)
            return loss, logits

        @tf.function
        def step(batch):
            loss, logits = strategy.run(replica_step, args=(batch,))
            _, labels, weights = batch
            if metric_outside == "per-replica values":
                metric.update_state(labels, logits, sample_weight=weights)
            elif metric_outside == "first replica":
                first = strategy.experimental_local_results
                metric.update_state(first(labels)[0], first(logits)[0], sample_weight=first(weights)[0])
            return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

        return step

    return make_step


def test_metric_inside_the_replicas_passes_in_a_distributed_step() -> None:
    assert _check(_distributed("no"), distributed=True).ok


def test_metric_updated_outside_the_replicas_fails_on_two() -> None:
    with pytest.raises(ExerciseError) as error:
        _check(_distributed("per-replica values"), distributed=True)
    assert "on 2 replicas the step raised" in str(error.value)
    assert "a metric updated outside the replicas" in str(error.value)


def test_metric_updated_from_one_replica_only() -> None:
    with pytest.raises(ExerciseError) as error:
        _check(_distributed("first replica"), distributed=True)
    assert "the weights and the loss match" in str(error.value)
    assert "update it inside the replica step" in str(error.value)


def test_loss_reported_as_a_per_replica_mean() -> None:
    tf = _tf()

    def make_train_step(model, optimizer, metric, global_batch_size):
        inner = ex.step_with_loss(right_loss, right_clip)(model, optimizer, metric, global_batch_size)

        def train_step(inputs):
            inner(inputs)
            images, labels, weights = inputs
            return tf.reduce_mean(_per_example(labels, model(images), weights))  # for display

        return train_step

    with pytest.raises(ExerciseError, match="the weights match but the reported loss is 2.00x"):
        _check(make_train_step)


def test_result_table_and_factors() -> None:
    result = capstone.same_update(
        ex.step_with_loss(right_loss),
        *ex.check_data(),
        make_model=ex.make_model,
        make_optimizer=lambda: __import__("keras").optimizers.SGD(0.1, global_clipnorm=1.0),
        make_metric=ex.make_metric,
        replicas=(1, 2),
    )
    assert not result.ok and not result.comparisons[2].weights_same
    assert result.comparisons[2].weight_factor > 1.1  # each replica clips its own gradient, not the sum
    assert "DIFFERS" in result.table()


def test_bad_batch_is_a_config_error() -> None:
    from course_utils.errors import ConfigError

    x, y, w = ex.check_data()
    with pytest.raises(ConfigError, match="every replica count"):
        capstone.same_update(
            ex.step_with_loss(right_loss),
            x[:30],
            y[:30],
            w[:30],
            make_model=ex.make_model,
            steps=1,
            replicas=(1, 4),
        )


def test_four_replicas_after_two_in_one_process() -> None:
    """A 4-replica MirroredStrategy after a 2-replica one aborts TensorFlow's all-reduces unless
    their collective keys differ; the check's strategies keep theirs apart (fresh process: 4 CPUs)."""
    code = textwrap.dedent(
        """
        import course_utils, tensorflow as tf
        course_utils.use_virtual_cpus(4)
        from course_utils.lessons import capstone
        from course_utils.exercises import capstone as ex
        from course_utils.strategies import mirrored_cpus
        mine = mirrored_cpus(2)   # the notebook's own strategy
        mine.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.0)))
        result = ex.same_update(ex.step_with_loss(RIGHT_LOSS, RIGHT_CLIP))
        print("counts", sorted(result.runs), "ok", result.ok)
        print(mine.reduce("SUM", mine.run(lambda: tf.constant(1.0)), axis=None).numpy())
        """
    )
    import inspect

    source = "import keras\nimport tensorflow as tf\n" + "\n".join(
        inspect.getsource(f) for f in (_tf, _per_example, right_loss, right_clip)
    )
    code = source + code.replace("RIGHT_LOSS", "right_loss").replace("RIGHT_CLIP", "right_clip")
    result = run_python(code, timeout=600)
    assert "counts [1, 2, 4] ok True" in result.stdout, result.stderr[-2000:]
    assert "2.0" in result.stdout
