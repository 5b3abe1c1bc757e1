"""Presenting the course: slide metadata, reveal.js decks and each notebook's demo path.

Usage::

    python -m course_tools.presenting slides [NN ...]   # build/slides/NN_name.slides.html (make slides)
    python -m course_tools.presenting demo NN           # run NN's demo path in a fresh kernel (make demo NB=NN)
    python -m course_tools.presenting full [NN ...]     # every cell at full size, timed (make timings)

**Slides.** Every cell of a master carries ``metadata.slideshow.slide_type``, which JupyterLab's
RISE extension (``jupyterlab-rise``) and ``nbconvert --to slides`` read. ``authoring build``
writes it from the headings (:func:`slide_types`), in the masters and the student copies, and
``authoring check`` reports a master whose slide metadata is stale, so it never drifts:

* the title cell and every ``## `` heading open a **slide** (reveal.js: a column);
* a ``### `` heading, and every other markdown cell, open a **subslide** (one idea per cell:
  one screen each), except the cell right after a heading cell, which joins its heading;
* code cells stay on the subslide of the markdown that introduces them (``-``);
* the badges cell is skipped.

**Decks.** :func:`build_slides` exports each master, with its stored outputs, through nbconvert's
``SlidesExporter`` and the course's template (``course_tools/templates/course_reveal``), which
loads reveal.js from ``build/slides/reveal.js/``: a copy of the reveal.js that the
``sphinx-revealjs`` package ships (pinned in requirements.txt). A deck then needs no network,
except MathJax, which only the decks with formulas (notebook 01) load from its CDN: without a
network their formulas show as TeX source.

**Demo path.** Each master tags 5 to 8 code cells ``demo``: with the set-up cell, they run on
their own, in order, in a fresh kernel, in under a minute with ``COURSE_FAST=1``
(:func:`run_demo`), from the master (a solution cell may be on the path, a check cell may not). ``authoring check`` enforces the count (:func:`demo_problems`);
docs/instructors.md lists each path and its time.

**Full size.** :func:`run_full` runs a whole master top to bottom as a student on Colab's CPU
runtime meets it: two virtual replicas (``COURSE_STRATEGY=auto``), no ``COURSE_FAST``, the built-in
data (so that no download is timed), every cell timed. Run it with nothing else on the machine;
docs/instructors.md gives the measured times.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import importlib.util
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from .cellmeta import role

#: The cell tag that marks a notebook's demo path.
DEMO_TAG = "demo"
#: How many tagged code cells a demo path holds (the set-up cell comes on top).
DEMO_CELLS = (5, 8)
#: What a demo path runs under: the fast mode, and the built-in data.
DEMO_ENV: dict[str, Optional[str]] = {"COURSE_FAST": "1", "COURSE_OFFLINE": "1"}
#: What a full-size run runs under: a student's default (two virtual replicas, no fast mode), with
#: the built-in data so that no download is timed.
FULL_ENV: dict[str, Optional[str]] = {"COURSE_FAST": None, "COURSE_STRATEGY": "auto", "COURSE_OFFLINE": "1"}
#: A full-size cell slower than this needs a progress bar or a sentence that says how long it takes.
SLOW_CELL_SECONDS = 60.0
#: The slide types that start a screen of their own (what reveal.js counts as slides).
SCREENS = ("slide", "subslide")
#: Where ``make slides`` writes the decks.
SLIDES_DIR = Path("build") / "slides"
#: reveal.js from a CDN, used only when no local copy is installed.
REVEAL_CDN = "https://unpkg.com/reveal.js@5.2.0"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE = "course_reveal"


def _heading_level(cell: Any) -> int:
    """1 for ``# ``, 2 for ``## ``... when the markdown cell starts with a heading, else 0."""
    if cell.get("cell_type") != "markdown":
        return 0
    first = cell.get("source", "").lstrip().split("\n", 1)[0]
    hashes = len(first) - len(first.lstrip("#"))
    return hashes if hashes and first[hashes : hashes + 1] == " " else 0


def _only_heading(cell: Any) -> bool:
    return _heading_level(cell) > 0 and "\n" not in cell.get("source", "").strip()


