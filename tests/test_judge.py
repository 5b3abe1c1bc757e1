"""The judge (course_tools.grading.judge) and the kernel's side (course_tools.grading.answers), without a notebook.

The kernel's side runs in a thread over one end of a socket pair, the judge's check over the
other, in this process: what the grader does in two processes, at the cost of none.
tests/test_grade.py grades the hostile class through the real command.
"""

from __future__ import annotations

import ast
import json
import socket
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

import course_utils.exercises as exercises
from course_tools.grading import answers, code, judge
from course_utils.exercises import data_parallelism, setup_and_hardware

ROOT = Path(__file__).resolve().parents[1]


def judged(ident: str, functions: dict[str, Callable[..., Any]], literals: Optional[dict[str, str]] = None,
           seed: Optional[int] = None) -> tuple[str, str]:  # fmt: skip
    """Judge ``ident`` with the kernel's side answering from ``functions`` in a thread."""
    ours, theirs = socket.socketpair()
    kernel = threading.Thread(target=_kernel, args=(theirs, ident, functions), daemon=True)
    kernel.start()
    exercises.UNSEEN = None if seed is None else __import__("random").Random(seed)
    try:
        with ours, ours.makefile("rb") as stream:
            assert answers.read_message(stream) == {"serve": ident}
            status, message = judge.judge_one(ident, literals or {}, ours, stream)
            answers.write_message(ours, {"verdict": status, "message": message})
    finally:
        exercises.UNSEEN = None
    kernel.join(timeout=30)
    return status, message


def _kernel(sock: socket.socket, ident: str, functions: dict[str, Callable[..., Any]]) -> None:
    try:
        with sock:
            answers.answer_calls(sock, ident, functions)
    except (EOFError, OSError):
        pass


# --------------------------------------------------------------------------- plain data


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -2.5,
        "MirroredStrategy",
        [1, (2, 3.0), {"a": None}],
        {"SUM": 2.0, "MEAN": 1.0},
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([True, False]),
        np.int64(7),
    ],
)
def test_plain_data_goes_through_unchanged(value) -> None:
    back = answers.decode(json.loads(json.dumps(answers.encode(value))))
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    else:
        assert back == value and type(back) is type(value.item() if isinstance(value, np.generic) else value)


def test_a_tensor_arrives_as_its_numbers_and_non_finite_floats_survive() -> None:
    import tensorflow as tf

    back = answers.decode(answers.encode({"w": tf.constant([1.5, 2.5])}))
    assert np.array_equal(back["w"], np.array([1.5, 2.5], dtype=np.float32))
    assert np.isnan(answers.decode(answers.encode(float("nan"))))
    assert answers.decode(answers.encode(float("-inf"))) == float("-inf")


@pytest.mark.parametrize(
    "value", [lambda: 1, object(), np.array([object()]), {1: "key not a string"}, type("Model", (), {})()]
)
def test_what_is_not_plain_data_is_refused_by_name(value) -> None:
    with pytest.raises(answers.NotPlainData):
        answers.encode(value)


@pytest.mark.parametrize(
    "wire",
    [
        {"__array__": {"dtype": "|O", "shape": [1], "data": ""}},
        {"__array__": {"dtype": "<f8", "shape": [3], "data": "AAAAAAAAAAA="}},
        {"__pickle__": "gASV"},
        {"__float__": "1e999"},
        {"a": 1, "b": 2},
    ],
)
def test_the_judge_reads_nothing_but_plain_data(wire) -> None:
    with pytest.raises(ValueError):
        answers.decode(wire)


# --------------------------------------------------------------------------- predictions, read not run


