"""Notebook 03: the checks of its exercises (distributed training with Keras ``Model.fit``).

Each check about distribution runs the student's code on 2 replicas and the same training on one
device, and compares the weights (:func:`course_utils.compare.mismatch`).

* :func:`check_fit_on_replicas` - debug a ``fit`` script that builds its model outside
  ``strategy.scope()`` and batches by the per-replica size.
* :func:`check_even_batches` - batch a dataset so that ``fit`` splits every step evenly (an
  uneven last batch is a mean of means; an uneven first batch makes ``fit`` raise).
* :func:`check_fit_resumable` - ``fit`` with ``keras.callbacks.BackupAndRestore``: interrupted,
  then resumed, it must end where an uninterrupted run on one device ends.
* :func:`check_same_rate_loss` - predict which ends an epoch higher, one device or 2 replicas at the same rate.
* :func:`check_scaled_batch_and_lr` - the global batch and the linearly scaled learning rate.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from . import Watched, harness, in_kernel, unseen

#: The script of exercise ``fit_on_replicas`` trains with plain SGD at this rate.
SCRIPT_LEARNING_RATE = 0.05
CHECK_EXAMPLES = 128
CHECK_PER_REPLICA_BATCH = 16
#: Relative difference under which weights or updates count as one device's. Measured float noise
#: of these checks is 1e-8 to 4e-7, and its digits differ between CPUs: pass lines print the bound.
SAME = 1e-4


def _need_two_replicas(strategy: Any = None) -> Any:
    """The strategy a check compares with one device: ``strategy`` (the notebook's own
    2-replica strategy, so that one process holds one such object) or the course's cached one.

    One object, not one per check: TensorFlow numbers the collective all-reduces of every
    ``MirroredStrategy`` from the same keys, so two objects over the same CPUs that train
    different models in one process abort with "Shape mismatch in the collective instance".
    """
    if strategy is not None:
        expect(
            strategy.num_replicas_in_sync == 2,
            f"Pass the notebook's 2-replica strategy `mirrored` to this check (it has "
            f"{strategy.num_replicas_in_sync} replicas).",
        )
        return strategy
    return compare.checking_strategy(2)


def _one_device() -> Any:
    from ..runtime import import_tensorflow

    return import_tensorflow().distribute.OneDeviceStrategy("/cpu:0")


def _check_images(count: int) -> tuple[np.ndarray, np.ndarray]:
    from ..synthetic import make_images

    images, labels = make_images("mnist", count, seed=303)
    return images.astype(np.float32) / 255.0, labels


def small_model(seed: int = 0) -> Any:
    """The checks' model: ``Flatten -> Dense(16, relu) -> Dense(10)`` on 28x28x1 images, seeded
    so that every call starts from the same weights."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(16, activation="relu", kernel_initializer=init),
            keras.layers.Dense(10, kernel_initializer=init),
        ],
        name="check_model",
    )


def _sgd_model(learning_rate: float = SCRIPT_LEARNING_RATE) -> Any:
    """:func:`small_model`, compiled as the notebook's scripts compile it (SGD, logits)."""
    import keras

    model = small_model()
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _fit_one_device(make_model: Callable[[], Any], dataset: Any, epochs: int = 1) -> Any:
    with _one_device().scope():
        model = make_model()
    model.fit(dataset, epochs=epochs, verbose=0)
    return model


def _iterations(model: Any) -> int:
    # int(optimizer.iterations) raises TypeError under MirroredStrategy; .numpy() works everywhere.
    return int(np.asarray(model.optimizer.iterations.numpy()))


def _copies(variable: Any) -> int:
    value = getattr(variable, "value", variable)
    return len(getattr(value, "values", (value,)))


def _trained(model: Any, strategy: Any) -> dict[str, Any]:
    """What came back, as plain data (a harness's): ``returned`` (its type's name), and for a model
    whether its weights (``in_scope``) and optimizer (``optimizer_in_scope``) live on ``strategy``,
    its ``steps``, the ``epochs`` of its last fit and its ``weights``, flat."""
    import keras

    if not isinstance(model, keras.Model):
        return {"model": False, "returned": type(model).__name__}
    facts: dict[str, Any] = {
        "model": True,
        "in_scope": model.distribute_strategy is strategy and _copies(model.trainable_variables[0]) == 2,
        "optimizer_in_scope": model.optimizer is not None and _copies(model.optimizer.iterations) == 2,
        "epochs": len(getattr(getattr(model, "history", None), "epoch", None) or []),
        "weights": compare.flat(model.trainable_variables),
    }
    if model.optimizer is not None:
        facts["steps"] = _iterations(model)
    return facts


