"""The NumPy simulation of synchronous data parallelism (course_utils.lessons.simulation)."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils.lessons import simulation as sim


@pytest.fixture(scope="module")
def problem() -> sim.Problem:
    return sim.make_problem(examples=48, features=5, classes=4, seed=1)


def test_problem_is_deterministic_and_learnable_shaped(problem: sim.Problem) -> None:
    again = sim.make_problem(examples=48, features=5, classes=4, seed=1)
    assert np.array_equal(problem.x, again.x) and np.array_equal(problem.y, again.y)
    assert problem.x.dtype == np.float32 and problem.y.dtype == np.int32
    assert problem.params["kernel"].shape == (5, 4) and problem.params["bias"].shape == (4,)
    assert len(np.unique(problem.y)) > 1
    assert problem.head(10).batch == 10
    with pytest.raises(ValueError):
        problem.head(0)


def test_per_example_losses_match_a_direct_formula(problem: sim.Problem) -> None:
    z = problem.x.astype(np.float64) @ problem.params["kernel"] + problem.params["bias"]
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    direct = -np.log(p[np.arange(problem.batch), problem.y])
    assert np.allclose(sim.per_example_losses(problem.params, problem.x, problem.y), direct, atol=1e-12)


def test_analytic_gradient_matches_finite_differences(problem: sim.Problem) -> None:
    analytic = sim.loss_gradients(problem.params, problem.x, problem.y, 48)
    numeric = sim.numerical_gradients(problem.params, problem.x, problem.y, 48)
    assert sim.max_abs_difference(analytic, numeric) < 1e-7


@pytest.mark.parametrize(
    "size, replicas, want",
    [(8, 2, [4, 4]), (10, 3, [4, 3, 3]), (7, 7, [1] * 7), (5, 1, [5]), (23, 5, [5, 5, 5, 4, 4])],
)
def test_shard_sizes_and_shards(size: int, replicas: int, want: list[int]) -> None:
    assert sim.shard_sizes(size, replicas) == want
    batch = np.arange(size)
    shards = sim.shard(batch, replicas)
    assert [len(s) for s in shards] == want
    assert np.array_equal(np.concatenate(shards), batch)
    assert [len(s) for s in np.array_split(batch, replicas)] == want


@pytest.mark.parametrize("replicas", [0, -1, 2.5, True])
def test_shard_refuses_bad_replica_counts(replicas) -> None:
    with pytest.raises(ValueError):
        sim.shard(np.arange(8), replicas)


def test_shard_refuses_more_replicas_than_examples() -> None:
    with pytest.raises(ValueError, match="at least one"):
        sim.shard(np.arange(3), 4)


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 5, 8, 48])
def test_data_parallel_step_equals_single_device(problem: sim.Problem, replicas: int) -> None:
    reference = sim.single_device_gradients(problem.params, problem.x, problem.y)
    step = sim.data_parallel_step(problem.params, problem.x, problem.y, replicas, learning_rate=0.5)
    assert sim.max_abs_difference(step.gradients, reference) < 1e-12
    assert len(step.reduced) == replicas and len(step.new_params) == replicas
    expected = sim.sgd(problem.params, reference, 0.5)
    for new in step.new_params:  # one identical update on every replica
        assert sim.max_abs_difference(new, expected) < 1e-12


@pytest.mark.parametrize("replicas", [1, 2, 4, 8, 16])
def test_local_mean_then_sum_is_n_times_on_even_shards(problem: sim.Problem, replicas: int) -> None:
    reference = sim.single_device_gradients(problem.params, problem.x, problem.y)
    wrong = sim.data_parallel_step(problem.params, problem.x, problem.y, replicas, local_mean=True)
    for name in reference:
        assert np.allclose(wrong.gradients[name], replicas * reference[name], rtol=1e-12, atol=1e-14)
    assert sim.ratio(wrong.gradients, reference) == pytest.approx(replicas, rel=1e-12)


def test_local_means_averaged_are_wrong_only_for_uneven_shards(problem: sim.Problem) -> None:
    def mean_of_local_means(x, y, replicas):
        grads = sim.replica_gradients(problem.params, x, y, replicas, local_mean=True)
        return {k: v / replicas for k, v in sim.tree_sum(grads).items()}

    even = mean_of_local_means(problem.x, problem.y, 4)  # 48 = 4 x 12
    ref = sim.single_device_gradients(problem.params, problem.x, problem.y)
    assert sim.max_abs_difference(even, ref) < 1e-12
    x, y = problem.x[:23], problem.y[:23]
    uneven = mean_of_local_means(x, y, 5)
    assert sim.max_abs_difference(uneven, sim.single_device_gradients(problem.params, x, y)) > 1e-4


def test_all_reduce_sum_gives_every_replica_its_own_copy() -> None:
    grads = [{"a": np.full(3, float(i))} for i in range(4)]
    reduced = sim.all_reduce_sum(grads)
    assert len(reduced) == 4
    for r in reduced:
        assert np.array_equal(r["a"], np.full(3, 6.0))
    reduced[0]["a"][0] = 99.0
    assert reduced[1]["a"][0] == 6.0
    with pytest.raises(ValueError):
        sim.tree_sum([])


def test_loss_gradients_refuses_a_zero_denominator(problem: sim.Problem) -> None:
    with pytest.raises(ValueError):
        sim.loss_gradients(problem.params, problem.x, problem.y, 0)


def test_sync_schedule_waits_for_the_slowest() -> None:
    s = sim.sync_schedule([1.0, 1.25, 2.0], horizon=8.0)
    assert s.updates == 4 and s.barriers == [2.0, 4.0, 6.0, 8.0]
    assert s.max_staleness == 0
    assert s.idle_fraction == pytest.approx(1 - (1.0 + 1.25 + 2.0) / 6.0)


def test_async_schedule_never_waits_but_goes_stale() -> None:
    s = sim.async_schedule([1.0, 1.25, 2.0], horizon=8.0)
    assert s.updates == 18
    assert [w.worker for w in s.work[:4]] == [0, 1, 0, 2]
    assert s.work[0].staleness == 0 and s.work[1].staleness == 1
    assert s.max_staleness == 4
    # equal workers never go stale by more than the number of other workers
    equal = sim.async_schedule([1.0, 1.0], horizon=4.0)
    assert equal.updates == 8 and equal.max_staleness == 1
