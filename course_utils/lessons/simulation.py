"""Notebook 01: synchronous data parallelism from scratch, in NumPy.

The model is softmax regression (one dense layer and a softmax cross-entropy loss): small enough
to write its gradient by hand, real enough to have the same loss as the course's classifiers.
One synchronous data-parallel step is:

1. split the global batch of ``B`` examples into ``N`` shards, one per replica (:func:`shard`);
2. on every replica, the gradient of its per-example losses summed and divided by the *global*
   batch size ``B`` (:func:`replica_gradients`);
3. an all-reduce that sums the per-replica gradients and gives every replica the sum
   (:func:`all_reduce_sum`);
4. one identical update on every replica (:func:`sgd`).

The result equals the gradient of the whole batch on one device. Dividing by the replica's own
batch instead (``local_mean=True``), then summing, gives ``N`` times that gradient.

The module also schedules synchronous and asynchronous workers on a time line
(:func:`sync_schedule`, :func:`async_schedule`), to show waiting and staleness with numbers.

Everything is computed in float64 and is deterministic for a given seed; nothing imports
TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

Params = dict[str, np.ndarray]


# --------------------------------------------------------------------------- the problem


@dataclass(frozen=True)
class Problem:
    """A classification batch and the starting parameters of a softmax regression.

    ``x`` is float32 (so TensorFlow can be fed exactly the same numbers), ``y`` int32 labels,
    ``params`` ``{"kernel": (features, classes), "bias": (classes,)}`` in float32.
    """

    x: np.ndarray
    y: np.ndarray
    params: Params

    @property
    def batch(self) -> int:
        return int(len(self.x))

    def head(self, count: int) -> "Problem":
        """The first ``count`` examples, same parameters."""
        if not 1 <= count <= self.batch:
            raise ValueError(f"head needs 1 <= count <= {self.batch}, got {count}.")
        return Problem(self.x[:count], self.y[:count], self.params)


def make_problem(examples: int = 64, features: int = 4, classes: int = 3, seed: int = 0) -> Problem:
    """A learnable, deterministic batch: labels come from a hidden linear "teacher" plus noise."""
    if examples < 1 or features < 1 or classes < 2:
        raise ValueError("make_problem needs examples >= 1, features >= 1 and classes >= 2.")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, features)).astype(np.float32)
    teacher = rng.normal(size=(features, classes))
    y = np.argmax(x @ teacher + 0.5 * rng.normal(size=(examples, classes)), axis=1).astype(np.int32)
    params = {
        "kernel": (0.1 * rng.normal(size=(features, classes))).astype(np.float32),
        "bias": np.zeros(classes, np.float32),
    }
    return Problem(x, y, params)


# --------------------------------------------------------------------------- the model


def _f64(params: Mapping[str, np.ndarray]) -> Params:
    return {k: np.asarray(v, np.float64) for k, v in params.items()}


def logits(params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    p = _f64(params)
    return np.asarray(x, np.float64) @ p["kernel"] + p["bias"]


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def per_example_losses(params: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Softmax cross-entropy of every example (what ``reduction=None`` gives in Keras)."""
    z = logits(params, x)
    m = z.max(axis=-1, keepdims=True)
    log_norm = (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))[:, 0]
    return log_norm - z[np.arange(len(y)), np.asarray(y)]


def loss(params: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray, denominator: float) -> float:
    """Sum of the per-example losses divided by ``denominator``."""
    return float(per_example_losses(params, x, y).sum() / denominator)


def loss_gradients(
    params: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray, denominator: float
) -> Params:
    """Gradient of ``sum(per-example losses of x) / denominator`` w.r.t. kernel and bias.

    For softmax cross-entropy, d loss_i / d logits_i = softmax(logits_i) - onehot(y_i).
    """
    if denominator <= 0:
        raise ValueError(f"the loss denominator must be positive, got {denominator}.")
    x64 = np.asarray(x, np.float64)
    probs = softmax(logits(params, x64))
    probs[np.arange(len(y)), np.asarray(y)] -= 1.0
    dlogits = probs / float(denominator)
    return {"kernel": x64.T @ dlogits, "bias": dlogits.sum(axis=0)}


