"""Checks for notebook 03, distributed training with Keras ``Model.fit``.

* :func:`check_fit_distributed` - a single-device ``fit`` script made distributed: trained on 2
  replicas, it must match the single-device script run on the global batch, weight for weight.
* :func:`check_scaled_batch_and_lr` - the global batch and the linearly scaled learning rate.
* :func:`check_learning_rate_history` - a callback recording the learning rate of every epoch,
  run under a 2-replica ``MirroredStrategy`` (where ``float(optimizer.learning_rate)`` fails).
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
    """A MirroredStrategy over 2 virtual CPUs, or None when TensorFlow has only one CPU device."""
    from ..devices import cpu_count
    from ..strategies import mirrored_cpus

    if cpu_count() < 2:
        return None
    return mirrored_cpus(2)


def _need_two_replicas(exercise_id: str) -> Any:
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
    from .._synthetic import make_images

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


def check_fit_distributed(fit_distributed: Callable[..., Any]) -> None:
    """``fit_distributed(strategy, images, labels, per_replica_batch, epochs)`` on 2 replicas.

    It must return the trained model, built and compiled in ``strategy.scope()``, trained on
    batches of ``per_replica_batch * replicas`` examples, and end with the same weights as the
    single-device script trained on that global batch.
    """
    import keras

    exercise_id = "fit_distributed"
    with exercise(exercise_id):
        strategy = _need_two_replicas(exercise_id)
        images, labels = _check_images()
        per_replica, epochs = CHECK_PER_REPLICA_BATCH, 1
        global_batch = per_replica * strategy.num_replicas_in_sync
        try:
            model = fit_distributed(
                strategy, images, labels, per_replica_batch=per_replica, epochs=epochs
            )
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


# --------------------------------------------------------------------------- LearningRateHistory


def _tiny_model(strategy: Any) -> Any:
    import keras

    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(4, kernel_initializer=keras.initializers.Zeros())]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def _run_with_callback(callback: Any, model: Any, epochs: int) -> None:
    import keras

    from ..callbacks import three_phase_decay

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = rng.integers(0, 4, size=32)
    schedule = keras.callbacks.LearningRateScheduler(three_phase_decay(3))
    model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=[schedule, callback])


def check_learning_rate_history(callback_class: type) -> None:
    """``callback_class()`` records one float learning rate per epoch in ``.rates``, per fit."""
    import keras

    from ..callbacks import three_phase_decay

    exercise_id = "learning_rate_history"
    with exercise(exercise_id):
        strategy = _need_two_replicas(exercise_id)
        callback = callback_class()
        expect(
            isinstance(callback, keras.callbacks.Callback),
            f"{callback_class.__name__} should subclass keras.callbacks.Callback.",
        )
        model = _tiny_model(strategy)
        try:
            _run_with_callback(callback, model, epochs=3)
        except AttributeError as error:
            if "'lr'" in str(error):
                expect(
                    False,
                    "Keras 3 optimizers have no `.lr` attribute (Keras 2's alias is gone): read "
                    "`self.model.optimizer.learning_rate`.",
                )
            raise
        except TypeError as error:
            if "MirroredVariable" in str(error) or "DistributedVariable" in str(error):
                expect(
                    False,
                    "float(self.model.optimizer.learning_rate) works on one replica but fails on "
                    "two: the variable behind it is a MirroredVariable. Convert with "
                    "`.numpy()` first: float(self.model.optimizer.learning_rate.numpy()).",
                )
            raise
        rates = getattr(callback, "rates", None)
        expect(
            isinstance(rates, list),
            "After fit, the callback should have a list `self.rates` (create it in on_train_begin: "
            "self.rates = []).",
        )
        want = three_phase_decay(3).rates_for(3)
        expect(
            len(rates) == 3,
            f"After 3 epochs, self.rates should hold 3 rates (one per epoch), got {len(rates)}: "
            f"{rates!r}. Append one value in on_epoch_end.",
        )
        expect(
            all(isinstance(rate, float) for rate in rates),
            "Record Python floats, not variables, tensors or NumPy scalars (got "
            f"{', '.join(type(r).__name__ for r in rates)}): a variable would change after you "
            "read it. Use float(self.model.optimizer.learning_rate.numpy()).",
        )
        expect_close(
            rates,
            want,
            "The recorded rates should be the ones LearningRateScheduler set for each epoch "
            "(1e-3, 1e-4, 1e-5 with a three-phase decay over 3 epochs): read the optimizer's "
            "learning_rate at the end of the epoch",
            rtol=1e-6,
            atol=0.0,
        )
        _run_with_callback(callback, model, epochs=2)  # the same model again: no new tracing
        expect(
            len(callback.rates) == 2,
            f"Used for a second fit of 2 epochs, the callback holds {len(callback.rates)} rates: "
            "start a new list in on_train_begin so that each fit records only its own epochs.",
        )
    passed(exercise_id, "one float per epoch on 2 replicas, [0.001, 0.0001, 1e-05], a new list per fit.")


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