# --------------------------------------------------------------------------- slide metadata


def slide_types(nb: Any) -> list[str]:
    """The ``slide_type`` of every cell, derived from the headings (see the module doc)."""
    types: list[str] = []
    previous: Optional[Any] = None
    for index, cell in enumerate(nb.cells):
        level = _heading_level(cell)
        if role(cell) == "badges":
            kind = "skip"
        elif index == 0 or level in (1, 2):
            kind = "slide"
        elif level >= 3:
            kind = "subslide"
        elif cell.get("cell_type") == "markdown":
            kind = "-" if previous is not None and _only_heading(previous) else "subslide"
        else:
            kind = "-"
        types.append(kind)
        if kind != "skip":
            previous = cell
    return types


def mark_slides(nb: Any) -> None:
    """Set ``metadata.slideshow.slide_type`` of every cell of ``nb`` from :func:`slide_types`
    (what ``authoring build`` does to the masters and the student copies)."""
    for cell, kind in zip(nb.cells, slide_types(nb)):
        slideshow = dict(cell.metadata.get("slideshow", {}))
        slideshow["slide_type"] = kind
        cell.metadata["slideshow"] = slideshow


def with_slides(nb: Any) -> Any:
    """A copy of ``nb`` with its slide metadata set (:func:`mark_slides`)."""
    nb = copy.deepcopy(nb)
    mark_slides(nb)
    return nb


def screen_count(nb: Any) -> int:
    """How many slides reveal.js shows for ``nb``: its ``slide`` and ``subslide`` cells."""
    return sum(kind in SCREENS for kind in slide_types(nb))


# --------------------------------------------------------------------------- demo path


def demo_cells(nb: Any) -> list[int]:
    """The cells a demo runs, in order: the set-up cell, then every cell tagged ``demo``."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.get("cell_type") == "code"
        and (role(cell) == "setup" or DEMO_TAG in cell.get("metadata", {}).get("tags", []))
    ]


def demo_problems(nb: Any) -> list[str]:
    """What is wrong with a master's demo path (empty when it is fine)."""
    problems = []
    tagged = [i for i, c in enumerate(nb.cells) if DEMO_TAG in c.get("metadata", {}).get("tags", [])]
    low, high = DEMO_CELLS
    if not low <= len(tagged) <= high:
        problems.append(
            f"tag {low} to {high} code cells '{DEMO_TAG}' (its demo path; see docs/instructors.md), "
            f"not {len(tagged)}."
        )
    for i in tagged:
        cell = nb.cells[i]
        if cell.get("cell_type") != "code":
            problems.append(f"cell {i} is tagged '{DEMO_TAG}' but is not a code cell.")
        elif role(cell) in {"check", "setup"}:
            problems.append(
                f"cell {i}: a demo path holds no {role(cell)} cell (the set-up cell runs first anyway)."
            )
    return problems


def demo_notebook(nb: Any) -> Any:
    """A notebook of the demo cells of ``nb`` only (with their sources, without outputs)."""
    demo = copy.deepcopy(nb)
    demo.cells = [copy.deepcopy(nb.cells[i]) for i in demo_cells(nb)]
    for cell in demo.cells:
        cell.outputs = []
        cell.execution_count = None
    return demo


@dataclass
class DemoRun:
    """The outcome of :func:`run_demo` or :func:`run_full`: seconds per cell (master index, first
    line) and in all."""

    notebook: str
    cells: list[tuple[int, float, str]] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    what: str = "demo path"

    def report(self, at_least: float = 0.0) -> str:
        """Every cell's time (``at_least``: only the cells that took that long), then the total."""
        shown = [c for c in self.cells if c[1] >= at_least]  # markdown cells (no time, NaN) left out
        lines = [f"{self.what} of {self.notebook}: {len(self.cells)} cells (set-up included)"]
        if at_least:
            lines[0] += f", {len(shown)} of them {at_least:g} s or more"
        for index, seconds, first in shown:
            slow = "  (over a minute)" if seconds > SLOW_CELL_SECONDS else ""
            lines.append(f"  cell {index:>3}  {seconds:6.1f} s  {first[:70]}{slow}")
        verdict = f"FAILED: {self.error}" if self.error else "ran without an error"
        lines.append(f"total {self.seconds:.1f} s in a fresh kernel (kernel start included); {verdict}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "notebook": self.notebook,
            "what": self.what,
            "seconds": round(self.seconds, 1),
            "error": self.error,
            "cells": [  # seconds: null for a markdown cell
                {"cell": i, "seconds": round(t, 2) if t == t else None, "first_line": first}
                for i, t, first in self.cells
            ],
        }