def single_device_gradients(params: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> Params:
    """The reference: the mean loss of the whole batch on one device, differentiated."""
    return loss_gradients(params, x, y, len(x))


def numerical_gradients(
    params: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray, denominator: float, eps: float = 1e-6
) -> Params:
    """Central finite differences of :func:`loss` (slow; for checking :func:`loss_gradients`)."""
    base = _f64(params)
    out: Params = {}
    for name, value in base.items():
        grad = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            plus = {k: v.copy() for k, v in base.items()}
            minus = {k: v.copy() for k, v in base.items()}
            plus[name][index] += eps
            minus[name][index] -= eps
            grad[index] = (loss(plus, x, y, denominator) - loss(minus, x, y, denominator)) / (2 * eps)
        out[name] = grad
    return out


# --------------------------------------------------------------------------- data parallelism


def shard_sizes(global_batch: int, replicas: int) -> list[int]:
    """How many examples each replica gets: as even as possible, the first ones one more."""
    if isinstance(replicas, bool) or int(replicas) != replicas or replicas < 1:
        raise ValueError(f"replicas must be a whole number >= 1, got {replicas!r}.")
    if replicas > global_batch:
        raise ValueError(
            f"{global_batch} examples cannot feed {replicas} replicas: each replica needs at least one."
        )
    base, extra = divmod(int(global_batch), int(replicas))
    return [base + (1 if r < extra else 0) for r in range(int(replicas))]


def shard(batch: np.ndarray, replicas: int) -> list[np.ndarray]:
    """Split a batch along its first axis into ``replicas`` contiguous shards (in order).

    Like ``np.array_split``: when the batch does not divide evenly, the first shards get one
    example more, which is also how ``tf.distribute`` splits a global batch.
    """
    batch = np.asarray(batch)
    sizes = shard_sizes(len(batch), replicas)
    bounds = np.cumsum([0] + sizes)
    return [batch[bounds[r] : bounds[r + 1]] for r in range(len(sizes))]


def replica_gradients(
    params: Mapping[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    replicas: int,
    *,
    local_mean: bool = False,
) -> list[Params]:
    """The gradient each replica computes on its shard.

    Right (default): per-example losses summed and divided by the GLOBAL batch size, what
    ``tf.nn.compute_average_loss(per_example, global_batch_size=B)`` does. Wrong
    (``local_mean=True``): divided by the replica's own shard size, what ``tf.reduce_mean`` does.
    """
    global_batch = len(x)
    return [
        loss_gradients(params, xs, ys, len(xs) if local_mean else global_batch)
        for xs, ys in zip(shard(x, replicas), shard(y, replicas))
    ]


def tree_sum(trees: Sequence[Mapping[str, np.ndarray]]) -> Params:
    """Element-wise sum of several gradient dicts with the same keys."""
    if not trees:
        raise ValueError("nothing to sum: the list of gradients is empty.")
    return {k: np.sum([np.asarray(t[k], np.float64) for t in trees], axis=0) for k in trees[0]}


def all_reduce_sum(per_replica: Sequence[Mapping[str, np.ndarray]]) -> list[Params]:
    """An all-reduce with SUM: every replica ends up with its own copy of the sum."""
    total = tree_sum(per_replica)
    return [{k: v.copy() for k, v in total.items()} for _ in per_replica]


def sgd(params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], learning_rate: float) -> Params:
    """One plain SGD update, ``w <- w - learning_rate * g``."""
    p = _f64(params)
    return {k: p[k] - learning_rate * np.asarray(grads[k], np.float64) for k in p}


@dataclass(frozen=True)
class StepResult:
    """What one synchronous data-parallel step computed."""

    replicas: int
    shard_sizes: list[int]
    per_replica: list[Params]
    reduced: list[Params]
    new_params: list[Params] = field(repr=False)

    @property
    def gradients(self) -> Params:
        """The all-reduced gradient (identical on every replica)."""
        return self.reduced[0]


def data_parallel_step(
    params: Mapping[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    replicas: int,
    learning_rate: float = 0.1,
    *,
    local_mean: bool = False,
) -> StepResult:
    """Shard, per-replica gradients, all-reduce (sum), one SGD update on every replica."""
    per_replica = replica_gradients(params, x, y, replicas, local_mean=local_mean)
    reduced = all_reduce_sum(per_replica)
    new = [sgd(params, g, learning_rate) for g in reduced]
    return StepResult(replicas, shard_sizes(len(x), replicas), per_replica, reduced, new)


# --------------------------------------------------------------------------- comparing


def flatten(tree: Mapping[str, np.ndarray]) -> np.ndarray:
    """All entries of a gradient dict in one vector (keys in sorted order)."""
    return np.concatenate([np.asarray(tree[k], np.float64).reshape(-1) for k in sorted(tree)])


def max_abs_difference(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """The largest absolute difference between two gradient dicts."""
    return float(np.max(np.abs(flatten(a) - flatten(b))))


def ratio(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """How many times ``b`` the gradient ``a`` is (projection of ``a`` on ``b``)."""
    fa, fb = flatten(a), flatten(b)
    return float(np.vdot(fa, fb) / np.vdot(fb, fb))


# --------------------------------------------------------------------------- sync vs async


@dataclass(frozen=True)
class Work:
    """One gradient computation of one worker on a time line."""

    worker: int
    start: float
    end: float
    read_version: int  # version of the parameters the gradient was computed on
    applied_version: int  # version of the parameters the update was applied to

    @property
    def staleness(self) -> int:
        """Updates applied by others between reading the parameters and applying the gradient."""
        return self.applied_version - self.read_version


@dataclass(frozen=True)
class Schedule:
    """Work done by several workers until ``horizon``, synchronously or asynchronously."""

    kind: str
    durations: tuple[float, ...]
    horizon: float
    work: list[Work]
    barriers: list[float]

    @property
    def updates(self) -> int:
        """How many times the parameters changed."""
        return len(self.barriers) if self.kind == "sync" else len(self.work)

    @property
    def idle_fraction(self) -> float:
        """Share of the workers' time spent waiting (up to the last update)."""
        end = self.barriers[-1] if self.kind == "sync" else max(w.end for w in self.work)
        busy = sum(w.end - w.start for w in self.work)
        return 1.0 - busy / (len(self.durations) * end)

    @property
    def max_staleness(self) -> int:
        return max((w.staleness for w in self.work), default=0)


def sync_schedule(durations: Sequence[float], horizon: float, reduce_time: float = 0.0) -> Schedule:
    """Synchronous steps: everyone computes, the step ends when the slowest has finished (plus
    the all-reduce); every gradient is computed on the current parameters (staleness 0)."""
    step = max(durations) + reduce_time
    work, barriers = [], []
    t, version = 0.0, 0
    while t + step <= horizon + 1e-9:
        for w, d in enumerate(durations):
            work.append(Work(w, t, t + d, version, version))
        t += step
        version += 1
        barriers.append(round(t, 9))
    return Schedule("sync", tuple(durations), horizon, work, barriers)


def async_schedule(durations: Sequence[float], horizon: float) -> Schedule:
    """Asynchronous workers with a parameter server: each one reads the parameters, computes,
    and pushes its gradient as soon as it is done, without waiting for the others."""
    work: list[Work] = []
    next_start = [0.0] * len(durations)
    read = [0] * len(durations)
    version = 0
    while True:
        ends = [next_start[w] + d for w, d in enumerate(durations)]
        w = int(np.argmin(ends))  # ties: the lower worker id first
        if ends[w] > horizon + 1e-9:
            break
        work.append(Work(w, next_start[w], ends[w], read[w], version))
        version += 1
        next_start[w] = ends[w]
        read[w] = version
    return Schedule("async", tuple(durations), horizon, work, [])
