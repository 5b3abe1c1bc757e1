"""What the grading tests share: one exercise judged as the grader judges it, in one process.

The judge's side (course_tools.grading.judge) runs here, over one end of a socket pair; the
kernel's side runs in a thread over the other: the grading kernel's own loop (answers.answer_calls)
by default, or a kernel a test plays (one that forges or replays its replies, one that hangs up).
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from typing import Any, Callable, Iterable, Optional

import course_utils.exercises as exercises
from course_tools.grading import answers, judge

#: A grading kernel's side: it gets its end of the socket pair and the exercise's id.
Kernel = Callable[[socket.socket, str], None]


def answering(functions: dict[str, Callable[..., Any]]) -> Kernel:
    """The grading kernel's own side: say which exercise this is, answer calls of ``functions``."""

    def kernel(sock: socket.socket, ident: str) -> None:
        answers.answer_calls(sock, ident, functions)

    return kernel


def replaying(replies: Iterable[Any]) -> Kernel:
    """A kernel that runs nothing: it says which exercise this is, then answers every call with
    the next of ``replies`` (made-up data, or what it learned by heart), and hangs up when none is left."""
    left = iter(replies)

    def kernel(sock: socket.socket, ident: str) -> None:
        with sock.makefile("rb") as stream:
            answers.write_message(sock, {"serve": ident})
            while "verdict" not in answers.read_message(stream):
                try:
                    reply = next(left)
                except StopIteration:
                    return
                answers.write_message(sock, {"value": answers.encode(reply), "reports": []})

    return kernel


def judged(
    ident: str,
    functions: Optional[dict[str, Callable[..., Any]]] = None,
    literals: Optional[dict[str, str]] = None,
    seed: Optional[int] = None,
    *,
    kernel: Optional[Kernel] = None,
) -> tuple[str, str]:
    """Judge ``ident`` as the grader does: ``(status, message)``.

    The kernel's side (``kernel``; by default the grading kernel's, answering from ``functions``)
    runs in a thread; the judge reads its hello, runs the check with ``literals`` as the answer's
    source, and sends its verdict back. ``seed`` draws the cases of grading time (None: the
    notebook's cases only)."""
    ours, theirs = socket.socketpair()
    side = kernel or answering(functions or {})

    def run() -> None:
        with contextlib.suppress(EOFError, OSError), theirs:
            side(theirs, ident)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    exercises.UNSEEN = None if seed is None else random.Random(seed)
    try:
        with ours, ours.makefile("rb") as stream:
            status, message = verdict(ident, ours, stream, literals)
    finally:
        exercises.UNSEEN = None
    thread.join(timeout=60)
    return status, message


def verdict(
    ident: str, conn: socket.socket, stream: Any, literals: Optional[dict[str, str]] = None
) -> tuple[str, str]:
    """The judge's side of ``ident`` over ``conn`` (``stream``: its ``makefile("rb")``), as the
    grader's: the kernel says which exercise it serves, the check runs here, the verdict goes back."""
    assert answers.read_message(stream) == {"serve": ident}
    status, message = judge.judge_one(ident, literals or {}, conn, stream)
    with contextlib.suppress(OSError):  # as the grader: a kernel that hung up gets none
        answers.write_message(conn, {"verdict": status, "message": message})
    return status, message
