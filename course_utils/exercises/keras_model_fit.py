"""Notebook 03: the checks of its exercises (distributed training with Keras ``Model.fit``).

* :func:`check_fit_distributed` - a single-device ``fit`` script made distributed: trained on 2
  replicas, it must match the single-device script run on the global batch, weight for weight.
* :func:`check_scaled_batch_and_lr` - the global batch and the linearly scaled learning rate.
* :func:`check_fit_split_prediction` - predict, then run: steps per epoch, the examples each replica
  gets in the last step, and ``optimizer.iterations`` after one epoch on 2 replicas, measured on 2
  replicas next to one device.
* :func:`check_latest_checkpoint` - the newest ``.weights.h5`` file by epoch number, the job
  ``tf.train.latest_checkpoint`` did for Keras 2's checkpoints.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np

from ..checks import exercise, expect, expect_close, passed

#: What the single-device script of the notebook trains with; the check reproduces it.
SCRIPT_SEED = 0
SCRIPT_LEARNING_RATE = 0.05
CHECK_EXAMPLES = 512
CHECK_PER_REPLICA_BATCH = 32


def _two_replicas() -> Any:
    """One MirroredStrategy over 2 virtual CPUs for every check of this module, or None when
    TensorFlow has only one CPU device.

    One object, not one per check: TensorFlow numbers the collective all-reduces of every
    ``MirroredStrategy`` from the same keys, so two objects over the same CPUs that train
    different models in one process abort with "Shape mismatch in the collective instance".
    """
    from ..devices import cpu_count
    from ..strategies import mirrored_cpus

    if cpu_count() < 2:
        return None
    return mirrored_cpus(2)  # cached: the same object every time


def _need_two_replicas(exercise_id: str, strategy: Any = None) -> Any:
    """The strategy a check compares with one device: ``strategy`` (the notebook's own
    2-replica strategy, so that one process holds one such object) or this module's."""
    if strategy is not None:
        expect(
            strategy.num_replicas_in_sync == 2,
            f"Pass the notebook's 2-replica strategy `two` to this check (it has "
            f"{strategy.num_replicas_in_sync} replicas).",
        )
        return strategy
    strategy = _two_replicas()
    expect(
        strategy is not None,
        "This check compares 1 and 2 replicas, but TensorFlow started with a single CPU device. "
        "Run the notebook from the top (its first cells split the CPU into 2 virtual devices), "
        "or restart the kernel and set COURSE_REPLICAS=2.",
    )
    return strategy


# --------------------------------------------------------------------------- fit_distributed


def _check_images(count: int = CHECK_EXAMPLES) -> tuple[np.ndarray, np.ndarray]:
    from ..synthetic import make_images

    return make_images("mnist", count, seed=303)


def reference_fit(images: np.ndarray, labels: np.ndarray, batch_size: int, epochs: int = 1) -> Any:
    """The notebook's single-device script, run on one device with ``batch_size`` examples a step."""
    import keras
    import tensorflow as tf

    from ..models import keras_tutorial_cnn

    def scale(image: Any, label: Any) -> tuple[Any, Any]:
        return tf.cast(image, tf.float32) / 255.0, label

    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = keras_tutorial_cnn(seed=SCRIPT_SEED)
        model.compile(
            optimizer=keras.optimizers.SGD(SCRIPT_LEARNING_RATE),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).map(scale).batch(batch_size)
    model.fit(dataset, epochs=epochs, verbose=0)
    return model


def _iterations(model: Any) -> int:
    # int(optimizer.iterations) raises TypeError under MirroredStrategy; .numpy() works everywhere.
    return int(np.asarray(model.optimizer.iterations.numpy()))


