"""Graders (inside the engine): the student's code for each exercise, and the graded notebook built from it.

How an exercise's answer is found in a submission, in order:

1. for each name the master's solution cell defines (``def global_batch``), the *last* code cell
   of the submission that defines it at top level: the definition in force after running the
   notebook from top to bottom, wherever the student moved it;
2. else the last cell whose metadata says ``course: {role: solution, exercise: ID}``;
3. else the cell holding the exercise's placeholder (``Exercise ID: replace this line``).

Cells the student added that define helpers the answer uses (and the course does not define) are
included before it. Nothing found means the exercise is ``missing``.

The graded notebook is the master with every output removed and each solution cell replaced by
the student's code (nbval markers removed, shell lines commented out); every other cell, checks
included, is the course's own. It ends at the last check, and of the course's code cells before
it, only the checks' context runs (:mod:`.context`: the set-up and the cells whose names or
settings a check or an answer reads); ``whole=True`` keeps every one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from ..cellmeta import exercise_id, role
from . import audit, code, context, judge
from .course import CourseNotebook
from .submissions import Submission


@dataclass
class Answer:
    """What the student wrote for one exercise."""

    exercise: str
    source: Optional[str]
    cells: list[int] = field(default_factory=list)
    how: str = ""


@dataclass(frozen=True)
class ExerciseCells:
    """Where an exercise sits in the graded notebook, counted in code cells (as nbval does)."""

    id: str
    solution: int
    check: int


@dataclass
class GradedNotebook:
    notebook: Any
    exercises: list[ExerciseCells]
    answers: dict[str, Answer]
    #: Code-cell numbers of the student's cells (every solution cell).
    student_cells: frozenset[int]
    #: The names each exercise's answer must define.
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: What the audit found in each answer (:mod:`.audit`): notes, and a flag on some passes.
    findings: dict[str, list[audit.Finding]] = field(default_factory=dict)
    #: The master's code cells (0-based among code cells) before the last check that were left out:
    #: nothing a check or an answer reads comes from them.
    left_out: tuple[int, ...] = ()
    #: Every exercise, which the judge decides outside the kernel (:mod:`.judge`), with the
    #: answer's source under every name the judge reads as a literal.
    judged: dict[str, dict[str, str]] = field(default_factory=dict)


def find_answers(sub: Submission, nb: CourseNotebook) -> dict[str, Answer]:
    """The student's code for every exercise of ``nb`` (``source=None`` when missing)."""
    code_cells = [(i, c) for i, c in enumerate(sub.cells) if c["cell_type"] == "code"]
    defined = {i: code.defined_names(c["source"]) for i, c in code_cells}
    exercise_names = {n for ex in nb.exercises for n in ex.names}
    answers: dict[str, Answer] = {}
    for ex in nb.exercises:
        chosen: set[int] = set()
        for name in ex.names:
            holders = [i for i, _ in code_cells if name in defined[i]]
            # A name two exercises define (07's PREDICTION): the cell tagged for this one, else
            # the last not tagged for another.
            here = [i for i in holders if exercise_id(sub.cells[i]) == ex.id]
            other = {i for i in holders if exercise_id(sub.cells[i]) not in ("", ex.id)}
            holders = here or [i for i in holders if i not in other] or holders
            if holders:
                chosen.add(holders[-1])
        how = f"defines {', '.join(ex.names)}" if chosen else ""
        if not chosen:
            tagged = [i for i, c in code_cells if role(c) == "solution" and exercise_id(c) == ex.id]
            if tagged:
                chosen, how = {tagged[-1]}, "cell metadata"
        if not chosen:
            marked = [i for i, c in code_cells if f"Exercise {ex.id}:" in c["source"]]
            if marked:
                chosen, how = {marked[-1]}, "placeholder text"
        if not chosen:
            answers[ex.id] = Answer(ex.id, None, [], "nothing found")
            continue
        # Helpers the answer calls, defined in cells the student added.
        needed = set().union(*(code.used_names(sub.cells[i]["source"]) for i in chosen))
        provided = set().union(*(defined[i] for i in chosen)) | set(nb.course_names) | exercise_names
        helpers: set[int] = set()
        for _ in range(5):
            missing = needed - provided
            if not missing:
                break
            added = False
            for i, cell in reversed(code_cells):
                if i in chosen or i in helpers or code.normalise(cell["source"]) in nb.cell_texts:
                    continue
                if code.used_names(cell["source"]) & set(ex.names):
                    continue  # it calls the answer: it cannot run before it
                own = code.defined_names(cell["source"], imports=True)
                if own & missing:
                    helpers.add(i)
                    provided |= own
                    needed |= code.used_names(cell["source"])
                    missing -= own
                    added = True
            if not added:
                break
        cells = sorted(helpers) + sorted(chosen)
        source = "\n\n".join(clean(sub.cells[i]["source"]) for i in cells)
        answers[ex.id] = Answer(ex.id, source, cells, how + (" (+ helper cells)" if helpers else ""))
    return answers


