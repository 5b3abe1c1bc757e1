"""A real browser: notebook 01's batch-split explorer renders in JupyterLab and redraws when a
slider moves.

The test copies ``notebooks/01_data_parallelism.ipynb`` (the student version) into a temporary
folder, starts JupyterLab there on a free port with no token, opens the notebook in headless
Chromium (Debian's ``/usr/bin/chromium``, driven by the ``playwright`` package; no browser is
ever downloaded), runs the cells above the explorer (they define the step it explores), then the
explorer's cell, drags the "replicas" slider, and saves a screenshot before and after under
pytest's temporary folder. It passes only if the widget itself rendered
(sliders and a figure inside it) and its figure and numbers changed after the slider moved.

Without Chromium at ``/usr/bin/chromium`` or without ``playwright`` it is skipped, saying why
(``.ci/run`` installs Chromium). JupyterLab is always stopped, whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import nbformat
import pytest
from browser import PAGE_LOAD, browser_page, playwright_or_skip

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_data_parallelism.ipynb"
WIDGET_CALL = "explore_data_parallelism("

# Bounded waits, in seconds (the machine running the tests may be slow and shared).
SERVER_START = 120
KERNEL_READY = 180
WIDGET_RENDER = 180
REDRAW = 120
SERVER_STOP = 30


def _get(url: str, timeout: float = 5.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (localhost only)
        return response.status


def _post(url: str, timeout: float = 10.0) -> None:
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout):  # noqa: S310 (localhost only)
        pass


def _write_lab_settings(folder: Path) -> None:
    """Render every cell (no windowing) and keep notifications and news fetching off."""
    settings = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
            "doNotDisturbMode": True,
        },
    }
    for name, value in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def _stop(process: subprocess.Popen, base_url: str) -> None:
    """Ask the server to shut down (it stops its kernels), then make sure its process group is gone."""
    if process.poll() is None:
        with contextlib.suppress(Exception):
            _post(f"{base_url}/api/shutdown")
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=SERVER_STOP)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=SERVER_STOP)


@contextlib.contextmanager
def jupyterlab(folder: Path, state: Path) -> Iterator[str]:
    """Run JupyterLab on ``folder`` (free port, no token) and yield its address; always stop it."""
    import portpicker

    port = portpicker.pick_unused_port()
    base_url = f"http://127.0.0.1:{port}"
    for sub in ("config", "runtime", "settings", "workspaces"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    _write_lab_settings(state / "settings")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(state / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces"),
    }
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={folder}",
        "--IdentityProvider.token=",
        "--ServerApp.disable_check_xsrf=True",
        "--ServerApp.allow_root=True",  # CI containers often run as root
        "--LabApp.extension_manager=readonly",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    log_path = state / "jupyterlab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with code {process.returncode}:\n{log_path.read_text()[-3000:]}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError):
                if _get(f"{base_url}/api/status") == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"JupyterLab did not answer within {SERVER_START} s:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield base_url
    finally:
        _stop(process, base_url)


def _widget_cell_index(path: Path) -> int:
    nb = nbformat.read(path, as_version=4)
    found = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and WIDGET_CALL in cell.source]
    assert len(found) == 1, f"expected one cell calling {WIDGET_CALL}...) in {path.name}, found {found}"
    return found[0]


# JavaScript run in the page (the JupyterLab app is exposed as window.jupyterapp).
KERNEL_IDLE = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell && app.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
                 && panel.sessionContext.session.kernel;
  return !!(panel && panel.content && panel.content.widgets && panel.content.widgets.length > 0
            && kernel && kernel.status === 'idle');
}"""

RUN_CELL = """([index, command]) => {
  const panel = window.jupyterapp.shell.currentWidget;
  panel.content.activeCellIndex = index;
  panel.content.deselectAll();
  return window.jupyterapp.commands.execute(command).then(() => true);
}"""


def test_data_parallelism_widget_in_a_real_browser(tmp_path: Path) -> None:
    sync_playwright = playwright_or_skip("the notebook 01 widget")
    assert NOTEBOOK.is_file(), "notebooks/01_data_parallelism.ipynb is missing: run `make notebooks`"
    work = tmp_path / "lab"
    work.mkdir()
    notebook = work / NOTEBOOK.name
    shutil.copyfile(NOTEBOOK, notebook)
    index = _widget_cell_index(notebook)
    before_png, after_png = tmp_path / "widget-before.png", tmp_path / "widget-after.png"

    with (
        jupyterlab(work, tmp_path / "jupyter") as base_url,
        sync_playwright() as playwright,
        browser_page(playwright, tmp_path, 1500, 1100) as (context, page),
    ):
        context.set_default_timeout(WIDGET_RENDER * 1000)
        page.goto(f"{base_url}/lab/tree/{notebook.name}", timeout=PAGE_LOAD * 1000)
        page.wait_for_function(KERNEL_IDLE, timeout=KERNEL_READY * 1000, polling=500)

        # the explorer runs the notebook's own step: the cells above it define it
        assert page.evaluate(RUN_CELL, [index, "notebook:run-all-above"])
        page.wait_for_function(KERNEL_IDLE, timeout=KERNEL_READY * 1000, polling=500)
        assert page.evaluate(RUN_CELL, [index, "notebook:run-cell"])
        cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
        explorer = cell.locator(".course-data-parallel-explorer")
        sliders = explorer.locator(".widget-slider")
        figure = explorer.locator(".widget-output img")
        numbers = explorer.locator(".widget-output pre")
        readout = sliders.first.locator(".widget-readout")

        figure.wait_for(state="visible", timeout=WIDGET_RENDER * 1000)
        assert sliders.count() == 2, "the explorer should show two sliders (replicas, global batch)"
        assert cell.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0, (
            cell.inner_text()[:2000]
        )
        src_before = figure.get_attribute("src")
        text_before = numbers.inner_text()
        value_before = readout.inner_text().strip()
        assert "4 replicas, global batch 32" in text_before, text_before
        assert value_before == "4"
        explorer.scroll_into_view_if_needed()
        page.screenshot(path=str(before_png), full_page=False)

        # Drag the "replicas" handle to the right, like a person would.
        handle = sliders.first.locator(".noUi-handle")
        track = sliders.first.locator(".noUi-target")
        box_handle, box_track = handle.bounding_box(), track.bounding_box()
        assert box_handle and box_track, "the slider is not visible"
        start_x = box_handle["x"] + box_handle["width"] / 2
        y = box_handle["y"] + box_handle["height"] / 2
        page.mouse.move(start_x, y)
        page.mouse.down()
        page.mouse.move(box_track["x"] + box_track["width"] * 0.97, y, steps=12)
        page.mouse.up()

        page.wait_for_function(
            """([selector, before]) => {
                const pre = document.querySelector(selector);
                return pre && pre.innerText !== before;
            }""",
            arg=[".course-data-parallel-explorer .widget-output pre", text_before],
            timeout=REDRAW * 1000,
            polling=250,
        )
        figure.wait_for(state="visible", timeout=REDRAW * 1000)
        page.screenshot(path=str(after_png), full_page=False)
        src_after = figure.get_attribute("src")
        text_after = numbers.inner_text()
        value_after = readout.inner_text().strip()

    print(f"screenshots: {before_png} {after_png}")
    assert before_png.stat().st_size > 0 and after_png.stat().st_size > 0
    assert value_after != value_before and int(value_after) > 4, (value_before, value_after)
    assert f"{value_after} replicas, global batch 32" in text_after, text_after
    assert src_after and src_after != src_before, "the figure did not change after the slider moved"
