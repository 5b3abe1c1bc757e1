"""Reading a strict nbval run: one line per notebook, naming the cells that differ (``make test-gpu``).

Usage::

    python -m course_tools.nbval_summary --require-gpu   # exit 2 with one line when TensorFlow sees no GPU
    python -m course_tools.nbval_summary REPORT.xml      # REPORT.xml: pytest --nbval ... --junitxml=REPORT.xml

nbval reports each cell that differs from its stored outputs at length, cell by cell; after a run
of twelve notebooks this says, per notebook, how many cells ran and which differ, and how: the
kinds of output that differ (``stdout``, ``text/plain``...), or the exception a cell raised. The
exit status is 1 when a cell differs.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from course_utils.errors import shorten_error

#: ANSI colours, as nbval writes them and as the JUnit report escapes them.
_COLOUR = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")
_EXCEPTION = re.compile(r"^([\w.]*(?:Error|Exception|Exit|Interrupt)):?\s*(.*)$")


@dataclass
class Notebook:
    """What the report says of one notebook: its cells, and a note for each that differs."""

    name: str
    cells: int = 0
    differ: dict[int, str] = field(default_factory=dict)

    def line(self) -> str:
        if not self.differ:
            return f"{self.name}: {self.cells} cell{'s' if self.cells != 1 else ''}, all as stored"
        found = "; ".join(f"cell {n} ({why})" for n, why in sorted(self.differ.items()))
        return f"{self.name}: {len(self.differ)} of {self.cells} cells differ: {found}"


def why(message: str) -> str:
    """How one cell differs, in a few words, from nbval's failure message."""
    text = _COLOUR.sub("", message)
    if "Cell outputs differ" in text:
        kinds = sorted(set(re.findall(r"mismatch '([^']+)'", text)))
        return "outputs differ" + (f": {', '.join(kinds)}" if kinds else "")
    if "caused an exception" in text:
        raised = [m for line in text.splitlines() if (m := _EXCEPTION.match(line.strip()))]
        return "raised " + (
            shorten_error(f"{raised[-1][1]}: {raised[-1][2]}", 120) if raised else "an exception"
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return shorten_error(lines[1] if len(lines) > 1 else lines[0] if lines else "failed", 120)


def summarize(report: Path) -> list[Notebook]:
    """The notebooks of a JUnit report written by ``pytest --nbval --junitxml=...``, in run order."""
    notebooks: dict[str, Notebook] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        cell = re.match(r"Cell (\d+)", case.get("name", ""))
        path = case.get("classname", "")
        if cell is None or not path.endswith(".ipynb"):
            continue  # not a notebook cell (a unit test in the same run)
        name = path.removesuffix(".ipynb").rsplit(".", 1)[-1].rsplit("/", 1)[-1]
        notebook = notebooks.setdefault(name, Notebook(name))
        notebook.cells += 1
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            notebook.differ[int(cell.group(1))] = why(problem.get("message") or problem.text or "")
    return list(notebooks.values())


def gpu_refusal() -> Optional[str]:
    """One line saying why ``make test-gpu`` cannot run here, or None when TensorFlow sees a GPU."""
    from course_utils.devices import physical_devices

    if physical_devices("GPU"):
        return None
    return (
        "make test-gpu needs a GPU, and TensorFlow sees none here (tf.config.list_physical_devices('GPU') "
        "is empty); on an NVIDIA machine without CUDA, .venv/bin/pip install 'tensorflow[and-cuda]==VERSION' "
        "with requirements.txt's VERSION."
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--require-gpu"]:
        refusal = gpu_refusal()
        if refusal:
            print(refusal, file=sys.stderr)
            return 2
        return 0
    if len(args) != 1 or not Path(args[0]).is_file():
        print("usage: python -m course_tools.nbval_summary REPORT.xml | --require-gpu", file=sys.stderr)
        return 2
    notebooks = summarize(Path(args[0]))
    for notebook in notebooks:
        print(notebook.line())
    differing = sum(len(n.differ) for n in notebooks)
    count = f"{len(notebooks)} notebook{'s' if len(notebooks) != 1 else ''}"
    print(f"{count}, {differing} cell{'s' if differing != 1 else ''} differ{'s' if differing == 1 else ''}")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
