"""The checks of notebook 09 pass the reference answers on 2 replicas and catch the usual mistakes with a hint."""

from __future__ import annotations

import re

import pytest
import tensorflow as tf

from course_utils.errors import ExerciseError
from course_utils.exercises import performance as ex

# --------------------------------------------------------------------------- logged_steps


def _logged(*, same_batch=False, reduce="SUM", compiled=True, scalar=False, write_at=None):
    """``make_logged_steps`` as a student writes it, with one planted mistake at most."""

    def make_logged_steps(strategy, replica_step):
        def train_logged(iterator, steps):
            losses = tf.TensorArray(tf.float32, size=steps)
            inputs = next(iterator)
            for i in tf.range(steps):
                if not same_batch and i > 0:
                    inputs = next(iterator)
                per_replica = strategy.run(replica_step, args=(inputs,))
                loss = strategy.reduce(getattr(tf.distribute.ReduceOp, reduce), per_replica, axis=None)
                losses = losses.write(i if write_at is None else write_at, loss)
            return losses.stack()[-1] if scalar else losses.stack()

        return tf.function(train_logged) if compiled else train_logged

    return make_logged_steps


def test_logged_steps_right_answer_passes(two_replicas, capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_logged_steps(_logged())
    assert "[pass] logged_steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        ({"same_batch": True}, "trained 4 times on one batch"),
        ({"reduce": "MEAN"}, "ReduceOp.SUM"),
        ({"compiled": False}, "@tf.function"),
        ({"scalar": True}, "one loss per step"),
        ({"write_at": 0}, "at index i"),
    ],
    ids=["next outside the loop", "mean of the replicas", "no tf.function", "last loss only", "one index"],
)
def test_logged_steps_mistakes(two_replicas, mistake, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise logged_steps") as error:
        ex.check_logged_steps(_logged(**mistake))
    assert hint in str(error.value)


def test_logged_steps_without_strategy_run_fails_on_two_replicas(two_replicas) -> None:
    def make_logged_steps(strategy, replica_step):
        @tf.function
        def train_logged(iterator, steps):
            losses = tf.TensorArray(tf.float32, size=steps)
            for i in tf.range(steps):
                losses = losses.write(i, replica_step(next(iterator)))  # no strategy.run
            return losses.stack()

        return train_logged

    with pytest.raises(ExerciseError, match="Exercise logged_steps") as error:
        ex.check_logged_steps(make_logged_steps)
    assert "your code raised" in str(error.value)


def _logged_with(body):
    """``make_logged_steps`` whose loop is ``body(strategy, replica_step, iterator, steps)``."""

    def make_logged_steps(strategy, replica_step):
        return tf.function(lambda iterator, steps: body(strategy, replica_step, iterator, steps))

    return make_logged_steps


def _python_list(strategy, replica_step, iterator, steps):
    losses = []
    for _ in tf.range(steps):
        shares = strategy.run(replica_step, args=(next(iterator),))
        losses.append(strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None))
    return tf.stack(losses)


def _unreduced(strategy, replica_step, iterator, steps):
    losses = tf.TensorArray(tf.float32, size=steps)
    for i in tf.range(steps):
        losses = losses.write(i, strategy.run(replica_step, args=(next(iterator),)))
    return losses.stack()


def _unstacked(strategy, replica_step, iterator, steps):
    losses = tf.TensorArray(tf.float32, size=steps)
    for i in tf.range(steps):
        shares = strategy.run(replica_step, args=(next(iterator),))
        losses = losses.write(i, strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None))
    return losses


