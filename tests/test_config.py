"""COURSE_* settings: valid values are accepted, every mistake gets a clear message."""

from __future__ import annotations

import pytest

from course_utils.config import STRATEGY_KINDS, fast_or, parse_flag, parse_kind, parse_replicas, settings
from course_utils.errors import ConfigError


@pytest.mark.parametrize("kind", STRATEGY_KINDS)
def test_every_kind_is_accepted(kind: str) -> None:
    assert parse_kind(kind) == kind
    assert parse_kind(kind.upper().replace("_", "-")) == kind


def test_empty_kind_means_auto() -> None:
    assert parse_kind(None) == "auto"
    assert parse_kind("  ") == "auto"


def test_unknown_kind_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        parse_kind("mirorred")
    message = str(info.value)
    assert "'mirorred'" in message
    for kind in STRATEGY_KINDS:
        assert kind in message


@pytest.mark.parametrize("value", ["0", "-2", 0, -1])
def test_replicas_below_one_are_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="at least 1 replica"):
        parse_replicas(value)


@pytest.mark.parametrize("value", ["two", "2.5", "1e3", True])
def test_replicas_that_are_not_whole_numbers_are_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="COURSE_REPLICAS|whole number"):
        parse_replicas(value)


def test_replicas_parse() -> None:
    assert parse_replicas(" 4 ") == 4
    assert parse_replicas(None) is None
    assert parse_replicas("") is None


def test_flags() -> None:
    assert parse_flag("1", "COURSE_FAST") is True
    assert parse_flag("", "COURSE_FAST") is False
    with pytest.raises(ConfigError, match="COURSE_FAST"):
        parse_flag("maybe", "COURSE_FAST")


def test_settings_read_the_environment() -> None:
    env = {"COURSE_STRATEGY": "Mirrored", "COURSE_REPLICAS": "2", "COURSE_FAST": "1"}
    s = settings(env)
    assert (s.strategy, s.replicas, s.fast, s.offline) == ("mirrored", 2, True, False)
    with pytest.raises(ConfigError):
        settings({"COURSE_STRATEGY": "gpu"})


def test_fast_or(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSE_FAST", "1")
    assert fast_or(10, 2) == 2
    monkeypatch.setenv("COURSE_FAST", "0")
    assert fast_or(10, 2) == 10


def test_import_starts_nothing() -> None:
    """Importing course_utils imports no TensorFlow and opens no socket (checked in a fresh process)."""
    from course_utils.processes import run_python

    result = run_python(
        """
        import socket, sys
        def refuse(*a, **k):
            raise AssertionError("network touched on import")
        socket.socket.connect = refuse
        import course_utils, course_utils.config, course_utils.checks
        assert "tensorflow" not in sys.modules, "tensorflow imported on import"
        assert "keras" not in sys.modules
        print("clean")
        """
    )
    assert result.ok, result.stderr
    assert result.stdout.strip() == "clean"
