"""Graders: grade a class, ``python -m course_tools.grade SUBMISSION... --out DIR``.

A SUBMISSION is a notebook, a student's folder (its name is the student id) or a folder of such
folders. Each notebook is matched to its course notebook; the student's code for each exercise
runs inside the canonical notebook with the canonical checks, under pytest + nbval, isolated
from the other submissions. Writes ``DIR/report.json``, ``report.csv``, ``report.md``, one
feedback file per student (``DIR/feedback/``) and the graded notebooks with their outputs
(``DIR/graded/``), with points per exercise and a ``gradebook.csv``. ``gradescope NOTEBOOK --out
FILE`` writes a Gradescope autograder instead; ``merge DIR... --out DIR`` combines the reports of
a class graded in shards (``--shard K/N``). The grader's guide is ``docs/grading.md``; ``--help``
lists the options.
"""

from __future__ import annotations

import sys

from .grading.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
