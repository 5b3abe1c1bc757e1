"""Graders and the Gradescope autograder: the course graded against, the masters in ``solutions/``, read once.

Everything is read into memory before any student code runs, so a submission that deletes files
cannot change what the next submission is graded against.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import authoring
from . import code


class CourseNotFound(Exception):
    """No course folder (with ``solutions/``) could be found."""


@dataclass(frozen=True)
class CourseExercise:
    """One exercise of a master."""

    id: str
    #: Top-level names the master's solution cell defines (``global_batch``): how the student's
    #: answer is recognised when cell metadata was lost.
    names: tuple[str, ...]
    solution_cell: int
    check_cell: int
    #: The student version of the solution cell (the placeholder), used when nothing was handed in.
    placeholder: str
    #: What the exercise is worth (``metadata.course.points`` of the master's solution cell, default 1).
    points: float = 1


@dataclass
class CourseNotebook:
    """One master notebook and what the grader needs to know about it."""

    name: str
    master: Any
    exercises: list[CourseExercise]
    title: str
    #: Normalised sources of every master cell (to tell the course's cells from the student's).
    cell_texts: frozenset[str]
    #: Names defined anywhere in the master (globals the course itself provides).
    course_names: frozenset[str]

    def exercise_ids(self) -> list[str]:
        return [ex.id for ex in self.exercises]

    def points(self) -> dict[str, float]:
        """Each exercise's points, in the notebook's order."""
        return {ex.id: ex.points for ex in self.exercises}

    def max_points(self) -> float:
        return sum(ex.points for ex in self.exercises)


@dataclass
class Course:
    root: Path
    notebooks: dict[str, CourseNotebook]
    sanitize: str
    problems: list[str] = field(default_factory=list)


def _title(nb: Any) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+)$", code.cell_source(cell), re.MULTILINE)
            if match:
                return match.group(1).strip()
    return ""


def load_notebook(path: Path) -> CourseNotebook:
    import nbformat

    master = nbformat.read(path, as_version=4)
    found = authoring.exercises(master)
    exercises = []
    for ex in found:
        source = code.cell_source(master.cells[ex.solution_cell])
        exercises.append(
            CourseExercise(
                id=ex.id,
                names=tuple(sorted(code.defined_names(source))),
                solution_cell=ex.solution_cell,
                check_cell=ex.check_cell if ex.check_cell is not None else -1,
                placeholder=authoring.blank_solution(source, ex.id),
                points=ex.points,
            )
        )
    texts = frozenset(code.normalise(code.cell_source(c)) for c in master.cells)
    names: set[str] = set()
    for cell in master.cells:
        if cell.cell_type == "code":
            names |= code.defined_names(code.cell_source(cell), imports=True)
    return CourseNotebook(
        name=path.stem,
        master=copy.deepcopy(master),
        exercises=exercises,
        title=_title(master),
        cell_texts=texts - {""},
        course_names=frozenset(names),
    )


def find_course_root(explicit: Optional[str]) -> Path:
    """``--course`` if given; else the checkout the installed package lives in; else the cwd's."""
    if explicit:
        root = Path(explicit).expanduser().resolve()
        if not (root / "solutions").is_dir():
            raise CourseNotFound(
                f"{explicit}: no solutions/ folder there (--course must be the course folder)."
            )
        return root
    package_parent = Path(__file__).resolve().parents[2]
    if (package_parent / "solutions").is_dir():
        return package_parent
    try:
        return authoring.find_root()
    except authoring.AuthoringError:
        raise CourseNotFound(
            "Cannot find the course (a folder with solutions/): run from inside it or pass --course DIR."
        ) from None


def load_course(root: Path) -> Course:
    """Read every master (skipping, with a note, any that breaks the authoring conventions)."""
    notebooks: dict[str, CourseNotebook] = {}
    problems: list[str] = []
    for path in sorted((root / "solutions").glob("*.ipynb")):
        try:
            notebooks[path.stem] = load_notebook(path)
        except Exception as error:  # a master being written right now, or a broken one
            problems.append(f"solutions/{path.name} skipped: {type(error).__name__}: {error}")
    if not notebooks:
        raise CourseNotFound(f"{root / 'solutions'} holds no usable master notebook.")
    sanitize_path = root / "tests" / "nbval_sanitize.cfg"
    sanitize = sanitize_path.read_text() if sanitize_path.is_file() else ""
    return Course(root=root, notebooks=notebooks, sanitize=sanitize, problems=problems)
