"""Every notebook: its exercise checks print one line when right, a hint the student can act on when wrong.

A check function takes what the student wrote (usually a function) and compares it with a
reference. Wrap its body in :func:`exercise` so that any mistake, including an unfinished
placeholder or an exception inside the student's code, becomes an :class:`ExerciseError` whose
message is a hint, never a bare traceback::

    def check_shard_batch(shard_batch):
        with exercise("shard_batch"):
            shards = shard_batch(np.arange(8), 2)
            expect(len(shards) == 2, "Return one shard per replica: a list of 2 arrays here.")
        passed("shard_batch", "4 examples per replica, in order.")
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from .errors import ExerciseError, describe_raised

__all__ = ["ExerciseError", "exercise", "expect", "expect_close", "passed"]


def passed(exercise_id: str, message: str = "") -> None:
    """Print the one line that says an exercise is right."""
    print(f"[pass] {exercise_id}: {message}" if message else f"[pass] {exercise_id}")


def expect(condition: Any, hint: str) -> None:
    """Raise :class:`ExerciseError` with ``hint`` unless ``condition`` is true."""
    if not condition:
        raise ExerciseError(hint)


def expect_close(
    actual: Any,
    expected: Any,
    hint: str,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Raise with ``hint`` unless ``actual`` matches ``expected`` elementwise; never with the answer.

    For arrays the hint adds the ratio ``actual / expected``, which often names the bug (2.00x on
    two replicas: an average too few); for one number it adds only the student's own (a ratio
    would give the answer away).
    """
    a = np.asarray(_numpy(actual), dtype=np.float64)
    e = np.asarray(_numpy(expected), dtype=np.float64)
    if a.shape != e.shape:
        raise ExerciseError(f"{hint} (expected shape {e.shape}, got {a.shape})")
    if np.allclose(a, e, rtol=rtol, atol=atol):
        return
    detail = f"got {_short(a)}"
    denominator = np.linalg.norm(e)
    if e.size > 1 and denominator > 0 and np.linalg.norm(a) > 0:
        detail = f"yours is {float(np.vdot(a, e) / denominator**2):.2f}x the reference"
    raise ExerciseError(f"{hint} ({detail})")


def _numpy(value: Any) -> Any:
    return value.numpy() if hasattr(value, "numpy") else value


def _short(array: np.ndarray) -> str:
    if array.size == 1:
        return f"{float(array.reshape(-1)[0]):.6g}"
    flat = ", ".join(f"{v:.4g}" for v in array.reshape(-1)[:4])
    return f"[{flat}{', ...' if array.size > 4 else ''}] (shape {array.shape})"


@contextlib.contextmanager
def exercise(exercise_id: str) -> Iterator[None]:
    """Turn every failure inside the block into an :class:`ExerciseError` naming the exercise."""
    try:
        yield
    except ExerciseError as error:
        raise ExerciseError(f"Exercise {exercise_id}: {error}") from None
    except NotImplementedError:
        raise ExerciseError(
            f"Exercise {exercise_id} is not done yet: replace the `raise NotImplementedError` "
            "line in its cell with your code, run that cell, then run this check again."
        ) from None
    except Exception as error:  # the student's code raised: say what and where, briefly
        raise ExerciseError(f"Exercise {exercise_id}: your code raised {describe_raised(error)}") from None
