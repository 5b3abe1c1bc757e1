"""Checks for notebook 08, parameter servers and central storage."""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..strategies import mirrored_cpus
from ..checks import exercise, expect, passed


def reference_shard_ranges(rows: int, num_shards: int) -> list[tuple[int, int]]:
    """How ``ParameterServerStrategy`` cuts a variable's first axis into shards.

    The same arithmetic as ``tensorflow/python/distribute/parameter_server_strategy_v2.py``
    (``_create_variable``): never more shards than rows, and the first ``rows % shards`` shards
    get one extra row.
    """
    shards = min(num_shards, rows)
    base, extra = divmod(rows, shards)
    ranges, start = [], 0
    for i in range(shards):
        size = base + (1 if i < extra else 0)
        ranges.append((start, start + size))
        start += size
    return ranges


def check_shard_ranges(
    shard_ranges: Callable[[int, int], list[tuple[int, int]]],
    observed: Optional[dict[str, list]] = None,
) -> None:
    """``shard_ranges(rows, num_shards)`` -> ``[(start, stop), ...]`` as TensorFlow shards rows.

    ``observed`` is the layout the notebook's parameter-server cluster reported.
    """
    with exercise("shard_ranges"):
        for rows, shards in [(1000, 2), (10, 3), (10, 4), (7, 7), (3, 5), (1, 1), (12, 5)]:
            got = [tuple(int(v) for v in r) for r in shard_ranges(rows, shards)]
            want = reference_shard_ranges(rows, shards)
            if len(got) != len(want) and shards > rows:
                expect(False, f"shard_ranges({rows}, {shards}): a shard holds at least one row, so a "
                       f"{rows}-row variable gets {rows} shards at most, not {len(got)}.")
            sizes = [b - a for a, b in got]
            if sorted(sizes) == sorted(b - a for a, b in want) and got != want:
                expect(False, f"shard_ranges({rows}, {shards}) = {got}: right sizes, wrong order. "
                       "TensorFlow gives the extra rows to the *first* shards.")
            expect(
                got == want,
                f"shard_ranges({rows}, {shards}) should be {want}, got {got}. Cut the rows into "
                "min(num_shards, rows) consecutive ranges; sizes differ by at most one, larger first.",
            )
        if observed:
            for name, layout in observed.items():
                rows = layout[-1][1]
                real = [(int(a), int(b)) for a, b, _ in layout]
                mine = [tuple(int(v) for v in r) for r in shard_ranges(rows, len(real))]
                expect(mine == real, f"The cluster cut {name!r} into {real}; your function says {mine}.")
    passed("shard_ranges", "your shards match the ones the parameter servers hold.")


def check_count_copies(count_copies: Callable[[Any], int]) -> None:
    """``count_copies(strategy)``: how many physical copies of one variable the strategy keeps."""
    import tensorflow as tf

    from ..devices import cpu_count

    with exercise("count_copies"):
        got = count_copies(tf.distribute.get_strategy())
        expect(int(got) == 1, f"The default strategy keeps 1 copy of a variable; your function says {got!r}.")
        n = cpu_count()
        if n >= 2:
            devices = [f"/cpu:{i}" for i in range(n)]
            mirrored = mirrored_cpus(n)
            got = int(count_copies(mirrored))
            expect(
                got == n,
                f"MirroredStrategy over {n} CPUs keeps {n} copies (one per replica); your function says "
                f"{got}. Create a tf.Variable inside strategy.scope() and count "
                "strategy.experimental_local_results(variable). (A Keras 3 variable wraps the "
                "tf.Variable: count its .value.)",
            )
            central = tf.distribute.experimental.CentralStorageStrategy(
                compute_devices=devices, parameter_device="/cpu:0"
            )
            got = int(count_copies(central))
            expect(
                got == 1,
                f"CentralStorageStrategy keeps 1 copy, on its parameter device, however many replicas "
                f"compute; your function says {got}.",
            )
    passed("count_copies", "default 1, Mirrored one per replica, CentralStorage 1.")


def check_ps_dataset_fn(ps_dataset_fn: Callable[[Any], Any], global_batch: int = 16) -> None:
    """``ps_dataset_fn(input_context)``: a per-worker dataset for ``ParameterServerStrategy``."""
    import numpy as np
    import tensorflow as tf

    with exercise("ps_dataset_fn"):
        context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
        dataset = ps_dataset_fn(context)
        expect(isinstance(dataset, tf.data.Dataset), f"Return a tf.data.Dataset, not {type(dataset).__name__}.")
        batches = [b for b in dataset.take(40)]
        expect(
            len(batches) == 40,
            f"The dataset ended after {len(batches)} batches: a worker asks for batches as long as "
            "the coordinator schedules steps, so .repeat() it (training is counted in steps, not epochs).",
        )
        first = batches[0][0] if isinstance(batches[0], (tuple, list)) else batches[0]
        expect(
            int(first.shape[0]) == global_batch,
            f"Each batch should hold {global_batch} examples (input_context.get_per_replica_batch_size"
            f"({global_batch}) with one replica per step), got {int(first.shape[0])}.",
        )
        values = [np.asarray(b[0] if isinstance(b, (tuple, list)) else b) for b in batches[:8]]
        flat = np.concatenate([v.reshape(len(v), -1) for v in values])
        plain = np.asarray(ps_examples()[0][: len(flat)]).reshape(len(flat), -1)
        expect(
            not np.array_equal(flat, plain),
            "The batches come in the order of the examples: shuffle them. With a parameter server "
            "every worker gets input_pipeline_id 0 and reads the whole dataset; without a "
            "shuffle, all workers would train on the same batches in the same order.",
        )
    passed("ps_dataset_fn", "shuffled, repeated, batched per replica.")


def ps_examples() -> tuple[Any, Any]:
    """The examples of the ``ps_dataset_fn`` exercise (features, labels)."""
    from ..workers.parameter_servers import make_examples

    return make_examples(256)


#: The decision table of notebook 08, as (tpu, asynchronous, machines > 1, devices > 1) -> strategy.
def reference_strategy(machines: int, devices_per_machine: int, tpu: bool = False, asynchronous: bool = False) -> str:
    if tpu:
        return "TPUStrategy"
    if asynchronous:
        return "ParameterServerStrategy"
    if machines > 1:
        return "MultiWorkerMirroredStrategy"
    if devices_per_machine > 1:
        return "MirroredStrategy"
    return "OneDeviceStrategy"


def check_choose_strategy(choose_strategy: Callable[..., str]) -> None:
    """``choose_strategy(machines, devices_per_machine, tpu=False, asynchronous=False)``."""
    cases = [
        ((1, 1), {}),
        ((1, 4), {}),
        ((4, 8), {}),
        ((2, 1), {}),
        ((1, 8), {"tpu": True}),
        ((8, 4), {"asynchronous": True}),
        ((1, 2), {"asynchronous": True}),
        ((16, 8), {"tpu": True}),
    ]
    with exercise("choose_strategy"):
        for args, kwargs in cases:
            got = choose_strategy(*args, **kwargs)
            want = reference_strategy(*args, **kwargs)
            text = ", ".join([str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()])
            expect(
                isinstance(got, str) and got.replace("tf.distribute.", "").replace("experimental.", "") == want,
                f"choose_strategy({text}) should be {want!r}, got {got!r}. Read the decision table "
                "from the top: TPU first, then asynchronous training, then several machines, then "
                "several devices on one machine.",
            )
    passed("choose_strategy", "your choices follow the decision table.")
