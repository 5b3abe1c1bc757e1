"""The checks of notebook 07 pass right answers and explain planted mistakes.

The exercises are parts of the notebook's worker program, three files written by ``%%writefile``
cells of the master; these tests take them from the master, so they test the program students
complete, with real mistakes planted in the solution regions.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import course_utils
from course_tools.cellmeta import exercise_id, role
from course_utils.errors import ExerciseError
from course_utils.exercises import multi_worker_training as ex

ROOT = Path(__file__).resolve().parents[1]
FILES = {"worker_input": "worker_input.py", "worker_step": "worker_step.py", "resume_point": "train.py"}


@pytest.fixture(scope="module", autouse=True)
def two_cpus() -> None:
    course_utils.setup(cpus=2, show_report=False)


def solution_text(exercise: str, answer: str | None = None) -> str:
    """The master's program file of ``exercise``; ``answer`` replaces its solution region."""
    import nbformat

    nb = nbformat.read(ROOT / "solutions" / "07_multi_worker_training.ipynb", as_version=4)
    cell = next(c for c in nb.cells if exercise_id(c) == exercise and role(c) == "solution")
    body = cell.source.split("\n", 1)[1]  # without the %%writefile line
    if answer is None:
        return (
            body.replace("    ### BEGIN SOLUTION\n", "")
            .replace("    ### END SOLUTION\n", "")
            .replace("    ### END SOLUTION", "")
        )
    region = re.compile(r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION\n?", re.S)
    indented = "\n".join(f"    {line}" if line else "" for line in answer.strip("\n").splitlines())
    return region.sub(lambda m: indented + "\n", body)


def write_program(folder: Path, **answers: str) -> dict[str, Path]:
    """The three files in ``folder``, with the solutions of the master unless ``answers`` says."""
    paths = {}
    for exercise, name in FILES.items():
        paths[exercise] = folder / name
        paths[exercise].write_text(solution_text(exercise, answers.get(exercise)))
    return paths


# --------------------------------------------------------------------------- worker_input

SHARD = "data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)"
BATCH = "return data.batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)"
#: What a hint never prints: the solutions' code (the pieces of the two files' solution regions).
SOLUTION_CODE = (
    "data.shard(input_context",
    "get_per_replica_batch_size(GLOBAL_BATCH)",
    "drop_remainder=True",
    "compute_average_loss(",
    "global_batch_size=GLOBAL_BATCH",
    "strategy.reduce(",
    "ReduceOp.SUM",
)


def test_worker_input_passes(tmp_path, capsys) -> None:
    ex.check_worker_input(write_program(tmp_path)["worker_input"])
    assert "[pass] worker_input" in capsys.readouterr().out


def test_worker_input_sharded_after_batching_is_right(tmp_path, capsys) -> None:
    """Batching per replica, then giving batches out in turn: each step still holds one device's batch
    (the check's remainder is shorter than a replica's batch, so both workers get as many)."""
    answer = BATCH.replace(
        ", drop_remainder=True)",
        ", drop_remainder=True).shard(input_context.num_input_pipelines, input_context.input_pipeline_id)",
    )
    ex.check_worker_input(write_program(tmp_path, worker_input=answer)["worker_input"])
    assert "[pass] worker_input" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        (BATCH, "read 64 of the same examples: every worker reads the whole dataset"),  # no sharding
        (  # global batch
            f"{SHARD}\nreturn data.batch(GLOBAL_BATCH, drop_remainder=True)",
            "one step trains 64, not one device's global batch of 16: a batch of GLOBAL_BATCH per replica",
        ),
        (  # a worker's share as each of its replicas' batch: right only with 1 replica per worker
            f"{SHARD}\nreturn data.batch(GLOBAL_BATCH // input_context.num_input_pipelines, drop_remainder=True)",
            "On 2 workers of 2 replica(s) each, the replicas get batches of [8] examples, so one step "
            "trains 32, not one device's global batch of 16: GLOBAL_BATCH // num_input_pipelines is a "
            "worker's share, not a replica's",
        ),
        (  # one shard per replica: right only with 1 replica per worker
            SHARD.replace("num_input_pipelines", "num_replicas_in_sync") + "\n" + BATCH,
            "The 2 workers read 32 of the 64 examples one device trains: with 2 replicas per worker "
            "num_replicas_in_sync is 4, so the data were cut into 4 parts, and the 2 workers read only 2",
        ),
        (  # no drop_remainder: the check's data leave a short last batch
            f"{SHARD}\n" + BATCH.replace(", drop_remainder=True", ""),
            "67 examples leave a last batch of 3, which the replicas would split unevenly (or not at all): "
            "the statement asks you to drop it.",
        ),
        (  # a hard-coded batch: right for 2 workers of 2 replicas, not of 1
            f"{SHARD}\nreturn data.batch(GLOBAL_BATCH // 4 if input_context.num_input_pipelines > 1 "
            "else GLOBAL_BATCH, drop_remainder=True)",
            "On 2 workers of 1 replica(s) each, the replicas get batches of [4]",
        ),
        ("return data.batch(GLOBAL_BATCH // 2, drop_remainder=True)", "not the global batch of 16"),
        (
            "data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
            "return data.batch(GLOBAL_BATCH // 4, drop_remainder=True)",
            "not the global batch",
        ),
        (
            "return data.batch(8, drop_remainder=True).skip(input_context.input_pipeline_id)",
            "not the global batch",
        ),
        (  # data.shard's arguments swapped: 0 shards on one device
            "data = data.shard(input_context.input_pipeline_id, input_context.num_input_pipelines)\n" + BATCH,
            "its arguments are (num_shards, index)",
        ),
    ],
)
def test_worker_input_mistakes(tmp_path, answer, hint) -> None:
    with pytest.raises(ExerciseError, match="worker_input") as caught:
        ex.check_worker_input(write_program(tmp_path, worker_input=answer)["worker_input"])
    assert hint in str(caught.value)
    assert not any(code in str(caught.value) for code in SOLUTION_CODE), "a hint prints the solution"


