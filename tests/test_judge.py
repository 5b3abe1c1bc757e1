"""The judge (course_tools.grading.judge) and the kernel's side (course_tools.grading.answers), without a notebook.

The kernel's side runs in a thread over one end of a socket pair, the judge's check over the
other, in this process: what the grader does in two processes, at the cost of none.
tests/test_grade.py grades the hostile class through the real command.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import itertools
import json
import socket
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest
from judging import judged, replaying, verdict

import course_utils.exercises as exercises
from course_tools.grading import answers, code, context, judge
from course_utils.exercises import data_parallelism, setup_and_hardware

ROOT = Path(__file__).resolve().parents[1]


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
            assert len(call.args) == len(entry.args)
            for node, spec in zip(call.args, entry.args):
                if not spec.startswith("none:"):  # "none:": what only the kernel has, any expression
                    assert isinstance(node, ast.Name) and node.id == spec.partition(":")[2], spec
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
        "one device's gradient on 1 to 5 replicas, uneven shards (4 + 4 + 2"
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

        def kernel(sock: socket.socket, ident: str, reply: Optional[dict] = reply) -> None:
            with sock.makefile("rb") as stream:
                answers.write_message(sock, {"serve": ident})
                answers.read_message(stream)  # the first call
                if reply is not None:
                    answers.write_message(sock, reply)

        status, message = judged("global_batch", kernel=kernel)
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


#: The files notebook 07's %%writefile answers make (its programs import one another by these names).
PROGRAM_FILES = {
    "worker_input": "worker_input.py",
    "worker_step": "worker_step.py",
    "resume_point": "train.py",
}


def _write_programs(folder: Path) -> dict[str, Path]:
    """Notebook 07's programs, the masters' %%writefile answers, written into ``folder``: {exercise: file}."""
    masters = _master_answers()
    written = {ident: folder / name for ident, name in PROGRAM_FILES.items()}
    for ident, path in written.items():
        path.write_text(masters[ident].split("\n", 1)[1])
    return written


#: What the answers run in these tests find in their namespace (the notebooks' imports).
GIVEN = ("np", "tf", "keras")


@functools.lru_cache(maxsize=None)
def _above(ident: str, given: tuple[str, ...] = GIVEN) -> str:
    """What ``ident``'s answer in the masters reads from the cells above it (02's SUM and
    make_replica_step, 04's loss_object, 06's replica_step...), as the grader reads it
    (course_tools.grading.context.definitions): the statements that bind those names, as source."""
    import nbformat

    from course_tools.cellmeta import exercise_id, role

    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        for k, cell in enumerate(cells):
            if role(cell) == "solution" and exercise_id(cell) == ident:
                return context.definitions([c.source for c in cells[:k]], cell.source, given)
    raise LookupError(ident)


@pytest.mark.parametrize("seed", [3, 11, 29])
@pytest.mark.parametrize("ident", sorted(judge.JUDGED))
def test_every_judged_exercise_passes_the_masters_answer_through_the_judge(ident, seed, tmp_path) -> None:
    """The masters' answers, called across the socket with grading-time cases added: passed (a
    program written by a %%writefile answer is handed over as its file's path, as the notebook does)."""
    if ident == "naive_loss_prediction":
        pytest.skip("judged on 4 virtual CPUs in a process of its own (test_the_naive_loss_prediction_...)")
    if any(arg.startswith("kernel:") for arg in judge.JUDGED[ident].args):
        pytest.skip("needs the notebook's cluster: tests/test_checks_parameter_servers.py judges it there")
    if ident in JAX_KERNEL_EXERCISES:
        pytest.skip(
            "needs a kernel with Keras on JAX: test_notebook_11s_answers_are_judged_from_a_jax_kernel"
        )
    source = _master_answers()[ident]
    entry = judge.JUDGED[ident]
    if source.startswith("%%writefile"):  # notebook 07's programs, which import one another
        program = _write_programs(tmp_path)[ident]
        status, message = judged(ident, {name: str(program) for name in entry.functions}, seed=seed)
        assert status == "passed", message
        return
    import keras

    from course_utils.runtime import import_tensorflow

    namespace: dict[str, Any] = {"np": np, "tf": import_tensorflow(), "keras": keras}  # GIVEN
    _exec_cell(_above(ident), f"<above {ident}>", namespace)  # what the answer reads from cells above
    _exec_cell(source, f"<master {ident}>", namespace)  # the course's own answer, not a student's
    functions = {name: namespace[name] for name in entry.functions}
    literals = {name: source for name in entry.literals}
    status, message = judged(ident, functions, literals, seed=seed)
    assert status == "passed", message


def _exec_cell(source: str, filename: str, namespace: dict[str, Any]) -> None:
    """Run a cell's source in ``namespace``, its source where AutoGraph reads it (as IPython does)."""
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


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


# --------------------------------------------------------------------------- harnesses


