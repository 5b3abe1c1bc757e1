"""Notebook 09: the checks of its exercises (performance).

* ``logged_steps``: ``make_logged_steps(strategy, replica_step)`` returns a ``tf.function`` that runs
  ``steps`` training steps in one call and returns their losses. On one device and on 2 replicas,
  3 calls of 4 steps must leave the weights and losses of 12 one-step calls on one device
  (:func:`course_utils.compare.run`), and Python must not run the step at every step.
* ``dataset_fn``: ``make_dataset_fn(features, labels, global_batch)`` returns the ``dataset_fn`` of
  ``strategy.distribute_datasets_from_function``: each replica its share of the global batch, full
  batches only, repeated, and each input pipeline (one per worker) its own shard. Trained on 2
  replicas, it must give one device's update with the global batch.
* ``pipelined_throughput``: arithmetic, with and without prefetch.
* ``call_cost_prediction``: ``SHOWN = {1: a, 2: b}``, the per-step times (ms) the notebook's run
  printed at 1 and 2 steps per call, and ``PREDICTION``, the time per step at 5: s + c/5 (a call of
  k steps takes c + k s), judged on what the student saw, not on a later run's timings.
* ``call_cost_explanation``: on a TPU, the smallest steps per call within 10% of s (one letter).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from ..errors import ExerciseError, ReplicaCountError
from ..models import tutorial_train_step
from ..runtime import import_tensorflow as _tf
from . import harness, in_kernel, unseen

#: The check data: features of 4 numbers (the first is the example's index / 100), 3 classes.
FEATURES, CLASSES = 4, 3
#: logged_steps: CALLS calls of STEPS_PER_CALL steps, global batch GLOBAL_BATCH.
CALLS, STEPS_PER_CALL, GLOBAL_BATCH = 3, 4, 8
#: dataset_fn: EPOCH examples (not a multiple of the global batch), TRAIN_STEPS steps (past one epoch).
EPOCH, DATASET_BATCH, TRAIN_STEPS = 100, 16, 7
#: The same update: within this relative mismatch (float32 noise of a small model is ~1e-7).
RTOL = 1e-5


def _number(value: Any, what: str) -> float:
    expect(
        not isinstance(value, (str, bytes, bool)) and hasattr(value, "__float__"),
        f"{what} should return a number, got {type(value).__name__}.",
    )
    number = float(value)
    expect(math.isfinite(number), f"{what} returned {number}; expected a finite number.")
    return number


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _strategy(replicas: int) -> Any:
    try:
        return compare.checking_strategy(replicas)
    except ReplicaCountError as error:
        raise ExerciseError(str(error)) from None


def _on(replicas: int) -> str:
    return "On one device," if replicas == 1 else f"On {replicas} replicas,"


# --------------------------------------------------------------------------- the check's model and step


def check_data(examples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` rows of :data:`FEATURES` float32 numbers whose first is the row's index / 100, and labels."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(examples, FEATURES)).astype(np.float32)
    features[:, 0] = np.arange(examples) / 100
    labels = rng.integers(0, CLASSES, size=examples).astype(np.int32)
    return features, labels


def check_model() -> Any:
    """A dense layer, 4 -> 3."""
    import keras

    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(CLASSES)])


def replica_step(model: Any, optimizer: Any, global_batch: int) -> Callable[[Any], Any]:
    """The right per-replica step: its share of the global batch's mean loss, one update."""
    return tutorial_train_step(model, optimizer, None, global_batch)


def initial_weights() -> list[np.ndarray]:
    import keras

    keras.utils.set_random_seed(compare.SEED)
    return [np.array(w) for w in check_model().get_weights()]


def one_device_reference(features: np.ndarray, labels: np.ndarray, global_batch: int) -> compare.Run:
    """One step per call on one device, over ``features`` in order, ``global_batch`` examples a step."""
    return compare.run(
        _strategy(1),
        lambda strategy, model, optimizer, metric: replica_step(model, optimizer, global_batch),
        [features, labels],
        batch=global_batch,
        make_model=check_model,
        weights=initial_weights(),
    )


def _model_in_scope(strategy: Any) -> tuple[Any, Any]:
    import keras

    with strategy.scope():
        model = check_model()
        model.set_weights(initial_weights())
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)  # in the scope, before the first step (#23085)
    return model, optimizer


