"""Graders (inside the engine) and the exercise tests: reading Python source as a notebook cell holds it.

Magics, nbval markers, the names a cell defines and the names an import binds.
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Iterable

#: nbval's comment markers (``# NBVAL_SKIP`` ...): a student's copy may carry any of them.
NBVAL_MARKER = re.compile(
    r"^\s*#\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$", re.IGNORECASE | re.MULTILINE
)
#: Lines that would run a shell or a package manager from the grading kernel.
SHELL_LINE = re.compile(r"^(\s*)(!|%%?(pip|conda|sh|bash|system|sx)\b)(.*)$", re.MULTILINE)

BUILTINS = frozenset(dir(builtins)) | {"get_ipython", "display", "__file__", "__name__"}


def cell_source(cell: object) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    source = cell.get("source", "") if isinstance(cell, dict) else ""
    if isinstance(source, list):
        return "".join(str(part) for part in source)
    return source if isinstance(source, str) else ""


def strip_markers(source: str) -> str:
    """Remove nbval comment markers, so that no cell can ask to be skipped or to raise."""
    return NBVAL_MARKER.sub("", source)


def neutralise_shell(source: str) -> str:
    """Comment out ``!cmd`` and ``%pip``-style lines: a grading kernel runs no shell commands."""
    return SHELL_LINE.sub(r"\1# (not run by the grader) \2\4", source)


def to_python(source: str) -> str:
    """IPython syntax (magics, ``!``) turned into plain Python, as the kernel would see it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with ipykernel
        return "\n".join(
            "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
        )
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # a transformer can choke on broken code; the parser will say so
        return source


def parse(source: str) -> ast.Module | None:
    """The syntax tree of a cell, or None when it does not parse."""
    try:
        return ast.parse(to_python(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def target_names(node: ast.AST) -> Iterable[str]:
    """The names an assignment target binds: ``a``, ``b`` and ``c`` for ``a, (b, *c)``; an
    attribute or an item binds none."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from target_names(element)
    elif isinstance(node, ast.Starred):
        yield from target_names(node.value)


def imported_names(node: ast.AST) -> set[str]:
    """The names an ``import`` statement binds (``import numpy as np`` -> ``np``,
    ``import os.path`` -> ``os``, ``from x import *`` -> none); none for any other node."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return set()
    return {a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"}


def defined_names(source: str, *, imports: bool = False) -> set[str]:
    """Top-level names a cell defines: functions, classes, assignments (and imports if asked).

    A cell that does not parse is read with a regular expression, so that a student's answer
    with a syntax error is still recognised as their answer (and then reported as an error).
    """
    tree = parse(source)
    if tree is None:
        found = set(re.findall(r"^(?:async\s+)?def\s+([A-Za-z_]\w*)", source, re.MULTILINE))
        found |= set(re.findall(r"^class\s+([A-Za-z_]\w*)", source, re.MULTILINE))
        found |= set(re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", source, re.MULTILINE))
        return found
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(target_names(target))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            names.update(target_names(node.target))
        elif imports:
            names |= imported_names(node)
    return names


def used_names(source: str) -> set[str]:
    """Names a cell reads but never binds itself (its free names), builtins excluded.

    Any name the cell binds anywhere (parameters, local assignments, loop and comprehension
    variables, imports) counts as its own, so the answer errs on the side of fewer helpers.
    """
    tree = parse(source)
    if tree is None:
        return set()
    loads: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= imported_names(node)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loads - bound - BUILTINS


def normalise(source: str) -> str:
    """Source with blank lines and trailing spaces removed, for comparing cells."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines() if line.strip())