@pytest.mark.parametrize(
    "source, name, returned, want",
    [
        ("PREDICTION = {'SUM': 2.0, 'MEAN': 1.0}  # mine", "PREDICTION", False, {"SUM": 2.0, "MEAN": 1.0}),
        ("N = None  # yours\nN = 1000 // 64 + 1", "N", False, 16),
        ('def f():\n    """Doc."""\n    return (2.5 + 6.0) / 2\n', "f", True, 4.25),
        ("def f():\n    a = 2.5\n    b = -a + 8.5\n    return (a + b) / 2\n", "f", True, 4.25),
        ("BATCHES = [[4, 4]] * 5 + [[2, 1]]", "BATCHES", False, [[4, 4]] * 5 + [[2, 1]]),
        ("BATCHES = 2 * [[4, 4]]", "BATCHES", False, [[4, 4], [4, 4]]),
        # arithmetic on the pasted times, item by item (a lookup, nothing run)
        (
            "SHOWN = {1: 4.47, 2: 3.59}\nc = 2 * (SHOWN[1] - SHOWN[2])\ns = SHOWN[1] - c\nPREDICTION = s + c / 5",
            "PREDICTION",
            False,
            (4.47 - 2 * (4.47 - 3.59)) + 2 * (4.47 - 3.59) / 5,
        ),
    ],
)
def test_a_prediction_is_read_from_the_source(source, name, returned, want) -> None:
    assert judge.prediction(source, name, returned=returned) == want


@pytest.mark.parametrize(
    "source, name, returned",
    [
        ("def f():\n    return course_utils.exercises.setup_and_hardware._uneven_means()[1]\n", "f", True),
        ("def f():\n    import sys\n    return 1.0\n", "f", True),
        ("N = len(epoch_batches(strategy, 1000, 32))", "N", False),
        ("N = 10 ** 10 ** 10", "N", False),
        ("N = (1).__class__", "N", False),
        ("N = [[4, 4]] * 334", "N", False),  # 1,002 items: a list so built holds at most 1,000
        ("N = [[0] * 40] * 20 + [[0] * 40] * 5", "N", False),
        ("N = ['a'] * 3", "N", False),
        ("N = SHOWN[1]", "N", False),  # a name the answer never bound
        ("X = [1]\nN = X[5]", "N", False),
        ("X = {1: 2}\nN = X[X]", "N", False),
    ],
)
def test_a_prediction_that_is_code_is_refused(source, name, returned) -> None:
    with pytest.raises(ValueError, match="written as a number|not compute it"):
        judge.prediction(source, name, returned=returned)


@pytest.mark.parametrize(
    "source, returned",
    [("def f():\n    raise NotImplementedError('Exercise f: replace')\n", True), ("M = 1", False)],
)
def test_no_prediction_is_a_placeholder(source, returned) -> None:
    with pytest.raises(NotImplementedError):
        judge.prediction(source, "f" if returned else "N", returned=returned)


def test_exceptions_come_back_under_their_own_names() -> None:
    assert type(judge.rebuilt({"type": "ValueError", "message": "uneven"})) is ValueError
    assert type(judge.rebuilt({"type": "NotImplementedError", "message": ""})) is NotImplementedError
    odd = judge.rebuilt({"type": "ReplicaCountError", "message": "needs 2"})
    assert isinstance(odd, judge.StudentRaised) and type(odd).__name__ == "ReplicaCountError"
    # What is not an Exception in the student's kernel is not one the check may take for a verdict.
    assert isinstance(judge.rebuilt({"type": "SystemExit", "message": ""}), judge.StudentRaised)


# --------------------------------------------------------------------------- the registry


def test_every_judged_exercise_is_called_as_the_master_calls_its_check() -> None:
    """Each judged exercise's check cell calls ``<module>.<check>(...)`` with the registry's names,
    the check's module is the one the notebook imports, and nothing else is passed."""
    import nbformat

    from course_tools.cellmeta import exercise_id, role

    seen = set()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        aliases: dict[str, str] = {}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            try:
                tree = ast.parse(code.neutralise_shell(cell.source))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "course_utils.exercises":
                    aliases.update({a.asname or a.name: a.name for a in node.names})
            if role(cell) != "check" or exercise_id(cell) not in judge.JUDGED:
                continue
            entry = judge.JUDGED[exercise_id(cell)]
            calls = [
                n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            ]
            call = next(c for c in calls if c.func.attr.startswith("check_"))
            assert isinstance(call.func.value, ast.Name) and aliases[call.func.value.id] == entry.module
            assert call.func.attr == entry.check
            assert [a.id for a in call.args] == [a.partition(":")[2] for a in entry.args]  # type: ignore[attr-defined]
            assert {k.arg for k in call.keywords} == set(entry.kwargs) | set(entry.leaves_out)
            seen.add(exercise_id(cell))
    assert seen == set(judge.JUDGED)


# --------------------------------------------------------------------------- judging


