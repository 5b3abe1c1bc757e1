"""The version policy (course_utils.versions) and Python 3.13: the tested range is written once and
agrees with the pins; setup() says one line outside the range and nothing inside it; course_utils
uses no standard-library module that Python 3.12 or 3.13 removed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from course_utils import runtime, versions
from course_utils.versions import NEWEST, OLDEST, judge, release

ROOT = Path(__file__).resolve().parents[1]

#: Standard-library modules removed in Python 3.12 (distutils, imp, asynchat, asyncore, smtpd) and
#: 3.13 (PEP 594's "dead batteries", and lib2to3).
REMOVED_MODULES = {
    "distutils",
    "imp",
    "asynchat",
    "asyncore",
    "smtpd",
    "aifc",
    "audioop",
    "cgi",
    "cgitb",
    "chunk",
    "crypt",
    "imghdr",
    "mailcap",
    "msilib",
    "nis",
    "nntplib",
    "ossaudiodev",
    "pipes",
    "sndhdr",
    "spwd",
    "sunau",
    "telnetlib",
    "uu",
    "xdrlib",
    "lib2to3",
}


def test_the_tested_range_is_colabs_stack_to_the_pins() -> None:
    pins = dict(re.findall(r"^(tensorflow|keras)==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M))
    assert release(pins["tensorflow"]) == NEWEST["tensorflow"]
    assert release(pins["keras"]) == NEWEST["keras"]
    assert OLDEST == {"tensorflow": (2, 20), "keras": (3, 13)}  # Colab's CPU and GPU runtimes
    assert versions.tested_range() == "TensorFlow 2.20-2.21 with Keras 3.13-3.15"


@pytest.mark.parametrize(
    "tf_version, keras_version", [("2.21.0", "3.15.1"), ("2.20.0", "3.13.2"), ("2.21.1", "3.14.0")]
)
def test_inside_the_range_matches_and_setup_says_nothing(tf_version: str, keras_version: str) -> None:
    verdict = judge(tf_version, keras_version)
    assert verdict.tested and verdict.supported
    assert verdict.message == (
        f"TensorFlow {tf_version} with Keras {keras_version} matches the tested range "
        "(TensorFlow 2.20-2.21 with Keras 3.13-3.15)."
    )
    assert versions.check_versions(tf_version, keras_version) is None


@pytest.mark.parametrize(
    "tf_version, keras_version, words",
    [
        ("2.18.1", "3.8.0", "older than the releases this course is tested on"),
        ("2.21.0", "3.12.0", "older than the releases this course is tested on"),
        ("2.22.0", "3.16.0", "newer than the releases this course is tested on"),
        ("2.22.0rc1", "3.15.1", "newer than the releases this course is tested on"),
    ],
)
def test_outside_the_range_one_line_says_what_may_break(tf_version, keras_version, words) -> None:
    verdict = judge(tf_version, keras_version)
    assert verdict.status == versions.OUTSIDE and verdict.supported
    assert words in verdict.message and "\n" not in verdict.message
    assert verdict.message.startswith(f"Note: TensorFlow {tf_version} with Keras {keras_version} is ")
    assert ("may be fixed" in verdict.message) == ("newer" in words)


def test_unsupported_stacks() -> None:
    assert "older than 2.16" in judge("2.15.0", "3.0.0").message
    assert "not Keras 3" in judge("2.21.0", "2.21.0").message
    legacy = judge("2.21.0", "3.15.1", legacy_keras=True)
    assert not legacy.supported and "TF_USE_LEGACY_KERAS=1" in legacy.message
    assert release("garbage") == (0, 0)


def test_setup_prints_the_line_once_and_only_outside_the_range(monkeypatch, capsys) -> None:
    monkeypatch.setattr(runtime, "_warned_version", False)
    runtime.report()
    assert capsys.readouterr().out.rstrip().endswith("-" * 72)  # the pinned stack: nothing after the table
    monkeypatch.setattr(runtime, "judge", lambda *a, **k: judge("2.18.1", "3.8.0"))
    runtime.report()
    runtime.report()
    out = capsys.readouterr().out
    assert out.count("Note: TensorFlow 2.18.1 with Keras 3.8.0 is older than") == 1


def test_course_utils_imports_no_module_that_python_3_13_removed() -> None:
    found = []
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in REMOVED_MODULES]
    # Dynamic imports too (importlib.import_module("imp"), __import__("cgi")).
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        for match in re.finditer(r"""(?:import_module|__import__)\(\s*["'](\w+)""", path.read_text()):
            if match.group(1) in REMOVED_MODULES:
                found.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert found == [], "removed in Python 3.12/3.13: " + ", ".join(found)
