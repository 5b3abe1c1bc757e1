"""The checks of notebook 01 pass on right answers and give the right hint for planted mistakes."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils import simulation as sim
from course_utils.errors import ExerciseError
from course_utils.exercises import data_parallelism as ex

RIGHT = ex.reference_solutions()


def _fails(check, answer, *fragments: str) -> str:
    with pytest.raises(ExerciseError) as info:
        check(answer)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_all_checks_pass_on_reference_solutions(capsys) -> None:
    ex.check_shard_batch(RIGHT["shard_batch"])
    ex.check_data_parallel_gradient(RIGHT["data_parallel_gradient"])
    ex.check_all_reduce(RIGHT["all_reduce"])
    ex.check_ring_bytes(RIGHT["ring_bytes"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [
        "[pass] shard_batch",
        "[pass] data_parallel_gradient",
        "[pass] all_reduce",
        "[pass] ring_bytes",
    ]


def test_checks_of_an_unfinished_exercise_say_so() -> None:
    def blank(*args, **kwargs):
        raise NotImplementedError("Exercise shard_batch: replace this line with your code")

    for check, ident in [
        (ex.check_shard_batch, "shard_batch"),
        (ex.check_data_parallel_gradient, "data_parallel_gradient"),
        (ex.check_all_reduce, "all_reduce"),
        (ex.check_ring_bytes, "ring_bytes"),
    ]:
        _fails(check, blank, f"Exercise {ident} is not done yet")


# --------------------------------------------------------------------------- shard_batch


def test_shard_batch_floor_division_drops_examples() -> None:
    def dropping(batch, replicas):
        per = len(batch) // replicas
        return [batch[r * per : (r + 1) * per] for r in range(replicas)]

    _fails(ex.check_shard_batch, dropping, "none dropped", "10 examples over 3 replicas")


def test_shard_batch_strided_is_not_contiguous() -> None:
    def strided(batch, replicas):
        return [batch[r::replicas] for r in range(replicas)]

    _fails(ex.check_shard_batch, strided, "not contiguous")


def test_shard_batch_last_shard_takes_the_rest() -> None:
    def rest_at_end(batch, replicas):
        per = len(batch) // replicas
        return [batch[r * per : (r + 1) * per if r < replicas - 1 else None] for r in range(replicas)]

    _fails(ex.check_shard_batch, rest_at_end, "should give shards of [4, 3, 3]", "got [3, 3, 4]")


def test_shard_batch_wrong_count() -> None:
    _fails(ex.check_shard_batch, lambda batch, replicas: [batch], "returned 1 shards")


def test_shard_batch_student_exception_is_reported() -> None:
    def broken(batch, replicas):
        return np.split(batch, replicas)  # raises on uneven splits

    _fails(ex.check_shard_batch, broken, "your code raised ValueError")


# --------------------------------------------------------------------------- data_parallel_gradient


def test_data_parallel_gradient_local_mean_then_sum_is_n_times() -> None:
    def local_mean_sum(params, x, y, replicas):
        grads = [sim.loss_gradients(params, xs, ys, len(xs)) for xs, ys in zip(sim.shard(x, replicas), sim.shard(y, replicas))]
        return sim.tree_sum(grads)

    message = _fails(
        ex.check_data_parallel_gradient, local_mean_sum, "On 2 replica(s)", "GLOBAL batch size (24)", "2.00x"
    )
    assert "uneven" not in message


def test_data_parallel_gradient_mean_of_local_means_fails_on_uneven_shards() -> None:
    def mean_of_means(params, x, y, replicas):
        grads = [sim.loss_gradients(params, xs, ys, len(xs)) for xs, ys in zip(sim.shard(x, replicas), sim.shard(y, replicas))]
        total = sim.tree_sum(grads)
        return {k: v / replicas for k, v in total.items()}

    _fails(ex.check_data_parallel_gradient, mean_of_means, "global batch of 10 (uneven shards)", "only right when")


def test_data_parallel_gradient_wrong_return_type() -> None:
    def as_list(params, x, y, replicas):
        g = sim.single_device_gradients(params, x, y)
        return [g["kernel"], g["bias"]]

    _fails(ex.check_data_parallel_gradient, as_list, "Return a dict", "got list")


# --------------------------------------------------------------------------- all_reduce


def test_all_reduce_mean_instead_of_sum() -> None:
    def mean(per_replica):
        total = sim.tree_sum(per_replica)
        return [{k: v / len(per_replica) for k, v in total.items()} for _ in per_replica]

    _fails(ex.check_all_reduce, mean, "SUMS", "0.50x the reference")


def test_all_reduce_single_result_instead_of_one_per_replica() -> None:
    _fails(ex.check_all_reduce, lambda per_replica: sim.tree_sum(per_replica), "return a list of 2 gradient dicts")


def test_all_reduce_same_array_for_every_replica() -> None:
    def shared(per_replica):
        total = sim.tree_sum(per_replica)
        return [total] * len(per_replica)

    _fails(ex.check_all_reduce, shared, "its own copy")


def test_all_reduce_modifying_the_input() -> None:
    def in_place(per_replica):
        total = per_replica[0]
        for g in per_replica[1:]:
            for k in total:
                total[k] += g[k]
        return [{k: v.copy() for k, v in total.items()} for _ in per_replica]

    _fails(ex.check_all_reduce, in_place, "Do not modify")


# --------------------------------------------------------------------------- ring_bytes


def test_ring_bytes_forgetting_the_two_phases() -> None:
    _fails(ex.check_ring_bytes, lambda m, n, b=4: (n - 1) / n * m * b, "2 phases", "0.50x the reference")


def test_ring_bytes_forgetting_the_chunking() -> None:
    _fails(ex.check_ring_bytes, lambda m, n, b=4: 2 * (n - 1) * m * b, "one chunk of 1/N", "2.00x the reference")


def test_ring_bytes_one_device_sends_nothing() -> None:
    _fails(ex.check_ring_bytes, lambda m, n, b=4: 2 * m * b * max(n - 1, 1) / n, "sends nothing")


def test_ring_bytes_needs_a_default_width() -> None:
    _fails(ex.check_ring_bytes, lambda m, n, b=2: 2 * (n - 1) / n * m * b, "default of 4")
