"""The checks of notebook 08 pass right answers and explain planted mistakes.

The coordinator checks run on an in-process parameter-server cluster. A process that joins a
cluster keeps it for good (its devices are renamed ``/job:chief/...`` and a ``MirroredStrategy``
made afterwards hangs in its all-reduce), so those cases run in one child process, this file run
as a script; the test process itself never joins a cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from course_utils.errors import ExerciseError
from course_utils.exercises import parameter_servers as ex

ROOT = Path(__file__).resolve().parents[1]
MARKER = "CASES-JSON "

# ----------------------------------------------------------------------------- the child's answers


def _answers(tf: Any) -> dict[str, tuple[str, Any]]:
    """``{case: (check, answer)}``: the right answer of each coordinator check and the wrong ones
    real code contains."""

    def step_factory(kind: str) -> Any:
        def make(strategy: Any, model: Any, optimizer: Any) -> Any:
            def replica_fn(features: Any, labels: Any) -> Any:
                with tf.GradientTape() as tape:
                    per_example = tf.reduce_mean(tf.square(model(features, training=True) - labels), axis=-1)
                    if kind == "reduce_sum":
                        loss = tf.reduce_sum(per_example)
                    elif kind == "divide_by_workers":  # the MirroredStrategy habit: batch x workers
                        loss = tf.nn.compute_average_loss(
                            per_example, global_batch_size=2 * tf.shape(per_example)[0]
                        )
                    elif kind == "fixed_divisor":  # the notebook's GLOBAL_BATCH = 16, typed in
                        loss = tf.nn.compute_average_loss(per_example, global_batch_size=16)
                    else:  # tf.reduce_mean is right here: one replica per step
                        loss = tf.reduce_mean(per_example)
                grads = tape.gradient(loss, model.trainable_variables)
                if kind != "no_apply":
                    optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            def train_step(iterator: Any) -> Any:
                if kind == "no_strategy_run":  # one replica per step, so why strategy.run?
                    return replica_fn(*next(iterator))
                per_replica = strategy.run(replica_fn, args=next(iterator))
                if kind == "no_return":
                    return None
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            return train_step if kind == "plain_python" else tf.function(train_step)

        return make

    def right_loop(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        futures = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
        coordinator.join()
        return [f.fetch() for f in futures]

    def fetch_without_join(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        futures = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
        return [f.fetch() for f in futures]  # fetch() waits for its step: right too

    def no_join(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        return [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]

    def no_fetch(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        futures = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
        coordinator.join()
        return futures

    def called_directly(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        return [step(iterator) for _ in range(steps)]

    def one_short(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        return right_loop(coordinator, step, iterator, steps - 1)

    def args_not_a_tuple(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        futures = [coordinator.schedule(step, args=iterator) for _ in range(steps)]
        coordinator.join()
        return [f.fetch() for f in futures]

    def last_only(coordinator: Any, step: Any, iterator: Any, steps: int) -> Any:
        for _ in range(steps):
            future = coordinator.schedule(step, args=(iterator,))
        coordinator.join()
        return [future.fetch()]

    def pipeline(
        seed: str = "worker", repeat: bool = True, divide: int = 1, paired: bool = True, iterate: bool = True
    ) -> Any:
        def make(coordinator: Any, x: Any, y: Any, batch: int) -> Any:
            def dataset_fn() -> Any:
                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                shuffle_seed = {"fixed": 1, "global": None}.get(seed, tf.cast(worker, tf.int64))
                if seed == "unshuffled":
                    data = tf.data.Dataset.from_tensor_slices((x, y))
                elif paired:
                    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=shuffle_seed)
                else:
                    xs = tf.data.Dataset.from_tensor_slices(x).shuffle(len(x), seed=shuffle_seed)
                    data = tf.data.Dataset.zip((xs, tf.data.Dataset.from_tensor_slices(y)))
                return (data.repeat() if repeat else data).batch(batch // divide)

            per_worker = coordinator.create_per_worker_dataset(dataset_fn)
            return iter(per_worker) if iterate else per_worker

        return make

    def on_the_coordinator(coordinator: Any, x: Any, y: Any, batch: int) -> Any:
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).batch(batch // 2)
        return iter(coordinator.strategy.experimental_distribute_dataset(dataset))

    return {
        "step right": ("ps_train_step", step_factory("right")),
        "step reduce_sum": ("ps_train_step", step_factory("reduce_sum")),
        "step divide_by_workers": ("ps_train_step", step_factory("divide_by_workers")),
        "step no_apply": ("ps_train_step", step_factory("no_apply")),
        "step plain_python": ("ps_train_step", step_factory("plain_python")),
        "step no_return": ("ps_train_step", step_factory("no_return")),
        "step no_strategy_run": ("ps_train_step", step_factory("no_strategy_run")),
        "step fixed_divisor": ("ps_train_step", step_factory("fixed_divisor")),
        "loop right": ("ps_schedule_loop", right_loop),
        "loop fetch_without_join": ("ps_schedule_loop", fetch_without_join),
        "loop no_join": ("ps_schedule_loop", no_join),
        "loop no_fetch": ("ps_schedule_loop", no_fetch),
        "loop called_directly": ("ps_schedule_loop", called_directly),
        "loop one_short": ("ps_schedule_loop", one_short),
        "loop args_not_a_tuple": ("ps_schedule_loop", args_not_a_tuple),
        "loop last_only": ("ps_schedule_loop", last_only),
        "input right": ("ps_input", pipeline()),
        "input on_the_coordinator": ("ps_input", on_the_coordinator),
        "input not_repeated": ("ps_input", pipeline(repeat=False)),
        "input divided_batch": ("ps_input", pipeline(divide=2)),
        "input unpaired": ("ps_input", pipeline(paired=False)),
        "input fixed_seed": ("ps_input", pipeline(seed="fixed")),
        "input global_seed": ("ps_input", pipeline(seed="global")),
        "input unshuffled": ("ps_input", pipeline(seed="unshuffled")),
        "input not_an_iterator": ("ps_input", pipeline(iterate=False)),
    }


def _judged(check: str, answer: Any, strategy: Any, coordinator: Any) -> str:
    """The case graded as the grader does: the judge runs the check with stand-ins, the kernel's side
    (a thread here) runs the check's harness on the cluster; "pass" or the judge's message."""
    from judging import judged

    from course_tools.grading import judge

    served = {judge.JUDGED[check].functions[0]: answer, "strategy": strategy, "coordinator": coordinator}
    status, message = judged(check, served)
    return "pass" if status == "passed" else message if status == "failed" else f"{status}: {message}"


def _run_cases() -> None:
    """In the child: start a 2-worker, 2-ps cluster in this process and grade every answer."""
    import keras  # noqa: F401  (Keras 3 before the strategy, as in the notebook)

    from course_utils.runtime import import_tensorflow
    from course_utils.workers.ps_training import in_process_cluster

    tf = import_tensorflow()
    tf.random.set_seed(42)  # the notebook's set-up cell seeds TensorFlow
    strategy = tf.distribute.ParameterServerStrategy(in_process_cluster(tf, num_workers=2, num_ps=2))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    checks: dict[str, Callable[..., None]] = {
        "ps_train_step": ex.check_ps_train_step,
        "ps_schedule_loop": ex.check_ps_schedule_loop,
        "ps_input": ex.check_ps_input,
    }
    outcome = {}
    for case, (check, answer) in _answers(tf).items():
        try:
            checks[check](answer, strategy, coordinator)
            outcome[case] = "pass"
        except ExerciseError as error:
            outcome[case] = str(error)
        except Exception as error:  # noqa: BLE001 - reported, and the test says which case
            outcome[case] = f"not an ExerciseError: {type(error).__name__}: {error}"
        outcome["judged " + case] = _judged(check, answer, strategy, coordinator)
    print(MARKER + json.dumps(outcome), flush=True)
    os._exit(0)  # the servers cannot be stopped; end the process at once


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    assert lines, f"the cluster cases did not finish (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(lines[-1][len(MARKER) :])


def test_the_judge_gives_every_case_the_notebooks_verdict(outcomes: dict[str, str]) -> None:
    """Graded outside the kernel (the harness on the cluster, the verdict in the judge), every right
    and wrong answer gets what the notebook's check gives it: the pass, or the same hint."""
    cases = [c for c in outcomes if not c.startswith("judged ")]
    assert cases
    for case in cases:
        assert outcomes["judged " + case] == outcomes[case], case


