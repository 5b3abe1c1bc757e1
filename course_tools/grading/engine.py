"""Graders, their shards and the Gradescope autograder: the grading engine they share.

From submissions already read into memory to one scored :class:`~.records.Result` each: build the
graded notebooks (:mod:`.extract`), run them in parallel, each in its own folder and process
(:mod:`.runner`), decide the statuses (:mod:`.verdict`) and build the result, with its points, in
one place (:func:`result_of`). Nothing here writes a report or parses a command line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from . import extract, runner, verdict
from .course import Course, CourseNotebook
from .records import Result, Verdict, number
from .submissions import Submission


@dataclass(frozen=True)
class Graded:
    """What grading a list of submissions gave."""

    #: One per submission, in the order given.
    results: list[Result]
    #: Runs that did not even start (the grader itself is not working here).
    grader_errors: int = 0
    #: How many notebooks were run.
    runs: int = 0


@dataclass(frozen=True)
class Job:
    """A submission to run: its course notebook, its graded notebook, and what reading it noted."""

    sub: Submission
    nb: CourseNotebook
    graded: extract.GradedNotebook
    notes: tuple[str, ...]


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


def result_of(
    sub: Submission,
    nb: Optional[CourseNotebook],
    decided: Verdict,
    notes: Sequence[str] = (),
    *,
    run: Optional[runner.RunResult] = None,
    graded: Optional[extract.GradedNotebook] = None,
) -> Result:
    """The one place a submission's :class:`Result` is built: the verdict's statuses and notes
    (then ``notes``, what reading the submission said), the points, and what the run measured."""
    worth = nb.points() if nb else {}
    graded_notebook = None
    if graded is not None:
        graded_notebook = runner.with_outputs(graded.notebook, run.cells if run else {})
    return Result(
        student=sub.student,
        notebook=sub.notebook or sub.path.name,
        status=decided.status,
        exercises=tuple(e.scored(worth) for e in decided.exercises),
        total=len(nb.exercises) if nb else 0,
        max_points=number(sum(worth.values())),
        source=_display(sub.path),
        notes=decided.notes + tuple(notes),
        seconds=run.seconds if run else None,
        graded_notebook=graded_notebook,
        memory_mb=(round(run.run_peak_bytes / 2**20) or None) if run else None,
        kernel_mb=(round(run.kernel_peak_bytes / 2**20) or None) if run else None,
    )


def prepare(sub: Submission, course: Course, *, whole: bool = False) -> Union[Result, Job]:
    """The result of a submission that needs no run, or the job that runs it (no student code runs)."""
    nb = course.notebooks.get(sub.notebook)
    if sub.error or nb is None:
        ids = [ex.id for ex in nb.exercises] if nb else []
        why = sub.error or "the notebook could not be read"
        return result_of(
            sub, nb, verdict.not_runnable(sub.error or "no matching course notebook", ids, why), sub.notes
        )
    answers = extract.find_answers(sub, nb)
    notes = (*sub.notes, *(f"answer to {line}" for line in extract.describe(answers, sub)))
    if not nb.exercises:
        return result_of(sub, nb, verdict.NOTHING_TO_RUN, notes)
    return Job(sub, nb, extract.build(nb, answers, whole=whole), notes)


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
    prepared = [prepare(sub, course, whole=options.whole_notebook) for sub in subs]
    results: list[Optional[Result]] = [p if isinstance(p, Result) else None for p in prepared]
    todo = [(i, p) for i, p in enumerate(prepared) if isinstance(p, Job)]
    work_root = Path(tempfile.mkdtemp(prefix="course-grade-", dir=workdir)).resolve()
    os.chmod(work_root, 0o700)
    say(
        f"grading {len(todo)} notebook(s) of {len({s.student for s in subs})} student(s) "
        f"with {jobs} job(s) ({len(results) - len(todo)} not runnable)"
    )

    def grade_one(job: Job) -> runner.RunResult:
        name = job.sub.notebook
        outcome = runner.run(job.graded, name, work_root, options)
        if outcome.setup_error and not outcome.cells:  # a kernel that failed to start: once more
            outcome = runner.run(job.graded, name, work_root, options)
        return outcome

    done = grader_errors = 0
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(grade_one, job): (i, job) for i, job in todo}
            for future in as_completed(futures):
                i, job = futures[future]
                ids = [ex.id for ex in job.graded.exercises]
                outcome: Optional[runner.RunResult] = None
                try:
                    outcome = future.result()
                    decided = verdict.of_run(job.graded, outcome, options)
                except Exception as error:  # the grader's own bug: this submission only
                    outcome, decided = None, verdict.grader_failed(error, ids)
                result = result_of(job.sub, job.nb, decided, job.notes, run=outcome, graded=job.graded)
                results[i] = result
                if outcome is not None and not outcome.started and not outcome.notebook_timed_out:
                    grader_errors += 1
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
        runner.close_judges()
        if not options.keep:
            shutil.rmtree(work_root, ignore_errors=True)
        else:
            say(f"run folders kept in {work_root}")
    return Graded(results=[r for r in results if r is not None], grader_errors=grader_errors, runs=len(todo))