def test_worker_input_per_worker_interleave_reads_other_examples(tmp_path) -> None:
    """Sharding the shuffled data after taking contiguous halves: each worker's examples belong to
    other steps than one device's."""
    answer = (
        "half = STEPS_PER_EPOCH * GLOBAL_BATCH // input_context.num_input_pipelines\n"
        "data = data.skip(input_context.input_pipeline_id * half).take(half)\n" + BATCH
    )
    with pytest.raises(ExerciseError, match="other examples than one device's global batch 1"):
        ex.check_worker_input(write_program(tmp_path, worker_input=answer)["worker_input"])


def test_worker_input_unfinished_and_missing(tmp_path) -> None:
    unfinished = 'raise NotImplementedError("Exercise worker_input: replace this line with your code")'
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_worker_input(write_program(tmp_path, worker_input=unfinished)["worker_input"])
    with pytest.raises(ExerciseError, match="%%writefile"):
        ex.check_worker_input(tmp_path / "nowhere" / "worker_input.py")


# --------------------------------------------------------------------------- worker_step

STEP = solution_text("worker_step").split("def make_train_step", 1)[1]


def step_with(old: str, new: str) -> str:
    """The master's step with one planted change."""
    body = re.search(r'""".*?"""\n(.*)    return train_step', STEP, re.S)[1]  # type: ignore[index]
    assert old in body, old
    return "\n".join(line[4:] for line in body.replace(old, new).splitlines()) + "\n"


def test_worker_step_passes(tmp_path, capsys) -> None:
    ex.check_worker_step(write_program(tmp_path)["worker_step"])
    assert "[pass] worker_step" in capsys.readouterr().out