# --------------------------------------------------------------------------- logged_steps


def _losses(value: Any, steps: int, where: str) -> list[float]:
    tf = _tf()
    expect(
        not isinstance(value, tf.TensorArray) and getattr(value, "dtype", None) != tf.variant,
        f"{where} train_logged returned the tf.TensorArray itself: return losses.stack(), a vector.",
    )
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float64)
    expect(
        array.shape == (steps,),
        f"{where} one call of {steps} steps returned shape {array.shape}; return one loss per step, "
        f"a vector of {steps} (write each step's loss into a tf.TensorArray, then .stack() it).",
    )
    return [float(v) for v in array]


def _call_logged(train_logged: Callable[[Any, Any], Any], iterator: Any, replicas: int) -> Any:
    """One call of ``train_logged``; the two errors its usual mistakes raise become hints."""
    tf = _tf()
    try:
        return train_logged(iterator, tf.constant(STEPS_PER_CALL))
    except Exception as error:
        written = isinstance(error, AttributeError) and "'PerReplica' object has no attribute" in str(error)
        if type(error).__name__ != "InaccessibleTensorError" and not written:
            raise
        if written:
            raise ExerciseError(
                f"{_on(replicas)} a per-replica value reached the TensorArray: first add the replicas' "
                "losses with strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None)."
            ) from None
        raise ExerciseError(
            f"{_on(replicas)} a loss made inside the tf.range loop was kept outside it (a Python list "
            "does not grow in a graph loop): losses = losses.write(i, loss) on a tf.TensorArray."
        ) from None


@harness
def run_logged_steps(make_logged_steps: Callable[[Any, Any], Any], replicas: int) -> dict[str, Any]:
    """:data:`CALLS` calls of :data:`STEPS_PER_CALL` steps on ``replicas`` replicas, as plain data:
    the weights' ``update``, the steps' ``losses`` and how many times Python ran the replica step."""
    tf = _tf()
    strategy = _strategy(replicas)
    features, labels = check_data(CALLS * STEPS_PER_CALL * GLOBAL_BATCH)
    model, optimizer = _model_in_scope(strategy)
    step = replica_step(model, optimizer, GLOBAL_BATCH)
    python_calls = [0]

    def counted_step(inputs: Any) -> Any:
        python_calls[0] += 1  # runs once per trace in a graph, at every step in Python
        return step(inputs)

    train_logged = make_logged_steps(strategy, counted_step)
    expect(
        callable(train_logged),
        f"make_logged_steps should return a function, got {type(train_logged).__name__}.",
    )
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(GLOBAL_BATCH)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    before = compare.flat(model.trainable_variables)
    losses: list[float] = []
    for _ in range(CALLS):
        losses += _losses(_call_logged(train_logged, iterator, replicas), STEPS_PER_CALL, _on(replicas))
    update = compare.flat(model.trainable_variables) - before
    return {"update": update, "losses": [float(v) for v in losses], "python_calls": python_calls[0]}


