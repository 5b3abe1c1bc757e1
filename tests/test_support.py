"""Notebook 02's support matrix: the scaffolding in course_utils.lessons.support and the doctor's probes.

The probes themselves are the notebook's cells, and the cluster runs start fresh processes: both are
exercised by notebook 02 under nbval. Here we test what can run in this process.
"""

from __future__ import annotations

import textwrap

import pytest
import tensorflow as tf

from course_tools import probes
from course_tools.probes import Outcome
from course_utils.errors import exception_line
from course_utils.lessons import support
from course_utils.lessons.support import Row


def test_the_doctors_probes_train_on_two_replicas(two_replicas):
    assert probes.attempt(probes.fit_probe, two_replicas) == Outcome("works", "2 steps, finite loss")
    assert probes.attempt(probes.custom_loop_probe, two_replicas, build_optimizer=True).ok


def test_mirrored_default_ops_with_adam_still_fails_upstream():
    """keras-team/keras#23085 on the pinned stack. When this test fails, upstream fixed the bug:
    update section 7 of notebook 02 and FINDINGS."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    outcome = probes.attempt(probes.custom_loop_probe, strategy)
    assert outcome == Outcome("fails", "InvalidArgumentError: You must feed a value for placeholder tensor")


def test_attempt_reports_exceptions_and_non_finite_losses():
    def broken():
        raise ValueError("first line\nsecond line")

    assert probes.attempt(broken) == Outcome("fails", "ValueError: first line")
    assert probes.attempt(lambda: [1.0, float("nan")]).status == "fails"
    assert probes.attempt(lambda: []).status == "fails"
    assert not Outcome("fails", "x").ok and str(Outcome("works")) == "works"


def test_exception_line_shortens_known_upstream_errors():
    error = ValueError(
        "Attempt to convert a value (PerReplica:{\n 0: <tf.Tensor ...>}) with an unsupported type"
    )
    assert exception_line(error) == ("ValueError: Attempt to convert a value (PerReplica:{...}) to a Tensor")
    assert exception_line(RuntimeError("")) == "RuntimeError"
    assert len(exception_line(RuntimeError("x" * 500))) < 120


def test_render_matrix_numbers_notes_once_per_distinct_problem():
    missing = "not run: no TPU here"
    rows = [
        Row("ok", "works: 2 steps", "works"),
        Row("broken", "fails: ValueError: boom.", "works", issue="org/repo#1", alternative="the custom loop"),
        Row("n/a", "-", "works"),
        Row("tpu", missing, missing),
    ]
    text = support.render_matrix(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["strategy", "Model.fit", "custom", "loop", "(Adam)"]
    assert "fails [1]" in text and "not run [2]  not run [2]" in text.replace("   ", "  ")
    assert "[1] ValueError: boom; org/repo#1; works instead: the custom loop." in lines
    assert "[2] no TPU here." in lines
    assert "[3]" not in text
    assert rows[1].statuses == ("fails", "works") and rows[2].statuses == ("-", "works")


def test_compare_with_pins_passes_the_same_matrix_and_refuses_a_change_on_the_pins(monkeypatch):
    monkeypatch.setenv(support.STRICT_PINS, "1")  # the course's own tests (TEST_ENV, conftest)
    rows = [Row("broken", "fails: ValueError: boom.", "works")]
    expected = {"broken": ("fails", "works")}
    assert support.compare_with_pins(rows, expected, {"workers agree": True}).startswith("the matrix of")
    assert "matches the pinned stack" in support.compare_with_pins(rows, expected, {"workers agree": True})
    with pytest.raises(AssertionError, match="broken: expected \\('works', 'works'\\), found \\('fails'"):
        support.compare_with_pins(rows, {"broken": ("works", "works")}, {})
    with pytest.raises(AssertionError, match="no longer true: workers agree"):
        support.compare_with_pins(rows, expected, {"workers agree": False})
    monkeypatch.setattr(tf, "__version__", "2.99.0")  # another stack: listed, not refused
    text = support.compare_with_pins(rows, {"broken": ("works", "works")}, {})
    assert "the matrix of TensorFlow 2.99.0" in text and "differs from the pinned stack" in text
    assert "broken: expected ('works', 'works'), found ('fails', 'works')" in text


def test_compare_with_pins_never_raises_in_a_students_run(monkeypatch):
    """Without COURSE_STRICT_PINS=1 (a student's kernel, a grader's run) a difference on the pinned
    releases, say a patch release of Keras that fixed keras#23085, is listed for the student to read."""
    import keras

    from course_utils.versions import NEWEST

    monkeypatch.delenv(support.STRICT_PINS, raising=False)
    monkeypatch.setattr(tf, "__version__", "{}.{}.9".format(*NEWEST["tensorflow"]))
    monkeypatch.setattr(keras, "__version__", "{}.{}.9".format(*NEWEST["keras"]))
    rows = [Row("MirroredStrategy, TF defaults", "works", "works")]
    text = support.compare_with_pins(
        rows, {"MirroredStrategy, TF defaults": ("works", "fails")}, {"agree": False}
    )
    assert text.startswith("the matrix of TensorFlow {}.{}.9".format(*NEWEST["tensorflow"]))
    assert "differs from the pinned stack" in text
    assert "MirroredStrategy, TF defaults: expected ('works', 'fails'), found ('works', 'works')" in text
    assert "no longer true: agree" in text and "upstream changed" not in text
    monkeypatch.setenv(support.STRICT_PINS, "0")
    assert "differs from the pinned stack" in support.compare_with_pins(
        rows, {rows[0].strategy: ("-", "-")}, {}
    )


def test_outcomes_are_read_from_the_last_result_line(capsys):
    from course_utils.processes import print_result

    print("noise")
    print_result({"custom_loop": "works: 2 steps", "fit": "fails: E"})
    assert support._result_of(capsys.readouterr().out) == {"custom_loop": "works: 2 steps", "fit": "fails: E"}
    assert support._result_of("no result here") is None


def test_cell_source_gives_each_defining_file_once(tmp_path):
    import importlib.util

    path = tmp_path / "probe_cells.py"
    path.write_text(
        textwrap.dedent(
            """
            STEPS = 2

            def fit_probe(strategy):
                return [1.0] * STEPS

            def attempt(probe, *args):
                return "works" if probe(*args) else "fails"
            """
        )
    )
    spec = importlib.util.spec_from_file_location("probe_cells", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = support.cell_source(module.fit_probe, module.attempt)
    assert source == path.read_text()
    namespace: dict = {}
    exec(source, namespace)
    assert namespace["attempt"](namespace["fit_probe"], None) == "works"


def test_the_cluster_programs_refuse_an_unknown_program(capsys):
    from course_utils.workers import support_probes

    assert support_probes.main(["nothing"]) == 2
    assert "usage" in capsys.readouterr().out
