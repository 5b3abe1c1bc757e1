"""Every notebook that trains: compact progress, one line per epoch, in a format the tests know varies.

Losses and accuracies after training depend on the global batch, so on the strategy a notebook
runs under. The course prints them as ``name=value`` (``loss=0.4123``); the nbval sanitizer
replaces exactly that form, and every other number in a notebook is compared strictly. Assert a
threshold in the cell when the value matters (``assert accuracy > 0.8``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


def format_metrics(logs: Mapping[str, Any], digits: int = 4) -> str:
    """``{"loss": 0.41234, "accuracy": 0.8}`` -> ``"loss=0.4123  accuracy=0.8000"``."""
    parts = []
    for name, value in logs.items():
        try:
            parts.append(f"{name}={float(value):.{digits}f}")
        except (TypeError, ValueError):
            continue
    return "  ".join(parts)


def epoch_printer(epochs: Optional[int] = None) -> Any:
    """A Keras callback that prints ``epoch 1/3  loss=...  accuracy=...`` after each epoch.

    Use it with ``verbose=0`` in ``fit``: Keras's own progress bar prints timings and ETA
    that change on every run.
    """
    import keras

    class EpochPrinter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Optional[Mapping[str, Any]] = None) -> None:
            total = f"/{epochs}" if epochs else ""
            print(f"epoch {epoch + 1}{total}  {format_metrics(logs or {})}")

    return EpochPrinter()
