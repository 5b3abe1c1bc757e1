"""Notebook 04 (custom training loops): its exercise checks.

Every check about distribution runs the student's code on one device and on a 2-replica
``MirroredStrategy`` over virtual CPUs (:func:`course_utils.compare.checking_strategy`), from the
same weights and global batch, against a single-device reference written out here. The batches
are **padded**: ``mask`` is 1.0 for a real example, 0.0 for a padding slot; the reference is what
one device computes on the real examples alone (mean cross-entropy plus the model's penalties,
accuracy).

* ``mean_loss_factor``: predict what a ``tf.reduce_mean`` loss plus the whole penalty sums to on
  4 replicas, as a multiple of one device's loss; measured by :func:`mean_loss_factor`.
* ``adam_update_factor``: predict how far Adam's first update moves when every gradient is doubled
  (a ``tf.reduce_mean`` loss on 2 replicas); measured by :func:`adam_update_factor`.
* ``padded_loss``: ``compute_loss(labels, logits, mask, model_losses)``, one replica's share.
* ``per_replica_dataset_fn``: ``make_dataset_fn(images, labels, global_batch_size)`` ->
  ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.
* ``distributed_test_step``: ``make_distributed_test_step(strategy, model, loss_metric, accuracy)``.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Callable, Optional

import numpy as np

from .. import compare
from ..checks import exercise, expect, expect_close, passed
from ..errors import ExerciseError, ReplicaCountError, describe_raised
from ..lessons import reference as ref
from ..runtime import import_tensorflow as _tf
from . import harness, in_kernel

#: Penalties passed as ``model_losses`` in the padded_loss check (their sum is 0.5).
PENALTIES = (0.3, 0.2)
#: Real examples in the 16 slots of the check batch: 8 + 3 on two replicas, then 6 + 0.
REAL = 11
REAL_ONE_SIDED = 6
#: Section 3's small numbers: four per-example losses and a penalty (one device: 3.5 + 0.2 = 3.7).
SMALL_LOSSES, SMALL_PENALTY = (2.0, 3.0, 4.0, 5.0), 0.2
#: Learning rate of the Adam comparison (the tutorial's).
ADAM_LEARNING_RATE = 0.001
#: The dataset_fn check: 24 examples in global batches of 8 (4 per replica on 2 replicas, 2 per
#: replica when 2 input pipelines feed 4 replicas).
DATASET_EXAMPLES, DATASET_GLOBAL_BATCH = 24, 8
#: Examples of the evaluation check (padded to 48 = 3 batches of 16; the last: 8 real + 8 padding).
EVAL_EXAMPLES = 40


def checking_strategy(notebook_strategy: Optional[Any] = None) -> Any:
    """The 2-replica ``MirroredStrategy`` over ``CPU:0`` and ``CPU:1`` that the checks compare on:
    :func:`course_utils.compare.checking_strategy`, one per process (TensorFlow gives every
    ``MirroredStrategy`` over the same devices the same collective keys, tensorflow/tensorflow#62790).
    A notebook whose strategy is 2 replicas on virtual CPUs gets that very strategy back."""
    try:
        return compare.checking_strategy(2)
    except ReplicaCountError as error:
        raise ExerciseError(str(error)) from None


def _cross_entropy(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


# --------------------------------------------------------------------------- mean_loss_factor


def _predicted(prediction: Any, name: str, what: str) -> float:
    """The number a prediction holds (``NotImplementedError`` while it is the placeholder)."""
    if prediction is None or prediction is Ellipsis:
        raise NotImplementedError
    number = isinstance(prediction, (int, float, np.integer, np.floating)) and type(prediction) is not bool
    expect(
        number and math.isfinite(float(prediction)),
        f"{name} should be one number ({what}), got {prediction!r}.",
    )
    return float(prediction)


def summed_mean_loss(replicas: int) -> float:
    """:data:`SMALL_LOSSES` on ``replicas`` replicas (that many CPU devices), each returning
    ``tf.reduce_mean`` of its slice plus the whole penalty, summed by ``strategy.reduce``."""
    tf = _tf()
    strategy, share = compare.checking_strategy(replicas), len(SMALL_LOSSES) // replicas
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(SMALL_LOSSES)[share * ctx.replica_id_in_sync_group :][:share]
    )
    per_replica = strategy.run(lambda mine: tf.reduce_mean(mine) + SMALL_PENALTY, args=(values,))
    return float(strategy.reduce("SUM", per_replica, axis=None))


@functools.lru_cache(maxsize=1)
def mean_loss_factor() -> float:
    """Exercise mean_loss_factor's answer, measured: :func:`summed_mean_loss` on 4 replicas (in a fresh
    process when TensorFlow has fewer CPUs) over one device's mean plus the penalty."""
    from ..processes import last_result, run_python

    if len(_tf().config.list_logical_devices("CPU")) >= 4:
        summed = summed_mean_loss(4)
    else:
        code = "import course_utils\ncourse_utils.setup(cpus=4, show_report=False)\n"
        code += "from course_utils.processes import print_result\nfrom course_utils.exercises import custom_training_loops as ex\n"
        result = run_python(
            code + "print_result(ex.summed_mean_loss(4))", replicas=4, env={"COURSE_STRATEGY": "default"}
        )
        expect(result.ok, f"the check could not run 4 replicas: {result.error}")
        summed = float(last_result(result.stdout))
    return summed / (float(np.mean(SMALL_LOSSES)) + SMALL_PENALTY)