def check_fit_distributed(fit_distributed: Callable[..., Any], strategy: Any = None) -> None:
    """``fit_distributed(strategy, images, labels, per_replica_batch, epochs)`` on 2 replicas.

    It must return the trained model, built and compiled in ``strategy.scope()``, trained on
    batches of ``per_replica_batch * replicas`` examples, and end with the same weights as the
    single-device script trained on that global batch.
    """
    import keras

    exercise_id = "fit_distributed"
    with exercise(exercise_id):
        strategy = _need_two_replicas(exercise_id, strategy)
        images, labels = _check_images()
        per_replica, epochs = CHECK_PER_REPLICA_BATCH, 1
        global_batch = per_replica * strategy.num_replicas_in_sync
        try:
            model = fit_distributed(strategy, images, labels, per_replica_batch=per_replica, epochs=epochs)
        except RuntimeError as error:
            if "Mixing different tf.distribute.Strategy" in str(error):
                expect(
                    False,
                    "fit raised 'Mixing different tf.distribute.Strategy objects': the model was "
                    "built in the scope but compiled outside it (the optimizer then belongs to "
                    "no strategy). Put model.compile(...) inside `with strategy.scope():` too.",
                )
            raise
        expect(
            isinstance(model, keras.Model),
            f"fit_distributed should return the trained Keras model, got {type(model).__name__}. "
            "End the function with `return model`.",
        )
        expect(
            getattr(model, "compiled", True) and model.optimizer is not None,
            "The model was never compiled: call model.compile(...) as the script does, inside "
            "`with strategy.scope():`.",
        )
        expect(
            model.distribute_strategy is strategy,
            "The model does not belong to the strategy you were given: it was built outside "
            "`with strategy.scope():` (or under another strategy), so fit trains it on one device. "
            "Build and compile the model inside `with strategy.scope():` of the `strategy` argument.",
        )
        variable = model.trainable_variables[0].value
        copies = len(getattr(variable, "values", (variable,)))
        expect(
            copies == strategy.num_replicas_in_sync,
            f"The model's variables have {copies} copy/copies instead of one per replica "
            f"({strategy.num_replicas_in_sync}): create the model inside `with strategy.scope():`.",
        )
        counter = model.optimizer.iterations.value
        expect(
            len(getattr(counter, "values", (counter,))) == strategy.num_replicas_in_sync,
            "The optimizer was created outside `with strategy.scope():`. Its step counter is then "
            "a plain variable that every replica increments, so it counts "
            f"{strategy.num_replicas_in_sync} steps per step (learning-rate schedules and Adam "
            "then go wrong; Adam even raises). Create the optimizer and call model.compile(...) "
            "inside the scope.",
        )
        steps = _iterations(model)
        want = epochs * math.ceil(len(labels) / global_batch)
        if steps == epochs * math.ceil(len(labels) / per_replica):
            expect(
                False,
                f"fit took {steps} steps for {len(labels)} examples: you batched with the "
                f"per-replica batch ({per_replica}). Batch the dataset with the global batch, "
                "per_replica_batch * strategy.num_replicas_in_sync; each replica then gets "
                f"{per_replica} examples of every batch.",
            )
        expect(
            steps != 0,
            "The optimizer took no step: call model.fit(...) on the dataset before returning the model.",
        )
        expect(
            steps == want,
            f"fit took {steps} optimizer steps; with a global batch of {global_batch} "
            f"({per_replica} per replica x {strategy.num_replicas_in_sync} replicas) one epoch over "
            f"{len(labels)} examples takes {want}. Batch with the global batch and train for `epochs` epochs.",
        )
        reference = reference_fit(images, labels, global_batch, epochs)
        for mine, theirs in zip(model.get_weights(), reference.get_weights()):
            expect_close(
                mine,
                theirs,
                "After training, the weights differ from the single-device script trained on the "
                "same global batch. Keep every line of the script (scaling, model with seed=0, "
                "SGD(0.05), the loss): only the batch size and the scope should change.",
                rtol=1e-3,
                atol=1e-4,
            )
    passed(
        exercise_id,
        "2 replicas, global batch of 64, same weights as one device trained on batches of 64.",
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
                f"{call}: the global batch should be {want_batch} (per-replica batch x replicas), "
                f"got {batch}.",
            )
            if want_batch != base_batch and math.isclose(float(rate), base_lr):
                expect(
                    False,
                    f"{call}: you kept base_lr. The global batch is {want_batch / base_batch:g}x the "
                    f"batch base_lr was tuned for, so an epoch takes {want_batch / base_batch:g}x fewer "
                    "steps, each as long as before: the model moves less per epoch.",
                )
            if base_batch != per_replica and math.isclose(float(rate), base_lr * replicas):
                expect(
                    False,
                    f"{call}: you scaled the learning rate by the number of replicas. The linear "
                    "scaling rule scales it by how much bigger the global batch is than the batch "
                    f"base_lr was tuned for: base_lr * global_batch / base_batch = {want_lr:g}.",
                )
            expect_close(
                rate,
                want_lr,
                f"{call}: the learning rate should be base_lr * global_batch / base_batch",
                rtol=1e-9,
                atol=0.0,
            )
    passed(exercise_id, "global batch = per replica x replicas; rate scaled by global / base batch.")


