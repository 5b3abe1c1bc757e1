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
    observed = {"fixed": [[0, 4, "ps 0"], [4, 7, "ps 1"], [7, 10, "ps 0"]], "embedding": [[0, 500, "ps 0"], [500, 1000, "ps 1"]]}
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


def good_dataset_fn(input_context):
    import tensorflow as tf

    x, y = ex.ps_examples()
    batch = input_context.get_per_replica_batch_size(16)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat().batch(batch)


def test_ps_dataset_fn(capsys) -> None:
    ex.check_ps_dataset_fn(good_dataset_fn)
    assert "[pass] ps_dataset_fn" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (lambda tf, x, y, b: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(b), "repeat"),
        (lambda tf, x, y, b: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(b), "shuffle"),
        (lambda tf, x, y, b: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat().batch(8), "16 examples"),
    ],
)
def test_ps_dataset_fn_mistakes(mistake, hint) -> None:
    import tensorflow as tf

    def dataset_fn(input_context):
        x, y = ex.ps_examples()
        return mistake(tf, x, y, input_context.get_per_replica_batch_size(16))

    with pytest.raises(ExerciseError, match="ps_dataset_fn") as caught:
        ex.check_ps_dataset_fn(dataset_fn)
    assert hint in str(caught.value)


def test_choose_strategy(capsys) -> None:
    ex.check_choose_strategy(ex.reference_strategy)
    assert "[pass] choose_strategy" in capsys.readouterr().out

    def multi_before_async(machines, devices, tpu=False, asynchronous=False):
        if machines > 1:
            return "MultiWorkerMirroredStrategy"
        return ex.reference_strategy(machines, devices, tpu, asynchronous)

    with pytest.raises(ExerciseError, match="ParameterServerStrategy"):
        ex.check_choose_strategy(multi_before_async)
