"""Errors that course_utils raises for mistakes a student or an instructor can fix.

Every error here carries a message that says what went wrong and what to do next, so a
notebook shows one readable line instead of a wall of traceback.
"""

from __future__ import annotations


class CourseError(Exception):
    """A problem with the course set-up that the user can fix (bad setting, wrong order)."""


class ConfigError(CourseError, ValueError):
    """A ``COURSE_*`` setting or an argument has a value the course does not accept."""


class TensorFlowStartedError(CourseError, RuntimeError):
    """A setting that TensorFlow fixes when it starts (devices, threads) was changed afterwards."""


class ReplicaCountError(TensorFlowStartedError):
    """The number of virtual CPUs cannot change once TensorFlow has initialised its devices."""


class NoTPUError(CourseError, RuntimeError):
    """A TPU was asked for and none could be found."""


class ExerciseError(AssertionError):
    """An exercise check failed; the message is a hint the student can act on.

    It is an ``AssertionError`` so that pytest, nbval and graders treat it as a failed check.
    """
