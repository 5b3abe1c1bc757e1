"""course_tools.nbval_summary: the line per notebook of `make test-gpu`, read from nbval's JUnit report."""

from __future__ import annotations

import json

from course_tools import nbval_summary

# What `pytest --nbval --junitxml=...` writes (nbval's colours escaped as #x1B, as pytest writes them).
# nbval names a cell "Cell N", counting code cells only.
REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 0" time="1.8"/>
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 16" time="0.1"><failure message="#x1B[91mNotebook cell execution failed#x1B[0m&#10;#x1B[94mCell 16: Cell outputs differ&#10;&#10;Input:&#10;#x1B[0mprint(3)&#10;&#10;#x1B[94mTraceback:#x1B[0m&#10;#x1B[94m mismatch 'stdout'#x1B[91m&#10;">x</failure></testcase>
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 48" time="0.3"><failure message="#x1B[91mNotebook cell execution failed#x1B[0m&#10;#x1B[94mCell 48: Cell execution caused an exception&#10;&#10;Input:&#10;#x1B[0massert x&#10;&#10;#x1B[31mAssertionError#x1B[39m: validation accuracy should pass 80%&#10;">x</failure></testcase>
<testcase classname="solutions.04_custom_training_loops.ipynb" name="Cell 3" time="0.3"/>
<testcase classname="tests.test_config" name="test_read" time="0.0"/>
</testsuite></testsuites>
"""

# A notebook nbval could not read: pytest names the notebook, not a cell (measured, pytest 9.2, nbval 0.11).
UNREADABLE = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="" name="solutions.09_performance.ipynb" time="0.000"><error message="collection failure">.venv/lib/python3.11/site-packages/nbval/plugin.py:311: in collect
    self.nb = nbformat.read(str(self.fspath), as_version=4)
E   nbformat.reader.NotJSONError: Notebook does not appear to be JSON: '{not json'</error></testcase>
<testcase classname="solutions.10_capstone.ipynb" name="Cell 0" time="0.1"/>
<testcase classname="tests.test_config" name="test_read" time="0.0"><failure message="assert 1 == 2">E   assert 1 == 2</failure></testcase>
</testsuite></testsuites>
"""

# A kernel that does not start: pytest reports the notebook's setup error on each of its cells.
NO_KERNEL = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 0" time="0.2"><error message="failed on setup with &quot;jupyter_client.kernelspec.NoSuchKernel: No such kernel named python3&quot;">x</error></testcase>
<testcase classname="solutions.03_keras_model_fit.ipynb" name="Cell 1" time="0.0"><error message="failed on setup with &quot;jupyter_client.kernelspec.NoSuchKernel: No such kernel named python3&quot;">x</error></testcase>
</testsuite></testsuites>
"""


def write_notebook(path, kinds: str) -> None:
    """A notebook whose cells are `kinds`: "m" markdown, "c" code."""
    cells = [{"cell_type": "markdown" if k == "m" else "code", "metadata": {}, "source": ""} for k in kinds]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_one_line_per_notebook_naming_the_cells_that_differ(tmp_path, capsys, monkeypatch) -> None:
    """nbval's Cell 16 is the 17th code cell: with a markdown cell before each code cell, cell index 33."""
    write_notebook(tmp_path / "solutions" / "03_keras_model_fit.ipynb", "mc" * 50)
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    notebooks = nbval_summary.summarize(report, root=tmp_path)
    assert [n.line() for n in notebooks] == [
        "03_keras_model_fit: 2 of 3 cells differ: cell index 33, nbval's Cell 16 (outputs differ: stdout); "
        "cell index 97, nbval's Cell 48 (raised AssertionError: validation accuracy should pass 80%)",
        "04_custom_training_loops: 1 cell, all as stored",
    ]
    monkeypatch.chdir(tmp_path)  # main reads the notebooks where pytest ran, this directory
    assert nbval_summary.main([str(report)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("03_keras_model_fit: 2 of 3 cells differ: cell index 33, nbval's Cell 16")
    assert out[-1] == "2 notebooks, 2 cells differ"


def test_code_cells_are_counted_as_nbval_counts_them(tmp_path) -> None:
    path = tmp_path / "nb.ipynb"
    write_notebook(path, "mmcmccm")
    assert nbval_summary.code_cells(path) == [2, 4, 5]
    assert nbval_summary.code_cells(tmp_path / "missing.ipynb") == []


def test_without_the_notebook_it_says_the_index_is_unknown(tmp_path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    first = nbval_summary.summarize(report, root=tmp_path)[0].line()
    assert "nbval's Cell 16 (cell index unknown: notebook not found) (outputs differ: stdout)" in first


def test_failures_that_are_no_cells_are_counted_per_notebook(tmp_path, capsys) -> None:
    report = tmp_path / "report.xml"
    report.write_text(UNREADABLE)
    notebooks = nbval_summary.summarize(report, root=tmp_path)
    assert [n.line() for n in notebooks] == [
        "09_performance: 1 failure outside its cells: not a cell (collection failure: "
        "NotJSONError: Notebook does not appear to be JSON: '{not json')",
        "10_capstone: 1 cell, all as stored",
        "outside the notebooks: 1 failure outside its cells: not a cell "
        "(tests.test_config.test_read: assert 1 == 2)",
    ]
    assert nbval_summary.main([str(report)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "2 notebooks, 0 cells differ, 2 other failures"


def test_a_kernel_that_does_not_start_fails_every_cell(tmp_path, capsys) -> None:
    report = tmp_path / "report.xml"
    report.write_text(NO_KERNEL)
    (notebook,) = nbval_summary.summarize(report, root=tmp_path)
    assert notebook.cells == 2 and sorted(notebook.differ) == [0, 1]
    assert (
        notebook.differ[0]
        == 'failed on setup with "jupyter_client.kernelspec.NoSuchKernel: No such kernel named python3"'
    )
    assert nbval_summary.main([str(report)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 notebook, 2 cells differ"


def test_a_run_that_matches_exits_0(tmp_path, capsys) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT.split('<testcase classname="solutions.03')[0] + "</testsuite></testsuites>")
    assert nbval_summary.main([str(report)]) == 0
    assert capsys.readouterr().out.strip() == "0 notebooks, 0 cells differ"


def test_without_a_gpu_it_refuses_in_one_line(capsys, monkeypatch) -> None:
    """TensorFlow lists no GPU (faked, so that this holds on a machine with one): it stops at once."""
    from course_utils import devices

    monkeypatch.setattr(devices, "physical_devices", lambda device_type: [])
    assert nbval_summary.main(["--require-gpu"]) == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and message.startswith("make test-gpu needs a GPU")
    monkeypatch.setattr(
        devices, "physical_devices", lambda device_type: ["GPU:0"] if device_type == "GPU" else []
    )
    assert nbval_summary.main(["--require-gpu"]) == 0
