"""Notebook 11: the checks of its exercises (Keras 3's distribution API on JAX).

Each check runs on two JAX devices (the first two accelerators, else the set-up cell's two CPU
devices, as on a one-chip v5e-1 or one GPU) against one device, the first of the two, with float32
matmuls in float32 on both (by default a TPU uses one bfloat16 pass and a recent NVIDIA GPU TF32,
far above float noise: :func:`same_footing`). Nothing here imports TensorFlow (Colab's TPU runtimes).
A grader whose Keras runs on TensorFlow judges them outside the kernel: the harnesses run the
student's code in the kernel (Keras on JAX) and send back shapes, shards and updates; one device's
references are computed in a process with Keras on JAX, started once (:func:`jax_references`). When
grading, the three checks that train draw their data and starting weights (:func:`_drawn_seed`): a
kernel that replays the notebook's numbers fails them.

* ``jax_shard_batch``: ``shard_batch(x, mesh)`` splits a global batch over the mesh's ``"batch"``
  axis; two steps on it (labels placed by it too) give one device's update;
* ``jax_port_factor``: a prediction of that port's update on 2 devices, as a multiple of one
  device's (:data:`PORTED_FACTOR`);
* ``jax_port_loss``: notebook 04's loss ported to a jitted step keeps ``compute_average_loss``'s
  default divisor (batch times devices): half of one device's update on global arrays, until fixed;
* ``jax_tensor_parallel``: Megatron-LM's ``LayoutMap`` of a two-layer block: the first kernel and
  its bias split by columns, the second kernel by rows, its bias whole, with keys ``re.search``
  (Keras 3.13) and ``re.fullmatch`` (3.14+) read alike, and one device's update;
* ``jax_collectives``: a prediction of the collectives XLA compiles into one step of that block
  under ``DataParallel`` and under that layout, and their bytes, judged against a step the check
  compiles itself on a batch of 28 (no activation's size equals a sum of weights' sizes).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .. import compare
from ..checks import exercise, expect, passed
from ..errors import ExerciseError, describe_raised, last_error_line
from . import harness, in_kernel, unseen

#: Float noise of these few steps on 2 devices is ~1e-7 relative; a real mistake is of order 1.
UPDATE_RTOL = 1e-5
#: The data of the checks: a global batch of 16 examples of 8 features, 3 classes.
EXAMPLES, FEATURES, CLASSES = 16, 8, 3
#: jax_port_loss's second batch: a divisor written as a number (16) fails on it.
SMALL_BATCH = 12
#: The batch of jax_collectives' step: 28 x 4 logits (448 bytes) match no sum of the block's weights'
#: sizes, where 16 x 4 matched down's kernel (an all-reduce of its gradient would have passed).
COLLECTIVE_EXAMPLES = 28


def two_devices() -> list:
    """The first two JAX devices: the accelerators when there are two or more, else JAX's CPU devices
    (the rule of notebook 11's device cell)."""
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise ExerciseError(
            "This check needs Keras on JAX: restart the kernel and run the set-up cell first."
        )
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    if len(devices) < 2:
        raise ExerciseError(
            "This check needs 2 JAX devices: restart the kernel and run the set-up cell first "
            "(it asks XLA for 2 CPU devices before JAX starts)."
        )
    return list(devices[:2])


@contextlib.contextmanager
def same_footing(devices: list) -> Iterator[None]:
    """Both sides of a comparison alike: one device (no distribution) is ``devices[0]``, the same kind
    as the two, and float32 matmuls run in float32 (the default is bfloat16 on a TPU, TF32 on a GPU)."""
    import jax

    with jax.default_device(devices[0]), jax.default_matmul_precision("float32"):
        yield


#: The seed of the notebook's data and starting weights; a grader draws others (:func:`_drawn_seed`).
NOTEBOOK_SEED = 11


def _drawn_seed() -> Optional[int]:
    """``None`` in a notebook; when grading, a seed drawn from :func:`unseen` for the data and the
    starting weights of a check's runs (each harness builds them from it: the student never saw them)."""
    drawn = unseen()
    return None if drawn is None else drawn.randrange(1, 2**31)


def check_data(examples: int = EXAMPLES, seed: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: a global batch of ``examples`` examples, fixed by ``seed`` (the notebook's if ``None``)."""
    rng = np.random.default_rng(NOTEBOOK_SEED if seed is None else seed)
    x = rng.normal(size=(examples, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=examples).astype(np.int32)
    return x, y


def make_block(seed: Optional[int] = None) -> Any:
    """The two-layer block of ``jax_tensor_parallel`` (and the model of the other checks), its starting
    weights drawn from ``seed`` (the notebook's if ``None``)."""
    import keras

    init = keras.initializers.GlorotUniform(seed=NOTEBOOK_SEED if seed is None else seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="relu", kernel_initializer=init, name="up"),
            keras.layers.Dense(4, kernel_initializer=init, name="down"),
        ],
        name="block",
    )


def mean_loss(y: Any, logits: Any) -> Any:
    """The single-device loss: the mean cross-entropy over the batch."""
    import keras

    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))