def check_mean_loss_factor(prediction: Any) -> None:
    """``LOSS_FACTOR_ON_4``: the tf.reduce_mean + whole-penalty loss summed over 4 replicas (one
    example each), as a multiple of one device's loss."""
    with exercise("mean_loss_factor"):
        guess = _predicted(prediction, "LOSS_FACTOR_ON_4", "how many times one device's loss")
        measured, mean, penalty = mean_loss_factor(), float(np.mean(SMALL_LOSSES)), SMALL_PENALTY
        one_device, penalty_once, means_averaged = mean + penalty, 4 * mean + penalty, mean + 4 * penalty
        mistakes = {  # a wrong factor: the mistake that gives it
            1.0: "each replica's tf.reduce_mean divides by the examples it holds, not by the global batch",
            penalty_once / one_device: "every replica adds the whole penalty, not a share of it",
            means_averaged / one_device: "the strategy sums the replicas' means, it never averages them",
            2.0: "there are 4 replicas here, one example each: write what each returns",
            0.25: "the strategy sums the replicas' values; nothing divides them by the replica count",
            16.0: "each replica's mean is over its own example: it is that example's loss",
            4 * one_device: "that is the sum itself; give it as a multiple of one device's loss",
            one_device: "that is one device's loss; give the 4 replicas' sum as a multiple of it",
            penalty_once: "that is a sum, not a factor, and every replica adds the whole "
            "penalty, not a share of it",
        }
        if abs(guess - round(measured, 4)) > 0.02:
            other = "write what each of the 4 replicas returns (its mean plus the penalty), then add them up"
            raise ExerciseError(
                f"not {guess:g}: {next((m for v, m in mistakes.items() if abs(guess - v) <= 0.05), other)}."
            )
    passed(
        "mean_loss_factor",
        f"measured {measured:.2f} on 4 replicas: each returns its own mean plus the whole penalty, and the "
        "strategy adds them.",
    )


# --------------------------------------------------------------------------- adam_update_factor


def _adam_step(strategy: Any, make_train_step: Callable[..., Any]) -> np.ndarray:
    images, labels = ref.check_batch(ref.CHECK_BATCH)
    result = ref.run_train_step(
        strategy,
        make_train_step,
        ref.initial_weights(),
        images,
        labels,
        ADAM_LEARNING_RATE,
        optimizer="adam",
    )
    return result.update


@functools.lru_cache(maxsize=1)
def adam_update_factor() -> float:
    """Adam's first update on 2 replicas with a ``tf.reduce_mean`` loss (and an unscaled
    penalty: every gradient exactly 2x), as a multiple of the right single-device update."""
    tf = _tf()
    import keras

    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def mean_loss(labels: Any, logits: Any, model_losses: Any, global_batch_size: int) -> Any:
        return tf.reduce_mean(loss_object(labels, logits)) + tf.add_n(model_losses)

    one_device = _adam_step(tf.distribute.get_strategy(), ref.tutorial_train_step)
    doubled = _adam_step(checking_strategy(), ref.step_with_loss(mean_loss))
    return ref.factor(doubled, one_device)


