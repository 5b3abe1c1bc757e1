"""Notebook 08: the checks of its exercises (parameter servers and central storage).

The three coordinator checks run the student's code on the notebook's own in-process cluster
(the ``strategy`` and ``coordinator`` it made) and compare with one device through
:mod:`course_utils.compare`. Their steps are scheduled one at a time (``schedule`` then
``fetch``) wherever weights are compared: asynchronous steps that overlap read stale weights, so
only steps run in turn can equal one device's steps within float noise.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from ..devices import quiet_native_logs
from . import harness, in_kernel, unseen

#: The examples and the batch of the coordinator checks: 16 rows of 8 features, batches of 4.
ROWS, FEATURES, BATCH = 16, 8, 4
#: Relative tolerance of an update against one device's (float noise of a few SGD steps is ~1e-7).
RTOL = 1e-5
#: What the checks scheduled on the cluster, kept alive: a per-worker dataset or step freed while the
#: kernel is a coordinator makes TensorFlow print "Failed to remove function remotely" under a later cell.
_KEEP: list[Any] = []


@contextlib.contextmanager
def _on_the_cluster(exercise_id: str) -> Iterator[None]:
    """:func:`exercise`, with TensorFlow's native complaints about freed remote functions hidden
    (objects the student's code dropped are freed inside, before the check returns)."""
    with exercise(exercise_id), quiet_native_logs():
        try:
            yield
        finally:
            gc.collect()


def _examples(rows: int = ROWS, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A fixed regression problem; every row of ``x`` is distinct, so a row names its example."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES)).astype("float32")
    return x, (x @ rng.normal(size=(FEATURES, 1)) + 0.5).astype("float32")


def _model() -> Any:
    import keras

    return keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )


def _weights() -> list[np.ndarray]:
    """Fixed initial weights, drawn with NumPy: the notebook's global TensorFlow seed is left alone."""
    rng = np.random.default_rng(compare.SEED)
    return [rng.normal(scale=0.5, size=np.shape(w)).astype("float32") for w in _model().get_weights()]


def _reference_step(strategy: Any, model: Any, optimizer: Any, metric: Any) -> Callable[[Any], Any]:
    """One device's SGD step on the mean squared error (what :func:`compare.run` runs)."""
    import tensorflow as tf

    def step(batch: Any) -> Any:
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def _one_device(x: np.ndarray, y: np.ndarray, weights: list[np.ndarray]) -> compare.Run:
    """SGD(0.1) on one device, one step per ``BATCH`` rows of ``x``, in order."""
    return compare.run(
        compare.checking_strategy(1), _reference_step, (x, y), batch=BATCH, make_model=_model, weights=weights
    )


def _ps_model(strategy: Any, weights: list[np.ndarray]) -> tuple[Any, Any]:
    """The checks' model and ``SGD(0.1)`` made in the parameter-server strategy's scope."""
    import keras

    with strategy.scope():
        model = _model()
        model.set_weights(weights)
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    return model, optimizer


def _expect_cluster(strategy: Any, coordinator: Any) -> None:
    import tensorflow as tf

    expect(
        isinstance(strategy, tf.distribute.ParameterServerStrategy),
        f"Pass the check the notebook's ParameterServerStrategy (strategy=...), not {type(strategy).__name__}.",
    )
    expect(
        isinstance(coordinator, tf.distribute.coordinator.ClusterCoordinator),
        "Pass the check the notebook's ClusterCoordinator (coordinator=...).",
    )


def _schedule(coordinator: Any, step: Any, iterator: Any) -> Any:
    """``coordinator.schedule(step, args=(iterator,))`` with the hint for a plain Python function."""
    try:
        return coordinator.schedule(step, args=(iterator,))
    except TypeError as error:
        if "tf.function" in str(error):
            expect(
                False,
                "coordinator.schedule takes a tf.function: the coordinator sends the traced graph "
                "to a worker. Decorate your step with @tf.function.",
            )
        raise


@harness
def ps_step_run(
    make_train_step: Callable[..., Any], strategy: Any, coordinator: Any, steps: int
) -> dict[str, Any]:
    """The student's step scheduled ``steps`` times in turn on the notebook's cluster (one fixed batch,
    repeated), as plain data: the weights' change after the first step and after all, the losses."""
    import tensorflow as tf

    _expect_cluster(strategy, coordinator)
    x, y = _examples(BATCH)
    model, optimizer = _ps_model(strategy, _weights())
    step = make_train_step(strategy, model, optimizer)
    expect(step is not None, "make_train_step must return the step function (a tf.function).")
    iterator = iter(
        coordinator.create_per_worker_dataset(lambda: tf.data.Dataset.from_tensors((x, y)).repeat())
    )
    _KEEP.extend([step, iterator, model, optimizer])
    start = compare.flat(model.trainable_variables)
    losses, first = [], None
    for _ in range(steps):
        try:
            losses.append(_schedule(coordinator, step, iterator).fetch())
        except (RuntimeError, AttributeError) as error:  # the loss, or apply_gradients, outside a replica
            expect(
                "cross replica context" not in str(error) and "merge_call" not in str(error),
                "Your step ran its loss and gradients outside strategy.run: even with one "
                "replica per step, call them through strategy.run(replica_fn, args=(features, labels)).",
            )
            raise
        first = compare.flat(model.trainable_variables) - start if first is None else first
    update = compare.flat(model.trainable_variables) - start
    return {
        "first": first if first is not None else np.zeros_like(update),
        "update": update,
        "losses": [None if v is None else np.asarray(v, np.float64) for v in losses],
    }


def check_ps_train_step(
    make_train_step: Callable[..., Any], strategy: Any, coordinator: Any, steps: int = 3
) -> None:
    """``make_train_step(strategy, model, optimizer)`` -> a ``tf.function`` that takes a per-worker
    iterator, runs one SGD step on the mean squared error of its next batch and returns the loss.

    Scheduled ``steps`` times in turn on the notebook's cluster (one fixed batch, repeated), it
    must move the weights as ``steps`` one-device steps on that batch do, within float noise.
    """
    with _on_the_cluster("ps_train_step"):
        x, y = _examples(BATCH)
        weights = _weights()
        run = in_kernel(ps_step_run, make_train_step, strategy, coordinator, steps)
        losses = list(run["losses"])
        first, update = np.asarray(run["first"], np.float64), np.asarray(run["update"], np.float64)
        reference = _one_device(np.tile(x, (steps, 1)), np.tile(y, (steps, 1)), weights)
        expect(
            len(losses) == steps and first.shape == update.shape == reference.update.shape,
            f"The cluster ran {len(losses)} of the {steps} steps scheduled.",
        )
        f = compare.factor(first, reference.first_update)
        expect(
            np.any(update),
            "The weights did not move: the step must apply its gradients "
            "(optimizer.apply_gradients(zip(grads, model.trainable_variables))).",
        )
        if compare.mismatch(first, reference.first_update) > RTOL:
            expect(
                abs(f - BATCH) > 0.05 * BATCH,
                f"The first step moved the weights {f:.2f}x as far as one device's: your loss is the "
                f"sum over the batch of {BATCH}; average it (tf.nn.compute_average_loss).",
            )
            expect(
                abs(f - 0.5) > 0.025,
                f"The first step moved the weights {f:.2f}x as far as one device's: you divided by "
                "the batch times the workers. Under ParameterServerStrategy a step runs on one worker "
                "on a whole batch (num_replicas_in_sync is 1): average over that batch.",
            )
            scaled = compare.mismatch(first, f * np.asarray(reference.first_update)) < 1e-3
            divisor = BATCH / f if scaled and 0.05 < f < 0.95 else 0.0
            expect(
                not (divisor > BATCH and abs(divisor - round(divisor)) < 0.05),
                f"The first step moved the weights {f:.2f}x as far as one device's: your loss divides "
                f"by {round(divisor)}, but the step's batch has {BATCH} examples. Average over the batch "
                "the step received (tf.nn.compute_average_loss(per_example), no global_batch_size).",
            )
            expect(
                abs(f + 1) > 0.05,
                "The weights moved away from the data: subtract the gradients (apply_gradients does).",
            )
            expect(
                False,
                f"The first step moved the weights {f:.2f}x as far as one device's SGD step on the "
                f"mean squared error (mismatch {compare.mismatch(first, reference.first_update):.1e}).",
            )
        expect(
            compare.mismatch(update, reference.update) <= RTOL,
            f"{steps} scheduled steps moved the weights unlike {steps} one-device steps (mismatch "
            f"{compare.mismatch(update, reference.update):.1e}) though the first matched.",
        )
        got = [np.asarray(v, np.float64) for v in losses]
        expect(
            all(v is not None for v in losses) and all(v.size == 1 for v in got),
            "Return the loss from the step (one number: strategy.run's result, reduced with "
            "strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None)).",
        )
        want = [v for v in reference.losses if v is not None]
        expect(
            np.allclose([float(v.reshape(-1)[0]) for v in got], want, rtol=1e-4),
            f"The weights match one device, but the losses you return are "
            f"{[round(float(v.reshape(-1)[0]), 4) for v in got]}, not {[round(v, 4) for v in want]}.",
        )
    passed("ps_train_step", f"{steps} scheduled steps move the weights as {steps} one-device SGD steps do.")


@harness
def ps_loop_run(run_steps: Callable[..., Any], strategy: Any, coordinator: Any, steps: int) -> dict[str, Any]:
    """The student's ``run_steps`` on the notebook's cluster with the check's step (it adds 2.0 to a
    variable and does some work), as plain data: whether every step had finished when it returned, how
    many ran, what they added, and what it returned (each result a number, or "RemoteValue")."""
    import tensorflow as tf

    _expect_cluster(strategy, coordinator)
    with strategy.scope():
        total = tf.Variable(0.0)
        count = tf.Variable(0, dtype=tf.int64)
    work = tf.random.stateless_normal((96, 96), seed=(1, 2))

    @tf.function
    def step(iterator: Any) -> Any:
        value = next(iterator)
        busy = tf.foldl(lambda a, _: tf.tanh(a @ work), tf.range(30), initializer=work)
        total.assign_add(value + 0.0 * tf.reduce_sum(busy))
        count.assign_add(1)
        return value

    iterator = iter(coordinator.create_per_worker_dataset(lambda: tf.data.Dataset.from_tensors(2.0).repeat()))
    _KEEP.extend([step, iterator, total, count])
    try:
        results = run_steps(coordinator, step, iterator, steps)
        finished = coordinator.done()
    except TypeError as error:
        expect(
            "must be an iterable" not in str(error),
            "Pass the step's arguments as a tuple: coordinator.schedule(step, args=(iterator,)).",
        )
        raise
    except AttributeError as error:
        expect(
            "iterator" not in str(error),
            "Run each step with coordinator.schedule(step, args=(iterator,)): called directly, "
            "step(iterator) runs on the coordinator, which holds none of the workers' datasets.",
        )
        raise
    finally:
        coordinator.join()

    def plain(result: Any) -> Any:
        if hasattr(result, "fetch"):
            return "RemoteValue"
        try:
            return float(np.asarray(result).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            return repr(result)[:40]

    listed = isinstance(results, (list, tuple))
    return {
        "finished": bool(finished),
        "count": int(count.numpy()),
        "total": float(total.numpy()),
        "results": [plain(r) for r in results] if listed else None,
        "results_type": type(results).__name__,
        "results_text": repr(results)[:200],
    }


def check_ps_schedule_loop(
    run_steps: Callable[..., Any], strategy: Any, coordinator: Any, steps: int = 6
) -> None:
    """``run_steps(coordinator, step, iterator, steps)``: schedule ``steps`` steps, wait for all of
    them, return their results as values (a list, in order).

    The check's step adds its batch (the number 2.0) to a variable with ``assign_add``, which no
    overlap can lose, and does some work, so that a loop that returns without waiting is caught
    while its steps still run. ``steps`` of them on one device add ``2.0 x steps``.
    """
    import tensorflow as tf

    with _on_the_cluster("ps_schedule_loop"):
        run = in_kernel(ps_loop_run, run_steps, strategy, coordinator, steps)
        expect(
            bool(run["finished"]),
            "Your loop returned while steps were still running: schedule() only queues a step. "
            "Call coordinator.join() before you return.",
        )
        expect(
            int(run["count"]) == steps,
            f"run_steps(..., steps={steps}) ran {int(run['count'])} steps: schedule once per step.",
        )
        results = run["results"]
        expect(
            isinstance(results, list),
            f"Return the {steps} results in a list, one per step, not a {run['results_type']}.",
        )
        expect(
            len(results) == steps,
            f"Return the {steps} results in a list, one per step: yours has {len(results)}.",
        )
        expect(
            "RemoteValue" not in results,
            "You returned RemoteValues (futures). After join(), read each with .fetch().",
        )
        one_device = tf.Variable(0.0)
        plain = iter(tf.data.Dataset.from_tensors(2.0).repeat())
        for _ in range(steps):
            one_device.assign_add(next(plain))
        total = float(run["total"])
        expect(
            abs(total - float(one_device.numpy())) < 1e-6,
            f"The {steps} steps added {total:g}; on one device they add {float(one_device.numpy()):g}.",
        )
        expect(
            all(isinstance(r, float) and abs(r - 2.0) < 1e-6 for r in results),
            f"Return what each step returned (2.0 each here), not {run['results_text']}.",
        )
    passed("ps_schedule_loop", f"{steps} steps scheduled, joined and fetched; the same sum as one device.")


@harness
def ps_input_run(make_iterator: Callable[..., Any], strategy: Any, coordinator: Any) -> dict[str, Any]:
    """The student's per-worker iterator on the notebook's cluster, as plain data: the batches of more
    steps than one pass holds (features, labels, the worker that ran it; ``ran_out`` if it ended),
    then the weights' change after 3 SGD steps one at a time and those steps' batches."""
    import tensorflow as tf

    x, y = _examples()
    _expect_cluster(strategy, coordinator)
    try:
        iterator = make_iterator(coordinator, x, y, BATCH)
    except ValueError as error:
        if "create_per_worker_dataset" in str(error):
            expect(
                False,
                "A dataset made on the coordinator cannot feed the workers: build it inside a "
                "dataset_fn and pass that to coordinator.create_per_worker_dataset.",
            )
        raise
    name = type(iterator).__name__
    expect(
        "PerWorker" in name,
        f"Return iter(coordinator.create_per_worker_dataset(dataset_fn)), not a {name}.",
    )
    expect(
        "Iterator" in name,
        f"You returned the per-worker dataset ({name}): a step calls next() on an iterator, so "
        "return iter(coordinator.create_per_worker_dataset(dataset_fn)).",
    )
    model, optimizer = _ps_model(strategy, _weights())

    @tf.function
    def peek(iterator: Any) -> Any:
        features, labels = next(iterator)
        return features, labels, tf.distribute.coordinator.experimental_get_current_worker_index()

    @tf.function
    def train(iterator: Any) -> Any:
        features, labels = next(iterator)
        strategy.run(_reference_step(strategy, model, optimizer, None), args=((features, labels),))
        return features, labels

    _KEEP.extend([iterator, peek, train, model, optimizer])
    epoch = -(-ROWS // BATCH)
    try:
        seen = [coordinator.schedule(peek, args=(iterator,)) for _ in range(2 * epoch + 2)]
        coordinator.join()
        fetched = [r.fetch() for r in seen]
    except tf.errors.OutOfRangeError:
        return {"ran_out": True, "seen": [], "batches": [], "update": []}
    out: dict[str, Any] = {
        "ran_out": False,
        "seen": [(np.asarray(f), np.asarray(lab), int(w)) for f, lab, w in fetched],
        "batches": [],
        "update": [],
    }
    start = compare.flat(model.trainable_variables)
    try:
        batches = [_schedule(coordinator, train, iterator).fetch() for _ in range(3)]
    except Exception as error:  # said by the check after what the batches already tell
        out["train_error"] = (
            f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        )
        return out
    out["batches"] = [(np.asarray(f), np.asarray(lab)) for f, lab in batches]
    out["update"] = compare.flat(model.trainable_variables) - start
    return out


def check_ps_input(make_iterator: Callable[..., Any], strategy: Any, coordinator: Any) -> None:
    """``make_iterator(coordinator, x, y, batch)``: a per-worker iterator over ``(x, y)`` in batches
    of ``batch``, repeated, shuffled differently on each worker.

    The check runs more steps than one pass over the data holds (an iterator that is not
    repeated ends), then SGD steps one at a time whose batches it replays on one device.
    """
    x, y = _examples()
    rows = {tuple(r): i for i, r in enumerate(x.round(5).tolist())}
    with _on_the_cluster("ps_input"):
        weights = _weights()
        epoch = -(-ROWS // BATCH)
        run = in_kernel(ps_input_run, make_iterator, strategy, coordinator)
        expect(
            not run["ran_out"],
            f"The iterator ran out after one pass over the data ({epoch} batches): a worker may "
            "run any number of steps, so repeat() the dataset and count steps.",
        )
        seen = [(np.asarray(f), np.asarray(lab), int(w)) for f, lab, w in run["seen"]]
        expect(
            len(seen) == 2 * epoch + 2, f"The cluster ran {len(seen)} of the {2 * epoch + 2} steps scheduled."
        )
        sizes = sorted({len(features) for features, _, _ in seen})
        expect(
            sizes == [BATCH],
            f"Your batches have {sizes} examples, not {BATCH}. Under ParameterServerStrategy a step "
            "runs on one worker on a whole batch: do not divide the batch by the workers.",
        )
        in_order = True  # every batch a run of consecutive rows of x: not shuffled at all
        for features, labels, _ in seen:
            found = [rows.get(tuple(r)) for r in np.asarray(features).round(5).tolist()]
            expect(None not in found, "Your batches hold examples that are not rows of x.")
            index = [int(i) for i in found if i is not None]
            expect(
                np.allclose(np.asarray(labels), y[index], rtol=1e-6),
                "Your batches pair rows of x with the wrong labels: keep (x, y) together in one dataset.",
            )
            in_order = in_order and index == list(range(index[0], index[0] + len(index)))
        firsts: dict[int, np.ndarray] = {}
        for features, _, worker in seen:
            firsts.setdefault(int(worker), np.asarray(features))
        expect(
            not in_order and not (len(firsts) > 1 and np.array_equal(firsts[0], firsts[1])),
            "Both workers read the same batches in the same order: shuffle in dataset_fn, seeded with "
            "the worker index.",
        )
        expect("train_error" not in run, f"3 SGD steps on your batches raised {run.get('train_error')}.")
        batches = [(np.asarray(f), np.asarray(lab)) for f, lab in run["batches"]]
        update = np.asarray(run["update"], np.float64)
        expect(len(batches) == 3, f"The cluster ran {len(batches)} of the 3 SGD steps scheduled.")
        replay = _one_device(
            np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]), weights
        )
        expect(
            compare.mismatch(update, replay.update) <= RTOL,
            f"3 steps on your batches moved the weights unlike one device on the same batches "
            f"(mismatch {compare.mismatch(update, replay.update):.1e}).",
        )
    passed("ps_input", "per-worker batches of 4, repeated, shuffled per worker; 3 steps match one device.")


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
                f"{key}: {kib:g} KiB / 16 KiB, and you rounded down to {got}; TensorFlow rounds the count up "
                "(section 6: 125 KiB with 64 KiB made 2 shards of 62.5 KiB each), then caps it by max_shards.",
            )
            expect(got <= SHARD_MAX, f"{key}: {got} shards is more than max_shards={SHARD_MAX}, the cap.")
            expect(
                got != 2,
                f"{key}: you predicted 2, one shard per parameter server. The shard count does not "
                f"follow the servers: MinSizePartitioner cuts {kib:g} KiB by size, and the 2 servers "
                "take the shards in turn.",
            )
            expect(
                False,
                f"{key}: you predicted {got}: count ceil(size / min_shard_bytes), then cap it by max_shards.",
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
    if (rng := unseen()) is not None:  # grading: a layout the student never saw
        cases.append(([rng.randint(1, 4) for _ in range(rng.randint(2, 5))], rng.randint(2, 5)))
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
                "starts on the server after the last shard's.",
            )
            expect(
                not (got == whole and got != want),
                f"ps_placement({counts}, {num_ps}) = {got}: you put all shards of a variable on one "
                "server. Each shard is a variable of its own and takes the next server.",
            )
            expect(got == want, f"ps_placement({counts}, {num_ps}) = {got}: count the shards created so far.")
        if observed:
            counts = [len(observed[key]) for key in observed]
            real = [[_ps_index(d) for _, _, d in observed[key]] for key in observed]
            got = [[int(x) for x in shards] for shards in ps_placement(counts, 2)]
            expect(
                got == real, f"ps_placement({counts}, 2) = {got} is not where the cluster placed the shards."
            )
    passed("ps_placement", "one counter for every shard, across variables, as the cluster placed them.")
