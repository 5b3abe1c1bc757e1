"""Authoring: student notebooks are generated from the masters, and checked to be current."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from course_tools import authoring

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"repository": "https://github.com/example/course", "branch": "main"}


def _master() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    badges = nbformat.v4.new_markdown_cell("old badges")
    badges.metadata["course"] = {"role": "badges"}
    setup = nbformat.v4.new_code_cell("old setup")
    setup.metadata["course"] = {"role": "setup"}
    solution = nbformat.v4.new_code_cell(
        'def double(x):\n    """Twice x."""\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION'
    )
    solution.metadata["course"] = {"role": "solution", "exercise": "double"}
    solution.outputs = [nbformat.v4.new_output("stream", name="stdout", text="secret\n")]
    solution.execution_count = 3
    check = nbformat.v4.new_code_cell("check(double)")
    check.metadata["course"] = {"role": "check", "exercise": "double"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), badges, setup, solution, check]
    return nb


def test_blank_solution_keeps_indentation_and_names_the_exercise() -> None:
    src = "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\n"
    out = authoring.blank_solution(src, "f")
    assert out.splitlines() == [
        "def f(x):",
        "    # YOUR CODE HERE",
        '    raise NotImplementedError("Exercise f: replace this line with your code")',
    ]


@pytest.mark.parametrize(
    "source",
    [
        "x = 1",
        "### BEGIN SOLUTION\nx = 1",
        "x = 1\n### END SOLUTION",
        "### BEGIN SOLUTION\n### BEGIN SOLUTION",
    ],
)
def test_broken_regions_are_refused(source: str) -> None:
    with pytest.raises(authoring.AuthoringError):
        authoring.blank_solution(source, "e")


def test_student_version() -> None:
    student = authoring.student_version(_master(), "01_x.ipynb", CONFIG)
    text = nbformat.writes(student)
    assert "BEGIN SOLUTION" not in text and "return 2 * x" not in text and "secret" not in text
    assert 'raise NotImplementedError("Exercise double' in student.cells[3].source
    assert all(
        not c.get("outputs") and c.get("execution_count") is None
        for c in student.cells
        if c.cell_type == "code"
    )
    badges = student.cells[1].source
    assert "colab.research.google.com/github/example/course/blob/main/notebooks/01_x.ipynb" in badges
    assert "git+https://github.com/example/course@main" in student.cells[2].source
    assert "course_utils.setup()" in student.cells[2].source


def test_the_setup_cell_splits_the_cpus_its_notebook_needs() -> None:
    """metadata.course.cpus of the set-up cell becomes course_utils.setup(cpus=N): the one split."""
    master = _master()
    master.cells[2].metadata["course"]["cpus"] = 4
    master.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="report\n")]
    rendered = authoring._render_headers(master, "01_x.ipynb", "solutions", CONFIG)
    assert rendered.cells[2].source.endswith("settings = course_utils.setup(cpus=4)")
    assert rendered.cells[2].outputs == []  # a changed set-up cell loses its stale output
    again = authoring._render_headers(rendered, "01_x.ipynb", "solutions", CONFIG)
    again.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="report\n")]
    assert authoring._render_headers(again, "01_x.ipynb", "solutions", CONFIG).cells[2].outputs  # kept
    for bad in (0, "4", True, 2.5):
        master.cells[2].metadata["course"]["cpus"] = bad
        with pytest.raises(authoring.AuthoringError, match="cpus must be a whole number"):
            authoring.student_version(master, "01_x.ipynb", CONFIG)


def test_the_setup_cell_chooses_the_keras_backend() -> None:
    """metadata.course.backend of the set-up cell becomes course_utils.setup(backend=...), which sets
    KERAS_BACKEND before Keras is imported (notebook 11); TensorFlow needs no argument."""
    master = _master()
    master.cells[2].metadata["course"].update({"backend": "jax", "cpus": 2})
    rendered = authoring._render_headers(master, "01_x.ipynb", "solutions", CONFIG)
    assert rendered.cells[2].source.endswith('settings = course_utils.setup(backend="jax", cpus=2)')
    master.cells[2].metadata["course"] = {"role": "setup", "backend": "tensorflow"}
    assert authoring.setup_arguments(master.cells[2]) == ""
    master.cells[2].metadata["course"]["backend"] = "torch"
    with pytest.raises(authoring.AuthoringError, match="backend must be one of tensorflow, jax"):
        authoring.student_version(master, "01_x.ipynb", CONFIG)


def test_every_master_splits_the_cpus_in_its_setup_cell_only() -> None:
    """The masters ask for their virtual CPUs in the set-up cell; no later cell splits the CPU
    again, except notebook 00's lesson on use_virtual_cpus itself."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        (setup,) = [c for c in nb.cells if authoring.role(c) == "setup"]
        assert setup.source.endswith(f"course_utils.setup({authoring.setup_arguments(setup)})"), path.name
        later = [c.source for c in nb.cells if c.cell_type == "code" and c is not setup]
        if not path.name.startswith("00_"):
            assert not any("use_virtual_cpus(" in src for src in later), f"{path.name} splits the CPU again"