def _expect_trained_on(run: Any, hint_returns: str) -> None:
    """The model came back (``run``: :func:`_trained`'s facts), was compiled, and its weights and
    optimizer live on the strategy."""
    expect(isinstance(run, dict), hint_returns.format(got=type(run).__name__))
    expect(run.get("model") is True, hint_returns.format(got=run.get("returned")))
    expect(
        run.get("in_scope") is True,
        "The model was built outside `with strategy.scope():`, so its weights have one copy and fit "
        "trains on one device; create the model inside the scope.",
    )
    expect(
        run.get("optimizer_in_scope") is True,
        "The optimizer was created outside `with strategy.scope():`: compile the model inside the scope too.",
    )


def _unwatched(strategy: Any) -> Any:
    """The strategy itself, for a student's ``fit`` (its model's ``distribute_strategy`` is that one)."""
    return strategy.strategy if isinstance(strategy, Watched) else strategy


def _weights_of(run: dict[str, Any], reference: Any) -> np.ndarray:
    """``run``'s flat weights, of ``reference``'s shape (a run that sent other numbers fails)."""
    weights = np.asarray(run.get("weights", ()), np.float64)
    want = compare.flat(reference.trainable_variables)
    expect(
        weights.shape == want.shape,
        f"The trained model has {weights.size} weights, the check's model {want.size}: train the model "
        "make_model() builds.",
    )
    return weights


#: What Keras raises when ``fit`` meets an optimizer created outside the model's strategy scope.
MIXED_STRATEGIES = "Mixing different tf.distribute.Strategy objects"


def _call_student(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, with Keras's error for an optimizer made outside the scope as a hint."""
    try:
        return function(*args)
    except RuntimeError as error:
        expect(
            MIXED_STRATEGIES not in str(error),
            "fit raised 'Mixing different tf.distribute.Strategy objects': the optimizer was created "
            "outside `with strategy.scope():`; compile inside the scope (and do not compile again outside).",
        )
        raise


def _weight_mismatch(weights: np.ndarray, reference: Any) -> float:
    return compare.mismatch(weights, compare.flat(reference.trainable_variables))


def _update_mismatch(update: np.ndarray, reference: Any, start: np.ndarray) -> float:
    """``|d2 - d1| / |d1|`` of the weights' changes from ``start`` (d2: ``update``, d1: one
    device's), the measure notebook 03 prints for an uneven batch."""
    return compare.mismatch(update, compare.flat(reference.trainable_variables) - start)


# --------------------------------------------------------------------------- fit_on_replicas


@harness
def fit_on_replicas_run(
    fit_on_replicas: Callable[..., Any], strategy: Any, images: Any, labels: Any, per_replica_batch: int
) -> dict[str, Any]:
    """``fit_on_replicas(strategy, small_model, images, labels, per_replica_batch)``: what came back
    (:func:`_trained`), as plain data."""
    strategy = _unwatched(strategy)
    return _trained(
        _call_student(fit_on_replicas, strategy, small_model, images, labels, per_replica_batch), strategy
    )


@harness
def fit_on_one_device(
    fit_on_replicas: Callable[..., Any], images: Any, labels: Any, per_replica_batch: int
) -> int:
    """The steps ``fit_on_replicas`` takes on one device (a ``OneDeviceStrategy``)."""
    return _iterations(
        _call_student(fit_on_replicas, _one_device(), small_model, images, labels, per_replica_batch)
    )


def check_fit_on_replicas(fit_on_replicas: Callable[..., Any], strategy: Any = None) -> None:
    """``fit_on_replicas(strategy, make_model, images, labels, per_replica_batch)`` on 2 replicas
    must end with the weights of one device trained on the global batch, and on 1 replica
    (a ``OneDeviceStrategy``) take the steps of the per-replica batch."""
    import tensorflow as tf

    exercise_id = "fit_on_replicas"
    with exercise(exercise_id):
        strategy = _need_two_replicas(strategy)
        images, labels = _check_images(CHECK_EXAMPLES)
        per_replica = CHECK_PER_REPLICA_BATCH
        global_batch = per_replica * strategy.num_replicas_in_sync
        run = in_kernel(fit_on_replicas_run, fit_on_replicas, Watched(strategy), images, labels, per_replica)
        _expect_trained_on(
            run, "fit_on_replicas should return the trained model, got {got}: end with `return model`."
        )
        steps, epochs = run.get("steps"), run.get("epochs")
        expect(
            isinstance(steps, int) and isinstance(epochs, int),
            "fit_on_replicas' model came back without its steps and epochs.",
        )
        expect(steps != 0, "The optimizer took no step: call model.fit(...) before returning the model.")
        expect(epochs <= 1, f"fit trained {epochs} epochs; the script trains one: keep epochs=1.")
        expect(
            steps != math.ceil(len(labels) / per_replica),
            f"fit took {steps} steps for {len(labels)} examples: the dataset is batched per replica, "
            "but fit expects global batches.",
        )
        expect(
            steps == math.ceil(len(labels) / global_batch),
            f"fit took {steps} steps for {len(labels)} examples in one epoch: batch by the global batch.",
        )
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch)
        reference = _fit_one_device(_sgd_model, dataset)
        off = _weight_mismatch(_weights_of(run, reference), reference)
        expect(
            off < SAME,
            f"After the epoch the weights are {off:.1%} off one device trained on batches of "
            f"{global_batch}: keep the script's model, SGD({SCRIPT_LEARNING_RATE}) and loss; change "
            "only the scope and the batch (fit shuffles NumPy arrays: keep the script's unshuffled "
            "dataset, or pass shuffle=False).",
        )
        # On 1 replica a global batch of `per_replica_batch * 2` (2 hard-coded) is twice too big.
        alone = in_kernel(fit_on_one_device, fit_on_replicas, images, labels, per_replica)
        want = math.ceil(len(labels) / per_replica)
        expect(
            alone == want,
            f"On 1 replica fit took {alone} steps for {len(labels)} examples: your global batch "
            "ignores the strategy (a hard-coded `* 2`?).",
        )
    passed(
        exercise_id,
        f"2 replicas x {per_replica}, the weights of one device trained on batches of {global_batch} "
        f"(mismatch {compare.below(SAME)}).",
    )


