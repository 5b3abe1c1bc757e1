"""The verdict's decision tables (course_tools.grading.verdict): one test per row, and the records.

Each test builds the records of a made-up run (no notebook runs, no TensorFlow) and checks which
row decides, the status and the whole hint, so that a row moved, changed or dropped fails here.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from typing import Any

import pytest

from course_tools.grading import extract, protocol, records, report, runner, verdict
from course_tools.grading.audit import Finding
from course_tools.grading.protocol import CellRecord, CellResult
from course_tools.grading.records import ExerciseResult, Result, Status

#: One exercise, ``ex``: course cells 0 and 1, its exercise cell 2, a course cell 3, its check 4, and
#: a course cell 5.
EX = extract.ExerciseCells("ex", solution=2, check=4)
OPTIONS = runner.RunOptions(cell_timeout=7.5, notebook_timeout=1200, sandbox=True)
#: What a kernel may print, a check's pass line included: never a verdict (only the judge decides).
PASS = "warming up\n[pass] ex: 4 examples per replica.\n"


def graded(answered: bool = True, findings: tuple[Finding, ...] = ()) -> extract.GradedNotebook:
    return extract.GradedNotebook(
        notebook=None,
        exercises=[EX],
        answers={"ex": extract.Answer("ex", "def f():\n    return 4\n" if answered else None)},
        student_cells=frozenset({EX.solution}),
        names={"ex": ("f", "g")},
        findings={"ex": list(findings)} if findings else {},
        judged={"ex": {}},
    )


def cell(result: str, stdout: str = "", **extra: Any) -> CellRecord:
    outputs = ({"output_type": "stream", "name": "stdout", "text": stdout},) if stdout else ()
    return CellRecord(cell=-1, result=CellResult(result), outputs=outputs, **extra)


def run(cells: dict[int, CellRecord], **how: Any) -> runner.RunResult:
    """A finished run (started, unless ``how`` says otherwise) with these cell records."""
    numbered = {n: replace(r, cell=n) for n, r in cells.items()}
    return runner.RunResult(cells=numbered, **{"started": True, **how})


def ran(solution: CellRecord, check: CellRecord, **course: CellRecord) -> dict[int, CellRecord]:
    """The course's set-up cells ran, then the exercise cell and the check (and ``course`` cells)."""
    cells = {0: cell("ok"), 1: cell("ok"), EX.solution: solution, 3: cell("ok"), EX.check: check}
    cells.update({int(n.removeprefix("c")): r for n, r in course.items()})
    return cells


def decide(nb: extract.GradedNotebook, the_run: runner.RunResult) -> tuple[str, ExerciseResult]:
    """The row of EXERCISE_ROWS that decides, and the exercise's result (after the audit)."""
    facts = verdict.run_facts(nb, the_run, OPTIONS)
    case = verdict.Case(
        id="ex",
        names=("f", "g"),
        answered=nb.answers["ex"].source is not None,
        solution=the_run.cells.get(EX.solution),
        check=the_run.cells.get(EX.check),
        run=facts,
        cell_timeout=OPTIONS.cell_timeout,
        judge=the_run.judged.get("ex"),
        judge_failed=the_run.judge_failed,
    )
    row, _ = verdict.first_row(verdict.EXERCISE_ROWS, case)
    (result,) = verdict.of_run(nb, the_run, OPTIONS).exercises
    return row.name, result


# --------------------------------------------------------------------------- the exercise table

