"""Every notebook: the ``COURSE_*`` settings, read once by the set-up cell and kept.

| variable          | values                                   | meaning                                  |
|-------------------|------------------------------------------|------------------------------------------|
| ``COURSE_STRATEGY`` | ``auto`` (default) or a kind of :data:`STRATEGY_KINDS` | what :func:`course_utils.get_strategy` returns |
| ``COURSE_REPLICAS`` | integer >= 1                             | virtual CPUs to simulate without an accelerator |
| ``COURSE_FAST``     | ``1``                                    | small data and few steps (CI, live demos) |
| ``COURSE_OFFLINE``  | ``1``                                    | never touch the network                   |

The environment is read in one place, :func:`load`, which :func:`course_utils.setup` calls (so
re-running the set-up cell reads it again); every other module asks :func:`settings` for the kept
value, or is handed it. Reading the settings never imports TensorFlow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, TypeVar

from .errors import ConfigError

#: Every value ``COURSE_STRATEGY`` (or ``get_strategy(kind=...)``) accepts.
STRATEGY_KINDS: tuple[str, ...] = (
    "auto",
    "default",
    "one_device",
    "mirrored",
    "central_storage",
    "multi_worker",
    "tpu",
)

#: Replicas on a CPU when ``COURSE_REPLICAS`` is unset: two, so that a student sees distribution
#: by default (``auto``, ``mirrored`` and ``central_storage``). ``COURSE_REPLICAS=1`` gives one device.
DEFAULT_CPU_REPLICAS = 2

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}

T = TypeVar("T")


def parse_kind(value: Optional[str]) -> str:
    """Normalise a strategy kind (``"Mirrored"`` -> ``"mirrored"``) or raise :class:`ConfigError`."""
    if value is None or value.strip() == "":
        return "auto"
    kind = value.strip().lower().replace("-", "_")
    if kind not in STRATEGY_KINDS:
        raise ConfigError(f"Unknown strategy {value!r}. Choose one of: {', '.join(STRATEGY_KINDS)}.")
    return kind


def parse_replicas(value: object, source: str = "COURSE_REPLICAS") -> Optional[int]:
    """Parse a replica count: ``None``/empty means "not set"; anything but an integer >= 1 raises."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{source} must be a whole number of replicas >= 1, not {value!r}.")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(
            f"{source}={value!r} is not a number. Set it to a whole number of replicas >= 1, "
            "for example COURSE_REPLICAS=2."
        ) from None
    if number < 1:
        raise ConfigError(
            f"{source}={value!r}: a strategy needs at least 1 replica. "
            "Use 1 for a single device or 2 or more to see distribution."
        )
    return number


def parse_flag(value: Optional[str], name: str) -> bool:
    """Parse an on/off variable such as ``COURSE_FAST=1``."""
    text = (value or "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r}: use 1 to turn it on or 0 (or nothing) to turn it off.")


@dataclass(frozen=True)
class Settings:
    """The course settings in force, read from the environment by :func:`settings`."""

    strategy: str = "auto"
    replicas: Optional[int] = None
    fast: bool = False
    offline: bool = False

    @property
    def cpu_replicas(self) -> int:
        """Replicas on a CPU with no accelerator: ``COURSE_REPLICAS``, else 2."""
        return self.replicas if self.replicas is not None else DEFAULT_CPU_REPLICAS

    def as_dict(self) -> dict[str, object]:
        return {
            "COURSE_STRATEGY": self.strategy,
            "COURSE_REPLICAS": self.replicas if self.replicas is not None else "(not set)",
            "COURSE_FAST": int(self.fast),
            "COURSE_OFFLINE": int(self.offline),
        }


def read(environ: Mapping[str, str]) -> Settings:
    """Parse and validate the ``COURSE_*`` variables of ``environ``; keeps nothing."""
    return Settings(
        strategy=parse_kind(environ.get("COURSE_STRATEGY")),
        replicas=parse_replicas(environ.get("COURSE_REPLICAS")),
        fast=parse_flag(environ.get("COURSE_FAST"), "COURSE_FAST"),
        offline=parse_flag(environ.get("COURSE_OFFLINE"), "COURSE_OFFLINE"),
    )


#: The settings in force: what :func:`load` read last (``None`` until then).
_kept: Optional[Settings] = None


def load(environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Read the settings (from ``os.environ`` unless given), keep them and return them.

    :func:`course_utils.setup` calls it: the one place the course reads its environment.
    """
    global _kept
    _kept = read(os.environ if environ is None else environ)
    return _kept


def settings() -> Settings:
    """The settings in force: those the set-up cell read (a program that never called
    :func:`course_utils.setup` reads them here, once)."""
    return _kept if _kept is not None else load()


def fast_or(full: T, fast: T) -> T:
    """Return ``fast`` when ``COURSE_FAST=1`` is set, else ``full``.

    Notebooks use it for sizes and epochs: ``epochs = fast_or(10, 2)``.
    """
    return fast if settings().fast else full