def train_update(
    distribution: Any,
    loss_of: Callable[[Any, Any], Any] = mean_loss,
    place: Optional[Callable[[np.ndarray], Any]] = None,
    steps: int = 2,
    seed: Optional[int] = None,
) -> tuple[np.ndarray, float, Any]:
    """``steps`` SGD steps of a jitted stateless step on :func:`make_block` under ``distribution``
    (``None``: one device): the update of every weight as one vector, the last loss, and the model.

    The batch is placed with ``place`` when given, else with the distribution's data layout; the
    batch and the starting weights are ``seed``'s (:func:`check_data`, :func:`make_block`).
    """
    import jax
    import keras

    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(distribution)
    try:
        model = make_block(seed)
        optimizer = keras.optimizers.SGD(learning_rate=0.1)
        optimizer.build(model.trainable_variables)

        def compute(trainable: Any, non_trainable: Any, x: Any, y: Any) -> Any:
            logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
            return loss_of(y, logits), non_trainable

        grad_fn = jax.value_and_grad(compute, has_aux=True)

        @jax.jit
        def step(state: Any, x: Any, y: Any) -> Any:
            trainable, non_trainable, slots = state
            (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
            trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
            return loss, (trainable, non_trainable, slots)

        x, y = check_data(seed=seed)
        if place is not None:
            x, y = place(x), place(y)
        elif distribution is not None:
            x = keras.distribution.distribute_tensor(x, distribution.get_data_layout(x.shape))
            y = keras.distribution.distribute_tensor(y, distribution.get_data_layout(y.shape))
        state = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in optimizer.variables],
        )
        start = compare.flat(state[0])
        loss: Any = float("nan")
        for _ in range(steps):
            loss, state = step(state, x, y)
        return compare.flat(state[0]) - start, float(loss), model
    finally:
        keras.distribution.set_distribution(previous)


def _same_update(actual: np.ndarray, expected: np.ndarray, hint: str) -> None:
    gap = compare.mismatch(actual, expected)
    expect(gap < UPDATE_RTOL, f"{hint} ({compare.factor(actual, expected):.2f}x one device's update)")


def _on_jax() -> bool:
    """Whether this process's Keras runs on JAX (the notebook's kernel; not a grader's judge)."""
    keras = sys.modules.get("keras")
    return keras is not None and hasattr(keras, "backend") and keras.backend.backend() == "jax"


def one_device(steps: int, seed: Optional[int] = None) -> tuple[np.ndarray, float]:
    """:func:`train_update` ``(None, steps=steps, seed=seed)`` on the first of :func:`two_devices`: its
    update and last loss, here when Keras runs on JAX, else from a Keras-on-JAX process (:func:`jax_references`)."""
    if _on_jax():
        with same_footing(two_devices()):
            update, loss, _ = train_update(None, steps=steps, seed=seed)
        return update, loss
    found = _references_in_a_jax_process(seed)["one device"][str(steps)]
    return np.asarray(found["update"], np.float64), float(found["loss"])


#: What a check says of a harness's reply it cannot read (never in a notebook: a forged reply).
_UNREAD = "The check could not read what your code did; run the set-up cell, then this check again."


def _sent(reply: Any, *keys: str) -> dict[str, Any]:
    """A harness's reply, a dict with ``keys``; a hint, never a pass, for anything else."""
    expect(isinstance(reply, dict) and all(key in reply for key in keys), _UNREAD)
    return dict(reply)


def _vector(value: Any) -> np.ndarray:
    """An update sent back by a harness, as a float64 vector (an empty one for anything else: it
    matches no reference)."""
    try:
        vector = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return np.zeros(0)
    return vector if vector.ndim == 1 else np.zeros(0)


def _shapes(value: Any) -> set[tuple[int, ...]]:
    """Shard shapes sent back by a harness (a list of lists of ints), as a set of tuples."""
    try:
        return {tuple(int(n) for n in shape) for shape in value}
    except (TypeError, ValueError):
        return set()


# --------------------------------------------------------------------------- jax_shard_batch


def _batch_mesh(devices: list) -> Any:
    import keras

    return keras.distribution.DeviceMesh((2,), ["batch"], devices=devices).backend_mesh


def _shard_input(seed: Optional[int] = None) -> np.ndarray:
    """The 8 examples of 4 features :func:`shard_placement` shards: 0 to 31 in a notebook, else ``seed``'s."""
    if seed is None:
        return np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    return np.random.default_rng(seed).normal(size=(8, 4)).astype(np.float32)


@harness
def shard_placement(shard_batch: Callable[[Any, Any], Any], seed: Optional[int] = None) -> dict[str, Any]:
    """The kernel's side of :func:`check_shard_batch`: ``shard_batch`` on 8 examples (:func:`_shard_input`)
    over the 2 devices' ``"batch"`` mesh: whether it gave a ``jax.Array``, its shape and values, and each
    shard's device (0, 1: the two; below 0: another) and data."""
    import jax

    devices = two_devices()
    out = shard_batch(_shard_input(seed), _batch_mesh(devices))
    if not isinstance(out, jax.Array):
        return {"array": False}
    return {
        "array": True,
        "shape": list(out.shape),
        "values": np.asarray(out),
        "shards": [
            [devices.index(s.device) if s.device in devices else -1 - int(s.device.id), np.asarray(s.data)]
            for s in out.addressable_shards
        ],
    }