def check_adam_update_factor(prediction: Any) -> None:
    """``PREDICTION``: Adam's first update with doubled gradients, as a multiple of the right one."""
    with exercise("adam_update_factor"):
        guess = _predicted(prediction, "PREDICTION", "how many times the right update")
        measured = adam_update_factor()
        if abs(guess - measured) > 0.1:
            if abs(guess - 2.0) < 0.1:
                why = "the gradients are 2x: what does Adam divide the gradient's running mean by?"
            elif abs(guess - 0.5) < 0.1:
                why = (
                    "nothing is divided by the replicas here: every gradient is 2x; what does Adam "
                    "divide the gradient's running mean by?"
                )
            else:
                why = (
                    "every gradient is exactly 2x; ask what Adam does with a gradient g on its "
                    "first step: m = (1 - beta_1) g, v = (1 - beta_2) g^2, step ~ m / sqrt(v)"
                )
            raise ExerciseError(f"you predicted {guess:g}: {why}")
    passed(
        "adam_update_factor",
        f"measured {measured:.2f} on the check's batch: Adam's update hardly moves when every "
        "gradient doubles.",
    )


# --------------------------------------------------------------------------- padded_loss


def _raised(error: Exception) -> dict[str, str]:
    """What the student's code raised, as plain data: its type's name, its message and the line
    :func:`~course_utils.errors.describe_raised` gives it (with the notebook's line, read here)."""
    return {"type": type(error).__name__, "message": str(error), "described": describe_raised(error)}


def _raise_again(raised: Any) -> None:
    """Raise what a harness caught (:func:`_raised`) as the check raised it: a placeholder's
    ``NotImplementedError`` and an ``ExerciseError`` as such, anything else as :func:`exercise` says it."""
    expect(isinstance(raised, dict) and "type" in raised, "The run sent back an error it did not describe.")
    kind, message = str(raised["type"]), str(raised.get("message", ""))
    if kind == "NotImplementedError":
        raise NotImplementedError(message)
    if kind == "ExerciseError":
        raise ExerciseError(message)
    raise ExerciseError(f"your code raised {raised.get('described') or kind}")


def _loss_found(value: Any) -> dict[str, Any]:
    """A loss as plain data: ``per_replica`` (still a PerReplica), ``shape`` (not one number) or ``value``."""
    tf = _tf()
    if isinstance(value, tf.distribute.DistributedValues):
        return {"per_replica": True}
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    return {"shape": list(array.shape)} if array.shape != () else {"value": float(array)}


@harness
def padded_losses(
    compute_loss: Callable[[Any, Any, Any, Any], Any], labels: Any, logits: Any, cases: list
) -> list[dict[str, Any]]:
    """``compute_loss`` on each case ``(replicas, mask, penalties)``: called once on one device
    (``replicas`` 1), or on each replica of the 2-replica checking strategy, the replicas' results
    summed; ``model_losses`` is the penalties as tensors. For each case, what came back
    (:func:`_loss_found`), or ``raised``, what the call raised (:func:`_raised`)."""
    tf = _tf()
    found: list[dict[str, Any]] = []
    for replicas, mask, penalties in cases:
        model_losses = [tf.constant(p) for p in penalties]
        try:
            if replicas == 1:
                value = compute_loss(
                    tf.constant(labels), tf.constant(logits), tf.constant(mask), model_losses
                )
            else:
                strategy = checking_strategy()
                inputs = next(iter(compare.distribute(strategy, (labels, logits, mask), len(labels))))

                @tf.function
                def run(inputs: Any) -> Any:
                    def replica_fn(batch_labels: Any, batch_logits: Any, batch_mask: Any) -> Any:
                        return compute_loss(batch_labels, batch_logits, batch_mask, model_losses)

                    return compare.sum_replicas(strategy, strategy.run(replica_fn, args=inputs))

                value = run(inputs)
            found.append(_loss_found(value))
        except Exception as error:  # said by the check, in the order of its cases
            found.append({"raised": _raised(error)})
    return found


