"""Notebook 02: the checks of its exercises (strategy types)."""

from __future__ import annotations

import functools
import numbers
from typing import Any, Callable, Optional

from ..checks import exercise, expect, expect_close, passed
from ..strategies import mirrored_cpus
from . import harness, in_kernel, unseen

#: (machines, devices per machine, device type, synchronous, answer, the cluster in words)
SCENARIOS: tuple[tuple[int, int, str, bool, str, str], ...] = (
    (1, 1, "GPU", True, "OneDeviceStrategy", "a workstation with one GPU"),
    (1, 8, "GPU", True, "MirroredStrategy", "one machine with 8 GPUs, synchronous"),
    (1, 4, "CPU", True, "MirroredStrategy", "one machine split into 4 virtual CPUs, synchronous"),
    (4, 8, "GPU", True, "MultiWorkerMirroredStrategy", "4 machines with 8 GPUs each, synchronous"),
    (2, 1, "CPU", True, "MultiWorkerMirroredStrategy", "2 CPU-only machines, synchronous"),
    (20, 1, "CPU", False, "ParameterServerStrategy", "20 CPU machines, asynchronous"),
    (3, 4, "GPU", False, "ParameterServerStrategy", "3 machines with 4 GPUs each, asynchronous"),
    (1, 4, "GPU", False, "ParameterServerStrategy", "one machine with 4 GPUs, asynchronous"),
    (1, 1, "CPU", False, "ParameterServerStrategy", "one CPU machine, asynchronous (section 7's cluster)"),
    (1, 8, "TPU", True, "TPUStrategy", "a TPU host with 8 cores (a Colab TPU runtime)"),
    (16, 8, "TPU", True, "TPUStrategy", "a TPU pod slice of 16 hosts"),
)

STRATEGY_NAMES = (
    "OneDeviceStrategy",
    "MirroredStrategy",
    "MultiWorkerMirroredStrategy",
    "ParameterServerStrategy",
    "TPUStrategy",
)


#: What each synchronous pick does at every step, for the hint of an asynchronous cluster.
_IN_STEP = {
    "OneDeviceStrategy": "trains one copy on one device",
    "MirroredStrategy": "updates every copy together at each step",
    "MultiWorkerMirroredStrategy": "waits for every worker at each step",
}


def _mistake(got: str, machines: int, devices: int, device_type: str, synchronous: bool) -> str:
    """Why ``got`` does not fit the cluster, from what ``got`` is (never naming what fits)."""
    if got == "TPUStrategy" or device_type == "TPU":
        does = "runs on TPU cores" if got == "TPUStrategy" else "does not drive TPU cores"
        return f"which {does}; this cluster has {'TPUs' if device_type == 'TPU' else 'no TPU'}"
    if got == "ParameterServerStrategy":
        return "which trains asynchronously; this cluster trains synchronously"
    if not synchronous:
        return f"which {_IN_STEP[got]}; this cluster trains asynchronously"
    if got == "MultiWorkerMirroredStrategy" or machines > 1:
        does = "is for several machines" if machines == 1 else "drives the devices of one machine only"
        return f"which {does}; this cluster has {machines} machine{'s' * (machines > 1)}"
    does = "mirrors copies across several devices" if got == "MirroredStrategy" else "uses one device"
    return f"which {does}; this machine has {devices} device{'s' * (devices > 1)}"


def check_choose_strategy(choose_strategy: Callable[..., str]) -> None:
    """``choose_strategy(machines, devices_per_machine, device_type, synchronous)`` names the strategy."""
    scenarios = list(SCENARIOS)
    if (rng := unseen()) is not None:  # grading: a cluster the student never saw, decided by the rule
        m, d, tpu, sync = rng.randint(1, 32), rng.choice([1, 2, 4]), rng.random() < 0.3, rng.random() < 0.7
        sync = sync or tpu  # the statement says nothing of asynchronous TPUs: none is drawn
        pick = (
            "MultiWorkerMirroredStrategy" if m > 1 else "MirroredStrategy" if d > 1 else "OneDeviceStrategy"
        )
        want = "TPUStrategy" if tpu else pick if sync else "ParameterServerStrategy"
        words = (
            f"{m} machine(s) with {d} {'TPU core' if tpu else 'GPU'}(s) each, {'a' * (not sync)}synchronous"
        )
        scenarios.append((m, d, "TPU" if tpu else "GPU", sync, want, words))
    with exercise("choose_strategy"):
        for machines, devices, device_type, synchronous, want, words in scenarios:
            got = choose_strategy(machines, devices, device_type, synchronous)
            expect(
                isinstance(got, str) and got in STRATEGY_NAMES,
                f"Return the class name as a string, one of {', '.join(STRATEGY_NAMES)}; for "
                f"{words} you returned {got!r}.",
            )
            expect(
                got == want,
                f"For {words} you chose {got}, {_mistake(got, machines, devices, device_type, synchronous)}.",
            )
    passed("choose_strategy", f"all {len(scenarios)} clusters get the right strategy.")


