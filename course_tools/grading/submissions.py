"""Graders and the Gradescope autograder: finding, reading and identifying the submissions.

A SUBMISSION on the command line is one of:

* a notebook file: the student id comes from the file name once the course notebook's name and
  download noise ("Copy of", "(1)") are removed (``alice_00_setup_and_hardware.ipynb`` ->
  ``alice``); when nothing is left, from the folder holding the file;
* a student folder (it holds notebooks directly): the folder name is the student id, and every
  notebook inside, at any depth, is theirs;
* a class folder (no notebook directly inside, sub-folders that hold some): each sub-folder is a
  student folder. Notebooks directly in a class folder are single-file submissions.

A student folder in which two or more loose notebooks match the same course notebook is an LMS
export (one folder, every student's file): each file then counts as its own submission.

Each file is matched to a course notebook by its name, its notebook metadata, the exercise ids in
its cell metadata, and its content (title, exercise function names, cells of the master).
Everything is read into memory here, before any student code runs.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from ..cellmeta import course_meta, exercise_id
from . import code
from .course import Course

#: Folders never searched: hidden ones, Jupyter's checkpoints, macOS archive litter.
SKIP_DIRS = {".ipynb_checkpoints", "__MACOSX", "__pycache__"}
MAX_BYTES = 200 * 1024 * 1024

_NOISE = re.compile(r"(?i)copy\s+of|\(\d+\)|-checkpoint$|\bcopy\b|\bsubmission\b|\bfinal\b")


@dataclass
class Submission:
    """One notebook file handed in by one student, read into memory."""

    student: str
    path: Path
    #: How the file was found: "file", "student-folder" or "class-folder".
    origin: str
    #: The folder a loose notebook of a student folder lies in (for the LMS-export rule).
    loose_in: Optional[Path] = None
    data: bytes = b""
    digest: str = ""
    cells: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Why the file cannot be graded ("" when it was read).
    error: str = ""
    notebook: str = ""
    notes: list[str] = field(default_factory=list)


class UsageError(Exception):
    """A command-line path that does not exist or holds no notebook."""


# --------------------------------------------------------------------------- discovery


def _skipped(path: Path, root: Path, exclude: Iterable[Path]) -> bool:
    parts = path.relative_to(root).parts[:-1]
    if any(p.startswith(".") or p in SKIP_DIRS for p in parts):
        return True
    resolved = path.resolve()
    return any(resolved == e or e in resolved.parents for e in exclude)


def _notebooks_under(folder: Path, exclude: Iterable[Path]) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*.ipynb")
        if p.is_file() and not p.name.startswith(".") and not _skipped(p, folder, exclude)
    )


def _name_pattern(name: str) -> re.Pattern[str]:
    words = [w for w in re.split(r"[\s_\-]+", name) if w]
    return re.compile(r"[\s_\-]*".join(re.escape(w) for w in words), re.IGNORECASE)


def student_from_file(path: Path, course_names: Iterable[str]) -> str:
    """The student id a lone notebook's file name carries, else its folder's name."""
    stem = path.stem
    for name in sorted(course_names, key=len, reverse=True):
        stem = _name_pattern(name).sub(" ", stem)
        bare = re.sub(r"^\d+[_\-\s]*", "", name)
        if bare:
            stem = _name_pattern(bare).sub(" ", stem)
    stem = _NOISE.sub(" ", stem)
    stem = re.sub(r"[\s_\-.]+", " ", stem).strip()
    if stem and not re.fullmatch(r"\d+", stem):
        return stem.replace(" ", "_")
    return path.resolve().parent.name or "student"


def discover(paths: list[str], course: Course, exclude: Iterable[Path] = ()) -> list[Submission]:
    """Every notebook file named by the command line, with its student id (not read yet)."""
    exclude = [Path(e).resolve() for e in exclude]
    names = list(course.notebooks)
    found: list[Submission] = []
    for arg in paths:
        path = Path(arg).expanduser()
        if path.is_file():
            found.append(Submission(student_from_file(path, names), path.resolve(), "file"))
            continue
        if not path.is_dir():
            raise UsageError(f"{arg}: no such file or folder.")
        path = path.resolve()
        loose = [p for p in sorted(path.glob("*.ipynb")) if p.is_file() and not p.name.startswith(".")]
        subfolders = [
            d
            for d in sorted(path.iterdir())
            if d.is_dir()
            and not d.name.startswith(".")
            and d.name not in SKIP_DIRS
            and d not in exclude
            and _notebooks_under(d, exclude)
        ]
        if loose or not subfolders:
            notebooks = _notebooks_under(path, exclude)
            if not notebooks:
                raise UsageError(f"{arg}: this folder holds no notebook (.ipynb).")
            for nb in notebooks:
                found.append(
                    Submission(path.name, nb, "student-folder", loose_in=path if nb.parent == path else None)
                )
        else:
            for folder in subfolders:
                for nb in _notebooks_under(folder, exclude):
                    found.append(Submission(folder.name, nb, "class-folder"))
    return found


# --------------------------------------------------------------------------- reading


def _lenient_cells(data: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Cells and notebook metadata of anything shaped like a notebook; ValueError otherwise."""
    if not isinstance(data, dict):
        raise ValueError("the file is JSON but not a notebook (no cells)")
    if "worksheets" in data and "cells" not in data:  # nbformat 3
        import nbformat

        nb = nbformat.reads(json.dumps(data), as_version=4)
        data = json.loads(nbformat.writes(nb))
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise ValueError("the file is JSON but not a notebook (no list of cells)")
    out = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type") if isinstance(cell.get("cell_type"), str) else "code"
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        out.append({"cell_type": kind, "source": code.cell_source(cell), "metadata": metadata})
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    return out, metadata