def _loss(found: Any, what: str) -> float:
    """The number :func:`padded_losses` found for one case; its hint when it is not one number."""
    expect(
        isinstance(found, dict)
        and len(found) == 1
        and set(found) <= {"raised", "per_replica", "shape", "value"},
        f"{what}: the run sent back no loss.",
    )
    if "raised" in found:
        _raise_again(found["raised"])
    expect(
        "per_replica" not in found,
        f"{what} is still one value per replica (a PerReplica): combine the replicas' values "
        "into one number with strategy.reduce.",
    )
    if "shape" in found:
        shape = tuple(int(n) for n in found["shape"]) if isinstance(found["shape"], list) else ()
        expect(False, f"{what} should be one number (shape ()), got shape {shape}.")
    value = found["value"]
    expect(
        isinstance(value, (int, float)) and not isinstance(value, bool), f"{what}: the run sent back no loss."
    )
    return float(value)


def check_padded_loss(compute_loss: Callable[[Any, Any, Any, Any], Any]) -> None:
    """``compute_loss(labels, logits, mask, model_losses)``: summed over the replicas, the mean
    cross-entropy over the real examples of the global batch plus the penalties once."""
    with exercise("padded_loss"):
        n = ref.CHECK_BATCH
        labels = ref.check_batch(n)[1]
        logits = np.random.default_rng(4).normal(0.0, 2.0, (n, 10)).astype(np.float32)
        ce = _cross_entropy(labels, logits.astype(np.float64))
        penalty = float(sum(PENALTIES))
        full = np.ones(n, np.float32)
        mask = (np.arange(n) < REAL).astype(np.float32)
        one_sided = (np.arange(n) < REAL_ONE_SIDED).astype(np.float32)
        cases = [
            (1, full, PENALTIES),  # 1. one device, no padding
            (1, mask, PENALTIES),  # 2. one device, 5 of 16 slots padding
            (2, mask, ()),  # 3. two replicas: 8 real on replica 0, 3 real + 5 padding on replica 1
            (2, mask, PENALTIES),
            (2, one_sided, ()),  # 4. a replica whose whole slice is padding
        ]
        found = in_kernel(padded_losses, compute_loss, labels, logits, [[r, m, list(p)] for r, m, p in cases])
        expect(
            isinstance(found, list) and len(found) == len(cases),
            f"The run sent back {len(found) if isinstance(found, list) else 'no'} losses, not {len(cases)}.",
        )

        # 1. One device, no padding.
        value = _loss(found[0], "Your loss")
        if abs(value - ce.mean()) < 1e-4:
            raise ExerciseError(
                "on one device your loss is the mean cross-entropy without the penalties: "
                "model_losses must count too (once in total, over the replicas)."
            )
        expect_close(
            value,
            ce.mean() + penalty,
            "On one device, with no padding, the loss should be the mean cross-entropy "
            "over the batch plus the sum of model_losses.",
            rtol=1e-4,
        )

        # 2. One device, 5 of 16 slots padding.
        right = float((ce * mask).sum() / mask.sum())
        value = _loss(found[1], "Your loss") - penalty
        if abs(value - ce.mean()) < 1e-4:
            raise ExerciseError(
                f"on one device, with {n - REAL} of {n} slots padding, your loss is the mean over "
                "all 16 slots: the padding examples count. Their loss must count nowhere."
            )
        if abs(value - (ce * mask).sum() / n) < 1e-4:
            raise ExerciseError(
                f"on one device, with {n - REAL} of {n} slots padding, your loss divides by all "
                f"{n} slots ({right * REAL / n:.4f} instead of {right:.4f}): padding must not count "
                f"in the denominator either. Divide by the {REAL} real examples."
            )
        expect_close(
            value,
            right,
            f"On one device, with {n - REAL} of {n} slots padding (mask 0), the loss "
            f"should be the mean cross-entropy over the {REAL} real examples.",
            rtol=1e-4,
        )

        # 3. Two replicas: 8 real on replica 0, 3 real + 5 padding on replica 1.
        raised = found[2].get("raised") if isinstance(found[2], dict) else None
        if isinstance(raised, dict) and raised.get("type") not in ("ExerciseError", "NotImplementedError"):
            raise ExerciseError(
                f"with model_losses=[] (a model without regularizers) your code raised "
                f"{raised.get('type')}. Add the penalty only when there is one."
            )
        summed = _loss(found[2], "The loss of one replica")
        own_means = float((ce * mask)[:8].sum() / mask[:8].sum() + (ce * mask)[8:].sum() / mask[8:].sum())
        if abs(summed - own_means) < 1e-4 * own_means:
            raise ExerciseError(
                f"on 2 replicas (8 real examples on one, 3 on the other) the replicas' losses sum "
                f"to {summed:.4f}, not {right:.4f}, although one device was right: each replica "
                "divided by its OWN count of real examples. The strategy sums the replicas, so "
                f"each must divide by the real examples of the whole global batch ({REAL}), a "
                "number no replica sees alone: count it across the replicas."
            )
        if abs(summed - (ce * mask).sum() / n) < 1e-4:
            raise ExerciseError(
                f"on 2 replicas your summed loss divides by all {n} slots of the global batch, "
                f"padding included: divide by the {REAL} real examples."
            )
        if abs(summed - 2 * right) < 1e-4 * right:
            raise ExerciseError(
                f"on 2 replicas the replicas' losses sum to {summed:.4f}, twice the single-device "
                f"{right:.4f}, although one device was right: your count of real examples is half "
                f"the global {REAL}. Add the replicas' counts (ReduceOp.SUM), do not average them."
            )
        expect_close(
            summed,
            right,
            f"On 2 replicas (8 real examples on one, 3 real + 5 padding on the other) the "
            f"replicas' losses summed should equal the single-device mean over the {REAL} "
            "real examples, and they do not, although one device was right.",
            rtol=1e-4,
        )

        with_penalty = _loss(found[3], "The loss of one replica")
        counted = (with_penalty - summed) / penalty
        expect(
            abs(counted - 1.0) < 1e-3,
            f"On 2 replicas the penalties count {counted:.2f} times in the summed loss instead of "
            "once: every replica adds them, so each must add only its share.",
        )

        # 4. A replica whose whole slice is padding.
        value = _loss(found[4], "The loss of one replica")
        expect(
            math.isfinite(value),
            f"On 2 replicas, when one replica's slice is all padding (6 real examples, all on "
            f"replica 0), your summed loss is {value}: that replica divided 0 by 0. A replica with "
            "no real example must contribute 0 (tf.math.divide_no_nan, or a denominator that "
            "counts the whole global batch).",
        )
        expect_close(
            value,
            (ce * one_sided).sum() / REAL_ONE_SIDED,
            "On 2 replicas, with 6 real examples all on replica 0, the summed loss should "
            "be their mean cross-entropy.",
            rtol=1e-4,
        )
    passed(
        "padded_loss",
        "on 2 replicas the summed loss is the single-device mean over the real "
        "examples, padding ignored, penalties counted once.",
    )


