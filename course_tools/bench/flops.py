"""The benchmark: what the machine can do at best, the float32 matmul rate and the FLOPs of a training step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class LayerFlops:
    """One layer's forward FLOPs on one example; ``shape`` says what it computes."""

    kind: str
    shape: str
    forward: int


@dataclass(frozen=True)
class ModelFlops:
    """Floating-point operations of one example, counted from the layer shapes."""

    layers: tuple[LayerFlops, ...]

    @property
    def forward(self) -> int:
        return sum(layer.forward for layer in self.layers)

    @property
    def training(self) -> int:
        """Forward + backward: the backward pass computes two products per layer (the gradient
        of the input and of the weights), each as costly as the forward one, so ~3x forward."""
        return 3 * self.forward

    def table(self) -> str:
        lines = [f"{'layer':<8}{'what it computes':<34}{'forward FLOPs':>14}"]
        for layer in self.layers:
            lines.append(f"{layer.kind:<8}{layer.shape:<34}{layer.forward:>14,}")
        lines.append(f"{'total (one example, forward)':<42}{self.forward:>14,}")
        lines.append(f"{'training: ~3x forward':<42}{self.training:>14,}")
        return "\n".join(lines)


@dataclass(frozen=True)
class MachineLimit:
    """This machine's float32 matmul rate and the model's FLOPs: the arithmetic limit."""

    matmul_gflops: float
    matmul_size: int
    flops: ModelFlops
    profiler_forward: Optional[int] = None

    @property
    def examples_per_s_limit(self) -> float:
        """Examples per second if training ran at the matmul rate (it never quite does)."""
        return self.matmul_gflops * 1e9 / self.flops.training

    def share(self, examples_per_s: float) -> float:
        """Fraction of the matmul rate that ``examples_per_s`` training examples use."""
        return examples_per_s * self.flops.training / (self.matmul_gflops * 1e9)


# --------------------------------------------------------------------------- counting FLOPs


def conv2d_flops(height: int, width: int, in_channels: int, filters: int, kernel: int) -> int:
    """Forward FLOPs of a 'valid', stride-1 square convolution on one example: every output value
    is a dot product of ``kernel*kernel*in_channels`` pairs, a multiply and an add each."""
    out_h, out_w = height - kernel + 1, width - kernel + 1
    return 2 * out_h * out_w * filters * kernel * kernel * in_channels


def dense_flops(inputs: int, units: int) -> int:
    """Forward FLOPs of a dense layer on one example: ``units`` dot products of length ``inputs``."""
    return 2 * inputs * units


def model_flops(model: Any) -> ModelFlops:
    """Count the multiply-adds of the Conv2D and Dense layers of a built Keras model (x2 FLOPs).

    Bias additions, activations and pooling are left out: they are a few percent here.
    """
    layers = []
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "Conv2D":
            kh, kw = layer.kernel_size
            in_h, in_w, in_c = (int(d) for d in layer.input.shape[1:])
            out_h, out_w, filters = (int(d) for d in layer.output.shape[1:])
            forward = 2 * out_h * out_w * filters * kh * kw * in_c
            shape = f"{kh}x{kw}x{in_c} -> {filters}, {in_h}x{in_w} -> {out_h}x{out_w}"
        elif kind == "Dense":
            inputs, units = int(layer.input.shape[-1]), int(layer.units)
            forward = dense_flops(inputs, units)
            shape = f"{inputs} -> {units}"
        else:
            continue
        layers.append(LayerFlops(kind, shape, int(forward)))
    return ModelFlops(tuple(layers))


def profiler_forward_flops(model: Any) -> Optional[int]:
    """FLOPs of one forward pass as TensorFlow's graph profiler counts them (a cross-check:
    it also counts bias additions and pooling). None when the profiler is not available."""
    try:
        from course_utils.runtime import import_tensorflow

        tf = import_tensorflow()
        from tensorflow.python.profiler import model_analyzer, option_builder

        shape = [1, *model.input_shape[1:]]
        graph = tf.function(lambda x: model(x)).get_concrete_function(tf.TensorSpec(shape, tf.float32)).graph
        options = (
            option_builder.ProfileOptionBuilder(option_builder.ProfileOptionBuilder.float_operation())
            .with_empty_output()
            .build()
        )
        return int(model_analyzer.profile(graph=graph, options=options).total_float_ops)
    except Exception:  # an internal API: a cross-check only
        return None


def matmul_gflops(size: int = 1024, repeats: int = 10, warmup: int = 2) -> float:
    """This process's float32 matrix-multiply rate in GFLOP/s: the fastest of ``repeats``
    products of two ``size x size`` matrices (2 * size**3 FLOPs each), after ``warmup``.

    The fastest, not the median: this is the limit, what the hardware can do, and other
    programs on the machine only ever slow a run down.
    """
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    a = tf.random.stateless_normal((size, size), seed=(1, 2))
    b = tf.random.stateless_normal((size, size), seed=(3, 4))

    @tf.function
    def product() -> Any:
        return tf.reduce_sum(tf.matmul(a, b))  # a scalar to fetch, so the clock sees the end

    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        product().numpy()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return 2 * size**3 / min(times) / 1e9


def machine_limit(size: int = 1024, model: Any = None) -> MachineLimit:
    """Measure the matmul rate here and count the FLOPs of the custom-training CNN (in-process)."""
    from course_utils.models import custom_training_cnn

    model = model or custom_training_cnn(seed=1)
    return MachineLimit(matmul_gflops(size), size, model_flops(model), profiler_forward_flops(model))
