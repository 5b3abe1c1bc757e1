"""The checks of notebook 02 (strategy types): each passes the reference answer and turns a
planted mistake into an ExerciseError whose hint says what to fix."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from course_utils.errors import ExerciseError
from course_utils.exercises import strategy_types as ex

# --------------------------------------------------------------------------- choose_strategy


def choose_strategy(machines, devices_per_machine, device_type="GPU", synchronous=True):
    if device_type == "TPU":
        return "TPUStrategy"
    if not synchronous:
        return "ParameterServerStrategy"
    if machines > 1:
        return "MultiWorkerMirroredStrategy"
    if devices_per_machine > 1:
        return "MirroredStrategy"
    return "OneDeviceStrategy"


def test_choose_strategy_passes_the_reference(capsys):
    ex.check_choose_strategy(choose_strategy)
    assert "[pass] choose_strategy: all 11 clusters get the right strategy." in capsys.readouterr().out


def hides(answer, message):
    """The hint does not name the answer (MirroredStrategy inside MultiWorkerMirroredStrategy aside)."""
    return re.search(rf"(?<!\w){answer}", message) is None and "answer" not in message


def test_choose_strategy_that_ignores_asynchronous_training():
    def wrong(machines, devices_per_machine, device_type="GPU", synchronous=True):
        return choose_strategy(machines, devices_per_machine, device_type, True)

    with pytest.raises(ExerciseError) as info:
        ex.check_choose_strategy(wrong)
    message = str(info.value)
    assert "Exercise choose_strategy" in message
    assert (
        "For 20 CPU machines, asynchronous you chose MultiWorkerMirroredStrategy, which waits for every "
        "worker at each step; this cluster trains asynchronously." in message
    )
    assert hides("ParameterServerStrategy", message)


def test_choose_strategy_that_tests_machines_before_tpus():
    def wrong(machines, devices_per_machine, device_type="GPU", synchronous=True):
        if machines > 1 and synchronous:
            return "MultiWorkerMirroredStrategy"
        return choose_strategy(machines, devices_per_machine, device_type, synchronous)

    with pytest.raises(ExerciseError) as info:
        ex.check_choose_strategy(wrong)
    message = str(info.value)
    assert (
        "For a TPU pod slice of 16 hosts you chose MultiWorkerMirroredStrategy, which does not drive TPU "
        "cores; this cluster has TPUs." in message
    )
    assert hides("TPUStrategy", message) and "TPU first" not in message


def machines_before_asynchronous(machines, devices_per_machine, device_type="GPU", synchronous=True):
    """Asks how many machines before asking about asynchronous training."""
    if device_type == "TPU":
        return "TPUStrategy"
    if machines == 1:
        return "MirroredStrategy" if devices_per_machine > 1 else "OneDeviceStrategy"
    return "MultiWorkerMirroredStrategy" if synchronous else "ParameterServerStrategy"


def one_device_first(machines, devices_per_machine, device_type="GPU", synchronous=True):
    """Sends every single-device machine to OneDeviceStrategy before anything else."""
    if machines == 1 and devices_per_machine == 1 and device_type != "TPU":
        return "OneDeviceStrategy"
    return choose_strategy(machines, devices_per_machine, device_type, synchronous)


def always(name):
    return lambda machines, devices_per_machine, device_type="GPU", synchronous=True: name


def mirrored_for_many_machines(machines, devices_per_machine, device_type="GPU", synchronous=True):
    """Ignores the number of machines."""
    return choose_strategy(1, devices_per_machine, device_type, synchronous)


@pytest.mark.parametrize(
    "wrong, answer, hint",
    [
        (
            machines_before_asynchronous,
            "ParameterServerStrategy",
            "For one machine with 4 GPUs, asynchronous you chose MirroredStrategy, which updates every copy "
            "together at each step; this cluster trains asynchronously.",
        ),
        (
            one_device_first,
            "ParameterServerStrategy",
            "For one CPU machine, asynchronous (section 7's cluster) you chose OneDeviceStrategy, which "
            "trains one copy on one device; this cluster trains asynchronously.",
        ),
        (
            always("TPUStrategy"),
            "OneDeviceStrategy",
            "you chose TPUStrategy, which runs on TPU cores; this cluster has no TPU.",
        ),
        (
            always("ParameterServerStrategy"),
            "OneDeviceStrategy",
            "which trains asynchronously; this cluster trains synchronously.",
        ),
        (
            always("MultiWorkerMirroredStrategy"),
            "OneDeviceStrategy",
            "which is for several machines; this cluster has 1 machine.",
        ),
        (
            always("MirroredStrategy"),
            "OneDeviceStrategy",
            "which mirrors copies across several devices; this machine has 1 device.",
        ),
        (
            always("OneDeviceStrategy"),
            "MirroredStrategy",
            "For one machine with 8 GPUs, synchronous you chose OneDeviceStrategy, which uses one device; "
            "this machine has 8 devices.",
        ),
        (
            mirrored_for_many_machines,
            "MultiWorkerMirroredStrategy",
            "For 4 machines with 8 GPUs each, synchronous you chose MirroredStrategy, which drives the "
            "devices of one machine only; this cluster has 4 machines.",
        ),
    ],
    ids=[
        "async_4_gpus",
        "async_1_cpu",
        "tpu",
        "ps",
        "multi_worker",
        "mirrored",
        "one_device",
        "many_machines",
    ],
)
def test_choose_strategy_names_the_mistake_not_the_answer(wrong, answer, hint):
    """Each hint says what the pick does and what the cluster is, never which strategy fits."""
    with pytest.raises(ExerciseError) as info:
        ex.check_choose_strategy(wrong)
    assert hint in str(info.value)
    assert hides(answer, str(info.value))


def synchronous_first(machines, devices_per_machine, device_type="GPU", synchronous=True):
    """Asks about asynchronous training before the device type: right on every cluster the statement
    describes (it never names an asynchronous TPU cluster)."""
    if not synchronous:
        return "ParameterServerStrategy"
    return choose_strategy(machines, devices_per_machine, device_type, synchronous)


def test_choose_strategy_unseen_clusters_keep_to_the_statement(monkeypatch, capsys):
    """Grading adds a cluster drawn at random: never an asynchronous TPU one, so an answer that tests
    synchronous first passes every draw, and the cluster's words name its devices and its training."""
    import random

    import course_utils.exercises as exercises

    for seed in range(200):
        monkeypatch.setattr(exercises, "UNSEEN", random.Random(seed))
        ex.check_choose_strategy(synchronous_first)
    assert capsys.readouterr().out.count("all 12 clusters get the right strategy") == 200