@pytest.mark.parametrize(
    ("body", "hint"),
    [(_python_list, "a Python list"), (_unreduced, "strategy.reduce"), (_unstacked, "losses.stack()")],
    ids=["python list", "per-replica losses written", "TensorArray returned"],
)
def test_logged_steps_errors_become_hints(two_replicas, body, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise logged_steps") as error:
        ex.check_logged_steps(_logged_with(body))
    assert hint in str(error.value)
    assert "your code raised" not in str(error.value)


def test_logged_steps_placeholder_is_named() -> None:
    def placeholder(strategy, replica_step):
        raise NotImplementedError("Exercise logged_steps: write your solution here")

    with pytest.raises(ExerciseError, match="is not done yet"):
        ex.check_logged_steps(placeholder)


# --------------------------------------------------------------------------- dataset_fn


def _dataset_fn(
    *,
    per_replica=True,
    shard=True,
    drop_remainder=True,
    repeat=True,
    shuffle=False,
    by_replicas=False,
    repeat_first=False,
):
    """``make_dataset_fn`` as a student writes it, with planted mistakes."""

    def make_dataset_fn(features, labels, global_batch):
        def dataset_fn(input_context):
            dataset = tf.data.Dataset.from_tensor_slices((features, labels))
            if shard:
                shards = (
                    input_context.num_replicas_in_sync if by_replicas else input_context.num_input_pipelines
                )
                dataset = dataset.shard(shards, input_context.input_pipeline_id)
            if shuffle:
                dataset = dataset.shuffle(1000, seed=1)
            if repeat_first:
                dataset = dataset.repeat()
            batch = input_context.get_per_replica_batch_size(global_batch) if per_replica else global_batch
            dataset = dataset.batch(batch, drop_remainder=drop_remainder)
            return (dataset.repeat() if repeat and not repeat_first else dataset).prefetch(tf.data.AUTOTUNE)

        return dataset_fn

    return make_dataset_fn


def test_dataset_fn_right_answer_passes(two_replicas, capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_dataset_fn(_dataset_fn())
    assert "[pass] dataset_fn" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        ({"per_replica": False}, "a whole global batch"),
        ({"per_replica": False, "shard": False, "drop_remainder": False}, "a whole global batch"),
        ({"shard": False}, "shard the dataset"),
        ({"drop_remainder": False}, "drop_remainder=True"),
        ({"repeat": False}, "repeat()"),
        ({"shuffle": True}, "do not shuffle"),
        ({"by_replicas": True}, "not num_replicas_in_sync"),
        ({"repeat_first": True}, "repeat() before batch()"),
        ({"repeat_first": True, "drop_remainder": False}, "repeat() before batch()"),
    ],
    ids=[
        "global batch per replica",
        "the given code",
        "no shard",
        "short batch",
        "no repeat",
        "shuffled",
        "shards per replica",
        "repeat then batch",
        "repeat then batch, no drop",
    ],
)
def test_dataset_fn_mistakes(two_replicas, mistake, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise dataset_fn") as error:
        ex.check_dataset_fn(_dataset_fn(**mistake))
    assert hint in str(error.value)


def test_dataset_fn_placeholder_is_named() -> None:
    def make_dataset_fn(features, labels, global_batch):
        def dataset_fn(input_context):
            raise NotImplementedError("Exercise dataset_fn: write your solution here")

        return dataset_fn

    with pytest.raises(ExerciseError, match="is not done yet"):
        ex.check_dataset_fn(make_dataset_fn)


# --------------------------------------------------------------------------- pipelined_throughput


def _pipelined(input_rate: float, compute_rate: float, prefetch: bool) -> float:
    if prefetch:
        return min(input_rate, compute_rate)
    return 1 / (1 / input_rate + 1 / compute_rate)


def test_pipelined_throughput_right_answer_passes(capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_pipelined_throughput(_pipelined)
    assert "[pass] pipelined_throughput" in capsys.readouterr().out


#: The hints of pipelined_throughput name the mistake; the rate expected never shows (a second try
#: could copy it): neither formatted (1,200.0) nor as the formula (1 / (1/2000 + 1/3000)).
NEVER_SHOWN = ("1,200", "2,000.0", "1,000.0", "500.0", "1 / (", "expected", "should be")


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (
            lambda i, c, p: 1 / (1 / i + 1 / c),
            "With prefetch reading and training overlap: which of the two sets",
        ),
        (lambda i, c, p: max(i, c) if p else 1 / (1 / i + 1 / c), "the faster side's rate"),
        (
            lambda i, c, p: min(i, c),
            "(2000.0, 3000.0, False) returns 2,000.0. Without prefetch reading and training take turns: "
            "what does one example cost in time?",
        ),
        (lambda i, c, p: "fast", "should return a number"),
        (lambda i, c, p: i + c if p else 1 / (1 / i + 1 / c), "never outruns its slower side"),
        (lambda i, c, p: 2_000.0 if p else 1_200.0, "(5000.0, 1000.0, True) returns 2,000.0. With prefetch"),
        (lambda i, c, p: min(i, c) if p else i * c / (i + c) / 2, "take turns"),
    ],
    ids=[
        "never overlaps",
        "faster side",
        "always overlaps",
        "not a number",
        "rates added",
        "by heart",
        "half",
    ],
)
def test_pipelined_throughput_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise pipelined_throughput") as error:
        ex.check_pipelined_throughput(answer)
    assert hint in str(error.value)
    told = re.sub(r"returns [\d,.]+", "", str(error.value))  # the student's own rate aside
    assert not [number for number in NEVER_SHOWN if number in told], told


