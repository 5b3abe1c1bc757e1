"""The checks of notebook 08 pass right answers and explain planted mistakes."""

from __future__ import annotations

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import parameter_servers as ex


def good_shard_ranges(rows, num_shards):
    shards = min(rows, num_shards)
    base, extra = divmod(rows, shards)
    out, start = [], 0
    for i in range(shards):
        size = base + (i < extra)
        out.append((start, start + size))
        start += size
    return out


def test_shard_ranges(capsys) -> None:
    observed = {
        "fixed": [[0, 4, "ps 0"], [4, 7, "ps 1"], [7, 10, "ps 0"]],
        "embedding": [[0, 500, "ps 0"], [500, 1000, "ps 1"]],
    }
    ex.check_shard_ranges(good_shard_ranges, observed)
    assert "[pass] shard_ranges" in capsys.readouterr().out


def test_shard_ranges_matches_tensorflow_in_the_worker_layout() -> None:
    # The reference is TensorFlow's own arithmetic: 10 rows in 4 shards are 3, 3, 2, 2.
    assert ex.reference_shard_ranges(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_shard_ranges_extra_rows_last() -> None:
    def extra_last(rows, num_shards):
        return [(rows - b, rows - a) for a, b in reversed(good_shard_ranges(rows, num_shards))]

    with pytest.raises(ExerciseError, match="first"):
        ex.check_shard_ranges(extra_last)


def test_shard_ranges_empty_shards() -> None:
    def empty_shards(rows, num_shards):
        size = -(-rows // num_shards)
        return [(min(i * size, rows), min((i + 1) * size, rows)) for i in range(num_shards)]

    with pytest.raises(ExerciseError, match="shard_ranges"):
        ex.check_shard_ranges(empty_shards)


def test_count_copies(two_replicas, capsys) -> None:
    import tensorflow as tf

    def count(strategy):
        with strategy.scope():
            v = tf.Variable(1.0)
        return len(strategy.experimental_local_results(v))

    ex.check_count_copies(count)
    assert "[pass] count_copies" in capsys.readouterr().out


def test_count_copies_with_a_keras_variable(two_replicas) -> None:
    import keras

    def keras_count(strategy):
        with strategy.scope():
            v = keras.Variable(1.0)
        return len(strategy.experimental_local_results(v))

    with pytest.raises(ExerciseError, match=r"count its \.value"):
        ex.check_count_copies(keras_count)


def test_count_copies_counting_replicas(two_replicas) -> None:
    with pytest.raises(ExerciseError, match="CentralStorageStrategy keeps 1 copy"):
        ex.check_count_copies(lambda s: s.num_replicas_in_sync)


OBSERVED_SHARDS = {
    "embedding_300": [[0, 100, "ps 0"], [100, 200, "ps 1"], [200, 300, "ps 0"]],
    "embedding_1000": [[0, 250, "ps 1"], [250, 500, "ps 0"], [500, 750, "ps 1"], [750, 1000, "ps 0"]],
}


def test_shard_count(capsys) -> None:
    ex.check_shard_count({"embedding_300": 3, "embedding_1000": 4}, observed=OBSERVED_SHARDS)
    ex.check_shard_count({"embedding_300": 3, "embedding_1000": 4})  # TensorFlow's partitioner itself
    assert capsys.readouterr().out.count("[pass] shard_count") == 2


def test_shard_count_reference_is_tensorflows_partitioner() -> None:
    import tensorflow as tf

    for rows, columns, minimum, cap in [
        (300, 32, 16 << 10, 4),
        (1000, 32, 64 << 10, 2),
        (100, 32, 16 << 10, 4),
        (1000, 32, 16 << 10, 4),
        (7, 1, 4, 8),
    ]:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(minimum, cap)
        want = int(partitioner(tf.TensorShape([rows, columns]), tf.float32)[0])
        assert ex.reference_shard_count(rows, columns, 4, minimum, cap) == want


@pytest.mark.parametrize(
    "prediction, hint",
    [
        ({"embedding_300": 2, "embedding_1000": 4}, "rounded down"),
        ({"embedding_300": 3, "embedding_1000": 8}, "max_shards=4, the cap"),
        ({"embedding_300": 3, "embedding_1000": 2}, "one shard per parameter server"),
        ({"embedding_300": 3}, "Set PREDICTION"),
        ({"embedding_300": 3.0, "embedding_1000": 4}, "whole number"),
        (None, "Set PREDICTION"),
    ],
)
def test_shard_count_mistakes(prediction, hint) -> None:
    with pytest.raises(ExerciseError, match="shard_count") as caught:
        ex.check_shard_count(prediction, observed=OBSERVED_SHARDS)
    assert hint in str(caught.value)


def test_ps_placement(capsys) -> None:
    ex.check_ps_placement(ex.reference_ps_placement, observed=OBSERVED_SHARDS)
    assert "[pass] ps_placement" in capsys.readouterr().out
    assert ex.reference_ps_placement([3, 4], 2) == [[0, 1, 0], [1, 0, 1, 0]]


@pytest.mark.parametrize(
    "answer, hint",
    [
        (
            lambda counts, num_ps: [[i % num_ps for i in range(n)] for n in counts],
            "start every variable on ps 0",
        ),
        (
            lambda counts, num_ps: [[k % num_ps] * n for k, n in enumerate(counts)],
            "Each shard is a variable of its own",
        ),
        (
            lambda counts, num_ps: [[(k + i) % num_ps for i in range(n)] for k, n in enumerate(counts)],
            "should be",
        ),
    ],
    ids=["restart per variable", "whole variable on one server", "counter per variable index"],
)
def test_ps_placement_mistakes(answer, hint) -> None:
    with pytest.raises(ExerciseError, match="ps_placement") as caught:
        ex.check_ps_placement(answer, observed=OBSERVED_SHARDS)
    assert hint in str(caught.value)