def check_logged_steps(make_logged_steps: Callable[[Any, Any], Any]) -> None:
    """``make_logged_steps(strategy, replica_step)`` returns ``train_logged(iterator, steps)``: ``steps``
    steps in one ``tf.function`` call, their losses (each summed over the replicas) as a vector."""
    with exercise("logged_steps"):
        features, labels = check_data(CALLS * STEPS_PER_CALL * GLOBAL_BATCH)
        reference = one_device_reference(features, labels, GLOBAL_BATCH)
        steps = CALLS * STEPS_PER_CALL
        for replicas in (1, 2):
            where = _on(replicas)
            run = in_kernel(run_logged_steps, make_logged_steps, replicas)
            got = compare.Run(replicas, tuple(run["losses"]), np.asarray(run["update"], np.float64))
            python_calls = int(run["python_calls"])
            expect(
                len(got.losses) == steps and got.update.shape == reference.update.shape,
                f"{where} the run gave {len(got.losses)} losses for {steps} steps.",
            )
            expect(got.update.any(), f"{where} the weights did not move: run replica_step with strategy.run.")
            if compare.mismatch(got.update, reference.update) > RTOL:
                first = np.arange(CALLS).repeat(STEPS_PER_CALL) * GLOBAL_BATCH  # one batch per call
                rows = (first[:, None] + np.arange(GLOBAL_BATCH)).ravel()
                same_batch = one_device_reference(features[rows], labels[rows], GLOBAL_BATCH)
                expect(
                    compare.mismatch(got.update, same_batch.update) > RTOL,
                    f"{where} each call trained {STEPS_PER_CALL} times on one batch: take the next "
                    "batch inside the loop, strategy.run(replica_step, args=(next(iterator),)).",
                )
                expect(
                    False,
                    f"{where} after {CALLS} calls of {STEPS_PER_CALL} steps the weights are "
                    f"{compare.factor(got.update, reference.update):.2f}x those of {steps} one-step calls "
                    f"on one device (mismatch {compare.mismatch(got.update, reference.update):.1e}): run "
                    "`steps` steps per call, each on the next batch.",
                )
            want = np.asarray(reference.losses, np.float64)
            have = np.asarray(got.losses, np.float64)
            if not np.allclose(have, want, rtol=RTOL, atol=1e-7):
                halved = replicas > 1 and np.allclose(have * replicas, want, rtol=RTOL, atol=1e-7)
                expect(
                    not halved,
                    f"{where} the losses are 1/{replicas} of one device's: each replica returns its "
                    "share, so add them with strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None).",
                )
                expect(
                    False,
                    f"{where} the losses {np.round(have[:3], 4).tolist()}... differ from one device's "
                    f"{np.round(want[:3], 4).tolist()}...: write step i's summed loss at index i.",
                )
            expect(
                python_calls < steps,
                f"{where} Python ran replica_step {python_calls} times for {steps} steps: the loop "
                "runs in Python. Decorate train_logged with @tf.function and loop with tf.range, so "
                "that Python traces the step once.",
            )
    passed(
        "logged_steps",
        f"{CALLS} calls of {STEPS_PER_CALL} steps on 1 device and on 2 replicas: the weights and the "
        f"{steps} losses of {steps} one-step calls on one device, the step traced once.",
    )


# --------------------------------------------------------------------------- dataset_fn


def _rows_of(value: Any) -> list[np.ndarray]:
    """The first feature (the example's index) of each replica's part of a distributed batch."""
    strategy_results = value if isinstance(value, (list, tuple)) else [value]
    return [np.rint(np.asarray(v)[:, 0] * 100).astype(int) for v in strategy_results]


def _first_examples(dataset_fn: Callable[[Any], Any], pipeline: int, pipelines: int) -> set[int]:
    """The examples the first batches of one of ``pipelines`` input pipelines hold (2 replicas each)."""
    tf = _tf()
    context = tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=pipeline, num_replicas_in_sync=2 * pipelines
    )
    dataset = dataset_fn(context)
    expect(
        isinstance(dataset, tf.data.Dataset),
        f"dataset_fn should return a tf.data.Dataset, got {type(dataset).__name__}.",
    )
    seen: set[int] = set()
    for features, _ in dataset.take(4):
        seen |= set(np.rint(np.asarray(features)[:, 0] * 100).astype(int).tolist())
    return seen


def _wraps(part: np.ndarray) -> bool:
    """Whether one replica's batch runs in order past the epoch's last example back to its first."""
    start = int(part[0])
    return start + len(part) > EPOCH and part.tolist() == [(start + j) % EPOCH for j in range(len(part))]


@harness
def dataset_fn_run(
    make_dataset_fn: Callable[[Any, Any, int], Any], features: Any, labels: Any
) -> dict[str, Any]:
    """``make_dataset_fn``'s ``dataset_fn`` on 2 replicas, as plain data: the examples each replica got
    at each of :data:`TRAIN_STEPS` steps (``rows``; ``ran_out``, the step where the data ended), the
    examples of the first batches of 2 input pipelines (``first``), and the weights' ``update`` after
    training on it (or ``train_error``, what training raised)."""
    tf = _tf()
    dataset_fn = make_dataset_fn(features, labels, DATASET_BATCH)
    expect(
        callable(dataset_fn), f"make_dataset_fn should return a function, got {type(dataset_fn).__name__}."
    )
    strategy = _strategy(2)
    batches = iter(strategy.distribute_datasets_from_function(dataset_fn))
    rows: list[list[list[int]]] = []
    result: dict[str, Any] = {"rows": rows, "ran_out": None}
    for step in range(1, TRAIN_STEPS + 1):
        try:
            parts = _rows_of(strategy.experimental_local_results(next(batches)[0]))
        except (StopIteration, tf.errors.OutOfRangeError):
            result["ran_out"] = step
            return result
        rows.append([part.tolist() for part in parts])
    result["first"] = [sorted(_first_examples(dataset_fn, i, 2)) for i in (0, 1)]
    model, optimizer = _model_in_scope(strategy)
    step_fn = replica_step(model, optimizer, DATASET_BATCH)

    @tf.function
    def train_step(inputs: Any) -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(inputs,)), axis=None)

    before = compare.flat(model.trainable_variables)
    try:
        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
        for _ in range(TRAIN_STEPS):
            train_step(next(iterator))
    except Exception as error:  # said by the check, after what the batches already tell
        result["train_error"] = (
            f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        )
        return result
    result["update"] = compare.flat(model.trainable_variables) - before
    return result


