"""The grader, ``python -m course_utils.grade``: its parts on their own, then a whole made-up class.

The class (tests/fixtures/make_class.py) is generated from the current master of notebook 00 and
graded once, by the real command, with 2 jobs and a 20 s cell timeout; each test below checks one
student or one promise of the grader against that run.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from course_utils.grading import code, course, extract, runner, sandbox, submissions, verdict

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import make_class  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NB = make_class.NOTEBOOK
SANDBOX, SANDBOX_WHY = sandbox.available()


def make_course(dest: Path) -> Path:
    """A course folder holding only notebook 00 (other masters may be half-written right now)."""
    (dest / "solutions").mkdir(parents=True)
    (dest / "tests").mkdir()
    shutil.copy(ROOT / "solutions" / f"{NB}.ipynb", dest / "solutions")
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", dest / "tests")
    shutil.copy(ROOT / "pyproject.toml", dest)
    return dest


@pytest.fixture(scope="module")
def the_course(tmp_path_factory) -> course.Course:
    return course.load_course(make_course(tmp_path_factory.mktemp("course")))


def submission_of(nb, name: str = f"{NB}.ipynb", student: str = "s") -> submissions.Submission:
    sub = submissions.Submission(student, Path(name), "file")
    sub.data = nbformat.writes(nb).encode()
    sub.cells, sub.metadata = submissions._lenient_cells(json.loads(sub.data))
    return sub


# --------------------------------------------------------------------------- finding the answers


def test_answers_found_by_definition_when_cells_moved_and_retagged(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    sub = submission_of(make_class.tamper(nb00.master))
    answers = extract.find_answers(sub, nb00)
    assert "return 8.5" in answers["uneven_mean"].source
    assert "global_batch // replicas" in answers["per_replica_batch"].source
    notes = extract.describe(answers, sub)
    assert any("uneven_mean: taken from" in n and "metadata does not mark it" in n for n in notes)


def test_student_markers_and_shell_lines_are_removed(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    student = make_class.with_answers(
        nb00.master,
        {
            "uneven_mean": "# NBVAL_SKIP\n!pip install something\n%pip install other\n"
            "def uneven_mean():\n    # NBVAL_RAISES_EXCEPTION\n    return 4.0\n",
        },
    )
    graded = extract.build(nb00, extract.find_answers(submission_of(student), nb00))
    source = graded.notebook.cells[nb00.exercises[0].solution_cell].source
    assert "NBVAL" not in source
    assert "# (not run by the grader) !pip install something" in source
    assert "# (not run by the grader) %pip install other" in source
    assert "return 4.0" in source


def test_graded_notebook_is_the_master_with_only_the_student_code(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    student = make_class.tamper(nb00.master)
    graded = extract.build(nb00, extract.find_answers(submission_of(student), nb00))
    solution_cells = {ex.solution_cell for ex in nb00.exercises}
    last_check = max(ex.check_cell for ex in nb00.exercises)
    assert len(graded.notebook.cells) == last_check + 1  # nothing after the last check runs
    for index, (ours, master) in enumerate(zip(graded.notebook.cells, nb00.master.cells)):
        if index not in solution_cells:
            assert ours.source == master.source, f"cell {index} is not the course's"
        if ours.cell_type == "code":
            assert ours.outputs == [] and ours.execution_count is None
            assert "tags" not in ours.metadata or index not in solution_cells
    code_number = {
        i: n for n, i in enumerate(i for i, c in enumerate(nb00.master.cells) if c.cell_type == "code")
    }
    assert [(e.id, e.solution, e.check) for e in graded.exercises] == [
        (ex.id, code_number[ex.solution_cell], code_number[ex.check_cell]) for ex in nb00.exercises
    ]


def test_metadata_is_the_fallback_and_nothing_found_is_missing(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    student = make_class.with_answers(
        nb00.master,
        {
            "uneven_mean": "def my_uneven_mean():\n    return 4.0\n",  # misnamed function
        },
    )
    # per_replica_batch: its cell deleted altogether
    index = make_class._solution_index(student, "per_replica_batch")
    del student.cells[index]
    answers = extract.find_answers(submission_of(student), nb00)
    assert answers["uneven_mean"].how == "cell metadata"
    assert "my_uneven_mean" in answers["uneven_mean"].source
    assert answers["per_replica_batch"].source is None
    graded = extract.build(nb00, answers)
    placeholder = graded.notebook.cells[nb00.exercises[1].solution_cell].source
    assert "NotImplementedError" in placeholder


def test_helper_cells_the_answer_uses_come_with_it(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    student = make_class.with_answers(
        nb00.master,
        {
            "per_replica_batch": "def per_replica_batch(global_batch, replicas):\n"
            "    return _split(global_batch, replicas)\n",
        },
    )
    helper = nbformat.v4.new_code_cell(
        "def _split(n, k):\n    if n % k:\n        raise ValueError('uneven')\n    return n // k\n"
    )
    scratch = nbformat.v4.new_code_cell(
        "print(per_replica_batch(8, 2))\n_split = None if False else _split\n"
    )
    student.cells.insert(3, helper)
    student.cells.append(scratch)  # uses the answer: must not be pulled in before it
    answer = extract.find_answers(submission_of(student), nb00)["per_replica_batch"]
    assert answer.source.index("def _split") < answer.source.index("def per_replica_batch")
    assert "print(per_replica_batch" not in answer.source
    assert "helper" in answer.how


def test_a_syntax_error_is_still_recognised_as_the_answer() -> None:
    assert code.defined_names("def replica_ids(strategy)\n    return [0]\n") == {"replica_ids"}
    assert code.defined_names("%time x = 1\ndef f():\n    pass\n") == {"f"}  # a magic defines nothing
    assert code.used_names("def f(a):\n    b = a + c\n    return [v for v in b]\n") == {"c"}


# --------------------------------------------------------------------------- finding the submissions


@pytest.mark.parametrize(
    "filename, folder, student",
    [
        ("alice_00_setup_and_hardware.ipynb", "inbox", "alice"),
        ("Copy of 00_setup_and_hardware - pitfall.ipynb", "inbox", "pitfall"),
        ("00-setup-and-hardware (1).ipynb", "bob", "bob"),
        ("setup_and_hardware_carol.ipynb", "x", "carol"),
        ("00_setup_and_hardware.ipynb", "dave", "dave"),
    ],
)
def test_student_id_of_a_single_file(the_course, filename, folder, student) -> None:
    assert submissions.student_from_file(Path(folder) / filename, the_course.notebooks) == student


def test_layouts_file_student_folder_class_folder_and_lms_export(the_course, tmp_path) -> None:
    master = the_course.notebooks[NB].master
    text = nbformat.writes(master)
    for path in [
        "class/ann/00_setup_and_hardware.ipynb",
        "class/ann/.ipynb_checkpoints/00_setup_and_hardware-checkpoint.ipynb",
        "class/ben/work/homework.ipynb",
        "single/cid/00_setup_and_hardware.ipynb",
        "lms/dee_00_setup_and_hardware.ipynb",
        "lms/eve_00_setup_and_hardware.ipynb",
        "loose/fay.ipynb",
    ]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    subs = submissions.load(
        [str(tmp_path / p) for p in ("class", "single/cid", "lms", "loose/fay.ipynb")], the_course
    )
    found = sorted((s.student, s.notebook, s.path.name) for s in subs)
    assert found == [
        ("ann", NB, "00_setup_and_hardware.ipynb"),
        ("ben", NB, "homework.ipynb"),
        ("cid", NB, "00_setup_and_hardware.ipynb"),
        ("dee", NB, "dee_00_setup_and_hardware.ipynb"),
        ("eve", NB, "eve_00_setup_and_hardware.ipynb"),
        ("fay", NB, "fay.ipynb"),
    ]
    with pytest.raises(submissions.UsageError):
        submissions.load([str(tmp_path / "nowhere")], the_course)


def test_matched_by_content_when_name_and_metadata_say_nothing(the_course, tmp_path) -> None:
    nb = make_class.pitfall(the_course.notebooks[NB].master)
    nb.metadata = {}
    path = tmp_path / "homework final.ipynb"
    path.write_text(nbformat.writes(nb))
    sub = submissions.Submission("x", path, "file")
    submissions.read(sub)
    submissions.match(sub, the_course)
    assert (sub.notebook, sub.error) == (NB, "")


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not valid JSON"),
        (b'{"nbformat": 4}', "not a notebook"),
        (b'{"cells": [{"cell_type": "markdown", "source": "hi"}]}', "no code cell"),
    ],
)
def test_unreadable_files_are_invalid(the_course, tmp_path, content, reason) -> None:
    path = tmp_path / f"{NB}.ipynb"
    path.write_bytes(content)
    sub = submissions.Submission("x", path, "file")
    submissions.read(sub)
    submissions.match(sub, the_course)
    assert reason in sub.error
    assert sub.notebook == NB  # still known by its name, so the report lists its exercises


# --------------------------------------------------------------------------- statuses from a run


def _graded(the_course):
    nb00 = the_course.notebooks[NB]
    return extract.build(nb00, extract.find_answers(submission_of(nb00.master), nb00))


def _cell(result, **extra):
    return {"result": result, "outputs": extra.pop("outputs", []), **extra}


def _stdout(text):
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def test_statuses_passed_failed_error_timeout(the_course) -> None:
    graded = _graded(the_course)
    (a, b) = graded.exercises
    run = runner.RunResult(
        started=True,
        done=True,
        cells={
            a.solution: _cell("ok"),
            a.check: _cell("error", ename="ExerciseError", evalue="Exercise uneven_mean: On 2 replicas ..."),
            b.solution: _cell("ok"),
            b.check: _cell("error", ename="TypeError", evalue="unsupported operand"),
        },
    )
    status, exercises, _ = verdict.exercise_results(graded, run, runner.RunOptions())
    assert status == "graded"
    assert [(e["status"], e["message"][:34]) for e in exercises] == [
        ("failed", "Exercise uneven_mean: On 2 replica"),
        ("error", "Exercise per_replica_batch: the ch"),
    ]
    run.cells[a.check] = _cell("ok", outputs=_stdout("[pass] uneven_mean: fine.\n"))
    run.cells[b.solution] = _cell("error", ename="SyntaxError", evalue="invalid syntax (line 2)")
    run.cells[b.check] = _cell("timeout", timeout=20.0)
    _, exercises, _ = verdict.exercise_results(graded, run, runner.RunOptions())
    assert [e["status"] for e in exercises] == ["passed", "timeout"]
    assert exercises[0]["message"] == "fine."
    run.cells[b.check] = _cell("ok")
    _, exercises, _ = verdict.exercise_results(graded, run, runner.RunOptions())
    assert exercises[1]["status"] == "error" and "SyntaxError" in exercises[1]["message"]


def test_statuses_when_the_run_breaks(the_course) -> None:
    graded = _graded(the_course)
    (a, b) = graded.exercises
    ok = _cell("ok", outputs=_stdout("[pass] uneven_mean: fine.\n"))
    # No [pass] line: not passed, whatever else happened.
    run = runner.RunResult(started=True, cells={a.solution: _cell("ok"), a.check: _cell("ok")})
    assert verdict.exercise_results(graded, run, runner.RunOptions())[1][0]["status"] == "error"
    # The notebook timeout: what finished counts, the rest is a timeout.
    run = runner.RunResult(
        started=True, notebook_timed_out=True, cells={a.solution: _cell("ok"), a.check: ok}
    )
    status, exercises, _ = verdict.exercise_results(graded, run, runner.RunOptions())
    assert status == "timeout" and [e["status"] for e in exercises] == ["passed", "timeout"]
    # The kernel died in the second exercise.
    run = runner.RunResult(
        started=True,
        cells={a.solution: _cell("ok"), a.check: ok, b.solution: _cell("died"), b.check: _cell("not-run")},
    )
    status, exercises, _ = verdict.exercise_results(graded, run, runner.RunOptions())
    assert status == "error" and [e["status"] for e in exercises] == ["passed", "error"]
    # The grader could not start a kernel: every exercise says so, nothing is blamed on the student.
    run = runner.RunResult(started=True, setup_error="RuntimeError: Kernel died before replying")
    status, exercises, notes = verdict.exercise_results(graded, run, runner.RunOptions())
    assert status == "error" and {e["status"] for e in exercises} == {"error"}
    assert "kernel did not start" in notes[0]


def test_usage_errors_exit_2(tmp_path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_utils.grade",
            str(tmp_path / "missing"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "no such file" in done.stderr


# --------------------------------------------------------------------------- the made-up class


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """Generate the class, grade it once with the real command, keep what a test may check."""
    base = tmp_path_factory.mktemp("grading")
    the_course = make_course(base / "course")
    targets = [base / "class", base / "loop", base / "inbox", base / "course", base / "out"]
    made = make_class.make_class(base, the_course, vandal_targets=targets if SANDBOX else None, safe=base)
    (base / "work").mkdir()

    def digests():
        return {
            p: hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in ("class", "loop", "inbox", "course")
            for p in (base / folder).rglob("*")
            if p.is_file()
        }

    before = digests()
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_utils.grade",
            *made["submissions"],
            "--course",
            str(the_course),
            "--out",
            str(base / "out"),
            "-j",
            "2",
            "--cell-timeout",
            "20",
            "--workdir",
            str(base / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=base,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds = time.monotonic() - start
    print(done.stderr)
    report = json.loads((base / "out" / "report.json").read_text()) if done.returncode == 0 else {}
    return SimpleNamespace(
        base=base,
        out=base / "out",
        done=done,
        seconds=seconds,
        before=before,
        after=digests(),
        results={r["student"]: r for r in report.get("results", [])},
        expected={s: e for s, e in make_class.EXPECTED.items() if SANDBOX or s != "vandal"},
    )


def test_class_graded_exit_0_and_every_report_written(graded_class) -> None:
    assert graded_class.done.returncode == 0, graded_class.done.stderr[-3000:]
    for name in ("report.json", "report.csv", "report.md"):
        assert (graded_class.out / name).is_file()
    assert set(graded_class.results) == set(graded_class.expected)


@pytest.mark.parametrize("student", list(make_class.EXPECTED))
def test_each_student_graded_as_expected(graded_class, student) -> None:
    if student not in graded_class.expected:
        pytest.skip(f"no OS sandbox here ({SANDBOX_WHY}): the vandal is left out of the class")
    status, exercises = graded_class.expected[student]
    got = graded_class.results[student]
    assert set(got) == {"student", "notebook", "status", "exercises", "passed", "total"}
    assert got["notebook"] == NB
    assert (got["status"], {e["id"]: e["status"] for e in got["exercises"]}) == (status, exercises), got
    assert set(got["exercises"][0]) == {"id", "status", "message"}
    assert got["passed"] == sum(s == "passed" for s in exercises.values())
    assert got["total"] == len(make_class.IDS)


def test_hints_say_what_went_wrong(graded_class) -> None:
    messages = {(s, e["id"]): e["message"] for s, r in graded_class.results.items() for e in r["exercises"]}
    assert "one device's answer" in messages["pitfall", "uneven_mean"]
    assert "not done yet" in messages["blank", "per_replica_batch"]
    assert "should raise ValueError" in messages["tamper", "per_replica_batch"]
    assert "did not finish within 20 s" in messages["loop", "per_replica_batch"]
    assert "not valid JSON" in messages["corrupt", "uneven_mean"]
    assert messages["honest", "uneven_mean"] == (
        "on 2 replicas the MEAN of the replica means is 4.25; one device's mean is 4."
    )


def test_markdown_csv_and_feedback(graded_class) -> None:
    md = (graded_class.out / "report.md").read_text()
    assert f"## {NB}" in md
    assert "| `uneven_mean` | `per_replica_batch` |" in md
    row = next(line for line in md.splitlines() if line.startswith("| pitfall |"))
    assert "❌ failed: 4 is one device's answer" in row and "✅ passed" in row
    with open(graded_class.out / "report.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(graded_class.expected) * len(make_class.IDS)
    assert {r["status"] for r in rows if r["student"] == "loop"} == {"passed", "timeout"}
    for student in graded_class.expected:
        text = (graded_class.out / "feedback" / f"{student}.md").read_text()
        assert text.startswith(f"# Feedback for {student}")
        result = graded_class.results[student]
        for exercise in result["exercises"]:
            assert exercise["message"].strip() in text  # the hint in full
    graded = nbformat.read(graded_class.out / "graded" / "pitfall" / f"{NB}.ipynb", as_version=4)
    assert any(
        "ExerciseError" in str(cell.get("outputs")) for cell in graded.cells if cell.cell_type == "code"
    )


def test_submissions_intact_and_run_folders_removed(graded_class) -> None:
    assert graded_class.after == graded_class.before
    assert list((graded_class.base / "work").iterdir()) == []


def test_a_vandal_cannot_touch_anything_outside_its_run(graded_class) -> None:
    if not SANDBOX:
        pytest.skip(f"no OS sandbox here ({SANDBOX_WHY}); see docs/grading.md")
    assert graded_class.after == graded_class.before
    # It did try: its cell reports what it managed to delete (its own copy of the notebook only).
    graded = nbformat.read(graded_class.out / "graded" / "vandal" / f"{NB}.ipynb", as_version=4)
    text = "".join(str(cell.get("outputs")) for cell in graded.cells if cell.cell_type == "code")
    assert "notebooks deleted: 1" in text
    assert graded_class.results["vandal"]["passed"] == 2