# --------------------------------------------------------------------------- call_cost_prediction

#: Per-step times (ms) as runs printed them at 1 and 2 steps per call: 2 replicas on 2 busy cores
#: (c = 2.04, s = 4.19), the default strategy (c = 0.6, s = 1.36), and a short step where the
#: call's cost is most of the time (c = 0.3, s = 0.2), as on an accelerator.
SHOWN_RUNS = [{1: 6.23, 2: 5.21}, {1: 1.96, 2: 1.66}, {1: 0.5, 2: 0.35}]


def _model(shown: dict) -> tuple[float, float]:
    a, b = shown[1], shown[2]
    return 2 * (a - b), 2 * b - a  # c, s


@pytest.mark.parametrize("shown", SHOWN_RUNS, ids=["mirrored", "default", "overhead-bound"])
def test_call_cost_prediction_right_answers_pass(shown, capsys: pytest.CaptureFixture[str]) -> None:
    fixed, step = _model(shown)
    rounded_first = round(round(step, 2) + round(fixed, 2) / 5, 2)  # c and s rounded to 0.01 ms first
    for prediction in (step + fixed / 5, round(step + fixed / 5, 2), rounded_first):
        ex.check_call_cost_prediction(shown, prediction)
    assert capsys.readouterr().out.count("[pass] call_cost_prediction") == 3


def test_call_cost_prediction_right_answer_passes_when_the_call_costs_little(capsys) -> None:
    """c = 0.06 ms: the right answer (0.452 ms) lies 0.009 ms below the 2-step time; it passes."""
    for prediction in (0.44 + 0.06 / 5, 0.45):
        ex.check_call_cost_prediction({1: 0.5, 2: 0.47}, prediction)
    assert capsys.readouterr().out.count("[pass] call_cost_prediction") == 2


#: Wrong predictions real reasoning gives, as functions of the shown times a (1 step) and b (2 steps):
#: c = 2(a - b), s = 2b - a, and the right answer s + c/5.
CALL_COST_MISTAKES = {
    "5 times faster than 1 step": (lambda a, b: a / 5, "is not 5 times faster"),
    "5/2 times faster than 2 steps": (lambda a, b: 2 * b / 5, "is not 5 times faster"),
    "no gain beyond 2 steps": (lambda a, b: b, "no faster than at 2 steps per call"),
    "no gain at all": (lambda a, b: a, "no faster than at 2 steps per call"),
    "each doubling saves as much": (lambda a, b: a - 2.32 * (a - b), "each step still does its own work"),
    "each added step saves as much": (lambda a, b: a - 4 * (a - b), "is not 5 times faster"),
    "the time of a call of 5": (lambda a, b: 2 * (a - b) + 5 * (2 * b - a), "is a whole call of 5 steps"),
    "a little faster than 2 steps": (lambda a, b: b - 0.2 * (a - b), "is closer to the times at 1 and 2"),
    "s + c/2, the 2-step time again": (lambda a, b: (2 * b - a) + (a - b), "no faster than at 2"),
    "s alone": (lambda a, b: 2 * b - a, "that is s, where the curve levels off"),
    "s + c/10": (lambda a, b: (2 * b - a) + (a - b) / 5, "does not follow from SHOWN"),
    "halfway from 2 steps to s, s + c/4": (lambda a, b: (b + 2 * b - a) / 2, "does not follow from SHOWN"),
    "c = a - b, s from 1 step": (lambda a, b: b + (a - b) / 5, "takes c = a - b"),
    "c = a - b, s from 2 steps": (lambda a, b: b - (a - b) / 2 + (a - b) / 5, "takes c = a - b"),
    "seconds": (lambda a, b: ((2 * b - a) + 2 * (a - b) / 5) / 1000, "looks like seconds"),
    "microseconds": (lambda a, b: ((2 * b - a) + 2 * (a - b) / 5) * 1000, "looks like µs"),
    "s in microseconds": (lambda a, b: (2 * b - a) * 1000, "looks like µs"),
}


