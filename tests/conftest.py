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


#: Files whose tests each run notebooks in kernels of their own and share nothing in this process:
#: under ``--dist loadgroup`` (``make unit``) their tests are spread over the workers by notebook
#: number, in ``SPREAD[file]`` groups (notebooks 03 and 07, the slowest, in different groups).
#: Every other file stays whole on one worker, so that its module-scoped fixtures (the graded
#: class) are built once.
SPREAD = {"test_exercises.py": 3, "test_presenting.py": 2}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import re

    for item in items:
        parts = SPREAD.get(item.path.name)
        number = re.search(r"\[(\d\d)", item.nodeid)
        group = item.path.name
        if parts and number:
            group += f"-{int(number.group(1)) % parts}"
        item.add_marker(pytest.mark.xdist_group(group))
