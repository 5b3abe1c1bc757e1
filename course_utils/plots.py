"""Notebooks 03 and 09 (and others): pictures a class would rather look at than read, from the run's numbers."""

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
