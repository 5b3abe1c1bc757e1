"""Graders (inside the engine): the audit, what in an answer reaches for the course's code or plays tricks.

The judge (:mod:`.judge`) decides every exercise outside the student's kernel, on plain data, so
no trick in the kernel can change a check. Two things it cannot tell from an honest answer: an
answer that calls the course's own reference (it "solves" the exercise), and, where the verdict
rests on what a harness reported from the kernel, a patch there (``numpy.mean``, TensorFlow)
that fakes the report. So the grader reads every answer's syntax tree, in its own process and
before anything runs, and lists each place that

* imports or reaches the course's checks, references or grader (``course_utils.exercises``,
  ``.checks``, ``.reference``, ``.capstone``, ``.grading``, ``.grade``, ``tutorial_train_step``);
* assigns to, or deletes, an attribute of a module (``np.allclose = ...``, ``sys.stdout = ...``);
* uses Python's back doors: ``setattr``/``delattr``, ``getattr`` (or ``operator.attrgetter``)
  with a computed name, with one of the names above, or handed around as a value,
  ``exec``/``eval``/``compile``/``__import__``/``importlib``, ``globals()``/``vars()``,
  ``sys.modules``, ``get_ipython``, the harnesses' registry (``HARNESSES``), dunder
  attributes such as ``__dict__``, ``__globals__`` or ``__code__``, and the modules ``ctypes``,
  ``gc``, ``builtins`` and ``unittest.mock``.

A finding is a note for the grader's eyes (:mod:`.verdict`), except on a pass that borrows the
course's code (:func:`borrows`) or rests on a harness's report: such a pass is ``flagged``, no
points until a person has looked. No honest answer in the course's masters has a finding (a test
keeps it so).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Iterator

from . import code

#: Modules of ``course_utils`` that hold checks, reference implementations or the grader.
PROTECTED_MODULES = frozenset({"exercises", "checks", "reference", "capstone", "grading", "grade"})
#: Other names that are the course's own answers, or the harnesses that run an answer for the judge.
PROTECTED_NAMES = frozenset(
    {"tutorial_train_step", "padded_reference", "reference_step", "HARNESSES", "in_kernel"}
)
#: Functions that reach an attribute by a name given as a string (``operator``'s too).
NAMED_ACCESS = frozenset({"getattr", "attrgetter", "methodcaller"})
#: Calls that change objects or run code out of sight of the syntax tree.
BACK_DOOR_CALLS = frozenset(
    {"setattr", "delattr", "exec", "eval", "compile", "__import__", "globals", "vars", "get_ipython"}
)
#: Modules an answer has no business importing.
BACK_DOOR_MODULES = frozenset({"importlib", "ctypes", "gc", "builtins", "unittest", "inspect"})
#: Attributes that reach into an object's or a function's insides.
DUNDERS = frozenset(
    {
        "__dict__",
        "__globals__",
        "__code__",
        "__closure__",
        "__defaults__",
        "__kwdefaults__",
        "__builtins__",
        "__module__",
        "__setattr__",
        "__delattr__",
        "__getattribute__",
        "__subclasses__",
        "__import__",
        "__loader__",
        "__spec__",
        "__class__",
        "__bases__",
        "__mro__",
    }
)
#: IPython magics an answer may use (``%time``, a ``%%writefile`` program, whose text is audited too).
SAFE_MAGICS = frozenset({"time", "timeit", "writefile", "matplotlib", "prun"})
#: Names the course's notebooks bind to modules (used when no import in the notebook says so).
KNOWN_MODULES = frozenset({"tf", "np", "keras", "numpy", "tensorflow", "course_utils", "os", "sys", "plt"})


@dataclass(frozen=True)
class Finding:
    """One place in an answer that a person should look at."""

    exercise: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}"


def module_names(sources: Iterable[str]) -> frozenset[str]:
    """The names that ``import`` statements in these cells bind (``import numpy as np`` -> ``np``)."""
    names = set(KNOWN_MODULES)
    for source in sources:
        tree = code.parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            names |= code.imported_names(node)
    return frozenset(names)


def _root(node: ast.AST) -> str:
    """The name an attribute chain starts from (``np`` for ``np.testing.assert_allclose``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts)) or "an expression"


def _imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        return [base] + [f"{base}.{a.name}" for a in node.names]
    return []


def _store_targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    else:
        return []
    out: list[ast.AST] = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        else:
            out.append(target)
    return out


