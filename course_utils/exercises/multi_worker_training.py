"""Notebook 07: the checks of its exercises (multi-worker training).

The exercises are parts of the notebook's worker program (``train.py``, written by a
``%%writefile`` cell): its input function, its training step and its resume point. The checks load
that file as a module, without running its ``main``, and judge each function: the input and the
step on 2 replicas against one device (:mod:`course_utils.compare`), the resume point on the
restarted clusters of the notebook. Two are predictions: the first step after a restart, and the
task a Kubernetes pod becomes (section 11's start-up lines, run for that pod).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Sequence

import numpy as np

from .. import compare
from ..checks import exercise, expect, expect_close, passed
from ..cluster import make_tf_config
from ..runtime import import_tensorflow
from . import harness, in_kernel, port_runs, unseen


def load_program(program: Any, *names: str) -> ModuleType:
    """The file ``program`` of the worker program as a module (``main`` not run), read afresh with
    the files beside it (``train.py`` imports ``worker_input`` and ``worker_step``); it must define
    ``names``."""
    path = Path(program)
    expect(
        path.is_file(),
        f"There is no {path.name} at {path.parent.name}/: run the cell that writes it "
        "(the one starting with %%writefile).",
    )
    folder = str(path.parent.resolve())
    for name, module in list(sys.modules.items()):  # the files beside it as they are now
        if str(Path(getattr(module, "__file__", None) or "/").parent) == folder:
            del sys.modules[name]
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    expect(spec is not None and spec.loader is not None, f"{path.name} cannot be loaded as Python.")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    for name in names:
        expect(hasattr(module, name), f"{path.name} has no {name}: keep its names and arguments.")
    return module


# --------------------------------------------------------------------------- worker_input


def _batches(dataset: Any) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every batch of ``dataset`` as numpy arrays ``(ids, x, y)``."""
    return [tuple(np.asarray(part) for part in batch) for batch in dataset.as_numpy_iterator()]  # type: ignore[misc]


def _one_step(
    strategy: Any, per_replica: Sequence[tuple[np.ndarray, np.ndarray]], weights: list
) -> np.ndarray:
    """The weights after one correct SGD step on ``strategy``, replica r fed ``per_replica[r]``."""
    import keras

    tf = import_tensorflow()
    with strategy.scope():
        model = keras.Sequential([keras.Input((per_replica[0][0].shape[1],)), keras.layers.Dense(1)])
        model.set_weights(weights)
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    total = sum(len(x) for x, _ in per_replica)

    def step(x: Any, y: Any) -> None:
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=total)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    inputs = strategy.experimental_distribute_values_from_function(
        lambda context: per_replica[context.replica_id_in_sync_group]
    )
    tf.function(lambda values: strategy.run(step, args=values))(inputs)
    return compare.flat(model.trainable_variables)


