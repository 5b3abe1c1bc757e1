"""Graders: the machinery behind ``python -m course_tools.grade`` (and ``python -m course_utils.grade``).

The grader never trusts the notebook a student hands in. It reads every submission into memory,
finds which course notebook each one is, picks out the student's code for each exercise, and
builds a *graded notebook*: the canonical master with each exercise's solution cell replaced by
the student's code, each check cell replaced by a call that hands the student's functions to the
*judge*, and no outputs or nbval markers. That notebook runs under pytest + nbval (lax mode,
one kernel per submission) in a temporary folder of its own, inside an OS sandbox where the
machine allows one. The judge (:mod:`.judge`), a process that never runs student code, runs each
check: what the student's code does crosses from the kernel as plain data, and the judge computes
every reference and decides. Its verdicts and the cell records decide each exercise:

* ``passed``: the judge's check passed;
* ``failed``: the check raised :class:`~course_utils.ExerciseError` (its message is the hint): the
  answer is wrong, or the student's code raised while the check called it (the check turns that
  into an ``ExerciseError`` quoting the real error and the student's line);
* ``error``: the student's exercise cell raised (a syntax error, a ``NameError``...), the grader
  could not call the student's code, or the kernel died;
* ``timeout``: the exercise's cells did not finish within the cell timeout, or never ran because
  the notebook ran out of time;
* ``flagged``: a pass the audit (:mod:`.audit`) found a reason for a person to look at;
* ``missing``: no code for the exercise was found in the submission.

Modules, in the order of the pipeline: :mod:`.course` (the masters), :mod:`.submissions`
(finding and reading hand-ins), :mod:`.extract` (student code and the graded notebook),
:mod:`.runner` (one isolated run; it only runs), :mod:`.protocol` (the records the run's pytest
plugin, :mod:`.plugin`, sends back), :mod:`.judge` and :mod:`.answers` (the checks outside the
kernel, and the kernel's side of them), :mod:`.verdict` (decides the statuses), :mod:`.report`
(writes JSON, CSV, the gradebook, Markdown and feedback files, with each exercise's points);
:mod:`.engine` (those steps for a list of submissions, shared by the command, its shards and the
Gradescope autograder); :mod:`.sandbox` (read-only file system on Linux); :mod:`.shards` (``--shard
K/N`` and ``merge``); :mod:`.gradescope` (the autograder zip and its entry point) and :mod:`.cli`
(the command, which only orchestrates).
"""

from __future__ import annotations