def _wrong_answers(tf: Any) -> list[tuple[str, str, Callable[..., Any], str]]:
    """(exercise, function name, a wrong answer real code contains, what its hint must say)."""

    def own_moments(x):  # BatchNormalization without synchronized=True
        return tf.nn.moments(x, axes=[0])

    def same_mask(x, rate, step):  # keras.layers.Dropout on each replica
        keep = tf.random.stateless_uniform(tf.shape(x), seed=[1, step]) >= rate
        return tf.where(keep, x / (1 - rate), tf.zeros_like(x))

    def local_clip(grads, clip_norm):  # the optimizer's global_clipnorm, on each replica
        return tf.clip_by_global_norm(grads, clip_norm)[0]

    import keras

    def fit_script(scope: bool, global_batch: Callable[[Any, int], int]) -> Callable[..., Any]:
        def fit_on_replicas(strategy, make_model, images, labels, per_replica_batch):
            batches = tf.data.Dataset.from_tensor_slices((images, labels))
            with strategy.scope() if scope else contextlib.nullcontext():
                model = make_model()
                model.compile(
                    optimizer=keras.optimizers.SGD(0.05),
                    loss=keras.losses.SparseCategoricalCrossentropy(True),
                )
            model.fit(batches.batch(global_batch(strategy, per_replica_batch)), epochs=1, verbose=0)
            return model

        return fit_on_replicas

    def resumable(wrong: str) -> Callable[..., Any]:
        def fit_resumable(strategy, make_model, dataset, epochs, backup_dir, callbacks=()):
            with strategy.scope():
                model = make_model()
            if wrong == "list":  # `callbacks + [...]`: right on a list, not on the default ()
                chosen = callbacks + [keras.callbacks.BackupAndRestore(backup_dir)]
            else:  # ModelCheckpoint into backup_dir: files there, nothing fit resumes from
                path = f"{backup_dir}/latest.weights.h5"
                chosen = [keras.callbacks.ModelCheckpoint(path, save_weights_only=True), *callbacks]
            model.fit(dataset, epochs=epochs, verbose=0, callbacks=chosen)
            return model

        return fit_resumable

    return [
        ("global_moments", "global_moments", own_moments, "its own examples"),
        *_wrong_replica_steps(tf),
        *_wrong_run_and_combines(tf),
        *_wrong_train_steps(tf),
        ("replica_dropout", "replica_dropout", same_mask, "both replicas drew the same mask"),
        ("clip_after_sum", "clip_summed_gradients", local_clip, "Each replica clipped its own gradient"),
        # the notebook's buggy script: no scope, batched per replica
        (
            "fit_on_replicas",
            "fit_on_replicas",
            fit_script(False, lambda s, p: p),
            "built outside `with strategy",
        ),
        ("fit_on_replicas", "fit_on_replicas", fit_script(True, lambda s, p: p * 2), "hard-coded `* 2`"),
        # the tutorial's pipeline (a short last batch), and the remainder dropped with an uneven batch
        ("even_batches", "even_batches", lambda d, g, r: d.batch(g), "a mean of means"),
        ("even_batches", "even_batches", lambda d, g, r: d.batch(g, drop_remainder=True), "fit raises"),
        (
            "even_batches",
            "even_batches",
            lambda d, g, r: d.batch(g - g % 2, drop_remainder=True),
            "every batch must be a size that",
        ),  # fmt: skip
        ("fit_resumable", "fit_resumable", resumable("list"), "fails when `callbacks` is a tuple"),
        ("fit_resumable", "fit_resumable", resumable("checkpoint"), "but no training_metadata.json"),
    ]


def _wrong_replica_steps(tf: Any) -> list[tuple[str, str, Callable[..., Any], str]]:
    """01's replica_step: one device's tf.reduce_mean, and a gradient all-reduced before it is returned."""

    def make(loss: str = "global", all_reduce: bool = False) -> Callable[..., Any]:
        def make_replica_step(kernel, bias, global_batch):
            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ kernel + bias)
                    value = (
                        tf.reduce_mean(per_example)
                        if loss == "mean"
                        else tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                    )
                grads = tape.gradient(value, [kernel, bias])
                return tf.distribute.get_replica_context().all_reduce("SUM", grads) if all_reduce else grads

            return replica_step

        return make_replica_step

    return [
        ("replica_step", "make_replica_step", make(loss="mean"), "averages over its own examples"),
        ("replica_step", "make_replica_step", make(all_reduce=True), "returns the all-reduced gradient"),
    ]


def _wrong_run_and_combines(tf: Any) -> list[tuple[str, str, Callable[..., Any], str]]:
    """02's run_and_combine: the loss reduced with MEAN, one replica's predictions, the predictions
    reduced (reduce's AddN error, caught in the kernel), the batch never distributed."""
    SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN

    def make(loss_op: Any = SUM, predicted: str = "gather", distribute: bool = True) -> Callable[..., Any]:
        def run_and_combine(strategy, step_fn, x, y):
            batch = (tf.constant(x), tf.constant(y))
            if distribute:
                dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(len(x))
                batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
            out = tf.function(lambda inputs: strategy.run(step_fn, args=inputs))(batch)
            classes = {
                "gather": lambda: strategy.gather(out["predicted"], axis=0),
                "first": lambda: strategy.experimental_local_results(out["predicted"])[0],
                "sum": lambda: strategy.reduce(SUM, out["predicted"], axis=None),
            }[predicted]()
            return {
                "loss": float(strategy.reduce(loss_op, out["loss"], axis=None)),
                "predicted": classes.numpy(),
                "correct": int(strategy.reduce(SUM, out["correct"], axis=None)),
            }

        return run_and_combine

    name = "run_and_combine"
    return [
        (name, name, make(loss_op=MEAN), "MEAN divides them by the replicas once more"),
        (name, name, make(predicted="first"), "4 predictions for 7 examples"),
        (name, name, make(predicted="sum"), "vectors of different lengths: reduce adds"),
        (name, name, make(distribute=False), "each replica received all 7 examples: distribute the batch"),
    ]


def _wrong_train_steps(tf: Any) -> list[tuple[str, str, Callable[..., Any], str]]:
    """02's fix_train_step: the notebook's buggy step (Keras's AssertionError, crossing as itself),
    the scope fixed but the batch given whole to every replica, a replica's share as the global batch."""
    import keras

    SUM = tf.distribute.ReduceOp.SUM

    def make(in_scope: bool = True, distribute: bool = True, own_share: bool = False) -> Callable[..., Any]:
        def train_step(strategy, make_model, x, y):
            with strategy.scope() if in_scope else contextlib.nullcontext():
                model = make_model()
            with strategy.scope():
                sgd = keras.optimizers.SGD(0.1)
                sgd.build(model.trainable_variables)
            global_batch = len(x) // strategy.num_replicas_in_sync if own_share else len(x)

            def replica_step(xs, ys):
                with tf.GradientTape() as tape:
                    errors = tf.squeeze(model(xs), axis=1) - ys
                    loss = tf.nn.compute_average_loss(tf.square(errors), global_batch_size=global_batch)
                sgd.apply_gradients(
                    zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
                )
                return loss

            batch = (tf.constant(x), tf.constant(y))
            if distribute:
                dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(len(x))
                batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
            step = tf.function(
                lambda inputs: strategy.reduce(SUM, strategy.run(replica_step, args=inputs), axis=None)
            )
            return float(step(batch)), model.get_weights()

        return train_step

    name = "fix_train_step"
    return [
        (name, "train_step", make(in_scope=False, distribute=False), "outside strategy.scope()"),
        (name, "train_step", make(distribute=False), "strategy.run gave every replica the whole batch"),
        (name, "train_step", make(own_share=True), "each replica divided its loss by its own share"),
    ]


