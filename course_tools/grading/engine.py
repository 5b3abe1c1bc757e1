"""The grading engine the local grader, its shards and the Gradescope autograder share.

From submissions already read into memory to one scored :class:`~.report.Result` each: build the
graded notebooks (:mod:`.extract`), run them in parallel, each in its own folder and process
(:mod:`.runner`), decide the statuses (:mod:`.verdict`) and give the points (:func:`.report.score`).
Nothing here writes a report or parses a command line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from . import extract, report, runner, verdict
from .course import Course
from .submissions import Submission


@dataclass
class Graded:
    """What grading a list of submissions gave."""

    results: list[report.Result]
    #: ``id(result)`` -> the cell records of its run (the outputs for graded/).
    run_cells: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    #: Runs that did not even start (the grader itself is not working here).
    grader_errors: int = 0
    #: How many notebooks were run.
    runs: int = 0


def run_env(
    strategy: str, *, full: bool = False, online: bool = False, replicas: Optional[int] = None
) -> dict:
    """The course's environment variables of a grading run."""
    env = {"COURSE_STRATEGY": strategy}
    if not full:
        env["COURSE_FAST"] = "1"
    if not online:
        env["COURSE_OFFLINE"] = "1"
    if replicas is not None:
        env["COURSE_REPLICAS"] = str(replicas)
    return env


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def prepare(
    subs: list[Submission], course: Course, *, whole: bool = False
) -> tuple[list[report.Result], list[tuple[report.Result, extract.GradedNotebook]]]:
    """One result per submission, and the graded notebooks to run (still no student code run)."""
    results: list[report.Result] = []
    jobs: list[tuple[report.Result, extract.GradedNotebook]] = []
    for sub in subs:
        nb = course.notebooks.get(sub.notebook)
        result = report.Result(
            student=sub.student,
            notebook=sub.notebook or sub.path.name,
            status="invalid",
            exercises=[],
            passed=0,
            total=len(nb.exercises) if nb else 0,
            source=_display(sub.path),
            notes=list(sub.notes),
        )
        results.append(result)
        worth = nb.points() if nb else {}
        if sub.error or nb is None:
            result.notes.insert(0, sub.error or "no matching course notebook")
            if nb is not None:
                result.exercises = [
                    {
                        "id": ex.id,
                        "status": "missing",
                        "message": f"Not graded: {sub.error or 'the notebook could not be read'}.",
                    }
                    for ex in nb.exercises
                ]
            report.score(result, worth)
            continue
        answers = extract.find_answers(sub, nb)
        result.notes += [f"answer to {line}" for line in extract.describe(answers, sub)]
        if not nb.exercises:
            result.status = "graded"
            report.score(result, worth)
            continue
        jobs.append((result, extract.build(nb, answers, whole=whole)))
    return results, jobs


def grade(
    subs: list[Submission],
    course: Course,
    options: runner.RunOptions,
    *,
    jobs: int = 1,
    workdir: Optional[str] = None,
    say: Callable[[str], None] = lambda text: None,
) -> Graded:
    """Grade every submission (``jobs`` at a time); KeyboardInterrupt stops every run and propagates."""
    results, todo = prepare(subs, course, whole=options.whole_notebook)
    graded = Graded(results=results, runs=len(todo))
    work_root = Path(tempfile.mkdtemp(prefix="course-grade-", dir=workdir)).resolve()
    os.chmod(work_root, 0o700)
    say(
        f"grading {len(todo)} notebook(s) of {len({s.student for s in subs})} student(s) "
        f"with {jobs} job(s) ({len(results) - len(todo)} not runnable)"
    )

    def grade_one(result: report.Result, notebook: extract.GradedNotebook) -> runner.RunResult:
        outcome = runner.run(notebook, result.notebook, work_root, options)
        if outcome.setup_error and not outcome.cells:  # a kernel that failed to start: once more
            outcome = runner.run(notebook, result.notebook, work_root, options)
        return outcome

    done = 0
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(grade_one, r, g): (r, g) for r, g in todo}
            for future in as_completed(futures):
                result, notebook = futures[future]
                try:
                    outcome: Optional[runner.RunResult] = future.result()
                    status, exercises, notes = verdict.exercise_results(notebook, outcome, options)
                except Exception as error:  # the grader's own bug: this submission only
                    outcome = None
                    status, notes = (
                        "error",
                        [f"the grader failed on this submission: {type(error).__name__}: {error}"],
                    )
                    exercises = [
                        {"id": ex.id, "status": "error", "message": f"Not graded: {notes[0]}."}
                        for ex in notebook.exercises
                    ]
                result.status, result.exercises = status, exercises
                result.notes = notes + result.notes
                result.passed = sum(e["status"] == "passed" for e in exercises)
                result.graded_notebook = notebook.notebook
                nb = course.notebooks.get(result.notebook)
                report.score(result, nb.points() if nb else {})
                if outcome is not None:
                    result.seconds = outcome.seconds
                    result.memory_mb = round(outcome.run_peak_bytes / 2**20) or None
                    result.kernel_mb = round(outcome.kernel_peak_bytes / 2**20) or None
                    graded.run_cells[id(result)] = outcome.cells
                    if not outcome.started and not outcome.notebook_timed_out:
                        graded.grader_errors += 1
                done += 1
                say(
                    f"[{done}/{len(todo)}] {result.student} · {result.notebook}: {result.status}, "
                    f"{result.passed}/{result.total} passed"
                    + (f" ({result.seconds:.0f} s)" if result.seconds is not None else "")
                )
    except KeyboardInterrupt:
        runner.stop_all()
        raise
    finally:
        if not options.keep:
            shutil.rmtree(work_root, ignore_errors=True)
        else:
            say(f"run folders kept in {work_root}")
    return graded
