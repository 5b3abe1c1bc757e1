"""Reading a strict nbval run: one line per notebook, naming the cells that differ (``make test-gpu``).

Usage::

    python -m course_tools.nbval_summary --require-gpu   # exit 2 with one line when TensorFlow sees no GPU
    python -m course_tools.nbval_summary REPORT.xml      # REPORT.xml: pytest --nbval ... --junitxml=REPORT.xml

nbval reports each cell that differs from its stored outputs at length, cell by cell; after a run
of twelve notebooks this says, per notebook, how many cells ran and which differ, and how: the
kinds of output that differ (``stdout``, ``text/plain``...), or the exception a cell raised. A cell
is named by its index in the notebook (every cell counted from 0, markdown too, as
``docs/instructors.md`` cites them) and by nbval's ``Cell N``, which counts code cells only. A
failure that is no cell's (a notebook nbval could not read) is counted and shown too. The exit
status is 1 when a cell differs or anything else failed.
"""

from __future__ import annotations

import json
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
    """What the report says of one notebook: its cells, a note for each that differs (keyed by
    nbval's code-cell number), and the failures that are no cell's."""

    name: str
    cells: int = 0
    differ: dict[int, str] = field(default_factory=dict)
    #: The notebook's index of each code cell, in order (empty when the notebook was not found).
    index: list[int] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def cell(self, n: int) -> str:
        """nbval's ``Cell n`` as the notebook's cell index, where the notebook was read."""
        if n < len(self.index):
            return f"cell index {self.index[n]}, nbval's Cell {n}"
        return f"nbval's Cell {n} (cell index unknown: notebook not found)"

    def line(self) -> str:
        if not self.differ and not self.other:
            return f"{self.name}: {self.cells} cell{'s' if self.cells != 1 else ''}, all as stored"
        counts = [f"{len(self.differ)} of {self.cells} cells differ"] if self.differ else []
        if self.other:
            counts.append(f"{len(self.other)} failure{'s' if len(self.other) != 1 else ''} outside its cells")
        found = [f"{self.cell(n)} ({why})" for n, why in sorted(self.differ.items())]
        found += [f"not a cell ({why})" for why in self.other]
        return f"{self.name}: {', '.join(counts)}: {'; '.join(found)}"


def code_cells(path: Path) -> list[int]:
    """The index of each code cell of the notebook at ``path``, in order; empty if it cannot be read.
    nbval's ``Cell N`` is the N-th of them (``IPyNbFile.collect`` counts code cells only)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [i for i, cell in enumerate(cells) if isinstance(cell, dict) and cell.get("cell_type") == "code"]


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


def outside(problem: ElementTree.Element) -> str:
    """A failure that is no cell's, in a few words: its message and its traceback's last error line."""
    message = shorten_error(_COLOUR.sub("", problem.get("message") or "") or "failed", 120)
    body = _COLOUR.sub("", problem.text or "").splitlines()
    errors = [line[1:].strip() for line in body if line.startswith("E ") and line[1:].strip()]
    if errors and errors[-1] not in message:
        message += ": " + shorten_error(errors[-1], 120)
    return message


def summarize(report: Path, root: Optional[Path] = None) -> list[Notebook]:
    """The notebooks of a JUnit report written by ``pytest --nbval --junitxml=...``, in run order.

    ``root`` is the directory pytest ran in (default: this one): the notebooks are read from there
    to turn nbval's code-cell numbers into cell indices. A failure outside the notebooks (a unit test
    in the same run) is kept under the name ``outside the notebooks``.
    """
    root = Path.cwd() if root is None else root
    notebooks: dict[str, Notebook] = {}

    def notebook(path: str) -> Notebook:
        name = path.removesuffix(".ipynb").rsplit(".", 1)[-1].rsplit("/", 1)[-1]
        if name not in notebooks:
            parts = path.removesuffix(".ipynb").replace("/", ".").split(".")
            notebooks[name] = Notebook(name, index=code_cells(root.joinpath(*parts).with_suffix(".ipynb")))
        return notebooks[name]

    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        cell = re.fullmatch(r"Cell (\d+)", name)
        if cell is not None and classname.endswith(".ipynb"):
            entry = notebook(classname)
            entry.cells += 1
            if problem is not None:
                entry.differ[int(cell.group(1))] = why(problem.get("message") or problem.text or "")
        elif problem is not None:  # no cell's: a notebook that failed to collect, a unit test
            path = classname if classname.endswith(".ipynb") else name if name.endswith(".ipynb") else ""
            if path:
                notebook(path).other.append(outside(problem))
            else:
                notebooks.setdefault("", Notebook("outside the notebooks")).other.append(
                    f"{'.'.join(filter(None, (classname, name)))}: {outside(problem)}"
                )
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
    others = sum(len(n.other) for n in notebooks)
    read = [n for n in notebooks if n.name != "outside the notebooks"]
    count = f"{len(read)} notebook{'s' if len(read) != 1 else ''}"
    summary = (
        f"{count}, {differing} cell{'s' if differing != 1 else ''} differ{'s' if differing == 1 else ''}"
    )
    if others:
        summary += f", {others} other failure{'s' if others != 1 else ''}"
    print(summary)
    return 1 if differing or others else 0


if __name__ == "__main__":
    raise SystemExit(main())
