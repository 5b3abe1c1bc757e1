"""The benchmark's three ways to train the same model (notebook 09 writes the first two in its cells).

Each ``make_*`` function builds the custom-training CNN, its optimizer and its input pipeline
inside ``strategy.scope()`` and returns a :class:`Trainer`. ``trainer.run(steps)`` trains for
``steps`` steps and returns their mean loss as a Python float. Returning a Python number matters:
TensorFlow may hand control back to Python before the work is done (always on GPUs and TPUs, and
``tf.data`` works ahead in background threads), so a clock read before a value is fetched
measures the dispatch, not the training. ``trainer.time_runs(...)`` times runs that way.

* :func:`make_naive_ctl`: the loop of the *Custom training with tf.distribute.Strategy*
  tutorial: one ``tf.function`` call per step, the distributed dataset iterated from Python
  epoch after epoch, the tutorial's pipeline (shuffle and batch; the last batch of an epoch is
  smaller, and nothing is prefetched but what ``tf.data`` adds by itself).
* :func:`make_ctl`: the loop the course recommends: ``steps_per_call`` steps inside one
  ``tf.function`` call (a ``tf.range`` loop over the iterator, so Python is involved once per
  call, not once per step; the next batch is taken while the current step computes), the input
  cached, repeated (one iterator for the whole training, full batches only) and prefetched
  (``tf.data.AUTOTUNE``).
* :func:`make_fit`: ``Model.fit`` with ``steps_per_execution=steps_per_call`` and the same
  pipeline as ``ctl``.

All three build the optimizer inside the scope before the first step: in Keras 3 the tutorial's
loop with Adam fails on 2 or more replicas otherwise (keras-team/keras#23085). They share the
per-replica step too (:func:`replica_step`; ``fit`` uses Keras's own, which does the same), so
what separates the loops is how often Python is involved and how the input is fed. Note that in
TensorFlow 2.21 ``tf.data`` adds a ``prefetch`` to the tutorial's pipeline by itself (the
``inject_prefetch`` optimisation), so writing one gains little there. Taught in notebook 09; the
benchmark is :mod:`course_tools.bench`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from course_utils.runtime import import_tensorflow as _tf

#: The loops, in the order tables show them.
LOOPS: tuple[str, ...] = ("naive_ctl", "ctl", "fit")


def _nothing() -> None:
    return None


@dataclass
class Trainer:
    """A model ready to train with one of the loops.

    ``run(steps)`` trains and waits for the result; ``time_runs`` times several runs after a
    warm-up. For ``ctl``, ``steps_per_call`` may be changed between runs (the compiled loop takes
    it as an argument, so nothing is traced again).
    """

    loop: str
    strategy: Any
    model: Any
    per_replica_batch: int
    steps_per_call: int
    _run: Callable[[int, int], float] = field(repr=False)
    _time_runs: Optional[Callable[..., list[float]]] = field(default=None, repr=False)
    _use_dataset: Optional[Callable[[Any, Any], None]] = field(default=None, repr=False)
    steps_done: int = 0

    @property
    def replicas(self) -> int:
        return int(self.strategy.num_replicas_in_sync)

    @property
    def global_batch(self) -> int:
        """Examples per step: per-replica batch x replicas."""
        return self.per_replica_batch * self.replicas

    def _check(self, steps: int) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0 or steps % self.steps_per_call:
            raise ValueError(
                f"{self.loop}: steps={steps!r} must be a positive multiple of "
                f"steps_per_call={self.steps_per_call}."
            )

    def use_dataset(self, dataset: Any, input_options: Any = None) -> None:
        """Train on ``dataset`` from now on (batched with the global batch, repeated, with the
        same element shapes): the compiled step is reused, nothing is traced again.

        ``input_options`` (a ``tf.distribute.InputOptions``) is passed to
        ``strategy.experimental_distribute_dataset`` by the custom loops.
        """
        assert self._use_dataset is not None
        self._use_dataset(dataset, input_options)

    def run(self, steps: int) -> float:
        """Train ``steps`` steps (a multiple of ``steps_per_call``); return their mean loss."""
        self._check(steps)
        loss = self._run(steps, self.steps_per_call)
        self.steps_done += steps
        return loss

    def time_runs(
        self,
        steps: int,
        runs: int,
        warmup_runs: int = 1,
        *,
        before_run: Optional[Callable[[], None]] = None,
        after_run: Optional[Callable[[], None]] = None,
    ) -> list[float]:
        """Seconds taken by each of ``runs`` timed runs of ``steps`` steps, after ``warmup_runs``
        untimed ones (the first call traces and optimises the graph: seconds, not milliseconds).

        ``before_run`` and ``after_run`` are called around every timed run, outside the clock
        (the benchmark uses them to let processes take turns).
        """
        self._check(steps)
        hooks = (before_run or _nothing, after_run or _nothing)
        if self._time_runs is not None:
            seconds = self._time_runs(steps, runs, warmup_runs, hooks)
            self.steps_done += steps * (runs + warmup_runs)
            return seconds
        for _ in range(warmup_runs):
            self.run(steps)
        seconds = []
        for _ in range(runs):
            hooks[0]()
            try:
                start = time.perf_counter()
                self.run(steps)  # returns a Python float: the work is done
                seconds.append(time.perf_counter() - start)
            finally:
                hooks[1]()
        return seconds


def scaled_images(images: np.ndarray) -> np.ndarray:
    """``uint8`` images -> ``float32`` in [0, 1] with a channel axis, as the tutorial does in NumPy."""
    return (np.asarray(images, dtype=np.float32) / np.float32(255.0)).reshape(-1, 28, 28, 1)


def _arrays(images: Optional[np.ndarray], labels: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels a loop builds its own dataset from, when it is given no ``dataset``."""
    if images is None or labels is None:
        raise ValueError("Pass either dataset= or both images= and labels=.")
    return images, labels


