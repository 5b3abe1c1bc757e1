"""Notebook 06: the checks of its exercises (TPU and hardware detection).

The hardware check runs the student's chain against fake machines
(:class:`course_utils.lessons.machines.FakeMachine`), so every branch is exercised without a TPU or a GPU.
"""

from __future__ import annotations

from typing import Any, Callable

from ..checks import exercise, expect, passed
from ..hardware import KINDS
from ..lessons.machines import FakeMachine


def _scenarios() -> list[tuple[FakeMachine, str, str]]:
    import tensorflow as tf

    return [
        (
            FakeMachine(tpu=True, gpus=2),
            "tpu",
            "a machine with a TPU (and 2 GPUs): the TPU comes first in the chain",
        ),
        (
            FakeMachine(gpus=4, tpu_error=ValueError("Please provide a TPU Name to connect to.")),
            "multi_gpu",
            "no TPU (ValueError) and 4 GPUs",
        ),
        (
            FakeMachine(
                gpus=1, tpu_error=tf.errors.NotFoundError(None, None, "TPUs not found in the cluster.")
            ),
            "one_gpu",
            "no TPU (NotFoundError) and 1 GPU",
        ),
        (
            FakeMachine(tpu_error=RuntimeError("TPU is not yet ready")),
            "cpu",
            "no TPU (RuntimeError) and no GPU",
        ),
        (FakeMachine(), "cpu", "no TPU (NoTPUError) and no GPU"),
    ]


def check_choose_hardware(choose_hardware: Callable[[Any, Any], str]) -> None:
    """``choose_hardware(find_tpu, list_devices)`` must walk TPU -> GPUs -> one GPU -> CPU."""
    with exercise("choose_hardware"):
        for machine, want, story in _scenarios():
            try:
                got = choose_hardware(machine.find_tpu, machine.list_devices)
            except NotImplementedError:
                raise
            except Exception as error:
                expect(
                    False,
                    f"On {story}, your function raised {type(error).__name__}. When find_tpu() "
                    "fails, whatever it raises, there is no usable TPU: catch Exception around it "
                    "and go on to the GPUs. (A cell that needs a TPU must never crash without one.)",
                )
            expect(
                got in KINDS,
                f"Return one of {', '.join(repr(k) for k in KINDS)}; on {story} you returned {got!r}.",
            )
            if want == "tpu":
                expect(
                    got == "tpu",
                    f"On {story}, expected 'tpu', got {got!r}. Call find_tpu() first, and return "
                    "'tpu' as soon as it returns without raising.",
                )
            expect(
                got == want,
                f"On {story}, expected {want!r}, got {got!r}. Count the GPUs with "
                "len(list_devices('GPU')): 2 or more is 'multi_gpu', exactly 1 is 'one_gpu', "
                "none is 'cpu'.",
            )
    passed("choose_hardware", "TPU, 4 GPUs, 1 GPU and CPU-only fakes, with 4 kinds of TPU error.")


def _last_step_sizes(strategy: Any) -> list[int]:
    """Examples per replica in the last step of 9 examples batched by 4 without drop_remainder."""
    import tensorflow as tf

    nine = tf.data.Dataset.range(9).batch(4)
    steps = [
        [int(t.shape[0]) for t in strategy.experimental_local_results(batch)]
        for batch in strategy.experimental_distribute_dataset(nine)
    ]
    return steps[-1]