@harness
def worker_input_batches(program: Any) -> dict[str, Any]:
    """The program's ``make_dataset`` with a short last batch added to its data, as plain data: the
    global batch ``g``, the batches of one device (``one``, or ``one_error``, what it raised) and of
    2 workers of 2 replicas and of 1 (``workers_2``, ``workers_1``), each batch ``(ids, x, y)``."""
    tf = import_tensorflow()
    train: Any = load_program(program, "make_dataset", "GLOBAL_BATCH", "EXAMPLES")
    del sys.modules[train.__name__]  # its EXAMPLES changes here: a later import reads the file
    g = int(train.GLOBAL_BATCH)
    train.EXAMPLES = int(train.EXAMPLES) + max(1, g // 4 - 1)  # a remainder, under a replica's batch
    out: dict[str, Any] = {"g": g, "examples": train.EXAMPLES}
    try:
        out["one"] = _batches(train.make_dataset(tf.distribute.InputContext(), 0))
    except tf.errors.InvalidArgumentError as error:
        out["one_error"] = str(error)[:500]
        return out
    for replicas in (2, 1):
        contexts = [tf.distribute.InputContext(2, i, 2 * replicas) for i in range(2)]
        out[f"workers_{replicas}"] = [_batches(train.make_dataset(context, 0)) for context in contexts]
    return out


def _worker_steps(workers: list, one: list, g: int, replicas: int) -> list[list[tuple[np.ndarray, ...]]]:
    """The steps of 2 workers of ``replicas`` replicas each (``workers``: each worker's batches; a
    step takes one batch per replica, joined here), judged against ``one``, one device's batches."""
    n = 2 * replicas
    workers = [[tuple(np.asarray(part) for part in batch) for batch in batches] for batches in workers]
    sizes = sorted({len(ids) for batches in workers for ids, _, _ in batches})
    why = {
        g: "a batch of GLOBAL_BATCH per replica; ",
        g // 2: "GLOBAL_BATCH // num_input_pipelines is a worker's share, not a replica's; ",
    }.get(sizes[-1] if sizes else 0, "")
    expect(
        sizes == [g // n],
        f"On 2 workers of {replicas} replica(s) each, the replicas get batches of {sizes} examples, so "
        f"one step trains {n * sizes[-1] if sizes else 0}, not one device's global batch of {g}: {why}"
        "a replica's batch is its share of one step of all workers.",
    )
    first = [set(int(i) for ids, _, _ in batches for i in ids) for batches in workers]
    expect(
        not first[0] & first[1],
        f"The 2 workers read {len(first[0] & first[1])} of the same examples: every worker reads the "
        "whole dataset; keep only this worker's part (the InputContext says which).",
    )
    wanted = {int(i) for ids, _, _ in one for i in ids}
    expect(
        wanted <= first[0] | first[1],
        f"The 2 workers read {len(wanted & (first[0] | first[1]))} of the {len(wanted)} examples one "
        f"device trains: with {replicas} replicas per worker num_replicas_in_sync is {n}, so the data "
        f"were cut into {n} parts, and the 2 workers read only 2 of them.",
    )
    steps = [[batches[k : k + replicas] for k in range(0, len(batches), replicas)] for batches in workers]
    expect(
        [len(b) for b in workers] == [replicas * len(one)] * 2,
        f"One device takes {len(one)} steps per epoch; the workers' {replicas} replica(s) each take "
        f"{len(workers[0])} and {len(workers[1])} batches: every worker must deliver one batch per "
        "replica per step.",
    )
    for k, batch in enumerate(one):
        step_ids = sorted(int(i) for worker in steps for part in worker[k] for i in part[0])
        expect(
            step_ids == sorted(int(i) for i in batch[0]),
            f"At step {k + 1} the 2 workers read other examples than one device's global batch "
            f"{k + 1}: shard the examples in the order one device reads them (shuffle, then shard, "
            "then batch).",
        )
    return [[tuple(np.concatenate(parts) for parts in zip(*step)) for step in worker] for worker in steps]


def check_worker_input(program: Any) -> None:
    """The program's ``make_dataset(input_context, epoch)``: each of 2 workers of 2 replicas (then
    of 1) reads its own part of every global batch, from data that leaves a short last batch, so
    that the replicas make one device's update."""
    with exercise("worker_input"):
        run = in_kernel(worker_input_batches, program)
        g = int(run["g"])
        if "one_error" in run:
            expect(
                "shards" not in str(run["one_error"]),
                "On one device data.shard got 0 shards: its arguments are (num_shards, index), "
                "and you passed them the other way round.",
            )
            expect(False, f"On one device make_dataset raised InvalidArgumentError: {run['one_error']}")
        one = [tuple(np.asarray(part) for part in batch) for batch in run["one"]]
        sizes = [len(b[0]) for b in one]
        expect(
            not (len(sizes) > 1 and set(sizes[:-1]) == {g} and sizes[-1] < g),
            f"{run['examples']} examples leave a last batch of {sizes[-1]}, which the replicas would split "
            "unevenly (or not at all): the statement asks you to drop it.",
        )
        expect(
            one and all(len(ids) == g for ids, _, _ in one),
            f"On one device (1 input pipeline, 1 replica) make_dataset gave batches of "
            f"{sorted(set(sizes))}, not the global batch of {g}: a replica's batch is its share of one "
            "step of all workers, and here its one replica is all of them.",
        )
        workers = _worker_steps(run["workers_2"], one, g, replicas=2)
        _worker_steps(run["workers_1"], one, g, replicas=1)
        # The proof: one step on 2 replicas, each fed one worker's first step, against one device.
        rng = np.random.default_rng(0)
        features = one[0][1].shape[1]
        weights = [rng.normal(size=(features, 1)).astype("float32"), np.zeros(1, "float32")]
        two = _one_step(compare.checking_strategy(2), [(w[0][1], w[0][2]) for w in workers], weights)
        single = _one_step(compare.checking_strategy(1), [(one[0][1], one[0][2])], weights)
        expect_close(two, single, "One step on the 2 workers' first batches is not one device's step")
    passed(
        "worker_input",
        f"each worker reads {g // 2} different examples of every global batch of {g}; one step on "
        "2 replicas fed by them equals one device's step.",
    )


# --------------------------------------------------------------------------- worker_step


def _reference_step(model: Any, optimizer: Any, metric: Any, g: int) -> Any:
    """One device's step: the mean squared error over the global batch, SGD."""
    tf = import_tensorflow()

    def step(inputs: Any) -> Any:
        x, y = inputs
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=g)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def worker_model(features: int) -> Any:
    """The model worker_step's check trains: ``features`` inputs -> Dense(4, ReLU) -> Dense(1), seeded."""
    import keras

    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )


def _program_step(train: ModuleType) -> Any:
    """same_update's factory (distributed) of the program's ``make_train_step(strategy, model, optimizer)``."""
    tf = import_tensorflow()

    def make_step(strategy: Any, model: Any, optimizer: Any, metric: Any, _g: int) -> Any:
        step = train.make_train_step(strategy, model, optimizer)
        expect(callable(step), f"make_train_step returned {step!r}: return the tf.function train_step.")

        def call(inputs: Any) -> Any:
            loss = step(*inputs)
            expect(
                not isinstance(loss, tf.distribute.DistributedValues),
                "train_step returned each replica's own loss (a PerReplica value): combine them into "
                "the loss of the whole global batch.",
            )
            return loss

        return call

    return make_step


#: The programs step_program loaded, by path: the runs of one check use the one it loaded.
_PROGRAMS: dict[str, ModuleType] = {}


@harness
def step_program(program: Any) -> dict[str, int]:
    """The program's file loaded afresh (kept for :func:`worker_step_run`): its global batch and features."""
    train = load_program(program, "make_train_step", "GLOBAL_BATCH", "FEATURES")
    _PROGRAMS[str(program)] = train
    return {"g": int(train.GLOBAL_BATCH), "features": int(train.FEATURES)}


@harness
def worker_step_run(program: Any, replicas: int, data: Any, options: dict[str, Any]) -> dict[str, Any]:
    """One of same_update's runs of the program's step (:func:`port_runs.run_there`'s plain data)."""
    train = _PROGRAMS.get(str(program)) or load_program(program, "make_train_step")
    model = functools.partial(worker_model, int(np.shape(data[0])[1]))
    return port_runs.run_there(_program_step(train), replicas, data, options, make_model=model)


def check_worker_step(program: Any) -> None:
    """The program's ``make_train_step(strategy, model, optimizer)`` on 1 and 2 replicas against one
    device: the same update and the same loss."""
    with exercise("worker_step"):
        sizes = in_kernel(step_program, program)
        expect(
            isinstance(sizes, dict)
            and all(port_runs._number(sizes.get(k)) and abs(sizes[k]) <= 10**6 for k in ("g", "features")),
            "The grading kernel's answer does not give the program's GLOBAL_BATCH and FEATURES.",
        )
        g, features = int(sizes["g"]), int(sizes["features"])
        rng = np.random.default_rng(3)
        x = rng.normal(size=(2 * g, features)).astype("float32")
        y = (x @ rng.normal(size=(x.shape[1], 1)) + 0.1).astype("float32")
        make_model = functools.partial(worker_model, x.shape[1])
        result = compare.same_update(
            program,
            x,
            y,
            make_model=make_model,
            global_batch_size=g,
            steps=2,
            replicas=(1, 2),
            distributed=True,
            reference=_reference_step,
            runner=port_runs.runner(worker_step_run, program, g, make_model=make_model),
        )
        expect(
            result.ok or "on 1 replica" not in result.hint,
            "Your make_train_step on 1 replica is not one device's step: a replica's loss is divided by "
            f"something other than the examples of one step of all workers; here {result.hint}.",
        )
        expect(result.ok, f"Your make_train_step: {result.hint}.")
    passed(
        "worker_step",
        "on 1 and 2 replicas your step makes one device's update and returns its loss.",
    )


# --------------------------------------------------------------------------- restart_step


#: What the notebook's train.py sets (section 6's cells): it saves every SAVE_EVERY global steps and
#: after each epoch of STEPS_PER_EPOCH steps. A grader judges restart_step on these.
PROGRAM_SAVE_EVERY, PROGRAM_STEPS_PER_EPOCH = 5, 4