# --------------------------------------------------------------------------- fit_split_prediction

#: The question of the predict-then-run exercise: one epoch of ``fit`` over this many examples,
#: with this many examples per replica, on 2 replicas (the training set with ``COURSE_FAST=1``).
SPLIT_EXAMPLES = 6000
SPLIT_PER_REPLICA = 64
SPLIT_KEYS = ("steps_per_epoch", "last_step_per_replica", "iterations")


def measure_fit_split(
    strategy: Any, examples: int = SPLIT_EXAMPLES, per_replica: int = SPLIT_PER_REPLICA
) -> dict[str, Any]:
    """One epoch of ``fit`` on ``strategy``: steps, the examples each replica got in the last
    step (from the distributed dataset ``fit`` iterates), and ``optimizer.iterations`` after it."""
    import keras
    import tensorflow as tf

    global_batch = per_replica * strategy.num_replicas_in_sync
    x = np.zeros((examples, 4), np.float32)
    y = np.zeros((examples,), np.int64)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    steps, last = 0, []
    for images, _ in strategy.experimental_distribute_dataset(dataset):
        steps += 1
        last = [int(part.shape[0]) for part in strategy.experimental_local_results(images)]
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    model.fit(dataset, epochs=1, verbose=0)
    return {
        "global_batch": global_batch,
        "steps_per_epoch": steps,
        "last_step": last,
        "last_step_per_replica": last[0],
        "iterations": _iterations(model),
    }


def check_fit_split_prediction(prediction: Any, strategy: Any = None) -> None:
    """``prediction`` (a dict, or a function returning it): the steps per epoch, the examples each replica gets in the last step, and
    ``optimizer.iterations`` after one epoch, for 6,000 examples, 64 per replica, on 2 replicas.
    The check measures them on 2 replicas (``strategy``, or this module's) and on one device,
    prints both, then compares."""
    import tensorflow as tf

    exercise_id = "fit_split_prediction"
    with exercise(exercise_id):
        if callable(prediction):  # predict_split, the notebook's function
            prediction = prediction()
        expect(
            isinstance(prediction, dict) and set(prediction) == set(SPLIT_KEYS),
            f"Return a dict with the keys {', '.join(SPLIT_KEYS)} (three whole numbers), got {prediction!r}.",
        )
        expect(
            all(
                isinstance(prediction[k], (int, np.integer)) and not isinstance(prediction[k], bool)
                for k in SPLIT_KEYS
            ),
            "Each prediction is a whole number (an int): "
            + ", ".join(f"{k}={prediction[k]!r}" for k in SPLIT_KEYS)
            + ".",
        )
        strategy = _need_two_replicas(exercise_id, strategy)
        one = measure_fit_split(tf.distribute.OneDeviceStrategy("/cpu:0"))
        two = measure_fit_split(strategy)
        for name, got in [("one device", one), ("2 replicas", two)]:
            print(
                f"{name:>10}: global batch {got['global_batch']:>3}, {got['steps_per_epoch']} steps, "
                f"last step {' + '.join(map(str, got['last_step']))} examples, "
                f"optimizer.iterations = {got['iterations']}"
            )
        steps, per_replica, iterations = (prediction[k] for k in SPLIT_KEYS)
        expect(
            steps != one["steps_per_epoch"],
            f"steps_per_epoch={steps} is the one-device count. On 2 replicas each step of fit takes a "
            f"global batch of {SPLIT_PER_REPLICA} x 2 = {two['global_batch']} examples, so the epoch "
            "has about half as many steps.",
        )
        expect(
            steps == two["steps_per_epoch"],
            f"steps_per_epoch={steps}, measured {two['steps_per_epoch']}: {SPLIT_EXAMPLES:,} examples "
            f"in global batches of {two['global_batch']}, the last one shorter (round up).",
        )
        last_batch = sum(two["last_step"])
        expect(
            per_replica != last_batch,
            f"last_step_per_replica={per_replica} is the whole last batch. fit splits every batch, "
            "the short last one too, evenly over the replicas.",
        )
        expect(
            per_replica != SPLIT_PER_REPLICA,
            f"last_step_per_replica={per_replica}: the last batch is shorter than a full global batch "
            f"({SPLIT_EXAMPLES:,} is not a multiple of {two['global_batch']}); what is left is split.",
        )
        expect(
            per_replica == two["last_step_per_replica"],
            f"last_step_per_replica={per_replica}, measured {two['last_step']} (replica 0, replica 1): "
            f"the last batch holds {last_batch} examples, split over 2 replicas.",
        )
        expect(
            iterations != 2 * two["steps_per_epoch"],
            f"iterations={iterations} counts every replica's step. optimizer.iterations is one "
            "mirrored counter: each step all-reduces the gradients and applies ONE update to every "
            "copy, so it counts global steps.",
        )
        expect(
            iterations == two["iterations"],
            f"iterations={iterations}, measured {two['iterations']}: optimizer.iterations goes up "
            "by one per step of fit (one all-reduced update).",
        )
    passed(
        exercise_id,
        f"on 2 replicas: {two['steps_per_epoch']} steps of {two['global_batch']}, the last split "
        f"{' + '.join(map(str, two['last_step']))}, optimizer.iterations = {two['iterations']} "
        f"(one device: {one['steps_per_epoch']}).",
    )