def test_a_harness_runs_the_students_code_in_the_kernel_and_its_mistake_is_named() -> None:
    """A check with a harness (the student's function on a strategy) sends the whole harness to the
    kernel; the judge sees only the numbers, and a wrong answer gets the notebook's hint."""
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    for ident, name, wrong, said in _wrong_answers(tf):
        calls: list[str] = []

        def counted(*args: Any, wrong: Callable[..., Any] = wrong) -> Any:
            calls.append("called")
            return wrong(*args)

        status, message = judged(ident, {name: counted}, seed=5)
        assert status == "failed" and said in message, (ident, message)
        assert calls, ident  # the student's function ran (in the kernel's thread), not the judge's copy


def _custom_loop_mistakes(tf: Any) -> list[tuple[str, str, Callable[..., Any], str]]:
    """Notebook 04's wrong answers that real code contains: (exercise, name, answer, its hint)."""
    from test_checks_custom_training_loops import (
        WRONG_DATA_LOSSES,
        make_dataset_factory,
        make_loss_object,
        make_test_factory,
        right_compute_loss,
        unscaled_penalty,
        with_penalty,
    )

    ce = make_loss_object()
    right = right_compute_loss(tf, ce)

    def global_real(mask):
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(mask))

    def always_add_n(labels, logits, mask, model_losses):  # tf.add_n([]) raises
        return right(labels, logits, mask, []) + tf.nn.scale_regularization_loss(tf.add_n(model_losses))

    def own_mean_share(y, z, m):  # own mean times own share: 0 / 0 on a replica of padding only
        return tf.reduce_sum(ce(y, z) * m) / tf.reduce_sum(m) * tf.reduce_sum(m) / global_real(m)

    def wrong_data_loss(mistake: str) -> Callable[..., Any]:
        return with_penalty(tf, WRONG_DATA_LOSSES[mistake][0](tf, ce))

    loss, data, test = "padded_loss", "per_replica_dataset_fn", "distributed_test_step"
    return [
        (loss, "compute_loss", wrong_data_loss("own_count"), "each replica divided by its OWN count of real examples"),
        (loss, "compute_loss", wrong_data_loss("sample_weight_slots"), "your loss divides by all 16 slots"),
        (loss, "compute_loss", unscaled_penalty(tf, right), "the penalties count 2.00 times"),
        (loss, "compute_loss", always_add_n, "with model_losses=[] (a model without regularizers) your code raised"),
        (loss, "compute_loss", with_penalty(tf, own_mean_share), "that replica divided 0 by 0"),
        (data, "make_dataset_fn", make_dataset_factory(tf, "global_batch"), "8 examples per step, 16 in all"),
        (data, "make_dataset_fn", make_dataset_factory(tf, "shard_by_replicas"),
         "num_input_pipelines (not num_replicas_in_sync)"),
        (data, "make_dataset_fn", make_dataset_factory(tf, "no_shard"), "every example would be trained on twice"),
        (data, "make_dataset_fn", make_dataset_factory(tf, "repeat_forever"), "more than one pass"),
        (test, "make_distributed_test_step", make_test_factory(tf, ce, "outside"),
         "outside strategy.run, and TensorFlow refused"),
        (test, "make_distributed_test_step", make_test_factory(tf, ce, "first_replica"), "One device was right"),
        (test, "make_distributed_test_step", make_test_factory(tf, ce, "unmasked"), "padding examples were counted"),
    ]  # fmt: skip


def test_notebook_04s_mistakes_are_named_by_the_judge_from_what_its_harnesses_send() -> None:
    """04's checks run the student's loss, dataset_fn and test step in the kernel (their harnesses)
    and judge what comes back: the losses, the examples each replica got, the metrics, what raised
    (a TensorFlow error by its message: its class does not cross). Each mistake gets its hint."""
    from course_utils.runtime import import_tensorflow

    for ident, name, wrong, said in _custom_loop_mistakes(import_tensorflow()):
        status, message = judged(ident, {name: wrong}, seed=5)
        assert status == "failed" and said in message, (ident, said, message)


def _by_heart() -> list[tuple[str, Any]]:
    """What a kernel that learned the notebook's run by heart sends each harness call: one device's
    right run on the notebook's own data (01's replica_step, 02's run_and_combine and fix_train_step)."""
    from course_utils.exercises import strategy_types as st

    # check_replica_step's notebook data, its first case: 1 replica, 16 examples
    rng = np.random.default_rng(11)
    params = {"kernel": 0.3 * rng.normal(size=(4, 3)), "bias": 0.1 * rng.normal(size=3)}
    x, y = rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 3, size=16).astype(np.int32)
    grads = data_parallelism.mean_loss_gradient(params, x.astype(np.float64), y)
    weights, sx, sy = st.score_data()
    logits = sx @ weights
    shifted = logits - logits.max(axis=1, keepdims=True)
    losses = np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(len(sy)), sy]
    rx, ry = st.regression_data()
    loss, after = st.one_device_step(rx, ry)
    return [
        ("replica_step", {"callable": True, "type": "list", "length": 2,
                          "local": [[grads["kernel"]], [grads["bias"]]]}),
        ("run_and_combine", {"seen": [[0, sx]], "shown": "", "result": {
            "loss": float(losses.mean()), "predicted": logits.argmax(axis=1), "correct": 3}}),
        ("fix_train_step", {"seen": [[0, rx]], "shown": "", "result": [loss, [after[:3, None], after[3:]]]}),
    ]  # fmt: skip


