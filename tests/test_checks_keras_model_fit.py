"""The checks of notebook 03 pass on right answers and give the right hint for planted mistakes."""

from __future__ import annotations

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import keras_model_fit as ex

# Keras 3.15 warns on every fit() with a tf.data.Dataset that fit's shuffle=True default is ignored.
pytestmark = pytest.mark.filterwarnings("ignore:`shuffle=True` was passed:UserWarning")


def _hint(check, answer) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer)
    return str(info.value)


def _compile(model):
    import keras

    model.compile(
        optimizer=keras.optimizers.SGD(ex.SCRIPT_LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


# --------------------------------------------------------------------------- fit_on_replicas


def _make_script(*, scope=True, compile_in_scope=True, global_batch=True, fit=True, lr=None):
    """A fit_on_replicas with the chosen mistakes switched on (all off: the right answer)."""

    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        import keras
        import tensorflow as tf

        batch = per_replica_batch * strategy.num_replicas_in_sync if global_batch else per_replica_batch
        batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch)
        if scope:
            with strategy.scope():
                model = make_model()
                if compile_in_scope:
                    _compile(model)
            if not compile_in_scope:
                _compile(model)
        else:
            model = _compile(make_model())
        if lr is not None:
            model.compile(optimizer=keras.optimizers.SGD(lr), loss=model.loss)
        if fit:
            model.fit(batches, epochs=1, verbose=0)
        return model

    return fit_on_replicas


def test_fit_on_replicas_passes(capsys):
    ex.check_fit_on_replicas(_make_script())
    assert "[pass] fit_on_replicas" in capsys.readouterr().out


@pytest.mark.parametrize(
    "global_batch", [lambda per_replica: per_replica * 2, lambda per_replica: 32], ids=["x 2", "32"]
)
def test_fit_on_replicas_hard_coded_replicas(global_batch):
    """A global batch that ignores the strategy is right on 2 replicas only: 1 replica catches it."""

    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        import tensorflow as tf

        with strategy.scope():
            model = _compile(make_model())
        batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch(per_replica_batch))
        model.fit(batches, epochs=1, verbose=0)
        return model

    message = _hint(ex.check_fit_on_replicas, fit_on_replicas)
    assert "On 1 replica fit took 4 steps for 128 examples" in message and "hard-coded `* 2`" in message
    assert "num_replicas_in_sync" not in message and "not 8" not in message  # the answer's code, its steps


def _numpy_route(shuffle):
    """fit on the NumPy arrays with batch_size=the global batch: fit shuffles them unless told not to."""

    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        with strategy.scope():
            model = _compile(make_model())
        global_batch = per_replica_batch * strategy.num_replicas_in_sync
        model.fit(images, labels, batch_size=global_batch, epochs=1, verbose=0, shuffle=shuffle)
        return model

    return fit_on_replicas


def test_fit_on_replicas_numpy_route(capsys):
    message = _hint(ex.check_fit_on_replicas, _numpy_route(shuffle=True))
    assert "off one device trained on batches of 32" in message
    assert "fit shuffles NumPy arrays" in message and "shuffle=False" in message
    ex.check_fit_on_replicas(_numpy_route(shuffle=False))
    assert "[pass] fit_on_replicas" in capsys.readouterr().out


def test_fit_on_replicas_other_rate_is_off_one_device():
    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        import keras
        import tensorflow as tf

        batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(2 * per_replica_batch)
        with strategy.scope():
            model = make_model()
            model.compile(
                optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(True)
            )
        model.fit(batches, epochs=1, verbose=0)
        return model

    assert "off one device trained on batches of 32" in _hint(ex.check_fit_on_replicas, fit_on_replicas)


def test_fit_on_replicas_two_epochs():
    """Two epochs in global batches take as many steps as one in per-replica batches."""

    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        import tensorflow as tf

        with strategy.scope():
            model = _compile(make_model())
        global_batch = per_replica_batch * strategy.num_replicas_in_sync
        model.fit(
            tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch), epochs=2, verbose=0
        )
        return model

    assert "fit trained 2 epochs" in _hint(ex.check_fit_on_replicas, fit_on_replicas)


def test_fit_on_replicas_returns_nothing():
    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        _make_script()(strategy, make_model, images, labels, per_replica_batch)

    assert "return model" in _hint(ex.check_fit_on_replicas, fit_on_replicas)