def test_exercises_need_ids_and_checks() -> None:
    nb = _master()
    assert [e.id for e in authoring.exercises(nb)] == ["double"]
    del nb.cells[4]
    with pytest.raises(authoring.AuthoringError, match="needs a check cell"):
        authoring.exercises(nb)
    nb = _master()
    nb.cells[3].metadata["course"] = {"role": "solution"}
    with pytest.raises(authoring.AuthoringError, match="needs an 'exercise' id"):
        authoring.exercises(nb)


def test_the_repository_is_current() -> None:
    """What `make check` runs: notebooks/ matches solutions/, headers included."""
    assert authoring.stale(ROOT) == []


def test_check_notices_a_stale_student_notebook(tmp_path: Path) -> None:
    for name in ["pyproject.toml"]:
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "notebooks").mkdir()
    nbformat.write(_master(), tmp_path / "solutions" / "01_x.ipynb")
    assert {p.name for p in authoring.stale(tmp_path)} == {"01_x.ipynb"}
    authoring.build(tmp_path)
    assert authoring.stale(tmp_path) == []
    master = nbformat.read(tmp_path / "solutions" / "01_x.ipynb", as_version=4)
    master.cells[0].source = "# A new title"
    nbformat.write(master, tmp_path / "solutions" / "01_x.ipynb")
    assert [p.parent.name for p in authoring.stale(tmp_path)] == ["notebooks"]
    (tmp_path / "notebooks" / "99_orphan.ipynb").write_text("{}")
    assert "99_orphan.ipynb" in {p.name for p in authoring.stale(tmp_path)}
    authoring.build(tmp_path)
    assert authoring.stale(tmp_path) == []
    assert not (tmp_path / "notebooks" / "99_orphan.ipynb").exists()


def test_student_notebooks_have_no_outputs() -> None:
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs, f"{path.name} has stored outputs"


def test_every_notebook_follows_the_anatomy() -> None:
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        roles = [authoring.role(c) for c in nb.cells]
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), path.name
        assert "badges" in roles and "setup" in roles, f"{path.name}: badges and set-up cells"
        assert roles.index("setup") == min(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown").lower()
        assert "summary" in text and "further reading" in text, f"{path.name}: summary and reading"


def _course(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "solutions").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "README.md").write_text(f"# Course\n\n{authoring.MAP_START}\n{authoring.MAP_END}\n")
    return tmp_path


def test_a_new_notebook_appears_in_the_readme_map_from_its_own_metadata(tmp_path: Path) -> None:
    """The notebook is the unit: adding a master is all it takes; its topic is in its metadata."""
    course = _course(tmp_path)
    master = _master()
    master.cells[0].source = "# 11 · Pipeline parallelism\n\n**Time:** about 30 minutes."
    master.metadata["course"] = {"topic": "Stages of a model on different devices"}
    nbformat.write(master, course / "solutions" / "11_pipeline_parallelism.ipynb")
    authoring.build(course)
    readme = (course / "README.md").read_text()
    assert (
        "| 11 | [Pipeline parallelism](notebooks/11_pipeline_parallelism.ipynb) | "
        "Stages of a model on different devices | about 30 minutes |"
    ) in readme
    student = nbformat.read(course / "notebooks" / "11_pipeline_parallelism.ipynb", as_version=4)
    assert student.metadata["course"] == {
        "notebook": "11_pipeline_parallelism",
        "topic": "Stages of a model on different devices",
    }
    del master.metadata["course"]
    nbformat.write(master, course / "solutions" / "11_pipeline_parallelism.ipynb")
    with pytest.raises(authoring.AuthoringError, match="metadata.course.topic"):
        authoring.build(course)


