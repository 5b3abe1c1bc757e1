"""Graders (every grading module): the statuses, and the typed records a grade is made of.

:class:`Status` is the one list of statuses (an exercise's and a notebook's); it is a ``str``, so
``Status.PASSED == "passed"`` and report.json, report.csv and results.json spell it as before.
:class:`ExerciseResult` (one exercise), :class:`Verdict` (what :mod:`.verdict` decided for a
notebook) and :class:`Result` (one submission's grade, as report.json holds it) are frozen: the
engine builds each :class:`Result` in one place (:func:`.engine.result_of`), and
:meth:`Result.from_json` reads one back for ``merge``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional


class Status(str, enum.Enum):
    """A status in the report (docs/grading.md says what each means)."""

    # An exercise's.
    PASSED = "passed"  # the judge's check passed: the exercise earns its points
    FAILED = "failed"  # the check raised ExerciseError: the answer is wrong (its message is the hint)
    ERROR = "error"  # the answer's cell raised, the grader could not call it, the kernel died
    TIMEOUT = "timeout"  # did not finish in time, or not reached before the notebook's time ran out
    MISSING = "missing"  # no code for the exercise was found
    FLAGGED = "flagged"  # a pass the audit asks a person to look at: no points until then
    # A notebook's (and ERROR and TIMEOUT above).
    GRADED = "graded"  # it ran; each exercise has its own status
    INVALID = "invalid"  # unreadable, or no course notebook matches it

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: An exercise's statuses, and a notebook's (in the order the report counts them).
EXERCISE_STATUSES = (
    Status.PASSED,
    Status.FAILED,
    Status.ERROR,
    Status.TIMEOUT,
    Status.MISSING,
    Status.FLAGGED,
)
NOTEBOOK_STATUSES = (Status.GRADED, Status.INVALID, Status.TIMEOUT, Status.ERROR)


def number(value: float) -> float:
    """Points as JSON and CSV show them: 2, not 2.0; 1.5 stays 1.5."""
    value = round(float(value), 4)
    return int(value) if value.is_integer() else value


@dataclass(frozen=True)
class ExerciseResult:
    """One exercise of one submission: its status, the hint for the student, and its points."""

    id: str
    status: Status
    message: str
    points: float = 0
    max_points: float = 0

    def scored(self, worth: Mapping[str, float]) -> "ExerciseResult":
        """This result with its points: all of them (``worth[id]``) when it passed, else 0."""
        most = number(worth.get(self.id, 0))
        return replace(self, max_points=most, points=most if self.status is Status.PASSED else 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "message": self.message,
            "points": number(self.points),
            "max_points": number(self.max_points),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ExerciseResult":
        return cls(
            id=str(data["id"]),
            status=Status(data["status"]),
            message=str(data.get("message", "")),
            points=data.get("points", 0),
            max_points=data.get("max_points", 0),
        )


@dataclass(frozen=True)
class Verdict:
    """What :mod:`.verdict` decided for one submission: the notebook's status, each exercise's
    (without points yet) and notes for the grader, most important first."""

    status: Status
    exercises: tuple[ExerciseResult, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """One submission's grade (:meth:`as_json` is its entry in report.json)."""

    student: str
    notebook: str
    status: Status
    #: With their points (:meth:`ExerciseResult.scored`).
    exercises: tuple[ExerciseResult, ...]
    #: How many exercises the course notebook has.
    total: int
    max_points: float = 0
    source: str = ""
    notes: tuple[str, ...] = ()
    seconds: Optional[float] = None
    #: The graded notebook with the outputs of its run (None when nothing ran).
    graded_notebook: Any = None
    #: Where the graded notebook was written, relative to the report folder ("" when none was).
    graded_path: str = ""
    #: Peak resident memory of the grading run (pytest, nbval and the kernel) and of the kernel
    #: alone, in MB, sampled; None when it did not run.
    memory_mb: Optional[float] = None
    kernel_mb: Optional[float] = None

    @property
    def passed(self) -> int:
        return sum(e.status is Status.PASSED for e in self.exercises)

    @property
    def points(self) -> float:
        return number(sum(e.points for e in self.exercises))

    def as_json(self) -> dict[str, Any]:
        return {
            "student": self.student,
            "notebook": self.notebook,
            "status": self.status,
            "exercises": [e.as_json() for e in self.exercises],
            "passed": self.passed,
            "total": self.total,
            "points": number(self.points),
            "max_points": number(self.max_points),
            "source": self.source,
            "notes": list(self.notes),
            "seconds": None if self.seconds is None else round(self.seconds, 1),
            "graded": self.graded_path or None,
            "memory_mb": self.memory_mb,
            "kernel_mb": self.kernel_mb,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Result":
        """A result read back from report.json (``merge``); its graded notebook is not read."""
        return cls(
            student=str(data["student"]),
            notebook=str(data["notebook"]),
            status=Status(data["status"]),
            exercises=tuple(ExerciseResult.from_json(e) for e in data.get("exercises", [])),
            total=int(data.get("total", 0)),
            max_points=data.get("max_points", 0),
            source=str(data.get("source", "")),
            notes=tuple(str(n) for n in data.get("notes", [])),
            seconds=data.get("seconds"),
            graded_path=str(data.get("graded") or ""),
            memory_mb=data.get("memory_mb"),
            kernel_mb=data.get("kernel_mb"),
        )
