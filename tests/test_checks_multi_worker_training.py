"""The checks of notebook 07 pass right answers and explain planted mistakes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from course_tools.cellmeta import exercise_id, role
from course_utils.errors import ExerciseError
from course_utils.exercises import multi_worker_training as ex


def good_tf_config(workers, index):
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


def test_tf_config(capsys) -> None:
    ex.check_tf_config(good_tf_config)
    assert "[pass] tf_config" in capsys.readouterr().out
    assert "TF_CONFIG" not in os.environ or os.environ["TF_CONFIG"] != good_tf_config(["host-a:2222"], 0)


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (lambda w, i: {"cluster": {"worker": w}, "task": {"type": "worker", "index": i}}, "json.dumps"),
        (
            lambda w, i: json.dumps({"cluster": {"worker": w}, "task": {"type": "worker", "index": str(i)}}),
            "an int",
        ),
        (
            lambda w, i: json.dumps({"cluster": {"worker": [w[i]]}, "task": {"type": "worker", "index": i}}),
            "same full list",
        ),
        (lambda w, i: json.dumps({"cluster": {"worker": w}}), "two keys"),
    ],
)
def test_tf_config_mistakes(mistake, hint) -> None:
    with pytest.raises(ExerciseError, match="tf_config") as caught:
        ex.check_tf_config(mistake)
    assert hint in str(caught.value)


def test_tf_config_unfinished() -> None:
    def unfinished(workers, index):
        raise NotImplementedError("Exercise tf_config: replace this line with your code")

    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_tf_config(unfinished)


def test_batch_sizes(capsys) -> None:
    ex.check_batch_sizes(lambda p, w, r: (p * w * r, p * r))
    assert "[pass] batch_sizes" in capsys.readouterr().out
    with pytest.raises(ExerciseError, match="counts only one worker"):
        ex.check_batch_sizes(lambda p, w, r: (p * r, p * r))
    with pytest.raises(ExerciseError, match="should be"):
        ex.check_batch_sizes(lambda p, w, r: (p * w * r, p))
    with pytest.raises(ExerciseError, match="tuple"):
        ex.check_batch_sizes(lambda p, w, r: p * w * r)


def good_examples_seen(count, global_batch, workers, worker, policy):
    ids = list(range(count))
    if policy == "OFF":
        return ids
    share = global_batch // workers
    return [
        i for b in range(0, count, global_batch) for i in ids[b + worker * share : b + (worker + 1) * share]
    ]


def test_examples_seen(capsys) -> None:
    observed = {
        "worker 0": {"DATA": [0, 1, 4, 5, 8, 9, 12, 13], "OFF": list(range(16))},
        "worker 1": {"DATA": [2, 3, 6, 7, 10, 11, 14, 15], "OFF": list(range(16))},
    }
    ex.check_examples_seen(good_examples_seen, observed)
    assert "[pass] examples_seen" in capsys.readouterr().out


def test_examples_seen_every_nth_example() -> None:
    def every_nth(count, global_batch, workers, worker, policy):
        return list(range(count)) if policy == "OFF" else list(range(worker, count, workers))

    with pytest.raises(ExerciseError, match="every n-th example"):
        ex.check_examples_seen(every_nth)


def test_examples_seen_off_is_not_sharded() -> None:
    def sharded_off(count, global_batch, workers, worker, policy):
        return good_examples_seen(count, global_batch, workers, worker, "DATA")

    with pytest.raises(ExerciseError, match="OFF: no sharding"):
        ex.check_examples_seen(sharded_off)


# --------------------------------------------------------------------------- the worker program
# The notebook's worker program is the solution cell of exercise resume_point; these tests take it
# from the master, so they test the program students complete.

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = r"return global_step // steps_per_epoch, global_step % steps_per_epoch"


def program_text(answer: str = SOLUTION) -> str:
    import nbformat

    nb = nbformat.read(ROOT / "solutions" / "07_multi_worker_training.ipynb", as_version=4)
    cell = next(c for c in nb.cells if exercise_id(c) == "resume_point" and role(c) == "solution")
    body = cell.source.split("\n", 1)[1]  # without the %%writefile line
    region = re.compile(r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION\n", re.S)
    return region.sub(lambda m: f"{m.group(1)}{answer}\n", body)


def write_program(folder: Path, answer: str = SOLUTION) -> Path:
    path = folder / "train.py"
    path.write_text(program_text(answer))
    return path


class Run:
    """A stand-in for a ClusterResult: ``run["worker 0"].data``."""

    def __init__(self, data):
        self.tasks = {task: type("Task", (), {"data": d})() for task, d in data.items()}

    def __getitem__(self, task):
        return self.tasks[task]


def simulate(resume_point, pause=7, steps_per_epoch=4, epochs=3, save_every=5):
    """What the two workers of the notebook's kill-and-resume runs report, for a given resume_point.
    Batch b of an epoch holds the example ids 16b .. 16b+15; worker 0 trains the first 8."""

    def run(first_epoch, skip, step, stop=None, restored=None):
        data = {
            t: {"steps": [], "saved": [], "restored": restored, "joined": 0.0}
            for t in ("worker 0", "worker 1")
        }
        for epoch in range(first_epoch, epochs):
            for batch in range(skip if epoch == first_epoch else 0, steps_per_epoch):
                step += 1
                for k, task in enumerate(data):
                    ids = list(range(16 * batch + 8 * k, 16 * batch + 8 * k + 8))
                    data[task]["steps"].append([step, epoch, 1.0 / step, ids, float(step)])
                    if step % save_every == 0 or step % steps_per_epoch == 0:
                        data[task]["saved"].append([step, float(step)])
                if step == stop:
                    return Run(data)
        for task in data:
            data[task]["weights"] = "good" if step == epochs * steps_per_epoch else "bad"
        return Run(data)

    killed = run(0, 0, 0, stop=pause)
    restored = killed["worker 0"].data["saved"][-1][0]
    epoch, skip = resume_point(restored, steps_per_epoch)
    return killed, run(epoch, skip, restored, restored=restored)


def test_resume_point_passes(tmp_path, capsys) -> None:
    program = write_program(tmp_path)
    killed, resumed = simulate(lambda g, s: divmod(g, s))
    ex.check_resume_point(program, killed, resumed)
    assert "[pass] resume_point" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        ("return global_step // steps_per_epoch, 0", "trained 16 examples twice"),  # restart the epoch
        ("return 0, global_step", "trained 16 examples twice"),  # skip counted from step 0
        ("return global_step // steps_per_epoch, global_step % steps_per_epoch + 1", "never trained 16"),
    ],
)
def test_resume_point_mistakes(tmp_path, answer, hint) -> None:
    program = write_program(tmp_path, answer)
    namespace: dict = {}
    exec(f"def resume_point(global_step, steps_per_epoch):\n    {answer}\n", namespace)
    killed, resumed = simulate(namespace["resume_point"])
    with pytest.raises(ExerciseError, match="resume_point") as caught:
        ex.check_resume_point(program, killed, resumed)
    assert hint in str(caught.value)


def test_resume_point_fits_only_this_cluster(tmp_path) -> None:
    answer = "return (1, 1) if global_step == 5 else (0, 0)"
    program = write_program(tmp_path, answer)
    killed, resumed = simulate(lambda g, s: divmod(g, s))
    with pytest.raises(ExerciseError, match="fits this cluster's numbers only"):
        ex.check_resume_point(program, killed, resumed)


def test_resume_point_unfinished_and_failed_restart(tmp_path) -> None:
    unfinished = write_program(
        tmp_path, 'raise NotImplementedError("Exercise resume_point: replace this line")'
    )
    killed, _ = simulate(lambda g, s: divmod(g, s))
    with pytest.raises(ExerciseError, match="not done yet"):
        ex.check_resume_point(unfinished, killed, None)
    done = write_program(tmp_path)
    with pytest.raises(ExerciseError, match="did not finish"):
        ex.check_resume_point(done, killed, None)


def test_resume_point_wrong_answer_on_a_real_two_worker_cluster(tmp_path) -> None:
    """The notebook's program with a planted mistake (restart the epoch from its first batch),
    killed and restarted as a real 2-worker cluster: the check reads the examples trained twice."""
    from course_utils import cluster as cl

    program = write_program(tmp_path, "return global_step // steps_per_epoch, 0")
    run_dir = tmp_path / "run"
    with pytest.raises(cl.WorkerFailed) as failure:
        with cl.LocalCluster(
            str(program), [run_dir, 7], workers=2, cwd=tmp_path, stream="none", verbose=False, timeout=300
        ) as cluster:
            cluster.wait_for_line("worker 1", "holding still")
            cluster.kill("worker 1")
            cluster.wait()
    resumed = cl.run_cluster(
        str(program), [run_dir], workers=2, cwd=tmp_path, stream="none", verbose=False, timeout=300
    )
    assert resumed["worker 0"].data["restored"] == 5
    with pytest.raises(ExerciseError, match="Epoch 2 trained 16 examples twice"):
        ex.check_resume_point(program, failure.value.result, resumed)
    assert not cl.leftover_processes()


def test_restart_step(capsys) -> None:
    killed, resumed = simulate(lambda g, s: divmod(g, s))
    ex.check_restart_step(6, killed, resumed)
    assert "[pass] restart_step" in capsys.readouterr().out


@pytest.mark.parametrize(
    "prediction, hint",
    [
        (8, "step 7 was trained but never saved"),
        (5, "end-of-epoch saves only"),
        (1, "continues after the last one"),
        (None, "Set PREDICTION"),
        (6.0, "whole number"),
    ],
)
def test_restart_step_mistakes(prediction, hint) -> None:
    killed, resumed = simulate(lambda g, s: divmod(g, s))
    with pytest.raises(ExerciseError, match="restart_step") as caught:
        ex.check_restart_step(prediction, killed, resumed)
    assert hint in str(caught.value)