def check_restart_step(prediction: Any, program: Any, killed_after: int) -> None:
    """Predict-then-run: the first global step a cluster computes after restarting from the last
    checkpoint that the program wrote before a worker died after step ``killed_after``
    (``program=None``, a grader: the notebook's train.py, :data:`PROGRAM_SAVE_EVERY`...)."""
    with exercise("restart_step"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError  # "not done yet", as for every exercise left blank
        expect(
            isinstance(prediction, (int, np.integer)) and not isinstance(prediction, bool),
            f"PREDICTION should be a whole number (a global step), got {prediction!r}.",
        )
        every, epoch = PROGRAM_SAVE_EVERY, PROGRAM_STEPS_PER_EPOCH
        if program is not None:
            train = load_program(program, "SAVE_EVERY", "STEPS_PER_EPOCH")
            every, epoch = int(train.SAVE_EVERY), int(train.STEPS_PER_EPOCH)
        saved = [s for s in range(1, killed_after + 1) if s % every == 0 or s % epoch == 0]
        actual = (saved[-1] if saved else 0) + 1
        ends = [s for s in saved if s % epoch == 0]
        expect(
            prediction != killed_after + 1,
            f"You predicted {prediction}: step {killed_after} was trained but never saved, and a restart "
            "begins after the last checkpoint.",
        )
        expect(  # the saved step itself, when it equals the last epoch end + 1: either mistake, one hint
            not (saved and prediction == saved[-1] and ends and prediction == ends[-1] + 1),
            f"You predicted {prediction}: list every save up to step {killed_after} (SAVE_EVERY and the "
            "epoch end); does a restart compute the saved step again, or the one after it?",
        )
        expect(
            not (ends and prediction == ends[-1] + 1 and actual != prediction),
            f"You predicted {prediction}: you counted the end-of-epoch saves only; the program also saves "
            f"every {every} global steps.",
        )
        expect(
            int(prediction) == actual,
            f"You predicted {prediction}: list the steps <= {killed_after} after which train.py saves "
            "(SAVE_EVERY and the epoch end); a restart begins after the last.",
        )
    passed(
        "restart_step",
        f"the last checkpoint before the kill holds {actual - 1} steps: the restart begins at step {actual}.",
    )


# --------------------------------------------------------------------------- pod_task


def _pod_tf_config(derive: Any, cluster: dict, pod: int) -> dict:
    """The ``TF_CONFIG`` that the start-up lines in the file ``derive`` hand the program in pod
    ``trainer-POD`` of an Indexed Job (``CLUSTER`` and ``JOB_COMPLETION_INDEX`` set)."""
    path = Path(derive)
    expect(path.is_file(), f"There is no {path.name}: run the %%writefile cell of section 11 first.")
    show = [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"]
    env = {**os.environ, "CLUSTER": json.dumps(cluster), "JOB_COMPLETION_INDEX": str(pod)}
    run = subprocess.run(
        [sys.executable, str(path), *show], env=env, capture_output=True, text=True, timeout=60
    )
    expect(
        run.returncode == 0,
        f"The lines of {path.name} failed for pod trainer-{pod}: run the %%writefile cell as given "
        f"({run.stderr.strip().splitlines()[-1:] or ['no message']}).",
    )
    return dict(json.loads(run.stdout))


def check_pod_task(
    prediction: Any, derive: Any, pod: int, chief: int = 1, workers: int = 2, ps: int = 1
) -> None:
    """Predict-then-run: the task that pod ``trainer-POD`` of an Indexed Job becomes, for a cluster
    of ``chief``, ``workers`` and ``ps`` tasks, once notebook 07's start-up lines (the file
    ``derive``) have run in it; ``derive=None`` (a grader, which never runs the notebook's cells)
    judges the prediction alone."""
    with exercise("pod_task"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError  # "not done yet", as for every exercise left blank
        expect(
            isinstance(prediction, (tuple, list))
            and len(prediction) == 2
            and isinstance(prediction[0], str)
            and isinstance(prediction[1], (int, np.integer))
            and not isinstance(prediction[1], bool),
            f'PREDICTION should be a pair (task type, index) such as ("chief", 0), got {prediction!r}.',
        )
        job, index = str(prediction[0]), int(prediction[1])
        counts = {"chief": chief, "worker": workers, "ps": ps}
        tasks = [(kind, i) for kind, n in counts.items() for i in range(n)]  # the launcher's order
        cluster: dict[str, list[str]] = {}
        for rank, (kind, _) in enumerate(tasks):  # pod trainer-RANK at the place of task RANK
            cluster.setdefault(kind, []).append(f"trainer-{rank}.trainer:2222")
        for rank, task in enumerate(tasks if derive is not None else ()):  # the lines, run in every pod
            got = _pod_tf_config(derive, cluster, rank)
            expect(
                got == make_tf_config(cluster, *task),
                f"The lines of {Path(derive).name} no longer give pod trainer-{rank} the launcher's "
                f"TF_CONFIG (they gave {got.get('task')}): run the %%writefile cell of section 11 as given.",
            )
        actual = tasks[pod]
        wrong = (job, index) != actual
        expect(
            job in cluster or not wrong,
            f"There is no {job!r} job here: the cluster's jobs are {', '.join(cluster)}.",
        )
        expect(
            not (wrong and (job, index) == (actual[0], pod)),
            f"You predicted {job} {index}, the pod's number: a task's index counts the tasks of its own "
            "job only, from 0, and the pods before it hold other jobs' tasks.",
        )
        no_chief = [task for task in tasks if task[0] != "chief"]
        expect(
            not (wrong and chief and pod < len(no_chief) and (job, index) == no_chief[pod]),
            f"You predicted {job} {index}, as if there were no chief: the lines number the chief first, "
            "so pod trainer-0 is the chief.",
        )
        expect(
            not wrong,
            f"You predicted {job} {index}: the lines number the chief, then the workers, then the ps, "
            f"each job from 0; pod trainer-{pod} is number {pod} in that list.",
        )
    names = ", ".join(f"{kind} {i}" for kind, i in tasks)
    passed(
        "pod_task",
        f"run in pods trainer-0 to trainer-{len(tasks) - 1}, the lines made them {names}; pod trainer-{pod} "
        f"is {actual[0]} {actual[1]}, which CLUSTER lists at {cluster[actual[0]][actual[1]]}, its own name.",
    )


# --------------------------------------------------------------------------- resume_point


def _data(run: Any, task: str) -> dict:
    return dict(run[task].data) if run is not None else {}


def _examples_by_epoch(runs: Sequence[Any]) -> dict[int, list[int]]:
    """Every example id trained, per epoch, by both workers over a chain of runs, each one counted
    up to the checkpoint the next run restored."""
    seen: dict[int, list[int]] = {}
    for i, run in enumerate(runs):
        until = _data(runs[i + 1], "worker 0").get("restored") if i + 1 < len(runs) else None
        for task in ("worker 0", "worker 1"):
            for step, epoch, _loss, ids, _time in _data(run, task).get("steps", []):
                if until is None or step <= until:
                    seen.setdefault(int(epoch), []).extend(int(i) for i in ids)
    return seen


#: (global step, steps per epoch) pairs on which resume_point must resume where a checkpoint left off.
RESUME_CASES = ((0, 4), (4, 4), (6, 4), (11, 4), (7, 3))


@harness
def resume_points(program: Any, cases: Sequence[Sequence[int]]) -> list[Any]:
    """The program's ``resume_point(global_step, steps_per_epoch)`` for each case, as plain data."""
    train = load_program(program, "resume_point")
    return [_plain(train.resume_point(int(step), int(steps))) for step, steps in cases]


def _plain(value: Any) -> Any:
    """A pair of whole numbers as a list of ints; anything else as its text (the check says why)."""
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, np.integer)) for v in value):
        return [int(v) for v in value]
    return repr(value)[:80]