@harness
def shard_labels(shard_batch: Callable[[Any, Any], Any]) -> dict[str, Any]:
    """``shard_batch`` on 8 labels (1-D): the rank ``ValueError`` it raised, else ``None``."""
    devices = two_devices()
    try:
        shard_batch(np.arange(8, dtype=np.int32), _batch_mesh(devices))
    except ValueError as error:
        if "rank" not in str(error):
            raise
        return {"rank_error": str(error)}
    return {"rank_error": None}


@harness
def shard_training(shard_batch: Callable[[Any, Any], Any], seed: Optional[int] = None) -> np.ndarray:
    """The update of :func:`train_update` under ``DataParallel`` from ``seed``, the batch and labels
    placed by ``shard_batch``."""
    import keras

    devices = two_devices()
    mesh = _batch_mesh(devices)
    with same_footing(devices):
        two, _, _ = train_update(
            keras.distribution.DataParallel(devices=devices), place=lambda a: shard_batch(a, mesh), seed=seed
        )
    return two


def check_shard_batch(shard_batch: Callable[[Any, Any], Any]) -> None:
    """``shard_batch(x, mesh)``: ``x`` as one global ``jax.Array``, its examples split over ``"batch"``."""
    seed = _drawn_seed()  # grading: examples and starting weights the student never saw
    drawn = () if seed is None else (seed,)  # a notebook's calls stay as they were
    with exercise("jax_shard_batch"):
        x = _shard_input(seed)
        out = _sent(in_kernel(shard_placement, shard_batch, *drawn), "array")
        expect(
            out["array"] is True,
            "Return a jax.Array placed on the mesh's devices, not a NumPy array.",
        )
        out = _sent(out, "shape", "values", "shards")
        values = out["values"]
        expect(
            tuple(out["shape"]) == x.shape and isinstance(values, np.ndarray) and np.array_equal(values, x),
            "The global array must hold the whole batch, unchanged: split where it lives, not its values.",
        )
        held = {int(device): np.asarray(data) for device, data in out["shards"]}
        expect(
            set(held) == {0, 1},
            f"Your array lives on {len(held)} device(s): give jax.device_put a NamedSharding over the mesh.",
        )
        shapes = {tuple(part.shape) for part in held.values()}
        expect(
            shapes != {(8, 4)},
            "Each device holds the whole batch (replicated): your sharding splits no dimension; the "
            "examples are dimension 0.",
        )
        expect(
            shapes != {(8, 2)},
            "You split the features (dimension 1), not the examples (dimension 0).",
        )
        expect(shapes == {(4, 4)}, f"Each device should hold 4 of the 8 examples, not {sorted(shapes)}.")
        # the training steps below place the 1-D labels with it too
        if _sent(in_kernel(shard_labels, shard_batch), "rank_error")["rank_error"] is not None:
            raise ExerciseError(
                "Your PartitionSpec names more dimensions than the 1-D labels have: name only the "
                "dimension you split, and it fits an array of any rank."
            )
        expect(
            np.array_equal(held[0], x[:4]) and np.array_equal(held[1], x[4:]),
            "The first device should hold the first half of the batch, the second the second half.",
        )
        two = _vector(in_kernel(shard_training, shard_batch, *drawn))
        one, _ = one_device(2, seed)
        _same_update(two, one, "Two steps on your sharded batch should give one device's update")
    passed("jax_shard_batch", "each device holds its 4 examples; two steps on them give one device's update.")


# --------------------------------------------------------------------------- jax_port_factor

#: jax_port_factor: the ported loss divides the sum by ``len(y) * 2`` where ``len(y)``, on global
#: arrays, is already the whole batch: half the mean, half its gradients, half SGD's update, exactly
#: (jax_port_loss's check measures it: its 0.50x hint).
PORTED_FACTOR = 0.5


def check_port_factor(prediction: Any) -> None:
    """``PORT_FACTOR``: the ported step's update on 2 devices as a multiple of one device's (a number)."""
    with exercise("jax_port_factor"):
        if prediction is None or prediction is Ellipsis:
            raise NotImplementedError
        expect(
            isinstance(prediction, (int, float)) and not isinstance(prediction, bool),
            f"Set PORT_FACTOR to one number, the update on 2 devices / one device's (got {prediction!r}).",
        )
        near = {  # the usual wrong factors, each told its mistake; never the factor itself
            2: "2x is notebook 05's per-replica mean, where len(y) is one replica's examples; ",
            1: "1x is the plain mean's update; this divisor multiplies len(y) by the devices: ",
        }
        said = next(
            (h for v, h in near.items() if abs(prediction - v) < 0.05), f"You predicted {prediction:g}x: "
        )
        len_y = "inside a jitted step on global arrays, what does len(y) count?"
        expect(abs(prediction - PORTED_FACTOR) < 0.01, said + len_y)
    passed(
        "jax_port_factor",
        "0.5x: len(y) counts the global batch, so len(y) x 2 halves the mean, its gradients and SGD's update.",
    )


