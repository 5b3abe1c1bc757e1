"""Presenting: every master's slide metadata follows its headings and it marks a demo path; a deck
built by ``make slides`` renders in a real browser; one demo path runs alone, in under a minute.

The browser test builds notebook 07's deck (nbconvert's ``SlidesExporter`` with the course's
template, outputs included) into a temporary folder with the local reveal.js beside it, opens it
from disk in headless Chromium (Debian's ``/usr/bin/chromium`` driven by ``playwright``, as in
tests/test_browser.py) with every network request blocked, and checks that reveal.js started and
counts as many slides as the notebook has ``slide`` and ``subslide`` cells. It saves screenshots
of the first slide and of a later one under the test's temporary folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from browser import PAGE_LOAD, browser_page, playwright_or_skip

from course_tools import presenting
from course_tools.cellmeta import role

ROOT = Path(__file__).resolve().parents[1]
DECK_OF = "07_multi_worker_training"


def _masters() -> list[Path]:
    return sorted((ROOT / "solutions").glob("*.ipynb"))


def test_slide_types_follow_the_headings() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · Title\n\nOverview."),
        nbformat.v4.new_markdown_cell("[badges]", metadata={"course": {"role": "badges"}}),
        nbformat.v4.new_markdown_cell("## 1. Section"),
        nbformat.v4.new_markdown_cell("What the next cell shows."),
        nbformat.v4.new_code_cell("print(1)"),
        nbformat.v4.new_markdown_cell("What to notice."),
        nbformat.v4.new_markdown_cell("### Exercise `x`\nDo this."),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    assert presenting.slide_types(nb) == ["slide", "skip", "slide", "-", "-", "subslide", "subslide", "-"]
    assert presenting.screen_count(nb) == 4
    marked = presenting.with_slides(nb)
    assert [c.metadata["slideshow"]["slide_type"] for c in marked.cells][:3] == ["slide", "skip", "slide"]


@pytest.mark.parametrize("path", _masters(), ids=lambda p: p.stem[:2])
def test_every_master_and_student_copy_carries_its_slide_metadata(path: Path) -> None:
    for copy in (path, ROOT / "notebooks" / path.name):
        nb = nbformat.read(copy, as_version=4)
        stored = [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]
        assert stored == presenting.slide_types(nb), f"{copy.relative_to(ROOT)}: run `make notebooks`"


@pytest.mark.parametrize("path", _masters(), ids=lambda p: p.stem[:2])
def test_every_master_marks_a_demo_path(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert presenting.demo_problems(nb) == []
    cells = presenting.demo_cells(nb)
    assert role(nb.cells[cells[0]]) == "setup", "the demo path starts with the set-up cell"


def test_a_deck_renders_in_a_real_browser_without_a_network(tmp_path: Path) -> None:
    sync_playwright = playwright_or_skip("a slide deck")
    if presenting.local_reveal() is None:
        pytest.skip(
            "no local reveal.js (the sphinx-revealjs package ships it: pip install -r requirements.txt); "
            "a deck would load reveal.js from the network, which this test does not use"
        )
    (deck,) = presenting.build_slides(ROOT, [DECK_OF], out=tmp_path / "slides")
    expected = presenting.screen_count(nbformat.read(ROOT / "solutions" / f"{DECK_OF}.ipynb", as_version=4))
    first_png, later_png = tmp_path / "deck-first.png", tmp_path / "deck-later.png"
    blocked: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith(("file:", "data:", "blob:")):
            request_route.continue_()
        else:  # the network is not used: a deck must render without it
            blocked.append(url)
            request_route.abort()

    with sync_playwright() as playwright, browser_page(playwright, tmp_path, 1280, 800) as (context, page):
        context.route("**/*", route)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(deck.as_uri(), timeout=PAGE_LOAD * 1000)
        page.wait_for_function(
            "() => window.Reveal && Reveal.isReady()", timeout=PAGE_LOAD * 1000, polling=250
        )
        total = page.evaluate("() => Reveal.getTotalSlides()")
        title = page.evaluate("() => Reveal.getCurrentSlide().innerText")
        page.screenshot(path=str(first_png))
        page.evaluate("() => Reveal.slide(3, 0)")
        page.wait_for_function("() => Reveal.getIndices().h === 3", timeout=30_000)
        later = page.evaluate("() => Reveal.getCurrentSlide().innerText")
        page.screenshot(path=str(later_png))

    print(f"screenshots: {first_png} {later_png}; requests blocked: {blocked}")
    assert total == expected, (
        f"reveal.js shows {total} slides, the notebook has {expected} slide/subslide cells"
    )
    assert "multi-worker training" in title.lower(), title[:300]
    assert later.strip() and later != title
    assert errors == [], errors
    assert first_png.stat().st_size > 10_000 and later_png.stat().st_size > 10_000
    assert blocked == [], f"the deck asked the network for {blocked}"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem[:2]
)
def test_the_demo_path_runs_alone_in_a_fresh_kernel(path: Path) -> None:
    """Every demo path runs with only its own cells: nothing it uses is defined in an untagged cell.
    Its time is measured by `make demo NB=..` and written in docs/instructors.md, not asserted."""
    nb = nbformat.read(path, as_version=4)
    run = presenting.run_demo(path)
    print(run.report())
    assert run.error == "", run.report()
    assert [index for index, _, _ in run.cells] == presenting.demo_cells(nb)


def test_the_instructors_guide_lists_each_demo_path_as_tagged() -> None:
    """docs/instructors.md names, for each notebook, the set-up cell and then exactly the cells
    tagged `demo` (by index), so the guide cannot drift when cells are split or moved."""
    import re

    guide = (ROOT / "docs" / "instructors.md").read_text()
    sections = {s[:2]: s for s in re.split(r"\n### ", guide)[1:]}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        listed = [int(n) for n in re.findall(r"^\| (\d+) \|", sections[path.name[:2]], re.M)]
        assert listed == presenting.demo_cells(nb), f"{path.name}: docs/instructors.md lists {listed}"


def test_a_full_size_run_unsets_the_fast_mode_and_times_every_cell(tmp_path: Path, monkeypatch) -> None:
    """`make timings` runs a master as a student on Colab's CPU runtime meets it: COURSE_FAST unset
    even where the caller's shell sets it, the default strategy (two replicas), every cell timed."""
    monkeypatch.setenv("COURSE_FAST", "1")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A notebook"),
        nbformat.v4.new_code_cell(
            "import os\nassert os.environ.get('COURSE_FAST') is None, os.environ.get('COURSE_FAST')\n"
            "assert os.environ['COURSE_STRATEGY'] == 'auto'"
        ),
        nbformat.v4.new_code_cell("import time\ntime.sleep(0.3)"),
    ]
    path = tmp_path / "99_example.ipynb"
    nbformat.write(nb, path)
    run = presenting.run_full(path)
    assert run.error == "", run.report()
    assert [index for index, _, _ in run.cells] == [0, 1, 2]
    assert run.cells[2][1] >= 0.3
    report = run.report(at_least=0.25)
    assert "cell   2" in report and "cell   1" not in report, report
    assert "cell   0" not in run.report() and "nan" not in run.report(), "a markdown cell has no time"
    assert json.loads(json.dumps(run.as_json()))["cells"][2]["first_line"] == "import time"
    assert os.environ["COURSE_FAST"] == "1"
