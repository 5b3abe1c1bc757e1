"""The doctor's training probes: a few real steps of a tiny model under a strategy, and what happened.

Notebook 02 writes the same probes in its cells (its support matrix); the doctor
(:mod:`course_tools.doctor`, :mod:`course_tools.doctor_worker`) runs them to say whether this
runtime trains with ``Model.fit`` and the custom loop, and whether the known traps are present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from course_utils.errors import exception_line

#: Examples per step across all replicas, steps per probe and input features: enough to trace,
#: run and apply real updates, small enough that a probe costs about a second.
GLOBAL_BATCH = 16
STEPS = 2
FEATURES = 8


def probe_dataset() -> Any:
    """A small, learnable, deterministic classification problem as a repeated dataset of global batches."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, FEATURES)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()


def probe_model(seed: int = 0) -> Any:
    """Dense(8, relu) -> Dense(2 logits). Build it inside ``strategy.scope()``."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation="relu", kernel_initializer=init),
            keras.layers.Dense(2, kernel_initializer=init),
        ]
    )


def fit_probe(strategy: Any, steps: int = STEPS) -> list[float]:
    """Compile the model in ``strategy.scope()`` and ``fit`` it for ``steps`` steps; the losses."""
    import keras

    with strategy.scope():
        model = probe_model()
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    # One step per epoch, so that the history holds the loss of every step.
    history = model.fit(probe_dataset(), epochs=steps, steps_per_epoch=1, shuffle=False, verbose=0)
    return [float(v) for v in history.history["loss"]]


def custom_loop_probe(strategy: Any, *, build_optimizer: bool = False, steps: int = STEPS) -> list[float]:
    """The custom training tutorial's loop with Adam for ``steps`` steps; the global losses.

    ``build_optimizer=True`` creates Adam's slot variables inside ``strategy.scope()`` before the
    first step, the work-around of keras-team/keras#23085.
    """
    import keras
    import tensorflow as tf

    with strategy.scope():
        model = probe_model()
        optimizer = keras.optimizers.Adam(0.01)
        if build_optimizer:
            optimizer.build(model.trainable_variables)
        per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def step_fn(inputs: Any) -> Any:
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                per_example(y, model(x, training=True)), global_batch_size=GLOBAL_BATCH
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch: Any) -> Any:
        per_replica = strategy.run(step_fn, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(strategy.experimental_distribute_dataset(probe_dataset()))
    return [float(train_step(next(iterator))) for _ in range(steps)]


@dataclass(frozen=True)
class Outcome:
    """What a probe did: ``status`` ``works`` or ``fails``, and a one-line ``note``."""

    status: str
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "works"

    def __str__(self) -> str:
        return f"{self.status}: {self.note}" if self.note else self.status


def attempt(probe: Callable[..., Sequence[float]], *args: Any, **kwargs: Any) -> Outcome:
    """Run a probe; ``works`` when it trained and every loss is finite, else ``fails`` and why."""
    try:
        losses = probe(*args, **kwargs)
    except Exception as error:  # a probe failing is the information we are after
        return Outcome("fails", exception_line(error))
    if not losses or not all(math.isfinite(v) for v in losses):
        return Outcome("fails", f"non-finite loss after {len(losses)} steps")
    return Outcome("works", f"{len(losses)} steps, finite loss")
