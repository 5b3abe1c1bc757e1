"""Notebook 02: the checks of its exercises (strategy types)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..checks import exercise, expect, expect_close, passed
from ..strategies import STRATEGIES, mirrored_cpus

#: (machines, devices per machine, device type, synchronous, answer, the cluster in words)
SCENARIOS: tuple[tuple[int, int, str, bool, str, str], ...] = (
    (1, 1, "GPU", True, "OneDeviceStrategy", "a workstation with one GPU"),
    (1, 8, "GPU", True, "MirroredStrategy", "one machine with 8 GPUs, synchronous"),
    (1, 4, "CPU", True, "MirroredStrategy", "one machine split into 4 virtual CPUs, synchronous"),
    (4, 8, "GPU", True, "MultiWorkerMirroredStrategy", "4 machines with 8 GPUs each, synchronous"),
    (2, 1, "CPU", True, "MultiWorkerMirroredStrategy", "2 CPU-only machines, synchronous"),
    (20, 1, "CPU", False, "ParameterServerStrategy", "20 CPU machines, asynchronous"),
    (3, 4, "GPU", False, "ParameterServerStrategy", "3 machines with 4 GPUs each, asynchronous"),
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

_WHY = {
    "OneDeviceStrategy": "one device: nothing to distribute, but OneDeviceStrategy keeps the strategy interface",
    "MirroredStrategy": "one machine, several devices, synchronous: a mirrored copy per device",
    "MultiWorkerMirroredStrategy": "several machines, synchronous: mirrored copies across workers",
    "ParameterServerStrategy": "asynchronous training needs parameter servers, whatever the devices",
    "TPUStrategy": "TPU cores have their own strategy, on one host or a pod",
}


def check_choose_strategy(choose_strategy: Callable[..., str]) -> None:
    """``choose_strategy(machines, devices_per_machine, device_type, synchronous)`` names the strategy."""
    with exercise("choose_strategy"):
        for machines, devices, device_type, synchronous, want, words in SCENARIOS:
            got = choose_strategy(machines, devices, device_type, synchronous)
            expect(
                isinstance(got, str) and got in STRATEGY_NAMES,
                f"Return the class name as a string, one of {', '.join(STRATEGY_NAMES)}; for "
                f"{words} you returned {got!r}.",
            )
            expect(
                got == want,
                f"For {words} (machines={machines}, devices_per_machine={devices}, "
                f"device_type={device_type!r}, synchronous={synchronous}) you chose {got}, but the "
                f"answer is {want}: {_WHY[want]}. Check the order of your tests: TPU first, then "
                "asynchronous, then the number of machines, then the number of devices.",
            )
    passed("choose_strategy", f"all {len(SCENARIOS)} clusters get the right strategy.")


def _short(device: str) -> str:
    """``/cpu:1`` or ``/job:localhost/replica:0/task:0/device:CPU:1`` -> ``CPU:1``."""
    import tensorflow as tf

    spec = tf.DeviceSpec.from_string(device)
    return f"{(spec.device_type or 'CPU').upper()}:{spec.device_index or 0}"


def check_make_strategy(make_strategy: Callable[[str, Sequence[str]], Any], devices: Sequence[str]) -> None:
    """``make_strategy(kind, devices)`` builds each strategy kind of notebook 02 over ``devices``."""
    from ..strategies import describe

    devices = list(devices)
    n = len(devices)
    short = tuple(_short(d) for d in devices)
    # kind -> (replicas, compute devices, variable type, where variables live); None: not checked.
    # The names are the course's (strategies.STRATEGIES), so a renamed strategy changes one place.
    want = {
        "default": (1, None, "ResourceVariable", None),
        "one_device": (1, short[:1], "ResourceVariable", short[:1]),
        "mirrored": (n, short, "MirroredVariable", short),
        "multi_worker": (1, None, "MirroredVariable", None),
        "central_storage": (n, short, "AggregatingVariable", short[:1]),
    }
    with exercise("make_strategy"):
        for kind, (replicas, compute, variable, lives_on) in want.items():
            name = STRATEGIES[kind].name
            strategy = make_strategy(kind, devices)
            expect(
                strategy is not None and hasattr(strategy, "scope"),
                f"make_strategy({kind!r}, devices) returned {strategy!r}: return the strategy object.",
            )
            info = describe(strategy, show=False)
            expect(
                info.name == name,
                f"make_strategy({kind!r}, devices) made a {info.name}; expected a {name}.",
            )
            expect(
                info.replicas == replicas,
                f"make_strategy({kind!r}, devices) has {info.replicas} replica(s) in sync; expected "
                f"{replicas}. Pass all the devices ({', '.join(devices)}) to the constructor.",
            )
            if compute is not None:
                expect(
                    info.devices == compute,
                    f"make_strategy({kind!r}, devices) computes on {', '.join(info.devices)}; expected "
                    f"{', '.join(compute)}.",
                )
            expect(
                info.variable_type == variable,
                f"make_strategy({kind!r}, devices): a variable created in its scope is a "
                f"{info.variable_type}; expected a {variable}.",
            )
            if lives_on is not None:
                expect(
                    info.variable_devices == lives_on,
                    f"make_strategy({kind!r}, devices): its variables live on "
                    f"{', '.join(info.variable_devices)}; expected {', '.join(lives_on)}"
                    + (" (parameter_device=devices[0])." if kind == "central_storage" else "."),
                )
        try:
            make_strategy("mirorred", devices)
        except ValueError as error:
            expect(
                "mirrored" in str(error),
                "make_strategy('mirorred', ...) raised ValueError, but its message should list the "
                f"valid kinds (it said: {str(error)[:80]!r}).",
            )
        else:
            expect(
                False,
                "make_strategy('mirorred', devices) should raise ValueError naming the valid kinds; "
                "a typo must not give a strategy silently.",
            )
    passed("make_strategy", "all five kinds have the right replicas, devices and variables.")


def check_global_mean(global_mean: Callable[[Any, Any], float]) -> None:
    """``global_mean(strategy, values)``: the mean of all numbers of a PerReplica value."""
    import numpy as np
    import tensorflow as tf

    from ..devices import cpu_count

    with exercise("global_mean"):
        default = tf.distribute.get_strategy()
        got = global_mean(default, tf.constant([1.0, 2.0, 3.0, 6.0]))
        expect(
            isinstance(got, float),
            f"Return a Python float (got {type(got).__name__}): wrap the result in float(...).",
        )
        expect_close(got, 3.0, "On the default strategy (one replica) the mean of [1, 2, 3, 6] is 3.0")
        n = cpu_count()
        if n >= 2:
            strategy = mirrored_cpus(n)
            for shards in (
                [[1.0, 1.0], [3.0, 3.0]] + [[2.0, 2.0]] * (n - 2),
                [[1.0, 2.0, 3.0], [10.0]] + [[4.0, 5.0]] * (n - 2),
            ):
                values = strategy.experimental_distribute_values_from_function(
                    lambda context, shards=shards: tf.constant(shards[context.replica_id_in_sync_group])
                )
                want = float(np.mean(np.concatenate(shards)))
                got = global_mean(strategy, values)
                expect(
                    isinstance(got, float),
                    f"Return a Python float (got {type(got).__name__}): wrap the result in float(...).",
                )
                mean_of_means = float(np.mean([np.mean(s) for s in shards]))
                lengths = ", ".join(str(len(s)) for s in shards)
                if not np.isclose(want, mean_of_means):
                    expect(
                        not np.isclose(got, mean_of_means),
                        f"On {n} replicas holding {lengths} numbers you returned {got:g}, the mean "
                        f"of the replicas' means; the mean of all numbers is {want:g}. Reduce each "
                        "replica's sum and count with SUM, then divide (or reduce(MEAN, values, axis=0)).",
                    )
                expect_close(
                    got,
                    want,
                    f"On {n} replicas holding {lengths} numbers, the mean of all numbers is {want:g}",
                )
    passed("global_mean", "matches NumPy on one replica and on several with uneven lengths.")


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
                isinstance(value, (int, float)) and value == value,
                f"PREDICTION[{key!r}] should be a number (got {value!r}).",
            )
        ran = reduce_outcomes()
        shares = " and ".join(f"{v:.1f}" for v in ran["replicas"])
        local = [sum(s) / len(s) for s in REDUCE_SHARDS]
        if abs(prediction["SUM"] - sum(local)) < 1e-6 and abs(sum(local) - ran["SUM"]) > 1e-6:
            expect(
                False,
                f"You predicted SUM = {prediction['SUM']:g}, as if each replica divided by its OWN number "
                f"of losses; compute_average_loss divides by global_batch_size={REDUCE_GLOBAL_BATCH}, so "
                f"the replicas hold {shares}, and the run gave SUM = {ran['SUM']:.1f}.",
            )
        expect(
            abs(prediction["MEAN"] - ran["one device"]) > 1e-6 or abs(ran["MEAN"] - ran["one device"]) < 1e-6,
            f"You predicted MEAN = {prediction['MEAN']:g}, one device's loss; but MEAN averages the 2 "
            f"replicas' values ({shares}): {ran['MEAN']:.1f}. Each replica already holds its share of the "
            "global loss, so it is the SUM that equals one device.",
        )
        for key in ("SUM", "MEAN"):
            expect(
                abs(prediction[key] - ran[key]) < 1e-6,
                f"You predicted {key} = {prediction[key]:g}; on 2 replicas the run gave {ran[key]:.1f}. Each "
                f"replica computed (sum of its losses) / {REDUCE_GLOBAL_BATCH}: {shares}; SUM adds them, "
                "MEAN divides that by the 2 replicas.",
            )
    passed(
        "reduce_prediction",
        f"on 2 replicas ({shares}) SUM = {ran['SUM']:.1f}, one device's loss ({ran['one device']:.1f}); "
        f"MEAN = {ran['MEAN']:.1f}, half of it.",
    )