def check_dataset_fn(make_dataset_fn: Callable[[Any, Any, int], Any]) -> None:
    """``make_dataset_fn(features, labels, global_batch)`` returns ``dataset_fn(input_context)`` for
    ``strategy.distribute_datasets_from_function``; trained on 2 replicas, one device's update."""
    with exercise("dataset_fn"):
        features, labels = check_data(EPOCH, seed=1)
        run = in_kernel(dataset_fn_run, make_dataset_fn, features, labels)
        per_replica = DATASET_BATCH // 2
        seen: set[int] = set()
        steps = list(run.get("rows", []))
        for step in range(1, TRAIN_STEPS + 1):
            if step > len(steps):
                expect(
                    run.get("ran_out") != step,
                    f"On 2 replicas the data ran out after {step - 1} steps of an epoch of {EPOCH} "
                    "examples: repeat() the dataset.",
                )
                expect(False, f"On 2 replicas the run gave {len(steps)} steps of {TRAIN_STEPS}.")
            parts = [np.asarray(part, dtype=int) for part in steps[step - 1]]
            sizes = [len(p) for p in parts]
            expect(
                sizes[0] != DATASET_BATCH,
                f"On 2 replicas each replica got {sizes[0]} examples, a whole global batch of "
                f"{DATASET_BATCH}: dataset_fn makes one replica's batches, of "
                f"input_context.get_per_replica_batch_size({DATASET_BATCH}) = {per_replica}.",
            )
            expect(
                sizes == [per_replica, per_replica],
                f"On 2 replicas step {step} gave the replicas {sizes} examples, not {per_replica} each "
                f"(the end of an epoch of {EPOCH}, a short batch): batch with drop_remainder=True, so "
                "that every step has a full global batch.",
            )
            expect(
                not any(_wraps(part) for part in parts),
                f"Step {step} mixes the end of the epoch with the start of the next (repeat() before "
                "batch()): batch(..., drop_remainder=True) first, then repeat().",
            )
            seen |= {int(i) for part in parts for i in part}
        full = EPOCH // DATASET_BATCH * DATASET_BATCH
        expect(
            len(seen & set(range(full))) > full // 2,
            f"On one worker (one input pipeline) the replicas saw only {len(seen & set(range(full)))} of the "
            f"first {full} examples: shard with input_context.num_input_pipelines and input_pipeline_id "
            "(workers), not num_replicas_in_sync.",
        )
        first, second = (set(int(i) for i in part) for part in run.get("first", [[], []]))
        expect(
            not first & second,
            "With 2 input pipelines (2 workers), both read the same examples "
            f"({len(first & second)} shared in their first batches): shard the dataset with "
            "input_context.num_input_pipelines and input_context.input_pipeline_id.",
        )
        expect("train_error" not in run, f"Training on 2 replicas raised {run.get('train_error')}.")
        # One device takes the same examples in global batches, in order.
        update = np.asarray(run.get("update", []), np.float64)
        order = np.arange(TRAIN_STEPS * DATASET_BATCH) % full  # full batches, then the next epoch
        reference = one_device_reference(features[order], labels[order], DATASET_BATCH)
        mismatch = compare.mismatch(update, reference.update)
        expect(
            mismatch <= RTOL,
            f"On 2 replicas the update after {TRAIN_STEPS} steps is "
            f"{compare.factor(update, reference.update):.2f}x one device's with global batches of "
            f"{DATASET_BATCH} in order (mismatch {mismatch:.1e}): do not shuffle or reorder here.",
        )
    passed(
        "dataset_fn",
        f"each replica {per_replica} examples, full batches, repeated, one shard per input pipeline; on "
        "2 replicas the update of one device.",
    )