def memorised(machines, devices_per_machine, device_type="GPU", synchronous=True):
    """The notebook's clusters looked up; any other cluster gets a strategy for the wrong device."""
    for m, d, kind, sync, want, _ in ex.SCENARIOS:
        if (m, d, kind, sync) == (machines, devices_per_machine, device_type, synchronous):
            return want
    return "MirroredStrategy" if device_type == "TPU" else "TPUStrategy"


@pytest.mark.parametrize("seed", range(5))
def test_choose_strategy_unseen_cluster_in_words(monkeypatch, seed):
    """A memorised answer fails the drawn cluster, and the hint names its devices and its training."""
    import random

    import course_utils.exercises as exercises

    ex.check_choose_strategy(memorised)
    monkeypatch.setattr(exercises, "UNSEEN", random.Random(seed))
    with pytest.raises(
        ExerciseError,
        match=r"For \d+ machine\(s\) with \d (TPU core|GPU)\(s\) each, (a)?synchronous you chose",
    ):
        ex.check_choose_strategy(memorised)


def test_choose_strategy_that_returns_a_class_instead_of_its_name():
    def wrong(machines, devices_per_machine, device_type="GPU", synchronous=True):
        return tf.distribute.MirroredStrategy

    with pytest.raises(ExerciseError, match="class name as a string"):
        ex.check_choose_strategy(wrong)


