"""Notebook 09, section 5: a simulated slow reader, and the throughput of the input and of training.

The pipelines themselves (``prefetch``, a parallel ``map``) stay in the notebook's cell; these hide the
sleep that stands in for reading files and the clocks around the runs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from ..runtime import import_tensorflow as _tf


def _batch_size(dataset: Any) -> int:
    """Examples per batch of a dataset of fixed-size ``(images, labels)`` batches."""
    return int(dataset.element_spec[0].shape[0])


def slow_reader(batches: Any, seconds: float, parallel: Any = None) -> Any:
    """``batches`` of ``(images, labels)`` read slowly: each image batch waits ``seconds`` (a
    ``time.sleep`` standing in for reading and decoding files) in a ``map`` with
    ``num_parallel_calls=parallel``; repeated."""
    tf = _tf()

    def read(images: Any) -> Any:
        time.sleep(seconds)
        return images

    def load(images: Any, labels: Any) -> Any:
        shape, dtype = images.shape, images.dtype
        return tf.ensure_shape(tf.numpy_function(read, [images], dtype), shape), labels

    return batches.map(load, num_parallel_calls=parallel).repeat()


def without_automatic_prefetch(dataset: Any) -> Any:
    """``dataset`` with tf.data's own ``prefetch`` (the ``inject_prefetch`` optimization) switched off."""
    tf = _tf()
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def input_alone(dataset: Any, count: int = 10, runs: int = 5) -> float:
    """Examples per second that ``dataset`` delivers with nothing consuming them, a ceiling for
    training fed by it: the fastest of ``runs`` calls of a ``tf.function`` that takes ``count`` batches
    from one iterator in the graph, as ``train_steps`` takes them (no Python call per batch), after one
    call that starts it."""
    tf = _tf()
    iterator = iter(dataset)

    @tf.function
    def read(batches: Any) -> Any:
        examples = tf.constant(0)
        for _ in tf.range(batches):
            examples += tf.shape(next(iterator)[0])[0]
        return examples

    int(read(tf.constant(1)))  # traces it and starts the pipeline
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        int(read(tf.constant(count)))
        seconds.append(time.perf_counter() - start)
    return count * _batch_size(dataset) / min(seconds)


def training_throughput(
    train_steps: Callable[[Any, Any], Any], strategy: Any, dataset: Any, steps: int = 5, runs: int = 5
) -> float:
    """Examples per second of ``train_steps(iterator, steps)`` fed by ``dataset`` on ``strategy``: one
    call to start the pipeline (and trace), then the median of ``runs`` calls, each ended by its loss."""
    tf = _tf()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    count = tf.constant(steps)
    float(train_steps(iterator, count))  # warm-up: starts the pipeline
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        float(train_steps(iterator, count))
        seconds.append(time.perf_counter() - start)
    return steps * _batch_size(dataset) / statistics.median(seconds)