def test_the_shape_check_names_what_a_new_notebook_lacks(tmp_path: Path) -> None:
    course = _course(tmp_path)
    (course / "course_utils" / "exercises").mkdir(parents=True)
    (course / "tests").mkdir()
    nbformat.write(_master(), course / "solutions" / "11_new_topic.ipynb")
    nbformat.write(_master(), course / "solutions" / "12-Other.ipynb")
    nbformat.write(_master(), course / "solutions" / "13_again.ipynb")
    problems = authoring.unit_problems(course)
    assert "11_new_topic.ipynb: its exercises need course_utils/exercises/new_topic.py." in problems
    assert "11_new_topic.ipynb: its exercises need tests/test_checks_new_topic.py." in problems
    assert any(p.startswith("12-Other.ipynb: name it NN_name.ipynb") for p in problems)
    assert "13_again.ipynb: exercise id 'double' is already used in 11_new_topic.ipynb." in problems
    assert any(p.startswith("11_new_topic.ipynb: tag 5 to 8 code cells 'demo'") for p in problems)
    (course / "course_utils" / "exercises" / "new_topic.py").write_text("")
    (course / "tests" / "test_checks_new_topic.py").write_text("")
    left = [p for p in authoring.unit_problems(course) if p.startswith("11_new_topic")]
    assert left == [
        "11_new_topic.ipynb: tag 5 to 8 code cells 'demo' (its demo path; see docs/instructors.md), not 0."
    ]


def test_the_course_itself_has_the_shape() -> None:
    """Every notebook has its checks and their tests; exercise ids are unique across the course."""
    assert authoring.unit_problems(ROOT) == []


NBGRADER_SOLUTION = {
    "solution": True,
    "grade": False,
    "locked": False,
    "grade_id": "double",
    "schema_version": 3,
}


def test_nbgrader_mirror_is_generated_from_the_course_metadata() -> None:
    master = _master()
    master.cells[3].metadata["course"]["points"] = 2.5
    master.cells[0].metadata["nbgrader"] = {"solution": True, "grade_id": "stale"}  # not an exercise
    for nb in (
        authoring._render_headers(master, "01_x.ipynb", "solutions", CONFIG),
        authoring.student_version(master, "01_x.ipynb", CONFIG),
    ):
        assert nb.cells[3].metadata["nbgrader"] == NBGRADER_SOLUTION
        assert nb.cells[4].metadata["nbgrader"] == {
            "grade": True,
            "solution": False,
            "locked": True,
            "points": 2.5,
            "grade_id": "check_double",
            "schema_version": 3,
        }
        assert [i for i, c in enumerate(nb.cells) if "nbgrader" in c.metadata] == [3, 4]
    assert authoring.exercises(master)[0].points == 2.5


@pytest.mark.parametrize("points", [0, -1, "2", True])
def test_points_must_be_a_positive_number(points) -> None:
    nb = _master()
    nb.cells[3].metadata["course"]["points"] = points
    with pytest.raises(authoring.AuthoringError, match="points must be a positive number"):
        authoring.exercises(nb)
    nb = _master()
    nb.cells[4].metadata["course"]["points"] = 2
    with pytest.raises(authoring.AuthoringError, match="on the solution cell"):
        authoring.exercises(nb)