def clean(source: str) -> str:
    """A student's cell as the grader runs it: no nbval markers, no shell commands."""
    return code.neutralise_shell(code.strip_markers(source)).strip("\n")


#: The tag of a master's code cell that a grading run never needs (it only shows something).
SKIP_TAG = "grading-skip"


def build(nb: CourseNotebook, answers: dict[str, Answer], *, whole: bool = False) -> GradedNotebook:
    """The canonical master with the student's code in each solution cell, without outputs,
    cut after the last check and (unless ``whole``) to the checks' context. Each check cell hands
    the judge the student's functions instead of running the check (:func:`.judge.serve_source`);
    an exercise the judge has no entry for is the course's bug (:class:`ValueError`)."""
    graded = copy.deepcopy(nb.master)
    for cell in graded.cells:
        cell.pop("attachments", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in {"course", "tags"}}
    for ex in nb.exercises:
        solution = graded.cells[ex.solution_cell]
        answer = answers.get(ex.id)
        solution.source = answer.source if answer and answer.source is not None else ex.placeholder
        solution.metadata = {"course": {"role": "solution", "exercise": ex.id}}
    judged: dict[str, dict[str, str]] = {}
    for ex in nb.exercises:
        if ex.id not in judge.JUDGED:
            raise ValueError(f"exercise {ex.id} of {nb.name} has no entry in the judge's JUDGED")
        check = graded.cells[ex.check_cell]
        check.source = judge.serve_source(ex.id, check.source)
        answer = answers.get(ex.id)
        source = answer.source if answer and answer.source is not None else ""
        judged[ex.id] = {name: source for name in judge.JUDGED[ex.id].literals}
    # Nothing after the last check can be the context of a check: the grading run stops there
    # (summaries, the runtime doctor, demonstrations that only show things).
    last_check = max((ex.check_cell for ex in nb.exercises), default=len(graded.cells) - 1)
    cells = graded.cells[: last_check + 1]
    code_cells = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]
    left_out: list[int] = []
    if not whole:
        exercise_cells = {ex.solution_cell for ex in nb.exercises} | {ex.check_cell for ex in nb.exercises}
        must = [k for k, i in enumerate(code_cells) if i in exercise_cells or role(cells[i]) == "setup"]
        # A cell the course tagged `grading-skip` only shows something (07's cluster runs, 03's
        # training runs): what it makes is read by no answer and no check's harness.
        skip = [k for k, i in enumerate(code_cells) if SKIP_TAG in cells[i].metadata.get("tags", [])]
        kept = context.context_cells([cells[i].source for i in code_cells], must, skip=skip).kept
        left_out = [k for k in range(len(code_cells)) if k not in kept]
        dropped = {code_cells[k] for k in left_out}
        cells = [cell for i, cell in enumerate(cells) if i not in dropped]
    index_of = {id(cell): i for i, cell in enumerate(graded.cells)}
    graded.cells = cells
    code_number = {index_of[id(cell)]: n for n, cell in enumerate(c for c in cells if c.cell_type == "code")}
    student_cells = frozenset(code_number[ex.solution_cell] for ex in nb.exercises)
    where = [
        ExerciseCells(ex.id, code_number[ex.solution_cell], code_number[ex.check_cell]) for ex in nb.exercises
    ]
    keep = {"kernelspec"}
    graded.metadata = {k: v for k, v in graded.metadata.items() if k in keep}
    modules = audit.module_names(c.source for c in nb.master.cells[: last_check + 1] if c.cell_type == "code")
    findings = {
        ident: found
        for ident, answer in answers.items()
        if answer.source is not None and (found := audit.audit(ident, answer.source, modules))
    }
    return GradedNotebook(
        graded,
        where,
        answers,
        student_cells,
        {ex.id: ex.names for ex in nb.exercises},
        findings,
        tuple(left_out),
        judged,
    )


def describe(answers: dict[str, Answer], sub: Submission) -> list[str]:
    """Where each answer came from, for the answers a grader may want to double-check: found
    somewhere other than the cell tagged for it (moved, re-tagged, metadata lost), found by a
    fallback, with helper cells, or not found at all."""
    lines = []
    for ident, answer in answers.items():
        if answer.source is None:
            lines.append(f"{ident}: no code found")
            continue
        tagged = all(
            role(sub.cells[i]) == "solution" and exercise_id(sub.cells[i]) == ident for i in answer.cells
        )
        if tagged and answer.how.startswith("defines") and "helper" not in answer.how:
            continue
        where = ", ".join(f"cell {i + 1}" for i in answer.cells)
        reason = "" if tagged else "; its cell metadata does not mark it as this exercise's answer"
        lines.append(f"{ident}: taken from {where} ({answer.how}{reason})")
    return lines
