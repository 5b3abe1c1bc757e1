"""Authoring: the student notebooks in ``notebooks/`` are generated from the masters in ``solutions/``.

Usage::

    python -m course_utils.authoring build     # write notebooks/ (and refresh the masters' headers)
    python -m course_utils.authoring check     # exit 1 when notebooks/ or a header is stale
    python -m course_utils.authoring outputs   # re-execute solutions/ in place (reference outputs)

Conventions in a master (all in cell metadata under ``"course"``):

* ``{"role": "badges"}``: a markdown cell rewritten from :data:`BADGES` with the configured
  repository address (``[tool.course]`` in ``pyproject.toml``);
* ``{"role": "setup"}``: the set-up code cell, rewritten from :data:`SETUP`;
* ``{"role": "solution", "exercise": ID}``: a code cell whose lines between ``### BEGIN SOLUTION``
  and ``### END SOLUTION`` become, in the student version, a placeholder raising
  ``NotImplementedError`` that names the exercise;
* ``{"role": "check", "exercise": ID}``: the check cell of that exercise, kept as it is.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"

BADGES = (
    "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    "(https://colab.research.google.com/github/{slug}/blob/{branch}/{folder}/{name})"
    " &nbsp; [View on GitHub]({repository}/blob/{branch}/{folder}/{name})"
)

SETUP = '''\
# Set-up. On Colab (or wherever course_utils is missing) this installs the course helpers
# without touching the runtime's own TensorFlow; then it reports what this runtime has.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("course_utils") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           "course-utils @ git+{repository}@{branch}"])

import course_utils

settings = course_utils.setup()'''

OUTPUT_ENV = {"COURSE_STRATEGY": "default", "COURSE_FAST": "1", "COURSE_OFFLINE": "1"}


class AuthoringError(Exception):
    """A master notebook breaks one of the conventions above."""


# --------------------------------------------------------------------------- configuration


def find_root(start: Optional[Path] = None) -> Path:
    """The course folder: the nearest parent holding ``pyproject.toml`` and ``solutions/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "solutions").is_dir():
            return folder
    raise AuthoringError("Run this from inside the course folder (no pyproject.toml + solutions/ found).")


def course_config(root: Path) -> dict[str, str]:
    """``[tool.course]`` of ``pyproject.toml``: ``repository`` and ``branch``."""
    import tomllib

    data = tomllib.loads((root / "pyproject.toml").read_text())
    config = data.get("tool", {}).get("course", {})
    repository = str(config.get("repository", "")).rstrip("/")
    if not repository.startswith("https://github.com/"):
        raise AuthoringError("[tool.course] repository must be a https://github.com/OWNER/REPO address.")
    return {"repository": repository, "branch": str(config.get("branch", "main"))}


# --------------------------------------------------------------------------- exercises


@dataclass(frozen=True)
class Exercise:
    """One exercise of a notebook: its id and the indices of its solution and check cells."""

    id: str
    solution_cell: int
    check_cell: Optional[int]


def role(cell: Any) -> str:
    return str(cell.get("metadata", {}).get("course", {}).get("role", ""))


def exercise_id(cell: Any) -> str:
    return str(cell.get("metadata", {}).get("course", {}).get("exercise", ""))


def exercises(nb: Any) -> list[Exercise]:
    """The exercises of a notebook, in order, validated (unique ids, one check each)."""
    found: dict[str, list[Optional[int]]] = {}
    for index, cell in enumerate(nb.cells):
        if role(cell) in {"solution", "check"}:
            ident = exercise_id(cell)
            if not ident:
                raise AuthoringError(f"cell {index}: a {role(cell)} cell needs an 'exercise' id.")
            slots = found.setdefault(ident, [None, None])
            slot = 0 if role(cell) == "solution" else 1
            if slots[slot] is not None:
                raise AuthoringError(f"exercise {ident!r} has two {role(cell)} cells.")
            slots[slot] = index
    result = []
    for ident, (solution, check) in found.items():
        if solution is None:
            raise AuthoringError(f"exercise {ident!r} has a check cell but no solution cell.")
        if check is None or check < solution:
            raise AuthoringError(f"exercise {ident!r} needs a check cell after its solution cell.")
        result.append(Exercise(ident, solution, check))
    return result


def blank_solution(source: str, ident: str) -> str:
    """Replace every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region by a placeholder."""
    out: list[str] = []
    inside = False
    regions = 0
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise AuthoringError(f"exercise {ident!r}: {BEGIN} inside another region.")
            inside = True
            regions += 1
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(
                f'{indent}raise NotImplementedError("Exercise {ident}: replace this line with your code")'
            )
        elif stripped == END:
            if not inside:
                raise AuthoringError(f"exercise {ident!r}: {END} without {BEGIN}.")
            inside = False
        elif not inside:
            out.append(line)
    if inside or regions == 0:
        raise AuthoringError(f"exercise {ident!r}: its cell needs a complete {BEGIN} ... {END} region.")
    return "\n".join(out)


