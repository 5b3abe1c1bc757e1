"""The checks of notebook 10 pass the right answers and catch plausible wrong ones on 2 replicas."""

from __future__ import annotations

import pytest
from test_capstone import _per_example, _tf, right_clip, right_loss  # the right answers, written once

from course_utils.errors import ExerciseError
from course_utils.exercises import capstone as ex

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

RIGHT_PORT = ex.step_with_loss(right_loss, right_clip, ex.CLIP_NORM)


def test_replica_counts_in_the_test_process() -> None:
    assert ex.replica_counts() == (1, 2)  # the notebook has 4 CPUs: (1, 2, 4)


def _unscaled_penalty(labels, logits, weights, model_losses, global_batch_size):
    tf = _tf()
    return tf.nn.compute_average_loss(
        _per_example(labels, logits, weights), global_batch_size=global_batch_size
    ) + tf.add_n(model_losses)


def _local_mean(labels, logits, weights, model_losses, global_batch_size):
    tf = _tf()
    return tf.reduce_mean(_per_example(labels, logits, weights)) + tf.nn.scale_regularization_loss(
        tf.add_n(model_losses)
    )


def _no_weights(labels, logits, weights, model_losses, global_batch_size):
    return right_loss(labels, logits, None, model_losses, global_batch_size)


def _local_clip(gradients, clip_norm):
    return _tf().clip_by_global_norm(gradients, clip_norm)[0]


def _clip_the_total(gradients, clip_norm):
    tf = _tf()
    total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)
    return tf.clip_by_global_norm(total, clip_norm)[0]


def _clip_the_mean(gradients, clip_norm):
    """The mean of the replicas' shares, clipped: every replica then hands apply_gradients the same
    clipped gradient, and apply_gradients adds the copies (N x one device's once it clips)."""
    tf = _tf()
    mean = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, gradients)
    return tf.clip_by_global_norm(mean, clip_norm)[0]


def test_right_port_passes(capsys: pytest.CaptureFixture[str]) -> None:
    result = ex.check_capstone_port(RIGHT_PORT)
    assert result.ok and set(result.comparisons) == {1, 2}
    assert "[pass] capstone_port: " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (ex.step_with_loss(_unscaled_penalty, right_clip), "the penalty is added on every replica"),
        (ex.step_with_loss(right_loss, _local_clip), "each replica clips its own gradient"),
        (ex.step_with_loss(_local_mean, right_clip), "each replica averages over its own examples"),
        (ex.step_with_loss(_no_weights, right_clip), "sample weights ignored"),
        (ex.step_with_loss(right_loss, _clip_the_total), "2.00x"),
        (
            ex.step_with_loss(right_loss, _clip_the_mean),
            "the same clipped, all-reduced gradient and apply_gradients adds",
        ),
    ],
    ids=[
        "penalty not scaled",
        "clipping per replica",
        "reduce_mean",
        "no sample weights",
        "all-reduced total",
        "all-reduced mean, clipped",
    ],
)
def test_capstone_port_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise capstone_port") as error:
        ex.check_capstone_port(answer)
    assert hint in str(error.value)


def test_clipped_mean_is_not_called_clipping_per_replica() -> None:
    """The port that clips the all-reduced mean: the update is 2x one device's and parallel to it."""
    result = ex.same_update(ex.step_with_loss(right_loss, _clip_the_mean))
    assert "on 2 replicas with gradients large enough to clip, the update is 2.00x" in result.hint
    assert "parallel: every replica passes" in result.hint and "adds the 2 copies" in result.hint
    assert "each replica clips its own gradient" not in result.hint
    assert result.compared_with == "the script's step on one device"


# --------------------------------------------------------------------------- the step counter

WARMUP_HINT = "your step counter reads 4 after 2 steps on 2 replicas, 2 on one device"


def warmup_step(model, optimizer, metric, global_batch_size, steps_done, port=RIGHT_PORT):
    """The notebook's warmup around a port (its cell, with RIGHT_PORT for the student's port)."""
    tf = _tf()
    port_step = port(model, optimizer, metric, global_batch_size)

    def train_step(inputs):
        warmup = tf.minimum(1.0, tf.cast(steps_done.assign_add(1), tf.float32) / ex.WARMUP)
        optimizer.learning_rate.assign(ex.LEARNING_RATE * warmup)
        return port_step(inputs)

    return train_step


def _counter(aggregation=None, scope=True, synchronization=None, dtype="int32"):
    tf = _tf()

    def fixed_port(strategy, model, optimizer, metric, global_batch_size):
        options = {} if aggregation is None else {"aggregation": getattr(tf.VariableAggregation, aggregation)}
        if synchronization is not None:
            options["synchronization"] = getattr(tf.VariableSynchronization, synchronization)
        options["dtype"] = dtype
        if scope:
            with strategy.scope():
                steps_done = tf.Variable(0, trainable=False, **options)
        else:
            steps_done = tf.Variable(0, trainable=False, **options)
        return warmup_step(model, optimizer, metric, global_batch_size, steps_done)

    return fixed_port


