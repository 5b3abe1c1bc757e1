"""Pictures a class would rather look at than read: training curves and sample images."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence


def plot_history(
    history: Any,
    metrics: Optional[Sequence[str]] = None,
    title: str = "Training curves",
) -> Any:
    """Plot one panel per metric (train and ``val_`` side by side) and return the figure.

    ``history`` is a Keras ``History``, its ``.history`` dict, or any mapping of metric name to a
    list of per-epoch values (what a custom loop collects).
    """
    import matplotlib.pyplot as plt

    logs: Mapping[str, Sequence[float]] = getattr(history, "history", history)
    names = list(metrics) if metrics else [k for k in logs if not k.startswith("val_")]
    if not names:
        raise ValueError("plot_history: nothing to plot; the history has no metrics.")
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        values = logs[name]
        epochs = range(1, len(values) + 1)
        ax.plot(epochs, values, marker="o", label="train")
        if f"val_{name}" in logs:
            ax.plot(epochs, logs[f"val_{name}"], marker="s", label="validation")
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def show_images(images: Any, labels: Any, class_names: Sequence[str], count: int = 10) -> Any:
    """Show the first ``count`` images with their class names; returns the figure."""
    import matplotlib.pyplot as plt

    count = min(count, len(images))
    fig, axes = plt.subplots(1, count, figsize=(1.3 * count, 1.7))
    for ax, image, label in zip(axes, images[:count], labels[:count]):
        ax.imshow(image.squeeze(), cmap="gray_r")
        ax.set_title(class_names[int(label)], fontsize=8)
        ax.axis("off")
    fig.tight_layout()
    return fig


def draw_parallelism(layers: int = 4, devices: int = 2, micro_batches: int = 4) -> Any:
    """Draw model parallelism and pipeline parallelism in one figure; return the figure.

    Left: a model of ``layers`` layers split into ``devices`` consecutive groups, one colour per
    device. Middle: model parallelism on one batch: each device runs its layers forward (F), then
    backward (B), while the others wait. Right: the same split run as a pipeline (the GPipe
    schedule) of ``micro_batches`` slices of that batch, each box ``1 / micro_batches`` as long
    (a backward pass is drawn as long as a forward one).
    Hatched bars are idle time, the *bubble*: each device idles (devices - 1) /
    (micro_batches + devices - 1) of the step. Taught in notebook 09.

    Patches drawn: ``layers`` boxes on the left; on each timeline one idle bar per device plus a
    forward and a backward box per device and micro-batch (one micro-batch in the middle panel).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    if not 1 <= devices <= layers or micro_batches < 1:
        raise ValueError("draw_parallelism needs 1 <= devices <= layers and micro_batches >= 1.")
    colors = plt.get_cmap("tab10").colors
    light = [tuple(0.55 + 0.45 * c for c in color) for color in colors]  # backward: a paler shade
    fig, axes = plt.subplots(
        1, 3, figsize=(11, 0.9 + 0.55 * max(layers, 2 * devices)), width_ratios=(1, 2.2, 2.2)
    )
    owner = [i * devices // layers for i in range(layers)]  # consecutive layers per device
    for i, device in enumerate(owner):
        axes[0].add_patch(Rectangle((0, i), 1, 0.8, color=colors[device], alpha=0.8))
        axes[0].text(0.5, i + 0.4, f"layer {i + 1}: device {device}", ha="center", va="center")
    axes[0].set(xlim=(0, 1), ylim=(-0.2, layers))
    axes[0].set_title("The model's layers")
    axes[0].axis("off")
    for ax, count in ((axes[1], 1), (axes[2], micro_batches)):
        width, end = 1 / count, 2 * (count + devices - 1) / count
        for device in range(devices):
            y = devices - 1 - device  # device 0 on top
            ax.add_patch(Rectangle((0, y + 0.1), end, 0.8, fill=False, hatch="//", color="lightgray"))
            for m in range(count):
                forward = device + m
                backward = (count + devices - 1) + (devices - 1 - device) + m
                for step, start, shade in (("F", forward, colors), ("B", backward, light)):
                    box = Rectangle((start * width, y + 0.1), width, 0.8, fc=shade[device], ec="white")
                    ax.add_patch(box)
                    label = f"{step}{m + 1}" if count > 1 else step
                    ax.text((start + 0.5) * width, y + 0.5, label, ha="center", va="center", fontsize=8)
        ax.set(
            xlim=(0, 2 * devices),
            ylim=(0, devices),
            yticks=[devices - 0.5 - d for d in range(devices)],
            yticklabels=[f"device {d}" for d in range(devices)],
            xlabel="time (one batch through one device = 1)",
        )
    axes[1].set_title("Model parallelism: one batch")
    axes[2].set_title(f"Pipeline: {micro_batches} micro-batches")
    handles = [
        Patch(color="dimgray", label="F: forward"),
        Patch(color="silver", label="B: backward"),
        Patch(fill=False, hatch="//", color="lightgray", label="idle (bubble)"),
    ]
    axes[2].legend(handles=handles, loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig
