"""Graders (the graded notebook's kernel, and the judge): the kernel answers the judge's calls with plain data.

A grading run does not run an exercise's check in the student's kernel, where code in an answer
cell could replace it. In the graded notebook the check cell becomes ``serve(ID, name=function)``:
the kernel connects to the judge (``course_tools.grading.judge``, a separate process that never
runs student code) through the socket ``judge.sock`` in the run's folder (its path in
:data:`SOCKET_VARIABLE`), and only answers its
calls: the judge names a function and its arguments, the kernel calls the student's function
and sends back what it returned (or what it raised) as plain data, :func:`encode`'s JSON. The
judge computes every reference itself and decides; what the kernel sends is an answer to be
judged, never a verdict. The judge's one-line verdict is printed here as feedback only: the
grade is what the judge wrote, not this cell's output.

Plain data is ``None``, booleans, numbers, strings, lists, tuples, dicts with string keys and
numeric numpy arrays (``.numpy()`` of a tensor included); nothing is ever unpickled.
"""

from __future__ import annotations

import base64
import json
import math
import numbers
import os
import socket
import types
from typing import Any, Callable, Optional

import numpy as np

__all__ = [
    "MAX_MESSAGE",
    "KernelObject",
    "NotPlainData",
    "answer_calls",
    "decode",
    "encode",
    "read_message",
    "serve",
    "write_message",
]

#: The largest message either side reads, in bytes: an answer is numbers, never a model.
MAX_MESSAGE = 64 * 2**20

#: Array dtypes an answer may hold: numbers and booleans (never objects).
ARRAY_KINDS = "biuf"


class KernelObject:
    """An object only the student's kernel has (the notebook's strategy, its cluster's coordinator),
    named: it crosses to the kernel as its name, and the kernel hands the harness its own object of
    that name, one the check cell gave the grader (``serve(ID, strategy=strategy)``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<the kernel's {self.name}>"


class NotPlainData(TypeError):
    """A value that is not plain data (a function, a model, an object of the student's class)."""


def encode(value: Any, depth: int = 0, recipes: Optional[list] = None) -> Any:
    """``value`` as JSON-able plain data; :class:`NotPlainData` for anything else. With ``recipes``
    (the judge's calls), an object a check hands the student (a strategy, a dataset:
    ``course_utils.exercises``) crosses as its recipe, and is listed there in order."""
    if depth > 20:
        raise NotPlainData("nested more than 20 levels deep")
    if recipes is not None and isinstance(value, KernelObject):
        return {"__kernel__": value.name}
    if recipes is not None and callable(
        getattr(type(value), "grading_recipe", None) or getattr(value, "__dict__", {}).get("grading_recipe")
    ):
        recipes.append(value)
        return {"__recipe__": encode(value.grading_recipe(), depth + 1)}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return number if math.isfinite(number) else {"__float__": repr(number)}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (list, tuple)):
        items = [encode(v, depth + 1, recipes) for v in value]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise NotPlainData("a dict whose keys are not all strings")
        return {"__dict__": {k: encode(v, depth + 1, recipes) for k, v in value.items()}}
    if isinstance(value, (range, set, frozenset, map, filter, zip, types.GeneratorType)):
        return encode(list(value), depth + 1)  # what a check iterates over, as a list
    if isinstance(value, numbers.Real) and not isinstance(value, np.ndarray):
        return encode(float(value), depth + 1)  # a Fraction, a Decimal
    if not isinstance(value, np.ndarray) and callable(getattr(value, "numpy", None)):
        value = value.numpy()  # a tensor or a variable: its numbers
        if not isinstance(value, np.ndarray):
            return encode(value, depth + 1)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in ARRAY_KINDS:
            raise NotPlainData(f"an array of {value.dtype}")
        data = np.ascontiguousarray(value)
        return {
            "__array__": {
                "dtype": data.dtype.str,
                "shape": list(data.shape),
                "data": base64.b64encode(data.tobytes()).decode("ascii"),
            }
        }
    raise NotPlainData(f"a {type(value).__name__}")