def _magic(node: ast.AST) -> tuple[str, str]:
    """``(name, cell text)`` of ``get_ipython().run_cell_magic(name, line, text)`` (IPython's form
    of ``%%name``, and of ``%name`` with no text); ``("", "")`` for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return "", ""
    inner = node.func.value
    if not (
        node.func.attr in ("run_line_magic", "run_cell_magic")
        and isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Name)
        and inner.func.id == "get_ipython"
    ):
        return "", ""
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else "" for a in node.args]
    return (args[0] if args else ""), (args[2] if len(args) > 2 else "")


def _findings(tree: ast.AST, modules: frozenset[str]) -> Iterator[tuple[int, str]]:
    allowed: set[int] = set()  # the get_ipython() calls of safe magics
    for node in ast.walk(tree):
        name, text = _magic(node)
        if name in SAFE_MAGICS:
            allowed.add(id(node.func.value))  # type: ignore[attr-defined]
            program = code.parse(text) if text else None
            if program is not None:
                yield from _findings(program, modules | module_names([text]))
    calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        line = getattr(node, "lineno", 0)
        accessor = (
            node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        )
        if accessor in NAMED_ACCESS:
            yield from ((line, what) for what in _named_access(accessor, calls.get(id(node))))
            continue
        for name in _imported_modules(node):
            parts = name.split(".")
            if parts[0] == "course_tools" or (
                parts[0] == "course_utils" and PROTECTED_MODULES & set(parts[1:])
            ):
                yield line, f"imports `{name}`, where the course's checks and answers live"
            elif parts[0] in BACK_DOOR_MODULES or name == "unittest.mock":
                yield line, f"imports `{name}`"
            elif parts[-1] in PROTECTED_NAMES:
                yield line, f"imports `{parts[-1]}`, the course's own implementation"
        for target in _store_targets(node):
            verb = "deletes" if isinstance(node, ast.Delete) else "assigns to"
            if isinstance(target, ast.Attribute) and _root(target) in modules:
                yield line, f"{verb} `{_dotted(target)}`, an attribute of a module"
            elif isinstance(target, ast.Subscript) and (
                _root(target) in {"sys", "os"} or _root(target) in BACK_DOOR_CALLS
            ):
                yield line, f"{verb} an item of `{_dotted(target.value)}`"
        if isinstance(node, ast.Attribute):
            if node.attr in DUNDERS:
                yield line, f"reaches `{node.attr}`"
            elif node.attr in PROTECTED_MODULES and _root(node) in modules:
                yield line, f"reaches `{_dotted(node)}`, where the course's checks and answers live"
            elif node.attr in PROTECTED_NAMES:
                yield line, f"uses `{node.attr}`, the course's own implementation"
            elif node.attr == "modules" and _root(node) == "sys":
                yield line, "reaches `sys.modules`"
        elif isinstance(node, ast.Name) and node.id in PROTECTED_NAMES:
            yield line, f"uses `{node.id}`, the course's own implementation"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in BACK_DOOR_CALLS:  # the built-in, not a method (``model.compile()``)
                yield line, f"calls `{node.func.id}()`"


def _named_access(accessor: str, call: ast.Call | None) -> Iterator[str]:
    """What ``getattr(obj, NAME)`` (``attrgetter(NAME, ...)``, ``methodcaller(NAME)``) reaches, read
    as an attribute would be; a name the source does not write out, or the function used as a
    value (``g = getattr``, ``reduce(getattr, names, obj)``), is a finding of its own."""
    if call is None:
        yield f"uses `{accessor}` as a value (it reaches attributes by names the audit cannot read)"
        return
    args = (
        call.args[1:2]
        if accessor == "getattr"
        else call.args[:1]
        if accessor == "methodcaller"
        else call.args
    )
    if not args or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
        yield f"calls `{accessor}()` with a name it computes"
        return
    for part in (p for a in args for p in str(a.value).split(".")):  # type: ignore[attr-defined]
        if part in PROTECTED_MODULES:
            yield f"reaches `{part}` by name, where the course's checks and answers live"
        elif part in PROTECTED_NAMES:
            yield f"reaches `{part}` by name, the course's own implementation"
        elif part in DUNDERS:
            yield f"reaches `{part}` by name"


def borrows(finding: Finding) -> bool:
    """Whether a finding is the answer reaching for the course's own code (its checks, references or
    grader) rather than playing a trick on a check: the judge cannot tell that from solving it."""
    return (
        "where the course's checks and answers live" in finding.what
        or "the course's own implementation" in finding.what
    )


def audit(exercise: str, source: str, modules: frozenset[str] = KNOWN_MODULES) -> list[Finding]:
    """The findings in one answer (``modules``: the names the notebook binds to modules)."""
    tree = code.parse(source)
    if tree is None:
        return []  # the run reports the syntax error
    modules = modules | module_names([source])
    seen: set[tuple[int, str]] = set()
    out = []
    for line, what in _findings(tree, modules):
        if (line, what) not in seen:
            seen.add((line, what))
            out.append(Finding(exercise, line, what))
    return sorted(out, key=lambda f: (f.line, f.what))
