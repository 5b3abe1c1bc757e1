"""Ring all-reduce and its traffic (course_utils.lessons.allreduce)."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils.lessons import allreduce as ar


@pytest.mark.parametrize("devices", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("size", [1, 7, 24, 100])
def test_ring_allreduce_sums_on_every_device(devices: int, size: int) -> None:
    rng = np.random.default_rng(devices * 100 + size)
    values = [rng.normal(size=size) for _ in range(devices)]
    result = ar.ring_allreduce(values)
    for got in result.results:
        assert np.allclose(got, np.sum(values, axis=0), atol=1e-12)
    assert len(result.steps) == 1 + 2 * (devices - 1)
    assert (result.steps[-1].contributions == devices).all()


@pytest.mark.parametrize("devices", [2, 3, 4, 6, 8])
def test_elements_sent_match_the_formula(devices: int) -> None:
    size = 24 * 35  # divisible by every device count above: chunks of equal size
    result = ar.ring_allreduce([np.ones(size) for _ in range(devices)])
    formula = ar.ring_bytes_per_device(size, devices, bytes_per_param=1)
    assert result.elements_sent == [formula] * devices
    assert result.bytes_sent() == [4 * formula] * devices


def test_ring_keeps_shapes_and_refuses_mismatches() -> None:
    result = ar.ring_allreduce([np.ones((3, 4)), 2 * np.ones((3, 4))])
    assert result.results[0].shape == (3, 4) and np.all(result.results[1] == 3)
    with pytest.raises(ValueError):
        ar.ring_allreduce([np.ones(3), np.ones(4)])
    with pytest.raises(ValueError):
        ar.ring_allreduce([])


def test_reduce_scatter_leaves_one_complete_chunk_per_device() -> None:
    n = 4
    steps = ar.ring_allreduce([np.ones(8) for _ in range(n)]).steps
    after_rs = steps[n - 1]
    assert after_rs.phase == "reduce-scatter" and after_rs.number == n - 1
    for device in range(n):
        complete = [c for c in range(n) if after_rs.contributions[device, c] == n]
        assert complete == [(device + 1) % n]


def test_formulas() -> None:
    assert ar.ring_bytes_per_device(1000, 1) == 0
    assert ar.ring_bytes_per_device(1000, 2) == 4000
    assert ar.ring_bytes_per_device(1000, 4, bytes_per_param=2) == 3000
    assert ar.naive_bytes_per_device(1000, 4) == 12000
    ps = ar.parameter_server_bytes(1000, workers=8)
    assert (ps.worker_sends, ps.worker_receives, ps.server_sends, ps.server_receives) == (
        4000,
        4000,
        32000,
        32000,
    )
    assert ar.parameter_server_bytes(1000, workers=8, servers=4).server_sends == 8000
    with pytest.raises(ValueError):
        ar.ring_bytes_per_device(1000, 0)
    # the ring approaches 2 x model size, the server grows with N
    assert ar.ring_bytes_per_device(10**6, 1024) < 2 * 4 * 10**6
    assert ar.parameter_server_bytes(10**6, 1024).server_sends == 1024 * 4 * 10**6


def test_format_and_table() -> None:
    assert ar.format_bytes(487_720) == "487.7 kB"
    assert ar.format_bytes(102_546_848) == "102.5 MB"
    assert ar.format_bytes(1_760_000_000) == "1.8 GB"
    assert ar.format_bytes(12) == "12 B"
    rows = ar.traffic_rows({"tiny": 1000}, [2, 4])
    assert [r["ring_per_device"] for r in rows] == [4000, 6000]
    assert [r["ps_server"] for r in rows] == [8000, 16000]
    table = ar.traffic_table(rows)
    assert "tiny" in table and "6.0 kB" in table and "16.0 kB" in table


def test_course_cnn_parameter_count() -> None:
    from course_utils.models import custom_training_cnn

    assert custom_training_cnn().count_params() == 121_930


def test_resnet50_parameter_count_is_what_keras_builds() -> None:
    import keras

    count, source = ar.REFERENCE_MODELS["ResNet-50"]
    assert "ResNet50" in source
    assert keras.applications.ResNet50(weights=None).count_params() == count
    assert ar.REFERENCE_MODELS["BERT-base"][0] == 110_000_000


def test_pictures_draw() -> None:
    fig = ar.plot_ring_allreduce(4)
    assert len(fig.axes) == 1
    fig = ar.plot_traffic({"a": 1000, "b": 10**6})
    assert len(fig.axes) == 2
    with pytest.raises(ValueError):
        ar.plot_ring_allreduce(1)