@pytest.mark.parametrize("case", ["step right", "loop right", "loop fetch_without_join", "input right"])
def test_coordinator_checks_pass_right_answers(outcomes: dict[str, str], case: str) -> None:
    assert outcomes[case] == "pass", outcomes[case]


@pytest.mark.parametrize(
    "case, hint",
    [
        ("step reduce_sum", "sum over the batch"),
        ("step divide_by_workers", "divided by the batch times the workers"),
        ("step no_apply", "did not move"),
        ("step plain_python", "@tf.function"),
        ("step no_return", "Return the loss"),
        ("loop no_join", "coordinator.join()"),
        ("loop no_fetch", ".fetch()"),
        ("loop called_directly", "coordinator.schedule(step"),
        ("loop one_short", "ran 5 steps"),
        ("loop args_not_a_tuple", "args=(iterator,)"),
        ("loop last_only", "yours has 1"),
        ("step no_strategy_run", "outside strategy.run"),
        ("step fixed_divisor", "your loss divides by 16"),
        ("input not_an_iterator", "a step calls next() on an iterator"),
        ("input on_the_coordinator", "create_per_worker_dataset"),
        ("input not_repeated", "repeat()"),
        ("input divided_batch", "do not divide the batch"),
        ("input unpaired", "wrong labels"),
        (
            "input unshuffled",
            "same batches in the same order: shuffle in dataset_fn, seeded with the worker index",
        ),
    ],
)
def test_coordinator_checks_name_the_mistake(outcomes: dict[str, str], case: str, hint: str) -> None:
    message = outcomes[case]
    assert message.startswith("Exercise ps_"), message
    assert hint in message, message