@pytest.mark.parametrize("shown", SHOWN_RUNS, ids=["mirrored", "default", "overhead-bound"])
@pytest.mark.parametrize("mistake", sorted(CALL_COST_MISTAKES))
def test_call_cost_prediction_mistakes(shown, mistake: str) -> None:
    predict, hint = CALL_COST_MISTAKES[mistake]
    with pytest.raises(ExerciseError, match="Exercise call_cost_prediction") as error:
        ex.check_call_cost_prediction(shown, predict(shown[1], shown[2]))
    assert hint in str(error.value)


@pytest.mark.parametrize(
    ("shown", "prediction", "hint"),
    [
        (None, None, "is not done yet"),
        ({1: 6.23, 2: 5.21}, None, "is not done yet"),
        ({1: 6.23, 2: 6.4}, 6.0, "re-run the timing cell"),  # a busy moment: 2 steps per call slower
        ({1: 6.23, 2: 3.0}, 0.3, "re-run the timing cell"),  # more than twice as fast: s < 0
        ({1: 0.5, 2: 0.49}, 0.49, "closer than their rounding"),  # c = 0.02 ms: below the print's rounding
        ([6.23, 5.21], 4.3, "Set SHOWN to the line"),
        ({"1": 6.23, "2": 5.21}, 4.3, "Set SHOWN to the line"),
        ({1: 6.23, 2: 5.21}, "4.3 ms", "PREDICTION is one number"),
    ],
    ids=[
        "blank",
        "no prediction",
        "noise slower",
        "noise faster",
        "too close",
        "a list",
        "string keys",
        "a string",
    ],
)
def test_call_cost_prediction_bad_inputs(shown, prediction, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise call_cost_prediction") as error:
        ex.check_call_cost_prediction(shown, prediction)
    assert hint in str(error.value)


# --------------------------------------------------------------------------- call_cost_explanation


def test_call_cost_explanation_right_answer_passes(capsys: pytest.CaptureFixture[str]) -> None:
    for answer in ("c", "C", " (c) "):
        ex.check_call_cost_explanation(answer)
    assert capsys.readouterr().out.count("[pass] call_cost_explanation") == 3


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        ("a", "at 2 a step pays c/2 = 2.5 ms"),
        ("b", "as much as the step itself"),
        ("d", "1000 works, but is it the smallest? Compare c/k with 10% of s for each choice."),
        ("e", "EXPLANATION is one letter"),
        (2, "EXPLANATION is one letter"),
        (None, "is not done yet"),
    ],
    ids=["2 steps", "10 steps", "1000 steps", "no such choice", "a number", "blank"],
)
def test_call_cost_explanation_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise call_cost_explanation") as error:
        ex.check_call_cost_explanation(answer)
    assert hint in str(error.value)


def test_call_cost_explanation_hints_never_name_the_answer() -> None:
    """Each wrong choice is told its mistake, never the right count (100) or its c/k (0.05 ms)."""
    for choice in "abd":
        with pytest.raises(ExerciseError) as error:
            ex.check_call_cost_explanation(choice)
        assert not re.search(r"\b100\b|0\.05|'c'", str(error.value)), str(error.value)
