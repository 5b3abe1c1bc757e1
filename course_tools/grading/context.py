"""Graders (inside the engine) and the exercise tests: which cells before a check a graded notebook runs.

A check sees the kernel's state: the names the cells before it defined, the devices the set-up
split, the seeds and the policy set. Everything else a notebook runs before its last check is
there to be looked at (a training run that draws a curve, a cluster that prints a table) and
costs the grader time without changing a check's verdict.

:func:`context_cells` reads the cells' syntax and keeps, walking back from the last cell:

1. the cells the caller must keep (solutions, checks, the set-up);
2. a cell that defines, imports or assigns a name a kept cell reads from earlier cells (a
   function body's global names always count: it may run when the cell has rebound them);
3. a cell that may change an object a kept cell reads: it calls a method on it
   (``model.fit(...)``), stores into it (``model.trainable = False``, ``rows[k] = v``), passes
   it to a function (``train(model)``) or calls a notebook function whose body reads it;
4. a cell that changes the process rather than a name: device and thread settings, seeds,
   precision policy, environment variables, the working folder, files written with
   ``%%writefile``;
5. a cell that does not parse (it will fail in front of the grader, as it did for the student).

Names bound by ``import``, ``def`` and ``class`` are read-only here: calling ``tf.constant`` or a
course function does not keep every earlier cell that uses ``tf``.

It is a reading of the source, not of what runs: an object reached another way (inside a list
handed to a function, through ``globals()``) is not followed. The course's own answers are
checked against it by the unit tests; ``grade --whole-notebook`` runs every cell instead.
"""

from __future__ import annotations

import ast
import symtable
from dataclasses import dataclass
from typing import Iterable, Sequence

from . import code

#: Calls that change the process rather than a name: by prefix of the function's last name...
STATE_PREFIXES = ("set_", "use_", "enable_", "disable_", "experimental_connect", "initialize_")
#: ... and by the whole name.
STATE_CALLS = frozenset({"setup", "seed", "chdir", "putenv", "unsetenv", "connect_to_cluster"})
#: IPython magics that change the process, write files later cells may read, or run code the
#: syntax tree cannot see (``%%time``, ``%run``).
STATE_MAGICS = frozenset({"env", "cd", "writefile", "load_ext", "config", "run", "time", "timeit"})
#: Calls that only read their arguments, so passing a needed object to them changes nothing.
READERS = frozenset(
    {
        "print",
        "len",
        "repr",
        "str",
        "int",
        "float",
        "bool",
        "list",
        "tuple",
        "dict",
        "set",
        "sorted",
        "isinstance",
        "type",
        "id",
        "round",
        "abs",
        "min",
        "max",
        "sum",
        "zip",
        "enumerate",
        "range",
        "display",
        "show_figure",
    }
)


#: Methods that only read the object they are called on.
READ_METHODS = frozenset(
    {
        "items",
        "keys",
        "values",
        "get",
        "copy",
        "numpy",
        "result",
        "done",
        "index",
        "count",
        "format",
        "startswith",
    }
)


@dataclass(frozen=True)
class Context:
    """The code cells kept (indices into the caller's list) and, for each, why."""

    kept: frozenset[int]
    why: dict[int, str]