@pytest.mark.parametrize(
    "old, new, hint",
    [
        (  # each replica's own mean: 2x the gradient on 2 replicas
            "squared = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)\n"
            "            share = tf.nn.compute_average_loss(squared, global_batch_size=GLOBAL_BATCH)",
            "share = tf.reduce_mean(tf.square(model(x, training=True) - y))",
            "each replica averages over its own examples",
        ),
        (  # a worker's share of the global batch as the denominator
            "global_batch_size=GLOBAL_BATCH)",
            "global_batch_size=GLOBAL_BATCH // 2)",
            "on 1 replica is not one device's step: a replica's loss is divided by something other than "
            "the examples of one step of all workers",
        ),
        ("ReduceOp.SUM", "ReduceOp.MEAN", "replicas' shares were averaged"),  # a 2x too small loss
        (  # the replicas' losses returned unreduced
            "return strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None)",
            "return shares",
            "returned each replica's own loss (a PerReplica value): combine them into the loss of the whole "
            "global batch.",
        ),
        (  # the replica step called outside strategy.run
            "shares = strategy.run(replica_step, args=(x, y))",
            "shares = replica_step(x, y)",
            "worker_step",
        ),
    ],
)
def test_worker_step_mistakes(tmp_path, old, new, hint) -> None:
    answer = step_with(old, new)
    with pytest.raises(ExerciseError, match="worker_step") as caught:
        ex.check_worker_step(write_program(tmp_path, worker_step=answer)["worker_step"])
    assert hint in str(caught.value)
    assert not any(code in str(caught.value) for code in SOLUTION_CODE), "a hint prints the solution"


def test_worker_step_unfinished(tmp_path) -> None:
    unfinished = 'raise NotImplementedError("Exercise worker_step: replace this line with your code")'
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_worker_step(write_program(tmp_path, worker_step=unfinished)["worker_step"])


# --------------------------------------------------------------------------- restart_step


def test_restart_step(tmp_path, capsys) -> None:
    ex.check_restart_step(6, write_program(tmp_path)["resume_point"], killed_after=7)
    assert "begins at step 6" in capsys.readouterr().out


@pytest.mark.parametrize(
    "prediction, hint",
    [
        (8, "step 7 was trained but never saved"),
        (5, "does a restart compute the saved step again, or the one after it?"),  # two mistakes give 5
        (1, "You predicted 1: list the steps <= 7 after which train.py saves (SAVE_EVERY and the epoch end)"),
        (4, "You predicted 4: list the steps <= 7 after which train.py saves"),
        (7, "You predicted 7: list the steps <= 7 after which train.py saves"),
        (12, "You predicted 12: list the steps <= 7 after which train.py saves"),
        (None, "is not done yet"),  # left blank, as every exercise
        (6.0, "whole number"),
    ],
)
def test_restart_step_mistakes(tmp_path, prediction, hint) -> None:
    program = write_program(tmp_path)["resume_point"]
    with pytest.raises(ExerciseError, match="restart_step") as caught:
        ex.check_restart_step(prediction, program, killed_after=7)
    assert hint in str(caught.value)
    if isinstance(prediction, int):  # a wrong step: never the answer (6) nor the saves that give it
        assert "6" not in str(caught.value) and "[4, 5]" not in str(caught.value)


# --------------------------------------------------------------------------- pod_task