def _colleague_port(model, optimizer, metric, global_batch_size):
    steps_done = _tf().Variable(0, trainable=False)  # made in the factory: outside the scope
    return warmup_step(model, optimizer, metric, global_batch_size, steps_done)


@pytest.mark.parametrize(
    ("aggregation", "dtype"),
    [("ONLY_FIRST_REPLICA", "int32"), ("ONLY_FIRST_REPLICA", "float32"), ("MEAN", "float32")],
)
def test_counter_in_the_scope_passes(aggregation, dtype, capsys: pytest.CaptureFixture[str]) -> None:
    """Copies kept equal: replica 0's update, or (a float counter) the replicas' mean of the same 1."""
    ex.check_capstone_counter(_counter(aggregation, dtype=dtype))
    assert "[pass] capstone_counter: " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_colleague_port, WARMUP_HINT),
        (_counter("ONLY_FIRST_REPLICA", scope=False), WARMUP_HINT),
        (_counter("SUM"), "the step counter has aggregation=SUM"),
        # each counts once per step while every replica adds 1, so the update alone passed them
        (_counter(), "aggregation=NONE: each replica adds to its own copy"),
        (_counter("NONE"), "choose the aggregation that gives every copy one replica's update"),
        (_counter("SUM", synchronization="ON_READ"), "synchronization=ON_READ"),
        (_counter("ONLY_FIRST_REPLICA", synchronization="ON_READ"), "synchronization=ON_READ"),
        # an integer counter with MEAN: TensorFlow raises, the hint says why
        (_counter("MEAN"), "aggregation=MEAN: TensorFlow refuses MEAN for an integer variable"),
    ],
    ids=[
        "the colleague's port",
        "aggregation outside the scope",
        "SUM",
        "default (NONE)",
        "NONE",
        "ON_READ SUM",
        "ON_READ ONLY_FIRST_REPLICA",
        "int MEAN",
    ],
)
def test_capstone_counter_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise capstone_counter") as error:
        ex.check_capstone_counter(answer)
    assert hint in str(error.value)
    assert "ONLY_FIRST_REPLICA" not in str(error.value)  # a hint names the mistake, never the fix


def test_counter_hint_leaves_a_wrong_port_to_the_same_update_hint() -> None:
    tf = _tf()
    wrong = ex.step_with_loss(_unscaled_penalty, right_clip)

    def fixed_port(strategy, model, optimizer, metric, global_batch_size):
        with strategy.scope():
            steps_done = tf.Variable(0, trainable=False)
        return warmup_step(model, optimizer, metric, global_batch_size, steps_done, port=wrong)

    with pytest.raises(ExerciseError, match="the penalty is added on every replica"):
        ex.check_capstone_counter(fixed_port)


# --------------------------------------------------------------------------- the prediction


def _naive_port(model, optimizer, metric, global_batch_size):
    return ex.step_with_loss(_unscaled_penalty, _local_clip, ex.CLIP_NORM)(
        model, optimizer, metric, global_batch_size
    )


def test_prediction() -> None:
    data, penalty = ex.script_first_loss()
    measured = data + 2 * penalty  # the test process has 2 CPUs: the notebook asks for 4
    assert abs(ex.naive_first_loss(_naive_port, 2) - measured) < 1e-4
    ex.check_naive_loss_prediction(measured, _naive_port, replicas=2)
    wrong = [
        (data + penalty, "one-device loss"),
        (2 * (data + penalty), "not 2x it"),
        (data + 4 * penalty, "You counted the penalty 4 times"),
        (data / 2 + penalty, "less than the one-device data loss"),
        (measured + 0.5, "not what the naive port reports on 2 replicas"),
    ]
    for prediction, hint in wrong:
        with pytest.raises(ExerciseError, match=hint) as error:
            ex.check_naive_loss_prediction(prediction, _naive_port, replicas=2)
        assert f"{measured:.4f}" not in str(error.value) and f"{measured:.3f}" not in str(error.value)
    with pytest.raises(ExerciseError, match="is not done yet"):
        ex.check_naive_loss_prediction(None, _naive_port, replicas=2)


def _iterations_as_counter(strategy, model, optimizer, metric, global_batch_size):
    """A real mistake: the optimizer's own counter, which apply_gradients also advances."""
    return warmup_step(model, optimizer, metric, global_batch_size, optimizer.iterations)


def test_counter_hint_names_a_counter_wrong_on_one_replica() -> None:
    with pytest.raises(ExerciseError, match="already on 1 replica your step differs"):
        ex.check_capstone_counter(_iterations_as_counter)
