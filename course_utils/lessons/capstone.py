"""Notebook 10 (capstone): the same-update check under the name the notebook imports.

The check itself is :func:`course_utils.compare.same_update` (``docs/capstone.md`` is its manual);
the capstone's script, data and graded checks are in :mod:`course_utils.exercises.capstone`.
"""

from __future__ import annotations

from ..compare import SameUpdate, check_same_update, same_update

__all__ = ["SameUpdate", "check_same_update", "same_update"]
