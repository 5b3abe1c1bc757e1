"""Every exercise's check passes on the master and fails on the blank student version.

The masters' stored outputs (what strict nbval reproduces) must show each check passing. The
student notebooks are then executed as a student would first meet them, every placeholder still
in place, and each check cell must fail with an ExerciseError (a hint), not another exception,
and what Jupyter shows under it must be that one-line hint, not a traceback.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from course_utils import authoring

ROOT = Path(__file__).resolve().parents[1]
MASTERS = sorted((ROOT / "solutions").glob("*.ipynb"))
WITH_EXERCISES = [p for p in MASTERS if authoring.exercises(nbformat.read(p, as_version=4))]


def _error_of(cell) -> tuple[str, str]:
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            return output.ename, output.evalue
    return "", ""


def _shown(cell) -> list[str]:
    """What Jupyter shows under a failed cell: the traceback lines of its error output."""
    return [line for o in cell.get("outputs", []) if o.output_type == "error" for line in o.traceback]


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_master_checks_pass_in_stored_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for ex in authoring.exercises(nb):
        cell = nb.cells[ex.check_cell]
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert _error_of(cell) == ("", ""), f"{path.name}: check of {ex.id} fails on the master"
        assert f"[pass] {ex.id}" in text, f"{path.name}: check of {ex.id} has no stored [pass] line"


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=lambda p: p.stem)
def test_checks_fail_on_blank_student_version(path: Path, tmp_path: Path) -> None:
    student = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
    # As the grader does: nothing after the last check can change what a check shows.
    student.cells = student.cells[: max(ex.check_cell for ex in authoring.exercises(student)) + 1]
    env = {
        "COURSE_STRATEGY": "default",
        "COURSE_FAST": "1",
        "COURSE_OFFLINE": "1",
        "COURSE_SCRATCH": str(tmp_path / "scratch"),
    }
    authoring.execute(student, tmp_path, env, allow_errors=True)
    for ex in authoring.exercises(student):
        ename, evalue = _error_of(student.cells[ex.check_cell])
        assert ename == "ExerciseError", (
            f"{path.name}: the check of {ex.id} should fail with an ExerciseError on the blank "
            f"version, got {ename or 'no error'}: {evalue[:200]}"
        )
        assert ex.id in evalue, f"{path.name}: the hint of {ex.id} does not name the exercise"
        shown = _shown(student.cells[ex.check_cell])
        assert shown == [f"ExerciseError: {evalue}"], (
            f"{path.name}: under the check of {ex.id} a student should see the one-line hint, "
            f"not {len(shown)} lines of traceback"
        )