# --------------------------------------------------------------------------- per_replica_dataset_fn


def _element_found(element: Any) -> dict[str, Any]:
    """One element of the student's dataset as plain data: ``not_pair`` (its type's name) when it is
    not an (images, labels) pair, else its labels' ``ndim`` and ``ids`` (the check's labels are the
    examples' indices, to follow each one)."""
    if not (isinstance(element, (tuple, list)) and len(element) == 2):
        return {"not_pair": type(element).__name__}
    ids = np.asarray(element[1])
    return {"ndim": int(ids.ndim), "ids": [int(i) for i in ids.ravel()]}


@harness
def dataset_fn_batches(
    make_dataset_fn: Callable[[Any, Any, int], Any], images: Any, labels: Any, global_batch: int
) -> dict[str, Any]:
    """``make_dataset_fn(images, labels, global_batch)``'s ``dataset_fn`` as plain data: ``returned``,
    the type's name of what it returned when that is no function; else ``runs``, the elements that
    ``distribute_datasets_from_function`` hands out on one device and on 2 replicas (``steps``, replica
    by replica, at most one step more than one pass: a repeated dataset never ends), and
    ``pipelines``, the elements of 2 input pipelines feeding 4 replicas (at most one more than the
    examples). Each element as :func:`_element_found` gives it; where reading raised, ``raised``."""
    tf = _tf()
    dataset_fn = make_dataset_fn(images, labels, global_batch)
    if not callable(dataset_fn):
        return {"returned": type(dataset_fn).__name__}
    n = len(labels)
    runs: list[dict[str, Any]] = []
    for replicas in (1, 2):
        steps: list[list[dict[str, Any]]] = []
        runs.append({"steps": steps})
        try:
            strategy = tf.distribute.get_strategy() if replicas == 1 else checking_strategy()
            batches = strategy.distribute_datasets_from_function(dataset_fn)
            for inputs in itertools.islice(batches, -(-n // global_batch) + 1):
                parts = [strategy.experimental_local_results(v) for v in inputs]
                steps.append([_element_found(pair) for pair in zip(*parts)])
        except Exception as error:  # said by the check, after the elements read before
            runs[-1]["raised"] = _raised(error)
    pipelines: list[dict[str, Any]] = []
    for k in range(2):
        elements: list[dict[str, Any]] = []
        pipelines.append({"batches": elements})
        try:
            context = tf.distribute.InputContext(
                num_input_pipelines=2, input_pipeline_id=k, num_replicas_in_sync=4
            )
            elements.extend(_element_found(b) for b in itertools.islice(dataset_fn(context), n + 1))
        except Exception as error:
            pipelines[-1]["raised"] = _raised(error)
    return {"runs": runs, "pipelines": pipelines}


def _example_ids(found: Any, what: str) -> list[int]:
    """The labels of one batch (:func:`_element_found`); the hint when it is no batch of pairs."""
    expect(
        isinstance(found, dict) and ("not_pair" in found or "ids" in found),
        f"{what}: the run sent back nothing.",
    )
    expect(
        "not_pair" not in found,
        f"{what} should be an (images, labels) pair, got {found.get('not_pair')}: build the "
        "dataset with tf.data.Dataset.from_tensor_slices((images, labels)).",
    )
    expect(
        isinstance(found.get("ndim"), int) and found["ndim"] >= 1,
        f"{what} is one example, not a batch: end dataset_fn with "
        "dataset.batch(input_context.get_per_replica_batch_size(global_batch_size)).",
    )
    ids = found["ids"]
    expect(
        isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids),
        f"{what}: the run sent back no examples' indices.",
    )
    return list(ids)


def _read(found: Any, key: str) -> list:
    """What :func:`dataset_fn_batches` read in one place (``key``: its elements), each element's
    hint first, then what reading raised there."""
    expect(isinstance(found, dict) and isinstance(found.get(key), list), "The run sent back nothing.")
    if key == "steps":
        expect(all(isinstance(step, list) for step in found[key]), "The run sent back no replicas' batches.")
        read: list = [[_example_ids(p, "An element of your dataset") for p in step] for step in found[key]]
    else:
        read = [_example_ids(b, "An element of your dataset") for b in found[key]]
    if "raised" in found:
        _raise_again(found["raised"])
    return read


def _preview(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:6]))}, ...]"