# --------------------------------------------------------------------------- jax_port_loss


@harness
def port_loss_shape(port_loss: Callable[[Any, Any], Any]) -> list[int]:
    """The kernel's side of :func:`check_port_loss`: the shape of ``port_loss`` on the check's labels."""
    two_devices()
    _, y = check_data()
    return list(np.shape(port_loss(y, np.zeros((EXAMPLES, CLASSES), np.float32))))


@harness
def port_loss_training(port_loss: Callable[[Any, Any], Any], seed: Optional[int] = None) -> dict[str, Any]:
    """One SGD step of :func:`train_update` under ``DataParallel`` from ``seed`` with ``port_loss``:
    update and loss."""
    import keras

    devices = two_devices()
    with same_footing(devices):
        two, loss, _ = train_update(
            keras.distribution.DataParallel(devices=devices), loss_of=port_loss, steps=1, seed=seed
        )
    return {"update": two, "loss": loss}


def _small_labels(examples: int, classes: int, seed: Optional[int]) -> np.ndarray:
    """:func:`port_loss_small`'s labels: the first of :func:`check_data`'s in a notebook, else ``seed``'s."""
    if seed is None:
        return check_data()[1][:examples]
    return np.random.default_rng(seed).integers(0, classes, size=examples).astype(np.int32)


@harness
def port_loss_small(
    port_loss: Callable[[Any, Any], Any],
    examples: int = SMALL_BATCH,
    classes: int = CLASSES,
    seed: Optional[int] = None,
) -> float:
    """``port_loss`` on ``examples`` labels of ``classes`` classes and zero logits (each example's
    loss is log ``classes``)."""
    y = _small_labels(examples, classes, seed)
    return float(port_loss(y, np.zeros((examples, classes), np.float32)))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")


def check_port_loss(port_loss: Callable[[Any, Any], Any]) -> None:
    """``port_loss(y, logits)`` in a jitted step on 2 devices gives the update of one device."""
    seed = _drawn_seed()  # grading: examples and starting weights the student never saw,
    small_batch, classes, rng = SMALL_BATCH, CLASSES, unseen()
    if rng is not None:  # and a small batch a fixed divisor misses, each example's loss not log 3
        small_batch = rng.choice([n for n in range(4, EXAMPLES) if n != SMALL_BATCH])
        classes = rng.choice([2, 4, 5])
    trains: tuple[int, ...] = () if seed is None else (seed,)  # a notebook's calls stay as they were
    smalls: tuple[int, ...] = () if seed is None else (small_batch, classes, seed)
    with exercise("jax_port_loss"):
        sent = in_kernel(port_loss_shape, port_loss)
        expect(isinstance(sent, list), _UNREAD)
        shape = tuple(sent)
        expect(
            shape == (),
            f"Your loss has shape {shape}: return one number, the mean over the batch, not one per example.",
        )
        devices = 2  # the check's DataParallel runs on two_devices()
        one, one_loss = one_device(1, seed)  # one SGD step each: a mistake is an exact factor
        trained = _sent(in_kernel(port_loss_training, port_loss, *trains), "update", "loss")
        two, two_loss = _vector(trained["update"]), _number(trained["loss"])
        ratio = compare.factor(two, one)
        expect(
            not abs(ratio - devices) < 1e-3,
            "Your update is 2.00x one device's: you divide by the per-device batch, the per-replica mean "
            "notebook 05 warns against; the jitted step sees the global batch.",
        )
        expect(
            not abs(ratio - 1 / devices) < 1e-3,
            "Your update is 0.50x one device's: inside a jitted step on global arrays, what does len(y) "
            "count?",
        )
        expect(
            not abs(ratio - EXAMPLES) < 1e-2,
            f"Your update is {EXAMPLES}x one device's: you sum the per-example losses; take their mean "
            "over the global batch.",
        )
        _same_update(two, one, "On 2 devices your loss should give the update of one device")
        expect(
            abs(two_loss - one_loss) <= 1e-5 * abs(one_loss),
            f"The loss your step returns is {two_loss:.6g}, one device's {one_loss:.6g}: return the mean "
            "over the global batch.",
        )
        # zero logits: each example's loss is log(classes), so the mean is too (a fixed / 16 is not)
        small = _number(in_kernel(port_loss_small, port_loss, *smalls))
        expect(
            abs(small - np.log(classes)) <= 1e-5 * np.log(classes),
            f"On {small_batch} examples of loss log {classes} each, yours gives {small:.4f}: your divisor is a "
            "fixed number, not the batch the step receives.",
        )
    passed("jax_port_loss", "on 2 devices the ported step gives the update and the loss of one device.")


# --------------------------------------------------------------------------- jax_tensor_parallel


