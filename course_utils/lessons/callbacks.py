"""Notebook 03: learning-rate schedules for ``Model.fit``.

The *Distributed training with Keras* tutorial decays over 12 epochs: ``1e-3`` for epochs 0-2,
``1e-4`` for 3-6, ``1e-5`` from 7 on, hard-coded, so a 3-epoch run (``COURSE_FAST=1``) would never
leave the first phase. :func:`three_phase_decay` keeps the proportions for any number of epochs
(``three_phase_decay(12)``: boundaries 3 and 7; ``three_phase_decay(3)``: 1 and 2), for
``keras.callbacks.LearningRateScheduler``. Importing this module never imports TensorFlow or Keras.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["StepDecay", "three_phase_decay", "TUTORIAL_EPOCHS", "TUTORIAL_RATES"]

#: The tutorial's number of epochs and its three learning rates.
TUTORIAL_EPOCHS = 12
TUTORIAL_RATES: tuple[float, float, float] = (1e-3, 1e-4, 1e-5)
_TUTORIAL_BOUNDARIES = (3, 7)


@dataclass(frozen=True)
class StepDecay:
    """A piecewise-constant learning rate per epoch, usable as a ``LearningRateScheduler`` schedule.

    ``rates[i]`` applies from epoch ``boundaries[i - 1]`` (0 for ``i = 0``) up to, not including,
    epoch ``boundaries[i]``; the last rate applies to every later epoch. Epochs count from 0, as
    Keras counts them in callbacks.
    """

    boundaries: tuple[int, ...]
    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.rates) != len(self.boundaries) + 1:
            raise ValueError(
                f"StepDecay needs one rate more than boundaries: got {len(self.rates)} rates "
                f"for {len(self.boundaries)} boundaries."
            )
        if any(b <= a for a, b in zip(self.boundaries, self.boundaries[1:])) or (
            self.boundaries and self.boundaries[0] < 1
        ):
            raise ValueError(
                f"StepDecay boundaries must be strictly increasing epochs >= 1, got {self.boundaries}."
            )
        if any(rate <= 0 for rate in self.rates):
            raise ValueError(f"StepDecay rates must be positive, got {self.rates}.")

    def __call__(self, epoch: int, lr: Optional[float] = None) -> float:
        """The learning rate for ``epoch`` (0-based); ``lr``, the current rate, is ignored.

        Keras's ``LearningRateScheduler`` calls a schedule with ``(epoch, lr)``.
        """
        for boundary, rate in zip(self.boundaries, self.rates):
            if epoch < boundary:
                return float(rate)
        return float(self.rates[-1])

    def rates_for(self, epochs: int) -> list[float]:
        """The rate of every epoch of a run of ``epochs`` epochs, in order."""
        return [self(epoch) for epoch in range(epochs)]


def three_phase_decay(epochs: int = TUTORIAL_EPOCHS, rates: Sequence[float] = TUTORIAL_RATES) -> StepDecay:
    """The tutorial's three-phase decay, with its boundaries scaled to ``epochs``.

    The tutorial switches after 3/12 and 7/12 of its 12 epochs; here the boundaries are those
    fractions of ``epochs``, rounded, and kept at least one epoch apart, so every phase lasts at
    least one epoch whenever ``epochs >= 3``. ``three_phase_decay(12)`` is exactly the tutorial's
    ``decay`` function.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"three_phase_decay needs a whole number of epochs >= 1, not {epochs!r}.")
    if len(rates) != 3:
        raise ValueError(f"three_phase_decay needs exactly three rates, got {len(rates)}.")
    first = max(1, round(epochs * _TUTORIAL_BOUNDARIES[0] / TUTORIAL_EPOCHS))
    second = max(first + 1, round(epochs * _TUTORIAL_BOUNDARIES[1] / TUTORIAL_EPOCHS))
    return StepDecay((first, second), tuple(float(r) for r in rates))
