"""What a student sees when a course error is raised in Jupyter: one line, and the cell still fails."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from course_tools import authoring


def _run(cells: list[str], tmp_path: Path, env: dict[str, str]) -> list:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    authoring.execute(nb, tmp_path, {"COURSE_FAST": "1", "COURSE_OFFLINE": "1", **env}, allow_errors=True)
    return nb.cells


def _errors(cell) -> list:
    return [o for o in cell.outputs if o.output_type == "error"]


def test_course_errors_are_one_line_and_other_errors_keep_their_traceback(tmp_path: Path) -> None:
    cells = _run(
        [
            "import course_utils\nsettings = course_utils.setup(show_report=False)",
            "from course_utils.checks import exercise\nwith exercise('demo'):\n    raise NotImplementedError",
            "import course_utils, tensorflow as tf\ntf.constant(1.0)\ncourse_utils.use_virtual_cpus(3)",
            "1 / 0",
        ],
        tmp_path,
        {"COURSE_STRATEGY": "default"},
    )
    hint = _errors(cells[1])
    assert len(hint) == 1 and hint[0].ename == "ExerciseError"
    assert hint[0].traceback == [f"ExerciseError: {hint[0].evalue}"]
    assert "Exercise demo is not done yet" in hint[0].evalue
    restart = _errors(cells[2])
    assert restart[0].ename == "ReplicaCountError" and len(restart[0].traceback) == 1
    assert "Restart the kernel" in restart[0].evalue
    other = _errors(cells[3])
    assert other[0].ename == "ZeroDivisionError" and len(other[0].traceback) > 1


@pytest.mark.parametrize(
    ("env", "ename", "words"),
    [
        ({"COURSE_STRATEGY": "foo"}, "ConfigError", "Unknown strategy 'foo'"),
        ({"COURSE_REPLICAS": "two"}, "ConfigError", "is not a number"),
        ({"COURSE_STRATEGY": "tpu"}, "NoTPUError", "No TPU found"),
    ],
)
def test_a_mistyped_setting_stops_the_setup_cell_with_one_line(tmp_path: Path, env, ename, words) -> None:
    (cell,) = _run(["import course_utils\nsettings = course_utils.setup(show_report=False)"], tmp_path, env)
    (error,) = _errors(cell)
    assert error.ename == ename and words in error.evalue
    assert error.traceback == [f"{ename}: {error.evalue}"]


def test_an_error_inside_tf_function_names_the_real_error_and_the_students_line(tmp_path: Path) -> None:
    cells = _run(
        [
            "import course_utils\nsettings = course_utils.setup(show_report=False)",
            "import tensorflow as tf\n@tf.function\ndef step(x):\n    return x + 'oops'",
            "from course_utils.checks import exercise\nwith exercise('demo'):\n    step(tf.constant(1.0))",
        ],
        tmp_path,
        {"COURSE_STRATEGY": "default"},
    )
    (error,) = _errors(cells[2])
    assert error.evalue.startswith("Exercise demo: your code raised TypeError: ")
    assert "in user code" not in error.evalue
    assert "(at `return x + 'oops'`)" in error.evalue