def check_per_replica_dataset_fn(make_dataset_fn: Callable[[Any, Any, int], Any]) -> None:
    """``make_dataset_fn(images, labels, global_batch_size)`` returns ``dataset_fn(input_context)``:
    on one device and on 2 replicas every step holds one device's global batch; two input pipelines
    (two workers) read disjoint halves in batches of the per-replica size."""
    with exercise("per_replica_dataset_fn"):
        n, g = DATASET_EXAMPLES, DATASET_GLOBAL_BATCH
        images = ref.check_batch(n, seed=2)[0]
        found = in_kernel(dataset_fn_batches, make_dataset_fn, images, np.arange(n, dtype=np.int64), g)
        expect(isinstance(found, dict), "The run sent back nothing.")
        expect(
            "returned" not in found,
            f"make_dataset_fn should return a function of input_context, got {found.get('returned')}.",
        )
        runs, pipelines = found.get("runs"), found.get("pipelines")
        expect(
            isinstance(runs, list) and len(runs) == 2 and isinstance(pipelines, list) and len(pipelines) == 2,
            "The run sent back neither both places' steps nor both input pipelines' batches.",
        )
        one_device = [list(range(i, min(i + g, n))) for i in range(0, n, g)]

        for run, where in zip(runs, ("On one device,", "On 2 replicas,")):
            steps = _read(run, "steps")
            got = [sorted(i for part in step for i in part) for step in steps]
            if got == one_device:
                continue
            seen = [i for step in got for i in step]
            expect(
                len(steps) <= len(one_device) or len(seen) == len(set(seen)),
                f"{where} your dataset yields more than one pass: do not repeat in dataset_fn.",
            )
            sizes = [len(part) for part in steps[0]] if steps else []
            if sum(sizes) > g:
                raise ExerciseError(
                    f"{where} each replica got {sizes[0]} examples per step, {sum(sizes)} in all where "
                    f"one device's global batch holds {g}: batch by the replica's share, "
                    "input_context.get_per_replica_batch_size(global_batch_size)."
                )
            raise ExerciseError(
                f"{where} step 1 holds the examples {_preview(got[0] if got else [])}, one device's "
                f"first global batch {_preview(one_device[0])}: examples are skipped or reordered. "
                "Within one worker every replica reads the one input pipeline, so shard by "
                "input_context.num_input_pipelines (not num_replicas_in_sync), and do not shuffle here."
            )

        # Two input pipelines, as on 2 workers of 2 replicas each.
        read = []
        for k, pipeline in enumerate(pipelines):
            batches = _read(pipeline, "batches")
            sizes = sorted({len(b) for b in batches})
            expect(
                sizes == [g // 4],
                f"With 4 replicas in sync (2 workers), pipeline {k} made batches of {sizes}: each "
                f"replica's batch is input_context.get_per_replica_batch_size({g}) = {g // 4}.",
            )
            read.append({i for b in batches for i in b})
        both = sorted(read[0] & read[1])
        if both:
            raise ExerciseError(
                f"with 2 input pipelines (2 workers), both read the examples {_preview(both)}: every "
                "example would be trained on twice per epoch. Shard first: dataset.shard("
                "input_context.num_input_pipelines, input_context.input_pipeline_id)."
            )
        missing = sorted(set(range(n)) - read[0] - read[1])
        expect(
            not missing,
            f"With 2 input pipelines (2 workers), no pipeline reads the examples {_preview(missing)}: "
            "shard by input_context.num_input_pipelines and input_context.input_pipeline_id.",
        )
    passed(
        "per_replica_dataset_fn",
        "on 1 device and on 2 replicas every step holds one device's global batch; two input "
        "pipelines read disjoint halves in per-replica batches.",
    )


# --------------------------------------------------------------------------- distributed_test_step


def eval_data(examples: int = EVAL_EXAMPLES, batch: int = ref.CHECK_BATCH) -> tuple:
    """``examples`` check images padded to whole batches of ``batch``: (images, labels, mask)."""
    images, labels = ref.check_batch(examples, seed=1)
    slots = -(-examples // batch) * batch
    images = np.concatenate([images, np.zeros((slots - examples,) + images.shape[1:], images.dtype)])
    labels = np.concatenate([labels, np.zeros(slots - examples, labels.dtype)])
    mask = (np.arange(slots) < examples).astype(np.float32)
    return images, labels, mask


def evaluate_with(
    strategy: Any,
    make_distributed_test_step: Callable[..., Any],
    weights: list,
    data: tuple,
    batch: int = ref.CHECK_BATCH,
) -> tuple[float, float]:
    """(loss, accuracy) of the student's distributed test step over ``data`` under ``strategy``."""
    import keras

    with strategy.scope():
        model = ref.check_model()
        model.set_weights(list(weights))
        loss_metric = keras.metrics.Mean(name="test_loss")
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
    step = make_distributed_test_step(strategy, model, loss_metric, accuracy)
    expect(callable(step), f"make_distributed_test_step should return a function, got {type(step).__name__}.")
    for inputs in compare.distribute(strategy, data, batch):
        step(inputs)
    return float(loss_metric.result()), float(accuracy.result())


def _eval_reference(
    weights: list, images: np.ndarray, labels: np.ndarray, mask: np.ndarray
) -> tuple[float, float]:
    model = ref.check_model()
    model.set_weights(list(weights))
    logits = np.asarray(model(images, training=False), np.float64)
    ce = _cross_entropy(labels, logits)
    correct = (logits.argmax(axis=1) == labels).astype(np.float64)
    real = mask > 0
    return float(ce[real].mean()), float(correct[real].mean())


@harness
def evaluation_metrics(
    make_distributed_test_step: Callable[..., Any],
    replicas: int,
    weights: list,
    images: Any,
    labels: Any,
    mask: Any,
) -> dict[str, Any]:
    """The student's step over the padded test set ``(images, labels, mask)`` on one device
    (``replicas`` 1) or on the 2-replica checking strategy, from ``weights`` (:func:`evaluate_with`):
    the metrics' ``loss`` and ``accuracy``, or ``raised``, what the step raised (:func:`_raised`)."""
    strategy = _tf().distribute.get_strategy() if replicas == 1 else checking_strategy()
    try:
        loss, accuracy = evaluate_with(strategy, make_distributed_test_step, weights, (images, labels, mask))
    except (ExerciseError, NotImplementedError):
        raise
    except Exception as error:  # the check says what it means
        return {"raised": _raised(error)}
    return {"loss": loss, "accuracy": accuracy}


def check_distributed_test_step(make_distributed_test_step: Callable[..., Any]) -> None:
    """``make_distributed_test_step(strategy, model, loss_metric, accuracy)`` returns a step that,
    over a padded test set, leaves in the metrics what one device measures on the real examples."""
    with exercise("distributed_test_step"):
        weights = ref.initial_weights(seed=3)
        images, labels, mask = eval_data()
        right = _eval_reference(weights, images, labels, mask)
        unmasked = _eval_reference(weights, images, labels, np.ones_like(mask))

        for replicas, where in ((1, "On one device,"), (2, "On 2 replicas,")):
            found = in_kernel(
                evaluation_metrics, make_distributed_test_step, replicas, weights, images, labels, mask
            )
            expect(
                isinstance(found, dict) and (set(found) == {"raised"} or set(found) == {"loss", "accuracy"}),
                f"{where} the run sent back no metrics.",
            )
            if "raised" in found:
                message = str(found["raised"].get("message", "")) if isinstance(found["raised"], dict) else ""
                if "replica context" in message or "PerReplica" in message:
                    raise ExerciseError(
                        f"{where} your step used a per-replica value (the replicas' labels or "
                        "logits) outside strategy.run, and TensorFlow refused it. Update the "
                        "metrics inside the function that strategy.run runs on each replica: "
                        "each replica then adds its own examples to its own accumulators."
                    )
                _raise_again(found["raised"])
            expect(
                all(isinstance(found[k], (int, float)) and not isinstance(found[k], bool) for k in found),
                f"{where} the run sent back no metrics.",
            )
            loss, accuracy = float(found["loss"]), float(found["accuracy"])
            if abs(loss - right[0] * mask.sum() / len(mask)) < 1e-4 * right[0]:  # Mean of loss * mask
                raise ExerciseError(
                    f"{where} multiplying by the mask leaves padding in the count: pass it as sample_weight=mask."
                )
            if abs(unmasked[0] - right[0]) > 1e-4 and abs(loss - unmasked[0]) < 1e-4 * unmasked[0]:
                raise ExerciseError(
                    f"{where} the metrics read loss {loss:.4f} and accuracy {accuracy:.4f}, those of "
                    f"all {len(mask)} slots: the {int(len(mask) - mask.sum())} padding examples "
                    "were counted. Pass the mask to the metrics."
                )
            if abs(accuracy - right[1]) > 1e-6 or abs(loss - right[0]) > 1e-4 * right[0]:
                ratio = loss / right[0]
                hint = (
                    f"{where} the metrics read loss {loss:.4f} and accuracy {accuracy:.4f}, not what "
                    f"one device measures on the {EVAL_EXAMPLES} real examples."
                )
                if abs(ratio - 1.0) > 0.05 and abs(accuracy - right[1]) < 1e-6:
                    hint += (
                        f" The loss is {ratio:.2f}x: feed the loss metric the per-example losses "
                        "(with the mask), not a loss already divided for the replicas."
                    )
                elif where.startswith("On 2"):
                    hint += (
                        " One device was right, so some replicas' examples were lost or counted "
                        "twice: update the metrics inside strategy.run, from every replica's own "
                        "labels and logits."
                    )
                raise ExerciseError(hint)
    passed(
        "distributed_test_step",
        "on 1 device and on 2 replicas the metrics equal one device's on the real examples.",
    )