# --------------------------------------------------------------------------- pipelined_throughput


def check_pipelined_throughput(pipelined_throughput: Callable[[float, float, bool], float]) -> None:
    """``pipelined_throughput(input_rate, compute_rate, prefetch)``: examples/s of training when
    the input alone delivers ``input_rate`` and the step alone consumes ``compute_rate``."""
    with exercise("pipelined_throughput"):
        hints = {  # each names the mistake, never the rate expected (a second try could copy it)
            True: "With prefetch reading and training overlap: which of the two sets the pace?",
            False: "Without prefetch reading and training take turns: what does one example cost in time?",
        }
        cases = [((2_000.0, 3_000.0, True), 2_000.0), ((2_000.0, 3_000.0, False), 1_200.0)]
        cases += [((5_000.0, 1_000.0, True), 1_000.0), ((1_000.0, 1_000.0, False), 500.0)]
        if (rng := unseen()) is not None:  # grading: rates the student never saw
            feed, step = float(rng.randint(100, 9_000)), float(rng.randint(100, 9_000))
            cases += [((feed, step, True), min(feed, step)), ((feed, step, False), 1 / (1 / feed + 1 / step))]
        for args, want in cases:
            got = _number(pipelined_throughput(*args), "pipelined_throughput")
            if _close(got, want):
                continue
            said, faster = f"pipelined_throughput{args} returns {got:,.1f}", max(args[:2])
            expect(
                got <= faster * (1 + 1e-6),
                f"{said}, faster than both sides: training never outruns its slower side, whatever overlaps.",
            )
            expect(not (args[2] and _close(got, faster)), f"{said}, the faster side's rate. {hints[True]}")
            expect(False, f"{said}. {hints[args[2]]}")
    passed("pipelined_throughput", "the slower side sets the pace with prefetch; times add up without.")


# --------------------------------------------------------------------------- call_cost_prediction

#: call_cost_prediction: the steps per call of the two shown times, and of the prediction.
SHOWN_AT, PREDICTED_AT = (1, 2), 5
#: call_cost_prediction: right within this share of c, or 0.01 ms rounding (s + c/4 is c/20 off).
SHARE_OF_C, ROUNDING_MS = 0.03, 0.006


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def call_cost_model(shown: dict) -> tuple[float, float]:
    """``(c, s)`` in ms, a call's cost and a step's, from the per-step times at :data:`SHOWN_AT` steps."""
    (k1, k2), (a, b) = SHOWN_AT, (float(shown[k]) for k in SHOWN_AT)
    fixed = (a - b) / (1 / k1 - 1 / k2)
    return fixed, a - fixed / k1


def check_call_cost_prediction(shown: Any, prediction: Any) -> None:
    """``SHOWN = {1: a, 2: b}``: the ms per step printed at 1 and 2 steps per call; ``PREDICTION``: at 5."""
    k = PREDICTED_AT
    with exercise("call_cost_prediction"):
        if shown is None or prediction is None:
            raise NotImplementedError
        expect(
            isinstance(shown, dict)
            and set(shown) == set(SHOWN_AT)
            and all(map(_finite_number, shown.values())),
            f"Set SHOWN to the line the timing cell printed, {{1: ..., 2: ...}} in ms (got {shown!r}).",
        )
        expect(
            _finite_number(prediction),
            f"PREDICTION is one number, the ms per step at {k} (got {prediction!r}).",
        )
        a, b, p = float(shown[1]), float(shown[2]), float(prediction)
        expect(
            a / 2 < b < a,
            f"SHOWN = {shown}: 2 steps per call not faster per step, or over twice as fast, is a busy machine, "
            "not the call's cost: re-run the timing cell and paste its new line.",
        )
        expect(
            a - b >= 0.02,
            f"SHOWN = {shown}: the two times are closer than their rounding can tell the call's cost from: "
            "re-run the timing cell and paste its new line.",
        )
        fixed, step = call_cost_model(shown)
        want = step + fixed / k
        tolerance = max(SHARE_OF_C * fixed, ROUNDING_MS)
        unit = f"PREDICTION = {p:g} looks like %s: write ms, as SHOWN does."
        expect(abs(p * 1000 - want) > want / 2, unit % "seconds")  # 1000 times too small
        expect(p <= 10 * a, unit % "µs")  # a time per step in ms stays below 5a (a call of 5)
        faster = (
            f"PREDICTION = {p:g} ms: faster than a step's own cost allows. More steps per call share only the "
            f"call's fixed cost; each step still does its own work ({k} steps per call is not {k} times faster)."
        )
        no_gain = (
            f"PREDICTION = {p:g} ms: no faster than at 2 steps per call ({b:g} ms). Each call still pays its "
            f"fixed cost once, now shared by {k} steps: each step pays less of it."
        )
        closer = (
            f"PREDICTION = {p:g} ms is closer to the times at 1 and 2 steps per call ({a:g}, {b:g} ms) than "
            f"c + k·s allows: a call of {k} steps pays c once, so each step pays c/{k}, less than the c/2 it "
            "paid at 2."
        )
        whole_call = (
            f"PREDICTION = {p:g} ms is a whole call of {k} steps, c + {k}s; the question asks per step: "
            f"divide by {k}."
        )
        a_minus_b = (
            f"PREDICTION = {p:g} ms takes c = a - b; but at 1 step a step pays all of c and at 2 steps c/2, "
            "so a - b = c/2: c = 2(a - b)."
        )
        is_s = f"PREDICTION = {p:g} ms: that is s, where the curve levels off; at {k} steps a step still pays c/{k}."
        d = a - b  # what real reasoning gives instead, and its hint (c = a - b: s from either time)
        wrong = [(step, is_s), (b + d / k, a_minus_b), (b - d / 2 + d / k, a_minus_b), (a / k, faster),
                 (2 * b / k, faster), (a, no_gain), (b, no_gain)]  # fmt: skip
        expect(abs(p - k * want) > k * tolerance, whole_call)  # c + k s: the time of the whole call
        value, hint = min(wrong, key=lambda mistake: abs(p - mistake[0]))
        expect(not (abs(p - value) <= tolerance and abs(p - value) < abs(p - want)), hint)
        expect(p < b, no_gain)  # between b and want, the next hint says which it is nearer
        expect(min(abs(p - a), abs(p - b)) >= abs(p - want), closer)
        expect(p > step - tolerance, faster)
        expect(
            abs(p - want) <= tolerance,
            f"PREDICTION = {p:g} ms does not follow from SHOWN: a call of k steps takes c + k x s; find c "
            f"and s from the two times, then the time per step at {k} is s + c/{k}.",
        )
    passed(
        "call_cost_prediction",
        f"SHOWN gives c = {fixed:.3g} ms a call and s = {step:.3g} ms a step: at {k} steps per call "
        f"{want:.3g} ms a step, {fixed / k:.2g} ms of it the call's cost (you said {p:g}).",
    )


# --------------------------------------------------------------------------- call_cost_explanation

#: call_cost_explanation: the hint of each choice ("" for the right one), for s = 0.5 ms, c = 5 ms.
EXPLANATION_CHOICES = {
    "a": "at 2 a step pays c/2 = 2.5 ms, 5x s.",
    "b": "at 10, c/10 = 0.5 ms, as much as the step itself.",
    "c": "",
    "d": "1000 works, but is it the smallest? Compare c/k with 10% of s for each choice.",
}


def check_call_cost_explanation(explanation: Any) -> None:
    """``EXPLANATION``: ``"a"`` to ``"d"``, the smallest steps per call for at most 10% above s."""
    with exercise("call_cost_explanation"):
        if explanation is None:
            raise NotImplementedError
        choice = str(explanation).strip().strip("()").strip().lower() if isinstance(explanation, str) else ""
        expect(choice in EXPLANATION_CHOICES, f"EXPLANATION is one letter, 'a' to 'd' (got {explanation!r}).")
        expect(not EXPLANATION_CHOICES[choice], f"Not {choice!r}: {EXPLANATION_CHOICES[choice]}")
    passed(
        "call_cost_explanation",
        "at 100 steps per call a step pays c/100 = 0.05 ms, 10% of s; more steps per call delay callbacks.",
    )