#: ``run_and_combine``: a fixed linear classifier (3 features, 3 classes) scores 7 examples, so 2
#: replicas get 4 and 3; about half of them are classified right.
SCORE_EXAMPLES, SCORE_CLASSES = 7, 3


def score_data(seed: int = 7) -> tuple[Any, Any, Any]:
    """``(weights, x, y)`` of ``run_and_combine``: a weight matrix, 7 examples and their labels
    (another seed: the judge's, the student never saw them)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = rng.normal(size=(3, SCORE_CLASSES)).astype("float32")
    x = rng.normal(size=(SCORE_EXAMPLES, 3)).astype("float32")
    y = (x @ weights).argmax(axis=1).astype("int32")
    y[::2] = (y[::2] + 1) % SCORE_CLASSES  # every other label wrong: 3 of 7 right
    return weights, x, y


def make_score_step(weights: Any, global_batch_size: int) -> Callable[[Any, Any], dict[str, Any]]:
    """The step of ``run_and_combine``: one replica's share of the mean cross-entropy, its
    predicted classes and how many of them are right."""
    import tensorflow as tf

    kernel = tf.constant(weights)

    def score_step(x: Any, y: Any) -> dict[str, Any]:
        logits = tf.matmul(x, kernel)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
        return {
            "loss": tf.nn.compute_average_loss(losses, global_batch_size=global_batch_size),
            "predicted": predicted,
            "correct": tf.reduce_sum(tf.cast(predicted == y, tf.int32)),
        }

    return score_step


def _witness(seen: list[tuple[int, Any]], rows: Any) -> None:
    """Inside ``strategy.run`` (a replica's own context), append ``(replica id, rows)`` to ``seen``
    when the step runs: what that replica really received. Elsewhere, nothing."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if type(context).__name__ not in ("NoneType", "_DefaultReplicaContext"):
        record = lambda replica, got: seen.append((int(replica), got.numpy()))  # noqa: E731
        tf.py_function(record, [context.replica_id_in_sync_group, rows], [])


def _numbers(value: Any) -> Any:
    """A returned value as the harness sends it: a tensor's numbers, anything else as it is."""
    return value.numpy() if hasattr(value, "numpy") else value


def _combined(result: Any, shown: Any, n: int, replicas: int) -> tuple[float, Any, float]:
    """``(loss, predicted, correct)`` from ``run_and_combine``'s three outputs as :func:`combine_run`
    sent them (``None`` when it did not return them: ``shown`` is what it returned), or a hint."""
    import numpy as np

    expect(
        isinstance(result, dict) and {"loss", "predicted", "correct"} <= set(result),
        f"Return a dict with the step's three keys, 'loss', 'predicted' and 'correct' (got {shown}).",
    )
    values = {}
    for key in ("loss", "predicted", "correct"):
        value = result[key]
        try:
            values[key] = np.asarray(value)
        except ValueError:  # a ragged list: one entry per replica
            expect(
                False,
                f"'{key}' is a list of the replicas' values of different lengths; return one array in the "
                "order of the examples: strategy.gather(values, axis=0).",
            )
    predicted = values["predicted"].reshape(-1)
    expect(
        values["loss"].size == 1 and values["correct"].size == 1,
        "'loss' and 'correct' should each be one number for the whole batch: reduce the replicas' "
        "values with strategy.reduce(..., axis=None).",
    )
    if replicas > 1:
        expect(
            predicted.size != -(-n // replicas),
            f"On {replicas} replicas you returned {predicted.size} predictions for {n} examples: keep every "
            "replica's, in order, with strategy.gather(values, axis=0) (one replica's local result is "
            "not enough).",
        )
    expect(predicted.size == n, f"Return one prediction per example: {n}, not {predicted.size}.")
    return float(values["loss"].reshape(-1)[0]), predicted, float(values["correct"].reshape(-1)[0])


@harness
def combine_run(
    run_and_combine: Callable[[Any, Any, Any, Any], Any], replicas: int, weights: Any, x: Any, y: Any
) -> dict[str, Any]:
    """``run_and_combine(strategy, step_fn, x, y)`` on ``replicas`` (``checking_strategy``), with
    :func:`make_score_step`'s step of ``weights`` as ``step_fn``, witnessed: what each replica's step
    received (``[replica id, rows]`` as they ran) and the three outputs it returned as numbers (or
    how what it returned looks); or what ``strategy.reduce`` said adding vectors of different lengths."""
    import tensorflow as tf

    from ..compare import checking_strategy

    step_fn, seen = make_score_step(weights, len(x)), list[tuple[int, Any]]()

    def witnessed(x_part: Any, y_part: Any) -> Any:
        _witness(seen, x_part)
        return step_fn(x_part, y_part)

    try:
        result = run_and_combine(checking_strategy(replicas), witnessed, x, y)
    except tf.errors.InvalidArgumentError as error:
        if "AddN" not in str(error):
            raise
        return {"seen": [], "error": str(error)[:2000]}
    keys = ("loss", "predicted", "correct")
    whole = isinstance(result, dict) and set(keys) <= set(result)
    return {
        "seen": [[replica, rows] for replica, rows in seen],
        "result": {key: _numbers(result[key]) for key in keys} if whole else None,
        "shown": "" if whole else f"{result!r:.80}",
    }


def _received(ran: Any, width: int) -> list[tuple[int, Any]]:
    """The ``(replica id, rows)`` a harness sent, checked for shape (a forged record fails)."""
    import numpy as np

    seen = ran.get("seen") if isinstance(ran, dict) else None
    expect(
        isinstance(seen, list)
        and all(isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], int) for r in seen)
        and all(np.ndim(rows) == 2 and np.shape(rows)[1] == width for _, rows in seen),
        "The grader could not read what the replicas received.",
    )
    assert isinstance(seen, list)
    return [(int(replica), np.asarray(rows)) for replica, rows in seen]


