"""The audit of answers (course_tools.grading.audit): every trick is found, no honest answer is."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from course_tools import authoring
from course_tools.grading import audit

ROOT = Path(__file__).resolve().parents[1]

TRICKS = {
    "patch a check": (
        "import course_utils.exercises.x as ex\nex.check_a = print",
        "imports `course_utils.exercises.x`",
    ),
    "patch a check, from": (
        "from course_utils.exercises import x\nx.check_a = print",
        "assigns to `x.check_a`",
    ),
    "patch numpy": (
        "np.allclose = lambda *a, **k: True",
        "assigns to `np.allclose`, an attribute of a module",
    ),
    "patch tf.debugging": ("tf.debugging.assert_near = print", "assigns to `tf.debugging.assert_near`"),
    "delete a function": ("del np.testing.assert_allclose", "deletes `np.testing.assert_allclose`"),
    "swap stdout": ("import sys\nsys.stdout = open('/dev/null', 'w')", "assigns to `sys.stdout`"),
    "setattr": ("setattr(np, 'allclose', print)", "calls `setattr()`"),
    "exec": ("exec('np.allclose = print')", "calls `exec()`"),
    "import by name": ("m = __import__('course_utils')", "calls `__import__()`"),
    "importlib": ("import importlib", "imports `importlib`"),
    "sys.modules": ("import sys\nm = sys.modules['numpy']", "reaches `sys.modules`"),
    "globals": ("globals()['check'] = print", "calls `globals()`"),
    "function insides": ("def f(): pass\nf.__code__ = print.__code__", "reaches `__code__`"),
    "reference by attribute": (
        "f = course_utils.lessons.reference.run_train_step",
        "reaches `course_utils.lessons.reference`",
    ),
    "reference step": (
        "from course_utils.models import tutorial_train_step",
        "imports `tutorial_train_step`",
    ),
    "the grader": (
        "from course_tools.grading import verdict",
        "imports `course_tools.grading`, where the course's checks and answers live",
    ),
    "ctypes": ("import ctypes", "imports `ctypes`"),
    "mock": ("from unittest import mock", "imports `unittest`"),
    # a harness runs in the kernel: replacing it would fake the numbers the judge receives
    "replace a harness": (
        "import course_utils.exercises as e\ne.HARNESSES['loss_scaling_pitfalls.moments_on_replicas'] = f",
        "imports `course_utils.exercises`",
    ),
    "replace a harness, from": (
        "from course_utils.exercises import loss_scaling_pitfalls as m\nm.moments_on_replicas = f",
        "assigns to `m.moments_on_replicas`",
    ),
    # the registry reached without naming the module: a name put together at run time
    "harness by a computed name": (
        "import course_utils as c\nm = getattr(c, 'exer' + 'cises')\nm.HARNESSES['a.b'] = f",
        "calls `getattr()` with a name it computes",
    ),
    "harness registry by name": ("reg = m.HARNESSES", "uses `HARNESSES`, the course's own implementation"),
    "attrgetter": ("from operator import attrgetter\nf = attrgetter(name)(obj)", "calls `attrgetter()`"),
    # names written out are read as an attribute would be; getattr handed around is a finding
    "nested getattr": (
        'm = getattr(getattr(course_utils, "exercises"), "HARNESSES")',
        "reaches `exercises` by name, where the course's checks and answers live",
    ),
    "getattr reduced": (
        'import functools\nm = functools.reduce(getattr, ["exer" + "cises", "HARNESSES"], course_utils)',
        "uses `getattr` as a value",
    ),
    "operator.attrgetter": (
        'import operator\nm = operator.attrgetter("exercises.HARN" + "ESSES")(course_utils)',
        "calls `attrgetter()` with a name it computes",
    ),
    "attrgetter, dotted": (
        'import operator\nm = operator.attrgetter("exercises.HARNESSES")(course_utils)',
        "reaches `HARNESSES` by name, the course's own implementation",
    ),
    "getattr aliased": ('g = getattr\nm = g(course_utils, "exer" + "cises")', "uses `getattr` as a value"),
    "a dunder by name": ('g = getattr(f, "__globals__")', "reaches `__globals__` by name"),
    "IPython hooks": ("get_ipython().events.register('post_run_cell', print)", "calls `get_ipython()`"),
}


@pytest.mark.parametrize("name", list(TRICKS))
def test_each_trick_is_found(name: str) -> None:
    source, expected = TRICKS[name]
    found = [str(f) for f in audit.audit("ex", source)]
    assert any(expected in f for f in found), found


def test_a_finding_names_its_line_and_exercise() -> None:
    (finding,) = audit.audit("uneven_mean", "def f():\n    return 1\n\nnp.isclose = f")
    assert (finding.exercise, finding.line, str(finding)) == (
        "uneven_mean",
        4,
        "line 4: assigns to `np.isclose`, an attribute of a module",
    )


def test_module_names_come_from_the_notebooks_imports() -> None:
    names = audit.module_names(["import numpy.linalg as la\nfrom course_utils import strategies"])
    assert {"la", "strategies", "tf"} <= names
    assert audit.audit("ex", "la.norm = abs", names) and not audit.audit("ex", "la.norm = abs")


def test_what_honest_code_does_is_not_found() -> None:
    honest = """\
import numpy as np
import tensorflow as tf

model = build()
model.trainable = False
optimizer.learning_rate = 0.1
config = {"a": 1}
config["b"] = 2
settings.replicas = 2  # an object, not a module


def loss(labels, logits, global_batch):
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)


print(f"passed {np.allclose(1, 1)}")
rate = getattr(optimizer, "learning_rate", 0.01)
if hasattr(model, "optimizer"):
    steps = getattr(model.optimizer, "iterations")
"""
    assert audit.audit("ex", honest) == []


def test_magics_a_student_may_use_and_those_that_are_found() -> None:
    assert audit.audit("ex", "%time x = sum(range(10))\n%matplotlib inline") == []
    assert audit.audit("ex", "%%writefile train.py\nimport numpy as np\nprint(np.ones(2))\n") == []
    (inside,) = audit.audit("ex", "%%writefile train.py\nimport ctypes\n")
    assert inside.what == "imports `ctypes`"
    assert [f.what for f in audit.audit("ex", "%run other.py")] == ["calls `get_ipython()`"]


def test_a_syntax_error_is_left_to_the_run() -> None:
    assert audit.audit("ex", "def f(:\n") == []


def test_no_answer_in_the_courses_masters_is_flagged() -> None:
    """The honest answers of every master (solution cells as written) have no finding."""
    found = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        modules = audit.module_names(c.source for c in nb.cells if c.cell_type == "code")
        for cell in nb.cells:
            if authoring.role(cell) == "solution":
                ident = authoring.exercise_id(cell)
                found += [f"{path.name} {ident}: {f}" for f in audit.audit(ident, cell.source, modules)]
    assert found == []
