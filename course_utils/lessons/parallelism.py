"""Notebook 09: model and pipeline parallelism in one picture, with the pipeline's idle time computed."""

from __future__ import annotations

from typing import Any


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
    colors = plt.get_cmap("tab10")(range(10))[:, :3]
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