# --------------------------------------------------------------------------- even_batches

#: (examples, global batch asked for): an uneven last batch, then an uneven first batch.
EVEN_CASES = ((7, 4), (3, 3), (40, 16))


def _split(size: int, replicas: int) -> str:
    return " + ".join(str(size // replicas + (r < size % replicas)) for r in range(replicas))


@harness
def even_batches_run(
    even_batches: Callable[..., Any], strategy: Any, images: Any, labels: Any, asked: int, replicas: int
) -> dict[str, Any]:
    """``even_batches(<images, labels unbatched>, asked, replicas)``, as plain data: the ``returned``
    type's name, or the batches' ``sizes``; where the first batch splits evenly (else ``fit`` raises),
    their contents (``images``, ``labels``) and the weights' ``update`` after one epoch of ``fit`` on
    ``strategy`` (SGD at 0.1, :func:`small_model`)."""
    import tensorflow as tf

    strategy = _unwatched(strategy)
    batched = even_batches(tf.data.Dataset.from_tensor_slices((images, labels)), asked, replicas)
    if not isinstance(batched, tf.data.Dataset):
        return {"returned": type(batched).__name__}
    batches = list(batched)
    sizes = [int(batch[0].shape[0]) for batch in batches]
    if not sizes or sizes[0] % replicas:
        return {"returned": "Dataset", "sizes": sizes}
    with strategy.scope():
        model = _sgd_model(0.1)
    before = compare.flat(model.trainable_variables)
    model.fit(batched, epochs=1, verbose=0)
    return {
        "returned": "Dataset",
        "sizes": sizes,
        "images": [np.asarray(batch[0]) for batch in batches],
        "labels": [np.asarray(batch[1]) for batch in batches],
        "update": compare.flat(model.trainable_variables) - before,
    }


@harness
def even_batch_sizes(even_batches: Callable[..., Any], examples: int, asked: int, replicas: int) -> list[int]:
    """The sizes of the batches ``even_batches(<examples numbers>, asked, replicas)`` makes."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(np.arange(examples, dtype=np.float32))
    return [int(batch.shape[0]) for batch in even_batches(dataset, asked, replicas)]


def _one_device_update(images: list, labels: list) -> tuple[Any, np.ndarray]:
    """One device's model after one epoch of ``fit`` on these batches (SGD at 0.1), and its start."""
    import tensorflow as tf

    shapes = {(tuple(x.shape[1:]), x.dtype.str, y.ndim, y.dtype.kind) for x, y in zip(images, labels)}
    expect(
        len(images) == len(labels) and len(shapes) == 1 and next(iter(shapes))[2:] in ((1, "i"), (1, "u")),
        "even_batches' batches came back without their examples and labels.",
    )
    signature = tuple(tf.TensorSpec((None, *a.shape[1:]), a.dtype) for a in (images[0], labels[0]))
    dataset = tf.data.Dataset.from_generator(lambda: zip(images, labels), output_signature=signature)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(images)))  # fit warns without it
    return _fit_one_device(lambda: _sgd_model(0.1), dataset), compare.flat(small_model().trainable_variables)


def check_even_batches(even_batches: Callable[..., Any], strategy: Any = None) -> None:
    """``even_batches(dataset, global_batch, replicas)``: batches of the largest size that is at most
    ``global_batch`` and that ``replicas`` divides, every one of them split evenly, so that ``fit``
    on 2 replicas gives one device's update on the same batches."""
    exercise_id = "even_batches"
    with exercise(exercise_id):
        strategy = _need_two_replicas(strategy)
        replicas = strategy.num_replicas_in_sync
        for examples, asked in EVEN_CASES:
            images, labels = _check_images(examples)
            call = f"even_batches(<{examples} examples>, {asked}, {replicas})"
            run = in_kernel(
                even_batches_run, even_batches, Watched(strategy), images, labels, asked, replicas
            )
            expect(
                isinstance(run, dict) and run.get("returned") == "Dataset",
                f"{call} should return a tf.data.Dataset, got {run.get('returned') if isinstance(run, dict) else run}.",
            )
            sizes = run.get("sizes")
            expect(
                isinstance(sizes, list) and all(isinstance(n, int) for n in sizes),
                f"{call}: its batches' sizes did not come back.",
            )
            want = asked - asked % replicas
            expect(sizes, f"{call} gives no batch at all: fit would train nothing.")
            expect(
                sizes[0] != asked // replicas or want == asked // replicas,
                f"{call} gives batches of {sizes[0]}, the per-replica size: fit takes GLOBAL batches "
                "and splits them; batch by a global batch.",
            )
            expect(
                sizes[0] % replicas == 0,
                f"{call}: the first batch of {sizes[0]} splits {_split(sizes[0], replicas)}: on "
                f"{replicas} replicas fit raises InvalidArgumentError (AddN); pick a size that replicas divides.",
            )
            batch_images, batch_labels = list(run.get("images", ())), list(run.get("labels", ()))
            expect(
                [len(x) for x in batch_images] == sizes == [len(y) for y in batch_labels],
                f"{call}: the batches that came back are not of the sizes {sizes}.",
            )
            reference, start = _one_device_update(batch_images, batch_labels)
            update = np.asarray(run.get("update", ()), np.float64)
            expect(
                update.shape == start.shape, f"{call}: fit's update came back without the model's weights."
            )
            off = _update_mismatch(update, reference, start)
            uneven = [size for size in sizes if size % replicas]
            expect(
                not uneven,
                f"{call}: the last batch of {sizes[-1]} splits {_split(sizes[-1], replicas)}, a mean of "
                f"means: the epoch's update is {off:.0%} off one device's (|d2 - d1| / |d1|); keep it out "
                "of the epoch.",
            )
            expect(
                sizes[0] == want,
                f"{call} gives batches of {sizes[0]}: use the largest batch that is at most {asked} "
                f"and that {replicas} replicas divide.",
            )
            expect(
                off < SAME,
                f"{call}: on {replicas} replicas the epoch's update is {off:.1%} off one device's "
                "(|d2 - d1| / |d1|).",
            )
        others = [(10, 6, 4), (9, 7, 3)]  # sizes only: other replica counts
        if (rng := unseen()) is not None:  # grading: a case the student never saw
            other = rng.choice([3, 4])
            asked = rng.randint(other + 1, 13)
            others.append((rng.randint(asked, 40), asked, other))
        for examples, asked, other in others:
            call = f"even_batches(<{examples} examples>, {asked}, {other})"
            sizes = in_kernel(even_batch_sizes, even_batches, examples, asked, other)
            expect(
                sizes == [asked - asked % other] * (examples // (asked - asked % other)),
                f"{call} gives batches of {sizes}: with {other} replicas every batch must be a size that "
                f"{other} divides, as large as {asked} allows, and no short one.",
            )
    passed(
        exercise_id,
        f"7 examples asked in 4s: 1 step of 4; 3 asked in 3s: 1 step of 2; {replicas} replicas give "
        f"one device's update (update error {compare.below(SAME)}).",
    )


# --------------------------------------------------------------------------- fit_resumable

RESUME_EPOCHS, RESUME_AT = 4, 2


class Preempted(RuntimeError):
    """What the check's interrupting callback raises: the stand-in for a preempted machine."""


def _interrupt_at(epoch: int) -> Any:
    import keras

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, index: int, logs: Any = None) -> None:
            if index == epoch:
                raise Preempted(f"preempted at the start of epoch {epoch}")

    return Interrupt()