def key_problems(
    keys: list[str],
    paths: list[str],
    dims: Optional[dict[str, int]] = None,
    ranks: Optional[dict[str, int]] = None,
) -> list[str]:
    """Keys of a ``LayoutMap`` that match no path, or other paths under ``re.search`` (Keras <= 3.13)
    than under ``re.fullmatch`` (Keras >= 3.14, keras-team/keras#22164), or that give a path of rank
    ``ranks[path]`` a layout of ``dims[key]`` dimensions (Keras would raise a ValueError)."""
    problems = []
    for key in keys:
        for path in [p for p in paths if re.search(key, p) and re.fullmatch(key, p)]:
            rank, n = (ranks or {}).get(path), (dims or {}).get(key)
            if rank is not None and n is not None and rank != n:
                problems.append(
                    f"The key {key!r} gives {path} (rank {rank}) a {n}-D layout: end it with kernel$ or bias$."
                )
        searched = [p for p in paths if re.search(key, p)]
        full = [p for p in paths if re.fullmatch(key, p)]
        if searched != full:
            problems.append(
                f"The key {key!r} matches {searched} under re.search (Keras 3.13, Colab) but {full} "
                "under re.fullmatch (Keras 3.14+): start it with .* and end it with $."
            )
        elif not full:
            problems.append(f"The key {key!r} matches no variable; the paths are {paths}.")
    return problems


def _shard_shapes(variable: Any) -> list[list[int]]:
    return [list(shard.data.shape) for shard in variable.value.addressable_shards]


#: The variables of :func:`make_block` whose shards a harness sends back, by layer and name.
_SPLIT = {"up kernel": ("up", "kernel"), "down kernel": ("down", "kernel"), "up bias": ("up", "bias"),
          "down bias": ("down", "bias")}  # fmt: skip


@harness
def tensor_parallel_run(tensor_parallel: Callable[[list], Any], seed: Optional[int] = None) -> dict[str, Any]:
    """The kernel's side of :func:`check_tensor_parallel`: ``tensor_parallel(two_devices())``'s mesh (axes,
    shape), keys and each key's number of dimensions, then two steps of :func:`train_update` under
    ``ModelParallel`` of it from ``seed``: the update and the shard shapes of each weight (or what training
    raised)."""
    import keras

    devices = two_devices()
    layout_map = tensor_parallel(devices)
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        return {"layout_map": False}
    mesh = layout_map.device_mesh
    keys = list(layout_map.keys())
    run: dict[str, Any] = {
        "layout_map": True,
        "axes": [str(a) for a in mesh.axis_names],
        "shape": [int(n) for n in mesh.shape],
        "keys": [str(key) for key in keys],
        "dims": [len(layout_map[key].axes) for key in keys],
    }
    try:  # trained whatever the check says of the keys: their hint comes first
        distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
        with same_footing(devices):
            run["update"], _, model = train_update(distribution, seed=seed)
        run["shards"] = {
            name: _shard_shapes(getattr(model.get_layer(layer), weight))
            for name, (layer, weight) in _SPLIT.items()
        }
    except Exception as error:  # said after the keys' hints, as the check raised it before
        run["raised"] = describe_raised(error)
    return run


def check_tensor_parallel(tensor_parallel: Callable[[list], Any]) -> None:
    """``tensor_parallel(devices)`` returns Megatron's ``LayoutMap`` on a (batch 1, model 2) mesh:
    ``block/up/kernel`` and ``block/up/bias`` split by columns, ``block/down/kernel`` by rows,
    ``block/down/bias`` whole (added once, after the all-reduce of the partial outputs)."""
    seed = _drawn_seed()  # grading: examples and starting weights the student never saw
    with exercise("jax_tensor_parallel"):
        run = _sent(
            in_kernel(tensor_parallel_run, tensor_parallel, *(() if seed is None else (seed,))), "layout_map"
        )
        expect(
            run["layout_map"] is True,
            "Return the keras.distribution.LayoutMap (the check builds ModelParallel from it).",
        )
        run = _sent(run, "axes", "shape", "keys", "dims")
        axes = dict(zip(run["axes"], run["shape"]))
        expect(
            set(axes) == {"batch", "model"},
            f'The mesh needs the axes "batch" and "model", not {list(axes)}.',
        )
        expect(
            axes["model"] == 2,
            f'The "model" axis has {axes["model"]} device(s): nothing is split. Use shape (1, 2) with the '
            'axes ["batch", "model"], in that order.',
        )
        variables = make_block().variables
        paths, ranks = [v.path for v in variables], {v.path: len(v.shape) for v in variables}
        keys = [str(key) for key in run["keys"]]
        problems = key_problems(keys, paths, dict(zip(keys, run["dims"])), ranks)
        expect(not problems, problems[0] if problems else "")
        if "raised" in run:
            raise ExerciseError(f"your code raised {run['raised']}")
        run = _sent(run, "update", "shards")
        two, shards = _vector(run["update"]), _sent(run["shards"], *_SPLIT)
        one, _ = one_device(2, seed)
        up, down = _shapes(shards["up kernel"]), _shapes(shards["down kernel"])
        expect(
            up != {(8, 16)},
            "block/up/kernel is not split: Megatron splits its columns (dimension 1), up's 16 units.",
        )
        expect(
            up == {(8, 8)},
            "You split block/up/kernel's rows (dimension 0); Megatron splits its columns, up's 16 units.",
        )
        expect(
            down != {(16, 4)},
            "block/down/kernel is not split: Megatron splits its rows (dimension 0), one per hidden unit.",
        )
        expect(
            down == {(8, 4)},
            "You split block/down/kernel's columns; split its rows (dimension 0): each device then "
            "multiplies the half of the hidden units it computed.",
        )
        expect(
            _shapes(shards["up bias"]) == {(8,)},
            "block/up/bias is whole on each device: split its one dimension with up's columns.",
        )
        expect(
            _shapes(shards["down bias"]) == {(4,)},
            "down's bias is added after the all-reduce: keep it whole.",
        )
        _same_update(two, one, "Split this way, the block should train as on one device")
    passed(
        "jax_tensor_parallel",
        "up's kernel and bias split by columns, down's kernel by rows, its bias whole, keys read alike by "
        "Keras 3.13 and 3.14+, one device's update.",
    )


