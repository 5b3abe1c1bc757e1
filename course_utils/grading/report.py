"""What the grader writes: report.json, report.csv, report.md, feedback/ and graded/."""

from __future__ import annotations

import copy
import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ICONS = {"passed": "✅", "failed": "❌", "error": "⚠️", "timeout": "⏱️", "missing": "➖"}


@dataclass
class Result:
    """One submission's grade (the first six fields are the report.json schema)."""

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

    def as_json(self) -> dict[str, Any]:
        return {
            "student": self.student,
            "notebook": self.notebook,
            "status": self.status,
            "exercises": [
                {"id": e["id"], "status": e["status"], "message": e["message"]} for e in self.exercises
            ],
            "passed": self.passed,
            "total": self.total,
        }


def first_line(message: str) -> str:
    from ..checks import first_line as hint_first_line

    return hint_first_line(message)


def safe_name(text: str) -> str:
    """A file name for a student id: letters, digits, ``-_.#`` and nothing else."""
    name = re.sub(r"[^\w.#-]+", "_", text, flags=re.UNICODE).strip("._") or "student"
    return name[:100]


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _short(ident: str, message: str) -> str:
    line = first_line(message)
    return re.sub(rf"^Exercise {re.escape(ident)}:\s*", "", line)


def write_json(results: list[Result], path: Path) -> None:
    path.write_text(
        json.dumps({"results": [r.as_json() for r in results]}, indent=2, ensure_ascii=False) + "\n"
    )


def write_csv(results: list[Result], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["student", "notebook", "notebook_status", "exercise", "status", "message", "passed", "total"]
        )
        for r in results:
            if not r.exercises:
                writer.writerow(
                    [r.student, r.notebook, r.status, "", "", "; ".join(r.notes), r.passed, r.total]
                )
            for e in r.exercises:
                writer.writerow(
                    [r.student, r.notebook, r.status, e["id"], e["status"], e["message"], r.passed, r.total]
                )


def write_markdown(
    results: list[Result], path: Path, header: list[str], exercise_ids: dict[str, list[str]]
) -> None:
    lines = ["# Grades", ""] + header + [""]
    by_notebook: dict[str, list[Result]] = {}
    for r in results:
        by_notebook.setdefault(r.notebook, []).append(r)
    for notebook in sorted(by_notebook):
        rows = by_notebook[notebook]
        ids = exercise_ids.get(notebook) or sorted({e["id"] for r in rows for e in r.exercises})
        lines += [f"## {notebook}", ""]
        head = ["student", "status", "score"] + [f"`{i}`" for i in ids] + ["time"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in sorted(rows, key=lambda r: r.student.lower()):
            found = {e["id"]: e for e in r.exercises}
            cells = [_cell(r.student), r.status, f"{r.passed}/{r.total}"]
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
        lines += [f"## {r.notebook}: {r.passed} of {r.total} exercises passed", ""]
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
            lines += [f"### `{e['id']}`: {e['status']}", ""]
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
    exercise_ids: dict[str, list[str]],
    run_cells: dict[int, dict[int, dict[str, Any]]],
) -> None:
    """Every report file; ``run_cells`` maps ``id(result)`` to its run's cell records."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    write_json(results, out / "report.json")
    write_csv(results, out / "report.csv")
    write_markdown(results, out / "report.md", header, exercise_ids)
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
        if r.graded_notebook is None:
            continue
        folder = graded / files[r.student]
        folder.mkdir(parents=True, exist_ok=True)
        nb = graded_copy(r, run_cells.get(id(r), {}))
        (folder / f"{r.notebook}.ipynb").write_text(nbformat.writes(nb))


def header(
    results: list["Result"],
    counts: dict[str, int],
    env: dict[str, str],
    limits: str,
    skipped: list[str],
    changed: list[str],
) -> list[str]:
    """The report's opening lines: what was graded, how the runs were set up, what statuses mean."""
    lines = [
        f"{len(results)} submission(s) from {len({r.student for r in results})} student(s): "
        + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + ".",
        "",
        "Runs: " + " ".join(f"{k}={v}" for k, v in env.items()) + f"; {limits}",
        "",
        "Exercise status: **passed** the check printed its [pass] line; **failed** the check raised "
        "ExerciseError (the hint says why); **error** another exception, in the student's cell or "
        "in the check; **timeout** did not finish in time; **missing** no code found.",
    ]
    if skipped:
        lines += ["", "Course notebooks skipped: " + "; ".join(skipped)]
    if changed:
        lines += [
            "",
            "**Warning:** these submissions changed on disk during grading (run with the "
            "sandbox to prevent it): " + ", ".join(changed),
        ]
    return lines