def check_last_step_split(last_step_split: Callable[[], Any]) -> None:
    """``last_step_split()``: the student's prediction of the last step's split on 2 replicas."""
    import tensorflow as tf

    from ..strategies import mirrored_cpus

    with exercise("last_step_split"):
        guess = last_step_split()
        one = _last_step_sizes(tf.distribute.get_strategy())
        two = _last_step_sizes(mirrored_cpus(2, needed_by="The check of last_step_split"))
        try:
            guess = [float(g) for g in guess]
        except TypeError:
            expect(False, f"Return a list of numbers, one per replica, not {guess!r}.")
        expect(
            guess != [float(v) for v in one],
            f"{one} is one device's last batch. On 2 replicas, return one number per replica: "
            "how is that last batch shared between them?",
        )
        expect(
            len(guess) == len(two),
            f"Return one number per replica: {len(two)} numbers, not {len(guess)}.",
        )
        expect(
            all(g == int(g) for g in guess),
            f"{guess}: a replica receives whole examples; TensorFlow never cuts an example in two.",
        )
        expect(
            sum(guess) == sum(two),
            f"Your numbers add up to {sum(guess):g} examples, but the last batch holds "
            f"9 - 2 x 4 = {sum(two)}: TensorFlow neither copies nor pads examples.",
        )
        expect(
            [int(g) for g in guess] == two,
            f"The right total, the wrong way round: the first replica takes the larger share, so {two}.",
        )
    passed(
        "last_step_split",
        f"the last step gives the replicas {two} examples: one replica runs on an empty batch, "
        "a new shape that drop_remainder=True avoids.",
    )


#: Machines of the exercise global_batches: how many replicas TPUStrategy makes on each TPU runtime.
TPU_REPLICAS = {"v2-8": 8, "v5e-1": 1}
PER_REPLICA = 64


def check_global_batches(global_batches: Callable[[], Any]) -> None:
    """``global_batches()``: the student's prediction of the global batch on four machines."""
    import tensorflow as tf

    from ..hardware import plan_hardware
    from ..strategies import mirrored_cpus

    keys = ("v2-8", "v5e-1", "4 GPUs", "this CPU")
    with exercise("global_batches"):
        guess = global_batches()
        expect(
            isinstance(guess, dict) and set(guess) == set(keys),
            f"Return a dict with exactly the keys {', '.join(repr(k) for k in keys)}; got "
            f"{sorted(guess) if isinstance(guess, dict) else type(guess).__name__}.",
        )
        four = FakeMachine(gpus=4)
        gpu_plan = plan_hardware(find_tpu=four.find_tpu, list_devices=four.list_devices)
        cpu_replicas = mirrored_cpus(2, needed_by="The check of global_batches").num_replicas_in_sync
        one_device = tf.distribute.get_strategy().num_replicas_in_sync
        want = {
            "v2-8": TPU_REPLICAS["v2-8"] * PER_REPLICA,
            "v5e-1": TPU_REPLICAS["v5e-1"] * PER_REPLICA,
            "4 GPUs": len(gpu_plan.devices) * PER_REPLICA,
            "this CPU": cpu_replicas * PER_REPLICA,
        }
        v28 = guess["v2-8"]
        expect(
            v28 != 4 * PER_REPLICA,
            f"v2-8: {v28} counts its 4 chips, but each chip has 2 cores and TPUStrategy makes one "
            "replica per core.",
        )
        expect(v28 == want["v2-8"], f"v2-8: 8 cores, one replica each; {v28} is not 8 x 64.")
        v5e = guess["v5e-1"]
        expect(
            v5e == want["v5e-1"],
            f"v5e-1: {v5e} assumes more than one replica, but a v5e-1 is a single chip with one "
            "core: TPUStrategy makes 1 replica there. Not every TPU runtime has 8 cores.",
        )
        gpus = guess["4 GPUs"]
        expect(
            gpus == want["4 GPUs"],
            f"4 GPUs: the chain plans {gpu_plan.strategy_description()}, one replica per GPU, so "
            f"4 x 64; you said {gpus}.",
        )
        cpu = guess["this CPU"]
        expect(
            cpu != one_device * PER_REPLICA,
            f"this CPU: {cpu} is one device's batch. The course splits a CPU into 2 virtual CPUs "
            "and trains on a MirroredStrategy over both, one replica each.",
        )
        expect(cpu == want["this CPU"], f"this CPU: {cpu_replicas} replicas x 64, not {cpu}.")
    passed(
        "global_batches",
        ", ".join(f"{k} {v}" for k, v in want.items()) + ": 64 x num_replicas_in_sync.",
    )
