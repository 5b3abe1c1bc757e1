"""COURSE_* settings: valid values are accepted, every mistake gets a clear message, and the
environment is read in one place only, then kept."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from course_utils import config
from course_utils.config import (
    STRATEGY_KINDS,
    fast_or,
    parse_flag,
    parse_kind,
    parse_replicas,
    read,
    settings,
)
from course_utils.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


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
    s = read(env)
    assert (s.strategy, s.replicas, s.fast, s.offline) == ("mirrored", 2, True, False)
    with pytest.raises(ConfigError):
        read({"COURSE_STRATEGY": "gpu"})


def test_the_settings_are_read_once_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """load() (the set-up cell) reads the environment; settings() gives the kept value after that,
    whatever the environment says later, until the set-up cell runs again."""
    monkeypatch.setattr(config, "_kept", None)
    monkeypatch.setenv("COURSE_REPLICAS", "3")
    first = settings()
    assert first.replicas == 3 and settings() is first
    monkeypatch.setenv("COURSE_REPLICAS", "5")
    assert settings() is first and settings().replicas == 3
    assert config.load().replicas == 5 and settings().replicas == 5
    assert config.load({"COURSE_FAST": "1"}) == read({"COURSE_FAST": "1"}) == settings()


def test_only_config_reads_the_course_variables() -> None:
    """No other module reads a COURSE_* setting from the environment, and only the set-up call
    (runtime.setup) makes config read it again (config.load)."""
    reads = re.compile(r"(environ|getenv)\W+(get\()?\W*COURSE_(STRATEGY|REPLICAS|FAST|OFFLINE)")
    offenders = []
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name == "course_utils/config.py":
            continue
        text = path.read_text()
        offenders += [f"{name} reads {m.group(0)!r}" for m in reads.finditer(text)]
        for node in ast.walk(ast.parse(text)):
            takes_load = isinstance(node, ast.ImportFrom) and (node.module or "").endswith("config")
            if (takes_load and "load" in {a.name for a in node.names}) or (
                isinstance(node, ast.Attribute)
                and node.attr == "load"
                and getattr(node.value, "id", "") == "config"
            ):
                if name != "course_utils/runtime.py":
                    offenders.append(f"{name}:{node.lineno} re-reads the settings (config.load)")
    assert offenders == []


def test_fast_or(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_kept", read({"COURSE_FAST": "1"}))
    assert fast_or(10, 2) == 2
    monkeypatch.setattr(config, "_kept", read({"COURSE_FAST": "0"}))
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
