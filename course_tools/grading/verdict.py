"""The verdict: what a grading run's cell results mean for each exercise and for the notebook.

The runner (:mod:`.runner`) only runs; this module decides; the report (:mod:`.report`) writes.
"""

from __future__ import annotations

from typing import Any, Optional

from . import protocol
from .extract import GradedNotebook
from .runner import RunOptions, RunResult

#: A notebook's status in the report.
NOTEBOOK_STATUSES = ("graded", "invalid", "timeout", "error")
#: An exercise's status in the report (docs/grading.md says what each means).
EXERCISE_STATUSES = ("passed", "failed", "error", "timeout", "missing", "flagged")


def _stdout(record: Optional[dict[str, Any]]) -> str:
    if not record:
        return ""
    return "".join(o.get("text", "") for o in record.get("outputs", []) if o.get("output_type") == "stream")


def _pass_line(text: str, ident: str) -> Optional[str]:
    for line in text.splitlines():
        if line.startswith(f"{protocol.PASS_PREFIX}{ident}"):
            return line[len(f"{protocol.PASS_PREFIX}{ident}") :].lstrip(": ").strip()
    return None


def _exception(record: dict[str, Any]) -> str:
    ename, evalue = record.get("ename") or "an exception", (record.get("evalue") or "").strip()
    return f"{ename}: {evalue}" if evalue else ename


def exercise_results(
    graded: GradedNotebook, result: RunResult, options: RunOptions
) -> tuple[str, list[dict[str, str]], list[str]]:
    """The notebook status, one ``{id, status, message}`` per exercise, and notes for the grader."""
    notes: list[str] = []
    stopped_after_timeout = any(
        r.get("result") == protocol.TIMEOUT and r.get("kernel_stopped") for r in result.cells.values()
    )
    died = [n for n, r in result.cells.items() if r.get("result") == protocol.DIED]
    grader_failed = ""
    if result.setup_error:
        grader_failed = (
            f"the notebook's kernel did not start: {result.setup_error.strip().splitlines()[-1][:300]}"
        )
    elif not result.started and not result.notebook_timed_out:
        tail = result.log.strip().splitlines()[-1:] or ["no output"]
        grader_failed = f"the grading run did not start (exit code {result.returncode}): {tail[0][:300]}"
    first_student = min((ex.solution for ex in graded.exercises), default=None)
    for number, record in sorted(result.cells.items()):
        if number in graded.student_cells or any(number == ex.check for ex in graded.exercises):
            continue
        if record.get("result") in (protocol.ERROR, protocol.TIMEOUT, protocol.DIED):
            what = _exception(record) if record.get("result") == protocol.ERROR else record.get("result")
            if first_student is not None and number < first_student and not grader_failed:
                grader_failed = f"{_where(graded, number)} failed before any student code ran: {what}"
            else:
                notes.append(
                    f"{_where(graded, number)} (not an exercise) failed after the student's code ran: {what}"
                )
    exercises = []
    for ex in graded.exercises:
        answer = graded.answers.get(ex.id)
        sol, chk = result.cells.get(ex.solution), result.cells.get(ex.check)
        states = {r.get("result") for r in (sol, chk) if r}
        if answer is None or answer.source is None:
            status, message = (
                "missing",
                (
                    f"No code for exercise {ex.id} was found in this notebook. Keep your answer in a "
                    "code cell that defines "
                    + ", ".join(f"`{n}`" for n in _names(graded, ex.id))
                    + ", then hand the notebook in again."
                ),
            )
        elif grader_failed:
            status, message = "error", f"Not graded: {grader_failed}."
        elif protocol.TIMEOUT in states:
            record = sol if sol and sol.get("result") == protocol.TIMEOUT else chk
            seconds = float(record.get("timeout") or options.cell_timeout)
            where = "your exercise cell" if record is sol else "the check (which calls your code)"
            status, message = (
                "timeout",
                (
                    f"Exercise {ex.id}: {where} did not finish within {seconds:g} s and was stopped. "
                    "Look for a loop that never ends or a step much slower than it should be."
                ),
            )
        elif protocol.DIED in states:
            status, message = (
                "error",
                (
                    f"Exercise {ex.id}: the Python kernel died while running your code (it crashed, "
                    "ran out of memory or called exit). Run the notebook from the top and watch that cell."
                ),
            )
        elif sol is None or chk is None or protocol.NOT_RUN in states:
            if result.notebook_timed_out or stopped_after_timeout:
                status, message = (
                    "timeout",
                    (
                        f"Exercise {ex.id} was not reached: the notebook ran out of time "
                        f"({options.notebook_timeout:g} s in all) or was stopped after an earlier timeout."
                    ),
                )
            else:
                status, message = (
                    "error",
                    (
                        f"Exercise {ex.id} was not reached: the kernel had stopped before it (an earlier "
                        "cell crashed it)."
                    ),
                )
        elif sol.get("result") == protocol.ERROR:
            status, message = (
                "error",
                (
                    f"Exercise {ex.id}: your exercise cell raised {_exception(sol)}. Fix the cell so that "
                    "it runs without an error, then run its check again."
                ),
            )
        elif chk.get("result") == protocol.ERROR and chk.get("ename") == "ExerciseError":
            status, message = "failed", (chk.get("evalue") or "").strip()
        elif chk.get("result") == protocol.ERROR:
            status, message = "error", f"Exercise {ex.id}: the check could not run: {_exception(chk)}."
        elif chk.get("result") == protocol.SKIPPED:
            status, message = "error", f"Exercise {ex.id}: the check was skipped."
        else:
            line = _pass_line(_stdout(chk), ex.id)
            if line is None:
                status, message = (
                    "error",
                    (
                        f"Exercise {ex.id}: the check ended without printing its [pass] line "
                        "(did your code redirect or silence the output?)."
                    ),
                )
            else:
                status, message = "passed", line
        found = graded.findings.get(ex.id)
        if found and status != "missing":
            status, message = (
                "flagged",
                (
                    f"Flagged for review (no points until a person has looked): the answer to {ex.id} "
                    + "; ".join(str(f) for f in found[:6])
                    + (f"; and {len(found) - 6} more" if len(found) > 6 else "")
                    + f". The check said: {status}: {message}"
                ),
            )
        exercises.append({"id": ex.id, "status": status, "message": message})
    if grader_failed:
        notebook_status = "error"
        notes.insert(0, f"Not graded: {grader_failed}.")
    elif result.notebook_timed_out or stopped_after_timeout:
        notebook_status = "timeout"
        notes.insert(
            0,
            "The notebook did not run to the end: "
            + (
                "it hit the notebook timeout."
                if result.notebook_timed_out
                else "a cell could not be interrupted after its timeout, so the kernel was stopped."
            ),
        )
    elif died:
        notebook_status = "error"
        notes.insert(0, f"The kernel died in {_where(graded, died[0])}; later cells did not run.")
    else:
        notebook_status = "graded"
    return notebook_status, exercises, notes


def _where(graded: GradedNotebook, number: int) -> str:
    """A code cell of the graded notebook, as a grader would name it."""
    for ex in graded.exercises:
        if number == ex.solution:
            return f"the exercise cell of {ex.id}"
        if number == ex.check:
            return f"the check cell of {ex.id}"
    return f"code cell {number + 1} of the course"


def _names(graded: GradedNotebook, ident: str) -> list[str]:
    return list(graded.names.get(ident, ())) or [ident]
