"""Notebook 01: the checks of its exercises (data parallelism)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..checks import exercise, expect, expect_close, passed
from ..compare import factor, flat
from ..runtime import import_tensorflow as _tf
from ..strategies import mirrored_cpus
from . import harness, in_kernel, unseen


def mean_loss_gradient(params: dict, x: np.ndarray, y: np.ndarray) -> dict:
    """The checks' own reference: the gradient of the mean softmax cross-entropy of ``x`` on one
    device, ``{"kernel": ..., "bias": ...}``."""
    logits = x @ params["kernel"] + params["bias"]
    dlogits = np.exp(logits - logits.max(axis=1, keepdims=True))
    dlogits /= dlogits.sum(axis=1, keepdims=True)
    dlogits[np.arange(len(y)), y] -= 1.0
    return {"kernel": x.T @ dlogits / len(x), "bias": dlogits.mean(axis=0)}


#: (replicas, global batch) of ``data_parallel_gradient``'s cases: even shards, one replica, and
#: uneven shards, split as ``tf.distribute`` splits a batch (``shard``): 4 + 4 + 2, 5 + 5 + 5 + 5 + 3, 4 + 3.
GRADIENT_CASES = [(2, 24), (1, 24), (4, 24), (3, 10), (5, 23), (2, 7)]


def shard(a: np.ndarray, replicas: int) -> list[np.ndarray]:
    """Notebook 01's ``shard``, tf.distribute's split: ceil(len(a) / N) each until ``a`` runs out."""
    per = -(-len(a) // replicas)
    return [a[r * per : (r + 1) * per] for r in range(replicas)]


#: The notebook's ``GLOBAL_BATCH``: a constant some answers divide by instead of these shards' total.
NOTEBOOK_GLOBAL_BATCH = 64

#: Wrong ways to combine the replicas' local means (one array each) and shard sizes that real code
#: contains, and the hint that names each (B: the global batch).
COMBINE_MISTAKES: dict[str, Callable[[list, list], Any]] = {
    "added": lambda g, n: sum(g),
    "alike": lambda g, n: sum(g) / len(g),
    "twice": lambda g, n: sum(g) / len(g) ** 2,
    "averaged": lambda g, n: sum(k / sum(n) * m for k, m in zip(n, g)) / len(g),
    "over B": lambda g, n: sum(g) / sum(n),
    "sizes only": lambda g, n: sum(k * m for k, m in zip(n, g)),
    "first x N": lambda g, n: sum(k / (n[0] * len(n)) * m for k, m in zip(n, g)),
    "over N": lambda g, n: sum(k / len(n) * m for k, m in zip(n, g)),
    "notebook B": lambda g, n: sum(k / NOTEBOOK_GLOBAL_BATCH * m for k, m in zip(n, g)),
}
COMBINE_HINTS = {
    "added": "you added the local means, weight 1 each: each divides by its own shard, so N times too big",
    "alike": "you weighted every replica alike (a mean of means): the short shard counted as much as a full one",
    "twice": "you divided by the number of replicas twice: size / global batch weights already sum to one",
    "averaged": "you divided by N after weighting by size / B: an all-reduce sums, it never averages",
    "over B": "you divided each local mean by the global batch: multiply it by its shard size first",
    "sizes only": "you multiplied by the shard sizes but never divided by the global batch B (their sum)",
    "first x N": "you took the global batch as the first shard's size x N: it is the SUM of the shard sizes",
    "over N": "you divided by the number of replicas where the global batch (the sum of the sizes) belongs",
    "notebook B": f"you divided by the notebook's GLOBAL_BATCH ({NOTEBOOK_GLOBAL_BATCH}): B is the sizes' sum",
}


def _local_means(params: dict, x: np.ndarray, y: np.ndarray, replicas: int) -> tuple[list[dict], list[int]]:
    """Each replica's mean gradient of its own shard (``tf.reduce_mean``'s), and the shard sizes."""
    shards = list(zip(shard(x, replicas), shard(y, replicas)))
    return [mean_loss_gradient(params, xs, ys) for xs, ys in shards], [len(xs) for xs, _ in shards]


def _flat(grads: dict) -> np.ndarray:
    return flat([grads["kernel"], grads["bias"]])


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=1e-9))


def check_data_parallel_gradient(data_parallel_gradient: Callable[[list, list], dict]) -> None:
    """``data_parallel_gradient(local_means, shard_sizes)``: the replicas' mean gradients of their own
    shards, combined, must equal one device's gradient of the whole batch."""
    drawn = unseen()  # grading: weights, examples and one more split the student never saw
    rng = np.random.default_rng(7 if drawn is None else drawn.randrange(2**31))
    cases = list(GRADIENT_CASES)
    if drawn is not None:
        replicas = drawn.randint(2, 5)
        batch = drawn.randint(replicas + 1, 24)
        while -(-batch // replicas) * (replicas - 1) >= batch:  # a replica with none (6 over 5: 2+2+2+0+0)
            batch = drawn.randint(replicas + 1, 24)
        cases.append((replicas, batch))
    params = {"kernel": 0.3 * rng.normal(size=(4, 3)), "bias": 0.1 * rng.normal(size=3)}
    x_all, y_all = rng.normal(size=(24, 4)), rng.integers(0, 3, size=24)
    with exercise("data_parallel_gradient"):
        runs = []  # (shard sizes, local means flattened, one device's gradient, the answer)
        for replicas, batch in cases:
            x, y = x_all[:batch], y_all[:batch]
            means, sizes = _local_means(params, x, y, replicas)
            got = data_parallel_gradient([{k: v.copy() for k, v in m.items()} for m in means], list(sizes))
            expect(
                isinstance(got, dict) and set(got) == {"kernel", "bias"},
                "Return a dict with the keys of a local mean, 'kernel' and 'bias' (got "
                f"{type(got).__name__}{' with keys ' + str(sorted(got)) if isinstance(got, dict) else ''}).",
            )
            for name in ("kernel", "bias"):
                shape = np.shape(got[name])
                expect(
                    shape == means[0][name].shape,
                    f"The '{name}' gradient must have the shape of a local mean's, "
                    f"{means[0][name].shape} (got {shape}).",
                )
            single = _flat(mean_loss_gradient(params, x, y))
            runs.append((sizes, [_flat(m) for m in means], single, _flat(got)))
        wrong = [run for run in runs if not _close(run[3], run[2])]
        if wrong:
            sizes, _, single, answer = wrong[0]
            where = f"On shards {' + '.join(map(str, sizes))}"
            ratio = factor(answer, single)
            for name, mistake in COMBINE_MISTAKES.items():
                if all(_close(answer_r, mistake(means_r, sizes_r)) for sizes_r, means_r, _, answer_r in runs):
                    expect(False, f"{where}: {COMBINE_HINTS[name]} (yours is {ratio:.2f}x one device's).")
            expect_close(
                answer,
                single,
                f"{where}: this is not one device's gradient of the whole batch: a local mean divides by "
                "its own shard, one device by the whole batch",
                rtol=1e-6,
                atol=1e-9,
            )
    uneven = [" + ".join(map(str, run[0])) for run in runs if len(set(run[0])) > 1]
    passed(
        "data_parallel_gradient",
        f"one device's gradient on 1 to 5 replicas, uneven shards ({', '.join(uneven)}) included.",
    )


#: (replicas, global batch) of ``replica_step``'s cases: one device, even shards, a short last batch.
STEP_CASES = [(1, 16), (2, 16), (2, 7)]

#: A right float32 answer against the float64 reference: at most 6.6e-8 apart (20 seeds, every case).
STEP_TOLERANCE = 1e-6


def _step_hint(parts: list[np.ndarray], shares: list[np.ndarray], batch: int) -> str:
    """What a wrong ``replica_step`` did, from each replica's gradient and its right share."""
    replicas, total, single = len(parts), sum(parts), sum(shares)
    on = f"on {replicas} replica{'s' * (replicas > 1)}, a global batch of {batch}"
    f = factor(total, single)
    if np.allclose(total, single, rtol=0, atol=STEP_TOLERANCE):  # right sum, wrong parts
        return (
            f"{on}: the replicas' gradients add up right, but each must be its own share, not a mean of all"
        )
    if not np.allclose(total, f * single, rtol=1e-4, atol=STEP_TOLERANCE):  # no single factor
        if batch % replicas:
            return (
                f"{on} split unevenly: you divide by your replica's batch x replicas (compute_average_loss's "
                "default), which is not the global batch here; divide by global_batch"
            )
        return f"{on}: the replicas' sum is not one device's gradient (mismatch {np.abs(total - single).max():.1e})"
    if abs(f - replicas) < 1e-3 < replicas - 1:
        if all(np.allclose(p, parts[0], rtol=0, atol=STEP_TOLERANCE) for p in parts):
            return (
                f"{on}: {f:.2f}x one device's: every replica returns the all-reduced gradient and "
                "strategy.reduce adds the copies again; return this replica's own gradient"
            )
        return f"{on}: {f:.2f}x one device's: each replica averages over its own examples (tf.reduce_mean?); divide by the global batch"
    return f"{on}: {f:.2f}x one device's: you divide by {batch / f:.3g}, not by the global batch ({batch})"


@harness
def replica_step_run(
    make_replica_step: Callable[..., Any], replicas: int, params: list, x: np.ndarray, y: np.ndarray
) -> dict[str, Any]:
    """``make_replica_step(kernel, bias, len(x))``'s step run by ``strategy.run`` in a ``tf.function``
    on ``replicas`` (1: the default strategy) from ``params`` ``[kernel, bias]``, on the global batch
    ``(x, y)``: whether it made a function, what ``replica_step`` returned (its type, its length) and,
    for each thing it returned, each replica's value as an array (``None`` for ``None``)."""
    tf = _tf()
    strategy = _one_device() if replicas == 1 else mirrored_cpus(replicas, needed_by="This check")
    with strategy.scope():
        kernel, bias = (tf.Variable(p, dtype=tf.float32) for p in params)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(len(x))
    x_dist, y_dist = next(iter(strategy.experimental_distribute_dataset(data)))
    replica_step = make_replica_step(kernel, bias, len(x))
    if not callable(replica_step):
        return {"callable": False}
    result = tf.function(lambda a, b: strategy.run(replica_step, args=(a, b)))(x_dist, y_dist)
    pair = isinstance(result, (list, tuple)) and len(result) == 2
    local = [list(strategy.experimental_local_results(g)) for g in result] if pair else []
    return {
        "callable": True,
        "type": type(result).__name__,
        "length": len(result) if isinstance(result, (list, tuple)) else None,
        "local": [[None if t is None else _array(t) for t in values] for values in local],
    }


def _array(value: Any) -> np.ndarray:
    """A replica's value as numbers: a tensor's, or NaNs of its shape for what is not numbers."""
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    return array if array.dtype.kind in "biuf" else np.full(tuple(getattr(value, "shape", ())), np.nan)


def check_replica_step(make_replica_step: Callable[..., Any]) -> None:
    """``make_replica_step(kernel, bias, global_batch)`` returns ``replica_step(x, y)``, this replica's
    gradients ``[kernel, bias]``; run by ``strategy.run`` in a ``tf.function`` on 1 and 2 replicas
    (a short batch too), each replica's must be the gradient of its examples' loss sum / the global batch.
    The run is :func:`replica_step_run`'s; the judgement and the references are here."""
    drawn = unseen()
    rng = np.random.default_rng(11 if drawn is None else drawn.randrange(2**31))
    params = {"kernel": 0.3 * rng.normal(size=(4, 3)), "bias": 0.1 * rng.normal(size=3)}
    x_all, y_all = rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 3, size=16).astype(np.int32)
    with exercise("replica_step"):
        for replicas, batch in STEP_CASES:
            x, y = x_all[:batch], y_all[:batch]
            ran = in_kernel(
                replica_step_run, make_replica_step, replicas, [params["kernel"], params["bias"]], x, y
            )
            expect(
                isinstance(ran, dict) and ran.get("callable") is True,
                "make_replica_step must return the function replica_step(x, y).",
            )
            length = ran.get("length")
            expect(
                ran.get("type") in ("list", "tuple") and length == 2,
                "replica_step must return this replica's gradients [kernel, bias] "
                f"(got {ran.get('type')}{f' of {length}' if isinstance(length, int) else ''}).",
            )
            local = ran.get("local")
            local = local if isinstance(local, list) and all(isinstance(v, list) for v in local) else []
            values = [t for v in local for t in v]
            expect(
                not any(t is None for t in values),
                "tape.gradient gave None: compute the loss inside the tape, from kernel and bias.",
            )
            shapes = [tuple(np.shape(t)) for t in values]
            expect(
                shapes == [(4, 3)] * replicas + [(3,)] * replicas
                and [len(v) for v in local] == [replicas] * 2,
                f"replica_step must return [kernel gradient (4, 3), bias gradient (3,)] in that order (got shapes {shapes}).",
            )
            parts = [_flat({"kernel": k, "bias": b}) for k, b in zip(*local)]
            shards = zip(shard(x.astype(np.float64), replicas), shard(y, replicas))
            shares = [_flat(mean_loss_gradient(params, xs, ys)) * len(ys) / batch for xs, ys in shards]
            if not all(np.allclose(p, s, rtol=0, atol=STEP_TOLERANCE) for p, s in zip(parts, shares)):
                expect(False, _step_hint(parts, shares, batch) + ".")
    passed(
        "replica_step",
        "each replica's gradient is its share of one device's on 1 and 2 replicas (16 and 7 examples).",
    )


