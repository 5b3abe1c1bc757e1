"""``python -m course_utils.grade``: kept so that graders' scripts keep working; the grader is ``course_tools.grade``.

This file is the one place where ``course_utils`` names the tools package, and only as a name to
run: importing it runs nothing, and no other module of ``course_utils`` reaches the tools
(``tests/test_architecture.py`` holds both rules).
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("course_tools.grade", run_name="__main__", alter_sys=True)
