"""Notebook 01's data, pictures and batch-split explorer (course_utils.lessons.widgets).

The lesson's NumPy code (the model, the data-parallel step, the ring all-reduce) lives in the
notebook's cells and is tested there, under nbval, by its own asserts; here a small step of the
same shape stands in for the notebook's to drive the explorer.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from course_utils.exercises.data_parallelism import mean_loss_gradient
from course_utils.lessons import widgets as W


def gradient(params, x, y, denominator):
    return {k: v * len(x) / denominator for k, v in mean_loss_gradient(params, x, y).items()}


def step(params, x, y, replicas, learning_rate=0.1, local_mean=False):
    per = -(-len(x) // replicas)  # tf.distribute's split, as the notebook's shard()
    shards = [(x[r * per : (r + 1) * per], y[r * per : (r + 1) * per]) for r in range(replicas)]
    per_replica = [gradient(params, xs, ys, len(xs) if local_mean else len(x)) for xs, ys in shards]
    total = {k: sum(g[k] for g in per_replica) for k in per_replica[0]}
    return (
        per_replica,
        [total] * replicas,
        [{k: params[k] - learning_rate * total[k] for k in params}] * replicas,
    )


def test_problem_is_deterministic_and_float32_exact() -> None:
    params, x, y = W.make_problem(examples=48, features=5, classes=4, seed=1)
    again = W.make_problem(examples=48, features=5, classes=4, seed=1)
    assert np.array_equal(x, again[1]) and np.array_equal(y, again[2])
    assert x.shape == (48, 5) and y.shape == (48,) and params["kernel"].shape == (5, 4)
    assert params["bias"].shape == (4,) and set(np.unique(y)) <= set(range(4))
    assert len(np.unique(y)) > 1  # the teacher gives several classes
    assert x.dtype == np.float64 and np.array_equal(
        x.astype(np.float32), x
    )  # TensorFlow sees the same numbers
    with pytest.raises(ValueError):
        W.make_problem(classes=1)


def test_timelines_sync_waits_for_the_slowest() -> None:
    sync, _ = W.timelines([1.0, 1.25, 2.0], horizon=8.0)
    assert sync.updates == 4 and sync.barriers == [2.0, 4.0, 6.0, 8.0]
    assert sync.max_staleness == 0
    assert sync.idle_fraction == pytest.approx(1 - (1.0 + 1.25 + 2.0) / 6.0)


def test_timelines_async_never_waits_but_goes_stale() -> None:
    _, asyn = W.timelines([1.0, 1.25, 2.0], horizon=8.0)
    assert asyn.updates == 18
    assert [w[0] for w in asyn.work[:4]] == [0, 1, 0, 2]
    assert asyn.work[0][3] == 0 and asyn.work[1][3] == 1
    assert asyn.max_staleness == 4
    # equal workers never go stale by more than the number of other workers
    _, equal = W.timelines([1.0, 1.0], horizon=4.0)
    assert equal.updates == 8 and equal.max_staleness == 1


def test_split_summary_numbers() -> None:
    s = W.split_summary(step, gradient, 4, 32)
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
    s = W.split_summary(step, gradient, 3, 32)
    assert s.shard_sizes == [11, 11, 10] and s.matches
    assert "uneven" in s.text()
    assert W.split_summary(step, gradient, 3, 10).shard_sizes == [4, 4, 2]  # not np.array_split's 4, 3, 3
    one = W.split_summary(step, gradient, 1, 8)
    assert one.local_mean_ratio == pytest.approx(1.0) and "1 replica," in one.text()
    with pytest.raises(ValueError):
        W.split_summary(step, gradient, 2, W.MAX_BATCH + 1)


def test_split_summary_shows_a_wrong_step_as_wrong() -> None:
    def local_means(params, x, y, replicas, learning_rate=0.1, local_mean=False):
        return step(params, x, y, replicas, learning_rate, local_mean=True)

    s = W.split_summary(local_means, gradient, 2, 16)
    assert not s.matches and "(to 1e-6): False" in s.text()


#: What the notebook's ring_allreduce records for 2 devices: (label, held, chunk sent) per step.
RING_STEPS = [
    ("start", np.ones((2, 2), dtype=int), [None, None]),
    ("reduce-scatter 1", np.array([[1, 2], [2, 1]]), [0, 1]),
    ("all-gather 1", np.full((2, 2), 2), [1, 0]),
]


def test_figures_draw() -> None:
    assert len(W.batch_split_figure(W.split_summary(step, gradient, 8, W.MAX_BATCH)).axes) == 3
    assert len(W.sync_async_picture(*W.timelines((1.0, 1.25, 2.0), 8.0)).axes) == 2
    assert len(W.ring_picture(RING_STEPS).axes) == 1
    traffic = W.traffic_picture(
        [2, 4], {"a": [1e6, 1.5e6], "b": [2e6, 3e6]}, {"a": [2e6, 4e6], "b": [4e6, 8e6]}
    )
    assert len(traffic.axes) == 2
    fig = W.data_parallelism_picture(4)
    assert len(fig.axes) == 1
    png = W.figure_png(fig, dpi=40)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        W.data_parallelism_picture(0)


def test_outside_a_notebook_no_widgets_are_assumed() -> None:
    assert W.frontend_renders_widgets() is False


def test_static_fallback_prints_the_default_numbers(capsys) -> None:
    assert W.explore_data_parallelism(step, gradient) is None
    out = capsys.readouterr().out
    assert "IPython.core.display.Image object" in out  # the figure (as a PNG image in a notebook)
    assert "4 replicas, global batch 32" in out
    assert "a still picture" in out.lower()


def test_explorer_redraws_when_a_slider_moves() -> None:
    pytest.importorskip("ipywidgets")
    explorer = W.DataParallelExplorer(step, gradient)
    assert explorer.redraws == 1
    first_png = explorer.output.outputs[0]["data"]["image/png"]
    assert base64.b64decode(first_png)[:4] == b"\x89PNG"
    assert "4 replicas, global batch 32" in explorer.output.outputs[1]["text"]

    explorer.replicas.value = 6
    assert explorer.redraws == 2
    assert explorer.summary.shard_sizes == [6, 6, 6, 6, 6, 2]  # tf.distribute: ceil(32 / 6) each
    assert "6 replicas, global batch 32" in explorer.output.outputs[1]["text"]
    assert explorer.output.outputs[0]["data"]["image/png"] != first_png

    explorer.global_batch.value = 48
    assert explorer.redraws == 3 and explorer.summary.shard_sizes == [8] * 6
    assert explorer.global_batch.min == W.MIN_BATCH and explorer.replicas.max == W.MAX_REPLICAS


def test_explore_forced_interactive_returns_the_explorer(capsys) -> None:
    pytest.importorskip("ipywidgets")
    explorer = W.explore_data_parallelism(step, gradient, 2, 16, interactive=True)
    assert isinstance(explorer, W.DataParallelExplorer)
    assert explorer.summary.shard_sizes == [8, 8]