def _base_name(node: ast.AST) -> str | None:
    """``model`` for ``model``, ``model.layers[0].kernel`` and ``model.fit``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _last_name(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _read_only_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        names |= code.imported_names(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def needed_names(tree: ast.Module, source: str) -> set[str]:
    """The names a cell reads from earlier cells.

    Top-level statements are read in order, so ``x = 1; print(x)`` needs no ``x`` while
    ``x = x + 1`` does. A function, class, lambda or comprehension body may run at any time, so
    every global name it reads counts, even one the cell binds too.
    """
    needed: set[str] = set()
    try:
        table = symtable.symtable(code.to_python(source), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        stack.extend(child.get_children())
        needed.update(s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced())
    bound: set[str] = set()

    def use(node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in bound:
                needed.add(node.id)
            return
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for expr in [*getattr(node, "decorator_list", []), *getattr(node, "bases", [])]:
                use(expr)
            arguments = getattr(node, "args", None)
            if isinstance(arguments, ast.arguments):
                for expr in [*arguments.defaults, *arguments.kw_defaults]:
                    if expr is not None:
                        use(expr)
            return  # the body is a scope of its own: read through the symbol table above
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            use(node.generators[0].iter)  # the rest runs in the comprehension's own scope
            return
        for child in ast.iter_child_nodes(node):
            use(child)

    def bind(target: ast.AST) -> None:
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            use(target)  # model.trainable = ... reads model
        else:
            bound.update(code.target_names(target))

    def walk(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                use(node)
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update(code.imported_names(node))
            elif isinstance(node, ast.Assign):
                use(node.value)
                for target in node.targets:
                    bind(target)
            elif isinstance(node, ast.AugAssign):
                use(
                    ast.Name(node.target.id, ast.Load()) if isinstance(node.target, ast.Name) else node.target
                )
                use(node.value)
                bind(node.target)
            elif isinstance(node, ast.AnnAssign):
                if node.value is not None:
                    use(node.value)
                bind(node.target)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.If, ast.While)):
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    use(node.iter)
                    bind(node.target)
                else:
                    use(node.test)
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    use(item.context_expr)
                    if item.optional_vars is not None:
                        bind(item.optional_vars)
                walk(node.body)
            elif isinstance(node, ast.Try):
                walk(node.body)
                for handler in node.handlers:
                    if handler.type is not None:
                        use(handler.type)
                    if handler.name:
                        bound.add(handler.name)
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)
            else:
                use(node)

    walk(tree.body)
    return needed - code.BUILTINS


def function_reads(source: str) -> dict[str, set[str]]:
    """For each function or class the cell defines, the global names its body reads."""
    try:
        table = symtable.symtable(code.to_python(source), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return {}
    found: dict[str, set[str]] = {}
    for child in table.get_children():
        if child.get_type() not in ("function", "class"):
            continue
        names: set[str] = set()
        stack = [child]
        while stack:
            scope = stack.pop()
            stack.extend(scope.get_children())
            names.update(s.get_name() for s in scope.get_symbols() if s.is_global() and s.is_referenced())
        found.setdefault(child.get_name(), set()).update(names - code.BUILTINS)
    return found


def bound_names(tree: ast.Module) -> set[str]:
    """Every name the cell binds at its top level, imports included."""
    names: set[str] = set()
    for node in tree.body:
        for sub in (
            ast.walk(node) if isinstance(node, (ast.If, ast.Try, ast.For, ast.While, ast.With)) else [node]
        ):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update(code.imported_names(sub))
            elif isinstance(sub, ast.Assign):
                for target in sub.targets:
                    names.update(code.target_names(target))
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                names.update(code.target_names(sub.target))
            elif isinstance(sub, (ast.With, ast.AsyncWith)):
                for item in sub.items:
                    if item.optional_vars is not None:
                        names.update(code.target_names(item.optional_vars))
            elif isinstance(sub, ast.NamedExpr):
                names.update(code.target_names(sub.target))
    return names


def changes_process(tree: ast.Module, modules: set[str]) -> str | None:
    """Why the cell changes the process (devices, seeds, environment, files), or None.

    Only a bare function or a module's function counts (``tf.config.set_visible_devices``,
    ``use_virtual_cpus``), not a method of an object (``ax.set_title``).
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _last_name(node.func)
            if name in {"run_line_magic", "run_cell_magic"} and node.args:
                magic = node.args[0]
                if isinstance(magic, ast.Constant) and magic.value in STATE_MAGICS:
                    return f"%{magic.value}"
            elif (name.startswith(STATE_PREFIXES) or name in STATE_CALLS) and (
                isinstance(node.func, ast.Name) or _base_name(node.func) in modules
            ):
                return f"calls {ast.unparse(node.func)}()"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                if "environ" in ast.unparse(target):
                    return "sets os.environ"
    return None


