"""Graders (inside the engine): what a grading run's cell records mean, as two decision tables.

The runner (:mod:`.runner`) only runs; this module decides; the report (:mod:`.report`) writes.

Each exercise is a :class:`Case` (its answer, the records of its exercise and check cells, and the
judge's verdict, :mod:`.judge`: the kernel's output never decides); its status and hint are those
of the first row of :data:`EXERCISE_ROWS` whose condition holds. Then the audit (:mod:`.audit`)
has its say, as a note, except on a pass that borrows the course's own code or rests on what the
kernel reported: such a pass with a finding is ``flagged``, the judge's verdict quoted. The
notebook's status and first note come the same way from :data:`NOTEBOOK_ROWS`, over the run as a
whole (:class:`RunFacts`). A hint is a template that :meth:`str.format` fills from the case
(``{c.id}``); docs/grading.md says what each status means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence

from . import audit, report
from .extract import GradedNotebook
from .protocol import CellRecord, CellResult
from .records import ExerciseResult, Status, Verdict
from .runner import RunOptions, RunResult


class Row(NamedTuple):
    """One row of a decision table: when ``when(c)`` holds, the outcome is ``status`` with ``hint``."""

    name: str
    when: Callable[[Any], bool]
    status: Status
    hint: str


@dataclass(frozen=True)
class RunFacts:
    """What the verdict needs to know about a run as a whole."""

    #: Why nothing in this run can be graded ("" when it can): the kernel or the run did not
    #: start, or a course cell failed before any student code ran.
    grader_failed: str
    #: Why the run's own records cannot be trusted ("" when they can): it did not end normally.
    abnormal_end: str
    notebook_timed_out: bool
    #: A cell timed out and could not be interrupted, so the kernel was stopped.
    stopped_after_timeout: bool
    #: Where the kernel died ("" when it did not).
    died_in: str
    #: Course cells that failed after the student's code ran (notes for the grader).
    course_notes: tuple[str, ...]
    notebook_timeout: float

    @property
    def out_of_time(self) -> bool:
        return self.notebook_timed_out or self.stopped_after_timeout


@dataclass(frozen=True)
class Case:
    """One exercise of one run: the answer, the records of its two cells, and the run around them."""

    id: str
    #: The names the answer must define.
    names: tuple[str, ...]
    answered: bool
    solution: Optional[CellRecord]
    check: Optional[CellRecord]
    run: RunFacts
    cell_timeout: float
    #: The judge's verdict ``(status, message)`` (:mod:`.judge`), when it gave one.
    judge: Optional[tuple[str, str]] = None
    #: Why the judge's verdicts cannot be used ("" when they can).
    judge_failed: str = ""

    @property
    def judge_says(self) -> str:
        assert self.judge is not None
        return self.judge[1]

    def judge_status(self, status: str) -> bool:
        """A verdict the judge signed stands, whatever happened to the run after it."""
        return self.judge is not None and self.judge[0] == status

    @property
    def no_verdict(self) -> str:
        """Why an exercise has no verdict, in the words of its cell."""
        if self.judge_failed:
            return f"Not graded: {self.judge_failed}."
        if self.run.abnormal_end:
            return f"Exercise {self.id} was not graded: {self.run.abnormal_end}."
        if _ran(self.check, CellResult.ERROR):
            return f"Exercise {self.id}: the grader could not call your code: {self.check_error}."
        return f"Exercise {self.id}: your notebook never answered the grader's calls for this exercise."

    @property
    def states(self) -> set[CellResult]:
        return {r.result for r in (self.solution, self.check) if r is not None}

    @property
    def not_reached(self) -> bool:
        return self.solution is None or self.check is None or CellResult.NOT_RUN in self.states

    @property
    def slow(self) -> CellRecord:
        """The cell that timed out: the exercise cell if it did, else the check."""
        if self.solution is not None and self.solution.result is CellResult.TIMEOUT:
            return self.solution
        assert self.check is not None
        return self.check

    @property
    def slow_cell(self) -> str:
        return "your exercise cell" if self.slow is self.solution else "the check (which calls your code)"

    @property
    def seconds(self) -> float:
        return float(self.slow.timeout or self.cell_timeout)

    @property
    def listed_names(self) -> str:
        return ", ".join(f"`{n}`" for n in self.names)

    @property
    def answer_error(self) -> str:
        assert self.solution is not None
        return self.solution.exception()

    @property
    def check_error(self) -> str:
        assert self.check is not None
        return self.check.exception()


def _ran(record: Optional[CellRecord], result: CellResult) -> bool:
    return record is not None and record.result is result


# fmt: off
#: An exercise's status and hint: the first row whose condition holds. The rows after "not
#: reached" may read both cells' records: both are there.
EXERCISE_ROWS: tuple[Row, ...] = (
    Row("no answer", lambda c: not c.answered, Status.MISSING,
        "No code for exercise {c.id} was found in this notebook. Keep your answer in a code cell that "
        "defines {c.listed_names}, then hand the notebook in again."),
    Row("the run cannot be graded", lambda c: bool(c.run.grader_failed), Status.ERROR,
        "Not graded: {c.run.grader_failed}."),
    Row("a cell timed out", lambda c: CellResult.TIMEOUT in c.states, Status.TIMEOUT,
        "Exercise {c.id}: {c.slow_cell} did not finish within {c.seconds:g} s and was stopped. Look "
        "for a loop that never ends or a step much slower than it should be."),
    Row("the kernel died", lambda c: CellResult.DIED in c.states, Status.ERROR,
        "Exercise {c.id}: the Python kernel died while running your code (it crashed, ran out of "
        "memory or called exit). Run the notebook from the top and watch that cell."),
    Row("not reached in time", lambda c: c.not_reached and c.run.out_of_time, Status.TIMEOUT,
        "Exercise {c.id} was not reached: the notebook ran out of time ({c.run.notebook_timeout:g} s "
        "in all) or was stopped after an earlier timeout."),
    Row("not reached", lambda c: c.not_reached, Status.ERROR,
        "Exercise {c.id} was not reached: the kernel had stopped before it (an earlier cell crashed "
        "it)."),
    Row("the answer raised", lambda c: _ran(c.solution, CellResult.ERROR), Status.ERROR,
        "Exercise {c.id}: your exercise cell raised {c.answer_error}. Fix the cell so that "
        "it runs without an error, then run its check again."),
    Row("passed", lambda c: c.judge_status("passed"), Status.PASSED, "{c.judge_says}"),
    Row("wrong", lambda c: c.judge_status("failed"), Status.FAILED, "{c.judge_says}"),
    Row("the kernel broke off", lambda c: c.judge_status("error"), Status.ERROR,
        "Exercise {c.id}: {c.judge_says}."),
    Row("no verdict", lambda c: True, Status.ERROR, "{c.no_verdict}"),
)

#: The notebook's status and first note (none for "graded"), over the run as a whole.
NOTEBOOK_ROWS: tuple[Row, ...] = (
    Row("the run cannot be graded", lambda c: bool(c.grader_failed), Status.ERROR,
        "Not graded: {c.grader_failed}."),
    Row("the run did not end normally", lambda c: bool(c.abnormal_end), Status.ERROR,
        "Not graded: {c.abnormal_end}."),
    Row("the notebook timeout", lambda c: c.notebook_timed_out, Status.TIMEOUT,
        "The notebook did not run to the end: it hit the notebook timeout."),
    Row("the kernel stopped after a timeout", lambda c: c.stopped_after_timeout, Status.TIMEOUT,
        "The notebook did not run to the end: a cell could not be interrupted after its timeout, so "
        "the kernel was stopped."),
    Row("the kernel died", lambda c: bool(c.died_in), Status.ERROR,
        "The kernel died in {c.died_in}; later cells did not run."),
    Row("graded", lambda c: True, Status.GRADED, ""),
)
# fmt: on


def first_row(rows: Sequence[Row], case: Any) -> tuple[Row, str]:
    """The first row whose condition holds for ``case``, and its hint filled in."""
    row = next(row for row in rows if row.when(case))
    return row, row.hint.format(c=case)


def flagged(result: ExerciseResult, findings: Sequence[Any]) -> ExerciseResult:
    """A pass the audit found something in (``findings``, at least one): ``flagged``, the judge's
    verdict quoted."""
    found = "; ".join(str(f) for f in findings[:6]) + (
        f"; and {len(findings) - 6} more" if len(findings) > 6 else ""
    )
    return ExerciseResult(
        result.id,
        Status.FLAGGED,
        f"Flagged for review (no points until a person has looked): the answer to {result.id} {found}. "
        f"The check said: {result.status}: {result.message}",
    )


def of_run(graded: GradedNotebook, run: RunResult, options: RunOptions) -> Verdict:
    """The verdict on one run: the notebook's status, each exercise's, and notes for the grader."""
    facts = run_facts(graded, run, options)
    exercises = []
    audit_notes: list[str] = []
    for ex in graded.exercises:
        answer = graded.answers.get(ex.id)
        case = Case(
            id=ex.id,
            names=tuple(graded.names.get(ex.id, ())) or (ex.id,),
            answered=answer is not None and answer.source is not None,
            solution=run.cells.get(ex.solution),
            check=run.cells.get(ex.check),
            run=facts,
            cell_timeout=options.cell_timeout,
            judge=run.judged.get(ex.id),
            judge_failed=run.judge_failed,
        )
        row, hint = first_row(EXERCISE_ROWS, case)
        result = ExerciseResult(ex.id, row.status, hint)
        findings = graded.findings.get(ex.id, [])
        # Judged outside the kernel, no trick on a check can change the verdict: what the audit saw
        # is a note. One thing the judge cannot tell from solving the exercise is an answer that
        # calls the course's own code: a pass that does is flagged for a person. And where the
        # verdict rests on what the kernel reported (a harness ran the answer there), a patch in
        # the kernel could fake that report: a pass with any finding is flagged too.
        observed = ex.id in run.observed
        borrowed = [f for f in findings if observed or audit.borrows(f)]
        if borrowed and result.status is Status.PASSED:
            exercises.append(flagged(result, borrowed))
        else:
            audit_notes += [
                f"audit note on {ex.id} (its verdict stands): the answer {f}" for f in findings[:3]
            ]
            exercises.append(result)
    row, note = first_row(NOTEBOOK_ROWS, facts)
    notes = ((note,) if note else ()) + facts.course_notes + tuple(audit_notes)
    if not options.sandbox:
        notes += (report.NO_SANDBOX,)
    if run.judge_failed:
        notes += (run.judge_failed,)
    return Verdict(row.status, tuple(exercises), notes)


def run_facts(graded: GradedNotebook, run: RunResult, options: RunOptions) -> RunFacts:
    """The run as a whole: could it be graded at all, did it run out of time, did the kernel die."""
    grader_failed = ""
    if run.tampered:
        grader_failed = run.tampered
    elif run.setup_error:
        grader_failed = (
            f"the notebook's kernel did not start: {run.setup_error.strip().splitlines()[-1][:300]}"
        )
    elif not run.started and not run.notebook_timed_out:
        tail = run.log.strip().splitlines()[-1:] or ["no output"]
        grader_failed = f"the grading run did not start (exit code {run.returncode}): {tail[0][:300]}"
    # The course's own cells that failed; the first one before any student code, unless the run
    # had already failed, means the run cannot be graded; the others are notes.
    exercise_cells = graded.student_cells | {ex.check for ex in graded.exercises}
    failures = [
        (number, _where(graded, number), r.exception() if r.result is CellResult.ERROR else r.result.value)
        for number, r in sorted(run.cells.items())
        if number not in exercise_cells
        and r.result in (CellResult.ERROR, CellResult.TIMEOUT, CellResult.DIED)
    ]
    first_student = min((ex.solution for ex in graded.exercises), default=-1)
    early = None if grader_failed else next((i for i, f in enumerate(failures) if f[0] < first_student), None)
    if early is not None:
        _, where, what = failures[early]
        grader_failed = f"{where} failed before any student code ran: {what}"
    died = [n for n, r in run.cells.items() if r.result is CellResult.DIED]
    abnormal_end = ""
    if not grader_failed and not run.notebook_timed_out and run.returncode not in (0, 1, None):
        # pytest ends with 0 or 1 whatever the cells did; anything else (killed, interrupted) is a
        # run that did not end normally: nothing it reported counts (the judge's verdicts do).
        abnormal_end = (
            f"the grading run did not end normally (exit code {run.returncode}), so nothing it reported "
            "counts (code in the notebook may have stopped the process that runs it)"
        )
    return RunFacts(
        grader_failed=grader_failed,
        abnormal_end=abnormal_end,
        notebook_timed_out=run.notebook_timed_out,
        stopped_after_timeout=any(
            r.result is CellResult.TIMEOUT and r.kernel_stopped for r in run.cells.values()
        ),
        died_in=_where(graded, died[0]) if died else "",
        course_notes=tuple(
            f"{where} (not an exercise) failed after the student's code ran: {what}"
            for i, (_, where, what) in enumerate(failures)
            if i != early
        ),
        notebook_timeout=options.notebook_timeout,
    )


def not_runnable(note: str, exercise_ids: Iterable[str], why: str) -> Verdict:
    """A submission that cannot run (unreadable, or no course notebook matches it)."""
    return Verdict(
        Status.INVALID,
        tuple(ExerciseResult(i, Status.MISSING, f"Not graded: {why}.") for i in exercise_ids),
        (note,),
    )


def grader_failed(error: BaseException, exercise_ids: Iterable[str]) -> Verdict:
    """The grader's own bug while grading this submission: nothing is blamed on the student."""
    note = f"the grader failed on this submission: {type(error).__name__}: {error}"
    return Verdict(
        Status.ERROR,
        tuple(ExerciseResult(i, Status.ERROR, f"Not graded: {note}.") for i in exercise_ids),
        (note,),
    )


#: A notebook without exercises: nothing runs, nothing to decide.
NOTHING_TO_RUN = Verdict(Status.GRADED)


def _where(graded: GradedNotebook, number: int) -> str:
    """A code cell of the graded notebook, as a grader would name it."""
    for ex in graded.exercises:
        if number == ex.solution:
            return f"the exercise cell of {ex.id}"
        if number == ex.check:
            return f"the check cell of {ex.id}"
    return f"code cell {number + 1} of the course"