def test_fixed_seed_is_named_when_both_workers_ran(outcomes: dict[str, str]) -> None:
    # The check can only compare the workers' orders when both ran a step (almost always): it
    # then names the seed; it never passes an answer whose workers read the same order.
    for case in (
        "input fixed_seed",
        "input global_seed",
    ):  # the child sets a global seed, as the set-up cell does
        message = outcomes[case]
        assert message == "pass" or "same order" in message, message


# ----------------------------------------------------------------------------- the partitioner checks

OBSERVED_SHARDS = {
    "embedding_300": [[0, 100, "ps 0"], [100, 200, "ps 1"], [200, 300, "ps 0"]],
    "embedding_1000": [[0, 250, "ps 1"], [250, 500, "ps 0"], [500, 750, "ps 1"], [750, 1000, "ps 0"]],
}


def test_shard_count(capsys) -> None:
    ex.check_shard_count({"embedding_300": 3, "embedding_1000": 4}, observed=OBSERVED_SHARDS)
    ex.check_shard_count({"embedding_300": 3, "embedding_1000": 4})  # TensorFlow's partitioner itself
    assert capsys.readouterr().out.count("[pass] shard_count") == 2


def test_shard_count_reference_is_tensorflows_partitioner() -> None:
    import tensorflow as tf

    for rows, columns, minimum, cap in [
        (300, 32, 16 << 10, 4),
        (1000, 32, 64 << 10, 2),
        (100, 32, 16 << 10, 4),
        (1000, 32, 16 << 10, 4),
        (7, 1, 4, 8),
    ]:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(minimum, cap)
        want = int(partitioner(tf.TensorShape([rows, columns]), tf.float32)[0])
        assert ex.reference_shard_count(rows, columns, 4, minimum, cap) == want


