"""Pictures and the batch-split explorer of notebook 01 (course_utils.lessons.widgets)."""

from __future__ import annotations

import base64

import pytest

from course_utils.lessons import widgets as W


def test_split_summary_numbers() -> None:
    s = W.split_summary(4, 32)
    assert s.shard_sizes == [8, 8, 8, 8]
    assert s.matches
    assert s.local_mean_ratio == pytest.approx(4.0, rel=1e-9)
    text = s.text()
    assert "4 replicas, global batch 32" in text
    assert "examples per replica: 8, 8, 8, 8" in text
    assert "/ 32 (the global batch)" in text
    assert "single-device gradient (to 1e-6): True" in text
    assert "4.00x" in text


def test_split_summary_uneven_and_single_replica() -> None:
    s = W.split_summary(3, 32)
    assert s.shard_sizes == [11, 11, 10] and s.matches
    assert "uneven" in s.text()
    one = W.split_summary(1, 8)
    assert one.local_mean_ratio == pytest.approx(1.0) and "1 replica," in one.text()
    with pytest.raises(ValueError):
        W.split_summary(2, W.MAX_BATCH + 1)


def test_figures_draw() -> None:
    assert len(W.batch_split_figure(W.split_summary(8, W.MAX_BATCH)).axes) == 3
    assert len(W.sync_async_picture().axes) == 2
    fig = W.data_parallelism_picture(4)
    assert len(fig.axes) == 1
    png = W.figure_png(fig, dpi=40)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        W.data_parallelism_picture(0)


def test_outside_a_notebook_no_widgets_are_assumed() -> None:
    assert W.frontend_renders_widgets() is False


def test_static_fallback_prints_the_default_numbers(capsys) -> None:
    assert W.explore_data_parallelism() is None
    out = capsys.readouterr().out
    assert "IPython.core.display.Image object" in out  # the figure (as a PNG image in a notebook)
    assert "4 replicas, global batch 32" in out
    assert "a still picture" in out.lower()


def test_explorer_redraws_when_a_slider_moves() -> None:
    pytest.importorskip("ipywidgets")
    explorer = W.DataParallelExplorer()
    assert explorer.redraws == 1
    first_png = explorer.output.outputs[0]["data"]["image/png"]
    assert base64.b64decode(first_png)[:4] == b"\x89PNG"
    assert "4 replicas, global batch 32" in explorer.output.outputs[1]["text"]

    explorer.replicas.value = 6
    assert explorer.redraws == 2
    assert explorer.summary.shard_sizes == [6, 6, 5, 5, 5, 5]
    assert "6 replicas, global batch 32" in explorer.output.outputs[1]["text"]
    assert explorer.output.outputs[0]["data"]["image/png"] != first_png

    explorer.global_batch.value = 48
    assert explorer.redraws == 3 and explorer.summary.shard_sizes == [8] * 6
    assert explorer.global_batch.min == W.MIN_BATCH and explorer.replicas.max == W.MAX_REPLICAS


def test_explore_forced_interactive_returns_the_explorer(capsys) -> None:
    pytest.importorskip("ipywidgets")
    explorer = W.explore_data_parallelism(2, 16, interactive=True)
    assert isinstance(explorer, W.DataParallelExplorer)
    assert explorer.summary.shard_sizes == [8, 8]