def test_choose_strategy_not_done_yet():
    def blank(*args, **kwargs):
        raise NotImplementedError("Exercise choose_strategy: replace this line with your code")

    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_choose_strategy(blank)


# --------------------------------------------------------------------------- run_and_combine

SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN


def first_batch(strategy, x, y, distribute, per_replica_batch):
    """The batch as the answer feeds it: distributed (batched by the global batch, or wrongly by the
    per-replica one), or the whole batch handed to every replica."""
    if not distribute:
        return (tf.constant(x), tf.constant(y))
    size = len(x) // strategy.num_replicas_in_sync if per_replica_batch else len(x)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(size)
    return next(iter(strategy.experimental_distribute_dataset(dataset)))


def make_run_and_combine(
    loss_op=SUM, correct_op=SUM, predicted="gather", distribute=True, per_replica_batch=False, count=float
):
    """The reference answer, or one of the mistakes real code makes (``count``: how the answer turns
    the reduced count into a number, ``int`` truncating MEAN's 1.5)."""

    def run_and_combine(strategy, step_fn, x, y):
        batch = first_batch(strategy, x, y, distribute, per_replica_batch)

        @tf.function
        def step(inputs):
            return strategy.run(step_fn, args=inputs)

        out = step(batch)
        if predicted == "gather":
            classes = strategy.gather(out["predicted"], axis=0)
        elif predicted == "concat":
            classes = tf.concat(strategy.experimental_local_results(out["predicted"]), axis=0)
        elif predicted == "first":
            classes = strategy.experimental_local_results(out["predicted"])[0]
        elif predicted == "list":
            classes = tf.ragged.constant(
                [v.numpy().tolist() for v in strategy.experimental_local_results(out["predicted"])]
            )
        else:
            classes = strategy.reduce(SUM, out["predicted"], axis=None)
        if loss_op == "first":
            loss = strategy.experimental_local_results(out["loss"])[0]
        else:
            loss = strategy.reduce(loss_op, out["loss"], axis=None)
        if predicted == "list":
            classes = classes.to_list()
        else:
            classes = classes.numpy()
        return {
            "loss": float(loss),
            "predicted": classes,
            "correct": count(strategy.reduce(correct_op, out["correct"], axis=None)),
        }

    return run_and_combine


def test_run_and_combine_passes_the_reference(capsys, two_replicas):
    ex.check_run_and_combine(make_run_and_combine())
    assert "[pass] run_and_combine" in capsys.readouterr().out


def test_run_and_combine_concatenating_local_results_passes_too(capsys, two_replicas):
    ex.check_run_and_combine(make_run_and_combine(predicted="concat"))
    assert "[pass] run_and_combine" in capsys.readouterr().out


def test_run_and_combine_any_split_that_gives_each_example_once_passes(capsys, two_replicas):
    """3 and 4 examples, split by hand with experimental_distribute_values_from_function: right too."""

    def by_hand(strategy, step_fn, x, y):
        half = len(x) // 2

        def part(ctx):  # on 2 replicas the first 3 examples, then 4; on one device all 7
            bounds = [0, half, len(x)] if ctx.num_replicas_in_sync == 2 else [0, len(x)]
            start, stop = bounds[ctx.replica_id_in_sync_group], bounds[ctx.replica_id_in_sync_group + 1]
            return tf.constant(x[start:stop]), tf.constant(y[start:stop])

        out = strategy.run(step_fn, args=strategy.experimental_distribute_values_from_function(part))
        return {
            "loss": float(strategy.reduce(SUM, out["loss"], axis=None)),
            "predicted": strategy.gather(out["predicted"], axis=0).numpy(),
            "correct": int(strategy.reduce(SUM, out["correct"], axis=None)),
        }

    ex.check_run_and_combine(by_hand)
    assert "[pass] run_and_combine" in capsys.readouterr().out