def test_the_course_carries_the_nbgrader_mirror() -> None:
    """Every exercise and check cell of every master and student notebook has metadata.nbgrader as
    build generates it, with grade ids unique in each notebook."""
    for folder in ("solutions", "notebooks"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            worth = {ex.id: ex.points for ex in authoring.exercises(nb)}
            ids = set()
            for cell in nb.cells:
                expected = authoring.nbgrader_metadata(cell, worth)
                assert cell.metadata.get("nbgrader") == expected, f"{folder}/{path.name}"
                if expected:
                    ids.add(expected["grade_id"])
            assert len(ids) == 2 * len(worth)  # grade ids unique in the notebook


def test_the_cell_rules_catch_a_long_cell_and_a_buried_heading() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("## A heading\n\n" + "word " * 119),
        nbformat.v4.new_markdown_cell("Some text.\n\n## A heading in the middle\n\nMore."),
        nbformat.v4.new_markdown_cell(
            "```python\n# a comment is not a heading\n" + "x = 1\n" * 200 + "```\nShort."
        ),
        nbformat.v4.new_markdown_cell(
            "| a | b |\n| --- | --- |\n| [link](https://example.com/a/b/c) | two |"
        ),
    ]
    assert authoring.markdown_words(nb.cells[0].source) == 121
    assert authoring.markdown_words(nb.cells[2].source) == 1
    assert authoring.markdown_words(nb.cells[3].source) == 4
    assert authoring.cell_problems(nb) == [
        "cell 0: 121 words of markdown; split or cut it to 120.",
        "cell 1: a heading inside the cell; start a new markdown cell at the heading.",
    ]


#: Markdown per master, in words. The cut to one idea per cell brought the 11 notebooks from 27,867
#: words to under 19,500 (1,773 a notebook); the measured topics and the exercises in which students
#: write code added since (fit on uneven batches, preemption, export, BatchNorm, randomness per
#: replica, add_loss, distributed predict, InputOptions, the TPU-ready loop, the survivor's error)
#: notebook 11 and the strict reviews' fixes are budgeted at 2,150 words a notebook on average, 3,200 at
#: most for one.
WORDS_PER_NOTEBOOK, WORDS_AT_MOST = 2_150, 3_200


def test_the_course_reads_in_its_word_budget() -> None:
    words = {
        p.name: authoring.markdown_total(nbformat.read(p, as_version=4))
        for p in (ROOT / "solutions").glob("*.ipynb")
    }
    budget = WORDS_PER_NOTEBOOK * len(words)
    assert sum(words.values()) <= budget, f"{sum(words.values())} words of markdown; the budget is {budget}"
    assert [name for name, n in words.items() if n > WORDS_AT_MOST] == []


def test_every_concept_the_course_named_is_still_taught() -> None:
    """The API names the masters' markdown named before the cut (tests/fixtures/concepts.json) are
    still in the notebook (its prose or its code) or in its appendix."""
    concepts = json.loads((ROOT / "tests" / "fixtures" / "concepts.json").read_text())
    missing = []
    for name, terms in concepts.items():
        nb = nbformat.read(ROOT / "solutions" / name, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        appendix = ROOT / "docs" / "appendix" / name.replace(".ipynb", ".md")
        if appendix.is_file():
            text += appendix.read_text()
        missing += [f"{name}: {term}" for term in terms if term not in text]
    assert missing == []


def test_a_solution_that_re_types_code_shown_above_is_refused() -> None:
    shown = nbformat.v4.new_code_cell(
        "with tf.GradientTape() as tape:\n    logits = model(x, training=True)\n    loss = loss_fn(y, logits)\n"
    )

    def solution(body: str) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(f"def f():\n    ### BEGIN SOLUTION\n{body}    ### END SOLUTION\n")
        cell.metadata["course"] = {"role": "solution", "exercise": "f"}
        return cell

    copied = solution(
        "    with tf.GradientTape() as tape:  # as above\n        logits = model(x, training=True)\n"
        "        loss = loss_fn(y, logits)\n        return tape\n"
    )
    nb = nbformat.v4.new_notebook(cells=[shown, copied])
    (problem,) = authoring.retyped_problems([("01_a.ipynb", nb)])
    assert "'f' re-types code shown in 01_a.ipynb cell 0" in problem
    # the same lines in a later notebook's solution are re-typing too; two in common are not
    assert authoring.retyped_problems(
        [
            ("01_a.ipynb", nbformat.v4.new_notebook(cells=[shown])),
            ("02_b.ipynb", nbformat.v4.new_notebook(cells=[copied])),
        ]
    )
    fresh = solution(
        "    with tf.GradientTape() as tape:\n        logits = model(x, training=True)\n"
        "        loss = tf.nn.compute_average_loss(per_example, global_batch_size=g)\n"
    )
    assert authoring.retyped_problems([("01_a.ipynb", nbformat.v4.new_notebook(cells=[shown, fresh]))]) == []