def test_fit_on_replicas_unfinished():
    def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
        raise NotImplementedError("Exercise fit_on_replicas: replace this line with your code")

    assert "is not done yet" in _hint(ex.check_fit_on_replicas, fit_on_replicas)


# --------------------------------------------------------------------------- even_batches


def _right_even(dataset, global_batch, replicas):
    return dataset.batch(global_batch - global_batch % replicas, drop_remainder=True)


def test_even_batches_passes(capsys):
    ex.check_even_batches(_right_even)
    assert "[pass] even_batches" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        # the tutorial's pipeline: the last batch of 3 splits 2 + 1
        (lambda d, g, r: d.batch(g), "a mean of means"),
        # the remainder dropped, but a batch of 3 splits 2 + 1 from the first step on
        (lambda d, g, r: d.batch(g, drop_remainder=True), "splits 2 + 1: on 2 replicas fit raises"),
        # batched by the per-replica size
        (lambda d, g, r: d.batch(g // r, drop_remainder=True), "the per-replica size"),
        # rounded up instead of down: 3 examples in batches of 4, with the remainder dropped
        (lambda d, g, r: d.batch(g + g % r, drop_remainder=True), "no batch at all"),
        # even, but smaller than it needs to be (40 examples in 4s, not 16s)
        (lambda d, g, r: d.batch(min(g - g % r, 4), drop_remainder=True), "use the largest batch"),
        (lambda d, g, r: [d], "should return a tf.data.Dataset"),
    ],
)
def test_even_batches_mistakes(answer, hint):
    message = _hint(ex.check_even_batches, answer)
    assert message.startswith("Exercise even_batches:")
    assert hint in message
    # never the answer: the right size (2 for 3 examples in 3s, 16 for 40 in 16s) or drop_remainder
    assert "drop_remainder" not in message and ": 2." not in message and "(16)" not in message


def test_even_batches_hints_name_the_mistake():
    first = _hint(ex.check_even_batches, lambda d, g, r: d.batch(g, drop_remainder=True))
    assert "the first batch of 3 splits 2 + 1" in first and "pick a size that replicas divides" in first
    last = _hint(ex.check_even_batches, lambda d, g, r: d.batch(g))
    assert "keep it out of the epoch" in last


def test_even_batches_mean_of_means_is_measured():
    message = _hint(ex.check_even_batches, lambda d, g, r: d.batch(g))
    assert "last batch of 3 splits 2 + 1" in message and "% off one device's (|d2 - d1| / |d1|)" in message


# --------------------------------------------------------------------------- fit_resumable


def _make_resumable(*, backup=True, scope=True, callbacks=True, same_dir=True, save_freq="epoch"):
    def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks_given=()):
        import tempfile

        import keras

        if scope:
            with strategy.scope():
                model = make_model()
        else:
            model = make_model()
        folder = backup_dir if same_dir else tempfile.mkdtemp()
        chosen = (
            [keras.callbacks.BackupAndRestore(folder, save_freq=save_freq)]
            if backup
            else [keras.callbacks.ModelCheckpoint(backup_dir + ".weights.h5", save_weights_only=True)]
        )
        if callbacks:
            chosen += list(callbacks_given)
        model.fit(dataset, epochs=epochs, verbose=0, callbacks=chosen)
        return model

    return fit_resumable


def test_fit_resumable_passes(capsys):
    ex.check_fit_resumable(_make_resumable())
    out = capsys.readouterr().out
    assert "[pass] fit_resumable" in out and "resumed at epoch 2" in out


def test_fit_resumable_restarting_from_scratch():
    """A second call that trains from epoch 0 (a backup written elsewhere than it reads)."""
    import shutil

    right = _make_resumable()

    def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
        model = right(strategy, make_model, dataset, epochs, backup_dir, callbacks)
        return model

    calls = []

    def restarting(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
        calls.append(1)
        if len(calls) == 2:
            shutil.copytree(backup_dir, backup_dir + "_old")
            shutil.rmtree(backup_dir)
        return fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks)

    assert "started over instead of resuming at epoch 2" in _hint(ex.check_fit_resumable, restarting)


