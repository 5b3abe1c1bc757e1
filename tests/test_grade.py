"""The grader, ``python -m course_tools.grade``: its parts on their own, then a whole made-up class.

The class (tests/fixtures/make_class.py) is generated from the current master of notebook 00 and
graded once, by the real command, with 2 jobs and a 10 s cell timeout; each test below checks one
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
import zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from course_tools.cellmeta import course_meta, exercise_id, role
from course_tools.grading import (
    code,
    context,
    course,
    extract,
    gradescope,
    judge,
    protocol,
    report,
    runner,
    sandbox,
    shards,
    submissions,
    verdict,
)

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import make_class  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NB = make_class.NOTEBOOK
SANDBOX, SANDBOX_WHY = sandbox.available()


#: Points of the test course's exercises: the master's defaults, but global_batch weighs 2 here.
POINTS = {"uneven_mean": 1, "global_mean": 1, "global_batch": 2}


def make_course(dest: Path) -> Path:
    """A course folder holding only notebook 00 (other masters may be half-written right now), whose
    second exercise is worth 2 points (``metadata.course.points``), to test weighted totals."""
    (dest / "solutions").mkdir(parents=True)
    (dest / "tests").mkdir()
    master = nbformat.read(ROOT / "solutions" / f"{NB}.ipynb", as_version=4)
    for cell in master.cells:
        if role(cell) == "solution" and POINTS.get(exercise_id(cell), 1) != 1:
            course_meta(cell)["points"] = POINTS[exercise_id(cell)]
    nbformat.write(master, dest / "solutions" / f"{NB}.ipynb")
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", dest / "tests")
    shutil.copy(ROOT / "pyproject.toml", dest)
    shutil.copy(ROOT / "requirements.txt", dest)
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
    assert "per_replica * 2" in answers["global_batch"].source
    notes = extract.describe(answers, sub)
    assert any("uneven_mean: taken from" in n and "metadata does not mark it" in n for n in notes)


def test_student_markers_and_shell_lines_are_removed(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    marked = (  # an answer with nbval markers and shell lines in it
        "# NBVAL_SKIP\n!pip install something\n%pip install other\n"
        "def uneven_mean():\n    # NBVAL_RAISES_EXCEPTION\n    return 4.0\n"
    )
    student = make_class.with_answers(nb00.master, {"uneven_mean": marked})
    graded = extract.build(nb00, extract.find_answers(submission_of(student), nb00), whole=True)
    source = graded.notebook.cells[nb00.exercises[0].solution_cell].source
    assert "NBVAL" not in source
    assert "# (not run by the grader) !pip install something" in source
    assert "# (not run by the grader) %pip install other" in source
    assert "return 4.0" in source


def test_graded_notebook_is_the_master_with_only_the_student_code(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    student = make_class.tamper(nb00.master)
    graded = extract.build(nb00, extract.find_answers(submission_of(student), nb00), whole=True)
    assert graded.left_out == ()
    solution_cells = {ex.solution_cell for ex in nb00.exercises}
    # Each check cell only hands the student's functions to the judge (outside the kernel).
    checks = {
        ex.check_cell: judge.serve_source(ex.id, nb00.master.cells[ex.check_cell].source)
        for ex in nb00.exercises
    }
    assert all("_serve(" in source and ".check_" not in source for source in checks.values())
    assert set(graded.judged) == {ex.id for ex in nb00.exercises}
    last_check = max(ex.check_cell for ex in nb00.exercises)
    assert len(graded.notebook.cells) == last_check + 1  # nothing after the last check runs
    for index, (ours, master) in enumerate(zip(graded.notebook.cells, nb00.master.cells)):
        if index in checks:
            assert ours.source == checks[index]
        elif index not in solution_cells:
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


def test_graded_notebook_runs_only_the_checks_context(the_course) -> None:
    """Notebook 00's three-process demonstration and its plots feed no check: left out. The set-up,
    the device split, the answers and the checks stay, and a name only a student's answer reads
    keeps the cell that defines it."""
    nb00 = the_course.notebooks[NB]
    master_code = [c.source for c in nb00.master.cells if c.cell_type == "code"]
    answers = extract.find_answers(submission_of(nb00.master), nb00)
    graded = extract.build(nb00, answers)
    kept = [c.source for c in graded.notebook.cells if c.cell_type == "code"]
    served = {judge.serve_source(ex.id, nb00.master.cells[ex.check_cell].source): ex for ex in nb00.exercises}
    kept = [nb00.master.cells[served[s].check_cell].source if s in served else s for s in kept]
    before_last_check = master_code[: len(kept) + len(graded.left_out)]
    assert kept == [s for k, s in enumerate(before_last_check) if k not in graded.left_out]
    left_out = [master_code[k] for k in graded.left_out]
    assert any("SCRIPT = " in s for s in left_out) and any("plt.subplots" in s for s in left_out)
    assert any(role(c) == "setup" for c in graded.notebook.cells)
    for ex, cells in zip(nb00.exercises, graded.exercises):
        code_cells = [c for c in graded.notebook.cells if c.cell_type == "code"]
        assert code_cells[cells.solution].source == answers[ex.id].source
        assert code_cells[cells.check].source == judge.serve_source(
            ex.id, nb00.master.cells[ex.check_cell].source
        )
    # An answer that reads `course_strategy` (defined by a left-out cell) brings that cell back.
    answers["uneven_mean"].source += "\nprint(course_strategy)\n"
    again = extract.build(nb00, answers)
    assert len(again.left_out) == len(graded.left_out) - 1
    assert any(s.startswith("course_strategy = ") for s in (c.source for c in again.notebook.cells))


def test_metadata_is_the_fallback_and_nothing_found_is_missing(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    student = make_class.with_answers(
        nb00.master,
        {
            "uneven_mean": "def my_uneven_mean():\n    return 4.0\n",  # misnamed function
        },
    )
    # global_batch: its cell deleted altogether
    index = make_class._solution_index(student, "global_batch")
    del student.cells[index]
    answers = extract.find_answers(submission_of(student), nb00)
    assert answers["uneven_mean"].how == "cell metadata"
    assert "my_uneven_mean" in answers["uneven_mean"].source
    assert answers["global_batch"].source is None
    graded = extract.build(nb00, answers, whole=True)
    placeholder = graded.notebook.cells[
        next(e for e in nb00.exercises if e.id == "global_batch").solution_cell
    ].source
    assert "NotImplementedError" in placeholder


def test_helper_cells_the_answer_uses_come_with_it(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    uses_helper = (
        "def global_batch(strategy, per_replica):\n"
        "    return _times(per_replica, strategy.num_replicas_in_sync)\n"
    )
    student = make_class.with_answers(nb00.master, {"global_batch": uses_helper})
    helper = nbformat.v4.new_code_cell("def _times(a, b):\n    return a * b\n")
    scratch = nbformat.v4.new_code_cell("print(global_batch(two, 8))\n_times = None if False else _times\n")
    student.cells.insert(3, helper)
    student.cells.append(scratch)  # uses the answer: must not be pulled in before it
    answer = extract.find_answers(submission_of(student), nb00)["global_batch"]
    assert answer.source.index("def _times") < answer.source.index("def global_batch")
    assert "print(global_batch" not in answer.source
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
    return protocol.CellRecord(cell=-1, result=protocol.CellResult(result), **extra)


def _run(cells, **how):
    """A finished run whose cells are ``cells`` (code-cell number -> record)."""
    return runner.RunResult(cells={n: replace(r, cell=n) for n, r in cells.items()}, **how)


def _stdout(text):
    return ({"output_type": "stream", "name": "stdout", "text": text},)


def _statuses(decided):
    """The statuses of uneven_mean and global_batch (the two exercises these tests play with)."""
    return [e.status for e in decided.exercises if e.id != "global_mean"]


def _two(graded):
    """uneven_mean and global_batch of the graded notebook."""
    return tuple(next(e for e in graded.exercises if e.id == i) for i in ("uneven_mean", "global_batch"))


def test_statuses_passed_failed_error_timeout(the_course) -> None:
    graded = _graded(the_course)
    (a, b) = _two(graded)
    cells = {
        a.solution: _cell("ok"),
        a.check: _cell("ok", outputs=_stdout("[pass] uneven_mean: what the kernel printed.\n")),
        b.solution: _cell("ok"),
        b.check: _cell("error", ename="TypeError", evalue="unsupported operand"),
    }
    judged = {"uneven_mean": ("failed", "Exercise uneven_mean: On 2 replicas ...")}
    decided = verdict.of_run(graded, _run(cells, started=True, done=True, judged=judged), runner.RunOptions())
    assert decided.status == "graded"
    assert [(e.status, e.message[:34]) for e in decided.exercises if e.id != "global_mean"] == [
        ("failed", "Exercise uneven_mean: On 2 replica"),
        ("error", "Exercise global_batch: the grader "),
    ]
    judged = {"uneven_mean": ("passed", "fine.")}
    cells[b.solution] = _cell("error", ename="SyntaxError", evalue="invalid syntax (line 2)")
    cells[b.check] = _cell("timeout", timeout=20.0)
    decided = verdict.of_run(graded, _run(cells, started=True, done=True, judged=judged), runner.RunOptions())
    assert _statuses(decided) == ["passed", "timeout"]
    assert decided.exercises[0].message == "fine."
    cells[b.check] = _cell("ok")
    decided = verdict.of_run(graded, _run(cells, started=True, done=True, judged=judged), runner.RunOptions())
    assert decided.exercises[2].status == "error" and "SyntaxError" in decided.exercises[2].message


def test_statuses_when_the_run_breaks(the_course) -> None:
    graded = _graded(the_course)
    (a, b) = _two(graded)
    ok = _cell("ok", outputs=_stdout("[pass] uneven_mean: fine.\n"))
    judged = {"uneven_mean": ("passed", "fine.")}
    options = runner.RunOptions()
    # No verdict from the judge: not passed, whatever the kernel printed.
    run = _run({a.solution: _cell("ok"), a.check: ok}, started=True)
    assert verdict.of_run(graded, run, options).exercises[0].status == "error"
    # The notebook timeout: what finished counts, the rest is a timeout.
    run = _run({a.solution: _cell("ok"), a.check: ok}, started=True, notebook_timed_out=True, judged=judged)
    decided = verdict.of_run(graded, run, options)
    assert decided.status == "timeout" and _statuses(decided) == ["passed", "timeout"]
    # The kernel died in the second exercise.
    run = _run(
        {a.solution: _cell("ok"), a.check: ok, b.solution: _cell("died"), b.check: _cell("not-run")},
        started=True,
        judged=judged,
    )
    decided = verdict.of_run(graded, run, options)
    assert decided.status == "error" and _statuses(decided) == ["passed", "error"]
    # The grader could not start a kernel: every exercise says so, nothing is blamed on the student.
    run = _run({}, started=True, setup_error="RuntimeError: Kernel died before replying")
    decided = verdict.of_run(graded, run, options)
    assert decided.status == "error" and set(_statuses(decided)) == {"error"}
    assert "kernel did not start" in decided.notes[0]


def test_a_run_sees_both_packages() -> None:
    """The grading run (and the sandbox around it) imports course_utils (the notebook) and
    course_tools (the plugin, the sandbox) from the grader's own copy of each."""
    import course_tools
    import course_utils

    env = runner.run_environment(Path("/nowhere"), runner.RunOptions(), "token")
    path = env["PYTHONPATH"].split(os.pathsep)
    for package in (course_utils, course_tools):
        folder = Path(list(package.__path__)[0]).resolve().parent
        assert str(folder) in path, (package.__name__, path)


