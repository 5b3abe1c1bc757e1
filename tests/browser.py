"""Headless Debian Chromium driven by playwright, for the real-browser tests (never downloads a
browser; a machine without Chromium skips those tests with the reason)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Seconds a page may take to load (the machine running the tests may be slow and shared).
PAGE_LOAD = 120


def playwright_or_skip(what: str) -> Any:
    """``sync_playwright``, or skip the test (saying ``what`` it would have checked)."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: install Debian's chromium (apt-get install chromium) "
            f"to run the real-browser test of {what}"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -r requirements.txt)")
    return sync_playwright


def launch(playwright: Any, profile: Path, width: int, height: int) -> Any:
    """A fresh headless Chromium context with a ``width`` x ``height`` viewport (close it after)."""
    return playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": width, "height": height},
        timeout=PAGE_LOAD * 1000,
    )


@contextlib.contextmanager
def browser_page(playwright: Any, folder: Path, width: int, height: int) -> Iterator[tuple[Any, Any]]:
    """``(context, page)`` in a fresh headless Chromium (its profile in ``folder``); when the test
    fails inside, a screenshot of what the browser showed is kept as ``folder/failure.png``."""
    context = launch(playwright, folder / "chromium-profile", width, height)
    page = None
    try:
        page = context.pages[0] if context.pages else context.new_page()
        yield context, page
    except Exception:
        if page is not None:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(folder / "failure.png"))
                print(f"screenshot of the failure: {folder / 'failure.png'}")
        raise
    finally:
        context.close()