def _stamp(text: str) -> float:
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _run_timed(
    nb: Any,
    indices: list[int],
    name: str,
    what: str,
    env: dict[str, Optional[str]],
    timeout: int,
    keep: Optional[Path] = None,
) -> DemoRun:
    """Execute ``nb`` (cells ``indices`` of a master) in a fresh kernel, in a temporary folder (its
    scratch files go there), with ``env`` set; time every cell; ``keep``: write the executed
    notebook there, outputs included."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from .project import environment

    run = DemoRun(name, what=what)
    with tempfile.TemporaryDirectory() as folder, environment(env):
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
            record_timing=True,
        )
        start = time.perf_counter()
        try:
            client.execute()
        except CellExecutionError as error:
            run.error = str(error).strip().splitlines()[-1][:300]
        run.seconds = time.perf_counter() - start
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, keep / f"{name}.ipynb")
    for index, cell in zip(indices, nb.cells):
        timing = cell.metadata.get("execution", {})
        begin, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        seconds = _stamp(end) - _stamp(begin) if begin and end else float("nan")
        first = next((line for line in cell.source.splitlines() if line.strip()), "")
        run.cells.append((index, seconds, first))
    return run


def run_demo(path: Path, env: Optional[dict[str, str]] = None, timeout: int = 600) -> DemoRun:
    """Execute the demo path of the master ``path`` in a fresh kernel with :data:`DEMO_ENV` (and
    ``env``) set; time every cell."""
    import nbformat

    master = nbformat.read(path, as_version=4)
    return _run_timed(
        demo_notebook(master),
        demo_cells(master),
        path.stem,
        "demo path",
        {**DEMO_ENV, **(env or {})},
        timeout,
    )


def run_full(
    path: Path, env: Optional[dict[str, str]] = None, timeout: int = 1800, keep: Optional[Path] = None
) -> DemoRun:
    """Execute the whole master ``path`` at full size (:data:`FULL_ENV`, and ``env``) in a fresh
    kernel; time every cell (``keep``: write the executed notebook to that folder). The answers are
    the master's own solutions."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    indices = [i for i, cell in enumerate(nb.cells)]
    return _run_timed(nb, indices, path.stem, "full-size run", {**FULL_ENV, **(env or {})}, timeout, keep)


# --------------------------------------------------------------------------- decks


def local_reveal() -> Optional[Path]:
    """The folder of the reveal.js that ``sphinx-revealjs`` ships (``dist/``, ``plugin/``), or None."""
    spec = importlib.util.find_spec("sphinx_revealjs")  # finds the package without importing Sphinx
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "_static" / "revealjs"
    return folder if (folder / "dist" / "reveal.js").is_file() else None


def copy_reveal(out: Path) -> Optional[str]:
    """Copy the local reveal.js next to the decks (``out/reveal.js``); return the URL prefix the
    decks use for it, or None when no local copy is installed."""
    source = local_reveal()
    if source is None:
        return None
    target = out / "reveal.js"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source / "dist", target / "dist")
    shutil.copytree(source / "plugin" / "notes", target / "plugin" / "notes")
    return "reveal.js"


def exporter(reveal_url_prefix: str) -> Any:
    """nbconvert's ``SlidesExporter`` (``jupyter nbconvert --to slides``) with the course's template."""
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    config = Config()
    config.SlidesExporter.reveal_url_prefix = reveal_url_prefix
    config.SlidesExporter.reveal_width = "1200"  # room for 100-column code at the font size of the template
    config.SlidesExporter.reveal_height = "750"
    config.SlidesExporter.reveal_theme = "white"  # its fonts ship with reveal.js (simple's do not)
    config.TemplateExporter.extra_template_basedirs = [str(TEMPLATE_DIR)]
    config.TemplateExporter.template_name = TEMPLATE
    return SlidesExporter(config=config)