def check_run_and_combine(run_and_combine: Callable[[Any, Any, Any, Any], Any]) -> None:
    """``run_and_combine(strategy, step_fn, x, y)``: one global batch through ``strategy.run``,
    each output combined as one device computes it, on one device and on 2 replicas. The run is
    :func:`combine_run`'s (data drawn by the judge when grading); the judgement is here."""
    import numpy as np
    import tensorflow as tf

    drawn = unseen()
    weights, x, y = score_data(7 if drawn is None else drawn.randrange(2**31))
    n = len(x)
    step_fn = make_score_step(weights, n)
    reference = {k: np.asarray(v) for k, v in step_fn(tf.constant(x), tf.constant(y)).items()}
    want_loss, want_correct = float(reference["loss"]), float(reference["correct"])
    with exercise("run_and_combine"):
        for replicas in (1, 2):
            where = "on one device" if replicas == 1 else f"on {replicas} replicas"
            ran = in_kernel(combine_run, run_and_combine, replicas, weights, x, y)
            expect(
                not (isinstance(ran, dict) and ran.get("error")),
                f"{where.capitalize()} strategy.reduce failed adding vectors of different lengths: "
                "reduce adds the replicas' values element by element, it does not concatenate them.",
            )
            seen = _received(ran, x.shape[1])
            received = [len(rows) for _, rows in sorted(seen, key=lambda record: record[0])]
            if replicas > 1:
                expect(
                    bool(seen),
                    f"On {replicas} replicas your code never called strategy.run: run step_fn on every "
                    "replica with strategy.run.",
                )
                expect(
                    set(received) != {n},
                    f"On {replicas} replicas each replica received all {n} examples: distribute the batch first.",
                )
                got_rows = (
                    np.concatenate([rows for _, rows in seen]) if seen else np.zeros((0,) + x.shape[1:])
                )
                expect(  # any split is right if every example reaches one replica once
                    len(got_rows) == n and sorted(map(tuple, got_rows)) == sorted(map(tuple, x)),
                    f"{where.capitalize()} the replicas' steps received {received} examples, not the {n} once "
                    "each: split the global batch among the replicas first.",
                )
            loss, predicted, correct = _combined(ran.get("result"), ran.get("shown"), n, replicas)
            if replicas > 1:
                index = {tuple(row): i for i, row in enumerate(x)}
                shares = [
                    float(step_fn(tf.constant(x[part]), tf.constant(y[part]))["loss"])
                    for part in ([index[tuple(row)] for row in rows] for _, rows in seen)
                ]
                expect(
                    not any(np.isclose(loss, share) for share in shares),
                    f"{where.capitalize()} your loss {loss:.4f} is one replica's share of the batch's loss: "
                    "the replicas' shares must be combined.",
                )
                expect(
                    not np.isclose(loss, want_loss / replicas),
                    f"{where.capitalize()} your loss is 1/{replicas} of one device's: each replica holds its "
                    "share of the global mean (compute_average_loss); MEAN divides them by the replicas once more.",
                )
                expect(  # MEAN's 1.5, or int() of it: 1
                    not (np.isclose(correct, want_correct / replicas) or correct == want_correct // replicas)
                    or want_correct == 0,
                    f"{where.capitalize()} you counted {correct:g} right answers, not {want_correct:g}: a "
                    "count adds up across replicas (SUM); MEAN divides it by the replicas.",
                )
            expect_close(loss, want_loss, f"{where.capitalize()} the batch's loss should be one device's")
            expect(
                np.array_equal(predicted, reference["predicted"]),
                f"{where.capitalize()} your predictions {predicted.tolist()} should be one device's "
                f"{reference['predicted'].tolist()}, in the order of the examples.",
            )
            expect_close(
                correct, want_correct, f"{where.capitalize()} the number right should be one device's"
            )
    passed(
        "run_and_combine",
        f"on one device and on 2 replicas: loss {want_loss:.4f} (SUM of shares), {n} predictions in order "
        f"(gather), {want_correct:g} right (SUM).",
    )


#: ``fix_train_step``: one SGD step of a linear regression on 8 examples (4 per replica).
TRAIN_EXAMPLES, TRAIN_FEATURES, TRAIN_LEARNING_RATE = 8, 3, 0.1


def make_regressor(seen: Optional[list[tuple[int, Any]]] = None) -> Any:
    """Dense(1) on 3 features, kernel of ones and bias zero: the same start on every strategy.
    Given ``seen``, the model appends ``(replica id, examples)`` to it each time a replica's step
    runs it: what each replica really received."""
    import keras

    class Witness(keras.layers.Layer):
        def call(self, inputs: Any) -> Any:
            if seen is not None:
                _witness(seen, inputs)
            return inputs

    return keras.Sequential(
        [keras.Input((TRAIN_FEATURES,)), Witness(), keras.layers.Dense(1, kernel_initializer="ones")]
    )


def regression_data(seed: int = 2) -> tuple[Any, Any]:
    """``(x, y)`` of ``fix_train_step``: 8 examples of 3 features and their targets (another seed:
    the judge's, the student never saw them)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(TRAIN_EXAMPLES, TRAIN_FEATURES)).astype("float32")
    y = rng.normal(size=(TRAIN_EXAMPLES,)).astype("float32")
    return x, y


def one_device_step(x: Any, y: Any) -> tuple[float, Any]:
    """The reference, written out on one device: the mean squared error and the weights after one
    SGD step of ``TRAIN_LEARNING_RATE`` from :func:`make_regressor`'s start."""
    import numpy as np

    kernel, bias = np.ones(TRAIN_FEATURES), 0.0
    error = x.astype(np.float64) @ kernel + bias - y
    loss = float(np.mean(error**2))
    grad_kernel, grad_bias = 2 * x.T @ error / len(x), 2 * error.mean()
    return loss, np.concatenate(
        [kernel - TRAIN_LEARNING_RATE * grad_kernel, [bias - TRAIN_LEARNING_RATE * grad_bias]]
    )


@harness
def train_run(
    train_step: Callable[[Any, Any, Any, Any], Any], replicas: int, x: Any, y: Any
) -> dict[str, Any]:
    """``train_step(strategy, make_model, x, y)`` on ``replicas`` (``checking_strategy``), with
    :func:`make_regressor` witnessed as ``make_model``: what each replica's step received
    (``[replica id, rows]`` as they ran) and the ``(loss, weights)`` it returned as numbers (or how
    what it returned looks). Keras's ``AssertionError`` (variables made outside the scope) is raised."""
    from ..compare import checking_strategy

    seen: list[tuple[int, Any]] = []
    result = train_step(checking_strategy(replicas), functools.partial(make_regressor, seen), x, y)
    pair = isinstance(result, (tuple, list)) and len(result) == 2
    return {
        "seen": [[replica, rows] for replica, rows in seen],
        "result": [_numbers(result[0]), [_numbers(w) for w in result[1]]] if pair else None,
        "shown": "" if pair else f"{result!r:.80}",
    }


def check_fix_train_step(train_step: Callable[[Any, Any, Any, Any], Any]) -> None:
    """``train_step(strategy, make_model, x, y) -> (loss, weights)``: one SGD step, the same on one
    device and on 2 replicas as the step written out on one device. The run is :func:`train_run`'s
    (data drawn by the judge when grading); the judgement is here."""
    import numpy as np

    from ..compare import factor, mismatch

    drawn = unseen()
    x, y = regression_data(2 if drawn is None else drawn.randrange(2**31))
    want_loss, want = one_device_step(x, y)
    start = np.concatenate([np.ones(TRAIN_FEATURES), [0.0]])
    with exercise("fix_train_step"):
        for replicas in (1, 2):
            where = "On one device" if replicas == 1 else f"On {replicas} replicas"
            try:
                ran = in_kernel(train_run, train_step, replicas, x, y)
            except AssertionError:
                expect(
                    False,
                    f"{where} the optimizer's update failed (AssertionError in Keras): the model's "
                    "variables were made outside strategy.scope(), so they are not mirrored; build the "
                    "model inside the scope.",
                )
            seen = _received(ran, TRAIN_FEATURES)
            result = ran.get("result")
            expect(
                isinstance(result, (tuple, list)) and len(result) == 2,
                f"Return (loss, model.get_weights()), two things (got {ran.get('shown')}).",
            )
            loss, weights = result
            got = np.concatenate([np.asarray(w, np.float64).ravel() for w in weights])
            expect(
                got.shape == want.shape,
                f"Return model.get_weights(): {want.size} numbers in all, not {got.size}.",
            )
            ratio = factor(got - start, want - start)
            counts = [sum(len(rows) for r, rows in seen if r == replica) for replica in range(replicas)]
            expect(
                replicas == 1 or max((len(rows) for _, rows in seen), default=0) < len(x),
                f"{where} the replicas' steps received {' and '.join(map(str, counts))} examples, not "
                f"{len(x) // replicas} each: strategy.run gave every replica the whole batch (whatever "
                "global_batch_size says). Distribute the batch first (experimental_distribute_dataset).",
            )
            expect(
                replicas == 1 or abs(ratio - replicas) > 0.05,
                f"{where} your update is {ratio:.2f}x one device's: each replica divided its loss by its own "
                "share of the examples; the global_batch given to make_replica_step is the whole batch, "
                "len(x), not one replica's share.",
            )
            if replicas > 1:
                first = TRAIN_EXAMPLES // replicas
                _, want_first = one_device_step(x[:first], y[:first])
                expect(
                    min(mismatch(got - start, c * (want_first - start)) for c in (1.0, first / len(x)))
                    > 1e-3,
                    f"{where} your update comes from the first {first} of {len(x)} examples only: batch the "
                    "dataset by the GLOBAL batch, len(x); experimental_distribute_dataset splits each batch "
                    "among the replicas.",
                )
            expect(
                replicas == 1 or abs(ratio - 1 / replicas) > 0.05,
                f"{where} your update is {ratio:.2f}x one device's: global_batch_size is the whole batch, "
                "len(x), not len(x) times the replicas; each replica already holds only its share.",
            )
            expect(
                counts == [len(x) // replicas] * replicas
                and sorted(map(tuple, np.concatenate([rows for _, rows in seen]))) == sorted(map(tuple, x)),
                f"{where} the step ran on {' and '.join(map(str, counts))} examples per replica, not its own "
                f"{len(x) // replicas} of the {len(x)}, every example once: batch the dataset by the GLOBAL "
                "batch, len(x), and distribute it (experimental_distribute_dataset).",
            )
            expect(
                mismatch(got - start, want - start) < 1e-4,
                f"{where} your weights after the step differ from one device's (update {ratio:.2f}x): "
                "compare your step with the buggy one line by line.",
            )
            if replicas > 1:
                squared = (x.astype(np.float64) @ np.ones(TRAIN_FEATURES) - y) ** 2
                shares = [squared[: len(x) // 2].sum() / len(x), squared[len(x) // 2 :].sum() / len(x)]
                expect(
                    not any(np.isclose(float(loss), share, rtol=1e-4) for share in shares),
                    f"{where} your loss {float(loss):.4f} is one replica's share of the batch's loss: "
                    "combine the shares with strategy.reduce(SUM, per_replica, axis=None).",
                )
                expect(
                    not np.isclose(float(loss), want_loss / replicas),
                    f"{where} your loss is {float(loss):.4f}, 1/{replicas} of one device's {want_loss:.4f}: "
                    "the replicas hold shares of the loss; combine them with SUM, not MEAN.",
                )
            expect_close(
                float(loss),
                want_loss,
                f"{where} the loss you return should be the batch's mean squared error",
            )
    passed("fix_train_step", f"on one device and on 2 replicas: loss {want_loss:.4f}, the same SGD update.")


#: The per-example losses each of the 2 replicas holds in ``reduce_prediction``, and the global batch.
REDUCE_SHARDS: tuple[tuple[float, ...], ...] = ((1.0, 2.0, 3.0), (2.0,))
REDUCE_GLOBAL_BATCH = 4


def reduce_outcomes() -> dict[str, Any]:
    """Run ``reduce_prediction`` on 2 replicas: each replica's ``compute_average_loss`` of its
    losses, then ``strategy.reduce`` with SUM and with MEAN; and the loss of one device."""
    import tensorflow as tf

    strategy = mirrored_cpus(2, needed_by="This check")
    losses = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(REDUCE_SHARDS[context.replica_id_in_sync_group])
    )

    def replica_loss(per_example: Any) -> Any:
        return tf.nn.compute_average_loss(per_example, global_batch_size=REDUCE_GLOBAL_BATCH)

    per_replica = strategy.run(replica_loss, args=(losses,))
    everything = tf.constant([v for shard in REDUCE_SHARDS for v in shard])
    return {
        "SUM": float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)),
        "MEAN": float(strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)),
        "replicas": [float(v) for v in strategy.experimental_local_results(per_replica)],
        "one device": float(tf.nn.compute_average_loss(everything, global_batch_size=REDUCE_GLOBAL_BATCH)),
    }