def _same_update_wrong_answers(folder: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(exercise, the functions the kernel is handed, what the hint must say): real mistakes in the
    steps that compare.same_update judges (capstone_port, capstone_counter, worker_step)."""
    from test_capstone import right_clip, right_loss
    from test_checks_capstone import WARMUP_HINT, _colleague_port, _counter, _local_clip, _unscaled_penalty
    from test_checks_multi_worker_training import step_with, write_program

    from course_utils.exercises import capstone

    own_mean = step_with(
        "squared = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)\n"
        "            share = tf.nn.compute_average_loss(squared, global_batch_size=GLOBAL_BATCH)",
        "share = tf.reduce_mean(tf.square(model(x, training=True) - y))",
    )
    unreduced = step_with(
        "return strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None)", "return shares"
    )
    programs = []
    for name, answer in (("own_mean", own_mean), ("unreduced", unreduced)):
        (folder / name).mkdir()
        programs.append(write_program(folder / name, worker_step=answer)["worker_step"])
    port = "make_train_step"
    return [
        ("capstone_port", {port: capstone.step_with_loss(_unscaled_penalty, right_clip)}, "added on every replica"),
        ("capstone_port", {port: capstone.step_with_loss(right_loss, _local_clip)}, "clips its own gradient"),
        ("capstone_counter", {"fixed_port": _counter("SUM")}, "the step counter has aggregation=SUM"),
        ("capstone_counter", {"fixed_port": _counter()}, "aggregation=NONE: each replica adds to its own copy"),
        ("capstone_counter", {"fixed_port": _counter("SUM", synchronization="ON_READ")}, "synchronization=ON_READ"),
        ("capstone_counter", {"fixed_port": _colleague_port}, WARMUP_HINT),
        ("worker_step", {"STEP": str(programs[0])}, "each replica averages over its own examples"),
        ("worker_step", {"STEP": str(programs[1])}, "each replica's own loss (a PerReplica value)"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(8))
def test_a_same_update_check_runs_the_students_step_in_the_kernel_and_names_its_mistake(
    case, tmp_path
) -> None:
    """compare.same_update's checks send every run of the student's step (each replica count, each
    probe) to the kernel as a harness call, and diagnose here from the runs' numbers and the
    variables the step made: the notebook's hints."""
    ident, functions, said = _same_update_wrong_answers(tmp_path)[case]
    status, message = judged(ident, functions, seed=5)
    assert status == "failed" and said in message, (ident, message)


def _forged_jax_runs() -> list[tuple[str, Any]]:
    """Notebook 11's harnesses answered with the right layout and placement but no update, or a zero
    one (every call of an exercise gets the same reply): the judge's one device (a fresh JAX process)
    refuses them."""
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    placed = {
        "array": True,
        "shape": [8, 4],
        "values": x,
        "shards": [[0, x[:4]], [1, x[4:]]],
        "rank_error": None,
    }
    shards = {
        "up kernel": [[8, 8]] * 2,
        "down kernel": [[8, 4]] * 2,
        "up bias": [[8]] * 2,
        "down bias": [[4]] * 2,
    }
    layout = {
        "layout_map": True,
        "axes": ["batch", "model"],
        "shape": [1, 2],
        "dims": [2, 1, 2],
        "keys": [".*up/kernel$", ".*up/bias$", ".*down/kernel$"],
        "shards": shards,
    }
    return [("jax_shard_batch", placed), ("jax_shard_batch", {**placed, "shards": []}),
            ("jax_port_loss", []), ("jax_port_loss", {"update": np.zeros(212), "loss": 0.0}),
            ("jax_tensor_parallel", {**layout, "update": np.zeros(212)}),
            ("jax_tensor_parallel", {**layout, "update": []})]  # fmt: skip


def test_a_kernel_that_forges_a_harness_gets_no_pass() -> None:
    """A kernel that answers a harness with made-up data (no replicas' results, or zeros) fails: the
    judge checks what comes back against its own references, whatever the kernel ran. One that sends
    the notebook's right numbers, learned by heart, fails on the data drawn at grading time."""
    trained = {
        "model": True,
        "in_scope": True,
        "optimizer_in_scope": True,
        "steps": 4,
        "epochs": 1,
        "weights": np.zeros(28 * 28 * 16 + 16 + 16 * 10 + 10),
    }  # the check model's count, all 0
    no_update = {"replicas": 1, "losses": [0.0, 0.0], "update": np.zeros(3), "first_update": np.zeros(3),
                 "metrics": [], "error": "", "metric_names": [], "created": [], "counters": []}  # fmt: skip
    loop_ran = {"traced": True, "function": "Function", "traces": 1, "refused": [], "losses": [0.0] * 3,
                "shapes": [(8, 6)], "steps": 5, "built_by_a_step": False, "update": np.zeros(21)}  # fmt: skip
    for ident, forged in [("global_moments", []), ("replica_dropout", [[], [], []]), ("masked_last_batch", {"pair": False}),
                          ("clip_after_sum", {"update": [0.0], "loss": 0.0, "replicas": 2}),
                          ("tpu_ready_loop", loop_ran), ("tpu_ready_loop", {**loop_ran, "shapes": []}),
                          ("padded_loss", []), ("padded_loss", [{"value": 0.0}] * 5),
                          ("per_replica_dataset_fn", {"runs": [{"steps": []}] * 2, "pipelines": [{"batches": []}] * 2}),
                          ("distributed_test_step", {"loss": 0.0, "accuracy": 1.0}),
                          ("distributed_test_step", {}),
                          ("replica_step", {"callable": True, "type": "list", "length": 2, "local": [[], []]}),
                          ("run_and_combine", {"seen": [], "result": None, "shown": ""}),
                          ("fix_train_step", {"seen": [], "result": [0.0, []], "shown": ""}),
                          ("fit_on_replicas", trained),
                          ("even_batches", {"returned": "Dataset", "sizes": [4], "images": [], "labels": [],
                                            "update": []}),
                          ("fit_resumable", {**trained, "interrupted": True, "saved": ["training_metadata.json"],
                                             "begun": [2, 3]}),
                          ("capstone_port", no_update), ("capstone_counter", {}),
                          ("worker_step", {"g": 8, "features": 3, **no_update}),
                          *_by_heart(),
                          *_forged_jax_runs()]:  # fmt: skip
        status, message = judged(ident, kernel=replaying(itertools.repeat(forged)), seed=1)  # unseen data
        assert status == "failed", (ident, status, message)


def _master_loop(replace: tuple[str, str] = ("", "")) -> Callable[..., Any]:
    """06's master tpu_ready_loop, ``replace[0]`` in its source replaced by ``replace[1]`` (a mistake),
    with the notebook's replica_step."""
    import keras

    from course_utils.runtime import import_tensorflow

    source = _master_answers()["tpu_ready_loop"]
    assert replace[0] in source
    source = source.replace(*replace)
    namespace: dict[str, Any] = {"np": np, "tf": import_tensorflow(), "keras": keras}  # GIVEN
    _exec_cell(_above("tpu_ready_loop"), "<above tpu_ready_loop>", namespace)
    _exec_cell(source, f"<tpu_ready_loop {hash(source)}>", namespace)
    return namespace["tpu_ready_loop"]


@pytest.mark.parametrize(
    "replace, said",
    [
        (("steps = tf.constant(min(", "steps = (min("), "train_steps was traced 2 times"),
        (("ReduceOp.SUM", "ReduceOp.MEAN"), "On 2 replicas, the losses of the calls"),
        (("whole = len(x) // global_batch", "whole = -(-len(x) // global_batch)"),
         "On one device, a step asked for a batch after the last"),  # a TF error, named in the kernel
        ((", drop_remainder=True", ""), "the batch dimension is None"),
        (("optimizer.build(model.trainable_variables)", "pass"), "the optimizer was never built"),
        (("with strategy.scope():", "if True:"), "On 2 replicas, a variable was made outside strategy.scope()"),
        (("strategy.run(step, args=(images, labels))",
          "strategy.run(replica_step, args=(model, optimizer, images, labels, global_batch))"),
         "strategy.run got a Sequential, a SGD in its args"),  # what TPUStrategy.run cannot take
    ],
)  # fmt: skip
def test_tpu_ready_loop_runs_in_the_kernel_and_its_mistakes_are_named(replace, said) -> None:
    """06's tpu_ready_loop: the harness runs the loop in the kernel (the strategy, model and optimizer
    built there from numbers) and sends back what it did; the judge's verdict names the mistake."""
    status, message = judged("tpu_ready_loop", {"tpu_ready_loop": _master_loop(replace)}, seed=7)
    assert status == "failed" and said in message, message


def test_the_tpu_ready_loop_harness_names_the_tensorflow_errors_it_caught() -> None:
    """A TensorFlow error crosses to the judge under its name only: the harness catches the ones the
    check names (an unbuilt optimizer's crash on 2 replicas, keras-team/keras#23085) and says which."""
    from course_utils.exercises import tpu_and_hardware_detection as ex

    loop = _master_loop(("optimizer.build(model.trainable_variables)", "pass"))
    weights = [np.array(w) for w in ex._check_model()[0].get_weights()]
    assert ex.tpu_loop_run(loop, 2, weights, 44) == {"error": ex.UNBUILT_IN_STEP}


def test_a_tpu_ready_loop_learned_by_heart_fails_on_the_weights_drawn_at_grading_time() -> None:
    """A kernel that replays the harness's answers for the notebook's cases (those of the right loop,
    run before) passes without a case drawn at grading time, and fails on the starting weights the
    judge draws: it must train from weights it was never shown."""
    from course_utils.exercises import tpu_and_hardware_detection as ex

    loop = _master_loop()
    weights = [np.array(w) for w in ex._check_model()[0].get_weights()]
    learned = [ex.tpu_loop_run(loop, r, weights, n) for n, r in ((44, 1), (44, 2), (48, 1))]
    assert judged("tpu_ready_loop", kernel=replaying(learned))[0] == "passed"
    status, message = judged("tpu_ready_loop", kernel=replaying(learned + [learned[1]]), seed=7)
    assert status == "failed" and "On 2 replicas from other starting weights" in message, message


def _notebook_11_by_heart() -> dict[str, list[Any]]:
    """What a kernel that learned notebook 11's run by heart sends its three training checks' harnesses,
    call by call: the right replies on the notebook's data (one device's update for 2 devices': they
    agree to float noise), the references of the judge's JAX process."""
    from course_utils.exercises import keras_distribution_on_jax as ex

    x = ex._shard_input()
    two, _ = ex.one_device(2)
    one, loss = ex.one_device(1)
    placed = {"array": True, "shape": [8, 4], "values": x, "shards": [[0, x[:4]], [1, x[4:]]]}
    layout = {**dict(_forged_jax_runs())["jax_tensor_parallel"], "update": two}
    return {
        "jax_shard_batch": [placed, {"rank_error": None}, two],
        "jax_port_loss": [[], {"update": one, "loss": loss}, float(np.log(3))],
        "jax_tensor_parallel": [layout],
    }


@pytest.mark.parametrize("ident", ["jax_shard_batch", "jax_port_loss", "jax_tensor_parallel"])
def test_notebook_11_learned_by_heart_fails_on_the_data_drawn_at_grading_time(ident: str) -> None:
    """A kernel that replays notebook 11's right replies passes a check without a draw, and fails it on
    every grading run: the examples and starting weights (and 11's small batch) are drawn there."""
    learned = _notebook_11_by_heart()[ident]
    assert judged(ident, kernel=replaying(learned))[0] == "passed"
    for seed in range(3):
        status, message = judged(ident, kernel=replaying(learned), seed=seed)
        assert status == "failed", (seed, message)


def test_only_a_registered_harness_runs_in_the_kernel() -> None:
    """The kernel runs a harness the judge names only if the course registered it; anything else
    (a module's other function, a name that is not one) is refused, never looked up."""
    with pytest.raises(ValueError, match="no harness"):
        answers._harness("loss_scaling_pitfalls.two_replicas", print)
    with pytest.raises(ValueError, match="no harness"):
        answers._harness("os.system", print)
    with pytest.raises(ValueError, match="no harness"):
        answers._harness("../../x.y", print)
    assert callable(answers._harness("loss_scaling_pitfalls.moments_on_replicas", print))


#: A judge on 4 virtual CPUs, as the grader's (this test process has 2): judges naive_loss_prediction
#: for each PREDICTION source on argv and prints each (status, message) as JSON.
_JUDGE_ON_FOUR = """
import json, sys
from course_utils.devices import use_virtual_cpus
use_virtual_cpus(4)
sys.path.insert(0, "tests")  # the tests' helpers (it runs in the repository's root)
from judging import judged
print(json.dumps([judged("naive_loss_prediction", literals={"PREDICTION": s}) for s in sys.argv[1:]]))
"""


def test_the_naive_loss_prediction_is_judged_on_the_judges_own_naive_port() -> None:
    """naive_loss_prediction reads PREDICTION from the source, with DATA_LOSS and PENALTY computed by
    the judge, and measures the course's copy of the naive port on 4 replicas (the kernel's copy
    could be anything); that copy gives the loss the notebook's cell gives."""
    import subprocess
    import sys

    import nbformat

    from course_utils.exercises import capstone
    from course_utils.runtime import import_tensorflow

    sources = [
        _master_answers()["naive_loss_prediction"],
        "PREDICTION = DATA_LOSS + PENALTY",
        "PREDICTION = ex.naive_first_loss(naive_train_step)",  # measured, not predicted
        "PREDICTION = None",
    ]
    done = subprocess.run(
        [sys.executable, "-c", _JUDGE_ON_FOUR, *sources],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (right, one_device, code_, blank) = json.loads(done.stdout.strip().splitlines()[-1])
    assert right[0] == "passed", right
    assert one_device[0] == "failed" and "the one-device loss" in one_device[1], one_device
    assert code_[0] == "failed" and "not computed by code" in code_[1], code_
    assert blank[0] == "failed" and "not done yet" in blank[1], blank

    nb = nbformat.read(ROOT / "solutions" / "10_capstone.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "def naive_train_step" in c.source)
    import keras

    namespace: dict[str, Any] = {"tf": import_tensorflow(), "keras": keras, "ex": capstone}
    namespace["CLIP_NORM"] = capstone.CLIP_NORM
    exec(compile(cell, "<10 naive_train_step>", "exec"), namespace)  # the course's own cell
    mine, course = (
        capstone.naive_first_loss(f, 2) for f in (namespace["naive_train_step"], capstone.naive_train_step)
    )
    assert mine == pytest.approx(course, rel=1e-6)


def test_the_graders_guide_counts_the_judged_exercises() -> None:
    """Every exercise of the masters has its entry in the judge's registry, and docs/grading.md says
    so with the masters' count."""
    import nbformat

    from course_tools.cellmeta import exercise_id, role

    ids = {
        exercise_id(cell)
        for path in (ROOT / "solutions").glob("*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells
        if role(cell) == "check"
    }
    guide = " ".join((ROOT / "docs" / "grading.md").read_text().split())
    assert set(judge.JUDGED) == ids  # a graded notebook refuses an exercise without its entry
    assert f"For each exercise (all {len(ids)} of the course's:" in guide
    assert "No exercise's check runs in the kernel any more." in guide


def test_restart_step_is_judged_on_the_notebooks_own_program() -> None:
    """The judge reads restart_step's SAVE_EVERY and STEPS_PER_EPOCH from the course, not from the
    kernel's train.py: they are the numbers notebook 07's cells write into it."""
    import re

    import nbformat

    from course_utils.exercises import multi_worker_training as mwt

    text = "\n".join(
        c.source
        for c in nbformat.read(ROOT / "solutions" / "07_multi_worker_training.ipynb", as_version=4).cells
    )
    assert re.search(rf"EPOCHS, SAVE_EVERY = \d+, {mwt.PROGRAM_SAVE_EVERY}\b", text)
    assert re.search(rf"GLOBAL_BATCH, STEPS_PER_EPOCH, FEATURES = \d+, {mwt.PROGRAM_STEPS_PER_EPOCH}\b", text)
    assert judged("restart_step", {}, {"PREDICTION": "PREDICTION = 6"})[0] == "passed"
    status, message = judged("restart_step", {}, {"PREDICTION": "PREDICTION = 8"})
    assert status == "failed" and "never saved" in message, message
    status, message = judged("pod_task", {}, {"PREDICTION": 'PREDICTION = ("worker", 2)'})
    assert status == "failed" and "the pod's number" in message, message


def test_a_worker_program_is_run_in_the_kernel_and_its_batches_judged(tmp_path) -> None:
    """worker_input's harness loads the student's program in the kernel and sends back the batches
    each worker made; the judge finds the mistake from them (sharding by replicas, not workers)."""
    source = _master_answers()["worker_input"].split("\n", 1)[1]
    wrong = source.replace("input_context.num_input_pipelines, input_context.input_pipeline_id",
                           "input_context.num_replicas_in_sync, input_context.input_pipeline_id")  # fmt: skip
    assert wrong != source
    program = tmp_path / "worker_input.py"
    program.write_text(wrong)
    status, message = judged("worker_input", {"INPUT": str(program)}, seed=1)
    assert status == "failed" and "Exercise worker_input" in message, message


def test_resume_point_is_judged_on_its_answers_without_a_cluster(tmp_path) -> None:
    """The judge runs no cluster: resume_point's harness calls the program's function in the kernel
    on the notebook's cases and cases drawn at grading time; the mistakes get the notebook's hints."""
    program = _write_programs(tmp_path)["resume_point"]
    train = program.read_text()
    right = "return global_step // steps_per_epoch, global_step % steps_per_epoch"
    assert right in train
    for body, said in [
        ("return global_step // steps_per_epoch, global_step", "across epochs"),
        ("return global_step // steps_per_epoch, global_step % steps_per_epoch + 1", "optimizer.iterations"),
        ("return 1, 2", "does not resume there"),
    ]:
        program.write_text(train.replace(right, body))
        status, message = judged("resume_point", {"PROGRAM": str(program)}, seed=4)
        assert status == "failed" and said in message, (body, message)


def test_masked_last_batch_is_judged_on_what_the_kernel_saw() -> None:
    """masked_last_batch's harness runs the student's evaluate_all in the kernel and sends back what
    the strategy (its steps and the calls around them), the dataset and the model saw; the judge
    computes every example's loss itself."""
    from test_checks_tpu_and_hardware_detection import evaluate_all_with, in_graph

    assert judged("masked_last_batch", {"evaluate_all": in_graph()}, seed=2)[0] == "passed"
    status, message = judged("masked_last_batch", {"evaluate_all": in_graph(pad=False)}, seed=2)
    assert status == "failed" and "never reached the model" in message, message
    status, message = judged("masked_last_batch", {"evaluate_all": in_graph(mask=False)}, seed=2)
    assert status == "failed" and "nothing to tell them apart" in message, message
    status, message = judged("masked_last_batch", {"evaluate_all": evaluate_all_with(loop="python")}, seed=2)
    assert status == "failed" and "6 calls for 6 batches, one call per batch" in message, message


def test_a_prediction_in_words_is_judged_from_its_literal() -> None:
    """03's same_rate_loss: the answer is a string read from the source; a wrong one gets its hint."""
    said = {"HIGHER_LOSS": 'HIGHER_LOSS = None  # "1 device", "2 replicas" or "tie"\nHIGHER_LOSS = "tie"'}
    status, message = judged("same_rate_loss", {}, said)
    assert status == "failed" and "Claim 1 matched two replicas of 32" in message


def test_the_judge_says_which_verdicts_rest_on_the_kernels_report() -> None:
    """A harness or a recipe makes the kernel run course code around the answer: the judge marks
    such a verdict observed (the audit's findings then flag a pass); a function of numbers is not."""
    right = data_parallelism.reference_solutions()
    judge.OBSERVED.clear()
    assert judged("epoch_traffic", {"epoch_traffic": right["epoch_traffic"]}, seed=2)[0] == "passed"
    assert not judge.OBSERVED
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    judged("global_moments", {"global_moments": lambda x: tf.nn.moments(x, axes=[0])}, seed=2)
    assert judge.OBSERVED == ["global_moments"] * len(judge.OBSERVED) and judge.OBSERVED
    judge.OBSERVED.clear()


def test_a_served_check_cell_keeps_its_lines_but_the_checks_call() -> None:
    """07's restart_step check cell also binds RESTART_PREDICTION, which a later cell reads: the
    graded cell keeps it (and the imports) and drops only the call of the check."""
    import nbformat

    from course_tools.cellmeta import exercise_id, role

    nb = nbformat.read(ROOT / "solutions" / "07_multi_worker_training.ipynb", as_version=4)
    cell = next(c for c in nb.cells if role(c) == "check" and exercise_id(c) == "restart_step")
    served = judge.serve_source("restart_step", cell.source)
    assert "RESTART_PREDICTION = PREDICTION" in served and "check_restart_step" not in served
    assert served.splitlines()[-1] == "_serve('restart_step')"


# --------------------------------------------------------------------------- notebook 11: a kernel on JAX

#: Notebook 11's exercises whose harnesses need Keras on JAX in the kernel (this process runs it on TensorFlow).
JAX_KERNEL_EXERCISES = {"jax_shard_batch", "jax_port_loss", "jax_tensor_parallel"}

_JAX_KERNEL = r"""
import json, os
from course_utils import config
from course_utils.lessons.keras_on_jax import setup_jax

setup_jax(config.load(), cpus=2, show_report=False)
import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from course_tools.grading.answers import serve

exec(PER_EXAMPLE_LOSS)  # the notebook's cell above the answers
for ident, name, source in SERVED:
    namespace = {"jax": jax, "jnp": jnp, "keras": keras, "np": np, "NamedSharding": NamedSharding, "P": P,
                 "per_example_loss": per_example_loss}
    exec(source, namespace)
    serve(ident, **{name: namespace[name]})
"""


def _layout(up: str = '(None, "model")', keys: tuple = (".*up/kernel$", ".*down/kernel$"), mesh: str = "(1, 2)",
            biases: str = '{".*up/bias$": ("model",)}') -> str:  # fmt: skip
    return (
        "def tensor_parallel(devices):\n"
        f'    layouts = keras.distribution.LayoutMap(keras.distribution.DeviceMesh({mesh}, ["batch", "model"], devices=devices))\n'
        f'    layouts[{keys[0]!r}], layouts[{keys[1]!r}] = {up}, ("model", None)\n'
        f"    for key, axes in {biases}.items():\n        layouts[key] = axes\n"
        "    return layouts\n"
    )


#: The grading runs' seeds: the masters' answers are judged on each, the wrong answers on the last.
JAX_SEEDS = (3, 11, 29, 5)
#: (exercise, the answer's name, its source, the hint's words: "" for a pass), served in this order.
_JAX_ANSWERS: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("jax_shard_batch", "shard_batch", "def shard_batch(x, mesh):\n    return x\n", ("not a NumPy array",)),
    ("jax_shard_batch", "shard_batch", "def shard_batch(x, mesh):\n    return jax.device_put(x, NamedSharding(mesh, P()))\n",
     ("whole batch (replicated)",)),
    ("jax_shard_batch", "shard_batch",
     "def shard_batch(x, mesh):\n    return jax.device_put(x, NamedSharding(mesh, P(None, 'batch')))\n",
     ("split the features (dimension 1)",)),
    ("jax_shard_batch", "shard_batch",
     "def shard_batch(x, mesh):\n    return jax.device_put(x, NamedSharding(mesh, P('batch', None)))\n",
     ("1-D labels", "name only the dimension you split")),
    ("jax_shard_batch", "shard_batch", "def shard_batch(x, mesh):\n    raise NotImplementedError\n", ("not done yet",)),
    ("jax_port_loss", "port_loss", "def port_loss(y, logits):\n    return per_example_loss(y, logits)\n",
     ("shape (16,)", "one number")),
    ("jax_port_loss", "port_loss",
     "def port_loss(y, logits):\n    return jnp.sum(per_example_loss(y, logits)) / (len(y) // 2)\n",
     ("2.00x", "per-device batch")),
    ("jax_port_loss", "port_loss",
     "def port_loss(y, logits):\n    return jnp.sum(per_example_loss(y, logits)) / (len(y) * 2)\n",
     ("0.50x", "what does len(y) count?")),
    ("jax_port_loss", "port_loss", "def port_loss(y, logits):\n    return jnp.sum(per_example_loss(y, logits)) / 16\n",
     ("examples of loss log", "your divisor is a fixed number")),  # the small batch and its classes: drawn
    ("jax_tensor_parallel", "tensor_parallel", _layout(keys=("up/kernel", "down/kernel")), ("re.search", "re.fullmatch")),
    ("jax_tensor_parallel", "tensor_parallel", _layout(up='("model", None)'), ("up/kernel's rows (dimension 0)",)),
    ("jax_tensor_parallel", "tensor_parallel", _layout(biases='{".*bias$": ("model",)}'),
     ("down's bias is added after the all-reduce",)),
    ("jax_tensor_parallel", "tensor_parallel", _layout(mesh="(2, 1)"), ("nothing is split",)),
    ("jax_tensor_parallel", "tensor_parallel", "def tensor_parallel(devices):\n    return {}\n",
     ("Return the keras.distribution.LayoutMap",)),
]  # fmt: skip


@pytest.fixture(scope="module")
def jax_kernel_verdicts() -> list[tuple[str, str]]:
    """The masters' answers to notebook 11's three on 3 grading runs' seeds, then :data:`_JAX_ANSWERS` on
    a fourth, each served by a kernel with Keras on JAX and 2 CPU devices (a process of its own, as the
    grader's) to the judge's check here, where Keras runs on TensorFlow and the check draws its data as
    the grader's judge does: ``(status, message)`` each, in order."""
    import os
    import tempfile

    from course_utils.processes import run_python

    masters = _master_answers()
    served = [
        (ident, judge.JUDGED[ident].functions[0], masters[ident], ())
        for _ in JAX_SEEDS[:-1]
        for ident in sorted(JAX_KERNEL_EXERCISES)
    ]
    served += _JAX_ANSWERS
    seeds = [seed for seed in JAX_SEEDS[:-1] for _ in JAX_KERNEL_EXERCISES] + [JAX_SEEDS[-1]] * len(
        _JAX_ANSWERS
    )
    folder = tempfile.mkdtemp(prefix="judge")  # a socket's path has at most 107 bytes
    path = os.path.join(folder, judge.SOCKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    listener.settimeout(5)
    code = f"PER_EXAMPLE_LOSS = {_above('jax_port_loss', ('np', 'keras', 'jnp'))!r}\nSERVED = {[s[:3] for s in served]!r}\n"
    done: dict[str, Any] = {}

    def kernel() -> None:
        env = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu", answers.SOCKET_VARIABLE: path}
        done["run"] = run_python(code + _JAX_KERNEL, env=env, timeout=900)

    thread = threading.Thread(target=kernel, daemon=True)
    thread.start()
    verdicts = []
    with listener:
        for (ident, *_), seed in zip(served, seeds, strict=True):
            while True:
                try:
                    conn, _ = listener.accept()
                    break
                except socket.timeout:
                    assert thread.is_alive(), done["run"].stderr[-2000:]
            with conn, conn.makefile("rb") as stream:
                conn.settimeout(600)
                exercises.UNSEEN = __import__("random").Random(f"{seed}:{ident}")  # as the judge's run
                try:
                    verdicts.append(verdict(ident, conn, stream))
                finally:
                    exercises.UNSEEN = None
    thread.join(timeout=60)
    assert done["run"].ok, done["run"].stderr[-2000:]
    return verdicts


def test_notebook_11s_answers_are_judged_from_a_jax_kernel(
    jax_kernel_verdicts: list[tuple[str, str]],
) -> None:
    """The masters' answers pass on every draw; each wrong answer fails with its hint, the judge's,
    though the judge's Keras runs on TensorFlow: the kernel sent what happened on the drawn data, the
    references for that draw came from JAX (one process for all the draws)."""
    import keras

    from course_utils.exercises import keras_distribution_on_jax as ex

    assert keras.backend.backend() == "tensorflow"
    masters = len(JAX_KERNEL_EXERCISES) * (len(JAX_SEEDS) - 1)
    right, wrong = jax_kernel_verdicts[:masters], jax_kernel_verdicts[masters:]
    assert len(ex._JAX) == 1  # the references of every draw: one process start
    for status, message in right:
        assert status == "passed", message
    for (ident, _, _, hints), (status, message) in zip(_JAX_ANSWERS, wrong, strict=True):
        assert status == "failed" and message.startswith(f"Exercise {ident}"), (ident, status, message)
        assert "\n" not in message and all(hint in message for hint in hints), (hints, message)


def test_a_served_check_cell_drops_what_reads_the_checks_result() -> None:
    """10's capstone_port check cell prints what the check returned: with the call gone, so is that."""
    served = judge.serve_source(
        "capstone_port", "port_result = ex.check_capstone_port(make_train_step)\nprint(port_result)"
    )
    assert "port_result" not in served and served.endswith(
        "_serve('capstone_port', make_train_step=make_train_step)"
    )