@pytest.mark.parametrize(
    "prediction, hint",
    [
        ({"embedding_300": 2, "embedding_1000": 4}, "rounded down"),
        ({"embedding_300": 3, "embedding_1000": 8}, "max_shards=4, the cap"),
        ({"embedding_300": 3, "embedding_1000": 2}, "one shard per parameter server"),
        ({"embedding_300": 1, "embedding_1000": 4}, "count ceil(size / min_shard_bytes), then cap it"),
        ({"embedding_300": 3}, "Set PREDICTION"),
        ({"embedding_300": 3.0, "embedding_1000": 4}, "whole number"),
        (None, "Set PREDICTION"),
    ],
)
def test_shard_count_mistakes(prediction, hint) -> None:
    for observed in (None, OBSERVED_SHARDS):
        with pytest.raises(ExerciseError, match="shard_count") as caught:
            ex.check_shard_count(prediction, observed=observed)
        assert hint in str(caught.value)
        assert "cluster made" not in str(caught.value)  # the hint never says what the cluster did


def test_ps_placement(capsys) -> None:
    ex.check_ps_placement(ex.reference_ps_placement, observed=OBSERVED_SHARDS)
    assert "[pass] ps_placement" in capsys.readouterr().out
    assert ex.reference_ps_placement([3, 4], 2) == [[0, 1, 0], [1, 0, 1, 0]]


@pytest.mark.parametrize(
    "answer, hint",
    [
        (
            lambda counts, num_ps: [[i % num_ps for i in range(n)] for n in counts],
            "start every variable on ps 0",
        ),
        (
            lambda counts, num_ps: [[k % num_ps] * n for k, n in enumerate(counts)],
            "Each shard is a variable of its own",
        ),
        (
            lambda counts, num_ps: [[(k + i) % num_ps for i in range(n)] for k, n in enumerate(counts)],
            "count the shards created so far",
        ),
    ],
    ids=["restart per variable", "whole variable on one server", "counter per variable index"],
)
def test_ps_placement_mistakes(answer, hint) -> None:
    with pytest.raises(ExerciseError, match="ps_placement") as caught:
        ex.check_ps_placement(answer, observed=OBSERVED_SHARDS)
    assert hint in str(caught.value)
    assert str(ex.reference_ps_placement([3, 4], 2)) not in str(caught.value)  # never the answer


def test_ps_placement_unlike_the_cluster() -> None:
    """Right in every case, but the notebook's cluster placed its shards otherwise: the hint does
    not print where."""
    layout = {key: [[a, b, "ps 0"] for a, b, _ in shards] for key, shards in OBSERVED_SHARDS.items()}
    with pytest.raises(ExerciseError, match="not where the cluster placed") as caught:
        ex.check_ps_placement(ex.reference_ps_placement, observed=layout)
    assert "[[0, 0, 0]" not in str(caught.value)


# ----------------------------------------------------------------------------- the kernel's native stderr

NATIVE_CHILD = """
import os, sys
from course_utils.lessons.coordinator import native_logs_to_file
first = native_logs_to_file()
assert native_logs_to_file() == first  # a second call keeps the first file
os.write(2, b"native noise\\n")  # what TensorFlow's C++ logging does
print("python says hello", file=sys.stderr, flush=True)
print(first)
"""


def test_native_logs_go_to_a_file_and_python_stderr_still_shows(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COURSE_SCRATCH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", NATIVE_CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    log = Path(done.stdout.strip())
    assert log.parent == tmp_path / "08_parameter_servers"
    assert log.read_text() == "native noise\n"
    assert "python says hello" in done.stderr and "native noise" not in done.stderr


if __name__ == "__main__":
    _run_cases()
