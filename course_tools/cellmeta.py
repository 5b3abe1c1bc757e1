"""The one reader of ``metadata.course``, the course's own metadata on a cell or a notebook.

A master's cells say what they are under ``metadata.course`` (``role``, ``exercise``, ``points``;
see :mod:`course_tools.authoring`), and a notebook says its ``notebook`` name and ``topic`` there.
Authoring, presenting and the grader all read it through :func:`course_meta`, which takes a plain
dict (a submission read as JSON), an nbformat node, or anything with a ``metadata`` attribute, and
gives ``{}`` whatever is missing or is not a dict (a student's notebook may hold anything).
Importing this module starts nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class AuthoringError(Exception):
    """A master notebook breaks one of the conventions of :mod:`course_tools.authoring`."""


#: What an exercise is worth when its solution cell does not say (``metadata.course.points``).
DEFAULT_POINTS = 1


def course_meta(node: Any) -> dict[str, Any]:
    """``metadata.course`` of a cell or a notebook; ``{}`` when it is missing or not a dict."""
    metadata = node.get("metadata") if isinstance(node, Mapping) else getattr(node, "metadata", None)
    meta = metadata.get("course") if isinstance(metadata, Mapping) else None
    return meta if isinstance(meta, dict) else {}


def role(cell: Any) -> str:
    """``metadata.course.role`` of a cell (``solution``, ``check``, ``setup``, ``badges``...), or ''."""
    return str(course_meta(cell).get("role", ""))


def exercise_id(cell: Any) -> str:
    """``metadata.course.exercise`` of a cell (the exercise it belongs to), or ''."""
    return str(course_meta(cell).get("exercise", ""))


def points(cell: Any) -> float:
    """``metadata.course.points`` of a solution cell (default 1): a positive number."""
    value = course_meta(cell).get("points", DEFAULT_POINTS)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise AuthoringError(
            f"exercise {exercise_id(cell)!r}: points must be a positive number, not {value!r}."
        )
    return value