#: (row that decides, the run, the status, the hint), one or more per row of EXERCISE_ROWS.
EXERCISE_CASES = [
    pytest.param(
        "no answer",
        graded(answered=False),
        # Before everything else: even a run that could not start says the answer is missing.
        run({}, setup_error="RuntimeError: no kernel"),
        Status.MISSING,
        "No code for exercise ex was found in this notebook. Keep your answer in a code cell that "
        "defines `f`, `g`, then hand the notebook in again.",
        id="no-answer",
    ),
    pytest.param(
        "the run cannot be graded",
        graded(),
        run(
            {},
            setup_error="Traceback (most recent call last):\n  ...\nRuntimeError: Kernel died before replying\n",
        ),
        Status.ERROR,
        "Not graded: the notebook's kernel did not start: RuntimeError: Kernel died before replying.",
        id="kernel-did-not-start",
    ),
    pytest.param(
        "the run cannot be graded",
        graded(),
        run({}, started=False, returncode=4, log="collecting ...\nERROR: no module named nbval\n"),
        Status.ERROR,
        "Not graded: the grading run did not start (exit code 4): ERROR: no module named nbval.",
        id="run-did-not-start",
    ),
    pytest.param(
        "no verdict",
        graded(),
        # Every cell ran by the records, but the process that ran them was killed before the judge
        # gave a verdict: nothing it reported counts.
        run(ran(cell("ok"), cell("ok", PASS)), returncode=-9),
        Status.ERROR,
        "Exercise ex was not graded: the grading run did not end normally (exit code -9), so nothing it reported counts "
        "(code in the notebook may have stopped the process that runs it).",
        id="run-did-not-end-normally",
    ),
    pytest.param(
        "the run cannot be graded",
        graded(),
        run(
            {
                0: cell("ok"),
                1: cell("error", ename="NameError", evalue="name 'tf' is not defined"),
                EX.solution: cell("timeout"),  # then nothing after it says anything
                EX.check: cell("not-run"),
            }
        ),
        Status.ERROR,
        "Not graded: code cell 2 of the course failed before any student code ran: "
        "NameError: name 'tf' is not defined.",
        id="course-cell-failed-first",
    ),
    pytest.param(
        "a cell timed out",
        graded(),
        run(ran(cell("ok"), cell("timeout", timeout=20.0))),
        Status.TIMEOUT,
        "Exercise ex: the check (which calls your code) did not finish within 20 s and was stopped. "
        "Look for a loop that never ends or a step much slower than it should be.",
        id="check-timed-out",
    ),
    pytest.param(
        "a cell timed out",
        graded(),
        # The exercise cell's own timeout, else the option's; and before "the kernel died".
        run(ran(cell("timeout"), cell("died"))),
        Status.TIMEOUT,
        "Exercise ex: your exercise cell did not finish within 7.5 s and was stopped. "
        "Look for a loop that never ends or a step much slower than it should be.",
        id="exercise-cell-timed-out",
    ),
    pytest.param(
        "the kernel died",
        graded(),
        run(ran(cell("died"), cell("not-run"))),
        Status.ERROR,
        "Exercise ex: the Python kernel died while running your code (it crashed, ran out of memory "
        "or called exit). Run the notebook from the top and watch that cell.",
        id="kernel-died",
    ),
    pytest.param(
        "the kernel died",
        graded(),
        run(ran(cell("died"), cell("not-run")), notebook_timed_out=True),
        Status.ERROR,
        "Exercise ex: the Python kernel died while running your code (it crashed, ran out of memory "
        "or called exit). Run the notebook from the top and watch that cell.",
        id="kernel-died-then-time-ran-out",
    ),
    pytest.param(
        "not reached in time",
        graded(),
        run({0: cell("ok"), 1: cell("ok")}, notebook_timed_out=True),
        Status.TIMEOUT,
        "Exercise ex was not reached: the notebook ran out of time (1200 s in all) or was stopped "
        "after an earlier timeout.",
        id="notebook-timeout",
    ),
    pytest.param(
        "not reached in time",
        graded(),
        run(ran(cell("ok"), cell("not-run"), c3=cell("timeout", kernel_stopped=True))),
        Status.TIMEOUT,
        "Exercise ex was not reached: the notebook ran out of time (1200 s in all) or was stopped "
        "after an earlier timeout.",
        id="kernel-stopped-after-a-timeout",
    ),
    pytest.param(
        "not reached",
        graded(),
        run(ran(cell("ok"), cell("not-run"))),
        Status.ERROR,
        "Exercise ex was not reached: the kernel had stopped before it (an earlier cell crashed it).",
        id="not-reached",
    ),
    pytest.param(
        "not reached",
        graded(),
        run(ran(cell("error", ename="MemoryError"), cell("not-run"))),
        Status.ERROR,
        "Exercise ex was not reached: the kernel had stopped before it (an earlier cell crashed it).",
        id="answer-raised-then-not-reached",
    ),
    pytest.param(
        "the answer raised",
        graded(),
        # Before the check's verdict: the check then fails only because the answer did.
        run(
            ran(
                cell("error", ename="NameError", evalue="name 'np' is not defined\n"),
                cell("error", ename="ExerciseError", evalue="Exercise ex: f is not defined"),
            )
        ),
        Status.ERROR,
        "Exercise ex: your exercise cell raised NameError: name 'np' is not defined. Fix the cell so "
        "that it runs without an error, then run its check again.",
        id="answer-raised",
    ),
    pytest.param(
        "passed",
        graded(),
        # The judge decides; the kernel's own output (no pass line here) does not count.
        run(
            ran(cell("ok"), cell("ok", "[wrong] whatever the kernel printed\n")),
            judged={"ex": ("passed", "4 each.")},
        ),
        Status.PASSED,
        "4 each.",
        id="judged-passed",
    ),
    pytest.param(
        "wrong",
        graded(),
        # A pass line the kernel printed is not a verdict.
        run(ran(cell("ok"), cell("ok", PASS)), judged={"ex": ("failed", "Exercise ex: should be 4.")}),
        Status.FAILED,
        "Exercise ex: should be 4.",
        id="judged-wrong",
    ),
    pytest.param(
        "the kernel broke off",
        graded(),
        run(
            ran(cell("ok"), cell("ok", PASS)),
            judged={"ex": ("error", "the kernel stopped answering while f ran")},
        ),
        Status.ERROR,
        "Exercise ex: the kernel stopped answering while f ran.",
        id="judged-broke-off",
    ),
    pytest.param(
        "no verdict",
        graded(),
        run(ran(cell("ok"), cell("ok", PASS))),
        Status.ERROR,
        "Exercise ex: your notebook never answered the grader's calls for this exercise.",
        id="judged-never-served",
    ),
    pytest.param(
        "no verdict",
        graded(),
        run(ran(cell("ok"), cell("error", ename="NameError", evalue="name 'f' is not defined"))),
        Status.ERROR,
        "Exercise ex: the grader could not call your code: NameError: name 'f' is not defined.",
        id="judged-serve-raised",
    ),
    pytest.param(
        "no verdict",
        graded(),
        # An exercise the judge gave no verdict before it failed.
        run(ran(cell("ok"), cell("ok")), judge_failed="the judge did not finish"),
        Status.ERROR,
        "Not graded: the judge did not finish.",
        id="judged-judge-failed",
    ),
    pytest.param(
        "passed",
        graded(),
        # A verdict the judge signed stands even when the run was then interrupted.
        run(ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")}, returncode=2),
        Status.PASSED,
        "4 each.",
        id="judged-stands-after-an-abnormal-end",
    ),
]


@pytest.mark.parametrize("row, nb, the_run, status, hint", EXERCISE_CASES)
def test_exercise_row(row, nb, the_run, status, hint) -> None:
    name, result = decide(nb, the_run)
    assert (name, result.status, result.message) == (row, status, hint)
    assert result == ExerciseResult("ex", status, hint)  # no points yet: the engine scores it


def test_every_exercise_row_has_a_case() -> None:
    """And where two neighbours could both hold, a case says which comes first."""
    names = [row.name for row in verdict.EXERCISE_ROWS]
    assert len(set(names)) == len(names)
    assert {case.values[0] for case in EXERCISE_CASES} == set(names)
    assert verdict.EXERCISE_ROWS[-1].name == "no verdict"  # the last row takes whatever is left


# --------------------------------------------------------------------------- the audit


def test_a_flagged_answer_quotes_the_judges_own_verdict() -> None:
    found = (
        Finding("ex", 3, "assigns to `np.mean`, an attribute of a module"),
        Finding("ex", 5, "calls `exec()`"),
    )
    the_run = run(
        ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")}, observed=frozenset({"ex"})
    )
    _, result = decide(graded(findings=found), the_run)
    assert result == ExerciseResult(
        "ex",
        Status.FLAGGED,
        "Flagged for review (no points until a person has looked): the answer to ex line 3: assigns "
        "to `np.mean`, an attribute of a module; line 5: calls `exec()`. The check said: passed: 4 each.",
    )


def test_a_flagged_answer_names_six_findings_at_most() -> None:
    where = "imports `course_utils.exercises`, where the course's checks and answers live"
    found = tuple(Finding("ex", n, where) for n in range(1, 9))
    _, result = decide(
        graded(findings=found), run(ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")})
    )
    assert result.status is Status.FLAGGED
    assert "line 6: imports" in result.message and "line 7" not in result.message
    assert result.message.endswith("; and 2 more. The check said: passed: 4 each.")


def test_a_judged_answer_is_never_flagged_the_audit_is_a_note() -> None:
    found = (Finding("ex", 3, "imports `course_utils.exercises`"),)
    nb = graded(findings=found)
    the_run = run(ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")})
    decided = verdict.of_run(nb, the_run, OPTIONS)
    assert decided.exercises == (ExerciseResult("ex", Status.PASSED, "4 each."),)
    assert (
        "audit note on ex (its verdict stands): the answer line 3: imports `course_utils.exercises`"
        in decided.notes
    )


def test_a_run_without_the_sandbox_says_so_in_its_notes() -> None:
    the_run = run(ran(cell("ok"), cell("ok", PASS)))
    assert report.NO_SANDBOX not in verdict.of_run(graded(), the_run, OPTIONS).notes
    assert report.NO_SANDBOX in verdict.of_run(graded(), the_run, replace(OPTIONS, sandbox=False)).notes


def test_a_judged_pass_that_calls_the_courses_own_code_is_flagged() -> None:
    """The judge cannot tell an answer that calls the course's reference from one that solves the
    exercise: such a pass is flagged for a person; a trick on the check stays a note."""
    where = "imports `course_utils.exercises.data_parallelism`, where the course's checks and answers live"
    nb = graded(findings=(Finding("ex", 1, where),))
    passed = run(ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")})
    (result,) = verdict.of_run(nb, passed, OPTIONS).exercises
    assert result.status is Status.FLAGGED and "The check said: passed: 4 each." in result.message
    failed = run(ran(cell("ok"), cell("ok")), judged={"ex": ("failed", "Exercise ex: no.")})
    (result,) = verdict.of_run(nb, failed, OPTIONS).exercises
    assert result.status is Status.FAILED


def test_a_pass_that_rests_on_the_kernels_report_is_flagged_by_any_trick() -> None:
    """Where a harness ran the answer in the kernel, a patch there (numpy, TensorFlow) could fake
    what it reported: a judged pass with any finding is flagged; a failure stays a failure."""
    patch = (Finding("ex", 2, "assigns to `np.mean`, an attribute of a module"),)
    nb = graded(findings=patch)
    passed = run(
        ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")}, observed=frozenset({"ex"})
    )
    (result,) = verdict.of_run(nb, passed, OPTIONS).exercises
    assert result.status is Status.FLAGGED, result
    plain = run(ran(cell("ok"), cell("ok")), judged={"ex": ("passed", "4 each.")})
    (result,) = verdict.of_run(nb, plain, OPTIONS).exercises
    assert result.status is Status.PASSED  # a function of numbers: nothing in the kernel to fake
    failed = run(ran(cell("ok"), cell("ok")), judged={"ex": ("failed", "no.")}, observed=frozenset({"ex"}))
    (result,) = verdict.of_run(nb, failed, OPTIONS).exercises
    assert result.status is Status.FAILED


def test_packages_changed_during_a_run_grade_nothing() -> None:
    the_run = run(ran(cell("ok"), cell("ok", PASS)), tampered="the course's packages changed")
    _, result = decide(graded(), the_run)
    assert result == ExerciseResult("ex", Status.ERROR, "Not graded: the course's packages changed.")


def test_a_missing_answer_is_never_flagged() -> None:
    found = (Finding("ex", 1, "imports `course_utils.exercises`"),)
    _, result = decide(graded(answered=False, findings=found), run(ran(cell("ok"), cell("ok", PASS))))
    assert result.status is Status.MISSING


# --------------------------------------------------------------------------- the notebook table

#: (row that decides, the run, the notebook's status, its notes).
NOTEBOOK_CASES = [
    pytest.param(
        "the run cannot be graded",
        run({}, setup_error="RuntimeError: no kernel", notebook_timed_out=True),
        Status.ERROR,
        ("Not graded: the notebook's kernel did not start: RuntimeError: no kernel.",),
        id="cannot-be-graded",
    ),
    pytest.param(
        "the run did not end normally",
        # Its records say every cell passed; its exit status says it was interrupted.
        run(ran(cell("ok"), cell("ok", PASS)), returncode=2),
        Status.ERROR,
        (
            "Not graded: the grading run did not end normally (exit code 2), so nothing it reported "
            "counts (code in the notebook may have stopped the process that runs it).",
        ),
        id="abnormal-end",
    ),
    pytest.param(
        "the notebook timeout",
        # Before "the kernel stopped after a timeout" when both happened.
        run(
            ran(cell("ok"), cell("not-run"), c3=cell("timeout", kernel_stopped=True)), notebook_timed_out=True
        ),
        Status.TIMEOUT,
        (
            "The notebook did not run to the end: it hit the notebook timeout.",
            "code cell 4 of the course (not an exercise) failed after the student's code ran: timeout",
        ),
        id="notebook-timeout",
    ),
    pytest.param(
        "the kernel stopped after a timeout",
        # Before "the kernel died" when both happened.
        run(ran(cell("died"), cell("timeout", kernel_stopped=True, timeout=7.5))),
        Status.TIMEOUT,
        (
            "The notebook did not run to the end: a cell could not be interrupted after its timeout, "
            "so the kernel was stopped.",
        ),
        id="kernel-stopped",
    ),
    pytest.param(
        "the kernel died",
        run(ran(cell("died"), cell("not-run"))),
        Status.ERROR,
        ("The kernel died in the exercise cell of ex; later cells did not run.",),
        id="kernel-died",
    ),
    pytest.param(
        "graded",
        run(ran(cell("ok"), cell("ok", PASS), c5=cell("error", ename="ValueError", evalue="bad"))),
        Status.GRADED,
        # A course cell that fails after the student's code is a note, not a status.
        ("code cell 6 of the course (not an exercise) failed after the student's code ran: ValueError: bad",),
        id="graded",
    ),
]


@pytest.mark.parametrize("row, the_run, status, notes", NOTEBOOK_CASES)
def test_notebook_row(row, the_run, status, notes) -> None:
    facts = verdict.run_facts(graded(), the_run, OPTIONS)
    assert verdict.first_row(verdict.NOTEBOOK_ROWS, facts)[0].name == row
    decided = verdict.of_run(graded(), the_run, OPTIONS)
    assert (decided.status, decided.notes) == (status, notes)


def test_every_notebook_row_has_a_case() -> None:
    assert {case.values[0] for case in NOTEBOOK_CASES} == {row.name for row in verdict.NOTEBOOK_ROWS}


def test_only_the_first_course_failure_before_the_student_code_stops_the_grading() -> None:
    cells = {
        0: cell("error", ename="OSError", evalue="no data"),
        1: cell("timeout"),
        EX.solution: cell("ok"),
        EX.check: cell("ok", PASS),
    }
    decided = verdict.of_run(graded(), run(cells), OPTIONS)
    assert decided.status is Status.ERROR
    assert decided.notes == (
        "Not graded: code cell 1 of the course failed before any student code ran: OSError: no data.",
        "code cell 2 of the course (not an exercise) failed after the student's code ran: timeout",
    )


# --------------------------------------------------------------------------- verdicts without a run


def test_verdicts_without_a_run() -> None:
    assert verdict.not_runnable("not valid JSON", ["a", "b"], "not valid JSON") == records.Verdict(
        Status.INVALID,
        (
            ExerciseResult("a", Status.MISSING, "Not graded: not valid JSON."),
            ExerciseResult("b", Status.MISSING, "Not graded: not valid JSON."),
        ),
        ("not valid JSON",),
    )
    failed = verdict.grader_failed(KeyError("x"), ["a"])
    note = "the grader failed on this submission: KeyError: 'x'"
    assert failed == records.Verdict(
        Status.ERROR, (ExerciseResult("a", Status.ERROR, f"Not graded: {note}."),), (note,)
    )
    assert verdict.NOTHING_TO_RUN == records.Verdict(Status.GRADED, (), ())


# --------------------------------------------------------------------------- the records


def test_a_status_is_written_as_its_word() -> None:
    assert Status.PASSED == "passed" and Status("flagged") is Status.FLAGGED
    assert (str(Status.TIMEOUT), f"{Status.TIMEOUT}", f"{Status.ERROR:>7}") == (
        "timeout",
        "timeout",
        "  error",
    )
    assert json.dumps({Status.GRADED: [Status.MISSING]}) == '{"graded": ["missing"]}'
    assert json.dumps({"s": Status.INVALID}, indent=2, ensure_ascii=False) == '{\n  "s": "invalid"\n}'
    out = io.StringIO()
    csv.writer(out).writerow([Status.FAILED, CellResult.NOT_RUN])
    assert out.getvalue() == "failed,not-run\r\n"
    assert records.NOTEBOOK_STATUSES == ("graded", "invalid", "timeout", "error")
    assert set(records.EXERCISE_STATUSES) | set(records.NOTEBOOK_STATUSES) == set(Status)


def test_points_come_with_the_status() -> None:
    worth = {"a": 2, "b": 1.5}
    assert ExerciseResult("a", Status.PASSED, "").scored(worth) == ExerciseResult(
        "a", Status.PASSED, "", 2, 2
    )
    assert ExerciseResult("b", Status.FLAGGED, "").scored(worth) == ExerciseResult(
        "b", Status.FLAGGED, "", 0, 1.5
    )
    assert ExerciseResult("c", Status.PASSED, "").scored(worth).max_points == 0


def test_a_result_reads_back_from_report_json() -> None:
    result = Result(
        student="ana",
        notebook="00_setup_and_hardware",
        status=Status.GRADED,
        exercises=(
            ExerciseResult("a", Status.PASSED, "fine.", 2, 2),
            ExerciseResult("b", Status.TIMEOUT, "slow", 0, 1.5),
        ),
        total=2,
        max_points=3.5,
        source="class/ana/00.ipynb",
        notes=("answer to a: defines f",),
        seconds=12.34,
        graded_path="graded/ana/00_setup_and_hardware.ipynb",
        memory_mb=512,
    )
    data = json.loads(json.dumps(result.as_json()))
    assert (data["passed"], data["points"], data["seconds"], data["exercises"][1]["status"]) == (
        1,
        2,
        12.3,
        "timeout",
    )
    again = Result.from_json(data)
    assert again.as_json() == data and again.status is Status.GRADED


def test_a_cell_record_crosses_the_pipe_unchanged() -> None:
    record = CellRecord(
        cell=3,
        result=CellResult.TIMEOUT,
        seconds=10.2,
        outputs=({"output_type": "stream", "name": "stdout", "text": "hi\n"},),
        message="Timeout of 10 seconds",
        timeout=10.0,
        kernel_stopped=True,
    )
    (back,) = runner.read(
        [b"not json\n", protocol.encode({"event": protocol.START}), record.encode()]
    ).cells.values()
    assert back == record
    assert CellRecord.from_wire({"event": "cell", "cell": 1, "result": "exploded"}) is None
    assert CellRecord.from_wire({"event": "cell", "result": "ok"}) is None