def one_device_answer(strategy, step_fn, x, y):
    """The strategy ignored: step_fn on the whole batch, as on one device (right numbers, no replicas)."""
    out = step_fn(tf.constant(x), tf.constant(y))
    return {"loss": float(out["loss"]), "predicted": out["predicted"].numpy(), "correct": int(out["correct"])}


def whole_batch_then(combine):
    """strategy.run on the undistributed batch: every replica scores all of it; ``combine`` picks
    replica 0's outputs or reduces them with MEAN (both one device's numbers)."""

    def run_and_combine(strategy, step_fn, x, y):
        out = strategy.run(step_fn, args=(tf.constant(x), tf.constant(y)))
        if combine == "first":
            return {k: strategy.experimental_local_results(v)[0].numpy() for k, v in out.items()}
        return {
            "loss": float(strategy.reduce(MEAN, out["loss"], axis=None)),
            "predicted": strategy.experimental_local_results(out["predicted"])[0].numpy(),
            "correct": int(strategy.reduce(MEAN, out["correct"], axis=None)),
        }

    return run_and_combine


@pytest.mark.parametrize(
    "answer, hint",
    [
        (
            one_device_answer,
            "On 2 replicas your code never called strategy.run: run step_fn on every replica",
        ),
        (
            whole_batch_then("first"),
            "On 2 replicas each replica received all 7 examples: distribute the batch",
        ),
        (
            whole_batch_then("mean"),
            "On 2 replicas each replica received all 7 examples: distribute the batch",
        ),
    ],
    ids=["no_strategy_run", "whole_batch_first_result", "whole_batch_mean"],
)
def test_run_and_combine_right_numbers_without_distributing(two_replicas, answer, hint):
    """One device's numbers, but the replicas never shared the batch: the check reads what each received."""
    with pytest.raises(ExerciseError, match=hint):
        ex.check_run_and_combine(answer)


def test_run_and_combine_not_done_yet():
    def blank(strategy, step_fn, x, y):
        raise NotImplementedError("Exercise run_and_combine: write your code here")

    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_run_and_combine(blank)


# --------------------------------------------------------------------------- fix_train_step