def derive_file(folder: Path, edit: tuple[str, str] = ("", "")) -> Path:
    """Section 12's start-up lines as the master writes them (``edit`` replaces a text in them)."""
    import nbformat

    nb = nbformat.read(ROOT / "solutions" / "07_multi_worker_training.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith("%%writefile {DERIVE}"))
    path = folder / "derive_tf_config.py"
    path.write_text(cell.source.split("\n", 1)[1].replace(*edit))
    return path


def test_pod_task(tmp_path, capsys) -> None:
    ex.check_pod_task(("worker", 1), derive_file(tmp_path), pod=2)
    out = capsys.readouterr().out
    assert "[pass] pod_task" in out and "chief 0, worker 0, worker 1, ps 0" in out
    assert "at trainer-2.trainer:2222, its own name" in out
    ex.check_pod_task(["ps", 0], derive_file(tmp_path), pod=3)  # a list is a pair too
    ex.check_pod_task(("worker", 0), derive_file(tmp_path), pod=0, chief=0, workers=2, ps=0)


@pytest.mark.parametrize(
    "prediction, hint",
    [
        (("worker", 2), "the pod's number: a task's index counts the tasks of its own job only"),
        (("ps", 0), "as if there were no chief"),
        (("worker", 0), "pod trainer-2 is number 2 in that list"),
        (("chief", 0), "pod trainer-2 is number 2 in that list"),
        (("evaluator", 0), "There is no 'evaluator' job here"),
        ("worker 1", "a pair (task type, index)"),
        (("worker", 1.0), "a pair (task type, index)"),
        (("worker", True), "a pair (task type, index)"),
        (None, "is not done yet"),  # left blank, as every exercise
    ],
)
def test_pod_task_mistakes(tmp_path, prediction, hint) -> None:
    with pytest.raises(ExerciseError, match="pod_task") as caught:
        ex.check_pod_task(prediction, derive_file(tmp_path), pod=2)
    assert hint in str(caught.value)


def test_pod_task_judges_the_lines_not_only_the_prediction(tmp_path) -> None:
    """Lines edited to number the ps before the workers make pod trainer-2 worker 0 and pod
    trainer-1 the ps, while CLUSTER lists them as worker 1 and worker 0: whatever the prediction,
    the check names the lines (every pod is run), not the answer."""
    edited = derive_file(
        tmp_path, ('("chief", "worker", "ps", "evaluator")', '("chief", "ps", "worker", "evaluator")')
    )
    with pytest.raises(ExerciseError, match="no longer give pod trainer-1 the launcher's"):
        ex.check_pod_task(("worker", 0), edited, pod=2)
    with pytest.raises(ExerciseError, match="run the %%writefile cell"):
        ex.check_pod_task(("worker", 1), tmp_path / "missing.py", pod=2)
    broken = derive_file(tmp_path, ('os.environ["CLUSTER"]', 'os.environ["CLUSTERS"]'))
    with pytest.raises(ExerciseError, match="failed for pod trainer-0"):
        ex.check_pod_task(("worker", 1), broken, pod=2)


# --------------------------------------------------------------------------- resume_point


class Run:
    """A stand-in for a ClusterResult: ``run["worker 0"].data``."""

    def __init__(self, data):
        self.tasks = {task: type("Task", (), {"data": d})() for task, d in data.items()}

    def __getitem__(self, task):
        return self.tasks[task]


def simulate(resume_point, kill=7, preempt=8, steps_per_epoch=4, epochs=3, save_every=5):
    """What the two workers report in the notebook's three runs on one folder (killed after step
    ``kill``, restarted and preempted after ``preempt``, restarted to the end), for a resume_point
    (or a pair, worker 0's and worker 1's). Batch b of an epoch holds the example ids 16b .. 16b+15;
    worker 0 trains the first 8. As on a real cluster, the workers step together and report the same
    loss (an all-reduce), an epoch's datasets end together (a worker with no batch left trains an
    empty one), and a worker left without a peer fails."""
    answers = resume_point if isinstance(resume_point, (tuple, list)) else (resume_point, resume_point)

    def plan(answer, restored):
        first, skip = answer(restored, steps_per_epoch)
        return [(e, range(skip if e == first else 0, steps_per_epoch)) for e in range(first, epochs)]

    def run(restored, stop=None):
        data = {t: {"steps": [], "restored": restored, "weights": None} for t in ("worker 0", "worker 1")}
        step, saved = restored, [restored]
        for together in zip(*(plan(answer, restored) for answer in answers)):  # one epoch's datasets
            for j in range(max(len(batches) for _, batches in together)):
                step += 1
                for k, (task, (epoch, batches)) in enumerate(zip(data, together)):
                    ids = [16 * batches[j] + 8 * k + i for i in range(8)] if j < len(batches) else []
                    data[task]["steps"].append([step, epoch, 1.0 / step, ids, float(step)])
                if step % save_every == 0 or step % steps_per_epoch == 0:
                    saved.append(step)
                if step == stop:
                    return Run(data), saved[-1]
        for task in data:
            data[task]["weights"] = [[1.0, 2.0]] if step == epochs * steps_per_epoch else [[0.0]]
        return Run(data), step

    killed, at = run(0, stop=kill)
    preempted, _ = run(at, stop=preempt + 1)
    resumed, _ = run(preempt + 1)
    uninterrupted, _ = run(0)
    return [killed, preempted, resumed], uninterrupted


def answer_function(answer: str, task: int = 0):
    """``answer`` (the body of resume_point) as a function, called as worker ``task`` of the
    cluster would call it (its TF_CONFIG set)."""
    namespace: dict = {}
    body = "".join(f"    {line}\n" for line in answer.splitlines())
    exec(f"def resume_point(global_step, steps_per_epoch):\n{body}", namespace)

    def call(global_step, steps_per_epoch):
        saved = os.environ.get("TF_CONFIG")
        os.environ["TF_CONFIG"] = json.dumps({"task": {"type": "worker", "index": task}})
        try:
            return namespace["resume_point"](global_step, steps_per_epoch)
        finally:
            os.environ.pop("TF_CONFIG") if saved is None else os.environ.update(TF_CONFIG=saved)

    return call


# Each worker reads its own task index: worker 1 resumes one batch after worker 0.
WORKER_DEPENDENT = (
    "import json, os\n"
    "task = json.loads(os.environ.get('TF_CONFIG', '{}')).get('task', {}).get('index', 0)\n"
    "return global_step // steps_per_epoch, global_step % steps_per_epoch + task"
)


def per_worker(answer: str):
    """``answer`` as each of the two workers runs it."""
    return [answer_function(answer, task) for task in range(2)]


def test_resume_point_passes(tmp_path, capsys) -> None:
    program = write_program(tmp_path)["resume_point"]
    runs, uninterrupted = simulate(lambda g, s: divmod(g, s))
    ex.check_resume_point(program, runs, uninterrupted)
    assert "[pass] resume_point" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        ("return global_step // steps_per_epoch, 0", "trained 16 examples twice"),  # restart the epoch
        ("return 0, global_step", "examples twice"),  # skip counted from step 0
        ("return global_step // steps_per_epoch, global_step % steps_per_epoch + 1", "never trained 16"),
    ],
)
def test_resume_point_mistakes(tmp_path, answer, hint) -> None:
    program = write_program(tmp_path, resume_point=answer)["resume_point"]
    runs, uninterrupted = simulate(answer_function(answer))
    with pytest.raises(ExerciseError, match="resume_point") as caught:
        ex.check_resume_point(program, runs, uninterrupted)
    assert hint in str(caught.value)


