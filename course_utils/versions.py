"""Every notebook (the set-up report): the version policy, which TensorFlow and Keras the course is tested on.

The course is tested from the **oldest** release Colab's CPU and GPU runtimes ship (TensorFlow 2.20,
Keras 3.13) to the **newest**, which ``requirements.txt`` pins (TensorFlow 2.21, Keras 3.15; ``make
test`` runs every notebook on it). Inside that range nothing is said; outside it, :func:`judge`
gives one line on what may break (printed once by ``course_utils.setup()``, and in the doctor's
``versions`` row). Below TensorFlow 2.16, or with ``tf-keras`` as ``tf.keras``, nothing works. When
Colab or the pins move, edit :data:`OLDEST` or :data:`NEWEST` here, and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

#: ``(major, minor)`` of a release.
Release = tuple[int, int]

#: The oldest stack the course is tested on: Colab's CPU and GPU runtimes (August 2026).
OLDEST: dict[str, Release] = {"tensorflow": (2, 20), "keras": (3, 13)}
#: The newest stack the course is tested on: the pins of ``requirements.txt``.
NEWEST: dict[str, Release] = {"tensorflow": (2, 21), "keras": (3, 15)}
#: Below this TensorFlow the course does not run (Keras 3 became ``tf.keras`` in 2.16).
MINIMUM_TENSORFLOW: Release = (2, 16)

#: The three verdicts of :func:`judge`.
TESTED, OUTSIDE, UNSUPPORTED = "tested", "outside", "unsupported"


def release(version: str) -> Release:
    """``"2.21.0"`` -> ``(2, 21)``; ``"2.22.0rc1"`` -> ``(2, 22)``; unreadable -> ``(0, 0)``."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _text(r: Release) -> str:
    return f"{r[0]}.{r[1]}"


def _span(package: str) -> str:
    low, high = OLDEST[package], NEWEST[package]
    return _text(low) if low == high else f"{_text(low)}-{_text(high)}"


def tested_range() -> str:
    """``"TensorFlow 2.20-2.21 with Keras 3.13-3.15"``."""
    return f"TensorFlow {_span('tensorflow')} with Keras {_span('keras')}"


@dataclass(frozen=True)
class Verdict:
    """How a runtime's versions compare with the tested range.

    ``status`` is ``tested`` (inside the range), ``outside`` (works in the main, see ``message``)
    or ``unsupported`` (the course does not run); ``message`` is one line.
    """

    status: str
    message: str

    @property
    def tested(self) -> bool:
        return self.status == TESTED

    @property
    def supported(self) -> bool:
        return self.status != UNSUPPORTED


def judge(tf_version: str, keras_version: str, *, legacy_keras: bool = False) -> Verdict:
    """Compare TensorFlow ``tf_version`` and Keras ``keras_version`` with the tested range.

    ``legacy_keras=True`` means ``tf.keras`` is tf-keras (``TF_USE_LEGACY_KERAS=1``).
    """
    found = f"TensorFlow {tf_version} with Keras {keras_version}"
    tf_release, keras_release = release(tf_version), release(keras_version)
    if legacy_keras or keras_release[0] != 3:
        what = "tf.keras is tf-keras (TF_USE_LEGACY_KERAS=1)" if legacy_keras else f"Keras {keras_version}"
        return Verdict(
            UNSUPPORTED,
            f"{what} is not Keras 3: this course teaches Keras 3 (unset TF_USE_LEGACY_KERAS, "
            "or install TensorFlow 2.16 or newer).",
        )
    if tf_release < MINIMUM_TENSORFLOW:
        return Verdict(
            UNSUPPORTED,
            f"TensorFlow {tf_version} is older than {_text(MINIMUM_TENSORFLOW)}, the oldest this course "
            f"supports; several cells will fail. Install tensorflow>={_text(MINIMUM_TENSORFLOW)}.",
        )
    inside = all(
        OLDEST[p] <= r <= NEWEST[p] for p, r in (("tensorflow", tf_release), ("keras", keras_release))
    )
    if inside:
        return Verdict(TESTED, f"{found} matches the tested range ({tested_range()}).")
    newer = tf_release > NEWEST["tensorflow"] or keras_release > NEWEST["keras"]
    if newer:
        side = "newer than"
        risk = "a bug the notebooks demonstrate may be fixed, so their output differs, and an API they use may be gone"
    else:
        side = "older than"
        risk = "most cells work; a cell that uses an API this release lacks fails"
    return Verdict(
        OUTSIDE, f"Note: {found} is {side} the releases this course is tested on ({tested_range()}): {risk}."
    )


def check_versions(tf_version: str, keras_version: str) -> Optional[str]:
    """The one line to print for these versions, or None inside the tested range."""
    verdict = judge(tf_version, keras_version)
    return None if verdict.tested else verdict.message


def legacy_keras() -> bool:
    """True when ``TF_USE_LEGACY_KERAS`` makes ``tf.keras`` tf-keras (Keras 2), as TensorFlow reads it."""
    import os

    return os.environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True")


def installed() -> dict[str, Optional[str]]:
    """The installed TensorFlow and Keras versions, read from the package metadata without
    importing them (``None`` when not installed). Any TensorFlow distribution counts
    (``tensorflow``, ``tensorflow-cpu``, ``tensorflow-tpu``, ``tf-nightly``...)."""
    from importlib import metadata

    def first(*names: str) -> Optional[str]:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    return {
        "tensorflow": first(
            "tensorflow",
            "tensorflow-cpu",
            "tensorflow-gpu",
            "tensorflow-tpu",
            "tensorflow-macos",
            "tf-nightly",
        ),
        "keras": first("keras", "keras-nightly"),
    }
