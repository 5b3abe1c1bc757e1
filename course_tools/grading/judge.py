"""Graders (inside the runner): the judge, a process that never runs student code and decides the grade.

For every exercise (each has its entry in :data:`JUDGED`), the grading run does not run the check
in the student's kernel. The check cell of the graded notebook becomes ``serve(ID, name=function)``
(:func:`serve_source`, and :mod:`course_tools.grading.answers` on the kernel's side); the runner starts
this module as a process of its own (``python -m course_tools.grading.judge``) and gives it each run's
job before that run's notebook starts.
For each exercise the kernel serves, the judge calls the course's own check function here, with
:class:`Remote` stand-ins for the student's functions: each call sends its arguments to the
kernel, which calls the student's function and sends back what it returned or raised, as plain
data. The check computes every reference itself, in this process, on the inputs it chooses,
including cases drawn here at grading time (:data:`course_utils.exercises.UNSEEN`), and its outcome
is the verdict. A prediction (``"literal:NAME"``, ``"returns:NAME"``) is read from the answer's
source (literals, arithmetic on numbers and a few functions of numbers: :func:`constant`), never run.

The kernel can only answer: it never sees the check, its references, its frame or its output,
and what it sends is judged, never trusted as a verdict. The judge's records go to the runner
through this process's standard output, each with an HMAC under a key the kernel never sees: the
sandbox puts the kernel in its own PID namespace, and without it a line the kernel writes into this
pipe through /proc does not verify. Only the run's own kernel is answered (its process descends from
the run's). One record a line: ``{"exercise", "status", "message", "observed"}`` for each exercise judged, then
``{"end": true}``; an exercise the judge gave no verdict is not graded. One judge serves a grader's
runs one after another (:func:`main`), each under a key of its own.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import hmac
import importlib
import io
import json
import math
import operator
import os
import queue
import random
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from .answers import KernelObject, NotPlainData, decode, encode, read_message, write_message

#: Virtual CPU devices of the judge's TensorFlow: the most replicas a judged check runs on.
JUDGE_CPUS = 4

#: The socket's file name in the run's folder (the kernel's current directory).
SOCKET = "judge.sock"


@dataclass(frozen=True)
class Judged:
    """How the judge calls an exercise's check: ``course_utils.exercises.<module>.<check>(*args, **kwargs)``.

    Each of ``args`` is ``"fn:NAME"`` (the student's function ``NAME``, called in the kernel),
    ``"literal:NAME"`` (the value of ``NAME = <prediction>`` in the answer's source),
    ``"returns:NAME"`` (a function returning what the student's function ``NAME`` returns, read
    from its source): predictions are read (:func:`prediction`), never run; or ``"course:NAME"``
    (the course's own ``NAME`` of the check's module, where the notebook passes its cell's copy) or
    ``"none:NAME"`` (``None``: what only the notebook's kernel has, such as a file its cells wrote,
    which the check does without) or ``"kernel:NAME"`` (the kernel's own object ``NAME``, such as its
    cluster's strategy, which only the check's harness, run in the kernel, uses: a
    :class:`~course_tools.grading.answers.KernelObject`).
    """

    module: str
    check: str
    args: tuple[str, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: Keywords of the notebook's check call that the judge leaves out: they hand the check what the
    #: notebook's own run observed (a cluster's layout), which only that kernel has.
    leaves_out: tuple[str, ...] = ()
    #: A function of the check's module giving the names a prediction may use, ``{NAME: number}``
    #: (the numbers a cell above printed, computed here): ``PREDICTION = DATA_LOSS + 4 * PENALTY``.
    known: str = ""

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(a[3:] for a in self.args if a.startswith("fn:"))

    @property
    def handed(self) -> tuple[str, ...]:
        """The names the kernel hands the grader: the student's functions and the kernel's objects."""
        return tuple(a.partition(":")[2] for a in self.args if a.startswith(("fn:", "kernel:")))

    @property
    def literals(self) -> tuple[str, ...]:
        """The names read from the answer's source."""
        return tuple(a.partition(":")[2] for a in self.args if a.startswith(("literal:", "returns:")))


# fmt: off
#: How the judge calls each exercise's check outside the student's kernel: every exercise of the
#: course has its entry (a graded notebook refuses one without).
JUDGED: dict[str, Judged] = {
    "uneven_mean": Judged("setup_and_hardware", "check_uneven_mean", ("returns:uneven_mean",)),
    "data_parallel_gradient": Judged("data_parallelism", "check_data_parallel_gradient",
                                     ("fn:data_parallel_gradient",)),
    "updates_per_epoch": Judged("data_parallelism", "check_updates_per_epoch", ("literal:UPDATES_ON_2_REPLICAS",)),
    "epoch_traffic": Judged("data_parallelism", "check_epoch_traffic", ("fn:epoch_traffic",)),
    "choose_strategy": Judged("strategy_types", "check_choose_strategy", ("fn:choose_strategy",)),
    "reduce_prediction": Judged("strategy_types", "check_reduce_prediction", ("literal:PREDICTION",)),
    "scaled_batch_and_lr": Judged("keras_model_fit", "check_scaled_batch_and_lr", ("fn:scaled_batch_and_lr",)),
    "mean_loss_factor": Judged("custom_training_loops", "check_mean_loss_factor", ("literal:LOSS_FACTOR_ON_4",)),
    "same_rate_loss": Judged("keras_model_fit", "check_same_rate_loss", ("literal:HIGHER_LOSS",)),
    "adam_update_factor": Judged("custom_training_loops", "check_adam_update_factor", ("literal:PREDICTION",)),
    "pitfall_factors": Judged("loss_scaling_pitfalls", "check_pitfall_factors", ("literal:FACTORS",)),
    "predict_clip_factor": Judged("loss_scaling_pitfalls", "check_predict_clip_factor", ("literal:PREDICTION",)),
    "lone_example_factor": Judged("loss_scaling_pitfalls", "check_lone_example_factor",
                                  ("literal:LONE_EXAMPLE_FACTOR",)),
    "shard_count": Judged("parameter_servers", "check_shard_count", ("literal:PREDICTION",)),
    "trace_count": Judged("tpu_and_hardware_detection", "check_trace_count", ("literal:TRACES",)),
    "replica_batches": Judged("tpu_and_hardware_detection", "check_replica_batches", ("literal:BATCHES",)),
    "ps_placement": Judged("parameter_servers", "check_ps_placement", ("fn:ps_placement",),
                           leaves_out=("observed",)),
    "pipelined_throughput": Judged("performance", "check_pipelined_throughput", ("fn:pipelined_throughput",)),
    "jax_collectives": Judged("keras_distribution_on_jax", "check_collectives", ("literal:PREDICTION",)),
    "jax_port_factor": Judged("keras_distribution_on_jax", "check_port_factor", ("literal:PORT_FACTOR",)),
    # judged on the two times the student saw and pasted (SHOWN), never on a later run's timings
    "call_cost_prediction": Judged("performance", "check_call_cost_prediction",
                                   ("literal:SHOWN", "literal:PREDICTION")),
    "call_cost_explanation": Judged("performance", "check_call_cost_explanation", ("literal:EXPLANATION",)),
    # distributed code: the check hands it a strategy and a dataset, which cross as recipes
    "global_mean": Judged("setup_and_hardware", "check_global_mean", ("fn:global_mean",)),
    "global_batch": Judged("setup_and_hardware", "check_global_batch", ("fn:global_batch",)),
    "global_batches": Judged("tpu_and_hardware_detection", "check_global_batches", ("returns:global_batches",)),
    # the check's harness runs the student's function in the kernel (on a strategy, a model) and
    # sends back what it did as numbers; the check's references are computed here
    "global_moments": Judged("loss_scaling_pitfalls", "check_global_moments", ("fn:global_moments",)),
    "replica_dropout": Judged("loss_scaling_pitfalls", "check_replica_dropout", ("fn:replica_dropout",)),
    "clip_after_sum": Judged("loss_scaling_pitfalls", "check_clip_after_sum", ("fn:clip_summed_gradients",)),
    "logged_steps": Judged("performance", "check_logged_steps", ("fn:make_logged_steps",)),
    "dataset_fn": Judged("performance", "check_dataset_fn", ("fn:make_dataset_fn",)),
    "tpu_ready_loop": Judged("tpu_and_hardware_detection", "check_tpu_ready_loop", ("fn:tpu_ready_loop",)),
    "padded_loss": Judged("custom_training_loops", "check_padded_loss", ("fn:compute_loss",)),
    "per_replica_dataset_fn": Judged("custom_training_loops", "check_per_replica_dataset_fn",
                                     ("fn:make_dataset_fn",)),
    "distributed_test_step": Judged("custom_training_loops", "check_distributed_test_step",
                                    ("fn:make_distributed_test_step",)),
    "replica_step": Judged("data_parallelism", "check_replica_step", ("fn:make_replica_step",)),
    "run_and_combine": Judged("strategy_types", "check_run_and_combine", ("fn:run_and_combine",)),
    "fix_train_step": Judged("strategy_types", "check_fix_train_step", ("fn:train_step",)),
    # 03's fit exercises: the notebook hands its `mirrored`; the judge its own 2 replicas' recipe
    "fit_on_replicas": Judged("keras_model_fit", "check_fit_on_replicas", ("fn:fit_on_replicas", "none:mirrored")),
    "even_batches": Judged("keras_model_fit", "check_even_batches", ("fn:even_batches", "none:mirrored")),
    "fit_resumable": Judged("keras_model_fit", "check_fit_resumable", ("fn:fit_resumable", "none:mirrored")),
    # the naive port is the notebook's code, not the student's: the judge measures its own copy
    "masked_last_batch": Judged("tpu_and_hardware_detection", "check_masked_last_batch", ("fn:evaluate_all",)),
    # the notebook's cluster is the kernel's: the harness runs the student's code on it, the judge
    # computes one device's steps itself
    "ps_train_step": Judged("parameter_servers", "check_ps_train_step",
                            ("fn:make_train_step", "kernel:strategy", "kernel:coordinator")),
    "ps_schedule_loop": Judged("parameter_servers", "check_ps_schedule_loop",
                               ("fn:run_steps", "kernel:strategy", "kernel:coordinator")),
    "ps_input": Judged("parameter_servers", "check_ps_input",
                       ("fn:make_per_worker_iterator", "kernel:strategy", "kernel:coordinator")),
    "worker_input": Judged("multi_worker_training", "check_worker_input", ("fn:INPUT",)),
    # the notebook's cluster runs stay the notebook's feedback: the judge asks resume_point's answers
    "resume_point": Judged("multi_worker_training", "check_resume_point", ("fn:PROGRAM", "none:runs"),
                           leaves_out=("uninterrupted",)),
    # the programs' files are the notebook's own: the judge checks the prediction on the course's
    "restart_step": Judged("multi_worker_training", "check_restart_step", ("literal:PREDICTION", "none:PROGRAM"),
                           kwargs={"killed_after": 7}),
    "pod_task": Judged("multi_worker_training", "check_pod_task", ("literal:PREDICTION", "none:DERIVE"),
                       kwargs={"pod": 2, "chief": 1, "workers": 2, "ps": 1}),
    # notebook 11's kernel runs Keras on JAX, the judge's on TensorFlow: the harnesses run the student's
    # code in the kernel; one device's references come from a fresh Keras-on-JAX process, once a judge
    "jax_shard_batch": Judged("keras_distribution_on_jax", "check_shard_batch", ("fn:shard_batch",)),
    "jax_port_loss": Judged("keras_distribution_on_jax", "check_port_loss", ("fn:port_loss",)),
    "jax_tensor_parallel": Judged("keras_distribution_on_jax", "check_tensor_parallel", ("fn:tensor_parallel",)),
    "naive_loss_prediction": Judged("capstone", "check_naive_loss_prediction",
                                    ("literal:PREDICTION", "course:naive_train_step"), known="first_loss_names"),
    # same_update: each run of the student's step (every replica count, every probe) is a harness call
    # in the kernel; the references, the float noise, the comparisons and the diagnosis are the judge's
    "worker_step": Judged("multi_worker_training", "check_worker_step", ("fn:STEP",)),
    "capstone_port": Judged("capstone", "check_capstone_port", ("fn:make_train_step",)),
    "capstone_counter": Judged("capstone", "check_capstone_counter", ("fn:fixed_port",)),
}
# fmt: on


def serve_source(exercise_id: str, check_source: str) -> str:
    """The graded notebook's cell for a judged exercise: the check cell's lines but its call of the
    check (its imports, a name later cells read), then the kernel's side, which only answers the judge."""
    judged = JUDGED[exercise_id]
    try:
        tree = ast.parse(check_source)
        # the cell's own lines but the check's call (and what reads its result): its imports, a name
        # a later cell reads
        imports: list[str] = []
        dropped: set[str] = set()
        for node in tree.body:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            calls_check = any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == judged.check
                for n in ast.walk(node)
            )
            if calls_check or names & dropped:
                dropped |= {
                    n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                }
                continue
            imports.append(ast.unparse(node))
    except SyntaxError:
        imports = []
    handed = ", ".join(f"{name}={name}" for name in judged.handed)
    call = f"_serve({exercise_id!r}{', ' + handed if handed else ''})"
    return "\n".join(imports + ["from course_tools.grading.answers import serve as _serve", call])


class KernelGone(BaseException):
    """The kernel stopped answering (closed the connection, timed out, broke the protocol).

    A ``BaseException``: the check's ``except Exception`` must not read it as the student's error.
    """


class StudentRaised(Exception):
    """What the student's function raised, rebuilt here: its type's name and its message."""


def rebuilt(raised: Any) -> Exception:
    """The student's exception as the check expects to catch it: a built-in of the same name when
    there is one (``ValueError``, ``NotImplementedError``...), else one that carries its name."""
    name = str(raised.get("type", "Exception")) if isinstance(raised, dict) else "Exception"
    message = str(raised.get("message", "")) if isinstance(raised, dict) else ""
    if name == "ExerciseError":  # a harness's own hint (or the student's: either way, not a pass)
        from course_utils.errors import ExerciseError

        return ExerciseError(message)
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind.__init__ is not None:
        try:
            return kind(message)
        except Exception:
            pass
    if not name.isidentifier():
        name = "Exception"
    return type(name, (StudentRaised,), {})(message)


#: The student's functions of the exercise being judged whose calls made the kernel run course code
#: around them (a harness, a recipe's strategy): what comes back is the kernel's report of what
#: happened, which a patch in the kernel (numpy, TensorFlow) could fake, so the audit's findings in
#: such an answer flag a pass. Emptied before each exercise (:func:`serve_run`).
OBSERVED: list[str] = []


class Remote:
    """The student's function ``name``, called in the kernel over ``conn``."""

    def __init__(self, conn: socket.socket, stream: Any, name: str) -> None:
        self.conn, self.stream, self.name = conn, stream, name
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._send({}, args, kwargs)

    def grading_via(self, harness: str, args: tuple, kwargs: dict) -> Any:
        """``harness(student's function, *args, **kwargs)`` run in the kernel
        (:func:`course_utils.exercises.in_kernel`): what it returns, plain data."""
        return self._send({"via": harness}, args, kwargs)

    def _send(self, extra: dict, args: tuple, kwargs: dict) -> Any:
        recipes: list = []  # a strategy, a dataset: the kernel builds its own from each recipe
        message = {
            "call": self.name,
            **extra,
            "args": encode(list(args), 0, recipes),
            "kwargs": encode(kwargs, 0, recipes),
        }
        if extra or recipes:
            OBSERVED.append(self.name)  # the kernel reports what it saw: course code ran around the answer
        try:
            write_message(self.conn, message)
            reply = read_message(self.stream)
        except (OSError, EOFError, ValueError) as error:
            raise KernelGone(f"the kernel stopped answering while {self.name} ran ({error})") from None
        reports = reply.get("reports", [])
        for obj, report in zip(recipes, reports if isinstance(reports, list) else []):
            if callable(getattr(type(obj), "grading_take", None)):
                obj.grading_take(report)  # what the student's code did with it (a count, never a verdict)
        if "value" in reply:
            try:
                return decode(reply["value"])
            except (ValueError, TypeError) as error:
                raise KernelGone(f"the kernel's answer could not be read ({error})") from None
        if "raised" in reply:
            raise rebuilt(reply["raised"])
        if "unreadable" in reply:
            raise NotPlainData(
                f"{self.name} returned {reply['unreadable']}, which the grader cannot read: return "
                "numbers, strings, lists, dicts or arrays"
            )
        raise KernelGone("the kernel's answer was not one the grader understands")


#: The arithmetic a prediction may hold: it is evaluated here, on numbers only, never run.
_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.USub: operator.neg, ast.UAdd: operator.pos,
}  # fmt: skip


#: Pure functions of numbers a prediction may call (``math.ceil(1000 / 64)``, ``round(x, 2)``).
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "round": round, "int": int, "float": float, "abs": abs, "min": min, "max": max, "sum": sum,
    "math.ceil": math.ceil, "math.floor": math.floor, "math.sqrt": math.sqrt, "math.prod": math.prod,
    "np.ceil": math.ceil, "np.floor": math.floor, "np.sqrt": math.sqrt,
}  # fmt: skip

