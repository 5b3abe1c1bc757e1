"""Notebook 06: the checks of its exercises (TPU and hardware detection).

``masked_last_batch`` and ``tpu_ready_loop`` run the student's code on one device and on 2 replicas
over virtual CPUs: an evaluation over every example in one call of a compiled loop (the short last
batch padded with examples of weight 0, static shapes, one device's loss), and the naive loop without
its four TPU faults (one trace, only tensors in ``strategy.run``'s args, several steps per call, static
shapes, a built optimizer, one device's weights). ``global_batches``, ``trace_count`` and ``replica_batches`` are
predictions (the last two literals, read by the grader's judge); the checks make their own run.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from ..errors import ExerciseError, ReplicaCountError
from ..runtime import import_tensorflow as _tf
from . import harness, in_kernel, unseen

#: The data of both coding checks: 44 examples in global batches of 8 (5 whole batches and 4 left over).
EXAMPLES, GLOBAL_BATCH = 44, 8
#: replica_batches: naive_loop's 43 examples, whose 3 left over split unevenly on 2 replicas.
REPLICA_EXAMPLES = 43
#: Steps per call in the tpu_ready_loop check: calls of 2, 2 and 1 steps.
STEPS_PER_CALL = 2
#: tpu_ready_loop's second data: 6 whole batches, none left over, where off-by-ones hidden by 44 show.
EVEN_EXAMPLES = 48
#: Weights equal to one device's within this (relative): float noise of these steps is ~1e-7.
WEIGHT_RTOL = 1e-5


def _two_replicas() -> Any:
    try:
        return compare.checking_strategy(2)
    except ReplicaCountError as error:
        raise ExerciseError(str(error)) from None


def check_data(examples: int = EXAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: 6 features and a label in 0..2 per example; fixed by a seed."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(examples, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=examples).astype(np.int32)
    return x, y


# --------------------------------------------------------------------------- trace_count

#: trace_count: a jit-compiled step over TRACE_EPOCHS epochs of TRACE_EXAMPLES numbers in batches of
#: TRACE_BATCH (3 steps an epoch, the last of 2 numbers), without and with drop_remainder.
TRACE_EXAMPLES, TRACE_BATCH, TRACE_EPOCHS = 10, 4, 2
TRACE_KEYS = ("batch(4)", "batch(4, drop_remainder=True)")


def traced_shapes(drop_remainder: bool) -> list[tuple]:
    """The shapes the section's ``step`` is traced for over the run: its Python runs once per trace."""
    tf = _tf()
    shapes: list[tuple] = []

    @tf.function(jit_compile=True)
    def step(batch: Any) -> Any:
        shapes.append(tuple(batch.shape))
        return tf.reduce_sum(batch * 2.0)

    numbers = tf.data.Dataset.range(TRACE_EXAMPLES).map(lambda i: tf.cast(i, tf.float32))
    for _ in range(TRACE_EPOCHS):
        for batch in numbers.batch(TRACE_BATCH, drop_remainder=drop_remainder):
            step(batch)
    expect(len(shapes) == step.experimental_get_tracing_count(), "The check's own count is off.")
    return shapes