# --------------------------------------------------------------------------- latest_checkpoint


def _plant_checkpoints(folder: Path, epochs: list[int], newest_on_disk: int) -> None:
    """Empty checkpoint files; the modification times make ``newest_on_disk`` look newest."""
    for index, epoch in enumerate(epochs):
        path = folder / f"ckpt_{epoch}.weights.h5"
        path.write_bytes(b"")
        stamp = 1_700_000_000 + index
        os.utime(path, (stamp, stamp))
    os.utime(folder / f"ckpt_{newest_on_disk}.weights.h5", (1_800_000_000, 1_800_000_000))


def _name(result: Union[str, os.PathLike, None]) -> Optional[str]:
    return None if result is None else Path(result).name


def check_latest_checkpoint(latest_checkpoint: Callable[[Any], Any]) -> None:
    """``latest_checkpoint(folder)``: the ``ckpt_<epoch>.weights.h5`` with the highest epoch, or None."""
    exercise_id = "latest_checkpoint"
    with exercise(exercise_id):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            expect(
                latest_checkpoint(folder) is None,
                "In an empty folder there is no checkpoint: return None (as "
                "tf.train.latest_checkpoint did), do not raise.",
            )
            (folder / "best.keras").write_bytes(b"")
            (folder / "checkpoint").write_text("")
            expect(
                latest_checkpoint(folder) is None,
                "A folder holding only best.keras and a file named `checkpoint` has no "
                "`.weights.h5` checkpoint: return None.",
            )
            epochs = [2, 10, 1, 9, 12, 3]
            _plant_checkpoints(folder, epochs, newest_on_disk=3)
            result = latest_checkpoint(folder)
            expect(
                isinstance(result, (str, os.PathLike)),
                f"Return the checkpoint's path (a str or a pathlib.Path), got {result!r}.",
            )
            name = _name(result)
            expect(
                name != "best.keras" and name != "checkpoint",
                f"Only `ckpt_<epoch>.weights.h5` files are epoch checkpoints; you returned {name}.",
            )
            expect(
                name != "ckpt_9.weights.h5",
                "You returned ckpt_9.weights.h5, but ckpt_12.weights.h5 is later: the names were "
                "compared as text ('9' > '1'). Extract the epoch number and compare it as an int.",
            )
            expect(
                name != "ckpt_3.weights.h5",
                "You returned ckpt_3.weights.h5, the file modified last, but ckpt_12.weights.h5 "
                "holds a later epoch. File times change when files are copied or restored; use the "
                "epoch number in the name.",
            )
            expect(
                name == "ckpt_12.weights.h5",
                f"Expected ckpt_12.weights.h5 (the highest epoch among {sorted(epochs)}), got {name}.",
            )
            expect(
                Path(result).parent.resolve() == folder.resolve(),
                "Return the path of the file inside the folder you were given "
                "(folder / name), not just its name.",
            )
    passed(exercise_id, "ckpt_12.weights.h5 chosen over ckpt_9 (text order) and ckpt_3 (newest file).")