def build_slides(root: Path, names: Sequence[str] = (), out: Optional[Path] = None) -> list[Path]:
    """Write a reveal.js deck (with its outputs) for every master, or those whose names start
    with one of ``names``, into ``out`` (default ``build/slides``); return the decks' paths."""
    import nbformat

    out = out or root / SLIDES_DIR
    out.mkdir(parents=True, exist_ok=True)
    masters = sorted((root / "solutions").glob("*.ipynb"))
    if names:
        masters = [p for p in masters if any(p.name.startswith(n) or p.stem == Path(n).stem for n in names)]
    prefix = copy_reveal(out)
    if prefix is None:
        print(
            "note: no local reveal.js (pip install -r requirements.txt installs sphinx-revealjs, "
            f"which ships it): the decks load it from {REVEAL_CDN} and need the network."
        )
    export = exporter(prefix or REVEAL_CDN)
    written = []
    for path in masters:
        nb = with_slides(nbformat.read(path, as_version=4))
        math = any(c.cell_type == "markdown" and re.search(r"\$[^$\n]+\$", c.source) for c in nb.cells)
        body, _ = export.from_notebook_node(
            nb, resources={"metadata": {"name": path.stem}, "course_math": math}
        )
        target = out / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


# --------------------------------------------------------------------------- command line


def main(argv: Optional[list[str]] = None) -> int:
    from .cellmeta import AuthoringError
    from .project import find_root

    parser = argparse.ArgumentParser(
        prog="python -m course_tools.presenting", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["slides", "demo", "full"])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers or names (slides, full: default all)")
    parser.add_argument("--json", type=Path, help="full: also write every cell's time to this file")
    parser.add_argument(
        "--keep", type=Path, help="full: write each executed notebook (outputs) to this folder"
    )
    args = parser.parse_args(argv)
    try:
        root = find_root()
    except AuthoringError as error:
        print(f"presenting: {error}", file=sys.stderr)
        return 2
    if args.command == "slides":
        decks = build_slides(root, args.notebooks)
        for deck in decks:
            print(f"wrote {deck.relative_to(root)}")
        print(
            f"{len(decks)} deck(s) in {SLIDES_DIR}/: open one in a browser (arrow keys; S for speaker notes)."
        )
        return 0
    if args.command == "demo" and not args.notebooks:
        parser.error("demo: name a notebook (demo 03, or make demo NB=03)")
    masters = sorted((root / "solutions").glob("*.ipynb"))
    failed, runs = 0, []
    for name in args.notebooks or ([""] if args.command == "full" else []):
        matches = [p for p in masters if p.name.startswith(name)]
        if not matches:
            print(f"presenting: no master in solutions/ starts with {name!r}", file=sys.stderr)
            return 2
        for path in matches:
            if args.command == "demo":
                print(f"running the demo path of {path.name} in a fresh kernel ...", flush=True)
                run = run_demo(path)
                print(run.report(), flush=True)
            else:
                print(f"running {path.name} at full size in a fresh kernel ...", flush=True)
                run = run_full(path, keep=args.keep)
                print(run.report(at_least=5.0), flush=True)
            failed += bool(run.error)
            runs.append(run)
    if args.command == "full":
        print("\nnotebook                               seconds  slowest cells")
        for run in runs:
            slowest = sorted((c for c in run.cells if c[1] >= 0), key=lambda c: -c[1])[:3]  # NaN: markdown
            cells = ", ".join(f"{i} ({t:.0f} s)" for i, t, _ in slowest)
            print(f"{run.notebook:<38} {run.seconds:7.0f}  {cells}{'  FAILED' if run.error else ''}")
        print(f"{'all':<38} {sum(r.seconds for r in runs):7.0f}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps([r.as_json() for r in runs], indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
