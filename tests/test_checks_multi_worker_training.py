"""The checks of notebook 07 pass right answers and explain planted mistakes."""

from __future__ import annotations

import json
import os

import pytest

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
        (lambda w, i: json.dumps({"cluster": {"worker": w}, "task": {"type": "worker", "index": str(i)}}), "an int"),
        (lambda w, i: json.dumps({"cluster": {"worker": [w[i]]}, "task": {"type": "worker", "index": i}}), "same full list"),
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


def good_checkpoint_dir(base, task_type, task_id, cluster):
    chief = task_type == "chief" if "chief" in cluster else (task_type == "worker" and task_id == 0)
    return os.path.join(base, "checkpoints") if chief else os.path.join(base, f"workertemp_{task_id}", "checkpoints")


def test_checkpoint_dir(capsys) -> None:
    ex.check_checkpoint_dir(good_checkpoint_dir)
    assert "[pass] checkpoint_dir" in capsys.readouterr().out


def test_checkpoint_dir_worker_0_is_not_always_the_chief() -> None:
    def worker0_always(base, task_type, task_id, cluster):
        chief = task_type == "chief" or task_id == 0
        return os.path.join(base, "checkpoints") if chief else os.path.join(base, f"workertemp_{task_id}", "checkpoints")

    with pytest.raises(ExerciseError, match="worker 0 is an ordinary worker"):
        ex.check_checkpoint_dir(worker0_always)


def test_checkpoint_dir_everyone_writes_the_real_folder() -> None:
    with pytest.raises(ExerciseError, match="workertemp_<task_id>"):
        ex.check_checkpoint_dir(lambda base, t, i, c: os.path.join(base, "checkpoints"))


def good_examples_seen(count, global_batch, workers, worker, policy):
    ids = list(range(count))
    if policy == "OFF":
        return ids
    share = global_batch // workers
    return [i for b in range(0, count, global_batch) for i in ids[b + worker * share : b + (worker + 1) * share]]


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