def _counts(prediction: Any, name: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The prediction as {key: whole number}; a hint when it has another form, NotImplementedError
    while it is the placeholder."""
    expect(
        isinstance(prediction, dict) and set(prediction) == set(keys),
        f"Set {name} to a dict with a count for each of {', '.join(repr(k) for k in keys)} (got {prediction!r}).",
    )
    if any(v is None or v is Ellipsis for v in prediction.values()):
        raise NotImplementedError
    for key, value in prediction.items():
        expect(
            isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer(),
            f"{name}[{key!r}] should be a whole number (got {value!r}).",
        )
    return {key: int(prediction[key]) for key in keys}


def check_trace_count(prediction: Any) -> None:
    """``TRACES = {"batch(4)": ..., "batch(4, drop_remainder=True)": ...}``: how many times the
    section's jit-compiled step is traced over 2 epochs of 10 numbers, without and with drop_remainder."""
    with exercise("trace_count"):
        guess = _counts(prediction, "TRACES", TRACE_KEYS)
        ran = {key: traced_shapes(drop) for key, drop in zip(TRACE_KEYS, (False, True))}
        want = {key: len(shapes) for key, shapes in ran.items()}
        steps = {
            key: TRACE_EPOCHS
            * (-(-TRACE_EXAMPLES // TRACE_BATCH) if not drop else TRACE_EXAMPLES // TRACE_BATCH)
            for key, drop in zip(TRACE_KEYS, (False, True))
        }
        short, dropped = TRACE_KEYS
        for key in TRACE_KEYS:  # steps of the run or of an epoch; 2 may count batch(4)'s two shapes
            per_epoch = steps[key] // TRACE_EPOCHS
            expect(
                guess[key] not in {steps[key], per_epoch} - {want[short]},
                f"{key}: {guess[key]} is the number of steps "
                f"{'in the whole run' if guess[key] == steps[key] else 'per epoch'}, but tf.function traces "
                "only for an input shape it has not seen; a step of a known shape reuses its graph.",
            )
        expect(
            guess[short] != TRACE_EPOCHS * want[short],
            f"batch(4): {guess[short]} traces an epoch's shapes again each epoch, but a graph outlives "
            "the epoch: the second epoch's shapes were seen in the first.",
        )
        expect(
            guess[short] == want[short],
            f"batch(4): {guess[short]}: {TRACE_EXAMPLES} numbers by {TRACE_BATCH} end on a short batch; "
            "count the distinct shapes the step sees, not the steps.",
        )
        expect(
            guess[dropped] == want[dropped],
            f"batch(4, drop_remainder=True): {guess[dropped]}: drop_remainder=True drops the short batch: "
            "how many distinct shapes are left?",
        )
    passed(
        "trace_count",
        f"{TRACE_EPOCHS} epochs, traced for {ran[short]} without drop_remainder and {ran[dropped]} with it.",
    )


# --------------------------------------------------------------------------- replica_batches


def replica_batch_sizes() -> list[list[int]]:
    """Each step's batch size on each of 2 replicas: naive_loop's data (REPLICA_EXAMPLES in global
    batches of GLOBAL_BATCH, no drop_remainder) through ``experimental_distribute_dataset``."""
    tf = _tf()
    strategy = _two_replicas()
    x, y = check_data(REPLICA_EXAMPLES)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    return [
        [int(t.shape[0]) for t in strategy.experimental_local_results(images)]
        for images, _ in strategy.experimental_distribute_dataset(dataset)
    ]


def check_replica_batches(prediction: Any) -> None:
    """``BATCHES = [[replica 0, replica 1], ...]``: each step's batch size on each of 2 replicas,
    for 43 examples in global batches of 8 without drop_remainder."""
    with exercise("replica_batches"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        expect(
            isinstance(prediction, (list, tuple))
            and all(
                isinstance(pair, (list, tuple))
                and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                for pair in prediction
            ),
            "Set BATCHES to a list with one [replica 0, replica 1] pair of whole numbers per step "
            f"(got {prediction!r}).",
        )
        guess = [list(pair) for pair in prediction]
        want = replica_batch_sizes()
        whole, left = divmod(REPLICA_EXAMPLES, GLOBAL_BATCH)
        expect(
            not guess or guess[0] != [GLOBAL_BATCH, GLOBAL_BATCH],
            f"Each replica got the whole global batch of {GLOBAL_BATCH}: experimental_distribute_dataset "
            "splits every global batch between the replicas.",
        )
        expect(
            len(guess) != whole,
            f"{len(guess)} steps: without drop_remainder the {left} examples left over make a step "
            "of their own.",
        )
        expect(
            len(guess) != 2 * whole + 1,
            f"{len(guess)} steps count each replica's batches one after the other; a step gives every "
            "replica its share of one global batch at once.",
        )
        last = guess[-1] if len(guess) == len(want) else None
        expect(
            last is None or sum(last) <= left,
            f"The last step holds only the {left} examples left over, not {sum(last or [])}: nothing pads it.",
        )
        expect(
            last is None or last != [left, 0],
            "The last global batch is split between the replicas as evenly as it goes, not given to "
            "replica 0 first.",
        )
        expect(
            last is None or last != want[-1][::-1],
            "The last step's shares are on the wrong replicas: which replica gets the extra example when "
            "a batch splits unevenly?",
        )
        expect(
            guess == want,
            "Count the steps (the whole global batches, plus one for the rest), then split each global "
            "batch between 2 replicas as evenly as it goes.",
        )
    passed(
        "replica_batches",
        f"{whole} steps of {want[0]} and a last step of {want[-1]}: the short global batch, split as "
        "evenly as it goes.",
    )


# --------------------------------------------------------------------------- tpu_ready_loop


def _shape_recorder() -> Any:
    """A layer that passes its input on and records the shape it is called (or traced) with."""
    import keras

    class ShapeRecorder(keras.layers.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.shapes: list[tuple] = []

        def call(self, inputs: Any) -> Any:
            self.shapes.append(tuple(inputs.shape))  # in a tf.function: once per trace
            return inputs

    return ShapeRecorder()


def _check_model() -> tuple[Any, Any]:
    """A 6 -> 3 linear classifier with a shape recorder in front, its weights fixed by a seed."""
    import keras

    keras.utils.set_random_seed(0)
    recorder = _shape_recorder()
    model = keras.Sequential([keras.Input((6,)), recorder, keras.layers.Dense(3)])
    recorder.shapes.clear()  # forget the symbolic call that built the model
    return model, recorder


def _optimizer() -> Any:
    """SGD with momentum that remembers whether its first step found it unbuilt."""
    import keras

    class SGD(keras.optimizers.SGD):
        def __init__(self) -> None:
            super().__init__(0.1, momentum=0.9)
            self.built_by_a_step = False

        def apply_gradients(self, grads_and_vars: Any) -> Any:
            if not self.built:  # its variables would be made inside the step (keras-team/keras#23085)
                self.built_by_a_step = True
            return super().apply_gradients(grads_and_vars)

    return SGD()


def _calls(examples: int = EXAMPLES) -> list[int]:
    """The number of steps of each call: whole batches in calls of at most STEPS_PER_CALL (2, 2, 1)."""
    whole = examples // GLOBAL_BATCH
    return [min(STEPS_PER_CALL, whole - first) for first in range(0, whole, STEPS_PER_CALL)]


def _reference(weights: list, examples: int, restart: bool = False) -> tuple[np.ndarray, list[float]]:
    """One device, no strategy: every whole batch once; the weights' change and each call's mean loss.

    ``restart=True``: the mistake of a new iterator per call, every call starting at the first batch."""
    import keras

    tf = _tf()
    x, y = check_data(examples)
    model, _ = _check_model()
    model.set_weights(weights)
    optimizer = _optimizer()
    before = compare.flat(model.trainable_variables)
    losses = []
    order = [s for n in _calls(examples) for s in range(n)] if restart else range(examples // GLOBAL_BATCH)
    for s in order:
        images, labels = (
            x[s * GLOBAL_BATCH : (s + 1) * GLOBAL_BATCH],
            y[s * GLOBAL_BATCH : (s + 1) * GLOBAL_BATCH],
        )
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    starts = np.cumsum([0] + _calls(examples))
    calls = [losses[a:b] for a, b in zip(starts[:-1], starts[1:])]
    return compare.flat(model.trainable_variables) - before, [float(np.mean(c)) for c in calls]


def _not_tensors(structure: Any) -> list[str]:
    """The type names of the leaves of ``structure`` that are no tensor and cannot become one: what
    ``TPUStrategy.run`` refuses, since ``tpu.replicate`` converts every argument to a tensor."""
    tf = _tf()
    refused = []
    for leaf in tf.nest.flatten(structure, expand_composites=True):
        if leaf is None or isinstance(leaf, (tf.Tensor, tf.Variable, tf.distribute.DistributedValues)):
            continue
        try:
            tf.convert_to_tensor(leaf)
        except (TypeError, ValueError):
            refused.append(type(leaf).__name__)
    return refused


class _Watched:
    """The strategy the check hands to the student's code: every call passes through; it notes the args of
    ``strategy.run`` that ``TPUStrategy.run`` could not take, and keeps the datasets distributed."""

    def __init__(self, strategy: Any) -> None:
        self._strategy = strategy
        self.refused: list[str] = []
        self.runs = 0
        self.datasets: list[Any] = []

    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        self.runs += 1
        self.refused += _not_tensors((args, kwargs or {}))
        return self._strategy.run(fn, args=args, kwargs=kwargs, options=options)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        self.datasets.append(dataset)
        return self._strategy.experimental_distribute_dataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
        self.datasets.append(dataset_fn)
        return self._strategy.distribute_datasets_from_function(dataset_fn, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._strategy, name)


def _run_loop(strategy: Any, loop: Callable[..., Any], weights: list, examples: int) -> dict[str, Any]:
    """The student's loop on ``strategy`` from ``weights``, with an optimizer made (not built) in its
    scope: what it did, as plain data."""
    x, y = check_data(examples)
    with strategy.scope():
        model, recorder = _check_model()
        model.set_weights(weights)
        optimizer = _optimizer()
    before = compare.flat(model.trainable_variables)
    watched = _Watched(strategy)
    result = loop(watched, model, optimizer, x, y, GLOBAL_BATCH, STEPS_PER_CALL)
    expect(
        isinstance(result, tuple) and len(result) == 2,
        "tpu_ready_loop should return (train_steps, losses): the tf.function that ran the steps and "
        f"the loss of each call; got {type(result).__name__}.",
    )
    function, losses = result
    traced = hasattr(function, "experimental_get_tracing_count")
    return dict(
        traced=traced,
        function=type(function).__name__,
        traces=int(function.experimental_get_tracing_count()) if traced else None,
        refused=[str(name) for name in watched.refused],
        losses=[float(v) for v in losses],
        shapes=[tuple(None if d is None else int(d) for d in shape) for shape in recorder.shapes],
        steps=int(optimizer.iterations.numpy()),
        built_by_a_step=bool(optimizer.built_by_a_step),
        update=compare.flat(model.trainable_variables) - before,
    )


#: The TensorFlow errors whose hints the check gives, as the harness names them (caught in the
#: kernel: only a built-in exception crosses to the grader's judge as itself).
RAN_PAST_THE_END, UNBUILT_IN_STEP, OUTSIDE_THE_SCOPE = (
    "past the last batch",
    "placeholder",
    "outside the scope",
)


@harness
def tpu_loop_run(
    tpu_ready_loop: Callable[..., Any], replicas: int, weights: list, examples: int
) -> dict[str, Any]:
    """``tpu_ready_loop`` on 1 device (the default strategy) or 2 replicas, from ``weights`` (a list
    of arrays), on the first ``examples`` of :func:`check_data`'s kind: what it did as plain data
    (the weights' ``update``, each call's loss, the traces, the optimizer's steps, the shapes the
    model was traced for, what ``strategy.run`` could not take), or ``{"error": ...}`` for the
    TensorFlow errors the check names (:data:`RAN_PAST_THE_END`...). Never a verdict."""
    tf = _tf()
    strategy = tf.distribute.get_strategy() if replicas == 1 else _two_replicas()
    try:
        return _run_loop(strategy, tpu_ready_loop, [np.asarray(w) for w in weights], examples)
    except tf.errors.OutOfRangeError:  # next() after the last batch
        return {"error": RAN_PAST_THE_END}
    except tf.errors.InvalidArgumentError as error:
        if "placeholder" not in str(error):
            raise
        return {"error": UNBUILT_IN_STEP}
    except RuntimeError as error:  # a variable made outside the scope: "Need to be inside ..."
        if "strategy.scope()" not in str(error):
            raise
        return {"error": OUTSIDE_THE_SCOPE}


#: What :func:`tpu_loop_run` returns after a run, and the types of each.
_RUN_KEYS: dict[str, Any] = {
    "traced": bool,
    "function": str,
    "traces": (int, type(None)),
    "refused": list,
    "losses": list,
    "shapes": list,
    "steps": int,
    "built_by_a_step": bool,
    "update": np.ndarray,
}


def _read_run(run: Any, where: str, update_shape: tuple) -> dict[str, Any]:
    """The harness's answer, held to what a run gives: anything else (a forged or empty answer) fails."""

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    readable = (
        isinstance(run, dict)
        and set(run) == set(_RUN_KEYS)
        and all(isinstance(run[key], kind) for key, kind in _RUN_KEYS.items())
        and whole(run["steps"])
        and (run["traces"] is None if not run["traced"] else whole(run["traces"]))
        and all(isinstance(name, str) for name in run["refused"])
        and all(isinstance(v, float) for v in run["losses"])
        and all(isinstance(s, tuple) and s and all(d is None or whole(d) for d in s) for s in run["shapes"])
        and run["update"].dtype.kind == "f"
        and run["update"].shape == update_shape
    )
    expect(readable, f"{where} the grader could not read what your loop did (got {str(run)[:80]}).")
    return dict(run)


def _judge(run: dict[str, Any], where: str, examples: int) -> None:
    whole, steps = examples // GLOBAL_BATCH, run["steps"]
    calls = -(-whole // STEPS_PER_CALL)
    expect(
        run["traced"],
        f"{where} no tf.function ran the steps (train_steps is {run['function']}): "
        "strategy.run runs eagerly, which a TPU cannot. Call it inside a @tf.function and return that function.",
    )
    expect(
        not run["refused"],
        f"{where} strategy.run got a {', a '.join(dict.fromkeys(run['refused']))} in its args, which "
        "TPUStrategy.run cannot turn into a tensor: pass only tensors to strategy.run; close over the "
        "model and optimizer.",
    )
    expect(
        not run["built_by_a_step"],
        f"{where} the optimizer was never built, so the first step makes its variables inside the "
        "compiled step: a second trace here, and on 2 replicas of Keras 3.15.1 a crash (keras-team/keras#23085). Call "
        "optimizer.build(model.trainable_variables) inside strategy.scope() before the first step.",
    )
    expect(
        all(shape[0] is not None for shape in run["shapes"]),
        f"{where} the model was traced for batches of shape {run['shapes'][0]}: the batch dimension "
        "is None because the dataset may end on a short batch. Batch with drop_remainder=True.",
    )
    expect(
        steps == whole,
        f"{where} the optimizer took {steps} steps, {abs(steps - whole)} too "
        f"{'many' if steps > whole else 'few'}: {examples} examples make {whole} whole batches of "
        f"{GLOBAL_BATCH} (len(x) // global_batch), one step each.",
    )
    traces = run["traces"]
    expect(
        traces == 1,
        f"{where} train_steps was traced {traces} times (a TPU compiles once per trace): a Python "
        "number argument makes a new trace for each new value.",
    )
    expect(
        len(run["losses"]) != whole,
        f"{where} {whole} calls for {whole} steps: one call per step, so the host waits "
        "after every step: run several steps inside one call.",
    )
    expect(
        len(run["losses"]) == calls,
        f"{where} expected {calls} calls of at most {STEPS_PER_CALL} steps (one loss each), got "
        f"{len(run['losses'])} losses.",
    )


def check_tpu_ready_loop(tpu_ready_loop: Callable[..., Any]) -> None:
    """``tpu_ready_loop(strategy, model, optimizer, x, y, global_batch, steps_per_call)`` -> ``(train_steps,
    losses)``: traced once, several steps per call, static shapes, and one device's weights on 2 replicas.

    The loop runs in :func:`tpu_loop_run` (the harness), which sends back what it did; the references
    (one device, no strategy) and every verdict are made here."""
    with exercise("tpu_ready_loop"):
        model, _ = _check_model()
        weights = [np.array(w) for w in model.get_weights()]
        _two_replicas()  # a hint first where TensorFlow has too few devices
        cases = [
            (EXAMPLES, 1, weights, "On one device,"),
            (EXAMPLES, 2, weights, "On 2 replicas,"),
            (EVEN_EXAMPLES, 1, weights, f"On one device and {EVEN_EXAMPLES} examples,"),
        ]
        if (rng := unseen()) is not None:  # grading: starting weights the student never saw
            drawn = np.random.default_rng(rng.randrange(2**32))
            moved = [(w + drawn.normal(0.0, 0.3, w.shape)).astype(w.dtype) for w in weights]
            cases.append((EXAMPLES, 2, moved, "On 2 replicas from other starting weights,"))
        for examples, replicas, start, where in cases:
            want_update, want_losses = _reference(start, examples)
            restarted, _ = _reference(start, examples, restart=True)
            run = in_kernel(tpu_loop_run, tpu_ready_loop, replicas, start, examples)
            error = run.get("error") if isinstance(run, dict) and set(run) == {"error"} else None
            if error == RAN_PAST_THE_END:
                raise ExerciseError(
                    f"{where} a step asked for a batch after the last: {examples} examples make "
                    f"{examples // GLOBAL_BATCH} whole batches of {GLOBAL_BATCH} (len(x) // global_batch); "
                    "the calls' steps must add up to that, the last call taking only the rest."
                )
            expect(
                error != UNBUILT_IN_STEP,
                f"{where} the step crashed with 'You must feed a value for placeholder tensor': "
                "the optimizer was never built, so it makes its variables inside the compiled step "
                "(keras-team/keras#23085). Call optimizer.build(model.trainable_variables) inside "
                "strategy.scope() before the first step.",
            )
            expect(
                error != OUTSIDE_THE_SCOPE,
                f"{where} a variable was made outside strategy.scope(): build the optimizer inside "
                "strategy.scope().",
            )
            run = _read_run(run, where, want_update.shape)
            _judge(run, where, examples)
            expect(
                compare.mismatch(run["update"], restarted) > WEIGHT_RTOL,
                f"{where} every call trained on the first batches again: each call started a new "
                "iterator. Make the iterator once, before the calls, and pass it to every call of "
                "train_steps, so that each call goes on where the last one stopped.",
            )
            f = compare.factor(run["update"], want_update)
            expect(
                compare.mismatch(run["update"], want_update) <= WEIGHT_RTOL,
                f"{where} the weights moved {f:.2f}x as far as one device's (and not the same way): keep "
                "replica_step as it is (its loss is divided by the global batch) and feed each step one "
                "whole global batch.",
            )
            expect(
                np.allclose(run["losses"], want_losses, rtol=1e-4),
                f"{where} the losses of the calls are {np.round(run['losses'], 4).tolist()}, one device's "
                f"{np.round(want_losses, 4).tolist()}: add the replicas' losses with "
                "strategy.reduce(SUM, ...) and return the mean over the steps of the call.",
            )
            expect(
                bool(run["shapes"]),  # a real run calls the model; only a made-up answer skips it
                f"{where} the model was never called: train it with replica_step inside strategy.run.",
            )
    passed(
        "tpu_ready_loop",
        f"traced once; {EXAMPLES // GLOBAL_BATCH} steps of static shape in "
        f"{len(_calls())} calls; the weights and losses of one device on 1 and 2 replicas.",
    )


# --------------------------------------------------------------------------- masked_last_batch

#: masked_last_batch's (examples, replicas): 44 and 43 leave a last batch of 4 and 3 (3 splits unevenly).
EVAL_RUNS = ((EXAMPLES, 1), (EXAMPLES, 2), (REPLICA_EXAMPLES, 2))
FEATURES = 6  # of the check data: how the check finds the features in the student's dataset
MAX_BATCHES = 16  # read at most from a student's dataset (one that repeats would never end)
#: One device's loss within this (relative): float noise measured <= 5e-8, the nearest wrong answer 6e-2 off.
LOSS_RTOL = 1e-5


def _dataset_rows(source: Any, replicas: int) -> dict[str, Any] | None:
    """The student's dataset as rows (features, labels, the count of other components: a mask) and
    whether its batch dimension is static; None where the check cannot tell features from labels."""
    tf = _tf()
    if not isinstance(source, tf.data.Dataset):  # a dataset_fn: its only input pipeline
        source = source(tf.distribute.InputContext(1, 0, replicas))
    xs, ys, others = [], [], set()
    for element in itertools.islice(source, MAX_BATCHES):
        leaves = [np.asarray(v) for v in tf.nest.flatten(element)]
        feats = [v for v in leaves if v.ndim == 2 and v.shape[-1] == FEATURES and v.dtype.kind == "f"]
        ints = [v for v in leaves if v.ndim == 1 and v.dtype.kind in "iu"]
        if len(feats) != 1 or not ints:
            return None
        xs.append(feats[0].astype(np.float32))
        ys.append(ints[0])
        others.add(len(leaves) - 2)
    if not xs:
        return None
    specs = tf.nest.flatten(source.element_spec)
    static = all(spec.shape.rank and spec.shape[0] is not None for spec in specs)
    return dict(features=np.concatenate(xs), labels=np.concatenate(ys), others=max(others), static=static)


def _per_example_losses(weights: list, x: np.ndarray, y: np.ndarray, from_logits: bool = True) -> np.ndarray:
    """One device's loss of each example, from the check model with ``weights``."""
    import keras

    model, _ = _check_model()
    model.set_weights(weights)
    losses = keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=from_logits)
    return np.asarray(losses, np.float64)


class _Counted(_Watched):
    """:class:`_Watched` that also counts, as the compiled code runs, the steps (``strategy.run``'s
    executions: one a distributed batch) and the calls of the outermost ``tf.function`` around them
    (an increment added to that function's graph, once per trace), and notes each reduce op's name."""

    def __init__(self, strategy: Any) -> None:
        super().__init__(strategy)
        tf = _tf()
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.graphs: list[Any] = []  # the outermost graphs that count their calls
        self.reduces: list[str] = []

    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        tf = _tf()
        if not tf.executing_eagerly():  # traced: these ops run at every step of every call
            self.steps.assign_add(1)
            graph = tf.compat.v1.get_default_graph()
            # Up out of loops and inner functions to the function Python calls (its outer graph is no FuncGraph).
            while hasattr(getattr(graph, "outer_graph", None), "outer_graph"):
                graph = graph.outer_graph
            if not any(graph is seen for seen in self.graphs):
                self.graphs.append(graph)
                with graph.as_default():
                    self.calls.assign_add(1)
        return super().run(fn, args=args, kwargs=kwargs, options=options)

    def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any:
        self.reduces.append(str(getattr(reduce_op, "value", reduce_op)).upper())
        return self._strategy.reduce(reduce_op, value, axis=axis)


@harness
def eval_observations(evaluate: Callable[..., Any], replicas: int, weights: list, n: int) -> dict[str, Any]:
    """The student's ``evaluate_all`` on ``replicas`` replicas with the check model (built in the
    strategy's scope from ``weights``) and ``n`` examples, as plain data: what it returned and what
    the strategy (steps and calls of the compiled code, reduce ops), the dataset and the model's shape
    recorder saw (``jit_error``: where a ``jit_compile=True`` function failed, which a check names)."""
    tf = _tf()
    strategy = _two_replicas() if replicas == 2 else tf.distribute.get_strategy()
    x, y = check_data(n)
    with strategy.scope():
        model, recorder = _check_model()
        model.set_weights(weights)
    watched = _Counted(strategy)
    try:
        result = evaluate(watched, model, x, y, GLOBAL_BATCH)
    except tf.errors.InvalidArgumentError as error:  # measured with jit_compile=True
        if "Trying to access resource" in str(error):  # on 2 replicas: the other device's variables
            return {"jit_error": "variables"}
        if "IteratorGetNext" in str(error):  # a dataset read inside the XLA program
            return {"jit_error": "dataset"}
        raise
    seen: dict[str, Any] = {"returned": type(result).__name__, "pair": False}
    if not (isinstance(result, tuple) and len(result) == 2 and np.size(result[1]) == 1):
        return seen
    function = result[0]
    rows = _dataset_rows(watched.datasets[0], replicas) if watched.datasets else None
    seen.update(
        pair=True,
        loss=float(result[1]),
        function=type(function).__name__,
        compiled=hasattr(function, "experimental_get_tracing_count"),
        steps=int(watched.steps.numpy()),
        calls=int(watched.calls.numpy()),
        reduces=sorted(set(watched.reduces)),
        datasets=len(watched.datasets),
        refused=list(watched.refused),
        rows=rows,
        traces=int(function.experimental_get_tracing_count())
        if hasattr(function, "experimental_get_tracing_count")
        else 0,
        dims=sorted({s[0] for s in recorder.shapes}, key=str),
    )
    return seen


#: How the hints of a loss that is no mean over the real examples end.
MEANS = (
    "add the weighted sums (strategy.reduce(SUM, ...) across replicas) and divide once by the real examples."
)


def _judge_eval(evaluate: Callable[..., Any], replicas: int, where: str, weights: list, n: int) -> None:
    """The student's evaluate_all on ``replicas`` replicas (:func:`eval_observations`), judged here."""
    x, y = check_data(n)
    seen = in_kernel(eval_observations, evaluate, replicas, weights, n)
    jit = {
        "dataset": "XLA cannot read a dataset (IteratorGetNext)",
        "variables": "one XLA program cannot reach the variables on the other replica's device here",
    }
    expect(
        not seen.get("jit_error"),
        f"{where} a jit_compile=True function is one XLA program, and {jit.get(seen.get('jit_error'), '')}: "
        "use a plain @tf.function (on a TPU, strategy.run compiles each step with XLA anyway).",
    )
    expect(
        bool(seen.get("pair")),
        "evaluate_all should return (eval_all, loss): the tf.function that ran every batch and the mean "
        f"loss, one number; got {seen.get('returned')}.",
    )
    loss = float(seen["loss"])
    steps, calls = int(seen["steps"]), int(seen["calls"])
    expect(
        bool(seen["compiled"]) and steps > 0 and calls > 0,
        f"{where} no tf.function ran strategy.run (eval_all is {seen['function']}): a TPU "
        "runs only compiled code. Call strategy.run inside a @tf.function and return that function.",
    )
    expect(
        int(seen["datasets"]) > 0,
        f"{where} no dataset went through the strategy: feed eval_all from experimental_distribute_dataset.",
    )
    expect(
        not seen["refused"],
        f"{where} strategy.run got a {', a '.join(dict.fromkeys(seen['refused']))} in its args, which "
        "TPUStrategy.run cannot turn into a tensor: pass only tensors; close over the model.",
    )
    rows = seen["rows"]
    if rows is not None:
        rows = dict(
            rows, features=np.asarray(rows["features"], np.float32), labels=np.asarray(rows["labels"])
        )
        index = {row.tobytes(): i for i, row in enumerate(x)}
        found = {index.get(row.tobytes(), -1) for row in rows["features"]} - {-1}
        expect(
            len(found) == n,
            f"{where} {n - len(found)} of the {n} examples never reached the model (drop_remainder drops "
            "the short last batch): an evaluation counts every example. Pad the last batch instead.",
        )
    expect(
        calls == 1 or steps != calls,
        f"{where} {calls} calls for {steps} batches, one call per batch: on a TPU the host waits for the "
        "device after every call. Loop over the batches inside the tf.function and call it once.",
    )
    expect(
        calls == 1,
        f"{where} the compiled function was called {calls} times for {steps} batches: run the whole "
        "evaluation, every batch, in one call.",
    )
    batches = len(rows["features"]) // GLOBAL_BATCH if rows is not None else steps
    expect(
        steps >= batches,
        f"{where} your loop ran {steps} steps, but the padded dataset holds {batches} batches: count the "
        "batches after padding, or loop over the distributed dataset itself.",
    )
    traces = int(seen["traces"])
    dims = list(seen["dims"])
    whole = rows is not None and len(rows["features"]) % GLOBAL_BATCH == 0  # padded to whole batches
    none = "a loop inside a tf.function compiles for the dataset's batch size, None without "
    none += "drop_remainder=True, which XLA on a TPU must pad at every step: "
    unknown = none + "batch with drop_remainder=True, which drops nothing once the data fill whole batches."
    short = none + "pad the data to whole global batches, then batch with drop_remainder=True."
    new = "the short last batch is a new shape: a TPU compiles again. Pad it to a whole global batch."
    # A `for` over a distributed dataset inside a tf.function loses the per-replica shape on 2 Mirrored
    # replicas (next(iterator) keeps it): None there is the strategy's when the dataset's shape is static.
    static = rows is None or bool(rows["static"])
    known = [d for d in dims if d is not None]
    expect(
        len(known) <= 1 and (bool(known) or static),
        f"{where} eval_all was compiled for per-replica batches of {dims} examples: "
        f"{new if len(known) > 1 else unknown if whole else short}",
    )
    expect(static, f"{where} {unknown}")
    expect(
        traces == 1,
        f"{where} eval_all was traced {traces} times for one shape: a Python value in its arguments "
        "makes a new trace for each new value; pass it tensors only.",
    )
    expect(
        known in ([], [GLOBAL_BATCH // replicas]),
        f"{where} each replica's step saw {dims} examples, not {GLOBAL_BATCH // replicas}: batch by the "
        "global batch and let the strategy split it between the replicas.",
    )
    every = _per_example_losses(weights, x, y)
    want = float(np.mean(every))
    if abs(loss - want) <= LOSS_RTOL * abs(want):
        return

    def near(value: float) -> bool:
        return abs(loss - value) <= LOSS_RTOL * abs(value)

    if rows is not None and len(rows["features"]) > n:
        padded = _per_example_losses(weights, rows["features"], rows["labels"])
        why = "your mask never reaches the loss" if rows["others"] else "with nothing to tell them apart"
        expect(
            not (near(padded.sum() / n) or near(padded.mean())),
            f"{where} the padding examples were counted as data, {why}: weight each example's loss by a "
            "mask, 1 for data and 0 for padding.",
        )
        expect(
            not near(want * n / len(rows["features"])),
            f"{where} your mean divides by the {len(rows['features'])} examples of the padded data: divide "
            "the weighted sum by the number of real examples.",
        )
    if replicas == 1:
        expect(
            not near(float(np.mean(_per_example_losses(weights, x, y, from_logits=False)))),
            f"{where} your loss reads the model's outputs as probabilities (from_logits=False): the model "
            "returns logits; use sparse_categorical_crossentropy(labels, logits, from_logits=True).",
        )
        by_batch = [float(np.mean(every[a : a + GLOBAL_BATCH])) for a in range(0, n, GLOBAL_BATCH)]
        means = (
            "each replica's masked mean with ReduceOp.MEAN, then each"
            if "MEAN" in seen["reduces"]
            else "each"
        )
        expect(
            not near(float(np.mean(by_batch))),
            f"{where} your loss averages means ({means} batch's): a share with few real examples, the "
            f"padded batch or a replica's part of it, weighs as much as a full one: {MEANS}",
        )
        expect(
            False,
            f"{where} your loss is {loss / want:.3f}x the mean of sparse_categorical_crossentropy(labels, "
            f"logits, from_logits=True) over the {n} examples: weight each loss by the mask; {MEANS}",
        )
    expect(
        "MEAN" not in seen["reduces"],
        f"{where} ReduceOp.MEAN divides by the replica count, and the replicas hold different numbers of "
        f"real examples (the padding lands on some only): {MEANS}",
    )
    expect(
        False,
        f"{where} your loss is {loss / want:.3f}x one device's mean over every example: add each replica's "
        "weighted sum with strategy.reduce(SUM, ...) and divide the total by the number of real examples.",
    )


def check_masked_last_batch(evaluate_all: Callable[..., Any]) -> None:
    """``evaluate_all(strategy, model, x, y, global_batch)`` -> ``(eval_all, loss)``: one device's mean
    loss over every example, every batch in one call of one compiled function of static shape, on 1
    and 2 replicas."""
    with exercise("masked_last_batch"):
        weights = [np.array(w) for w in _check_model()[0].get_weights()]
        for examples, replicas in EVAL_RUNS:
            where = "On one device," if replicas == 1 else f"On {replicas} replicas with {examples} examples,"
            _judge_eval(evaluate_all, replicas, where, weights, examples)
    passed(
        "masked_last_batch",
        f"every one of {EXAMPLES} and {REPLICA_EXAMPLES} examples counted once, in whole global batches of "
        f"{GLOBAL_BATCH}, all in one call traced once; one device's loss on 1 and 2 replicas.",
    )


# --------------------------------------------------------------------------- global_batches

#: Machines of the exercise global_batches: how many replicas TPUStrategy makes on each TPU runtime
#: (Colab's retired v2-8: a device per core; a v5e-1: one chip, one core).
TPU_REPLICAS = {"v2-8": 8, "v5e-1": 1}
PER_REPLICA = 64


def check_global_batches(global_batches: Callable[[], Any]) -> None:
    """``global_batches()``: the student's prediction of the global batch on three machines."""
    keys = ("v2-8", "v5e-1", "4 GPUs")
    with exercise("global_batches"):
        guess = global_batches()
        expect(
            isinstance(guess, dict) and set(guess) == set(keys),
            f"Return a dict with exactly the keys {', '.join(repr(k) for k in keys)}; got "
            f"{sorted(guess) if isinstance(guess, dict) else type(guess).__name__}.",
        )
        gpus = 4  # section 4's chain: a MirroredStrategy over every GPU
        want = {
            "v2-8": TPU_REPLICAS["v2-8"] * PER_REPLICA,
            "v5e-1": TPU_REPLICAS["v5e-1"] * PER_REPLICA,
            "4 GPUs": gpus * PER_REPLICA,
        }
        v28 = guess["v2-8"]
        expect(
            v28 != 4 * PER_REPLICA,
            f"v2-8: {v28} counts its 4 chips, but each chip of the retired v2-8 had 2 cores, each a "
            "TPU device TensorFlow lists, and TPUStrategy makes one replica per device.",
        )
        expect(v28 == want["v2-8"], f"v2-8: {v28}: count TPU devices (cores on a v2), not chips or hosts.")
        v5e = guess["v5e-1"]
        expect(
            not (isinstance(v5e, (int, float)) and v5e > PER_REPLICA),
            f"v5e-1: {v5e} assumes more than one replica, but a v5e-1 is a single chip with one "
            "core: TPUStrategy makes 1 replica there. Not every TPU runtime has 8 cores.",
        )
        expect(
            v5e == want["v5e-1"], f"v5e-1: one replica x {PER_REPLICA} examples per replica; you said {v5e}."
        )
        four = guess["4 GPUs"]
        expect(
            four == want["4 GPUs"],
            f"4 GPUs: the chain builds a MirroredStrategy over all {gpus} GPUs, one replica per GPU; you "
            f"said {four}.",
        )
    passed(
        "global_batches",
        ", ".join(f"{k} {v}" for k, v in want.items()) + ": 64 x num_replicas_in_sync.",
    )