def make_replica_step(model, optimizer, global_batch):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            errors = tf.squeeze(model(x), axis=1) - y
            loss = tf.nn.compute_average_loss(tf.square(errors), global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return replica_step


def make_train_step(
    in_scope=True,
    distribute=True,
    own_mean=False,
    loss_op=SUM,
    per_replica_batch=False,
    times_replicas=False,
    learning_rate=0.1,
):
    """The fixed step, or the notebook's buggy one (in_scope=False, distribute=False), or another
    mistake: times_replicas sets the global batch to len(x) times the replicas."""
    import keras

    def train_step(strategy, make_model, x, y):
        if in_scope:
            with strategy.scope():
                model = make_model()
        else:
            model = make_model()
        with strategy.scope():
            optimizer = keras.optimizers.SGD(
                learning_rate(strategy) if callable(learning_rate) else learning_rate
            )
            optimizer.build(model.trainable_variables)
        if distribute:
            size = len(x) // strategy.num_replicas_in_sync if per_replica_batch else len(x)
            dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(size)
            batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        else:
            batch = (tf.constant(x), tf.constant(y))
        global_batch = len(x) // strategy.num_replicas_in_sync if own_mean else len(x)
        global_batch *= strategy.num_replicas_in_sync if times_replicas else 1
        replica_step = make_replica_step(model, optimizer, global_batch)

        @tf.function
        def step(inputs):
            per_replica = strategy.run(replica_step, args=inputs)
            if loss_op == "first":
                return strategy.experimental_local_results(per_replica)[0]
            return strategy.reduce(loss_op, per_replica, axis=None)

        return float(step(batch)), model.get_weights()

    return train_step


def test_fix_train_step_passes_the_fix(capsys, two_replicas):
    ex.check_fix_train_step(make_train_step())
    assert "[pass] fix_train_step" in capsys.readouterr().out


def test_fix_train_step_with_the_model_outside_the_scope(two_replicas):
    with pytest.raises(ExerciseError, match="outside strategy.scope"):
        ex.check_fix_train_step(make_train_step(in_scope=False, distribute=False))


def scoped_but_whole_batch(strategy, make_model, x, y):
    """The notebook's buggy step with only the scope fixed: every replica still gets the whole batch."""
    import keras

    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    replica_step = make_replica_step(model, optimizer, len(x))

    @tf.function
    def step(x, y):
        return strategy.reduce(SUM, strategy.run(replica_step, args=(x, y)), axis=None)

    return float(step(tf.constant(x), tf.constant(y))), model.get_weights()


def test_fix_train_step_without_distributing_the_batch(two_replicas):
    with pytest.raises(
        ExerciseError,
        match="received 8 and 8 examples, not 4 each: strategy.run gave every replica the whole",
    ):
        ex.check_fix_train_step(scoped_but_whole_batch)


def whole_batch_to_each_replica(strategy, make_model, x, y):
    """Every replica handed the whole batch as a distributed value, the global batch len(x) x replicas."""
    import keras

    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    replica_step = make_replica_step(model, optimizer, len(x) * strategy.num_replicas_in_sync)
    inputs = [
        strategy.experimental_distribute_values_from_function(lambda _, v=v: tf.constant(v)) for v in (x, y)
    ]

    @tf.function
    def step(x, y):
        return strategy.reduce(SUM, strategy.run(replica_step, args=(x, y)), axis=None)

    return float(step(*inputs)), model.get_weights()


def sliced_by_hand(size):
    """The batch split by hand, x[k r : k (r + 1)] on replica r, with k = size(strategy, x)."""

    def train_step(strategy, make_model, x, y):
        import keras

        with strategy.scope():
            model = make_model()
            optimizer = keras.optimizers.SGD(0.1)
            optimizer.build(model.trainable_variables)
        replica_step = make_replica_step(model, optimizer, len(x))
        k = size(strategy, x)

        def part(values):
            return lambda context: tf.constant(values[k * context.replica_id_in_sync_group :][:k])

        inputs = [strategy.experimental_distribute_values_from_function(part(v)) for v in (x, y)]

        @tf.function
        def step(x, y):
            return strategy.reduce(SUM, strategy.run(replica_step, args=(x, y)), axis=None)

        return float(step(*inputs)), model.get_weights()

    return train_step


def test_fix_train_step_whole_batch_with_the_global_batch_times_replicas(two_replicas):
    """Undistributed inputs and global_batch_size = len(x) * replicas: one device's update and loss,
    yet every replica ran on the whole batch; the check reads what each replica received."""
    answer = make_train_step(distribute=False, times_replicas=True)
    with pytest.raises(ExerciseError, match="received 8 and 8 examples, not 4 each.*whole batch"):
        ex.check_fix_train_step(answer)


@pytest.mark.parametrize(
    "answer",
    [
        whole_batch_to_each_replica,
        # the 2x update "fixed" with half the learning rate, the loss reduced with MEAN
        make_train_step(distribute=False, loss_op=MEAN, learning_rate=lambda s: 0.1 / s.num_replicas_in_sync),
    ],
    ids=["distribute_values_whole_batch", "whole_batch_half_learning_rate"],
)
def test_fix_train_step_other_whole_batches(two_replicas, answer):
    with pytest.raises(ExerciseError, match="received 8 and 8 examples, not 4 each.*whole batch"):
        ex.check_fix_train_step(answer)


def test_fix_train_step_sliced_by_hand_passes(capsys, two_replicas):
    ex.check_fix_train_step(sliced_by_hand(lambda strategy, x: len(x) // strategy.num_replicas_in_sync))
    assert "[pass] fix_train_step" in capsys.readouterr().out


def test_fix_train_step_model_also_called_outside_the_step_passes(capsys, two_replicas):
    """What the model sees outside strategy.run (in the scope or not) is no replica's share."""
    fixed = make_train_step()

    def train_step(strategy, make_model, x, y):
        def make_and_call():
            model = make_model()
            model(tf.constant(x))
            return model

        make_and_call()
        return fixed(strategy, make_and_call, x, y)  # which calls it in the scope

    ex.check_fix_train_step(train_step)
    assert "[pass] fix_train_step" in capsys.readouterr().out


def test_fix_train_step_slices_of_a_constant_size(two_replicas):
    """Slices of 4, right on 2 replicas only: the one device's step saw half the batch."""
    with pytest.raises(
        ExerciseError, match="On one device the step ran on 4 examples per replica, not its own 8"
    ):
        ex.check_fix_train_step(sliced_by_hand(lambda strategy, x: 4))


# Each wrong answer of run_and_combine and fix_train_step, and the hint it must get.
MISTAKES = [
    ("run_and_combine", dict(loss_op=MEAN), "MEAN divides them by the replicas once more"),
    ("run_and_combine", dict(correct_op=MEAN), "a count adds up across replicas"),
    (
        "run_and_combine",
        dict(correct_op=MEAN, count=int),  # int(strategy.reduce(MEAN, ...)): 3 / 2 -> 1
        "you counted 1 right answers, not 3: a count adds up across replicas .SUM.; MEAN divides it",
    ),
    ("run_and_combine", dict(predicted="first"), "4 predictions for 7 examples.*strategy.gather"),
    ("run_and_combine", dict(predicted="sum"), "vectors of different lengths: reduce adds"),
    ("run_and_combine", dict(distribute=False), "each replica received all 7 examples: distribute the batch"),
    ("run_and_combine", dict(loss_op="first"), "is one replica's share of the batch's loss"),
    (
        "run_and_combine",
        dict(per_replica_batch=True),
        r"received \[2, 1\] examples, not the 7 once each",
    ),
    (
        "run_and_combine",
        dict(predicted="list"),
        "list of the replicas' values of different lengths.*strategy.gather",
    ),
    (
        "fix_train_step",
        dict(own_mean=True),  # make_replica_step(model, sgd, len(x) // N)
        "2.00x one device's: each replica divided its loss by its own share of the examples; the "
        r"global_batch given to make_replica_step is the whole batch, len\(x\), not one replica's share",
    ),
    ("fix_train_step", dict(loss_op=MEAN), "combine them with SUM, not MEAN"),
    (
        "fix_train_step",
        dict(per_replica_batch=True),
        "first 4 of 8 examples only: batch the dataset by the GLOBAL",
    ),
    ("fix_train_step", dict(loss_op="first"), "is one replica's share of the batch's loss"),
    ("fix_train_step", dict(times_replicas=True), "0.50x one device's: global_batch_size is the whole batch"),
]


@pytest.mark.parametrize(
    "exercise, mistake, hint",
    MISTAKES,
    ids=[f"{e}-" + ",".join(f"{k}={v}" for k, v in m.items()) for e, m, _ in MISTAKES],
)
def test_a_wrong_answer_gets_its_hint(two_replicas, exercise, mistake, hint):
    answer = make_run_and_combine(**mistake) if exercise == "run_and_combine" else make_train_step(**mistake)
    with pytest.raises(ExerciseError, match=hint):
        getattr(ex, f"check_{exercise}")(answer)


def test_fix_train_step_with_one_replicas_share_as_global_batch(two_replicas):
    """make_replica_step(model, sgd, len(x) // N): the answer uses compute_average_loss, so the hint
    names the argument it got wrong, not the call."""
    with pytest.raises(ExerciseError) as info:
        ex.check_fix_train_step(make_train_step(own_mean=True))
    message = str(info.value)
    assert (
        "global_batch given to make_replica_step is the whole batch, len(x), not one replica's share"
        in message
    )
    assert "with tf.nn.compute_average_loss" not in message


def test_run_and_combine_int_of_a_mean_count(two_replicas):
    """int(strategy.reduce(MEAN, outputs["correct"], axis=None)) truncates 3 / 2 to 1: the MEAN hint,
    not the generic one."""
    with pytest.raises(ExerciseError) as info:
        ex.check_run_and_combine(make_run_and_combine(correct_op=MEAN, count=int))
    assert "MEAN divides it by the replicas" in str(info.value)
    assert "the number right should be one device's" not in str(info.value)


def test_fix_train_step_not_done_yet():
    def blank(strategy, make_model, x, y):
        raise NotImplementedError("Exercise fix_train_step: write your code here")

    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_fix_train_step(blank)


# --------------------------------------------------------------------------- reduce_prediction
# The check runs the reductions on 2 replicas (the session's two virtual CPUs) next to one device.


def test_reduce_prediction_passes_the_right_numbers(capsys):
    ex.check_reduce_prediction({"SUM": 2.0, "MEAN": 1.0})
    out = capsys.readouterr().out
    assert "[pass] reduce_prediction: on 2 replicas (1.5 and 0.5) SUM = 2.0, one device's loss (2.0)" in out


@pytest.mark.parametrize(
    "prediction, hint",
    [
        (
            {"SUM": 2.0, "MEAN": 2.0},
            "You predicted MEAN = SUM = 2: MEAN averages the replicas' values; it does not add them.",
        ),
        (
            {"SUM": 4.0, "MEAN": 2.0},
            "You predicted SUM = 4 as if each replica divided by its OWN number of losses",
        ),
        (
            {"SUM": 8.0, "MEAN": 4.0},
            "You predicted SUM = 8: SUM adds the replicas' values, each (the sum of its losses) / global_batch_size=4.",
        ),
        ({"SUM": 1.5, "MEAN": 0.75}, "You predicted SUM = 1.5: SUM adds the replicas' values"),
        ({"SUM": 2.0, "MEAN": 0.5}, "You predicted MEAN = 0.5: MEAN averages the 2 replicas' values, each"),
    ],
    ids=["mean_as_the_sum", "local_means", "no_division", "one_replica", "mean_of_a_quarter"],
)
def test_reduce_prediction_hint_names_the_mistake_without_the_run(prediction, hint):
    """The run's numbers (the shares 1.5 and 0.5, SUM 2.0, MEAN 1.0) appear only in the pass message."""
    with pytest.raises(ExerciseError) as info:
        ex.check_reduce_prediction(prediction)
    message = str(info.value)
    assert hint in message
    own = {f"{v:g}" for v in prediction.values()}
    for number in {"1.5", "0.5", "2.0", "1.0", "1", "2"} - own:
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d.]| replicas)", message) is None, number


def test_reduce_prediction_takes_numpy_numbers(capsys):
    """A prediction computed with NumPy (np.float32(6 / 4) + ...) is a number too."""
    ex.check_reduce_prediction({"SUM": np.float32(2.0), "MEAN": np.float64(1.0)})
    ex.check_reduce_prediction({"SUM": np.int64(2), "MEAN": 1})
    assert capsys.readouterr().out.count("[pass] reduce_prediction") == 2
    with pytest.raises(ExerciseError, match="You predicted MEAN = SUM = 2: MEAN averages"):
        ex.check_reduce_prediction({"SUM": np.float32(2.0), "MEAN": np.float32(2.0)})
    with pytest.raises(ExerciseError, match=r"PREDICTION\['SUM'\] should be a number"):
        ex.check_reduce_prediction({"SUM": "2.0", "MEAN": 1.0})


def test_reduce_prediction_not_done_yet():
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_reduce_prediction({"SUM": None, "MEAN": None})


def test_reduce_prediction_not_a_dict():
    with pytest.raises(ExerciseError, match="dict with two numbers"):
        ex.check_reduce_prediction(2.0)