# --------------------------------------------------------------------------- generation


def _render_headers(nb: Any, name: str, folder: str, config: dict[str, str]) -> Any:
    nb = copy.deepcopy(nb)
    slug = config["repository"].removeprefix("https://github.com/")
    for cell in nb.cells:
        if role(cell) == "badges":
            cell.source = BADGES.format(slug=slug, folder=folder, name=name, **config)
        elif role(cell) == "setup":
            new = SETUP.format(**config)
            if cell.source != new:
                cell.source = new
                cell.outputs = []
                cell.execution_count = None
    return nb


def student_version(master: Any, name: str, config: dict[str, str]) -> Any:
    """The student notebook of a master: placeholders, no outputs, headers for notebooks/."""
    exercises(master)  # validate first
    nb = _render_headers(master, name, "notebooks", config)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            if role(cell) == "solution":
                cell.source = blank_solution(cell.source, exercise_id(cell))
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in {"course", "tags"}}
    keep = {"kernelspec", "language_info", "colab", "accelerator", "course"}
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in keep}
    nb.metadata.pop("language_info", None)
    return nb


def _dumps(nb: Any) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def plan(root: Path) -> dict[Path, str]:
    """Every file ``build`` would write, with its content."""
    import nbformat

    config = course_config(root)
    files: dict[Path, str] = {}
    masters = sorted((root / "solutions").glob("*.ipynb"))
    if not masters:
        raise AuthoringError("solutions/ holds no notebook.")
    for path in masters:
        master = nbformat.read(path, as_version=4)
        try:
            refreshed = _render_headers(master, path.name, "solutions", config)
            files[path] = _dumps(refreshed)
            files[root / "notebooks" / path.name] = _dumps(
                student_version(refreshed, path.name, config)
            )
        except AuthoringError as error:
            raise AuthoringError(f"{path.name}: {error}") from None
    return files


def stale(root: Path) -> list[Path]:
    """Generated files that differ from what ``build`` would write, and student files without a master."""
    out = [p for p, text in plan(root).items() if not p.is_file() or p.read_text() != text]
    masters = {p.name for p in (root / "solutions").glob("*.ipynb")}
    out += [p for p in sorted((root / "notebooks").glob("*.ipynb")) if p.name not in masters]
    return out


def build(root: Path) -> list[Path]:
    """Write notebooks/ (and refresh headers of the masters); return what changed."""
    (root / "notebooks").mkdir(exist_ok=True)
    masters = {p.name for p in (root / "solutions").glob("*.ipynb")}
    changed = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        if path.name not in masters:
            path.unlink()
            changed.append(path)
    for path, text in plan(root).items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


def execute_in_place(
    path: Path, env: Optional[dict[str, str]] = None, timeout: int = 600
) -> None:
    """Execute a master notebook in its own folder and store its outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
            record_timing=False,
        ).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    nb.metadata.pop("widgets", None)
    path.write_text(_dumps(nb))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.authoring", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check", "outputs"])
    parser.add_argument("notebooks", nargs="*", help="with outputs: only these masters (names or paths)")
    args = parser.parse_args(argv)
    try:
        root = find_root()
        if args.command == "build":
            changed = build(root)
            for path in changed:
                print(f"wrote {path.relative_to(root)}")
            print(f"notebooks/ is up to date ({len(changed)} file(s) written).")
            return 0
        if args.command == "check":
            bad = stale(root)
            for path in bad:
                print(f"stale: {path.relative_to(root)}")
            if bad:
                print("Run `python -m course_utils.authoring build` (or `make notebooks`) and commit the result.")
                return 1
            print("notebooks/ matches solutions/.")
            return 0
        targets = sorted((root / "solutions").glob("*.ipynb"))
        if args.notebooks:
            wanted = {Path(n).name if n.endswith(".ipynb") else Path(n).name + ".ipynb" for n in args.notebooks}
            wanted |= {Path(n).name for n in args.notebooks}
            targets = [p for p in targets if p.name in wanted or any(p.name.startswith(w) for w in args.notebooks)]
        build(root)
        for path in targets:
            print(f"executing {path.relative_to(root)} ...", flush=True)
            execute_in_place(path, OUTPUT_ENV)
        build(root)
        return 0
    except AuthoringError as error:
        print(f"authoring: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