def check_reduce_prediction(prediction: Any) -> None:
    """``PREDICTION = {"SUM": ..., "MEAN": ...}``: what ``strategy.reduce`` returns on 2 replicas."""
    with exercise("reduce_prediction"):
        expect(
            isinstance(prediction, dict) and set(prediction) == {"SUM", "MEAN"},
            f"Set PREDICTION to a dict with two numbers, {{'SUM': ..., 'MEAN': ...}} (got {prediction!r}).",
        )
        if any(v is None or v is Ellipsis for v in prediction.values()):
            raise NotImplementedError
        for key, value in prediction.items():
            expect(
                isinstance(value, numbers.Real) and value == value,  # np.float32 too
                f"PREDICTION[{key!r}] should be a number (got {value!r}).",
            )
        ran = reduce_outcomes()
        shares = " and ".join(f"{v:.1f}" for v in ran["replicas"])
        own_means = sum(sum(s) / len(s) for s in REDUCE_SHARDS)
        said = prediction["SUM"]
        divides = f"(the sum of its losses) / global_batch_size={REDUCE_GLOBAL_BATCH}"
        expect(
            abs(said - own_means) > 1e-6 or abs(own_means - ran["SUM"]) < 1e-6,
            f"You predicted SUM = {said:g} as if each replica divided by its OWN number of losses; "
            f"compute_average_loss divides by global_batch_size={REDUCE_GLOBAL_BATCH}.",
        )
        expect(
            abs(said - ran["SUM"]) < 1e-6,
            f"You predicted SUM = {said:g}: SUM adds the replicas' values, each {divides}.",
        )
        expect(
            abs(prediction["MEAN"] - said) > 1e-6,
            f"You predicted MEAN = SUM = {said:g}: MEAN averages the replicas' values; it does not add them.",
        )
        expect(
            abs(prediction["MEAN"] - ran["MEAN"]) < 1e-6,
            f"You predicted MEAN = {prediction['MEAN']:g}: MEAN averages the 2 replicas' values, each {divides}.",
        )
    passed(
        "reduce_prediction",
        f"on 2 replicas ({shares}) SUM = {ran['SUM']:.1f}, one device's loss ({ran['one device']:.1f}); "
        f"MEAN = {ran['MEAN']:.1f}, half of it.",
    )
