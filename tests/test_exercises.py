"""Every exercise's check passes on the master and fails on the blank student version.

The masters' stored outputs (what strict nbval reproduces) must show each check passing. Each
notebook is then run as a student who changed nothing, with the checks in the kernel as in a
notebook, cut to the checks' context (:mod:`course_tools.grading.context`), every placeholder
still in place. Each check cell must fail
with an ExerciseError (a hint), not another exception, and what Jupyter shows under it must be
that one-line hint, not a traceback. The master's answers and checks then run again in the same
kernel and must pass: a check re-run after a fix works. (The grader runs no check in the kernel:
tests/test_grade.py grades a copy of every master with the real command.)
A student copy from notebooks/ can also be run whole, as a student opens it, every exercise blank
(``--student-copy NN``; ``make test-colab-tpu`` does so for notebook 11 without TensorFlow): each
check must show its one-line hint there too.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest

from course_tools import authoring
from course_tools.cellmeta import exercise_id, role
from course_tools.grading import code, context, course, extract

ROOT = Path(__file__).resolve().parents[1]
MASTERS = sorted((ROOT / "solutions").glob("*.ipynb"))
WITH_EXERCISES = [p for p in MASTERS if authoring.exercises(nbformat.read(p, as_version=4))]
#: How the blank versions run: the CI's default strategy, built-in data, a scratch folder per test.
BLANK_ENV = {"COURSE_STRATEGY": "default", "COURSE_FAST": "1", "COURSE_OFFLINE": "1"}


def _error_of(cell) -> tuple[str, str]:
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            return output.ename, output.evalue
    return "", ""


def _shown(cell) -> list[str]:
    """What Jupyter shows under a failed cell: the traceback lines of its error output."""
    return [line for o in cell.get("outputs", []) if o.output_type == "error" for line in o.traceback]


def _assert_one_line_hints(name: str, ids: list[str], checks: dict) -> None:
    """Each check cell of a blank answer failed with an ExerciseError naming its exercise, shown
    as that one line, not a traceback."""
    for ident in ids:
        cell = checks[ident]
        ename, evalue = _error_of(cell)
        assert ename == "ExerciseError", (
            f"{name}: the check of {ident} should fail with an ExerciseError on the blank "
            f"version, got {ename or 'no error'}: {evalue[:200]}"
        )
        assert ident in evalue, f"{name}: the hint of {ident} does not name the exercise"
        shown = _shown(cell)
        assert shown == [f"ExerciseError: {evalue}"], (
            f"{name}: under the check of {ident} a student should see the one-line hint, "
            f"not {len(shown)} lines of traceback"
        )


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_master_checks_pass_in_stored_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for ex in authoring.exercises(nb):
        cell = nb.cells[ex.check_cell]
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert _error_of(cell) == ("", ""), f"{path.name}: check of {ex.id} fails on the master"
        assert f"[pass] {ex.id}" in text, f"{path.name}: check of {ex.id} has no stored [pass] line"


def _checks_in_the_kernel(
    nb: course.CourseNotebook, answers: dict[str, extract.Answer]
) -> nbformat.NotebookNode:
    """The graded notebook with the notebook's own check cells in place of the judge's (a check
    runs in the kernel, as in a student's notebook), cut to those checks' context: what the
    cells tagged grading-skip made is kept too, since an in-kernel check may read it."""
    graded = extract.build(nb, answers, whole=True).notebook
    for cell in graded.cells:
        if role(cell) == "check":
            ex = next(e for e in nb.exercises if e.id == exercise_id(cell))
            cell.source = nb.master.cells[ex.check_cell].source
    code_cells = [cell for cell in graded.cells if cell.cell_type == "code"]
    must = [k for k, cell in enumerate(code_cells) if role(cell) in ("solution", "check", "setup")]
    kept = context.context_cells([cell.source for cell in code_cells], must).kept
    dropped = {id(cell) for k, cell in enumerate(code_cells) if k not in kept}
    graded.cells = [cell for cell in graded.cells if id(cell) not in dropped]
    return graded


def _rerun_after_fixing(cells: list) -> list:
    """The code cells a student re-runs after fixing the answers: each answer, each check, and
    every cell after the first answer that reads a name an answer (or such a cell) defines, when a
    later check needs what it binds (a training run no check reads is not run twice)."""
    changed: set[str] = set()
    rerun = []
    started = False
    for cell in cells:
        if cell.cell_type != "code":
            continue
        tree = code.parse(cell.source)
        if role(cell) == "solution":
            started = True
            changed |= code.defined_names(cell.source)
            if cell.source.startswith("%%writefile"):
                changed |= set(re.findall(r"\w+", cell.source.splitlines()[0][len("%%writefile") :]))
        elif not started or tree is None:
            continue
        elif role(cell) != "check" and not context.needed_names(tree, cell.source) & changed:
            continue
        else:
            changed |= context.bound_names(tree)
        rerun.append(cell)
    needed: set[str] = set()
    kept = []
    for cell in reversed(rerun):  # from the last check back: keep what a later kept cell reads
        tree = code.parse(cell.source)
        if role(cell) in ("solution", "check") or (tree is not None and context.bound_names(tree) & needed):
            kept.append(cell)
            needed |= context.needed_names(tree, cell.source) if tree is not None else set()
    return kept[::-1]


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=lambda p: p.stem)
def test_checks_fail_on_the_blank_version_then_pass_on_the_answers(path: Path, tmp_path: Path) -> None:
    """What the grader runs for a student who changed nothing (the checks' context, every
    placeholder in place), then, in the same kernel, the master's answers and what depends on them:
    the blank fails with one-line hints, the context the grader keeps is enough to pass, and a
    check re-run after a fix passes."""
    nb = course.load_notebook(path)
    # The context of the master's answers (what an honest student's run keeps), answers blanked.
    answers = {ex.id: extract.Answer(ex.id, nb.master.cells[ex.solution_cell].source) for ex in nb.exercises}
    graded = _checks_in_the_kernel(nb, answers)
    # Blank first; then, as a student who fixed every answer, the answers again and the cells
    # that read what they define (a %%writefile answer defines the name of its file), then the checks.
    half = len(graded.cells)
    graded.cells += [copy.deepcopy(cell) for cell in _rerun_after_fixing(graded.cells)]
    checks, fixed = {}, {}
    for index, cell in enumerate(graded.cells):
        if role(cell) == "solution" and index < half:
            cell.source = next(ex.placeholder for ex in nb.exercises if ex.id == exercise_id(cell))
        elif role(cell) == "check":
            (checks if index < half else fixed)[exercise_id(cell)] = cell
    env = {**BLANK_ENV, "COURSE_SCRATCH": str(tmp_path / "scratch")}
    authoring.execute(graded, tmp_path, env, allow_errors=True)
    _assert_one_line_hints(path.name, [ex.id for ex in nb.exercises], checks)
    for ex in nb.exercises:
        check = fixed[ex.id]
        assert _error_of(check) == ("", ""), (
            f"{path.name}: with only the context the grader keeps, the master's {ex.id} fails: "
            f"{_error_of(check)}"
        )
        text = "".join(o.get("text", "") for o in check.outputs if o.output_type == "stream")
        assert f"[pass] {ex.id}" in text, f"{path.name}: the master's answer to {ex.id} did not pass"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``student_copy``: the copies in notebooks/ named by ``--student-copy NN`` (none by default:
    a whole notebook per copy is too slow for ``make unit``, and the test above covers the blanks)."""
    if "student_copy" not in metafunc.fixturenames:
        return
    prefixes = metafunc.config.getoption("--student-copy")
    copies = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if p.name.startswith(tuple(prefixes))]
    skip = pytest.mark.skip(reason="runs only the copies named with --student-copy NN")
    params = [pytest.param(p, id=p.stem) for p in copies] or [pytest.param(None, id="none", marks=skip)]
    metafunc.parametrize("student_copy", params)


def test_student_copy_run_whole_gives_one_line_hints(student_copy: Path, tmp_path: Path) -> None:
    """The student copy as a student opens it, run top to bottom with every exercise blank: the
    cells before the first exercise run, and each check shows its one-line hint."""
    nb = nbformat.read(student_copy, as_version=4)
    exercises = authoring.exercises(nb)
    assert exercises, f"{student_copy.name} has no exercises"
    env = {**BLANK_ENV, "COURSE_SCRATCH": str(tmp_path / "scratch")}
    authoring.execute(nb, tmp_path, env, allow_errors=True)
    first = min(ex.solution_cell for ex in exercises)
    failed = [(index, _error_of(cell)) for index, cell in enumerate(nb.cells[:first]) if _error_of(cell)[0]]
    assert failed == [], f"{student_copy.name}: cells before the first exercise failed: {failed}"
    checks = {exercise_id(cell): cell for cell in nb.cells if role(cell) == "check"}
    _assert_one_line_hints(student_copy.name, [ex.id for ex in exercises], checks)