@pytest.mark.parametrize(
    "answer, apart",
    [
        (
            WORKER_DEPENDENT,
            "at step 4 worker 0 trained 8 examples of epoch 1, worker 1 0 of epoch 1",
        ),  # from the first start
        (  # on restarts only
            WORKER_DEPENDENT.replace("+ task", "+ (task if global_step else 0)"),
            "at step 8 worker 0 trained 8 examples of epoch 2, worker 1 0 of epoch 2",
        ),
    ],
)
def test_resume_point_depending_on_the_worker(tmp_path, answer, apart) -> None:
    """A resume_point that reads its worker's task index: worker 1 starts a batch after worker 0.
    Both report the same losses (the step's loss is all-reduced), so comparing the losses never
    caught it; the worker that runs out of batches first trains an empty one, and that shows it."""
    program = write_program(tmp_path, resume_point=answer)["resume_point"]
    runs, uninterrupted = simulate(per_worker(answer))
    for run in runs:
        losses = [[s[2] for s in run[t].data["steps"]] for t in ("worker 0", "worker 1")]
        assert losses[0] == losses[1]
    with pytest.raises(ExerciseError, match="resume_point") as caught:
        ex.check_resume_point(program, runs, uninterrupted)
    assert (
        f"The two workers did not resume at the same place ({apart}): every worker must, so "
        "resume_point must depend only on its arguments, not on the worker."
    ) in str(caught.value)


def test_resume_point_right_on_each_worker(tmp_path, capsys) -> None:
    runs, uninterrupted = simulate(per_worker("return divmod(global_step, steps_per_epoch)"))
    ex.check_resume_point(write_program(tmp_path)["resume_point"], runs, uninterrupted)
    assert "[pass] resume_point" in capsys.readouterr().out