def decode(obj: Any, built: Optional[list] = None, served: Optional[dict] = None) -> Any:
    """The value :func:`encode` gave ``obj``; ``ValueError`` for anything it would not give. With
    ``built`` (the kernel, reading the judge's calls), a recipe is rebuilt and listed there in order,
    and a :class:`KernelObject` is the object of that name in ``served``; without it (the judge,
    reading the kernel's answers) both are refused."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [decode(v, built, served) for v in obj]
    if isinstance(obj, dict) and len(obj) == 1:
        ((tag, body),) = obj.items()
        if tag == "__tuple__" and isinstance(body, list):
            return tuple(decode(v, built, served) for v in body)
        if tag == "__dict__" and isinstance(body, dict):
            return {str(k): decode(v, built, served) for k, v in body.items()}
        if tag == "__kernel__" and built is not None and served is not None and body in served:
            return served[body]
        if tag == "__recipe__" and built is not None:
            from course_utils.exercises import rebuild

            recipe = decode(body)
            built.append(rebuild(recipe if isinstance(recipe, dict) else {}))
            return built[-1]
        if tag == "__float__" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "__array__" and isinstance(body, dict):
            dtype = np.dtype(str(body.get("dtype")))
            shape = tuple(int(n) for n in body.get("shape", ()))
            if dtype.kind not in ARRAY_KINDS or any(n < 0 for n in shape):
                raise ValueError("an array that is not numbers")
            data = base64.b64decode(str(body.get("data", "")), validate=True)
            array = np.frombuffer(data, dtype=dtype)
            if array.size != math.prod(shape):
                raise ValueError("an array whose data does not fill its shape")
            return array.reshape(shape).copy()
    raise ValueError("not the grader's plain data")


def write_message(sock: socket.socket, message: dict) -> None:
    """Send one message: a JSON object on one line."""
    sock.sendall(json.dumps(message, allow_nan=False).encode() + b"\n")


def read_message(stream: Any) -> dict:
    """Read one message from ``stream`` (``sock.makefile("rb")``); ``EOFError`` when closed."""
    line = stream.readline(MAX_MESSAGE + 1)
    if not line:
        raise EOFError("the other side closed the connection")
    if len(line) > MAX_MESSAGE or not line.endswith(b"\n"):
        raise ValueError(f"a message over {MAX_MESSAGE // 2**20} MiB")
    try:
        message = json.loads(line)
    except RecursionError:
        raise ValueError("a message nested too deep") from None
    if not isinstance(message, dict):
        raise ValueError("a message that is not a JSON object")
    return message


def _answer(function: Callable[..., Any], args: list, kwargs: dict, built: list) -> dict:
    """Call the student's function; what it returned, encoded, or what it raised, with what each
    object rebuilt from a recipe saw (``reports``: how often a strategy's ``run`` was called)."""
    try:
        value = function(*args, **kwargs)
    except Exception as error:  # the student's code raised: the judge says what that means
        raised = {"type": type(error).__name__, "message": str(error)[:2000]}
        return {"raised": raised, "reports": [getattr(obj, "grading_report", dict)() for obj in built]}
    reports: list[Any] = [getattr(obj, "grading_report", dict)() for obj in built]
    try:
        return {"value": encode(value), "reports": reports}
    except NotPlainData as why:
        return {"unreadable": f"{why}"}


#: The environment variable that names the judge's socket in a grading run.
SOCKET_VARIABLE = "COURSE_JUDGE_SOCKET"


def serve(exercise_id: str, **functions: Callable[..., Any]) -> None:
    """Answer the judge's calls of ``functions`` for exercise ``exercise_id``, then print its verdict.

    Outside a grading run there is no judge to answer: say so in one line.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.environ.get(SOCKET_VARIABLE, "judge.sock"))
    except OSError:
        print(f"{exercise_id}: no grader is listening here; run the notebook's own check cell instead.")
        sock.close()
        return
    with sock:
        answer_calls(sock, exercise_id, functions)


def answer_calls(sock: socket.socket, exercise_id: str, functions: dict[str, Callable[..., Any]]) -> None:
    """Say which exercise this is, answer the judge's calls over ``sock``, print its verdict."""
    with sock.makefile("rb") as stream:
        write_message(sock, {"serve": exercise_id})
        while True:
            message = read_message(stream)
            if "verdict" in message:
                print(
                    f"[{message['verdict']}] {exercise_id} (decided by the grader): {message.get('message', '')}"
                )
                return
            name = str(message.get("call"))
            if name not in functions:
                write_message(sock, {"unreadable": f"no function {name!r} was handed to the grader"})
                continue
            built: list = []
            try:
                args = decode(message.get("args", []), built, functions)
                kwargs = decode(message.get("kwargs", {"__dict__": {}}), built, functions)
            except ValueError as why:
                write_message(sock, {"unreadable": f"the grader's call could not be read here ({why})"})
                continue
            function = functions[name]
            if "via" in message:  # a check's harness, run here on the student's function
                try:
                    function = _harness(str(message["via"]), function)
                except ValueError as why:
                    write_message(sock, {"unreadable": f"{why}"})
                    continue
            write_message(sock, _answer(function, list(args), dict(kwargs), built))


def _harness(name: str, student_function: Callable[..., Any]) -> Callable[..., Any]:
    """The harness ``name`` (``"module.function"`` of ``course_utils.exercises``) bound to the
    student's function; ``ValueError`` for a name that is not one."""
    import importlib

    module, _, function = name.partition(".")
    if not (module.isidentifier() and function.isidentifier()):
        raise ValueError(f"no harness {name!r}")
    try:
        importlib.import_module(f"course_utils.exercises.{module}")
    except ImportError:
        raise ValueError(f"no harness {name!r}") from None
    from course_utils.exercises import HARNESSES

    run = HARNESSES.get(name)
    if run is None:
        raise ValueError(f"no harness {name!r}")
    return lambda *args, **kwargs: run(student_function, *args, **kwargs)