#: The epoch of ``updates_per_epoch``: examples in the data set, examples per replica per step.
EPOCH_EXAMPLES, PER_REPLICA_BATCH = 1_000, 32


def epoch_batches(strategy: Any, examples: int, per_replica_batch: int) -> list[list[int]]:
    """Run one epoch of ``range(examples)`` through ``strategy`` with ``per_replica_batch``
    examples per replica; for each step (one update), the number of examples on each replica."""
    import tensorflow as tf

    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(examples).batch(global_batch)
    return [
        [int(t.shape[0]) for t in strategy.experimental_local_results(batch)]
        for batch in strategy.experimental_distribute_dataset(dataset)
    ]


def _two_replicas() -> Any:
    return mirrored_cpus(2, needed_by="This check")


def _one_device() -> Any:
    import tensorflow as tf

    return tf.distribute.get_strategy()


def check_updates_per_epoch(prediction: Any) -> None:
    """``UPDATES_ON_2_REPLICAS``: the updates of one epoch on 2 replicas, counted by running it."""
    with exercise("updates_per_epoch"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        expect(
            isinstance(prediction, (int, float, np.integer, np.floating)) and float(prediction).is_integer(),
            f"Predict a whole number of updates (got {prediction!r}): every step makes one update, "
            "and a step cannot be split.",
        )
        guess = int(prediction)
        two = epoch_batches(_two_replicas(), EPOCH_EXAMPLES, PER_REPLICA_BATCH)
        one = epoch_batches(_one_device(), EPOCH_EXAMPLES, PER_REPLICA_BATCH)
        measured, full = len(two), EPOCH_EXAMPLES // (2 * PER_REPLICA_BATCH)
        # The hints name the mistake, never the count the run made (the pass line shows it).
        expect(
            guess != len(one) or len(one) == measured,
            f"You predicted {guess}, what ONE device makes with batches of {PER_REPLICA_BATCH}. On 2 "
            f"replicas every update takes {PER_REPLICA_BATCH} examples on EACH replica, "
            f"{2 * PER_REPLICA_BATCH} in all.",
        )
        expect(
            guess != full or full == measured,
            f"You predicted {guess}, the FULL global batches only: the last, shorter one "
            f"({' + '.join(map(str, two[-1]))} examples on the replicas) is a step and an update too.",
        )
        expect(
            guess == measured,
            f"You predicted {guess}, not what the run on 2 replicas made. One update consumes a global "
            f"batch, {PER_REPLICA_BATCH} examples per replica x 2 replicas; count the last, short one too.",
        )
    passed(
        "updates_per_epoch",
        f"{measured} updates on 2 replicas ({sum(two[0])} examples each, the last "
        f"{' + '.join(map(str, two[-1]))}), {len(one)} on one device ({sum(one[0])} each, the last {sum(one[-1])}).",
    )


def _ring_bytes(num_params: int, replicas: int, width: int) -> float:
    """Bytes each device sends in one ring all-reduce: 2 (N-1)/N x the gradient's bytes."""
    return 2 * (replicas - 1) / replicas * num_params * width


def _steps(examples: int, per_replica_batch: int, replicas: int) -> int:
    """Steps of one epoch: global batches, the last, shorter one included."""
    return -(-examples // (per_replica_batch * replicas))


#: ``epoch_traffic``'s cases: (parameters, examples, per-replica batch, replicas, bytes per parameter).
TRAFFIC_CASES = [
    (1_000, EPOCH_EXAMPLES, PER_REPLICA_BATCH, 2, 4),
    (1_000, EPOCH_EXAMPLES, 2 * PER_REPLICA_BATCH, 2, 4),
    (1_000, EPOCH_EXAMPLES, PER_REPLICA_BATCH, 1, 4),
    (121_930, 60_000, 64, 8, 4),
    (25_636_712, 1_281_167, 32, 64, 2),
]

#: Wrong answers to ``epoch_traffic`` that real code contains, and the hint that names each (never a step
#: count or a ratio to the answer: only the student's own bytes follow it).
TRAFFIC_MISTAKES: dict[str, Callable[[int, int, int, int, int], float]] = {
    "one step": lambda m, e, b, n, w: _ring_bytes(m, n, w),
    "per replica": lambda m, e, b, n, w: -(-e // b) * _ring_bytes(m, n, w),
    "floor": lambda m, e, b, n, w: e // (b * n) * _ring_bytes(m, n, w),
    "fraction": lambda m, e, b, n, w: e / (b * n) * _ring_bytes(m, n, w),
    "round": lambda m, e, b, n, w: round(e / (b * n)) * _ring_bytes(m, n, w),
    "reduce-scatter": lambda m, e, b, n, w: _steps(e, b, n) * _ring_bytes(m, n, w) / 2,
    "whole chunks": lambda m, e, b, n, w: _steps(e, b, n) * _ring_bytes(m, n, w) * n,
    "server": lambda m, e, b, n, w: _steps(e, b, n) * n * m * w,
    "bound": lambda m, e, b, n, w: _steps(e, b, n) * 2 * m * w,
    "4 bytes": lambda m, e, b, n, w: _steps(e, b, n) * _ring_bytes(m, n, 4),
    "numbers": lambda m, e, b, n, w: _steps(e, b, n) * _ring_bytes(m, n, 1),
    "batch": lambda m, e, b, n, w: _steps(e, b, n) * _ring_bytes(m, n, w) * b,
    "one device": lambda m, e, b, n, w: _steps(e, b, n) * 2 * max(n - 1, 1) / n * m * w,
}
TRAFFIC_HINTS = {
    "one step": "that is ONE step's traffic; an epoch makes many steps, each all-reducing the gradient",
    "per replica": "a step takes {batch} examples on EACH of {n} replicas: count global batches, not one replica's",
    "floor": "you dropped the last, shorter batch: it is a step too, with a full-size gradient",
    "fraction": "steps are whole: the last, short batch is one more step, not a fraction of one",
    "round": "round the steps UP: the last, shorter batch is a step too",
    "reduce-scatter": "that is the reduce-scatter alone: the all-gather sends as much again",
    "whole chunks": "each of a device's 2 (N-1) sends is ONE chunk, 1/N of the gradient (not all N devices')",
    "server": "that is one parameter server's traffic (N models a step), not a ring device's 2 (N-1)/N",
    "bound": "2 x the gradient is the ring's bound, not its traffic: 2 (N-1)/N x the gradient a step",
    "4 bytes": "you ignored bytes_per_param ({width} here): a gradient is num_params x that many bytes",
    "numbers": "that counts numbers, not bytes: multiply by bytes_per_param ({width} here)",
    "batch": "a gradient is as big as the model whatever the batch size: do not multiply by the batch",
    "one device": "on 1 replica the traffic should be 0: one device has nobody to send to",
}


def _is_number(value: Any) -> bool:
    try:
        return bool(np.ndim(value) == 0 and np.isfinite(float(value)))
    except (TypeError, ValueError):
        return False


def check_epoch_traffic(epoch_traffic: Callable[..., float]) -> None:
    """``epoch_traffic(num_params, examples, per_replica_batch, replicas, bytes_per_param=4)``."""
    with exercise("epoch_traffic"):
        steps_two = len(epoch_batches(_two_replicas(), EPOCH_EXAMPLES, PER_REPLICA_BATCH))
        runs = []  # (case, steps, the right bytes, the answer)
        cases = list(TRAFFIC_CASES)
        if (rng := unseen()) is not None:  # grading: a model and a cluster the student never saw
            params, examples, n = rng.randint(10**3, 10**7), rng.randint(10**3, 10**6), rng.randint(2, 16)
            cases.append((params, examples, rng.choice([16, 32, 64]), n, rng.choice([2, 4])))
        for params, examples, batch, n, width in cases:
            got = epoch_traffic(params, examples, batch, n, width)
            expect(
                _is_number(got),
                f"epoch_traffic({params}, {examples}, {batch}, {n}, {width}) returned {got!r}; return "
                "a number of bytes.",
            )
            if (n, examples, batch) == (2, EPOCH_EXAMPLES, PER_REPLICA_BATCH):
                steps = steps_two  # counted by running the epoch on 2 replicas
            else:
                steps = _steps(examples, batch, n)
            want = steps * _ring_bytes(params, n, width)
            runs.append(((params, examples, batch, n, width), steps, want, float(got)))
        wrong = [run for run in runs if not np.isclose(run[3], run[2], rtol=1e-9, atol=1e-6)]
        if wrong:
            (params, examples, batch, n, width), _, want, got = wrong[0]
            case = (
                f"epoch_traffic({params:,}, examples={examples:,}, per_replica_batch={batch}, replicas={n})"
            )
            facts = dict(batch=batch, n=n, width=width)
            for name, mistake in TRAFFIC_MISTAKES.items():
                if all(np.isclose(run[3], mistake(*run[0]), rtol=1e-9, atol=1e-6) for run in runs):
                    expect(False, f"{case}: {TRAFFIC_HINTS[name].format(**facts)} (yours: {got:,.0f} bytes).")
            expect(
                want != 0,
                f"{case} should be 0: one device has nobody to send to (got {got:,.0f}).",
            )
            expect_close(
                got,
                want,
                f"{case}: count the steps of an epoch and what one ring all-reduce sends",
                rtol=1e-9,
                atol=1e-6,
            )
    passed(
        "epoch_traffic",
        "steps of the global batch (the last one too) x 2 (N-1)/N x gradient bytes; nothing on one device.",
    )


def reference_solutions() -> dict[str, Any]:
    """Correct versions of the exercises (for tests and instructors)."""

    def data_parallel_gradient(local_means, shard_sizes):
        global_batch = sum(shard_sizes)
        return {
            k: sum(size / global_batch * g[k] for size, g in zip(shard_sizes, local_means))
            for k in ("kernel", "bias")
        }

    def epoch_traffic(num_params, examples, per_replica_batch, replicas, bytes_per_param=4):
        steps = -(-examples // (per_replica_batch * replicas))
        return steps * 2 * (replicas - 1) / replicas * num_params * bytes_per_param

    def make_replica_step(kernel, bias, global_batch):
        import tensorflow as tf

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ kernel + bias)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            return tape.gradient(loss, [kernel, bias])

        return replica_step

    return {
        "replica_step": make_replica_step,
        "data_parallel_gradient": data_parallel_gradient,
        "updates_per_epoch": 16,
        "epoch_traffic": epoch_traffic,
    }