def test_right_answers_pass_and_the_verdict_is_the_judges() -> None:
    right = data_parallelism.reference_solutions()
    status, message = judged(
        "data_parallel_gradient", {"data_parallel_gradient": right["data_parallel_gradient"]}, seed=1
    )
    assert status == "passed" and message.startswith(
        "one device's gradient on 1 to 5 replicas, uneven shards (4 + 3"
    )
    status, _ = judged("epoch_traffic", {"epoch_traffic": right["epoch_traffic"]}, seed=2)
    assert status == "passed"
    literal = {"UPDATES_ON_2_REPLICAS": "UPDATES_ON_2_REPLICAS = 16  # 15 full batches and one of 40"}
    assert judged("updates_per_epoch", {}, literal)[0] == "passed"


def test_an_answer_learned_by_heart_fails_on_the_case_drawn_at_grading_time() -> None:
    right = data_parallelism.reference_solutions()["epoch_traffic"]
    seen = {case: right(*case) for case in data_parallelism.TRAFFIC_CASES}

    def by_heart(*case: Any) -> float:
        return seen.get(case, 0.0)

    assert judged("epoch_traffic", {"epoch_traffic": by_heart})[0] == "passed"  # the notebook's cases
    for seed in range(3):
        status, message = judged("epoch_traffic", {"epoch_traffic": by_heart}, seed=seed)
        assert status == "failed", message


def test_the_checks_frame_is_not_in_the_kernel() -> None:
    """An answer that walks up its callers' frames for the check's reference finds the kernel's
    loop, with nothing of the check in it."""
    import sys

    def thief(local_means: list, shard_sizes: list) -> Any:
        frame = sys._getframe(1)
        while frame is not None:
            if "single" in frame.f_locals:
                return frame.f_locals["single"]
            frame = frame.f_back
        return {"kernel": 0 * local_means[0]["kernel"], "bias": 0 * local_means[0]["bias"]}

    status, message = judged("data_parallel_gradient", {"data_parallel_gradient": thief})
    assert status == "failed" and "not one device's gradient" in message


def test_what_the_student_raised_is_the_hint_and_a_placeholder_says_not_done() -> None:
    def blank(*args: Any) -> Any:
        raise NotImplementedError("Exercise global_batch: replace this line")

    status, message = judged("global_batch", {"global_batch": blank})
    assert status == "failed" and "is not done yet" in message

    def right(strategy: Any, per_replica: int) -> int:  # the strategy crosses as its recipe
        return per_replica * strategy.num_replicas_in_sync

    assert judged("global_batch", {"global_batch": right}, seed=5)[0] == "passed"
    status, message = judged("global_batch", {"global_batch": lambda s, p: p * s.num_replicas_in_sync / 1})
    assert status == "failed" and "(an int)" in message
    status, message = judged("global_batch", {"global_batch": lambda s, p: p})
    assert status == "failed" and "each got half of what you asked for" in message


def test_a_prediction_left_as_the_placeholder_is_not_done_yet() -> None:
    blank = 'def uneven_mean():\n    raise NotImplementedError("Exercise uneven_mean: replace this line")\n'
    status, message = judged("uneven_mean", {}, {"uneven_mean": blank})
    assert status == "failed" and "is not done yet" in message
    status, message = judged(
        "updates_per_epoch", {}, {"UPDATES_ON_2_REPLICAS": "UPDATES_ON_2_REPLICAS = None"}
    )
    assert status == "failed" and "is not done yet" in message


def test_a_timing_prediction_is_judged_on_the_times_the_student_pasted() -> None:
    """09's call_cost_prediction: SHOWN and PREDICTION are read from the answer, whatever a later run measures."""

    def answer(prediction: str) -> dict[str, str]:
        source = f"SHOWN = {{1: 6.23, 2: 5.21}}\nPREDICTION = {prediction}\n"
        return {"SHOWN": source, "PREDICTION": source}

    assert judged("call_cost_prediction", {}, answer("4.19 + 2.04 / 5"))[0] == "passed"
    status, message = judged("call_cost_prediction", {}, answer("5.21"))  # no gain beyond 2 steps per call
    assert status == "failed" and "no faster than at 2 steps per call" in message
    status, message = judged("call_cost_prediction", {}, answer("6.23 / 5"))  # 5 times faster
    assert status == "failed" and "is not 5 times faster" in message
    status, message = judged("call_cost_prediction", {}, answer("4.19"))  # s alone: the curve's floor
    assert status == "failed" and "that is s" in message
    status, message = judged("call_cost_prediction", {}, answer("measured[5]"))
    assert status == "failed" and "not computed by code" in message
    assert judged("call_cost_explanation", {}, {"EXPLANATION": 'EXPLANATION = "c"'})[0] == "passed"