def _adam_model() -> Any:
    import keras

    model = small_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _resume_dataset(images: Any, labels: Any) -> Any:
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)


@harness
def fit_resumable_run(
    fit_resumable: Callable[..., Any], strategy: Any, images: Any, labels: Any
) -> dict[str, Any]:
    """``fit_resumable`` interrupted at the start of epoch ``RESUME_AT``, then called again with the
    same backup folder, as plain data: whether it was ``interrupted``, the files ``saved`` in the
    folder, then the epochs the second call ``begun`` and what it returned (:func:`_trained`), or the
    ``tuple_error`` it raised on a tuple of callbacks. It stops where a later step has no meaning."""
    import keras

    strategy = _unwatched(strategy)
    dataset = _resume_dataset(images, labels)
    with tempfile.TemporaryDirectory() as folder:
        backup_dir = str(Path(folder) / "backup")
        run: dict[str, Any] = {"interrupted": False}
        try:
            _call_student(
                fit_resumable,
                strategy,
                _adam_model,
                dataset,
                RESUME_EPOCHS,
                backup_dir,
                [_interrupt_at(RESUME_AT)],
            )
        except Preempted:
            run["interrupted"] = True
        run["saved"] = sorted(p.name for p in Path(backup_dir).glob("*")) if Path(backup_dir).is_dir() else []
        if not run["interrupted"] or "training_metadata.json" not in run["saved"]:
            return run
        begun: list[int] = []
        recorder = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: begun.append(int(epoch)))
        try:  # a tuple, as the default () is: an answer that does `callbacks + [...]` fails here
            model = _call_student(
                fit_resumable, strategy, _adam_model, dataset, RESUME_EPOCHS, backup_dir, (recorder,)
            )
        except (TypeError, AttributeError) as error:
            if "tuple" not in str(error):
                raise
            return {**run, "tuple_error": f"{type(error).__name__}: {error}"}
    return {**run, "begun": begun, **_trained(model, strategy)}


