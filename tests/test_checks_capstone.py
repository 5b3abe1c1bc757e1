"""The checks of notebook 10 pass the right answers and catch plausible wrong ones on 2 replicas."""

from __future__ import annotations

import pytest
from test_capstone import _per_example, _tf, right_clip, right_loss  # the right answers, written once

from course_utils.errors import ExerciseError
from course_utils.exercises import capstone as ex

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_replica_counts_in_the_test_process() -> None:
    assert ex.replica_counts() == (1, 2)  # the notebook has 4 CPUs: (1, 2, 4)


def test_right_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    ex.check_capstone_loss(right_loss)
    ex.check_capstone_clip(right_clip)
    ex.check_capstone_step(ex.step_with_loss(right_loss, right_clip))
    out = capsys.readouterr().out
    for name in ("capstone_loss", "capstone_clip", "capstone_step"):
        assert f"[pass] {name}: " in out


def _unscaled_penalty(labels, logits, weights, model_losses, global_batch_size):
    tf = _tf()
    return tf.nn.compute_average_loss(
        _per_example(labels, logits, weights), global_batch_size=global_batch_size
    ) + tf.add_n(model_losses)


def _no_weights(labels, logits, weights, model_losses, global_batch_size):
    return right_loss(labels, logits, None, model_losses, global_batch_size)


def _local_mean(labels, logits, weights, model_losses, global_batch_size):
    tf = _tf()
    return tf.reduce_mean(_per_example(labels, logits, weights)) + tf.nn.scale_regularization_loss(
        tf.add_n(model_losses)
    )


def _no_penalty(labels, logits, weights, model_losses, global_batch_size):
    tf = _tf()
    return tf.nn.compute_average_loss(
        _per_example(labels, logits, weights), global_batch_size=global_batch_size
    )


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_unscaled_penalty, "the penalty is added on every replica (its part of the update is 2.00x"),
        (_no_weights, "sample weights ignored"),
        (_local_mean, "each replica averages over its own examples"),
        (_no_penalty, "the penalty is missing"),
    ],
    ids=["penalty not scaled", "sample weights ignored", "reduce_mean", "no penalty"],
)
def test_capstone_loss_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise capstone_loss") as error:
        ex.check_capstone_loss(answer)
    assert hint in str(error.value)


def _local_clip(gradients, clip_norm):
    return _tf().clip_by_global_norm(gradients, clip_norm)[0]


def _clip_the_total(gradients, clip_norm):
    tf = _tf()
    total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)
    return tf.clip_by_global_norm(total, clip_norm)[0]


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_local_clip, "Each replica clipped its own gradient"),
        (_clip_the_total, "add up to 2.00x the clipped gradient"),
        (lambda gradients, clip_norm: gradients, "should give"),
    ],
    ids=["local clip", "all-reduced total", "no clip"],
)
def test_capstone_clip_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise capstone_clip") as error:
        ex.check_capstone_clip(answer)
    assert hint in str(error.value)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (ex.step_with_loss(right_loss, _local_clip), "each replica clips its own gradient"),
        (ex.step_with_loss(_unscaled_penalty, right_clip), "the penalty is added on every replica"),
    ],
    ids=["clipping per replica", "penalty not scaled"],
)
def test_capstone_step_mistakes(answer, hint: str) -> None:
    with pytest.raises(ExerciseError, match="Exercise capstone_step") as error:
        ex.check_capstone_step(answer)
    assert hint in str(error.value)


def test_prediction() -> None:
    data, penalty = ex.script_first_loss()
    measured = data + 4 * penalty
    ex.check_naive_loss_prediction(measured, measured)
    with pytest.raises(ExerciseError, match="one-device loss"):
        ex.check_naive_loss_prediction(data + penalty, measured)
    with pytest.raises(ExerciseError, match="not 4x it"):
        ex.check_naive_loss_prediction(4 * (data + penalty), measured)
    with pytest.raises(ExerciseError, match="is not done yet"):
        ex.check_naive_loss_prediction(None, measured)
