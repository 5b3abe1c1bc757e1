"""Notebook 10 (capstone): its checks, graded by :func:`course_utils.compare.same_update`.

The capstone's single-device script (the same constants and code as the notebook's cell), and its
version with a learning-rate warmup, are here too: they are the one-device references the checks
compare the student's distributed steps with, so a student's capstone gets the same verdict and
hint as ``check_same_update`` gives any step. The student's runs are made by :func:`port_run`, a
harness (``port_runs``): a grader judges the checks outside the student's kernel.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from ..lessons.reference import check_batch, step_with_loss
from ..runtime import import_tensorflow as _tf
from . import harness, in_kernel, port_runs

#: The script's settings: an L2 penalty, shirts weighted 3x, clipping by the global norm.
L2 = 1e-3
SHIRT = 6
SHIRT_WEIGHT = 3.0
CLIP_NORM = 1.0
LEARNING_RATE = 0.1
CHECK_BATCH = 32  # global batch of the checks: 8 examples per replica on 4
CHECK_STEPS = 2
WARMUP = 4  # the warmup script: the learning rate grows to LEARNING_RATE over 4 steps


def make_model(seed: int = 0) -> Any:
    """Flatten -> Dense(32, ReLU, L2 penalty) -> Dense(10) logits."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(
                32, activation="relu", kernel_initializer=init, kernel_regularizer=keras.regularizers.L2(L2)
            ),
            keras.layers.Dense(10, kernel_initializer=init),
        ],
        name="capstone_mlp",
    )


def sample_weights(labels: Any) -> np.ndarray:
    """3.0 for shirts, 1.0 for everything else."""
    return np.where(np.asarray(labels) == SHIRT, SHIRT_WEIGHT, 1.0).astype(np.float32)


def check_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``CHECK_STEPS`` global batches of the course's built-in Fashion-MNIST-like images."""
    images, labels = check_batch(CHECK_BATCH * CHECK_STEPS, seed=3)
    return images, labels, sample_weights(labels)


def replica_counts() -> tuple[int, ...]:
    """1, 2 and 4 replicas when TensorFlow has 4 CPU devices (the notebook splits its CPU into 4),
    else 1 and 2 (the unit tests' process has 2)."""
    cpus = len(_tf().config.list_logical_devices("CPU"))
    return (1, 2, 4) if cpus >= 4 else (1, 2)


def _counts() -> str:
    counts = [str(n) for n in replica_counts()]
    return ", ".join(counts[:-1]) + " and " + counts[-1]


def make_optimizer() -> Any:
    import keras

    return keras.optimizers.SGD(LEARNING_RATE)


def make_metric() -> Any:
    import keras

    return keras.metrics.SparseCategoricalAccuracy(name="weighted_accuracy")


def _script_loss(labels: Any, logits: Any, weights: Any, model_losses: Any, global_batch_size: int) -> Any:
    import keras

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return loss_fn(labels, logits, sample_weight=weights) + _tf().add_n(model_losses)


def _script_clip(gradients: Any, clip_norm: float) -> Any:
    return _tf().clip_by_global_norm(gradients, clip_norm)[0]


#: The single-device script's step, in the factory form the check runs (the reference) ...
make_script_step = step_with_loss(_script_loss, _script_clip, CLIP_NORM)


def make_warmup_script_step(model: Any, optimizer: Any, metric: Any, global_batch_size: int) -> Any:
    """The script with a warmup on one device: a step counter ``steps_done`` (a plain
    ``tf.Variable``) incremented in the step sets the learning rate to
    ``LEARNING_RATE x min(1, steps_done / WARMUP)`` before the script's step."""
    tf = _tf()
    steps_done = tf.Variable(0, trainable=False)
    script_step = make_script_step(model, optimizer, metric, global_batch_size)

    def train_step(inputs: Any) -> Any:
        warmup = tf.minimum(1.0, tf.cast(steps_done.assign_add(1), tf.float32) / WARMUP)
        optimizer.learning_rate.assign(LEARNING_RATE * warmup)
        return script_step(inputs)

    return train_step


