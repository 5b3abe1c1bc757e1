"""Notebooks 01 to 11: the helpers that serve one notebook each, the scaffolding around a lesson, never the lesson.

:mod:`.widgets` (01), :mod:`.support` (02), :mod:`.callbacks` (03), :mod:`.reference` (04),
:mod:`.diagnostics` (05), :mod:`.machines` (06), :mod:`.worker_runs` (07), :mod:`.coordinator` (08),
:mod:`.performance` and
:mod:`.parallelism` (09; the benchmark is ``course_tools.bench``),
:mod:`.capstone` (10), :mod:`.keras_on_jax` (11).
Importing this package imports none of them.
"""