def changes(tree: ast.Module, names: set[str], reads: dict[str, set[str]]) -> str | None:
    """Which of ``names`` the cell may change, or None: it calls a method on one, stores into one,
    passes one to a function, or calls a notebook function (``reads``: function -> the global
    names its body reads) that reads one."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and reads.get(node.id, set()) & names
        ):
            return f"uses {node.id}(), which reads {', '.join(sorted(reads[node.id] & names))}"
        if isinstance(node, ast.Call):
            if (
                isinstance(node.func, ast.Attribute)
                and _base_name(node.func) in names
                and node.func.attr not in READ_METHODS
            ):
                return f"calls {ast.unparse(node.func)}()"
            if _last_name(node.func) not in READERS:
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    if isinstance(arg, ast.Name) and arg.id in names:
                        return f"passes {arg.id} to {_last_name(node.func) or 'a call'}()"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                if isinstance(target, (ast.Attribute, ast.Subscript)) and _base_name(target) in names:
                    return f"changes {ast.unparse(target)}"
    return None


def context_cells(
    sources: Sequence[str], must: Iterable[int], needs: Iterable[str] = (), skip: Iterable[int] = ()
) -> Context:
    """The cells of ``sources`` (code cells, in order) that the cells in ``must`` depend on.

    ``needs`` adds names something outside these cells reads (a student's answer, say); the cells
    in ``skip`` (the course tagged them ``grading-skip``: they only show something) are never kept
    unless ``must`` names them.
    """
    must, skip = set(must), set(skip) - set(must)
    trees = [code.parse(source) for source in sources]
    read_only = set().union(*(_read_only_names(t) for t in trees if t is not None))
    modules = {
        name for t in trees if t is not None for node in ast.walk(t) for name in code.imported_names(node)
    }
    reads: dict[str, set[str]] = {}
    for source in sources:
        for name, names in function_reads(source).items():
            reads.setdefault(name, set()).update(names)
    needed = set(needs)
    why: dict[int, str] = {}
    for index in range(len(sources) - 1, -1, -1):
        tree = trees[index]
        reason = None
        if index in skip:
            continue
        if index in must:
            reason = "kept"
        elif tree is None:
            reason = "does not parse"
        elif bound := bound_names(tree) & needed:
            reason = "defines " + ", ".join(sorted(bound))
        elif changed := changes(tree, needed - read_only, reads):
            reason = changed
        elif process := changes_process(tree, modules):
            reason = process
        if reason is None:
            continue
        why[index] = reason
        if tree is not None:
            needed |= needed_names(tree, sources[index])
    return Context(frozenset(why), why)


def definitions(sources: Sequence[str], reader: str, given: Iterable[str] = ()) -> str:
    """What ``reader`` (code run after the cells ``sources``, an answer run on its own, say) reads
    from those cells: the top-level statements that bind a name it reads from earlier cells, and
    those that bind what these read in turn, as source, in the cells' order.

    It is :func:`context_cells`'s reading, one statement at a time instead of one cell: walking back
    from the last cell, the last statement that binds a needed name is the one in force. ``given``
    names what the caller provides itself (the notebook's imports), never looked for; a name no
    statement binds is left out, so reading it fails as it would in a kernel without it.
    """
    statements = [node for source in sources if (tree := code.parse(source)) for node in tree.body]
    have = set(given)
    module = code.parse(reader)
    needed = (needed_names(module, reader) if module else set()) - have
    kept: list[ast.stmt] = []
    for node in reversed(statements):
        alone = ast.Module([node], [])
        if bound := bound_names(alone) & needed:
            kept.append(node)
            needed = (needed - bound) | (needed_names(alone, ast.unparse(node)) - have)
    return "\n\n".join(ast.unparse(node) for node in reversed(kept))