def same_update(
    make_train_step: Any, *, reference: Any = make_script_step, **kwargs: Any
) -> compare.SameUpdate:
    """:func:`course_utils.compare.same_update` on the capstone's model, data and optimizer,
    compared with the script's step on one device (``reference=None``: with the port's own run on
    1 replica)."""
    options: dict[str, Any] = dict(
        make_model=make_model,
        make_optimizer=make_optimizer,
        make_metric=make_metric,
        reference=reference,
        replicas=replica_counts(),
    )
    options.update(kwargs)
    result = compare.same_update(make_train_step, *check_data(), **options)
    described = {make_script_step: "the script's", make_warmup_script_step: "the warmup script's"}
    if reference in described:  # the table's header names the reference: the script, not the student's
        result.compared_with = f"{described[reference]} step on one device"
    return result


# --------------------------------------------------------------------------- the checks


def naive_train_step(model: Any, optimizer: Any, metric: Any, global_batch_size: int) -> Any:
    """The notebook's naive port, as its cell writes it: the script's step under ``strategy.run``, the
    whole penalty on every replica. The grader's judge measures the naive loss with this copy, never
    with the notebook's (``tests/test_judge.py`` holds the two to the same loss)."""
    import keras

    tf = _tf()
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def train_step(inputs: Any) -> Any:
        x, y, w = inputs
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(
                per_example(y, logits, sample_weight=w), global_batch_size=global_batch_size
            )
            loss += tf.add_n(model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        gradients, _ = tf.clip_by_global_norm(gradients, CLIP_NORM)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        metric.update_state(y, logits, sample_weight=w)
        return loss

    return train_step


def naive_first_loss(naive_train_step: Callable[..., Any], replicas: int = 4) -> float:
    """The loss ``naive_train_step`` reports (the SUM over replicas) at its first step on the check
    data, run on ``replicas`` replicas from the script's starting weights."""
    images, labels, weights = (c[:CHECK_BATCH] for c in check_data())
    start = [np.array(w) for w in make_model().get_weights()]
    run = compare.run(
        compare.checking_strategy(replicas),
        lambda strategy, model, optimizer, metric: naive_train_step(model, optimizer, metric, CHECK_BATCH),
        [images, labels, weights],
        make_model=make_model,
        weights=start,
        make_optimizer=make_optimizer,
        make_metric=make_metric,
    )
    return float(run.losses[0] or 0.0)


def check_naive_loss_prediction(
    prediction: Any, naive_train_step: Callable[..., Any], replicas: int = 4
) -> None:
    """``PREDICTION``: the loss the naive port reports on ``replicas`` replicas at its first step,
    measured here, before any cell prints it."""
    with exercise("naive_loss_prediction"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        expect(
            isinstance(prediction, (int, float, np.floating)) and not isinstance(prediction, bool),
            f"Set PREDICTION to a number (got {prediction!r}).",
        )
        measured = naive_first_loss(naive_train_step, replicas)
        data, penalty = script_first_loss()
        value, n = float(prediction), replicas
        if abs(value - (data + penalty)) < 1e-3 and abs(measured - (data + penalty)) > 1e-3:
            expect(
                False,
                f"You predicted the one-device loss {data + penalty:.4f}. The naive port "
                f"adds the whole penalty on each of the {n} replicas, and SUM adds the {n} "
                "replicas' losses.",
            )
        if abs(value - n * (data + penalty)) < 1e-3:
            expect(
                False,
                "Each replica's data loss is its share of the global batch "
                f"(compute_average_loss divides by the global batch), so the {n} shares add up to "
                f"the one-device data loss {data:.4f}, not {n}x it.",
            )
        for times in range(0, 2 * n + 1):
            if times != n and abs(value - (data + times * penalty)) < 1e-3:
                expect(
                    False,
                    f"You counted the penalty {times} times; each replica adds the whole penalty, and SUM "
                    f"adds the {n} replicas' losses.",
                )
        if abs(value - measured) >= 1e-3 and value < data:
            expect(
                False,
                f"You predicted {value:.4f}, less than the one-device data loss {data:.4f}: SUM adds the "
                f"{n} replicas' shares of the data loss back up to it.",
            )
        expect(
            abs(value - measured) < 1e-3,
            f"You predicted {value:.4f}, not what the naive port reports on {n} replicas: add up what "
            f"each replica's loss holds (on one device: data loss {data:.4f}, penalty {penalty:.4f}).",
        )
    passed(
        "naive_loss_prediction",
        f"{measured:.4f} = the data loss + {replicas} x the penalty: SUM adds the penalty {replicas} times.",
    )


def first_loss_names() -> dict[str, float]:
    """The names the notebook's prediction may use: ``DATA_LOSS`` and ``PENALTY``, as its cell binds them."""
    data, penalty = script_first_loss()
    return {"DATA_LOSS": data, "PENALTY": penalty}


def script_first_loss() -> tuple[float, float]:
    """The script's first-step data loss and penalty on the check data, on one device."""
    tf = _tf()
    import keras

    images, labels, weights = check_data()
    model = make_model()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logits = model(images[:CHECK_BATCH], training=True)
    data = float(loss_fn(labels[:CHECK_BATCH], logits, sample_weight=weights[:CHECK_BATCH]))
    return data, float(tf.add_n(model.losses))


@harness
def port_run(
    factory: Callable[..., Any], replicas: int, data: Any, options: dict[str, Any]
) -> dict[str, Any]:
    """One of same_update's runs of the student's step ``factory`` (:func:`port_runs.run_there`'s
    plain data), with ``counters``: the synchronization and aggregation of each scalar variable it
    made (a step counter), as its copy on the second device has them."""
    created: list[Any] = []
    reply = port_runs.run_there(
        _recording(factory, created),
        replicas,
        data,
        options,
        make_model=make_model,
        make_optimizer=make_optimizer,
        make_metric=make_metric,
    )
    second = [v for v in created if v.shape.rank == 0 and v.device.upper().endswith("CPU:1")]
    reply["counters"] = [[v.synchronization.name, v.aggregation.name] for v in second]
    return reply


def _runner(factory: Callable[..., Any], counters: Optional[list] = None) -> Callable[..., compare.Run]:
    """same_update's runner: the student's runs made by :func:`port_run` (in a grader's kernel);
    each run's ``counters`` added to ``counters``."""

    def take(reply: dict) -> None:
        found: Any = reply.get("counters")
        expect(
            isinstance(found, list) and all(isinstance(c, list) and len(c) == 2 for c in found),
            "The grading kernel's answer does not say which variables your step made.",
        )
        if counters is not None:
            counters.extend([str(a), str(b)] for a, b in found)

    options = dict(make_model=make_model, make_optimizer=make_optimizer, make_metric=make_metric)
    return port_runs.runner(port_run, factory, CHECK_BATCH, on_reply=take, **options)


def check_capstone_port(make_train_step: Callable[..., Any]) -> compare.SameUpdate:
    """``make_train_step(model, optimizer, metric, global_batch_size)``: the whole port of the
    script (data loss share, penalty, clipping after the sum, metric), compared with the
    single-device script on 1, 2 and 4 replicas."""
    with exercise("capstone_port"):
        result = same_update(make_train_step, runner=_runner(make_train_step))
        expect(result.ok, result.hint)
    passed("capstone_port", f"weights, loss and weighted accuracy match the script on {_counts()} replicas.")
    return result


def _recording(factory: Callable[..., Any], created: list[Any]) -> Callable[..., Any]:
    """``factory`` (same signature), appending each variable it makes to ``created`` (a distributed
    variable's copies, one per device: the strategy's creator calls this one for each)."""

    def record(next_creator: Any, **kwargs: Any) -> Any:
        created.append(next_creator(**kwargs))
        return created[-1]

    @functools.wraps(factory)
    def recording(*args: Any, **kwargs: Any) -> Any:
        with _tf().variable_creator_scope(record):
            return factory(*args, **kwargs)

    return recording


@harness
def counter_readings(factory: Callable[..., Any], replicas: int) -> list[float]:
    """The scalar variables ``factory`` creates (step counters), read on the first device after
    ``CHECK_STEPS`` steps of its step on ``replicas`` replicas (one value per variable)."""
    created: list[Any] = []
    takes_strategy = list(inspect.signature(factory).parameters)[:1] == ["strategy"]
    factory = _recording(factory, created)

    def bind(strategy: Any, model: Any, optimizer: Any, metric: Any) -> Any:
        if takes_strategy:
            return factory(strategy, model, optimizer, metric, CHECK_BATCH)
        return factory(model, optimizer, metric, CHECK_BATCH)

    compare.run(
        compare.checking_strategy(replicas),
        bind,
        list(check_data()),
        batch=CHECK_BATCH,
        make_model=make_model,
        weights=[np.array(w) for w in make_model().get_weights()],
        make_optimizer=make_optimizer,
        make_metric=make_metric,
    )
    first = [v for v in created if v.shape.rank == 0 and v.device.upper().endswith("CPU:0")]
    return [float(v.numpy()) for v in first]


#: Why a counter's aggregation is wrong even where it counts right (every replica adds the same 1).
AGGREGATION_WHY = {
    "NONE": ": each replica adds to its own copy, so the copies agree only while every replica adds "
    "the same (replicas adding 1 and 2 leave copies at 3 and 6: the cell after this check)",
    "MEAN": ": TensorFlow refuses MEAN for an integer variable",
}
#: Where the notebooks taught the aggregation a counter needs: the hints point there, not to the answer.
CHOOSE = "choose the aggregation that gives every copy one replica's update (notebook 05, ReplicaDropout)"
ON_READ_HINT = (
    "the step counter has synchronization=ON_READ: each replica counts in a copy of its own, never "
    "synchronized (a metric's kind of variable), while a step counter's copies must agree after every write"
)


def _aggregation_hint(name: str) -> str:
    return f"the step counter has aggregation={name}{AGGREGATION_WHY.get(name, '')}: {CHOOSE}"


def _counter_hint(fixed_port: Callable[..., Any], hint: str) -> Optional[str]:
    """A step counter's mistake, said plainly, or None when the counters count as on one device."""
    if "aggregation=MEAN" in hint:  # TensorFlow refuses MEAN for an integer counter
        return _aggregation_hint("MEAN")
    if "cannot be reduced with the given reduce op ReduceOp.SUM" in hint:
        return (
            "the step counter has aggregation=SUM: in replica context its assign_add(1) must be "
            "added over the replicas, and a constant is not a per-replica value, so it raises "
            f"(with a tensor it would count N per step): {CHOOSE}"
        )
    if hint.startswith("on 1 replica"):
        return (
            "already on 1 replica your step differs from the warmup script: its counter does not start at 0 "
            "and advance by exactly 1 per step (optimizer.iterations also advances in apply_gradients)"
        )
    n = max(replica_counts())
    try:
        one, many = (in_kernel(counter_readings, fixed_port, r) for r in (1, n))
    except Exception:  # the step fails in a way the same-update hint already names
        return None
    if not all(isinstance(r, list) and all(port_runs._number(v) for v in r) for r in (one, many)):
        return None  # not readings: the same-update hint stands
    if not one or one == many:
        return None
    return (
        f"your step counter reads {many[0]:g} after {CHECK_STEPS} steps on {n} replicas, "
        f"{one[0]:g} on one device: every replica adds its 1 to one variable made outside the scope "
        "(fixed_port gets the strategy)"
    )


def check_capstone_counter(fixed_port: Callable[..., Any]) -> None:
    """``fixed_port(strategy, model, optimizer, metric, global_batch_size)``: the port with the
    warmup's step counter, compared with the warmup script on one device on 1, 2 and 4 replicas;
    the counter it makes in the scope must keep its copies equal: ``ONLY_FIRST_REPLICA`` (or a float
    ``MEAN``), ``ON_WRITE``."""
    with exercise("capstone_counter"):
        counters: list[list[str]] = []  # each counter's (synchronization, aggregation), as port_run saw
        runner = _runner(fixed_port, counters)
        result = same_update(fixed_port, reference=make_warmup_script_step, runner=runner)
        if not result.ok:
            expect(False, _counter_hint(fixed_port, result.hint) or result.hint)
        for synchronization, name in counters:
            expect(synchronization != "ON_READ", ON_READ_HINT)
            # the copies stay equal: replica 0's update, or a mean
            expect(name in ("ONLY_FIRST_REPLICA", "MEAN"), _aggregation_hint(name))
    passed(
        "capstone_counter",
        f"the warmup counts each step once: the warmup script's update on {_counts()} replicas.",
    )