def test_fit_resumable_with_a_backup_every_batch_is_named():
    """A backup written every batch resumes at the start of the epoch it was written in: epoch 1 runs
    twice. Refused, and the hint says why (not "it started over")."""
    hint = _hint(ex.check_fit_resumable, _make_resumable(save_freq=1))
    assert "a backup written mid-epoch resumes at that epoch's start" in hint, hint
    assert "started over" not in hint


def test_fit_resumable_that_needs_callbacks_to_be_a_list():
    """`callbacks + [backup]` passes lists, then breaks the notebook's call with the default ()."""
    import keras

    def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
        with strategy.scope():
            model = make_model()
        model.fit(
            dataset,
            epochs=epochs,
            verbose=0,
            callbacks=callbacks + [keras.callbacks.BackupAndRestore(backup_dir)],
        )
        return model

    assert "fails when `callbacks` is a tuple" in _hint(ex.check_fit_resumable, fit_resumable)


def test_fit_resumable_model_checkpoint_in_backup_dir():
    """ModelCheckpoint writing into backup_dir: files there, but nothing fit resumes from."""

    def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
        import os

        import keras

        with strategy.scope():
            model = make_model()
        saving = keras.callbacks.ModelCheckpoint(
            os.path.join(backup_dir, "latest.weights.h5"), save_weights_only=True
        )
        model.fit(dataset, epochs=epochs, verbose=0, callbacks=[saving, *callbacks])
        return model

    message = _hint(ex.check_fit_resumable, fit_resumable)
    assert "holds latest.weights.h5 but no training_metadata.json" in message
    assert "ModelCheckpoint's files are never resumed from" in message
    assert "same backup_dir in both calls" not in message


def test_fit_resumable_unfinished():
    def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
        raise NotImplementedError("Exercise fit_resumable: replace this line with your code")

    assert "is not done yet" in _hint(ex.check_fit_resumable, fit_resumable)


# --------------------------------------------------------------------------- scaled_batch_and_lr


def _right_scaling(per_replica_batch, replicas, base_lr, base_batch):
    global_batch = per_replica_batch * replicas
    return global_batch, base_lr * global_batch / base_batch


def test_scaled_batch_and_lr_passes(capsys):
    ex.check_scaled_batch_and_lr(_right_scaling)
    assert "[pass] scaled_batch_and_lr" in capsys.readouterr().out


def test_even_batches_rounded_down_to_even_fails_on_other_replica_counts():
    """Right on 2 replicas only: the check also asks for sizes on 4 and 3 replicas."""
    for wrong in (
        lambda d, g, r: d.batch(g - g % 2, drop_remainder=True),
        lambda d, g, r: d.batch(g if g % r == 0 else g - 1, drop_remainder=True),
    ):
        assert "every batch must be a size that" in _hint(ex.check_even_batches, wrong)


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda p, r, lr, b: (p * r, lr * r), "you scaled base_lr by the replicas"),
        (lambda p, r, lr, b: (p // r, lr * p / b), "your global batch is 16"),
        (lambda p, r, lr, b: (p * r / 1, lr * p * r / b), "should be an int"),
        # the rate kept as tuned on one device: the notebook's 2-replica run then learns less per epoch
        (lambda p, r, lr, b: (p * r, lr), "you kept base_lr"),
        (
            lambda p, r, lr, b: (p * r, lr * p * r / b * 1.5),
            "your rate is larger than the one that moves an epoch",
        ),
        (
            lambda p, r, lr, b: (p * r, lr * p * r / b / 1.4),
            "your rate is smaller than the one that moves an epoch",
        ),
        (lambda p, r, lr, b: [p * r, lr * p * r / b], "should return a tuple"),
        (lambda p, r, lr, b: (p * r, f"{lr * p * r / b}"), "the learning rate should be a number"),
    ],
)
def test_scaled_batch_and_lr_mistakes(answer, hint):
    message = _hint(ex.check_scaled_batch_and_lr, answer)
    assert message.startswith("Exercise scaled_batch_and_lr:")
    assert hint in message
    assert "x the one" not in message  # no ratio: dividing by it would give the answer
    # never the answer: the formula, or the right batch (64) and rate (0.1 or 0.05) of the failing case
    call, _, said = message.partition("): ")
    assert "base_lr * global_batch" not in said and "expected" not in said
    assert not {"64", "0.1", "0.05"} & set(said.replace(",", " ").replace("(", " ").split())


