"""The course's pictures: each returns a figure with what it promises to draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.lessons.parallelism import draw_parallelism  # noqa: E402


@pytest.mark.parametrize("layers, devices, micro_batches", [(4, 2, 4), (6, 3, 2)])
def test_draw_parallelism_draws_every_box(layers: int, devices: int, micro_batches: int) -> None:
    fig = draw_parallelism(layers=layers, devices=devices, micro_batches=micro_batches)
    model, single, pipeline = fig.axes
    assert len(model.patches) == layers
    # one idle bar per device, then a forward and a backward box per device and micro-batch
    assert len(single.patches) == devices + 2 * devices
    assert len(pipeline.patches) == devices + 2 * devices * micro_batches
    bubble = pipeline.patches[0]
    assert bubble.get_width() == pytest.approx(2 * (micro_batches + devices - 1) / micro_batches)
    plt.close(fig)


def test_draw_parallelism_refuses_more_devices_than_layers() -> None:
    with pytest.raises(ValueError, match="devices <= layers"):
        draw_parallelism(layers=2, devices=3)