def check_fit_resumable(fit_resumable: Callable[..., Any], strategy: Any = None) -> None:
    """``fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks)``: interrupted at
    the start of epoch 2 and called again, it must resume at epoch 2 and end with the weights of
    an uninterrupted run on one device."""
    exercise_id = "fit_resumable"
    with exercise(exercise_id):
        strategy = _need_two_replicas(strategy)
        images, labels = _check_images(64)
        run = in_kernel(fit_resumable_run, fit_resumable, Watched(strategy), images, labels)
        expect(isinstance(run, dict), "fit_resumable's run came back as nothing the check can read.")
        expect(
            run.get("interrupted") is True,
            "The check's callback (it raises at the start of epoch 2) never ran: pass `callbacks` "
            "to model.fit, next to your BackupAndRestore.",
        )
        saved = run.get("saved")
        expect(
            isinstance(saved, list) and all(isinstance(name, str) for name in saved),
            "fit_resumable's backup folder came back as nothing the check can read.",
        )
        expect(
            saved,
            "After the interruption backup_dir is empty: add keras.callbacks.BackupAndRestore(backup_dir) "
            "to fit's callbacks (ModelCheckpoint saves files but fit does not resume from them).",
        )
        expect(
            "training_metadata.json" in saved,
            f"After the interruption backup_dir holds {', '.join(saved)} but no training_metadata.json, "
            "the epoch a BackupAndRestore backup records: ModelCheckpoint's files are never resumed from.",
        )
        expect(
            "tuple_error" not in run,
            "fit_resumable fails when `callbacks` is a tuple, as its default () is: `+` or `append` "
            "on it assumes a list.",
        )
        _expect_trained_on(
            run, "fit_resumable should return the trained model, got {got}: end with `return model`."
        )
        begun = run.get("begun")
        expect(isinstance(begun, list), "fit_resumable's second call came back without its epochs.")
        expect(
            begun[:1] != [0],
            f"The second call trained epochs {begun}: it started over instead of resuming at epoch "
            f"{RESUME_AT}. Give BackupAndRestore the same backup_dir in both calls.",
        )
        expect(
            begun[:1] == [RESUME_AT],
            f"The second call began at epoch {begun[:1]}, not {RESUME_AT}: a backup written mid-epoch resumes "
            "at that epoch's start and trains it again; keep BackupAndRestore's default save_freq='epoch'.",
        )
        reference = _fit_one_device(_adam_model, _resume_dataset(images, labels), RESUME_EPOCHS)
        off = _weight_mismatch(_weights_of(run, reference), reference)
        expect(
            off < SAME,
            f"Resumed at epoch {RESUME_AT}, the weights are {off:.1%} off an uninterrupted run on one "
            "device: build and compile with make_model() in the scope and train `epochs` epochs.",
        )
    passed(
        exercise_id,
        f"backup after the interruption ({', '.join(saved)}); resumed at epoch {RESUME_AT}; 2 replicas "
        f"end with the weights of an uninterrupted run on one device (mismatch {compare.below(SAME)}).",
    )


# --------------------------------------------------------------------------- same_rate_loss

#: One epoch of SGD(0.05) over the check's 2,048 images, 32 per replica per step; the answers it takes.
SAME_RATE_EXAMPLES, SAME_RATE_PER_REPLICA, SAME_RATE_LR = 2048, 32, 0.05
SAME_RATE_CHOICES = ("1 device", "2 replicas", "tie")
#: Test losses closer than this tie: runs that train alike differ by float noise (~1e-6); the
#: check's two runs end 0.26 apart (measured), the notebook's CNN 0.9 apart.
SAME_RATE_TIE = 0.01


def same_rate_runs() -> dict[str, tuple[int, float]]:
    """``{"1 device": (steps, test loss), "2 replicas": (steps, test loss)}`` after the epoch."""
    import tensorflow as tf

    from ..synthetic import make_images

    images, labels = _check_images(SAME_RATE_EXAMPLES)
    test_images, test_labels = make_images("mnist", 1000, seed=304)
    runs = {}
    for name, where in (("1 device", _one_device()), ("2 replicas", _need_two_replicas())):
        with where.scope():
            model = _sgd_model(SAME_RATE_LR)
        batch = SAME_RATE_PER_REPLICA * where.num_replicas_in_sync
        model.fit(tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch), epochs=1, verbose=0)
        loss = model.evaluate(test_images.astype(np.float32) / 255.0, test_labels, batch_size=250, verbose=0)
        runs[name] = (_iterations(model), float(np.ravel(loss)[0]))
    return runs


