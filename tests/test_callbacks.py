"""course_utils.lessons.callbacks: the tutorial's three-phase decay, for any number of epochs."""

from __future__ import annotations

import pytest

from course_utils.lessons.callbacks import TUTORIAL_RATES, StepDecay, three_phase_decay


def tutorial_decay(epoch: int) -> float:
    """The `decay` function of the Distributed training with Keras tutorial, verbatim."""
    if epoch < 3:
        return 1e-3
    elif epoch >= 3 and epoch < 7:
        return 1e-4
    else:
        return 1e-5


def test_twelve_epochs_is_the_tutorial_schedule():
    schedule = three_phase_decay(12)
    assert schedule.boundaries == (3, 7)
    assert schedule.rates_for(12) == [tutorial_decay(epoch) for epoch in range(12)]
    assert schedule(30) == 1e-5


@pytest.mark.parametrize(
    "epochs, boundaries",
    [(3, (1, 2)), (4, (1, 2)), (6, (2, 4)), (12, (3, 7)), (24, (6, 14)), (1, (1, 2)), (2, (1, 2))],
)
def test_boundaries_scale_with_epochs(epochs, boundaries):
    assert three_phase_decay(epochs).boundaries == boundaries


@pytest.mark.parametrize("epochs", range(3, 40))
def test_every_phase_is_used_from_three_epochs(epochs):
    rates = three_phase_decay(epochs).rates_for(epochs)
    assert set(rates) == set(TUTORIAL_RATES)
    assert rates == sorted(rates, reverse=True)
    assert rates[0] == 1e-3 and rates[-1] == 1e-5


def test_keras_calls_it_with_the_current_rate():
    schedule = three_phase_decay(3)
    assert schedule(0, 0.5) == 1e-3
    assert schedule(2, 1e-4) == 1e-5
    assert isinstance(schedule(1), float)


def test_custom_rates():
    assert three_phase_decay(3, rates=(0.1, 0.01, 0.001)).rates_for(3) == [0.1, 0.01, 0.001]


@pytest.mark.parametrize("epochs", [0, -1, 2.5, True, "12"])
def test_bad_epochs(epochs):
    with pytest.raises(ValueError, match="whole number of epochs"):
        three_phase_decay(epochs)


def test_bad_step_decays():
    with pytest.raises(ValueError, match="one rate more"):
        StepDecay((3,), (1e-3,))
    with pytest.raises(ValueError, match="strictly increasing"):
        StepDecay((3, 3), (1e-3, 1e-4, 1e-5))
    with pytest.raises(ValueError, match="strictly increasing"):
        StepDecay((0, 3), (1e-3, 1e-4, 1e-5))
    with pytest.raises(ValueError, match="positive"):
        StepDecay((3,), (1e-3, 0.0))
    with pytest.raises(ValueError, match="exactly three rates"):
        three_phase_decay(12, rates=(1e-3, 1e-4))


def test_works_with_the_keras_scheduler(two_replicas):
    import keras
    import numpy as np

    with two_replicas.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    history = model.fit(
        np.zeros((8, 2), "float32"),
        np.zeros((8, 1), "float32"),
        batch_size=4,
        epochs=3,
        verbose=0,
        callbacks=[keras.callbacks.LearningRateScheduler(three_phase_decay(3))],
    )
    assert np.allclose(history.history["learning_rate"], [1e-3, 1e-4, 1e-5])


def test_import_does_not_start_tensorflow():
    from course_utils.processes import run_python

    result = run_python(
        "import sys, course_utils.lessons.callbacks as c; c.three_phase_decay(3)\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    assert result.ok, result.stderr
    assert result.stdout.strip() == "False False"