def tutorial_dataset(images: np.ndarray, labels: np.ndarray, global_batch: int, seed: int = 1) -> Any:
    """The tutorial's pipeline: shuffle the whole set and batch it (one pass = one epoch; the
    last batch of an epoch may be smaller)."""
    tf = _tf()
    return (
        tf.data.Dataset.from_tensor_slices((scaled_images(images), labels))
        .shuffle(len(labels), seed=seed)
        .batch(global_batch)
    )


def course_dataset(images: np.ndarray, labels: np.ndarray, global_batch: int, seed: int = 1) -> Any:
    """The course's pipeline: cache, shuffle, batch, repeat, and prefetch with AUTOTUNE."""
    tf = _tf()
    return (
        tf.data.Dataset.from_tensor_slices((scaled_images(images), labels))
        .cache()
        .shuffle(len(labels), seed=seed)
        .batch(global_batch, drop_remainder=True)
        .repeat()
        .prefetch(tf.data.AUTOTUNE)
    )


def _model_and_optimizer(strategy: Any, seed: int, learning_rate: float) -> tuple[Any, Any]:
    import keras

    from course_utils.models import custom_training_cnn

    with strategy.scope():
        model = custom_training_cnn(seed=seed)
        optimizer = keras.optimizers.Adam(learning_rate)
        optimizer.build(model.trainable_variables)  # in scope, before the first step (#23085)
    return model, optimizer


def replica_step(strategy: Any, model: Any, optimizer: Any, global_batch: int) -> Callable[..., Any]:
    """The tutorial's per-replica step: per-example losses averaged over the *global* batch,
    the regularization loss scaled by the number of replicas, then one optimizer update."""
    import keras

    from course_utils.models import tutorial_train_step

    with strategy.scope():
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    step = tutorial_train_step(model, optimizer, accuracy, global_batch)
    step.accuracy = accuracy  # type: ignore[attr-defined]
    return step


@dataclass(frozen=True)
class LoopOptions:
    """How a loop is built. ``dataset`` (batched with the global batch; repeated for ``ctl`` and
    ``fit``) replaces the loop's own pipeline; ``naive_ctl`` makes one step per call whatever
    ``steps_per_call`` says."""

    per_replica_batch: int = 64
    steps_per_call: int = 25
    seed: int = 1
    learning_rate: float = 1e-3
    dataset: Any = None


@dataclass(frozen=True)
class _Parts:
    global_batch: int
    model: Any
    optimizer: Any
    dataset: Any


def _parts(
    strategy: Any, images: Any, labels: Any, options: LoopOptions, pipeline: Callable[..., Any]
) -> _Parts:
    """The model and optimizer built in the scope, and the dataset (``options.dataset`` or ``pipeline``'s)."""
    global_batch = options.per_replica_batch * strategy.num_replicas_in_sync
    model, optimizer = _model_and_optimizer(strategy, options.seed, options.learning_rate)
    dataset = options.dataset
    if dataset is None:
        dataset = pipeline(*_arrays(images, labels), global_batch, options.seed)
    return _Parts(global_batch, model, optimizer, dataset)