def _judge_resume_points(program: Any) -> None:
    """resume_point judged on its answers alone (a grader's judge, which runs no cluster): the
    notebook's cases and cases drawn at grading time."""
    rng = unseen()
    cases = [*RESUME_CASES, *(((b := rng.randint(2, 9)) * rng.randint(0, 3) + rng.randint(0, b - 1), b)
                                for _ in range(3))] if rng else list(RESUME_CASES)  # fmt: skip
    for (step, steps), got in zip(cases, in_kernel(resume_points, program, cases)):
        expect(
            isinstance(got, list) and len(got) == 2,
            f"Return a pair (epoch, skip) of whole numbers; resume_point({step}, {steps}) returned {got}.",
        )
        if tuple(got) == divmod(step, steps):
            continue
        expect(
            tuple(got) != (step // steps, step),
            f"resume_point({step}, {steps}) returned {tuple(got)}: the global step counts every batch since "
            "the start, across epochs: skip the ones of this epoch.",
        )
        expect(
            tuple(got) != (step // steps, step % steps + 1),
            f"resume_point({step}, {steps}) returned {tuple(got)}: optimizer.iterations is the number of "
            "steps done, so the next batch has that index.",
        )
        expect(False, f"resume_point({step}, {steps}) returned {tuple(got)}, which does not resume there.")


def check_resume_point(program: Any, runs: Optional[Sequence[Any]], uninterrupted: Any = None) -> None:
    """The program's ``resume_point(global_step, steps_per_epoch)``, judged by a chain of runs on one
    run folder: the first interrupted, each next one restarted from the checkpoint the previous left
    (``None`` for a restart that failed), the last finished. ``uninterrupted``: a run never stopped.
    ``runs=None`` (a grader's judge, which runs no cluster): judged on its answers alone."""
    if runs is None:
        with exercise("resume_point"):
            _judge_resume_points(program)
        passed("resume_point", "every checkpoint resumes at its epoch and the batch after the last it holds.")
        return
    with exercise("resume_point"):
        train = load_program(program, "resume_point", "EPOCHS", "STEPS_PER_EPOCH", "GLOBAL_BATCH")
        epochs, per_epoch, g = int(train.EPOCHS), int(train.STEPS_PER_EPOCH), int(train.GLOBAL_BATCH)
        first = train.resume_point(5, per_epoch)
        expect(
            isinstance(first, (tuple, list)) and len(first) == 2,
            f"Return a pair (epoch, skip); resume_point(5, {per_epoch}) returned {first!r}.",
        )
        expect(
            all(run is not None for run in runs),
            "A restarted cluster did not finish (its cell shows why): fix resume_point, run the cell "
            "that writes the program, then the cluster cells of section 9, then this check.",
        )
        for run in runs[1:]:
            expect(
                _data(run, "worker 0").get("restored"),
                "A restarted cluster restored no checkpoint: run the cells of section 9 in order, "
                "on the same run folder.",
            )
        for run in [*runs, uninterrupted]:  # the loss is all-reduced: the same on every worker
            places = [
                [(s[0], s[1], len(s[3])) for s in _data(run, t).get("steps", [])]
                for t in ("worker 0", "worker 1")
            ]
            apart = [
                f"at step {a[0]} worker 0 trained {a[2]} examples of epoch {a[1] + 1}, "
                f"worker 1 {b[2]} of epoch {b[1] + 1}"
                for a, b in zip(*places)
                if a != b
            ] + [f"worker 0 trained {len(places[0])} steps, worker 1 {len(places[1])}"]
            expect(
                places[0] == places[1],
                f"The two workers did not resume at the same place ({apart[0]}): every worker must, so "
                "resume_point must depend only on its arguments, not on the worker.",
            )
        per_epoch_ids = _examples_by_epoch(runs)
        size = per_epoch * g
        for epoch in range(epochs):
            ids = per_epoch_ids.get(epoch, [])
            twice, missing = len(ids) - len(set(ids)), size - len(set(ids))
            expect(
                twice == 0,
                f"Epoch {epoch + 1} trained {twice} examples twice: after a restart the workers redid "
                "batches the checkpoint already held. The global step counts every batch since the "
                "start, across epochs: skip the ones of this epoch.",
            )
            expect(
                missing == 0,
                f"Epoch {epoch + 1} never trained {missing} of its {size} examples: after a restart the "
                "workers skipped batches the checkpoint did not hold. optimizer.iterations is the number "
                "of steps done, so the next batch has that index.",
            )
        last = _data(runs[-1], "worker 0")
        final = last["steps"][-1][0]
        expect(
            final == epochs * per_epoch,
            f"The last run ended at global step {final}, not {epochs * per_epoch}: the epochs after a "
            "restart were not the ones the checkpoint left unfinished.",
        )
        if uninterrupted is not None:
            mine = [np.asarray(w) for w in last.get("weights") or []]
            never = [np.asarray(w) for w in _data(uninterrupted, "worker 0").get("weights") or []]
            expect(
                len(mine) == len(never)
                and all(np.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(mine, never)),
                "The resumed run's final weights differ from those of the run never stopped.",
            )
        for step, steps in RESUME_CASES:
            got = tuple(int(v) for v in train.resume_point(step, steps))
            expect(
                got == divmod(step, steps),
                f"resume_point({step}, {steps}) returned {got}, which does not resume there: your answer "
                "fits this cluster's numbers only.",
            )
    restored = [int(_data(run, "worker 0")["restored"]) for run in runs[1:]]
    passed(
        "resume_point",
        f"the restarts resumed after steps {restored}, trained every example once per epoch on both "
        "workers and ended with the weights of the run never stopped.",
    )