def test_check_examples_are_even_over_two_replicas():
    # The fit check's step counts assume an exact split of the global batch.
    assert ex.CHECK_EXAMPLES % (2 * ex.CHECK_PER_REPLICA_BATCH) == 0


def test_fit_resumable_compiled_again_outside_the_scope():
    """Adam created outside the scope: Keras's RuntimeError becomes a one-line hint."""

    def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
        import keras

        with strategy.scope():
            model = make_model()
        model.compile(
            optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.SparseCategoricalCrossentropy(True)
        )
        backup = keras.callbacks.BackupAndRestore(backup_dir)
        model.fit(dataset, epochs=epochs, verbose=0, callbacks=[backup, *callbacks])
        return model

    message = _hint(ex.check_fit_resumable, fit_resumable)
    assert "the optimizer was created outside `with strategy.scope():`" in message
    assert "object at 0x" not in message


# Each planted mistake of fit_on_replicas and fit_resumable, and the words its hint must hold.
MISTAKES = [
    # the notebook's buggy script: no scope and the per-replica batch
    ("fit_on_replicas", dict(scope=False, global_batch=False), "built outside `with strategy.scope():`"),
    ("fit_on_replicas", dict(scope=False), "built outside `with strategy.scope():`"),
    ("fit_on_replicas", dict(global_batch=False), "batched per replica, but fit expects global batches"),
    ("fit_on_replicas", dict(compile_in_scope=False), "optimizer was created outside"),
    ("fit_on_replicas", dict(fit=False), "no step"),
    ("fit_resumable", dict(backup=False), "add keras.callbacks.BackupAndRestore(backup_dir)"),
    ("fit_resumable", dict(callbacks=False), "pass `callbacks` to model.fit"),
    ("fit_resumable", dict(same_dir=False), "backup_dir is empty"),
    ("fit_resumable", dict(scope=False), "built outside `with strategy.scope():`"),
]


@pytest.mark.parametrize(
    "exercise, mistake, hint",
    MISTAKES,
    ids=[f"{e}-" + ",".join(f"{k}={v}" for k, v in m.items()) for e, m, _ in MISTAKES],
)
def test_a_planted_mistake_gets_its_hint(exercise, mistake, hint):
    make = _make_script if exercise == "fit_on_replicas" else _make_resumable
    message = _hint(getattr(ex, f"check_{exercise}"), make(**mistake))
    assert message.startswith(f"Exercise {exercise}:")
    assert hint in message
    assert "per_replica_batch *" not in message  # never the answer's code


# --------------------------------------------------------------------------- same_rate_loss


def test_same_rate_loss_passes_and_shows_the_runs(capsys):
    ex.check_same_rate_loss("2 replicas")
    out = capsys.readouterr().out
    assert "[pass] same_rate_loss: 2 replicas x 32 took 32 steps to one device's 64" in out
    ex.check_same_rate_loss(" 2 Replicas ")  # case and spaces aside


def test_same_rate_loss_runs_end_far_apart():
    """The hints assume the check's 2-replica run ends higher, by far more than a tie's margin."""
    runs = ex.same_rate_runs()
    (one_steps, one), (two_steps, two) = runs["1 device"], runs["2 replicas"]
    assert (one_steps, two_steps) == (64, 32)
    assert two - one > 10 * ex.SAME_RATE_TIE


@pytest.mark.parametrize(
    "answer, hint",
    [
        # a bigger global batch averages a less noisy gradient, so it must learn more per epoch
        ("1 device", "less noisy gradient of the bigger global batch"),
        # claim 1 read as "replicas change nothing"
        ("tie", "Claim 1 matched two replicas of 32 with one device at batch 64, not 32"),
        # the run's label, not one of the three answers
        ("2 replicas x 32", 'Set HIGHER_LOSS to one of "1 device", "2 replicas", "tie"'),
        (2, "Set HIGHER_LOSS to one of"),
        (None, "is not done yet"),
    ],
)
def test_same_rate_loss_mistakes(answer, hint):
    message = _hint(ex.check_same_rate_loss, answer)
    assert message.startswith("Exercise same_rate_loss")
    assert hint in message
    if answer in ("1 device", "tie"):  # the mistake named, never the answer
        assert "2 replicas" not in message and "higher" not in message