def read(sub: Submission) -> None:
    """Read and parse one file into ``sub`` (setting ``sub.error`` when it cannot be graded)."""
    try:
        size = sub.path.stat().st_size
        if size > MAX_BYTES:
            sub.error = f"the file is {size / 1e6:.0f} MB, more than a notebook should be"
            return
        sub.data = sub.path.read_bytes()
    except OSError as error:
        sub.error = f"the file could not be read ({error.strerror or error})"
        return
    sub.digest = hashlib.sha256(sub.data).hexdigest()
    if not sub.data.strip():
        sub.error = "the file is empty"
        return
    try:
        data = json.loads(sub.data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        sub.error = f"the file is not a notebook: it is not valid JSON ({str(error).splitlines()[0][:120]})"
        return
    try:
        sub.cells, sub.metadata = _lenient_cells(data)
    except Exception as error:
        sub.error = f"the file is not a notebook: {error}"
        return
    if not any(c["cell_type"] == "code" for c in sub.cells):
        sub.error = "the notebook has no code cell"


# --------------------------------------------------------------------------- matching


def match_scores(sub: Submission, course: Course) -> dict[str, int]:
    """How strongly the submission looks like each course notebook."""
    filename = re.sub(r"[^a-z0-9]+", "_", sub.path.stem.lower())
    meta_name = str(course_meta(sub).get("notebook", ""))
    ids = {exercise_id(c) for c in sub.cells} - {""}
    texts = {code.normalise(c["source"]) for c in sub.cells} - {""}
    defined: set[str] = set()
    headings = set()
    for cell in sub.cells:
        if cell["cell_type"] == "code":
            defined |= code.defined_names(cell["source"])
        elif cell["cell_type"] == "markdown":
            headings |= {h.strip() for h in re.findall(r"^#\s+(.+)$", cell["source"], re.MULTILINE)}
    scores = {}
    for name, nb in course.notebooks.items():
        score = 0
        key = re.sub(r"[^a-z0-9]+", "_", name.lower())
        bare = re.sub(r"^\d+_", "", key)
        if key in filename:
            score += 100
        elif bare and bare in filename:
            score += 60
        if meta_name == name:
            score += 100
        score += 20 * len(ids & set(nb.exercise_ids()))
        if nb.title and nb.title in headings:
            score += 50
        score += 15 * sum(1 for ex in nb.exercises for n in ex.names if n in defined)
        score += min(30, len(texts & nb.cell_texts))
        scores[name] = score
    return scores


def match(sub: Submission, course: Course, forced: Optional[str] = None) -> None:
    """Set ``sub.notebook`` (or ``sub.error`` when no course notebook fits)."""
    if forced:
        sub.notebook = forced
        return
    scores = (
        match_scores(sub, course)
        if not sub.error
        else {
            name: (
                100
                if re.sub(r"[^a-z0-9]+", "_", name.lower())
                in re.sub(r"[^a-z0-9]+", "_", sub.path.stem.lower())
                else 0
            )
            for name in course.notebooks
        }
    )
    best = max(scores.values(), default=0)
    winners = [name for name, score in scores.items() if score == best]
    if best >= 15 and len(winners) == 1:
        sub.notebook = winners[0]
    elif not sub.error:
        sub.error = (
            "could not tell which course notebook this is"
            + (f" (equally close to {', '.join(winners)})" if best >= 15 else "")
            + "; rename it after the course notebook or use --notebook"
        )


def load(
    paths: list[str], course: Course, exclude: Iterable[Path] = (), forced: Optional[str] = None
) -> list[Submission]:
    """Discover, read and match every submission; give each (student, notebook) a unique id."""
    subs = discover(paths, course, exclude)
    seen_paths: set[Path] = set()
    unique = []
    for sub in subs:
        if sub.path not in seen_paths:
            seen_paths.add(sub.path)
            unique.append(sub)
    for sub in unique:
        read(sub)
        match(sub, course, forced)
    # An LMS export: one folder with every student's copy of the same notebook.
    groups: dict[tuple[Path, str], list[Submission]] = {}
    for sub in unique:
        if sub.loose_in is not None and sub.notebook:
            groups.setdefault((sub.loose_in, sub.notebook), []).append(sub)
    for (folder, _), members in groups.items():
        if len(members) > 1:
            for sub in members:
                sub.student = student_from_file(sub.path, course.notebooks)
                sub.notes.append(
                    f"{folder.name}/ holds several copies of {sub.notebook}: "
                    "each file is graded as its own submission"
                )
    taken: dict[tuple[str, str], int] = {}
    for sub in unique:
        key = (sub.student, sub.notebook or sub.path.name)
        taken[key] = taken.get(key, 0) + 1
        if taken[key] > 1:
            sub.notes.append(
                f"{sub.student} handed in more than one {key[1]}; this one is graded as "
                f"{sub.student}#{taken[key]}"
            )
            sub.student = f"{sub.student}#{taken[key]}"
    return unique