def check_same_rate_loss(prediction: Any) -> None:
    """``HIGHER_LOSS``: which of one device at batch 32 and 2 replicas x 32, at the same rate, ends
    the epoch with the higher test loss (or "tie"); the hints name a mistake, never the run."""
    with exercise("same_rate_loss"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        said = prediction.strip().lower() if isinstance(prediction, str) else prediction
        choices = ", ".join(f'"{choice}"' for choice in SAME_RATE_CHOICES)
        expect(said in SAME_RATE_CHOICES, f"Set HIGHER_LOSS to one of {choices} (got {prediction!r}).")
        (one_steps, one), (two_steps, two) = same_rate_runs().values()
        ran = "tie" if abs(two - one) < SAME_RATE_TIE else ("2 replicas" if two > one else "1 device")
        mistakes = {  # when the 2-replica run ends higher, as the check's runs do (a test fixes it)
            "1 device": "You expected the less noisy gradient of the bigger global batch to learn more per "
            "epoch; count each run's steps, and how far one step moves at the same rate.",
            "tie": "Claim 1 matched two replicas of 32 with one device at batch 64, not 32: the added "
            "replica changed the global batch, hence the number of steps in the epoch.",
        }
        if ran == "2 replicas":
            expect(said not in mistakes, mistakes.get(said, ""))
        expect(
            said == ran, "Not what the check's runs measured: compare how many steps each takes in the epoch."
        )
    passed(
        "same_rate_loss",
        f"2 replicas x {SAME_RATE_PER_REPLICA} took {two_steps} steps to one device's {one_steps} at rate "
        f"{SAME_RATE_LR} and ended at test loss={two:.2f} against loss={one:.2f} (the check's model and "
        f"{SAME_RATE_EXAMPLES:,} images).",
    )


# --------------------------------------------------------------------------- scaled_batch_and_lr


def check_scaled_batch_and_lr(scaled_batch_and_lr: Callable[[int, int, float, int], Any]) -> None:
    """``scaled_batch_and_lr(per_replica_batch, replicas, base_lr, base_batch)`` -> (batch, lr)."""
    exercise_id = "scaled_batch_and_lr"
    cases = [
        # per replica, replicas, base lr, base batch -> global batch, learning rate
        (32, 2, 0.05, 32, 64, 0.1),  # the notebook's run: 2 replicas of 32, tuned on one device at 32
        (64, 1, 1e-3, 64, 64, 1e-3),
        (64, 2, 1e-3, 64, 128, 2e-3),
        (32, 4, 0.1, 256, 128, 0.05),
        (64, 8, 0.1, 256, 512, 0.2),
        (128, 3, 0.01, 32, 384, 0.12),
    ]
    if (rng := unseen()) is not None:  # grading: a case the student never saw
        per_replica, replicas, base, rate = (
            rng.choice([16, 48]),
            rng.randint(2, 12),
            rng.choice([16, 128]),
            0.02,
        )
        cases.append(
            (per_replica, replicas, rate, base, per_replica * replicas, rate * per_replica * replicas / base)
        )
    with exercise(exercise_id):
        for per_replica, replicas, base_lr, base_batch, want_batch, want_lr in cases:
            call = f"scaled_batch_and_lr({per_replica}, {replicas}, {base_lr}, {base_batch})"
            result = scaled_batch_and_lr(per_replica, replicas, base_lr, base_batch)
            expect(
                isinstance(result, tuple) and len(result) == 2,
                f"{call} should return a tuple (global_batch, learning_rate), got {result!r}.",
            )
            batch, rate = result
            expect(
                isinstance(batch, (int, np.integer)) and not isinstance(batch, bool),
                f"{call}: the global batch should be an int, got {batch!r} ({type(batch).__name__}). "
                "Multiply two ints; do not divide.",
            )
            expect(
                batch == want_batch,
                f"{call}: your global batch is {batch}; it should hold one step's examples on every replica.",
            )
            expect(
                np.ndim(rate) == 0 and np.issubdtype(np.asarray(rate).dtype, np.number),
                f"{call}: the learning rate should be a number, got {rate!r} ({type(rate).__name__}).",
            )
            ratio = float(rate) / want_lr
            if want_batch != base_batch and math.isclose(float(rate), base_lr):
                expect(
                    False,
                    f"{call}: you kept base_lr, but at this global batch an epoch takes fewer steps, each "
                    "as long as before: the model moves less per epoch.",
                )
            if base_batch != per_replica and math.isclose(float(rate), base_lr * replicas):
                expect(
                    False,
                    f"{call}: you scaled base_lr by the replicas, but base_lr was tuned for batches of "
                    f"{base_batch}, not {per_replica}.",
                )
            expect(
                math.isclose(ratio, 1.0, rel_tol=1e-9),
                f"{call}: your rate is {'larger' if ratio > 1 else 'smaller'} than the one that moves an "
                "epoch as far as at base_batch: an epoch now takes global_batch / base_batch times fewer steps.",
            )
    passed(exercise_id, "global batch = per replica x replicas; rate scaled by global / base batch.")
