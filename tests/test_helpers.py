"""Small helpers: checks, scratch folders, fresh processes, progress lines, version warnings."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils import checks
from course_utils.errors import CourseError, ExerciseError, first_line, last_error_line
from course_utils.processes import run_python, run_side_by_side
from course_utils.progress import format_metrics
from course_utils.runtime import check_versions
from course_utils.scratch import scratch_dir


def test_expect_close_names_the_factor() -> None:
    checks.expect_close([1.0, 2.0], [1.0, 2.0], "same")
    with pytest.raises(ExerciseError, match=r"2\.00x the reference"):
        checks.expect_close(np.array([2.0, 4.0]), np.array([1.0, 2.0]), "Gradients differ")
    with pytest.raises(ExerciseError, match="expected shape"):
        checks.expect_close([1.0], [1.0, 2.0], "shape")
    with pytest.raises(ExerciseError) as info:  # one number: the student's own, never the answer
        checks.expect_close(96_000.0, 64_000.0, "Traffic")
    assert str(info.value).endswith("(got 96000)") and "64" not in str(info.value)


def test_exercise_turns_every_failure_into_a_hint() -> None:
    def unfinished():
        raise NotImplementedError("Exercise e: replace this line with your code")

    with pytest.raises(ExerciseError, match="Exercise e is not done yet"):
        with checks.exercise("e"):
            unfinished()
    with pytest.raises(ExerciseError, match="Exercise e: your code raised ZeroDivisionError"):
        with checks.exercise("e"):
            1 / 0
    with pytest.raises(ExerciseError, match="^Exercise e: Return a list"):
        with checks.exercise("e"):
            checks.expect(False, "Return a list")
    assert issubclass(ExerciseError, AssertionError)


def test_passed_prints_one_line(capsys) -> None:
    checks.passed("e", "all good")
    assert capsys.readouterr().out == "[pass] e: all good\n"


def test_first_line() -> None:
    assert first_line("a\nb") == "a"
    assert first_line(None) == ""


def test_scratch_dir_starts_clean(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COURSE_SCRATCH", str(tmp_path))
    folder = scratch_dir("04_custom_training_loops", "checkpoints")
    (folder / "old").write_text("x")
    assert (scratch_dir("04_custom_training_loops", "checkpoints", clean=False) / "old").exists()
    assert not (scratch_dir("04_custom_training_loops", "checkpoints") / "old").exists()
    with pytest.raises(ValueError):
        scratch_dir("../elsewhere")


def test_run_python_reports_output_and_errors() -> None:
    ok = run_python("import os; print(os.environ['COURSE_REPLICAS'])", replicas=3)
    assert ok.ok and ok.stdout.strip() == "3"
    bad = run_python("raise ValueError('broken on purpose')")
    assert not bad.ok and last_error_line(bad.stderr) == "ValueError: broken on purpose"
    with pytest.raises(CourseError, match="did not finish"):
        run_python("import time; time.sleep(30)", timeout=1)


def test_run_side_by_side_keeps_the_order_of_its_environments() -> None:
    code = "import os, sys; print(os.environ['WHICH'], os.environ.get('COURSE_REPLICAS')); sys.exit(int(os.environ['WHICH']))"
    first, second = run_side_by_side(code, [{"WHICH": "0"}, {"WHICH": "3"}], replicas=2)
    assert (first.stdout, first.ok, first.error) == ("0 2\n", True, "")
    assert (second.stdout, second.returncode) == ("3 2\n", 3)
    died = run_python("raise ValueError('bad value at 0x7f00aa')")
    assert died.error == "ValueError: bad value at 0x..."  # an address varies: it is hidden


def test_format_metrics() -> None:
    assert format_metrics({"loss": 0.123456, "accuracy": 1, "name": "x"}) == "loss=0.1235  accuracy=1.0000"


def test_version_warnings() -> None:
    assert check_versions("2.21.0", "3.15.1") is None
    assert "older than the releases this course is tested on" in check_versions("2.18.1", "3.8.0")
    assert "older than 2.16" in check_versions("2.15.0", "3.0.0")
    assert "not Keras 3" in check_versions("2.21.0", "2.21.0")


def test_the_report_says_in_one_line_what_training_runs_on() -> None:
    """The report's line is the strategy's words (strategies.in_words), decided without building."""
    from course_utils.config import read
    from course_utils.runtime import training_line

    assert training_line(read({})) == (
        "MirroredStrategy over 2 virtual CPUs (auto: no TPU or GPU, so 2 virtual CPUs; "
        "COURSE_REPLICAS=1 for one device)"
    )
    assert training_line(read({"COURSE_REPLICAS": "1"})) == (
        "the default strategy on the CPU (auto: no TPU or GPU, and COURSE_REPLICAS=1: one device)"
    )
    assert training_line(read({"COURSE_STRATEGY": "default"})) == "the default strategy on the CPU"
    assert training_line(read({"COURSE_STRATEGY": "mirrored", "COURSE_REPLICAS": "3"})) == (
        "MirroredStrategy over 3 virtual CPUs"
    )


def test_peak_memory_sees_a_child_and_the_part_named() -> None:
    """A parent that starts a child holding 200 MB: the whole tree's peak and the child's alone."""
    import subprocess
    import sys

    from course_utils.processes import PeakMemory

    child = "import time; block = bytearray(200 * 2**20); block[::4096] = b'x' * len(block[::4096]); time.sleep(1.5)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}, 'marked-child'])"
    proc = subprocess.Popen([sys.executable, "-c", parent])
    with PeakMemory(proc.pid, part="marked-child", interval=0.1) as peak:
        proc.wait(timeout=60)
    assert peak.part_bytes >= 200 * 2**20
    assert peak.bytes > peak.part_bytes