def test_resume_point_fits_only_this_cluster(tmp_path) -> None:
    answer = "return divmod(global_step, 4) if global_step in (5, 9) else (0, 0)"
    program = write_program(tmp_path, resume_point=answer)["resume_point"]
    runs, uninterrupted = simulate(lambda g, s: divmod(g, s))
    with pytest.raises(ExerciseError, match="fits this cluster's numbers only") as caught:
        ex.check_resume_point(program, runs, uninterrupted)
    assert "returned (0, 0)" in str(caught.value) and "should be" not in str(caught.value)


def test_resume_point_unfinished_and_failed_restart(tmp_path) -> None:
    unfinished = 'raise NotImplementedError("Exercise resume_point: replace this line")'
    runs, _ = simulate(lambda g, s: divmod(g, s))
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_resume_point(write_program(tmp_path, resume_point=unfinished)["resume_point"], runs)
    with pytest.raises(ExerciseError, match="did not finish"):
        ex.check_resume_point(write_program(tmp_path)["resume_point"], [runs[0], None])


@pytest.mark.parametrize("done", [0, 1, 3])
def test_the_program_skips_whole_steps_with_two_replicas_per_worker(tmp_path, done) -> None:
    """train.py's input after a restore, on one worker of 2 replicas (as on a machine with 2 GPUs):
    make_dataset batches per replica and a step takes one batch per replica, so skipping ``done``
    steps skips 2 * done batches; the steps left are one device's steps after ``done``."""
    import tensorflow as tf

    from course_utils import compare

    paths = write_program(tmp_path)
    source = paths["resume_point"].read_text()
    skip = re.search(r"(lambda context: make_dataset\(context, epoch\)\.skip\(.*?)\)\n", source, re.S)
    assert skip, "train.py no longer builds its input with a lambda that skips"
    train = ex.load_program(paths["worker_input"], "make_dataset")
    names = {"make_dataset": train.make_dataset, "epoch": 1, "first_epoch": 1, "done": done, "skip": done}
    make = eval(skip[1], names)  # the restored epoch, ``done`` of its steps in the checkpoint
    strategy = compare.checking_strategy(2)
    resumed = [
        sorted(int(i) for part in strategy.experimental_local_results(ids) for i in part.numpy())
        for ids, _, _ in strategy.distribute_datasets_from_function(make)
    ]
    one = [sorted(ids.numpy().tolist()) for ids, _, _ in train.make_dataset(tf.distribute.InputContext(), 1)]
    assert resumed == one[done:]


def test_the_program_on_a_real_two_worker_cluster(tmp_path) -> None:
    """The notebook's program with a planted mistake (restart the epoch from its first batch),
    killed and restarted as a real 2-worker cluster: the survivor fails by itself with an
    UnavailableError, and the check reads the examples trained twice."""

    from course_utils import cluster as cl

    program = write_program(tmp_path, resume_point="return global_step // steps_per_epoch, 0")["resume_point"]
    run_dir = tmp_path / "run"
    with cl.LocalCluster(
        str(program), [run_dir, "kill", 7], workers=2, cwd=tmp_path, stream="none", verbose=False, timeout=300
    ) as cluster:
        cluster.wait_for_line("worker 1", "holding still")
        cluster.kill("worker 1")
        with pytest.raises(cl.WorkerFailed) as failure:  # worker 0 must end by itself, within the limit
            cluster.wait(stop_on_failure=False)
    survivor = failure.value.result["worker 0"]
    assert survivor.returncode == 1 and not survivor.stopped_by_launcher
    assert "UnavailableError" in "\n".join(survivor.stderr_tail)
    resumed = cl.run_cluster(
        str(program), [run_dir], workers=2, cwd=tmp_path, stream="none", verbose=False, timeout=300
    )
    assert resumed["worker 0"].data["restored"] == 5
    with pytest.raises(ExerciseError, match="Epoch 2 trained 16 examples twice"):
        ex.check_resume_point(program, [failure.value.result, resumed])
    assert not cl.leftover_processes()
