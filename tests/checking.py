"""What the check tests share: a blank answer, and "this answer fails with this hint"."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from course_utils.errors import ExerciseError


def blank(*args: Any, **kwargs: Any) -> Any:
    """An answer the student has not written yet (the placeholder of the student copy)."""
    raise NotImplementedError("Exercise: replace this line with your code")


def fails_with(check: Callable[..., Any], answer: Any, *needles: str, **kwargs: Any) -> str:
    """Run ``check(answer, **kwargs)``; it must raise ExerciseError whose hint holds every needle."""
    with pytest.raises(ExerciseError) as info:
        check(answer, **kwargs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    return message
