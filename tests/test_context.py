"""Which cells a check depends on (course_tools.grading.context): one rule per test."""

from __future__ import annotations

import pytest

from course_tools.grading.context import context_cells, definitions


def kept(*cells: str, needs: tuple[str, ...] = ()) -> list[int]:
    """The cells kept when the last one must run."""
    return sorted(context_cells(list(cells), [len(cells) - 1], needs).kept)


def test_a_cell_defining_a_name_the_check_reads_is_kept_and_a_demo_is_not() -> None:
    assert kept("import numpy as np", "data = np.ones(3)", "print(data, np.pi)  # a demo", "check(data)") == [
        0,
        1,
        3,
    ]


def test_names_are_followed_back_through_the_cells_that_are_kept() -> None:
    assert kept("a = 1", "b = a + 1", "c = 5", "check(b)") == [0, 1, 3]


def test_a_name_bound_before_it_is_read_in_the_same_cell_needs_no_earlier_cell() -> None:
    assert kept("x = 0", "x = 1\ncheck(x)") == [1]
    assert kept("x = 0", "x = x + 1\ncheck(x)") == [0, 1]
    assert kept("n = 0", "for n in range(3):\n    print(n)") == [1]


def test_a_function_body_reads_its_globals_whenever_it_runs() -> None:
    # `x` is bound later in the cell, but f may run before that: the earlier x is kept.
    assert kept("x = 0", "def f():\n    return x\nx = 1\ncheck(f)") == [0, 1]
    assert kept("rows = [1]", "total = [r * 2 for r in rows]\ncheck(total)") == [0, 1]


@pytest.mark.parametrize(
    "change",
    [
        "model.fit(data)",  # a method call
        "model.trainable = False",  # a store into it
        "weights[0] = 1.0",  # a store into an item
        "train(model)",  # handed to a function
        "run_steps()",  # a notebook function that reads it
    ],
)
def test_a_cell_that_may_change_an_object_the_check_reads_is_kept(change: str) -> None:
    cells = [
        "model = make()\nweights = [0.0]",
        "def run_steps():\n    model.step()",
        change,
        "check(model, weights)",
    ]
    assert 2 in kept(*cells)


def test_reading_an_object_does_not_keep_a_cell() -> None:
    cells = [
        "model = make()",
        "print(model)\nprint(len(model.layers))",
        "for k, v in config.items(): pass",
        "check(model)",
    ]
    assert kept(*cells) == [0, 3]


@pytest.mark.parametrize(
    "setting",
    [
        "import course_utils\ncourse_utils.use_virtual_cpus(2)",
        "import tensorflow as tf\ntf.config.set_visible_devices([], 'GPU')",
        "import keras\nkeras.utils.set_random_seed(0)",
        "import os\nos.environ['COURSE_REPLICAS'] = '2'",
        "%env COURSE_REPLICAS=2",
        "%%writefile train.py\nprint('hello')",
    ],
)
def test_a_cell_that_changes_the_process_is_kept(setting: str) -> None:
    assert kept(setting, "check()") == [0, 1]


def test_an_object_method_named_like_a_setting_is_not_a_setting() -> None:
    assert kept(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.set_title('x')", "check()"
    ) == [1]


def test_a_cell_that_does_not_parse_is_kept_to_fail_as_it_did_for_the_student() -> None:
    assert kept("def broken(:", "check()") == [0, 1]


def test_what_the_caller_needs_keeps_the_cells_that_define_it() -> None:
    assert kept("strategy = make()", "other = 1", "check()", needs=("strategy",)) == [0, 2]


def test_a_cell_tagged_to_skip_is_never_kept_and_what_only_it_needs_goes_too() -> None:
    """A cell that only shows something (a run the judge never reads) is skipped though it passes a
    name a check reads to a function; the cells only it needed are then left out as well."""
    cells = ["program = 'train.py'", "where = 'runs'", "run_workers(program, where)", "serve(program)"]
    assert sorted(context_cells(cells, [3]).kept) == [0, 1, 2, 3]  # passing may change it: kept
    assert sorted(context_cells(cells, [3], skip=[2]).kept) == [0, 3]
    assert sorted(context_cells(cells, [2, 3], skip=[2]).kept) == [0, 1, 2, 3]  # a must stays


def test_what_an_answer_reads_from_the_cells_above_is_the_statements_that_bind_it() -> None:
    """definitions: one statement at a time, what the reader reads and what that reads in turn, the
    last binding in force; what the caller gives and what nothing reads are left out."""
    cells = [
        "import numpy as np\nSUM = 'sum'\nscale = 1",
        "scale = 2\ndemo = np.ones(3)\nprint(demo)",
        "def step(x):\n    return SUM, x * scale",
    ]
    assert definitions(cells, "def answer(x):\n    return step(x)") == (
        "SUM = 'sum'\n\nscale = 2\n\ndef step(x):\n    return (SUM, x * scale)"
    )
    assert definitions(cells, "y = np.zeros(2)", given=("np",)) == ""
    assert definitions(cells, "y = np.zeros(2)") == "import numpy as np"
    assert definitions(cells, "y = missing + 1") == ""