# --------------------------------------------------------------------------- jax_collectives

#: The collectives XLA's SPMD partitioner writes into a compiled step, and the bytes of its dtypes.
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"f64": 8, "s64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "u8": 1, "pred": 1}
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s(" + "|".join(COLLECTIVES) + r")(-start)?\(")


def collectives_in(hlo_text: str) -> list[tuple[str, int, list[str]]]:
    """Each collective of a compiled step's HLO text, in order: its kind, the bytes of its result (an
    all-reduce's: the arrays it adds) and those arrays (``"f32[28,4]"``). An async ``*-start`` counts
    once (a gather's: its result), a ``*-done`` never."""
    found = []
    for match in filter(None, map(_LINE.match, hlo_text.splitlines())):
        shape, kind, start = match.groups()
        arrays = re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape)
        arrays = arrays[-1:] if start and kind != "all-reduce" and shape.startswith("(") else arrays
        size = sum(
            _BYTES.get(t, 4) * int(np.prod([int(d) for d in dims.split(",") if d])) for t, dims in arrays
        )
        found.append((kind, size, [f"{t}[{dims}]" for t, dims in arrays]))
    return found


def summed(collectives: list[tuple[str, int, list[str]]]) -> dict[str, int]:
    """:func:`collectives_in`'s collectives, kind -> the bytes of their results, summed."""
    return {kind: sum(size for k, size, _ in collectives if k == kind) for kind, _, _ in collectives}


def megatron_layout(devices: list) -> Any:
    """Megatron-LM's layout of :func:`make_block`: up's kernel and bias by columns, down's kernel by
    rows, down's bias whole."""
    import keras

    layouts = keras.distribution.LayoutMap(
        keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices=devices)
    )
    layouts[".*up/kernel$"], layouts[".*up/bias$"] = (None, "model"), ("model",)
    layouts[".*down/kernel$"] = ("model", None)
    return layouts


def step_collectives(distribution: Any) -> list[tuple[str, int, list[str]]]:
    """:func:`collectives_in` one jitted SGD step of :func:`make_block` on the check's batch of 28 under
    ``distribution``, compiled (the step returns only the new weights): ``(kind, bytes, arrays)``."""
    import jax
    import keras

    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(distribution)
    try:
        model, optimizer = make_block(), keras.optimizers.SGD(learning_rate=0.1)
        optimizer.build(model.trainable_variables)

        def loss(trainable: Any, x: Any, y: Any) -> Any:
            return mean_loss(y, model.stateless_call(trainable, [], x)[0])

        def step(trainable: Any, slots: Any, x: Any, y: Any) -> Any:
            return optimizer.stateless_apply(slots, jax.grad(loss)(trainable, x, y), trainable)

        data = [
            keras.distribution.distribute_tensor(a, distribution.get_data_layout(a.shape))
            for a in check_data(COLLECTIVE_EXAMPLES)
        ]
        weights, slots = [v.value for v in model.trainable_variables], [v.value for v in optimizer.variables]
        return collectives_in(jax.jit(step).lower(weights, slots, *data).compile().as_text() or "")
    finally:
        keras.distribution.set_distribution(previous)


def measured_collectives() -> dict[str, dict[str, int]]:
    """:func:`summed` :func:`step_collectives` under ``DataParallel`` and Megatron's ``ModelParallel`` on
    :func:`two_devices` (Keras on JAX, in this process)."""
    import keras

    devices = two_devices()
    megatron = keras.distribution.ModelParallel(layout_map=megatron_layout(devices), batch_dim_name="batch")
    return {
        "DataParallel": summed(step_collectives(keras.distribution.DataParallel(devices=devices))),
        "ModelParallel": summed(step_collectives(megatron)),
    }


def jax_references(seed: Optional[int] = None) -> dict[str, Any]:
    """What the checks compare with, measured where Keras runs on JAX, as JSON: :func:`one_device`'s
    update and loss after 1 and 2 steps from ``seed``'s data and weights, and for the notebook's
    (``seed`` ``None``) :func:`measured_collectives` too."""
    updates = {}
    for steps in (1, 2):
        update, loss = one_device(steps, seed)
        updates[str(steps)] = {"update": update.tolist(), "loss": loss}
    found: dict[str, Any] = {"one device": updates}
    if seed is None:
        found["collectives"] = measured_collectives()
    return found