#: The largest number a prediction may hold (a prediction is a count or a factor, never astronomical):
#: the arithmetic above stays cheap, whatever the answer writes.
_LARGEST = 10**30


def _bounded(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > _LARGEST:
        raise ValueError("a number over 1e30")
    return value


#: The most items (numbers and lists, at every depth) a list built by ``*`` or ``+`` may hold
#: (``[[4, 4]] * 5 + [[2, 1]]``: 18): a prediction lists steps or replicas, never a data set.
_MOST_ITEMS = 1000


def _size(value: Any, budget: int = _MOST_ITEMS) -> int:
    """The number of items of ``value``, a list of numbers or of such lists (or tuples), counted at
    every depth; ``ValueError`` past ``budget`` or for anything else. Stops there, so it stays cheap."""
    if not isinstance(value, (list, tuple)):
        raise ValueError("not a list")
    size = 0
    for item in value:
        size += 1 + (_size(item, budget - size - 1) if isinstance(item, (list, tuple)) else 0)
        if size > budget:
            raise ValueError(f"a list of more than {_MOST_ITEMS} items")
        if not isinstance(item, (list, tuple, int, float)) or isinstance(item, bool):
            raise ValueError("a list of something other than numbers")
    return size


def _list_arithmetic(op: ast.operator, left: Any, right: Any) -> list:
    """``list * int``, ``int * list`` or ``list + list`` on lists of numbers (:func:`_size`): the
    resulting list, its size checked before it is made; ``ValueError`` otherwise."""
    if isinstance(op, ast.Mult) and isinstance(left, int) and not isinstance(left, bool):
        left, right = right, left
    if (
        isinstance(op, ast.Mult)
        and isinstance(left, list)
        and isinstance(right, int)
        and not isinstance(right, bool)
    ):
        if _size(left) * max(right, 0) > _MOST_ITEMS:
            raise ValueError(f"a list of more than {_MOST_ITEMS} items")
        return left * right
    if isinstance(op, ast.Add) and isinstance(left, list) and isinstance(right, list):
        if _size(left) + _size(right) > _MOST_ITEMS:
            raise ValueError(f"a list of more than {_MOST_ITEMS} items")
        return left + right
    raise ValueError("arithmetic on something other than numbers")


#: What a lookup in :func:`constant` found when the key is not there.
_MISSING = object()


def constant(node: ast.AST, names: Mapping[str, Any]) -> Any:
    """The value of ``node`` when it is a literal, or arithmetic on numbers (``(2.5 + 6.0) / 2``,
    ``math.ceil(1000 / 64)``), a name bound to one in ``names``, or a list, tuple or dict of them,
    or lists of numbers repeated or joined (``[[4, 4]] * 5 + [[2, 1]]``), or an item of a list or dict
    bound in ``names`` (``SHOWN[1]``); ``ValueError`` otherwise.
    Every number stays within 1e30 and every list so built within 1,000 items, so nothing here can
    be made slow."""
    if isinstance(node, ast.Constant) and isinstance(
        node.value, (int, float, str, bool, type(None), type(...))
    ):
        return _bounded(node.value)
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        value = constant(node.operand, names)
        if isinstance(value, (int, float)):
            return _OPERATORS[type(node.op)](value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = constant(node.left, names), constant(node.right, names)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 10**6):
                raise ValueError("a power too large for a prediction")
            try:
                return _bounded(_OPERATORS[type(node.op)](left, right))
            except (ArithmeticError, ValueError) as error:
                raise ValueError(str(error)) from None
        return _list_arithmetic(node.op, left, right)
    if isinstance(node, ast.Call) and not node.keywords and ast.unparse(node.func) in _FUNCTIONS:
        args = [constant(arg, names) for arg in node.args]
        if len(args) <= 3 and all(isinstance(a, (int, float, list, tuple)) for a in args):
            try:
                return _bounded(_FUNCTIONS[ast.unparse(node.func)](*args))
            except (ArithmeticError, ValueError, TypeError) as error:
                raise ValueError(str(error)) from None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in names:
        container, key = names[node.value.id], constant(node.slice, names)  # SHOWN[1]: a lookup, nothing run
        found = (
            container.get(key, _MISSING) if isinstance(container, dict) and isinstance(key, (int, float, str))
            else container[key] if isinstance(container, (list, tuple)) and type(key) is int and -len(container) <= key < len(container)
            else _MISSING
        )  # fmt: skip
        if found is not _MISSING:
            return found
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [constant(item, names) for item in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        return {
            constant(k, names): constant(v, names) for k, v in zip(node.keys, node.values) if k is not None
        }
    raise ValueError(ast.unparse(node)[:80])


def _assigned(statement: ast.stmt, name: Optional[str] = None) -> Optional[tuple[str, ast.expr]]:
    """``(name, value)`` of ``name = value`` or ``a = name = value`` (any name when ``name`` is
    None), else None."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        targets = [statement.target]
    else:
        return None
    value = statement.value
    for target in targets:
        if isinstance(target, ast.Name) and value is not None and name in (None, target.id):
            return target.id, value
    return None


def prediction(
    answer: str, name: str, returned: bool = False, known: Optional[Mapping[str, Any]] = None
) -> Any:
    """The student's prediction, read from the answer's source and never run: the value of the last
    top-level ``name = ...`` or, with ``returned``, what the function ``name`` returns (its body may
    bind names to numbers first). Literals and arithmetic on numbers only (:func:`constant`), and
    the names in ``known``.

    ``NotImplementedError`` when the answer does not say (a placeholder); ``ValueError`` when the
    value is code."""
    try:
        tree = ast.parse(answer)
    except SyntaxError as error:
        raise ValueError(f"the cell is not valid Python ({error.msg}, line {error.lineno})") from None
    names: dict[str, Any] = dict(known or {})  # the numbers cells above printed, computed here
    if returned:
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        if not defs:
            raise NotImplementedError
        value: Optional[ast.expr] = None
        for statement in defs[-1].body:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # the docstring
            if isinstance(statement, ast.Raise):
                raise NotImplementedError
            bound = _assigned(statement)
            if bound is not None:
                names[bound[0]] = _value(bound[1], names, name)
                continue
            if isinstance(statement, ast.Return) and statement.value is not None:
                value = statement.value
                break
            raise ValueError(
                f"{name} must return your prediction written as a number (arithmetic on numbers is "
                f"fine), not compute it: the grader reads it without running it (found `{ast.unparse(statement)[:80]}`)"
            )
        if value is None:
            raise NotImplementedError
    else:
        value = None
        for node in tree.body:  # top-level numbers it may use (A = 1000), then its last value
            bound = _assigned(node)
            if bound is None:
                continue
            if bound[0] == name or _assigned(node, name) is not None:
                value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                if value is not None:
                    with contextlib.suppress(ValueError, RecursionError):
                        names[name] = constant(value, names)
                continue
            with contextlib.suppress(ValueError, RecursionError):
                names[bound[0]] = constant(bound[1], names)
        if value is None:
            raise NotImplementedError
    return _value(value, names, name)


def _value(node: ast.expr, names: Mapping[str, Any], name: str) -> Any:
    try:
        return constant(node, names)
    except (ValueError, RecursionError):
        raise ValueError(
            f"{name} must be your prediction written as a number (or a string, or a list or dict of them; "
            f"arithmetic on numbers is fine), not computed by code: the grader reads it without running it (found "
            f"`{ast.unparse(node)[:80]}`)"
        ) from None


def _returning(value: Any) -> Callable[[], Any]:
    """A stand-in for the student's prediction function: returns ``value`` (raises it, for the
    placeholder's ``NotImplementedError``)."""

    def prediction() -> Any:
        if value is NotImplementedError:
            raise NotImplementedError
        return value

    return prediction


def judge_one(
    exercise_id: str, literals: Mapping[str, str], conn: Optional[socket.socket], stream: Any
) -> tuple[str, str]:
    """Run the check of ``exercise_id`` here, the student's functions called over ``conn``:
    ``(status, message)``, status ``passed``, ``failed`` or ``error``."""
    from course_utils.errors import ExerciseError

    judged = JUDGED[exercise_id]
    module = importlib.import_module(f"course_utils.exercises.{judged.module}")
    check = getattr(module, judged.check)
    out = io.StringIO()
    try:
        known = getattr(module, judged.known)() if judged.known else {}
        args: list[Any] = []
        for arg in judged.args:
            kind, _, name = arg.partition(":")
            if kind == "fn":
                assert conn is not None
                args.append(Remote(conn, stream, name))
                continue
            if kind == "kernel":
                args.append(KernelObject(name))
                continue
            if kind in ("course", "none"):
                args.append(getattr(module, name) if kind == "course" else None)
                continue
            try:
                value = prediction(literals.get(name, ""), name, returned=kind == "returns", known=known)
            except NotImplementedError:  # a placeholder: the check says "not done yet", as in the notebook
                value = NotImplementedError if kind == "returns" else None
            except ValueError as why:
                return "failed", f"Exercise {exercise_id}: {why}."
            args.append(_returning(value) if kind == "returns" else value)
        with contextlib.redirect_stdout(out):
            check(*args, **judged.kwargs)
    except ExerciseError as error:
        return "failed", str(error)
    except KernelGone as gone:
        return "error", str(gone)
    prefix = f"[pass] {exercise_id}"
    said = [line for line in out.getvalue().splitlines() if line.startswith(prefix)]
    if not said:
        return "error", f"the check of {exercise_id} ended without its pass line (the grader's fault)"
    return "passed", said[-1][len(prefix) :].lstrip(": ").strip()


def _record(records: Any, record: dict, key: bytes) -> None:
    """One record on the judge's output, with its HMAC under the run's key: a line written into
    this pipe by anything else (it is reachable through /proc without the sandbox) does not verify."""
    body = json.dumps(record, sort_keys=True)
    records.write(json.dumps({"record": record, "mac": mac(key, body)}) + "\n")
    records.flush()


def mac(key: bytes, body: str) -> str:
    """The HMAC-SHA256 of one record's JSON (sorted keys) under the run's key."""
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or one of its descendants (Linux /proc)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _peer(conn: socket.socket) -> int:
    """The process id at the other end of a Unix socket (0 where the system does not say)."""
    try:
        pid, _, _ = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
    except (OSError, AttributeError):
        return 0
    return int(pid)


def _inbox() -> "queue.Queue[Optional[dict]]":
    """The runner's lines on stdin, as objects, in order; ``None`` once stdin is closed."""
    lines: "queue.Queue[Optional[dict]]" = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict):
                    lines.put(message)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def serve_run(job: dict, inbox: "queue.Queue[Optional[dict]]", records: Any) -> bool:
    """Judge one grading run: listen on its socket, judge what its kernel serves, then record the end.

    ``job``: ``{"socket": PATH, "exercises": {ID: {NAME: ANSWER SOURCE}}, "timeout": SECONDS,
    "seed": N, "key": HEX}``; then ``inbox`` gives ``{"run": PID}``, the process that runs the
    notebook (only its descendants are answered: another run's kernel can reach this socket too),
    and ``{"end": true}`` once the run is over. Every record is signed with this run's key, so one
    judge can serve runs one after another without a record of one counting for another. Returns
    whether the runner is still there (``False`` once stdin closed)."""
    key = bytes.fromhex(str(job["key"]))
    exercises: dict[str, dict[str, str]] = {
        k: dict(v) for k, v in dict(job.get("exercises", {})).items() if k in JUDGED
    }
    timeout = float(job.get("timeout", 120.0))
    seed = int(job.get("seed", 0))
    for module in sorted({JUDGED[i].module for i in exercises}):  # before any student code runs
        importlib.import_module(f"course_utils.exercises.{module}")
    if exercises and not _virtual_cpus:  # the checks' references run on virtual CPUs, as in the notebooks
        from course_utils.devices import use_virtual_cpus

        use_virtual_cpus(JUDGE_CPUS)
        _virtual_cpus.append(JUDGE_CPUS)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    os.chdir(os.path.dirname(job["socket"]))  # a relative name: a socket's path has at most 107 bytes
    listener.bind(os.path.basename(job["socket"]))
    os.chdir(here)
    listener.listen(8)
    _record(records, {"listening": True}, key)
    closed = threading.Event()
    started = threading.Event()
    run: list[int] = []
    still_there: list[bool] = [True]

    def control() -> None:
        while (message := inbox.get()) is not None and "end" not in message:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                run.append(int(message["run"]))
            started.set()
        still_there[0] = message is not None
        closed.set()
        started.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)

    controller = threading.Thread(target=control, daemon=True)
    controller.start()
    judged: set[str] = set()
    while not closed.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            break
        with conn, conn.makefile("rb") as stream:
            conn.settimeout(timeout)
            started.wait(timeout)
            if not (run and _descends_from(_peer(conn), run[0])):
                continue  # not this run's kernel: no answer, no verdict
            try:
                hello = read_message(stream)
            except (OSError, EOFError, ValueError):
                continue
            ident = str(hello.get("serve"))
            if ident not in exercises or ident in judged:
                with contextlib.suppress(OSError):
                    write_message(
                        conn, {"verdict": "refused", "message": "not an exercise awaiting a verdict"}
                    )
                continue
            judged.add(ident)
            # The cases drawn at grading time: this run's seed and the exercise, whatever ran before.
            course_utils_exercises().UNSEEN = random.Random(f"{seed}:{ident}")
            OBSERVED.clear()
            try:
                status, message = judge_one(ident, exercises[ident], conn, stream)
            except Exception as error:  # the grader's own bug: said as such, never the student's
                status, message = "error", f"the grader failed: {type(error).__name__}: {error}"
            record = {"exercise": ident, "status": status, "message": message, "observed": bool(OBSERVED)}
            _record(records, record, key)
            with contextlib.suppress(OSError):
                write_message(conn, {"verdict": status, "message": message})
    controller.join()
    listener.close()
    _record(records, {"end": True}, key)
    return still_there[0]


#: Set once the judge's TensorFlow has its virtual CPUs (the first run with judged exercises).
_virtual_cpus: list[int] = []


def course_utils_exercises() -> Any:
    """``course_utils.exercises``, where the checks read :data:`~course_utils.exercises.UNSEEN`."""
    import course_utils.exercises

    return course_utils.exercises


def main() -> int:
    """Judge grading runs one after another, each a job on stdin (:func:`serve_run`), until stdin
    closes. The runner keeps one judge for each run it has going at a time, so TensorFlow starts
    once for a whole class, not once a submission."""
    records = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr  # whatever the checks or TensorFlow print stays off the records
    inbox = _inbox()
    while (job := inbox.get()) is not None:
        if "socket" in job and not serve_run(job, inbox, records):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