def make_naive_ctl(
    strategy: Any, images: Any = None, labels: Any = None, options: LoopOptions = LoopOptions()
) -> Trainer:
    """The tutorial's loop, epoch after epoch: ``for x in dist_dataset: total_loss +=
    distributed_train_step(x)``, one ``tf.function`` call per step."""
    tf = _tf()
    parts = _parts(strategy, images, labels, options, tutorial_dataset)
    step = replica_step(strategy, parts.model, parts.optimizer, parts.global_batch)

    def epochs(dist_dataset: Any) -> Any:
        while True:
            for inputs in dist_dataset:  # a new pass over the data each epoch, as in the tutorial
                yield inputs

    state = {"batches": epochs(strategy.experimental_distribute_dataset(parts.dataset))}

    def use_dataset(new: Any, input_options: Any = None) -> None:
        state["batches"] = epochs(strategy.experimental_distribute_dataset(new, input_options))

    @tf.function
    def distributed_train_step(inputs: Any) -> Any:
        per_replica_losses = strategy.run(step, args=(inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    def run(steps: int, steps_per_call: int) -> float:
        total = 0.0
        batches = state["batches"]
        for _ in range(steps):
            total += distributed_train_step(next(batches))
        return float(total) / steps

    return Trainer("naive_ctl", strategy, parts.model, options.per_replica_batch, 1, run, None, use_dataset)


def make_ctl(
    strategy: Any, images: Any = None, labels: Any = None, options: LoopOptions = LoopOptions()
) -> Trainer:
    """The course's loop: ``steps_per_call`` steps per ``tf.function`` call, input prefetched."""
    tf = _tf()
    parts = _parts(strategy, images, labels, options, course_dataset)
    step = replica_step(strategy, parts.model, parts.optimizer, parts.global_batch)
    state = {"iterator": iter(strategy.experimental_distribute_dataset(parts.dataset))}

    def use_dataset(new: Any, input_options: Any = None) -> None:
        state["iterator"] = iter(strategy.experimental_distribute_dataset(new, input_options))

    @tf.function
    def train_steps(iterator: Any, steps: Any) -> Any:
        total = tf.constant(0.0)
        inputs = next(iterator)
        for i in tf.range(steps):  # a loop inside the graph: no return to Python between steps
            per_replica_losses = strategy.run(step, args=(inputs,))
            if i + 1 < steps:
                # Ask for the next batch now: nothing in this step waits for it, so TensorFlow
                # hands it over while the step computes (Keras's own multi-step loop does this).
                inputs = next(iterator)
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
        return total

    def run(steps: int, steps_per_call: int) -> float:
        calls = tf.constant(steps_per_call)  # a tensor: other values reuse the same graph
        total = 0.0
        for _ in range(steps // steps_per_call):
            total += train_steps(state["iterator"], calls)
        return float(total) / steps

    return Trainer(
        "ctl",
        strategy,
        parts.model,
        options.per_replica_batch,
        options.steps_per_call,
        run,
        None,
        use_dataset,
    )


def _epoch_timer(first_timed: int, hooks: tuple[Callable[[], None], Callable[[], None]]) -> Any:
    """A Keras callback that records the seconds of every epoch, calling ``hooks`` around the
    epochs from ``first_timed`` on."""
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.seconds: list[float] = []
            self._start = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if len(self.seconds) >= first_timed:
                hooks[0]()
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            # Keras hands the logs to callbacks as Python numbers: the epoch's work is done.
            self.seconds.append(time.perf_counter() - self._start)
            if len(self.seconds) > first_timed:
                hooks[1]()

    return EpochTimer()


def make_fit(
    strategy: Any, images: Any = None, labels: Any = None, options: LoopOptions = LoopOptions()
) -> Trainer:
    """``Model.fit`` with ``steps_per_execution=steps_per_call``; each timed run is one epoch of
    one ``fit`` call."""
    import keras

    parts = _parts(strategy, images, labels, options, course_dataset)
    model = parts.model
    with strategy.scope():
        model.compile(
            optimizer=parts.optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=options.steps_per_call,
        )
    state = {"epoch": 0, "dataset": parts.dataset}

    def use_dataset(new: Any, input_options: Any = None) -> None:
        if input_options is not None:
            raise ValueError("Model.fit distributes the dataset itself: input_options is not used.")
        state["dataset"] = new

    def fit_epochs(steps: int, epochs: int, callbacks: list[Any]) -> Any:
        history = model.fit(
            state["dataset"],
            initial_epoch=state["epoch"],
            epochs=state["epoch"] + epochs,
            steps_per_epoch=steps,
            shuffle=False,  # the dataset is shuffled already
            verbose=0,
            callbacks=callbacks,
        )
        state["epoch"] += epochs
        return history

    def run(steps: int, steps_per_call: int) -> float:
        return float(fit_epochs(steps, 1, []).history["loss"][-1])

    def time_runs(steps: int, runs: int, warmup_runs: int, hooks: tuple[Any, Any]) -> list[float]:
        # Every call of fit pays its own set-up (it distributes the dataset again, starts a new
        # iterator, builds its callbacks): about 0.4 s per call on 2 virtual CPUs here, more for
        # the first calls. A real training calls fit once, so the runs are the epochs of one
        # call, timed by a callback.
        timer = _epoch_timer(warmup_runs, hooks)
        fit_epochs(steps, warmup_runs + runs, [timer])
        return timer.seconds[warmup_runs:]

    return Trainer(
        "fit", strategy, model, options.per_replica_batch, options.steps_per_call, run, time_runs, use_dataset
    )


MAKERS: dict[str, Callable[..., Trainer]] = {
    "naive_ctl": make_naive_ctl,
    "ctl": make_ctl,
    "fit": make_fit,
}


def make_trainer(
    loop: str, strategy: Any, images: Any = None, labels: Any = None, options: LoopOptions = LoopOptions()
) -> Trainer:
    """Build one of :data:`LOOPS` by name."""
    if loop not in MAKERS:
        raise ValueError(f"Unknown loop {loop!r}; choose one of {', '.join(LOOPS)}.")
    return MAKERS[loop](strategy, images, labels, options)