def test_usage_errors_exit_2(tmp_path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_tools.grade",
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


def _grade_command(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


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
    command = [
        sys.executable,
        "-m",
        "course_tools.grade",
        *made["submissions"],
        "--course",
        str(the_course),
        "-j",
        "2",
        "--cell-timeout",
        "10",
        "--workdir",
        str(base / "work"),
    ]
    done = _grade_command([*command, "--out", str(base / "out")], base)
    seconds = time.monotonic() - start
    print(done.stderr)
    report = json.loads((base / "out" / "report.json").read_text()) if done.returncode == 0 else {}
    return SimpleNamespace(
        base=base,
        course=the_course,
        command=command,
        out=base / "out",
        done=done,
        seconds=seconds,
        before=before,
        after=digests(),
        files=made["files"],
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
    assert set(got) == {
        "student",
        "notebook",
        "status",
        "exercises",
        "passed",
        "total",
        "points",
        "max_points",
        "source",
        "notes",
        "seconds",
        "graded",
        "memory_mb",
        "kernel_mb",
    }
    assert got["notebook"] == NB
    if student == "pipe_forger" and got["status"] == "error":
        # Its interrupt ended the run (it does not always land before the next cell starts): then
        # nothing the run reported counts, its forged records least of all.
        status, exercises = "error", dict.fromkeys(exercises, "error")
        assert "did not end normally" in got["notes"][0]
    assert (got["status"], {e["id"]: e["status"] for e in got["exercises"]}) == (status, exercises), got
    assert set(got["exercises"][0]) == {"id", "status", "message", "points", "max_points"}
    assert got["passed"] == sum(s == "passed" for s in exercises.values())
    assert got["total"] == len(make_class.IDS)
    # Points: a passed exercise earns its points, anything else 0.
    assert {e["id"]: (e["points"], e["max_points"]) for e in got["exercises"]} == {
        ident: (POINTS[ident] if exercises[ident] == "passed" else 0, POINTS[ident]) for ident in exercises
    }
    assert got["points"] == sum(POINTS[i] for i, s in exercises.items() if s == "passed")
    assert got["max_points"] == sum(POINTS.values())


def test_hints_say_what_went_wrong(graded_class) -> None:
    messages = {(s, e["id"]): e["message"] for s, r in graded_class.results.items() for e in r["exercises"]}
    assert "one device's answer" in messages["pitfall", "uneven_mean"]
    assert "not done yet" in messages["blank", "global_batch"]
    assert "not done yet" in messages["blank", "uneven_mean"]  # as the notebook's own check says
    assert "On 1 replica it got twice what you asked for" in messages["tamper", "global_batch"]
    assert "did not finish within 10 s" in messages["loop", "global_batch"]
    assert "not valid JSON" in messages["corrupt", "uneven_mean"]
    assert messages["honest", "uneven_mean"] == (
        "on 2 replicas the MEAN of the replica means is 4.25; one device's mean is 4."
    )


@pytest.mark.parametrize("student", sorted(make_class.HOSTILE))
def test_a_student_who_plays_a_trick_on_the_checks_earns_nothing(graded_class, student) -> None:
    """The hostile class: each kind of trick code in an answer cell can play on a check in its
    kernel (rebinding or patching the checks, reading their frames, exec, a %%writefile module, an
    input transformer, an exception handler, forged records in the grader's pipe, answers learned
    by heart). The judge decides outside the kernel: not one point, and the report says why."""
    result = graded_class.results[student]
    assert result["points"] == 0 and result["passed"] == 0
    said = make_class.HOSTILE[student]
    assert said in " ".join(
        e["message"] for e in result["exercises"] + [{"message": n} for n in result["notes"]]
    )


def test_what_the_audit_noted_is_for_the_graders_eyes(graded_class) -> None:
    """The audit no longer decides: its findings are notes beside a verdict that stands."""
    notes = {s: " ".join(r["notes"]) for s, r in graded_class.results.items()}
    assert "audit note on uneven_mean (its verdict stands)" in notes["forger"]
    assert "assigns to `_ex.check_uneven_mean`" in notes["forger"]
    assert "reaches `course_utils.exercises`" in notes["borrower"]
    assert "audit note" not in notes["honest"]
    assert all(e["status"] != "flagged" for r in graded_class.results.values() for e in r["exercises"])
    messages = {(s, e["id"]): e["message"] for s, r in graded_class.results.items() for e in r["exercises"]}
    assert "each got half" in messages["borrower", "global_batch"]  # its pass line changed nothing
    # Its interrupt ended the run (then nothing the run reported counts), or the judge decided.
    forged = graded_class.results["pipe_forger"]
    said = " ".join([*forged["notes"], *(e["message"] for e in forged["exercises"])])
    assert "did not end normally" in said or "one device's answer" in said


def test_markdown_csv_and_feedback(graded_class) -> None:
    md = (graded_class.out / "report.md").read_text()
    assert f"## {NB}" in md
    assert "| `uneven_mean` | `global_mean` | `global_batch` |" in md
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
    # The verdict printed in the graded notebook is the judge's, as feedback.
    assert any(
        "[failed] uneven_mean (decided by the grader): Exercise uneven_mean: 4 is one device's answer"
        in str(cell.get("outputs"))
        for cell in graded.cells
        if cell.cell_type == "code"
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
    assert graded_class.results["vandal"]["passed"] == 3


# --------------------------------------------------------------------------- points and totals


def test_points_come_from_the_masters_metadata(the_course) -> None:
    nb00 = the_course.notebooks[NB]
    assert nb00.points() == POINTS and nb00.max_points() == 4
    real = course.load_notebook(ROOT / "solutions" / f"{NB}.ipynb")
    assert set(real.points().values()) == {1}  # the course's own masters keep the default weight


def test_csv_gradebook_and_markdown_give_points_and_totals(graded_class) -> None:
    expected = graded_class.expected
    earned = {
        s: sum(POINTS[i] for i, status in exercises.items() if status == "passed")
        for s, (_, exercises) in expected.items()
    }
    with open(graded_class.out / "report.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:  # still one row per student and exercise, now with points
        status = expected[row["student"]][1][row["exercise"]]
        assert row["points"] == str(POINTS[row["exercise"]] if status == "passed" else 0)
        assert row["max_points"] == str(POINTS[row["exercise"]])
        assert (row["notebook_points"], row["notebook_max_points"]) == (str(earned[row["student"]]), "4")
    with open(graded_class.out / "gradebook.csv", newline="") as handle:
        book = list(csv.reader(handle))
    assert book[0] == ["student", NB, "total"]
    assert sorted(book[1:]) == sorted([s, str(n), str(n)] for s, n in earned.items())
    data = json.loads((graded_class.out / "report.json").read_text())
    assert data["notebooks"] == {NB: {"exercises": POINTS, "max_points": 4}}
    assert {s["student"]: (s["points"], s["max_points"], s["notebooks"]) for s in data["students"]} == {
        s: (n, 4, {NB: n}) for s, n in earned.items()
    }
    md = (graded_class.out / "report.md").read_text()
    assert "Points: `uneven_mean` 1, `global_mean` 1, `global_batch` 2; 4 in all." in md
    header = "| student | status | points | passed | `uneven_mean` | `global_mean` | `global_batch` | time |"
    assert header in md
    assert "## Totals" in md and "| honest | 4 | 4/4 |" in md and "| pitfall | 3 | 3/4 |" in md
    feedback = (graded_class.out / "feedback" / "pitfall.md").read_text()
    assert "2 of 3 exercises passed, 3 of 4 points" in feedback and "`uneven_mean`: failed (0/1)" in feedback


def test_report_says_what_the_verdict_does_with_errors_inside_a_check(graded_class) -> None:
    """docs/grading.md, the report and the verdict agree: the student's code raising while the check
    calls it is `failed` (the check's ExerciseError), an error of the student's own cell is `error`."""
    md = (graded_class.out / "report.md").read_text()
    assert "the student's code raised while the check called it" in md.split("**error**")[0]
    docs = (ROOT / "docs" / "grading.md").read_text()
    assert "the status is `failed`" in docs
    from judging import judged

    def global_batch(strategy, per_replica):
        return per_replica // 0

    # The judge calls the student's function in the kernel; its error comes back as the check's hint.
    status, message = judged("global_batch", {"global_batch": global_batch})
    assert status == "failed" and "ZeroDivisionError" in message, message


# --------------------------------------------------------------------------- shards and merge


def _subs(n: int) -> list[submissions.Submission]:
    return [
        submissions.Submission(f"s{i:02d}", Path(f"s{i:02d}.ipynb"), "file", notebook=nb)
        for i in range(n)
        for nb in (NB, "01_data_parallelism")
    ]


@pytest.mark.parametrize("count", [1, 3, 4])
def test_shards_are_disjoint_cover_the_class_and_are_balanced(count) -> None:
    subs = _subs(5)
    slices = [shards.select(list(reversed(subs)) if k % 2 else subs, k, count) for k in range(1, count + 1)]
    keys = [(s.student, s.notebook) for mine, _ in slices for s in mine]
    assert sorted(keys) == sorted((s.student, s.notebook) for s in subs)  # each exactly once
    sizes = [len(mine) for mine, _ in slices]
    assert max(sizes) - min(sizes) <= 1
    assert {info["class_digest"] for _, info in slices} == {shards.class_digest(subs)}
    assert all(info["class_size"] == len(subs) for _, info in slices)


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0"])
def test_a_bad_shard_is_refused(text) -> None:
    with pytest.raises(shards.ShardError):
        shards.parse(text)
    assert shards.parse(" 2 / 3 ") == (2, 3)


def _without_time(md: str) -> str:
    """report.md without the run times (the last column of the notebook tables)."""
    lines = []
    for line in md.splitlines():
        if line.startswith("| ") and (
            line.endswith(" s |") or line.endswith("| time |") or line.endswith("|  |")
        ):
            line = line.rsplit("|", 2)[0] + "|"
        lines.append(line)
    return "\n".join(lines)


#: The part of the class the shard test grades twice (whole, then in three shards): a pass, a fail
#: and an unreadable file, so that every kind of row is merged (the whole class would take 9 runs more).
SHARDED = ("honest", "blank", "corrupt")


def test_three_shards_merge_into_the_unsharded_report(graded_class) -> None:
    """Part of the class graded in three shards (as three array tasks would, here at once), merged:
    each student's rows, files and hints are those of the run of the whole class, run times aside."""
    base = graded_class.base
    command = [
        sys.executable,
        "-m",
        "course_tools.grade",
        *(str(graded_class.files[student]) for student in SHARDED),
        *graded_class.command[graded_class.command.index("--course") :],
    ]
    whole = graded_class.out
    signed = {"COURSE_GRADE_KEY": "a secret of the course's staff"}

    def shard(k: int) -> subprocess.CompletedProcess:
        return _grade_command(
            [*command, "--shard", f"{k}/3", "--out", str(base / f"shard-{k}")], base, **signed
        )

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        for done in pool.map(shard, (1, 2, 3)):
            assert done.returncode == 0, done.stderr[-3000:]
    sizes = [len(json.loads((base / f"shard-{k}" / "report.json").read_text())["results"]) for k in (1, 2, 3)]
    assert sizes == [1, 1, 1]
    # An incomplete set is refused, naming what is missing.
    done = _grade_command(
        [sys.executable, "-m", "course_tools.grade", "merge", "shard-1", "shard-3", "--out", "partial"], base
    )
    assert done.returncode == 2 and "shard(s) 2/3 missing" in done.stderr
    assert not (base / "partial" / "report.json").exists()
    merge = [sys.executable, "-m", "course_tools.grade", "merge", "shard-1", "shard-2", "shard-3"]
    merge += ["--course", str(graded_class.course)]
    done = _grade_command([*merge, "--out", "merged"], base, **signed)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = base / "merged"

    def rows_of(folder: Path) -> dict:
        data = json.loads((folder / "report.json").read_text())
        rows = {r["student"]: r for r in data["results"] if r["student"] in SHARDED}
        for result in rows.values():
            for measured in ("seconds", "memory_mb", "kernel_mb"):
                result.pop(measured)
        return rows

    assert set(rows_of(merged)) == set(SHARDED) and rows_of(merged) == rows_of(whole)
    assert json.loads((merged / "report.json").read_text())["signature"]
    for name in ("report.csv", "gradebook.csv"):
        with open(whole / name, newline="") as handle:
            expected = [r for r in csv.DictReader(handle) if r["student"] in SHARDED]
        with open(merged / name, newline="") as handle:
            assert list(csv.DictReader(handle)) == expected, name
    whole_md = _without_time((whole / "report.md").read_text()).splitlines()
    student_lines = [
        line
        for line in _without_time((merged / "report.md").read_text()).splitlines()
        if line.startswith(tuple(f"| {s} |" for s in SHARDED))
    ]
    assert student_lines and all(line in whole_md for line in student_lines)
    for folder in ("feedback", "graded"):
        files = sorted(p.relative_to(merged) for p in (merged / folder).rglob("*") if p.is_file())
        assert files and all((whole / f).is_file() for f in files)
        assert {f.parts[1].split(".")[0] for f in files} <= set(SHARDED), files
    for path in (merged / "feedback").iterdir():
        assert (whole / "feedback" / path.name).read_text() == path.read_text()
    # A shard's report edited after the grader wrote it (the blank student "passed") is refused
    # with the key; without it, the points are computed again from the statuses, never read.
    edited = base / "edited"
    shutil.copytree(base / "shard-1", edited)
    data = json.loads((edited / "report.json").read_text())
    row = next(r for r in data["results"] if r["exercises"])
    for exercise in row["exercises"]:
        exercise["points"] = 5
    (edited / "report.json").write_text(json.dumps(data))
    merge[merge.index("shard-1")] = "edited"
    done = _grade_command([*merge, "--out", "refused"], base, **signed)
    assert done.returncode == 2 and "edited/report.json does not verify with COURSE_GRADE_KEY" in done.stderr
    done = _grade_command([*merge, "--out", "unsigned"], base, COURSE_GRADE_KEY="")
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads((base / "unsigned" / "report.json").read_text())
    assert json_of_points(again) == json_of_points(json.loads((merged / "report.json").read_text()))
    assert "merged without COURSE_GRADE_KEY" in " ".join(again["run"]["notes"])


def json_of_points(data: dict) -> dict:
    return {
        (r["student"], e["id"]): (e["status"], e["points"]) for r in data["results"] for e in r["exercises"]
    }


def test_batch_system_files_use_shards_and_merge() -> None:
    script = ROOT / "docs" / "grading" / "slurm-array.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert "#SBATCH --array=1-" in text and '--shard "$K/$N"' in text and "course_tools.grade merge" in text
    manifest = (ROOT / "docs" / "grading" / "k8s-indexed-job.yaml").read_text()
    try:
        import yaml
    except ImportError:  # no PyYAML: the structure, read as text
        assert manifest.count("kind: Job") == 2 and "completionMode: Indexed" in manifest
        assert "JOB_COMPLETION_INDEX + 1" in manifest and "course_tools.grade merge" in manifest
        return
    grade, merge = list(yaml.safe_load_all(manifest))
    assert (grade["apiVersion"], grade["kind"], merge["kind"]) == ("batch/v1", "Job", "Job")
    spec = grade["spec"]
    assert spec["completionMode"] == "Indexed" and spec["template"]["spec"]["restartPolicy"] == "Never"
    for job in (grade, merge):
        container = job["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert int(env["SHARDS"]) == spec["completions"]  # N is the number of indexes
        assert subprocess.run(["bash", "-n"], input=container["args"][0], text=True).returncode == 0
    args = grade["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "JOB_COMPLETION_INDEX + 1" in args and '--shard "$K/$SHARDS"' in args
    assert "course_tools.grade merge" in merge["spec"]["template"]["spec"]["containers"][0]["args"][0]


# --------------------------------------------------------------------------- the Gradescope autograder


def validate_results(data: dict) -> None:
    """results.json against gradescope.RESULTS_SCHEMA: with jsonschema where it is installed, and always
    by hand (the fields Gradescope reads, their types and values)."""
    try:
        import jsonschema
    except ImportError:
        pass
    else:
        jsonschema.validate(data, gradescope.RESULTS_SCHEMA)
    number = (int, float)
    assert isinstance(data, dict)
    assert isinstance(data["score"], number) and data["score"] >= 0
    assert isinstance(data["execution_time"], number) and data["execution_time"] >= 0
    assert isinstance(data["output"], str) and data["output"].strip()
    assert data.get("visibility", "visible") in gradescope.VISIBILITIES
    assert isinstance(data["tests"], list) and data["tests"]
    for test in data["tests"]:
        assert {"name", "number", "score", "max_score", "status", "output", "visibility"} <= set(test)
        assert isinstance(test["name"], str) and isinstance(test["number"], str)
        assert isinstance(test["score"], number) and isinstance(test["max_score"], number)
        assert 0 <= test["score"] <= max(test["max_score"], 0) or test["max_score"] == 0
        assert test["status"] in ("passed", "failed") and isinstance(test["output"], str)
        assert test["visibility"] in gradescope.VISIBILITIES
    assert data["score"] == sum(t["score"] for t in data["tests"])


@pytest.fixture(scope="module")
def autograder(tmp_path_factory, graded_class):
    """The zip built by the command, unpacked as Gradescope would, and run on five submissions."""
    base = tmp_path_factory.mktemp("gradescope")
    zip_path = base / "autograder.zip"
    done = _grade_command(
        [
            sys.executable,
            "-m",
            "course_tools.grade",
            "gradescope",
            "00",
            "--course",
            str(graded_class.course),
            "--out",
            str(zip_path),
            "--cell-timeout",
            "30",
        ],
        base,
    )
    assert done.returncode == 0, done.stderr
    source = base / "source"
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(source)
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
    for script in ("setup.sh", "run_autograder"):
        os.chmod(source / script, modes[script])
    master = make_class.read_master(graded_class.course)
    students = {
        "honest": make_class.honest(master),
        "blank": make_class.blank(master, graded_class.course),
        "wrong": make_class.pitfall(master),
        "crash": make_class.crash(master),
        # One of the hostile class: the checks rebound, the kernel's side of the judge replaced.
        "hostile": make_class.hostile(master, make_class.HOSTILE_ANSWERS["rebinder"]),
    }

    def run(name: str, nb=None, **env: str) -> tuple[dict, subprocess.CompletedProcess]:
        root = base / name
        (root / "submission").mkdir(parents=True)
        (root / "source").symlink_to(source)
        if nb is not None:
            nbformat.write(nb, root / "submission" / f"{NB}.ipynb")
        done = subprocess.run(
            ["bash", str(source / "run_autograder")],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=root,
            env={
                "PATH": os.environ["PATH"],
                "HOME": str(root),
                gradescope.ROOT_ENV: str(root),
                gradescope.PYTHON_ENV: sys.executable,
                **env,
            },
        )
        return json.loads((root / "results" / "results.json").read_text()), done

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(students, pool.map(lambda item: run(*item), students.items())))
    runs["empty"] = run("empty")
    runs["no-python"] = run("no-python", students["honest"], **{gradescope.PYTHON_ENV: "/bin/false"})
    return SimpleNamespace(base=base, zip=zip_path, source=source, modes=modes, runs=runs)


def test_autograder_zip_has_what_gradescope_runs(autograder) -> None:
    names = set(autograder.modes)
    assert {"setup.sh", "run_autograder", "config.json", "requirements.txt"} <= names
    assert autograder.modes["setup.sh"] == 0o755 and autograder.modes["run_autograder"] == 0o755
    assert f"course/solutions/{NB}.ipynb" in names and "course/tests/nbval_sanitize.cfg" in names
    assert "course/course_tools/grading/engine.py" in names and "course/course_utils/checks.py" in names
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith("course/solutions/") and NB not in n for n in names)  # one master only
    requirements = (autograder.source / "requirements.txt").read_text()
    assert "tensorflow==" in requirements and "nbval==" in requirements and "playwright" not in requirements
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", str(autograder.source / script)]).returncode == 0
    config = json.loads((autograder.source / "config.json").read_text())
    assert config["notebook"] == NB and config["timeout"] < 600  # under Gradescope's default limit


@pytest.mark.parametrize(
    "student, score, statuses, hint",
    [
        (
            "honest",
            4,
            dict(uneven_mean="passed", global_mean="passed", global_batch="passed"),
            "MEAN of the replica means",
        ),
        (
            "blank",
            0,
            dict(uneven_mean="failed", global_mean="failed", global_batch="failed"),
            "not done yet",
        ),
        (
            "wrong",
            3,
            dict(uneven_mean="failed", global_mean="passed", global_batch="passed"),
            "one device's answer",
        ),
        (
            "crash",
            0,
            dict(uneven_mean="failed", global_mean="failed", global_batch="failed"),
            "kernel died",
        ),
        (
            "hostile",
            0,
            dict(uneven_mean="failed", global_mean="failed", global_batch="failed"),
            "never answered the grader",
        ),
    ],
)
def test_autograder_results(autograder, graded_class, student, score, statuses, hint) -> None:
    data, done = autograder.runs[student]
    validate_results(data)
    assert data["score"] == score, done.stdout[-3000:]
    tests = {t["name"]: t for t in data["tests"]}
    assert {i: t["status"] for i, t in tests.items()} == statuses
    assert [(t["number"], t["max_score"]) for t in data["tests"]] == [("1", 1), ("2", 1), ("3", 2)]
    assert all(t["visibility"] == "visible" for t in data["tests"]) and data["visibility"] == "visible"
    assert hint in " ".join(t["output"] for t in data["tests"])
    # The same engine as the local grader: the same hints for the same answers.
    local = {"honest": "honest", "blank": "blank", "wrong": "pitfall"}.get(student)
    if local:
        messages = {e["id"]: e["message"] for e in graded_class.results[local]["exercises"]}
        assert {i: t["output"] for i, t in tests.items()} == messages
    if student == "crash":  # not a silent zero: the reason is there for the student
        assert "error" in data["output"] and tests["uneven_mean"]["output"].startswith("(error)")


@pytest.mark.parametrize("case, reason", [("empty", "no .ipynb file"), ("no-python", "could not run")])
def test_autograder_that_cannot_grade_says_why(autograder, case, reason) -> None:
    data, _ = autograder.runs[case]
    validate_results(data)
    assert data["score"] == 0 and reason in data["output"] and data["visibility"] == "visible"
    assert all(t["status"] == "failed" and reason in t["output"] for t in data["tests"])


# --------------------------------------------------------------------------- without the sandbox

#: Started by a student's cell: a process in a session of its own with an empty environment, that
#: waits for the grader's report and rewrites it (what a run must never leave behind).
SURVIVOR = """\
import subprocess as _sp, sys as _sys

_code = (
    "import pathlib, time\\n"
    "report = pathlib.Path({report!r})\\n"
    "for _ in range(600):\\n"
    "    if report.exists():\\n"
    "        report.write_text('{{\\"forged\\": true}}')\\n"
    "        break\\n"
    "    time.sleep(0.2)\\n"
)
_sp.Popen([_sys.executable, "-c", _code], env={{}}, start_new_session=True,
          stdin=_sp.DEVNULL, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL)
"""

#: Rewrites the course's check module on disk (only in the test's copy of the packages).
REWRITER = """\
import course_utils.exercises.setup_and_hardware as _m

if "copied-packages" in _m.__file__:
    with open(_m.__file__, "a") as _f:
        _f.write("\\n# rewritten by a submission\\n")


def global_batch(strategy, per_replica):
    return per_replica
"""


def test_without_the_sandbox_nothing_outlives_its_run_and_a_rewritten_course_stops_the_grades(
    the_course, tmp_path
) -> None:
    """``--sandbox off``: a process a submission leaves behind (own session, empty environment) is
    ended with its run, so the report stays as written; a submission that rewrites the course's
    check module makes its run and every later one an error, not a pass; every row says that the
    sandbox was off."""
    packages = tmp_path / "copied-packages"
    for name in ("course_utils", "course_tools"):
        shutil.copytree(ROOT / name, packages / name, ignore=shutil.ignore_patterns("__pycache__"))
    master = make_class.read_master(the_course.root)
    out = tmp_path / "out"
    klass = tmp_path / "class"
    answers = {
        "a_survivor": {
            "uneven_mean": SURVIVOR.format(report=str(out / "report.json")) + make_class.WRONG_PREDICTION
        },
        "b_rewriter": {"global_batch": REWRITER},
        "c_honest": {},
    }
    for student, student_answers in answers.items():
        path = klass / student / f"{NB}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(nbformat.writes(make_class.with_answers(master, student_answers)))
    command = [sys.executable, "-m", "course_tools.grade", str(klass), "--course", str(the_course.root)]
    command += ["--sandbox", "off", "--out", str(out)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(packages)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    time.sleep(1.0)  # a survivor would write within 0.2 s of the report
    data = json.loads((out / "report.json").read_text())
    got = {r["student"]: (r["status"], [e["status"] for e in r["exercises"]]) for r in data["results"]}
    assert got == {
        "a_survivor": ("graded", ["failed", "passed", "passed"]),
        "b_rewriter": ("error", ["error", "error", "error"]),
        "c_honest": ("error", ["error", "error", "error"]),
    }
    rewritten = next(e for r in data["results"] if r["student"] == "c_honest" for e in r["exercises"])
    assert "changed on disk while the grader ran" in rewritten["message"]
    assert all(report.NO_SANDBOX in r["notes"] for r in data["results"])
    with open(out / "gradebook.csv", newline="") as handle:
        book = list(csv.reader(handle))
    assert book[0][-1] == "sandbox" and {row[-1] for row in book[1:]} == {"off"}
    assert "rewritten" not in (ROOT / "course_utils" / "exercises" / "setup_and_hardware.py").read_text()


def test_a_name_two_exercises_define_is_taken_from_each_ones_own_cell() -> None:
    """Notebook 07's restart_step and pod_task both set PREDICTION: each answer is its own cell's
    (the last definition alone graded restart_step's prediction with pod_task's tuple)."""
    nb07 = course.load_notebook(ROOT / "solutions" / "07_multi_worker_training.ipynb")
    answers = extract.find_answers(submission_of(nb07.master, "07_multi_worker_training.ipynb"), nb07)
    assert "PREDICTION" in answers["restart_step"].source and "PREDICTION" in answers["pod_task"].source
    assert answers["restart_step"].source != answers["pod_task"].source
    assert "worker" in answers["pod_task"].source and "'worker'" not in answers["restart_step"].source


def test_every_master_earns_full_points_from_the_real_grader(tmp_path) -> None:
    """The honest class: a copy of every master, graded with the default settings by the real command,
    passes every exercise (a check cell the judge serves must still run in
    the graded notebook, whatever else the course's cell held)."""
    import shutil

    folder = tmp_path / "masters"
    folder.mkdir()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        shutil.copy(path, folder / path.name)
    done = _grade_command(
        [sys.executable, "-m", "course_tools.grade", str(folder), "--out", str(tmp_path / "out")], tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    wrong = [
        (r.get("notebook"), e.get("id"), e.get("status"), e.get("message", "")[:300])
        for r in report.get("results", [])
        for e in r.get("exercises", [])
        if e.get("status") != "passed"
    ]
    assert report.get("results") and not wrong, wrong


#: The masters with cells tagged grading-skip, read from the masters themselves.
TAGGED = sorted(
    p.stem
    for p in (ROOT / "solutions").glob("*.ipynb")
    if any(extract.SKIP_TAG in c.metadata.get("tags", []) for c in nbformat.read(p, as_version=4).cells)
)


def test_the_courses_demonstration_runs_are_tagged_grading_skip() -> None:
    """07's cluster and fit runs, 03's training runs, 05's policy demonstration and 10's naive and
    right-loss runs only show something; without them, those notebooks grade in under 20 s."""
    assert {
        "03_keras_model_fit",
        "05_loss_scaling_pitfalls",
        "07_multi_worker_training",
        "10_capstone",
    } <= set(TAGGED)


@pytest.mark.parametrize("name", TAGGED)
def test_cells_tagged_grading_skip_are_left_out_of_a_grading_run(name: str) -> None:
    """A master's cells tagged grading-skip are left out of its grading run, and the tag is on no
    cell an answer or a check needs: no cell of the context reads a name only tagged cells bind,
    nor one that a tagged cell rebinds before it (the masters still earn full points without
    them: test_every_master_earns_full_points_from_the_real_grader)."""
    nb = course.load_course(ROOT).notebooks[name]
    answers = extract.find_answers(submission_of(nb.master), nb)
    graded = [c.source for c in extract.build(nb, answers).notebook.cells if c.cell_type == "code"]
    last = max(ex.check_cell for ex in nb.exercises)
    cells = [c for c in nb.master.cells[: last + 1] if c.cell_type == "code"]
    tagged = [k for k, c in enumerate(cells) if extract.SKIP_TAG in c.metadata.get("tags", [])]
    assert tagged and not {cells[k].source for k in tagged} & set(graded)
    kept = [k for k, c in enumerate(cells) if c.source in graded]
    trees = {k: code.parse(c.source) for k, c in enumerate(cells)}
    bound = {k: context.bound_names(t) if t is not None else set() for k, t in trees.items()}
    for k in kept:
        tree = trees[k]
        reads = context.needed_names(tree, cells[k].source) if tree is not None else set()
        for t in (t for t in tagged if t < k):
            # the value a kept cell reads is the one kept cells made: no tagged cell binds it
            # after the last kept cell that does, and a name no kept cell binds is bound by none
            last_kept = max((j for j in kept if j < k and bound[j] & bound[t] & reads), default=-1)
            assert not (bound[t] & reads and t > last_kept), (
                name,
                sorted(bound[t] & reads),
                cells[k].source[:80],
            )


#: 05's global_moments answered wrong (each replica's own moments), with the harness that runs it
#: for the judge replaced in the kernel by one that runs a right answer instead: the registry
#: reached by names the answer puts together at run time, so that the only thing the audit finds
#: is those computed names (no import or name of the course's own code).
HARNESS_FORGER = """\
def global_moments(x):
    mean = tf.reduce_mean(x, axis=0)
    return mean, tf.reduce_mean(x * x, axis=0) - mean * mean


def _right(x):
    context = tf.distribute.get_replica_context()
    count = tf.cast(tf.shape(x)[0], x.dtype)
    total, squares, count = context.all_reduce(
        tf.distribute.ReduceOp.SUM, [tf.reduce_sum(x, axis=0), tf.reduce_sum(x * x, axis=0), count]
    )
    mean = total / count
    return mean, squares / count - mean * mean


_registry = getattr(getattr(course_utils, "exer" + "cises"), "HARN" + "ESSES")
_real = _registry["loss_scaling_pitfalls.moments_on_replicas"]
_registry["loss_scaling_pitfalls.moments_on_replicas"] = lambda f, *a, **k: _real(_right, *a, **k)
"""


def test_a_harness_replaced_in_the_kernel_earns_nothing_in_a_real_run(tmp_path) -> None:
    """In a real grading run (default settings, sandbox where the machine has one), a kernel whose
    harness reports a right answer's run for a wrong answer gets a pass from the judge, which it cannot
    tell from an honest report; the pass rests on the kernel's report and the audit found the
    trick, so it is flagged and earns 0. The same wrong answer without the trick fails."""
    master = ROOT / "solutions" / "05_loss_scaling_pitfalls.ipynb"
    folder = tmp_path / "class"
    folder.mkdir()
    for student, forge in (("forger", True), ("wrong", False)):
        nb = nbformat.read(master, as_version=4)
        cell = next(c for c in nb.cells if role(c) == "solution" and exercise_id(c) == "global_moments")
        cell.source = HARNESS_FORGER if forge else HARNESS_FORGER.split("\n\n\ndef _right")[0]
        nbformat.write(nb, folder / f"{student}.ipynb")
    done = _grade_command(
        [sys.executable, "-m", "course_tools.grade", str(folder), "--out", str(tmp_path / "out")], tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "report.json").read_text())["results"]
    got = {r["student"]: next(e for e in r["exercises"] if e["id"] == "global_moments") for r in results}
    assert got["forger"]["status"] == "flagged" and got["forger"]["points"] == 0, got["forger"]
    assert "calls `getattr()` with a name it computes" in got["forger"]["message"]
    assert "The check said: passed" in got["forger"]["message"]
    # nothing that calls the course's own code: the flag rests on the pass being the kernel's report
    assert "the course's" not in got["forger"]["message"].split("The check said")[0]
    assert got["wrong"]["status"] == "failed" and got["wrong"]["points"] == 0, got["wrong"]


def test_a_wait_for_a_dead_kernels_message_ends_at_once() -> None:
    """The plugin's wait (nbval's get_message in slices): a message already sent is read, also one
    that arrives just after the kernel died; a live kernel is waited for until the timeout, also
    when asking whether it lives fails; a dead one ends the wait as a timeout would, at once."""
    import queue as _queue

    from course_tools.grading import plugin

    class Kernel:
        def __init__(self, messages: list, alive: object) -> None:
            self.messages, self.alive = messages, alive

        def is_alive(self) -> bool:
            if isinstance(self.alive, Exception):
                raise self.alive
            return bool(self.alive)

        def get_message(self, stream: str, timeout: float | None = None) -> object:
            message = self.messages.pop(0) if self.messages else None
            if message is None:
                time.sleep(timeout or 0)
                raise _queue.Empty
            return message

    rec = SimpleNamespace(died_at=None)
    dead = Kernel(["last words", None, "late words"], alive=False)
    wait = plugin._until_dead(dead, dead.get_message, rec)
    assert wait("iopub", timeout=5) == "last words"
    assert wait("iopub", timeout=5) == "late words"  # sent before it died, read one slice later
    assert rec.died_at is None
    start = time.monotonic()
    with pytest.raises(_queue.Empty):
        wait(stream="shell", timeout=5)
    assert time.monotonic() - start < 2 and rec.died_at is not None
    for alive in (True, RuntimeError("no manager")):
        kernel = Kernel([], alive=alive)
        start = time.monotonic()
        with pytest.raises(_queue.Empty):
            plugin._until_dead(kernel, kernel.get_message, SimpleNamespace(died_at=None))(
                "shell", timeout=1.2
            )
        assert 1.1 < time.monotonic() - start < 3


def test_a_kernel_killed_while_the_grader_calls_it_ends_the_run_at_once(tmp_path) -> None:
    """A kernel killed (as for memory) while the judge calls the student's code: the run does not wait
    out the cell's timeout (300 s here); the exercise is an error that says the kernel died."""
    master = ROOT / "solutions" / "00_setup_and_hardware.ipynb"
    nb = nbformat.read(master, as_version=4)
    cell = next(c for c in nb.cells if role(c) == "solution" and exercise_id(c) == "global_batch")
    cell.source = "import os\nimport signal\n\n\ndef global_batch(strategy, per_replica):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(nb, folder / "killed.ipynb")
    start = time.monotonic()
    done = _grade_command(
        [
            sys.executable,
            "-m",
            "course_tools.grade",
            str(folder),
            "--out",
            str(tmp_path / "out"),
            "--cell-timeout",
            "300",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - start < 120
    (result,) = json.loads((tmp_path / "out" / "report.json").read_text())["results"]
    got = {e["id"]: e for e in result["exercises"]}
    assert got["global_batch"]["status"] == "error" and "died" in got["global_batch"]["message"], got[
        "global_batch"
    ]
    assert got["uneven_mean"]["status"] == "passed"


def test_the_autograder_says_when_its_container_has_too_little_memory(tmp_path) -> None:
    """Gradescope's default 768 MB loses kernels to the out-of-memory killer (docs/grading.md, section
    5): the results say so, and what to raise. The limit is the smallest of the process's own
    cgroup's (v2 or v1, as /proc/self/cgroup names it) and those above it; no limit is none."""
    mb = 1024 * 1024
    v2, v1, free = tmp_path / "v2", tmp_path / "v1", tmp_path / "free"
    (v2 / "job" / "sub").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text(f"{768 * mb}\n")
    (v2 / "job" / "sub" / "memory.max").write_text("max\n")
    (tmp_path / "own2").write_text("0::/job/sub\n")
    (v1 / "memory" / "grader").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(f"{4096 * mb}\n")
    (v1 / "memory" / "grader" / "memory.limit_in_bytes").write_text(f"{2048 * mb}\n")
    (tmp_path / "own1").write_text("7:cpu,cpuacct:/grader\n5:memory:/grader\nnot a line\n")
    # a container (v1): /proc/self/cgroup names the host's folder, absent here; the root is its own
    (free / "memory").mkdir(parents=True)
    (free / "memory" / "memory.limit_in_bytes").write_text(f"{512 * mb}\n")
    (tmp_path / "own3").write_text("5:memory:/docker/0123abcd\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    assert gradescope.memory_limit_mb(v2, tmp_path / "own2") == 768  # the parent's limit holds
    assert gradescope.memory_limit_mb(v2, tmp_path / "none") is None
    assert gradescope.memory_limit_mb(v1, tmp_path / "own1") == 2048
    assert gradescope.memory_limit_mb(free, tmp_path / "own3") == 512
    assert gradescope.memory_limit_mb(free, tmp_path / "binary") == 512
    assert gradescope.memory_limit_mb(tmp_path / "empty", tmp_path / "none") is None
    (note,) = gradescope.memory_note(768)
    assert "768 MB" in note and "1024 MB" in note and "Autograder Settings" in note
    assert gradescope.memory_note(953) == [] and gradescope.memory_note(None) == []  # "1 GB" as 10**9 bytes
    assert gradescope.memory_note(899) != []
