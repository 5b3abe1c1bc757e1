"""course_tools.nbval_summary: the line per notebook of `make test-gpu`, read from nbval's JUnit report."""

from __future__ import annotations

from course_tools import nbval_summary

# What `pytest --nbval --junitxml=...` writes (nbval's colours escaped as #x1B, as pytest writes them).
REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 0" time="1.8"/>
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 16" time="0.1"><failure message="#x1B[91mNotebook cell execution failed#x1B[0m&#10;#x1B[94mCell 16: Cell outputs differ&#10;&#10;Input:&#10;#x1B[0mprint(3)&#10;&#10;#x1B[94mTraceback:#x1B[0m&#10;#x1B[94m mismatch 'stdout'#x1B[91m&#10;">x</failure></testcase>
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 48" time="0.3"><failure message="#x1B[91mNotebook cell execution failed#x1B[0m&#10;#x1B[94mCell 48: Cell execution caused an exception&#10;&#10;Input:&#10;#x1B[0massert x&#10;&#10;#x1B[31mAssertionError#x1B[39m: validation accuracy should pass 80%&#10;">x</failure></testcase>
<testcase classname="solutions.04_custom_training_loops.ipynb" name="Cell 3" time="0.3"/>
<testcase classname="tests.test_config" name="test_read" time="0.0"/>
</testsuite></testsuites>
"""


def test_one_line_per_notebook_naming_the_cells_that_differ(tmp_path, capsys) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    notebooks = nbval_summary.summarize(report)
    assert [n.line() for n in notebooks] == [
        "03_keras_model_fit: 2 of 3 cells differ: cell 16 (outputs differ: stdout); "
        "cell 48 (raised AssertionError: validation accuracy should pass 80%)",
        "04_custom_training_loops: 1 cell, all as stored",
    ]
    assert nbval_summary.main([str(report)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "2 notebooks, 2 cells differ"


def test_a_run_that_matches_exits_0(tmp_path, capsys) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT.split('<testcase classname="solutions.03')[0] + "</testsuite></testsuites>")
    assert nbval_summary.main([str(report)]) == 0
    assert capsys.readouterr().out.strip() == "0 notebooks, 0 cells differ"


def test_without_a_gpu_it_refuses_in_one_line(capsys) -> None:
    """This machine has no GPU (the unit tests run on CPUs): make test-gpu stops at once."""
    assert nbval_summary.main(["--require-gpu"]) == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and message.startswith("make test-gpu needs a GPU")
