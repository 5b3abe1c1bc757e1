"""The checks of notebook 02 (strategy types): each passes the reference answer and turns a
planted mistake into an ExerciseError whose hint says what to fix."""

from __future__ import annotations

import pytest
import tensorflow as tf

from course_utils.errors import ExerciseError
from course_utils.exercises import strategy_types as ex

CPUS = ["/cpu:0", "/cpu:1"]


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
    assert "[pass] choose_strategy" in capsys.readouterr().out


def test_choose_strategy_that_ignores_asynchronous_training():
    def wrong(machines, devices_per_machine, device_type="GPU", synchronous=True):
        return choose_strategy(machines, devices_per_machine, device_type, True)

    with pytest.raises(ExerciseError, match="asynchronous training needs parameter servers") as info:
        ex.check_choose_strategy(wrong)
    assert "Exercise choose_strategy" in str(info.value)
    assert "ParameterServerStrategy" in str(info.value)


def test_choose_strategy_that_tests_machines_before_tpus():
    def wrong(machines, devices_per_machine, device_type="GPU", synchronous=True):
        if machines > 1 and synchronous:
            return "MultiWorkerMirroredStrategy"
        return choose_strategy(machines, devices_per_machine, device_type, synchronous)

    with pytest.raises(ExerciseError, match="TPU first") as info:
        ex.check_choose_strategy(wrong)
    assert "a TPU pod slice of 16 hosts" in str(info.value)


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


# --------------------------------------------------------------------------- make_strategy


def make_strategy(kind, devices, *, mirrored_ops=None, parameter_device=None, refuse=True):
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0])
    if kind == "mirrored":
        ops = tf.distribute.ReductionToOneDevice() if mirrored_ops == "r1" else None
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
    if kind == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if kind == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=devices, parameter_device=parameter_device or devices[0]
        )
    if refuse:
        raise ValueError("unknown kind: use default, one_device, mirrored, multi_worker or central_storage")
    return tf.distribute.get_strategy()


def test_make_strategy_passes_the_reference(capsys):
    ex.check_make_strategy(make_strategy, CPUS)
    assert "[pass] make_strategy" in capsys.readouterr().out


def test_make_strategy_with_reduction_to_one_device_passes_too(capsys):
    # TensorFlow's own cross-device ops (the reference) and ReductionToOneDevice both give a
    # MirroredStrategy with a copy per device: the check accepts either.
    ex.check_make_strategy(lambda k, d: make_strategy(k, d, mirrored_ops="r1"), CPUS)
    assert "[pass] make_strategy" in capsys.readouterr().out


def test_make_strategy_with_variables_on_the_wrong_device():
    with pytest.raises(ExerciseError, match="parameter_device=devices\\[0\\]") as info:
        ex.check_make_strategy(lambda k, d: make_strategy(k, d, parameter_device=d[1]), CPUS)
    assert "live on CPU:1" in str(info.value)


def test_make_strategy_that_mirrors_on_one_device_only():
    def wrong(kind, devices):
        return make_strategy(kind, devices[:1] if kind == "mirrored" else devices)

    with pytest.raises(ExerciseError, match="Pass all the devices"):
        ex.check_make_strategy(wrong, CPUS)


def test_make_strategy_that_accepts_a_typo():
    with pytest.raises(ExerciseError, match="should raise ValueError"):
        ex.check_make_strategy(lambda k, d: make_strategy(k, d, refuse=False), CPUS)


def test_make_strategy_with_the_wrong_kind():
    def wrong(kind, devices):
        return make_strategy("mirrored" if kind == "central_storage" else kind, devices)

    with pytest.raises(ExerciseError, match="made a MirroredStrategy; expected a CentralStorageStrategy"):
        ex.check_make_strategy(wrong, CPUS)


# --------------------------------------------------------------------------- global_mean


def global_mean(strategy, values):
    def sum_and_count(v):
        return tf.reduce_sum(v), tf.cast(tf.size(v), v.dtype)

    sums, counts = strategy.run(sum_and_count, args=(values,))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None)
    count = strategy.reduce(tf.distribute.ReduceOp.SUM, counts, axis=None)
    return float(total / count)


def test_global_mean_passes_the_reference(capsys):
    ex.check_global_mean(global_mean)
    assert "[pass] global_mean" in capsys.readouterr().out


def test_global_mean_with_reduce_mean_along_axis_0_passes_too(capsys):
    ex.check_global_mean(lambda s, v: float(s.reduce(tf.distribute.ReduceOp.MEAN, v, axis=0)))
    assert "[pass] global_mean" in capsys.readouterr().out


def test_global_mean_as_a_mean_of_means():
    def wrong(strategy, values):
        means = strategy.run(tf.reduce_mean, args=(values,))
        return float(strategy.reduce(tf.distribute.ReduceOp.MEAN, means, axis=None))

    with pytest.raises(ExerciseError, match="mean of the replicas' means") as info:
        ex.check_global_mean(wrong)
    assert "2 replicas holding 3, 1 numbers" in str(info.value)


def test_global_mean_summed_but_not_divided():
    def wrong(strategy, values):
        return float(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=0))

    with pytest.raises(ExerciseError, match="mean of \\[1, 2, 3, 6\\] is 3.0"):
        ex.check_global_mean(wrong)


def test_global_mean_that_returns_a_tensor():
    def wrong(strategy, values):
        return tf.constant(global_mean(strategy, values))

    with pytest.raises(ExerciseError, match="Python float"):
        ex.check_global_mean(wrong)


def test_global_mean_that_is_right_on_one_replica_only():
    def wrong(strategy, values):
        return float(tf.reduce_mean(strategy.experimental_local_results(values)[0]))

    with pytest.raises(ExerciseError, match="On 2 replicas"):
        ex.check_global_mean(wrong)


# --------------------------------------------------------------------------- reduce_prediction
# The check runs the reductions on 2 replicas (the session's two virtual CPUs) next to one device.


def test_reduce_prediction_passes_the_right_numbers(capsys):
    ex.check_reduce_prediction({"SUM": 2.0, "MEAN": 1.0})
    out = capsys.readouterr().out
    assert "[pass] reduce_prediction: on 2 replicas (1.5 and 0.5) SUM = 2.0, one device's loss (2.0)" in out


def test_reduce_prediction_mean_as_the_global_loss():
    with pytest.raises(ExerciseError, match="MEAN averages the 2 replicas' values \\(1.5 and 0.5\\): 1.0"):
        ex.check_reduce_prediction({"SUM": 2.0, "MEAN": 2.0})


def test_reduce_prediction_local_means():
    with pytest.raises(ExerciseError, match="divided by its OWN number of losses"):
        ex.check_reduce_prediction({"SUM": 4.0, "MEAN": 2.0})


def test_reduce_prediction_forgetting_the_division():
    with pytest.raises(ExerciseError, match="You predicted SUM = 8; on 2 replicas the run gave 2.0"):
        ex.check_reduce_prediction({"SUM": 8.0, "MEAN": 4.0})


def test_reduce_prediction_not_done_yet():
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_reduce_prediction({"SUM": None, "MEAN": None})


def test_reduce_prediction_not_a_dict():
    with pytest.raises(ExerciseError, match="dict with two numbers"):
        ex.check_reduce_prediction(2.0)