def serve_references() -> None:
    """The loop of :func:`_references_in_a_jax_process`'s process (Keras on JAX): for each line of stdin,
    a JSON seed (or ``null``), one result line of :func:`jax_references` for it, or of what it raised."""
    import json

    from ..processes import print_result

    for line in sys.stdin:
        try:
            found = jax_references(json.loads(line))
        except Exception as error:  # said to the judge, which raises it as the grader's failure
            found = {"error": describe_raised(error)}
        print_result(found)


#: The judge's Keras-on-JAX processes (:func:`serve_references`: process, its lines, its stderr), one
#: unless one failed, and the references they sent, by seed.
_JAX: list[tuple[Any, Any, Any]] = []
_FOUND: dict[Optional[int], dict[str, Any]] = {}


def _references_in_a_jax_process(seed: Optional[int] = None) -> dict[str, Any]:
    """:func:`jax_references` ``(seed)`` from a process with Keras on JAX and 2 CPU devices, started
    once and kept: a grader pays its start once for a whole class, and each seed a few steps."""
    import json
    import queue
    import subprocess
    import tempfile
    import threading

    from ..processes import QUIET_TF, parse_result

    if seed in _FOUND:
        return _FOUND[seed]
    if not (_JAX and _JAX[-1][0].poll() is None):
        code = (
            "from course_utils import config\nfrom course_utils.lessons.keras_on_jax import setup_jax\n"
            "setup_jax(config.load(), cpus=2, show_report=False)\n"
            "from course_utils.exercises import keras_distribution_on_jax as ex\nex.serve_references()\n"
        )
        env = {**os.environ, **QUIET_TF, "KERAS_BACKEND": "jax", "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
        errors, lines = tempfile.TemporaryFile(mode="w+"), queue.Queue()  # type: ignore[var-annotated]
        process: Any = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
            text=True, env=env, start_new_session=True,
        )  # fmt: skip
        threading.Thread(target=_forward, args=(process.stdout, lines), daemon=True).start()
        atexit.register(_stop, process)
        _JAX.append((process, lines, errors))
    process, lines, errors = _JAX[-1]
    found = None
    with contextlib.suppress(OSError, queue.Empty):  # start-up included: JAX, Keras, the steps compiled
        process.stdin.write(json.dumps(seed) + "\n")
        process.stdin.flush()
        while found is None and (line := lines.get(timeout=300)):
            found = parse_result(line)
    if not isinstance(found, dict) or "error" in found:
        _stop(process)
        errors.seek(0)
        said = found["error"] if isinstance(found, dict) else last_error_line(errors.read()) or "no reply"
        raise ExerciseError(f"computing the references on JAX failed: {said}")
    if len(_FOUND) >= 64:  # a class's seeds are each used once
        _FOUND.clear()
    _FOUND[seed] = found
    return found


def _forward(stream: Any, lines: Any) -> None:
    """Each line of ``stream`` into the queue ``lines``, then ``""`` (the process ended)."""
    for line in stream:
        lines.put(line)
    lines.put("")


def _stop(process: Any) -> None:
    """End a :func:`serve_references` process: its stdin closed, it ends; killed if it does not."""
    import subprocess

    with contextlib.suppress(OSError, ValueError):
        process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def reference_collectives() -> dict[str, dict[str, int]]:
    """:func:`measured_collectives` here when Keras runs on JAX (the notebook), else in a process with
    Keras on JAX and 2 CPU devices (a grader whose Keras runs on TensorFlow)."""
    if _on_jax():
        return measured_collectives()
    collectives: dict[str, dict[str, int]] = _references_in_a_jax_process()["collectives"]
    return collectives


def _read(layout: str, value: Any) -> dict[str, float]:
    """``PREDICTION[layout]``, ``{collective: bytes}``, its names as the HLO writes them."""
    if value is None or value is Ellipsis or Ellipsis in getattr(value, "values", list)():
        raise NotImplementedError
    expect(
        isinstance(value, dict),
        f'PREDICTION["{layout}"] should be a dict {{collective: bytes}} (got {value!r}).',
    )
    read: dict[str, float] = {}
    for name, size in value.items():
        letters = re.sub(r"[^a-z]", "", str(name).lower())
        kind = next((k for k in COLLECTIVES if k.replace("-", "") == letters), None)
        expect(kind is not None, f"{name!r} is not a collective XLA writes: one of {', '.join(COLLECTIVES)}.")
        if size is None:
            raise NotImplementedError
        expect(
            isinstance(size, (int, float)) and not isinstance(size, bool),
            f'PREDICTION["{layout}"][{name!r}] should be a number of bytes (got {size!r}).',
        )
        read[str(kind)] = read.get(str(kind), 0) + size
    return read


