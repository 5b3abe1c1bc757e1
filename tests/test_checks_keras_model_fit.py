"""The checks of notebook 03 pass on right answers and give the right hint for planted mistakes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import keras_model_fit as ex

# Keras 3.15 warns on every fit() with a tf.data.Dataset that fit's shuffle=True default is ignored.
pytestmark = pytest.mark.filterwarnings("ignore:`shuffle=True` was passed:UserWarning")


def _scale(image, label):
    import tensorflow as tf

    return tf.cast(image, tf.float32) / 255.0, label


def _compile(model):
    import keras

    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _make_fit(*, scope=True, compile_in_scope=True, global_batch=True, fit=True, scale=True):
    """A fit_distributed with one mistake switched on."""

    def fit_distributed(strategy, images, labels, per_replica_batch=32, epochs=1):
        import tensorflow as tf

        from course_utils.models import keras_tutorial_cnn

        batch = per_replica_batch * strategy.num_replicas_in_sync if global_batch else per_replica_batch
        dataset = tf.data.Dataset.from_tensor_slices((images, labels))
        if scale:
            dataset = dataset.map(_scale)
        dataset = dataset.batch(batch)
        if scope:
            with strategy.scope():
                model = keras_tutorial_cnn(seed=0)
                if compile_in_scope:
                    _compile(model)
            if not compile_in_scope:
                _compile(model)
        else:
            model = _compile(keras_tutorial_cnn(seed=0))
        if fit:
            model.fit(dataset, epochs=epochs, verbose=0)
        return model

    return fit_distributed


def _hint(check, answer) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer)
    return str(info.value)


# --------------------------------------------------------------------------- fit_distributed


def test_fit_distributed_passes(capsys):
    ex.check_fit_distributed(_make_fit())
    assert "[pass] fit_distributed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(scope=False), "outside `with strategy.scope():`"),
        (dict(compile_in_scope=False), "optimizer was created outside"),
        (dict(global_batch=False), "per-replica batch"),
        (dict(fit=False), "no step"),
        (dict(scale=False), "weights differ from the single-device script"),
    ],
)
def test_fit_distributed_mistakes(mistake, hint):
    message = _hint(ex.check_fit_distributed, _make_fit(**mistake))
    assert message.startswith("Exercise fit_distributed:")
    assert hint in message


def test_fit_distributed_adam_compiled_outside_the_scope():
    import keras
    import tensorflow as tf

    from course_utils.models import keras_tutorial_cnn

    def fit_distributed(strategy, images, labels, per_replica_batch=32, epochs=1):
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).map(_scale)
        with strategy.scope():
            model = keras_tutorial_cnn(seed=0)
        model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
        model.fit(dataset.batch(per_replica_batch * 2), epochs=epochs, verbose=0)
        return model

    message = _hint(ex.check_fit_distributed, fit_distributed)
    assert "compiled outside" in message and "0x" not in message


def test_fit_distributed_unfinished():
    def fit_distributed(strategy, images, labels, per_replica_batch=32, epochs=1):
        raise NotImplementedError("Exercise fit_distributed: replace this line with your code")

    assert "is not done yet" in _hint(ex.check_fit_distributed, fit_distributed)


def test_fit_distributed_returns_nothing():
    def fit_distributed(strategy, images, labels, per_replica_batch=32, epochs=1):
        _make_fit()(strategy, images, labels, per_replica_batch, epochs)

    assert "return model" in _hint(ex.check_fit_distributed, fit_distributed)


# --------------------------------------------------------------------------- scaled_batch_and_lr


def _right_scaling(per_replica_batch, replicas, base_lr, base_batch):
    global_batch = per_replica_batch * replicas
    return global_batch, base_lr * global_batch / base_batch


def test_scaled_batch_and_lr_passes(capsys):
    ex.check_scaled_batch_and_lr(_right_scaling)
    assert "[pass] scaled_batch_and_lr" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda p, r, lr, b: (p * r, lr * r), "scaled the learning rate by the number of replicas"),
        (lambda p, r, lr, b: (p // r, lr * p / b), "should be 64 (per-replica batch x replicas)"),
        (lambda p, r, lr, b: (p * r / 1, lr * p * r / b), "should be an int"),
        # the rate kept as tuned on one device: the notebook's 2-replica run then learns less per epoch
        (lambda p, r, lr, b: (p * r, lr), "you kept base_lr"),
        (lambda p, r, lr, b: (p * r, lr * p * r / b * 1.5), "base_lr * global_batch / base_batch"),
        (lambda p, r, lr, b: [p * r, lr * p * r / b], "should return a tuple"),
    ],
)
def test_scaled_batch_and_lr_mistakes(answer, hint):
    message = _hint(ex.check_scaled_batch_and_lr, answer)
    assert message.startswith("Exercise scaled_batch_and_lr:")
    assert hint in message


# --------------------------------------------------------------------------- fit_split_prediction

RIGHT_SPLIT = {"steps_per_epoch": 47, "last_step_per_replica": 56, "iterations": 47}


def test_fit_split_prediction_passes(capsys):
    ex.check_fit_split_prediction(dict(RIGHT_SPLIT))
    out = capsys.readouterr().out
    assert "[pass] fit_split_prediction" in out
    # measured on 2 replicas next to one device, and printed
    assert (
        "2 replicas: global batch 128, 47 steps, last step 56 + 56 examples, optimizer.iterations = 47" in out
    )
    assert "one device: global batch  64, 94 steps, last step 48 examples, optimizer.iterations = 94" in out


@pytest.mark.parametrize(
    "change, hint",
    [
        # batched with the per-replica batch, as on one device
        (dict(steps_per_epoch=94), "is the one-device count"),
        (dict(steps_per_epoch=46), "round up"),
        # the last batch not split
        (dict(last_step_per_replica=112), "is the whole last batch"),
        # the last batch assumed full
        (dict(last_step_per_replica=64), "the last batch is shorter"),
        # each replica counted its own step
        (dict(iterations=94), "counts every replica's step"),
        (dict(iterations=1), "goes up by one per step of fit"),
    ],
)
def test_fit_split_prediction_mistakes(change, hint):
    message = _hint(ex.check_fit_split_prediction, {**RIGHT_SPLIT, **change})
    assert message.startswith("Exercise fit_split_prediction:")
    assert hint in message


@pytest.mark.parametrize(
    "prediction, hint",
    [
        (None, "Return a dict"),
        ({"steps": 47}, "Return a dict"),
        ({**RIGHT_SPLIT, "iterations": 47.0}, "whole number"),
    ],
)
def test_fit_split_prediction_malformed(prediction, hint):
    assert hint in _hint(ex.check_fit_split_prediction, prediction)


def test_fit_split_prediction_takes_the_notebooks_function(capsys):
    ex.check_fit_split_prediction(lambda: dict(RIGHT_SPLIT))
    assert "[pass] fit_split_prediction" in capsys.readouterr().out


def test_fit_split_prediction_unfinished():
    def predict_split():
        raise NotImplementedError("Exercise fit_split_prediction: replace this line with your code")

    assert "is not done yet" in _hint(ex.check_fit_split_prediction, predict_split)


def test_split_question_has_a_short_last_batch():
    # The exercise is only interesting when the last global batch is short and splits evenly.
    global_batch = 2 * ex.SPLIT_PER_REPLICA
    assert ex.SPLIT_EXAMPLES % global_batch not in (0, ex.SPLIT_PER_REPLICA)
    assert (ex.SPLIT_EXAMPLES % global_batch) % 2 == 0


# --------------------------------------------------------------------------- latest_checkpoint


def _right_latest(folder):
    found = []
    for path in Path(folder).glob("ckpt_*.weights.h5"):
        match = re.fullmatch(r"ckpt_(\d+)\.weights\.h5", path.name)
        if match:
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def test_latest_checkpoint_passes(capsys):
    ex.check_latest_checkpoint(_right_latest)
    assert "[pass] latest_checkpoint" in capsys.readouterr().out


def _text_order(folder):
    paths = sorted(Path(folder).glob("*.weights.h5"))
    return paths[-1] if paths else None


def _newest_file(folder):
    paths = list(Path(folder).glob("*.weights.h5"))
    return max(paths, key=lambda p: p.stat().st_mtime) if paths else None


def _any_file(folder):
    paths = sorted(Path(folder).iterdir())
    return paths[0] if paths else None


def _raises_when_empty(folder):
    return max(Path(folder).glob("ckpt_*.weights.h5"), key=lambda p: int(p.name[5:-11]))


@pytest.mark.parametrize(
    "answer, hint",
    [
        (_text_order, "compared as text"),
        (_newest_file, "the file modified last"),
        (_any_file, "no `.weights.h5` checkpoint"),
        (_raises_when_empty, "your code raised ValueError"),
        (
            lambda folder: None if not list(Path(folder).glob("ckpt_*")) else "ckpt_12.weights.h5",
            "not just its name",
        ),
    ],
)
def test_latest_checkpoint_mistakes(answer, hint):
    message = _hint(ex.check_latest_checkpoint, answer)
    assert message.startswith("Exercise latest_checkpoint:")
    assert hint in message


def test_check_examples_are_even_over_two_replicas():
    # The fit check's numbers in its hints assume an exact split of the global batch.
    assert ex.CHECK_EXAMPLES % (2 * ex.CHECK_PER_REPLICA_BATCH) == 0
    assert math.ceil(ex.CHECK_EXAMPLES / 64) == 8
