"""Checks for notebook 06, TPU and hardware detection.

The hardware check runs the student's chain against fake machines
(:class:`course_utils.hardware.FakeMachine`), so every branch is exercised without a TPU or a GPU.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..checks import exercise, expect, passed
from ..hardware import KINDS, FakeMachine


def _scenarios() -> list[tuple[FakeMachine, str, str]]:
    import tensorflow as tf

    return [
        (FakeMachine(tpu=True, gpus=2), "tpu",
         "a machine with a TPU (and 2 GPUs): the TPU comes first in the chain"),
        (FakeMachine(gpus=4, tpu_error=ValueError("Please provide a TPU Name to connect to.")),
         "multi_gpu", "no TPU (ValueError) and 4 GPUs"),
        (FakeMachine(gpus=1, tpu_error=tf.errors.NotFoundError(
            None, None, "TPUs not found in the cluster.")),
         "one_gpu", "no TPU (NotFoundError) and 1 GPU"),
        (FakeMachine(tpu_error=RuntimeError("TPU is not yet ready")), "cpu",
         "no TPU (RuntimeError) and no GPU"),
        (FakeMachine(), "cpu", "no TPU (NoTPUError) and no GPU"),
    ]


def check_choose_hardware(choose_hardware: Callable[[Any, Any], str]) -> None:
    """``choose_hardware(find_tpu, list_devices)`` must walk TPU -> GPUs -> one GPU -> CPU."""
    with exercise("choose_hardware"):
        for machine, want, story in _scenarios():
            try:
                got = choose_hardware(machine.find_tpu, machine.list_devices)
            except NotImplementedError:
                raise
            except Exception as error:
                expect(
                    False,
                    f"On {story}, your function raised {type(error).__name__}. When find_tpu() "
                    "fails, whatever it raises, there is no usable TPU: catch Exception around it "
                    "and go on to the GPUs. (A cell that needs a TPU must never crash without one.)",
                )
            expect(
                got in KINDS,
                f"Return one of {', '.join(repr(k) for k in KINDS)}; on {story} you returned {got!r}.",
            )
            if want == "tpu":
                expect(
                    got == "tpu",
                    f"On {story}, expected 'tpu', got {got!r}. Call find_tpu() first, and return "
                    "'tpu' as soon as it returns without raising.",
                )
            expect(
                got == want,
                f"On {story}, expected {want!r}, got {got!r}. Count the GPUs with "
                "len(list_devices('GPU')): 2 or more is 'multi_gpu', exactly 1 is 'one_gpu', "
                "none is 'cpu'.",
            )
    passed("choose_hardware", "TPU, 4 GPUs, 1 GPU and CPU-only fakes, with 4 kinds of TPU error.")


def check_tpu_friendly(tpu_friendly: Callable[[Any, int, int], Any]) -> None:
    """``tpu_friendly(dataset, per_replica_batch, replicas)``: full global batches, static shapes."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 4)).astype("float32")
    y = rng.integers(0, 10, size=100).astype("int32")
    with exercise("tpu_friendly"):
        for per_replica, replicas in [(4, 8), (8, 2)]:
            global_batch = per_replica * replicas
            dataset = tpu_friendly(tf.data.Dataset.from_tensor_slices((x, y)), per_replica, replicas)
            expect(
                isinstance(dataset, tf.data.Dataset),
                f"Return a tf.data.Dataset, not {type(dataset).__name__}.",
            )
            spec_x, spec_y = dataset.element_spec
            dims = (spec_x.shape[0], spec_y.shape[0])
            expect(
                None not in dims,
                f"With {replicas} replicas of {per_replica} examples the element_spec is "
                f"{spec_x.shape} / {spec_y.shape}: the batch dimension is unknown (None), because "
                "the last batch may be shorter. A TPU needs static shapes: "
                "batch(..., drop_remainder=True).",
            )
            expect(
                dims == (global_batch, global_batch),
                f"With {replicas} replicas of {per_replica} examples each batch should hold the "
                f"global batch, {per_replica} x {replicas} = {global_batch} examples; yours hold "
                f"{dims[0]}.",
            )
            sizes = [int(b[0].shape[0]) for b in dataset]
            expect(
                sizes == [global_batch] * (100 // global_batch),
                f"100 examples in batches of {global_batch} should give {100 // global_batch} full "
                f"batches; yours gave {len(sizes)} (sizes {sizes[:6]}). Batch once, without "
                "repeat(), and drop the remainder.",
            )
    passed("tpu_friendly", "static global batches of per-replica x replicas, remainder dropped.")