#: A wrong byte count that names its mistake: (layout, the size it equals) -> the hint. The sizes are
#: make_block's (8 -> 16 -> 4) on the step's 28 examples, float32; no two hints of a layout share one.
_B = COLLECTIVE_EXAMPLES
_WEIGHTS, _LOGITS, _HIDDEN, _X, _Y = 4 * (8 * 16 + 16 + 16 * 4 + 4), 4 * _B * 4, 4 * _B * 16, 4 * _B * 8, 4 * _B  # fmt: skip
_BATCH = "that is the size of the batch, which never moves"
_MISTAKES: dict[tuple[str, float], str] = {
    **{("DataParallel", size): f"{_BATCH}: each device keeps its {_B // 2} examples; the all-reduce adds the two "
       "devices' gradients, one per weight" for size in (_X + _Y, _Y)},
    ("DataParallel", _X): "that is the batch x, or the logits twice: neither moves under DataParallel; the "
    "all-reduce adds the two devices' gradients, one per weight",
    **{("DataParallel", size): "that is the size of activations, which stay on their device under DataParallel; "
       "the all-reduce adds the two devices' gradients, one per weight" for size in (_LOGITS, _HIDDEN)},
    ("DataParallel", _WEIGHTS / 2): f"each device computes the gradient of EVERY weight (from its {_B // 2} "
    "examples): the all-reduce adds two whole gradients",
    ("DataParallel", 4 * (8 * 16 + 16 * 4)): "the biases have gradients too",
    # x alone is 2 x logits (896 bytes): its hint under each layout names both readings
    ("ModelParallel", _X + _Y): f"{_BATCH}: the batch axis has 1 device, both hold it all",
    ("ModelParallel", 2 * _LOGITS): "that is x, or down's output twice: x is already whole on both devices, and "
    "only the forward pass adds partial sums",
    ("ModelParallel", _LOGITS + _X): "Megatron's backward all-reduce adds the gradient of the block's input, but "
    "here the input is the data: nothing asks for its gradient",
    ("ModelParallel", _WEIGHTS): "that is DataParallel's all-reduce of the gradients; here the batch is whole on "
    "both devices, so each device's gradient of its own slices is complete: what is added is down's output, a "
    "partial sum on each device",
    ("ModelParallel", 4 * 16 * 4): "that is down's kernel: with the batch whole on both devices, each device's "
    "gradient of its rows is complete, and no gradient crosses",
    ("ModelParallel", _HIDDEN): "that is the hidden layer's activations: each device keeps its 8 hidden units; what "
    "is added is down's partial outputs",
    ("ModelParallel", _LOGITS / 2): f"each device holds a partial sum of ALL 4 outputs of all {_B} examples, not "
    "half of them",
}  # fmt: skip
_WHY = {  # the question a wrong kind is asked, never the kind itself
    "DataParallel": f"each device holds every weight and the gradient of its own {_B // 2} examples: which "
    "collective leaves their sum on both devices?",
    "ModelParallel": "down's rows split give each device a partial sum of down's outputs (from its 8 hidden "
    "units): which collective leaves their sum on both devices?",
}
_TYPICAL = {"DataParallel": {"all-reduce": _WEIGHTS}, "ModelParallel": {"all-reduce": _LOGITS}}


def check_collectives(prediction: Any) -> None:
    """``PREDICTION = {"DataParallel": {collective: bytes}, "ModelParallel": {collective: bytes}}``: the
    collectives XLA compiles into one SGD step of ``block`` under each (:func:`reference_collectives`).
    A wrong count is told its mistake, never the compiled step's count (a second try could copy it)."""
    with exercise("jax_collectives"):
        layouts = ("DataParallel", "ModelParallel")
        expect(
            isinstance(prediction, dict) and set(prediction) == set(layouts),
            'Set PREDICTION to a dict {"DataParallel": {collective: bytes}, "ModelParallel": {collective: '
            f"bytes}}}} (got {prediction!r}).",
        )
        read = {layout: _read(layout, prediction[layout]) for layout in layouts}
        truth = reference_collectives()
        for layout in layouts:  # the hints that explain assume the step's typical collectives
            said, ran, typical = read[layout], truth[layout], truth[layout] == _TYPICAL[layout]
            expect(
                set(said) == set(ran),
                f"You predicted {sorted(said) or 'no collective'} under {layout}, not the kinds XLA compiles "
                "into the step" + (f". Here {_WHY[layout]}" if typical else "."),
            )
            for kind, size in ran.items():
                guess = said[kind]
                hint = _MISTAKES.get((layout, guess)) if typical else None
                if guess * 4 == size:
                    hint = f"you counted {guess:g} float32 values, not bytes: each is 4 bytes"
                expect(
                    guess == size,
                    f"You predicted {guess:g} bytes for {layout}'s {kind}, not the compiled step's count"
                    + (f": {hint}." if hint else "."),
                )
    why = {"DataParallel": " (every weight's gradient)", "ModelParallel": " (down's partial outputs)"}
    said_as = [
        f"{layout}: "
        + ", ".join(f"{k} of {v} bytes" for k, v in truth[layout].items())
        + (why[layout] if truth[layout] == _TYPICAL[layout] else "")
        for layout in layouts
    ]  # the explanations hold only for the typical collectives
    passed("jax_collectives", "; ".join(said_as) + ".")
