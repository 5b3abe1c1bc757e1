"""course_utils.lessons.support: the probes and the support matrix of notebook 02.

The cluster runs (run_multi_worker, run_parameter_server) start fresh processes and are exercised
by notebook 02 under nbval; here we test the probes in this process and the pure helpers.
"""

from __future__ import annotations

import tensorflow as tf

from course_utils.errors import exception_line
from course_utils.lessons import support
from course_utils.lessons.support import Outcome, Row


def test_probes_train_on_two_replicas(two_replicas):
    assert support.attempt(support.fit_probe, two_replicas) == Outcome("works", "2 steps, finite loss")
    assert support.attempt(support.custom_loop_probe, two_replicas, build_optimizer=True).ok


def test_custom_loop_probe_is_right_on_one_replica():
    losses = support.custom_loop_probe(tf.distribute.get_strategy(), steps=3)
    assert len(losses) == 3 and all(loss > 0 for loss in losses)


def test_mirrored_default_ops_with_adam_still_fails_upstream():
    """keras-team/keras#23085 on the pinned stack. When this test fails, upstream fixed the bug:
    update section 7 of notebook 02 and FINDINGS."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    outcome = support.attempt(support.custom_loop_probe, strategy)
    assert outcome == Outcome("fails", "InvalidArgumentError: You must feed a value for placeholder tensor")
    assert support.attempt(support.custom_loop_probe, strategy, build_optimizer=True).ok


def test_attempt_reports_exceptions_and_non_finite_losses():
    def broken():
        raise ValueError("first line\nsecond line")

    assert support.attempt(broken) == Outcome("fails", "ValueError: first line")
    assert support.attempt(lambda: [1.0, float("nan")]).status == "fails"
    assert support.attempt(lambda: []).status == "fails"
    assert not Outcome("fails", "x").ok and str(Outcome("works")) == "works"


def test_exception_line_shortens_known_upstream_errors():
    error = ValueError(
        "Attempt to convert a value (PerReplica:{\n 0: <tf.Tensor ...>}) with an unsupported type"
    )
    assert exception_line(error) == ("ValueError: Attempt to convert a value (PerReplica:{...}) to a Tensor")
    assert exception_line(RuntimeError("")) == "RuntimeError"
    assert len(exception_line(RuntimeError("x" * 500))) < 120


def test_render_matrix_numbers_notes_once_per_distinct_problem():
    missing = Outcome("not run", "no TPU here")
    rows = [
        Row("ok", Outcome("works", "2 steps"), Outcome("works")),
        Row(
            "broken",
            Outcome("fails", "ValueError: boom."),
            Outcome("works"),
            issue="org/repo#1",
            alternative="the custom loop",
        ),
        Row("n/a", Outcome("-", "does not apply"), Outcome("works")),
        Row("tpu", missing, missing),
    ]
    text = support.render_matrix(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["strategy", "Model.fit", "custom", "loop", "(Adam)"]
    assert "fails [1]" in text and "not run [2]  not run [2]" in text.replace("   ", "  ")
    assert "[1] ValueError: boom; org/repo#1; works instead: the custom loop." in lines
    assert "[2] no TPU here." in lines
    assert "[3]" not in text
    assert support.as_dict(rows)[1]["issue"] == "org/repo#1"


def test_outcomes_are_read_from_the_last_result_line(capsys):
    from course_utils.processes import print_result

    print("noise")
    print_result({"custom_loop": {"status": "works", "note": ""}, "fit": {"status": "fails", "note": "E"}})
    assert support._result_of(capsys.readouterr().out) == {
        "custom_loop": {"status": "works", "note": ""},
        "fit": {"status": "fails", "note": "E"},
    }
    assert support._result_of("no result here") is None


def test_the_probe_programs_refuse_an_unknown_program(capsys):
    from course_utils.workers import support_probes

    assert support_probes.main(["nothing"]) == 2
    assert "usage" in capsys.readouterr().out
