"""What the grader writes: report.json, report.csv, gradebook.csv, report.md, feedback/ and graded/.

Points: an exercise that passed earns its points (``metadata.course.points`` of the master's
solution cell, default 1), any other status earns 0. A notebook's points are the sum over its
exercises; a student's total is the sum over the notebooks they handed in, out of the sum of the
maximum points of every notebook in the report.

``report.json`` holds everything the other files are written from (results with their notes,
sources and run times; each notebook's points; how the runs were set up), so that
``python -m course_tools.grade merge`` rebuilds the whole report from the shards' JSON files.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from course_utils.errors import first_line

from .verdict import NOTEBOOK_STATUSES

ICONS = {"passed": "✅", "failed": "❌", "error": "⚠️", "timeout": "⏱️", "missing": "➖", "flagged": "🚩"}


@dataclass
class Result:
    """One submission's grade (:meth:`as_json` is its entry in report.json)."""

    student: str
    notebook: str
    status: str
    exercises: list[dict[str, str]]
    passed: int
    total: int
    source: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: Optional[float] = None
    graded_notebook: Any = None
    points: float = 0
    max_points: float = 0
    #: Where the graded notebook was written, relative to the report folder ("" when none was).
    graded_path: str = ""
    #: Peak resident memory of the grading run (pytest, nbval and the kernel) and of the kernel
    #: alone, in MB, sampled; None when it did not run.
    memory_mb: Optional[float] = None
    kernel_mb: Optional[float] = None

    def as_json(self) -> dict[str, Any]:
        return {
            "student": self.student,
            "notebook": self.notebook,
            "status": self.status,
            "exercises": [
                {
                    "id": e["id"],
                    "status": e["status"],
                    "message": e["message"],
                    "points": number(e.get("points", 0)),
                    "max_points": number(e.get("max_points", 0)),
                }
                for e in self.exercises
            ],
            "passed": self.passed,
            "total": self.total,
            "points": number(self.points),
            "max_points": number(self.max_points),
            "source": self.source,
            "notes": list(self.notes),
            "seconds": None if self.seconds is None else round(self.seconds, 1),
            "graded": self.graded_path or None,
            "memory_mb": self.memory_mb,
            "kernel_mb": self.kernel_mb,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Result":
        """A result read back from report.json (``merge``)."""
        return cls(
            student=str(data["student"]),
            notebook=str(data["notebook"]),
            status=str(data["status"]),
            exercises=[dict(e) for e in data.get("exercises", [])],
            passed=int(data.get("passed", 0)),
            total=int(data.get("total", 0)),
            source=str(data.get("source", "")),
            notes=[str(n) for n in data.get("notes", [])],
            seconds=data.get("seconds"),
            points=data.get("points", 0),
            max_points=data.get("max_points", 0),
            graded_path=str(data.get("graded") or ""),
            memory_mb=data.get("memory_mb"),
            kernel_mb=data.get("kernel_mb"),
        )


def number(value: float) -> float:
    """Points as JSON and CSV show them: 2, not 2.0; 1.5 stays 1.5."""
    value = round(float(value), 4)
    return int(value) if value.is_integer() else value


def score(result: Result, worth: dict[str, float]) -> None:
    """Give each exercise of ``result`` its points (``worth``: exercise id -> points), and the totals."""
    for e in result.exercises:
        e["max_points"] = number(worth.get(e["id"], 0))
        e["points"] = e["max_points"] if e["status"] == "passed" else 0
    result.points = number(sum(e["points"] for e in result.exercises))
    result.max_points = number(sum(worth.values()))


def gradebook_notebooks(results: list[Result], notebooks: dict[str, dict[str, float]]) -> list[str]:
    """The gradebook's columns: the course notebooks (with exercises) somebody handed in, in order."""
    present = {r.notebook for r in results}
    return [name for name in sorted(notebooks) if name in present and notebooks[name]]


def student_totals(results: list[Result], notebooks: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One entry per student: points per notebook (None when not handed in) and the total."""
    columns = gradebook_notebooks(results, notebooks)
    most = number(sum(sum(notebooks[n].values()) for n in columns))
    rows: dict[str, dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (r.student.lower(), r.student)):
        row = rows.setdefault(
            r.student,
            {"student": r.student, "notebooks": {n: None for n in columns}, "points": 0, "max_points": most},
        )
        if r.notebook in row["notebooks"]:
            row["notebooks"][r.notebook] = number((row["notebooks"][r.notebook] or 0) + r.points)
    for row in rows.values():
        row["points"] = number(sum(v or 0 for v in row["notebooks"].values()))
    return list(rows.values())


def safe_name(text: str) -> str:
    """A file name for a student id: letters, digits, ``-_.#`` and nothing else."""
    name = re.sub(r"[^\w.#-]+", "_", text, flags=re.UNICODE).strip("._") or "student"
    return name[:100]


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _short(ident: str, message: str) -> str:
    line = first_line(message)
    return re.sub(rf"^Exercise {re.escape(ident)}:\s*", "", line)


def write_json(
    results: list[Result], path: Path, notebooks: dict[str, dict[str, float]], run: dict[str, Any]
) -> None:
    present = {r.notebook for r in results}
    data = {
        "results": [r.as_json() for r in results],
        "students": student_totals(results, notebooks),
        "notebooks": {
            name: {
                "exercises": {i: number(p) for i, p in worth.items()},
                "max_points": number(sum(worth.values())),
            }
            for name, worth in sorted(notebooks.items())
            if name in present
        },
        "run": run,
    }
    # Written whole or not at all: a merge job may be waiting for this file to appear.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


CSV_COLUMNS = [
    "student",
    "notebook",
    "notebook_status",
    "exercise",
    "status",
    "message",
    "passed",
    "total",
    "points",
    "max_points",
    "notebook_points",
    "notebook_max_points",
]


def write_csv(results: list[Result], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            totals = [number(r.points), number(r.max_points)]
            if not r.exercises:
                writer.writerow(
                    [r.student, r.notebook, r.status, "", "", "; ".join(r.notes), r.passed, r.total, "", ""]
                    + totals
                )
            for e in r.exercises:
                writer.writerow(
                    [r.student, r.notebook, r.status, e["id"], e["status"], e["message"], r.passed, r.total]
                    + [number(e.get("points", 0)), number(e.get("max_points", 0))]
                    + totals
                )


def write_gradebook(results: list[Result], path: Path, notebooks: dict[str, dict[str, float]]) -> None:
    """One row per student, one column per notebook (points earned, empty when not handed in), a total."""
    columns = gradebook_notebooks(results, notebooks)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", *columns, "total"])
        for row in student_totals(results, notebooks):
            cells = ["" if row["notebooks"][n] is None else row["notebooks"][n] for n in columns]
            writer.writerow([row["student"], *cells, row["points"]])


def write_markdown(
    results: list[Result], path: Path, header: list[str], notebooks: dict[str, dict[str, float]]
) -> None:
    lines = ["# Grades", ""] + header + [""]
    by_notebook: dict[str, list[Result]] = {}
    for r in results:
        by_notebook.setdefault(r.notebook, []).append(r)
    for notebook in sorted(by_notebook):
        rows = by_notebook[notebook]
        worth = notebooks.get(notebook, {})
        ids = list(worth) or sorted({e["id"] for r in rows for e in r.exercises})
        lines += [f"## {notebook}", ""]
        if worth:
            lines += [
                "Points: "
                + ", ".join(f"`{i}` {number(p)}" for i, p in worth.items())
                + f"; {number(sum(worth.values()))} in all.",
                "",
            ]
        head = ["student", "status", "points", "passed"] + [f"`{i}`" for i in ids] + ["time"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in sorted(rows, key=lambda r: r.student.lower()):
            found = {e["id"]: e for e in r.exercises}
            cells = [
                _cell(r.student),
                r.status,
                f"{number(r.points)}/{number(r.max_points)}",
                f"{r.passed}/{r.total}",
            ]
            for ident in ids:
                e = found.get(ident)
                if e is None:
                    cells.append("")
                elif e["status"] == "passed":
                    cells.append(f"{ICONS['passed']} passed")
                else:
                    cells.append(
                        _cell(f"{ICONS.get(e['status'], '')} {e['status']}: {_short(ident, e['message'])}")
                    )
            cells.append(f"{r.seconds:.0f} s" if r.seconds is not None else "")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    columns = gradebook_notebooks(results, notebooks)
    if columns:
        lines += ["## Totals", "", "Points per student and notebook (the same numbers as gradebook.csv).", ""]
        head = ["student", *columns, "total"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for row in student_totals(results, notebooks):
            cells = [_cell(row["student"])]
            cells += ["" if row["notebooks"][n] is None else str(row["notebooks"][n]) for n in columns]
            cells.append(f"{row['points']}/{row['max_points']}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    flagged = [(r, e) for r in results for e in r.exercises if e["status"] == "flagged"]
    if flagged:
        lines += [
            "## Flagged for review",
            "",
            "These answers reach for the course's checks, the grader or Python's back doors (see "
            "docs/grading.md). They earn no points until a person has looked; the check's own result "
            "ends each line.",
            "",
        ]
        for r, e in sorted(flagged, key=lambda pair: (pair[0].notebook, pair[0].student.lower())):
            lines.append(f"- **{_cell(r.student)}**, {r.notebook}, `{e['id']}`: {_cell(e['message'])}")
        lines.append("")
    noted = [r for r in results if r.notes]
    if noted:
        lines += ["## Notes", ""]
        for r in sorted(noted, key=lambda r: (r.notebook, r.student.lower())):
            lines.append(f"- **{_cell(r.student)}**, {r.notebook} (`{_cell(r.source)}`):")
            lines += [f"  - {_cell(n)}" for n in r.notes]
        lines.append("")
    path.write_text("\n".join(lines))


def feedback_text(student: str, results: list[Result]) -> str:
    lines = [f"# Feedback for {student}", ""]
    for r in sorted(results, key=lambda r: r.notebook):
        lines += [
            f"## {r.notebook}: {r.passed} of {r.total} exercises passed, "
            f"{number(r.points)} of {number(r.max_points)} points",
            "",
        ]
        if r.status == "invalid":
            lines += [
                "Your notebook could not be graded: "
                + (r.notes[0] if r.notes else "it could not be read")
                + ".",
                "",
            ]
        elif r.status in ("timeout", "error"):
            lines += [f"Grading note ({r.status}): " + (r.notes[0] if r.notes else ""), ""]
        for e in r.exercises:
            lines += [
                f"### `{e['id']}`: {e['status']} ({number(e.get('points', 0))}/{number(e.get('max_points', 0))})",
                "",
            ]
            message = e["message"].strip()
            if message:
                lines += [message, ""]
    return "\n".join(lines).rstrip() + "\n"


def graded_copy(result: Result, cells: dict[int, dict[str, Any]]) -> Any:
    """The graded notebook with the outputs of the run, for the grader to open."""
    import nbformat

    nb = copy.deepcopy(result.graded_notebook)
    number = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        record = cells.get(number)
        number += 1
        if not record:
            continue
        outputs = []
        for output in record.get("outputs", []):
            try:
                outputs.append(nbformat.from_dict(output))
            except Exception:
                continue
        cell.outputs = outputs
    return nb


def write_all(
    results: list[Result],
    out: Path,
    header: list[str],
    notebooks: dict[str, dict[str, float]],
    run_cells: dict[int, dict[int, dict[str, Any]]],
    run: Optional[dict[str, Any]] = None,
) -> None:
    """Every report file. ``notebooks`` maps each course notebook to its exercises' points;
    ``run_cells`` maps ``id(result)`` to its run's cell records (a result without any keeps the
    outputs its graded notebook already has); ``run`` says how the runs were set up (report.json)."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    by_student: dict[str, list[Result]] = {}
    for r in results:
        by_student.setdefault(r.student, []).append(r)
    files: dict[str, str] = {}
    used: set[str] = set()
    for student in sorted(by_student):
        name = safe_name(student)
        while name.lower() in used:
            name += "_"
        used.add(name.lower())
        files[student] = name
    feedback = out / "feedback"
    feedback.mkdir(exist_ok=True)
    for old in feedback.glob("*.md"):
        old.unlink()
    for student, rows in by_student.items():
        (feedback / f"{files[student]}.md").write_text(feedback_text(student, rows))
    graded = out / "graded"
    if graded.is_dir():
        for old in graded.glob("*/*.ipynb"):
            old.unlink()
    for r in results:
        r.graded_path = ""
        if r.graded_notebook is None:
            continue
        folder = graded / files[r.student]
        folder.mkdir(parents=True, exist_ok=True)
        nb = graded_copy(r, run_cells.get(id(r), {}))
        (folder / f"{r.notebook}.ipynb").write_text(nbformat.writes(nb))
        r.graded_path = f"graded/{files[r.student]}/{r.notebook}.ipynb"
    write_csv(results, out / "report.csv")
    write_gradebook(results, out / "gradebook.csv", notebooks)
    write_markdown(results, out / "report.md", header, notebooks)
    # Last: a report.json means every other file of this report is there (a merge waits for it).
    write_json(results, out / "report.json", notebooks, run or {})


def counts(results: list[Result]) -> dict[str, int]:
    """How many notebooks have each status."""
    return {s: sum(r.status == s for r in results) for s in NOTEBOOK_STATUSES}


def header(results: list[Result], run: dict[str, Any]) -> list[str]:
    """The report's opening lines: what was graded, how the runs were set up, what statuses mean.

    ``run``: ``env`` (the runs' environment variables), ``limits`` (timeouts and sandbox, as a
    sentence), ``skipped`` (course notebooks that could not be read), ``changed`` (submissions
    changed on disk during grading), ``shard`` (``{"index", "count", "class_size"}`` for one shard).
    """
    found = counts(results)
    lines = [
        f"{len(results)} submission(s) from {len({r.student for r in results})} student(s): "
        + ", ".join(f"{n} {s}" for s, n in found.items() if n)
        + "."
        if results
        else "No submission in this report.",
    ]
    shard = run.get("shard")
    if shard:
        lines += [
            "",
            f"Shard {shard['index']} of {shard['count']}: {len(results)} of the class's "
            f"{shard['class_size']} submission(s). Combine the shards with "
            "`python -m course_tools.grade merge`.",
        ]
    lines += [
        "",
        "Runs: " + " ".join(f"{k}={v}" for k, v in run.get("env", {}).items()) + f"; {run.get('limits', '')}",
        "",
        "Exercise status: **passed** the check printed its [pass] line (the exercise earns its "
        "points); **failed** the check raised ExerciseError: the answer is wrong, or the student's code "
        "raised while the check called it (the hint says why); **error** the student's exercise cell "
        "raised, or the check itself could not run; **timeout** did not finish in time; **missing** no "
        "code found.",
    ]
    for note in run.get("notes", []):
        lines += ["", note]
    if run.get("skipped"):
        lines += ["", "Course notebooks skipped: " + "; ".join(run["skipped"])]
    if run.get("changed"):
        lines += [
            "",
            "**Warning:** these submissions changed on disk during grading (run with the "
            "sandbox to prevent it): " + ", ".join(run["changed"]),
        ]
    return lines