def test_an_answer_that_is_not_data_gets_a_hint_not_a_crash() -> None:
    status, message = judged("data_parallel_gradient", {"data_parallel_gradient": lambda m, s: object()})
    assert status == "failed" and "which the grader cannot read" in message


def test_a_kernel_that_answers_with_a_verdict_or_hangs_up_gets_no_verdict() -> None:
    for reply in ({"verdict": "passed", "message": "trust me"}, None):
        ours, theirs = socket.socketpair()

        def kernel(sock: socket.socket = theirs, reply: Optional[dict] = reply) -> None:
            with sock, sock.makefile("rb") as stream:
                answers.read_message(stream)  # the first call
                if reply is not None:
                    answers.write_message(sock, reply)

        thread = threading.Thread(target=kernel, daemon=True)
        thread.start()
        with ours, ours.makefile("rb") as stream:
            status, message = judge.judge_one("global_batch", {}, ours, stream)
        thread.join(timeout=10)
        assert status == "error" and (
            "not one the grader understands" in message or "stopped answering" in message
        )


def test_setup_and_hardware_reads_unseen_only_when_the_judge_sets_it() -> None:
    assert exercises.UNSEEN is None and exercises.unseen() is None
    # In a notebook the check's cases are the fixed ones: its pass line never changes.
    setup_and_hardware.check_global_batch(lambda strategy, p: p * strategy.num_replicas_in_sync)


def _master_answers() -> dict[str, str]:
    """Each exercise's answer in the course's masters (the solution cells' source)."""
    import nbformat

    from course_tools.cellmeta import exercise_id, role

    found = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if role(cell) == "solution":
                found[exercise_id(cell)] = cell.source
    return found


@pytest.mark.parametrize("seed", [3, 11, 29])
@pytest.mark.parametrize("ident", sorted(judge.JUDGED))
def test_every_judged_exercise_passes_the_masters_answer_through_the_judge(ident, seed) -> None:
    """The masters' answers, called across the socket with grading-time cases added: passed."""
    source = _master_answers()[ident]
    entry = judge.JUDGED[ident]
    from course_utils.runtime import import_tensorflow

    namespace: dict[str, Any] = {"np": np, "tf": import_tensorflow()}  # what the notebooks imported
    exec(compile(source, f"<{ident}>", "exec"), namespace)  # the course's own answer, not a student's
    functions = {name: namespace[name] for name in entry.functions}
    literals = {name: source for name in entry.literals}
    status, message = judged(ident, functions, literals, seed=seed)
    assert status == "passed", message


def test_a_strategy_and_a_dataset_cross_as_recipes_and_the_kernel_reports_its_runs() -> None:
    """global_mean takes a strategy and a dataset: the kernel builds its own from their recipes, and
    the judge learns how often the student's code called strategy.run (a count, never a verdict)."""
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()

    def without_the_replicas(strategy, dataset):
        return float(np.mean(next(iter(dataset)).numpy()))

    def mean_of_means(strategy, dataset):
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        return float(strategy.reduce("MEAN", strategy.run(tf.reduce_mean, args=(batch,)), axis=None))

    status, message = judged("global_mean", {"global_mean": without_the_replicas}, seed=3)
    assert status == "failed" and "never gave the dataset" in message, message
    status, message = judged("global_mean", {"global_mean": mean_of_means}, seed=3)
    assert status == "failed" and "MEAN of the replicas' means" in message, message


def test_a_prediction_in_words_is_judged_from_its_literal() -> None:
    """03's same_rate_loss: the answer is a string read from the source; a wrong one gets its hint."""
    said = {"HIGHER_LOSS": 'HIGHER_LOSS = None  # "1 device", "2 replicas" or "tie"\nHIGHER_LOSS = "tie"'}
    status, message = judged("same_rate_loss", {}, said)
    assert status == "failed" and "Claim 1 matched two replicas of 32" in message
