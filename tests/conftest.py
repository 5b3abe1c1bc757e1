"""Shared set-up of the unit tests.

TensorFlow fixes its devices when it starts, so this process splits its CPU into two virtual
devices once, at the start of the session: every test can then build a 2-replica
``MirroredStrategy`` (tests that need another count, or a TensorFlow that has not started yet,
run in a fresh process with ``course_utils.run_python``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_REPLICAS = 2

os.environ.setdefault("COURSE_OFFLINE", "1")
os.environ.setdefault("COURSE_FAST", "1")
os.environ.setdefault("COURSE_STRICT_PINS", "1")  # as the Makefile's TEST_ENV: 02's matrix raises on the pins


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--student-copy",
        action="append",
        default=[],
        metavar="NN",
        help="also run the student copies notebooks/NN*.ipynb with every exercise blank "
        "(tests/test_exercises.py; make test-colab-tpu names 11)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if importlib.util.find_spec("tensorflow") is None:
        return  # a stack without TensorFlow (Colab's TPU runtime, make test-colab-tpu): nothing to split
    from course_utils.devices import use_virtual_cpus
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    use_virtual_cpus(TEST_REPLICAS)
    tf.config.list_logical_devices("CPU")  # initialise now, with 2 CPUs


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def two_replicas():
    """The course's MirroredStrategy over the session's two virtual CPUs (TensorFlow's own
    all-reduce, so the tests meet what a student's code meets)."""
    from course_utils.strategies import mirrored_cpus

    return mirrored_cpus(2)
