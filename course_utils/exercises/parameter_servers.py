"""Notebook 08: the checks of its exercises (parameter servers and central storage)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..checks import exercise, expect, passed
from ..strategies import mirrored_cpus


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
                expect(
                    False,
                    f"shard_ranges({rows}, {shards}): a shard holds at least one row, so a "
                    f"{rows}-row variable gets {rows} shards at most, not {len(got)}.",
                )
            sizes = [b - a for a, b in got]
            if sorted(sizes) == sorted(b - a for a, b in want) and got != want:
                expect(
                    False,
                    f"shard_ranges({rows}, {shards}) = {got}: right sizes, wrong order. "
                    "TensorFlow gives the extra rows to the *first* shards.",
                )
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


#: The variables of the ``shards`` run (created in this order) and its partitioner.
SHARD_ROWS = (300, 1000)
SHARD_MIN_BYTES = 16 << 10
SHARD_MAX = 4


def reference_shard_count(
    rows: int,
    columns: int = 32,
    bytes_per_value: int = 4,
    min_shard_bytes: int = SHARD_MIN_BYTES,
    max_shards: int = SHARD_MAX,
) -> int:
    """The shards ``MinSizePartitioner`` gives a ``(rows, columns)`` variable: TensorFlow's
    ``min_max_variable_partitioner`` rounds ``bytes / min_shard_bytes`` *up*, then caps it by
    ``max_shards`` and by the rows."""
    import math

    return max(1, min(rows, max_shards, math.ceil(rows * columns * bytes_per_value / min_shard_bytes)))


def _ps_index(device: str) -> int:
    return int(str(device).split()[-1])


def check_shard_count(prediction: Any, observed: Optional[dict[str, list]] = None) -> None:
    """``prediction``: ``{"embedding_300": n, "embedding_1000": m}``, the shards each embedding
    gets under ``MinSizePartitioner(min_shard_bytes=16 KiB, max_shards=4)``.

    ``observed`` is the layout the parameter-server cluster reported (``shards`` run); without
    it the check asks TensorFlow's partitioner itself.
    """
    import tensorflow as tf

    keys = [f"embedding_{rows}" for rows in SHARD_ROWS]
    with exercise("shard_count"):
        expect(
            isinstance(prediction, dict) and set(prediction) == set(keys),
            f"Set PREDICTION to a dict with the keys {keys} (a whole number each), got {prediction!r}.",
        )
        expect(
            all(isinstance(prediction[k], int) and not isinstance(prediction[k], bool) for k in keys),
            f"Each prediction is a whole number of shards: {prediction!r}.",
        )
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=SHARD_MIN_BYTES, max_shards=SHARD_MAX
        )
        for rows, key in zip(SHARD_ROWS, keys):
            real = int(partitioner(tf.TensorShape([rows, 32]), tf.float32)[0])
            if observed and key in observed:
                real = len(observed[key])  # what the cluster really did
            got = prediction[key]
            kib = rows * 32 * 4 / 1024
            if got == real:
                continue
            floor = int(kib // 16)
            expect(
                not (got == floor and floor <= SHARD_MAX),
                f"{key}: {kib:g} KiB / 16 KiB = {kib / 16:.2f}, and you rounded down to {got}. "
                f"TensorFlow rounds the count up (section 5: 125 KiB with 64 KiB made 2 shards of "
                f"62.5 KiB each), then caps it by max_shards. The cluster made {real}.",
            )
            expect(
                got <= SHARD_MAX,
                f"{key}: {got} shards is more than max_shards={SHARD_MAX}, the cap. The cluster made {real}.",
            )
            expect(
                got != 2,
                f"{key}: you predicted 2, one shard per parameter server. The shard count does not "
                f"follow the servers: MinSizePartitioner cuts {kib:g} KiB by size, and the 2 servers "
                f"take the shards in turn. The cluster made {real}.",
            )
            expect(
                False,
                f"{key}: you predicted {got}, the cluster made {real}: ceil({kib:g} KiB / "
                f"16 KiB), at most max_shards={SHARD_MAX}.",
            )
    passed("shard_count", "ceil(size / min_shard_bytes), capped by max_shards, as the cluster did.")


def reference_ps_placement(shard_counts: list[int], num_ps: int) -> list[list[int]]:
    """Which parameter server holds each shard: ``ParameterServerStrategy`` places every variable
    it creates (each shard is one) on the next server in turn, with one counter for all of them."""
    out, count = [], 0
    for shards in shard_counts:
        out.append([(count + i) % num_ps for i in range(shards)])
        count += shards
    return out


def check_ps_placement(
    ps_placement: Callable[[list[int], int], list[list[int]]],
    observed: Optional[dict[str, list]] = None,
) -> None:
    """``ps_placement(shard_counts, num_ps)``: for variables created in this order with these
    numbers of shards, the parameter server of each shard (a list of lists of ints)."""
    cases = [
        ([3, 4], 2),
        ([1, 1, 1, 1, 1], 2),
        ([2, 1, 1], 2),
        ([4, 2], 3),
        ([3, 3, 1], 3),
        ([5], 2),
        ([1, 2], 4),
    ]
    with exercise("ps_placement"):
        for counts, num_ps in cases:
            raw = ps_placement(list(counts), num_ps)
            got = [[int(x) for x in shards] for shards in raw]
            want = reference_ps_placement(counts, num_ps)
            restart = [[i % num_ps for i in range(n)] for n in counts]
            whole = [[k % num_ps] * n for k, n in enumerate(counts)]
            expect(
                not (got == restart and got != want),
                f"ps_placement({counts}, {num_ps}) = {got}: you start every variable on ps 0. The "
                "strategy keeps one counter for every variable it creates, so the next variable "
                f"starts where the last shard left off: {want}.",
            )
            expect(
                not (got == whole and got != want),
                f"ps_placement({counts}, {num_ps}) = {got}: you put all shards of a variable on one "
                f"server. Each shard is a variable of its own and takes the next server: {want}.",
            )
            expect(got == want, f"ps_placement({counts}, {num_ps}) should be {want}, got {got}.")
        if observed:
            counts = [len(observed[key]) for key in observed]
            real = [[_ps_index(d) for _, _, d in observed[key]] for key in observed]
            got = [[int(x) for x in shards] for shards in ps_placement(counts, 2)]
            expect(got == real, f"The cluster placed the shards {real}; your function says {got}.")
    passed("ps_placement", "one counter for every shard, across variables, as the cluster placed them.")
