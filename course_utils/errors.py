"""Every notebook: the errors course_utils raises for mistakes a student or an instructor can fix, each in one line.

Every error here carries a message that says what went wrong and what to do next, so a
notebook shows one readable line instead of a wall of traceback.

The second half is the one home of "turn an error, or what a process printed on stderr, into one
line": :func:`first_line` (of a hint), :func:`describe_raised` (what the student's code raised,
and where), :func:`describe_error` and :func:`exception_line` (an exception's type and first
line), :func:`shorten_error` and :func:`summarize_error` (a message, or the exception at the end
of a log, stable from run to run), :func:`stable_error_line` and :func:`last_error_line` (the
error a process died of, from its stderr). Importing this module starts nothing.
"""

from __future__ import annotations

import re
import traceback
from typing import Optional, Sequence


class CourseError(Exception):
    """A problem with the course set-up that the user can fix (bad setting, wrong order)."""


class ConfigError(CourseError, ValueError):
    """A ``COURSE_*`` setting or an argument has a value the course does not accept."""


class TensorFlowStartedError(CourseError, RuntimeError):
    """A setting that TensorFlow fixes when it starts (devices, threads) was changed afterwards."""


class ReplicaCountError(TensorFlowStartedError):
    """The number of virtual CPUs cannot change once TensorFlow has initialised its devices."""


class NoTPUError(CourseError, RuntimeError):
    """A TPU was asked for and none could be found."""


class ExerciseError(AssertionError):
    """An exercise check failed; the message is a hint the student can act on.

    It is an ``AssertionError`` so that pytest, nbval and graders treat it as a failed check.
    """


# --------------------------------------------------------------------------- errors in one line
#
# Every "turn an error, or what a process printed on stderr, into one line" of the course lives
# here, so that a notebook, the grader, the doctor and the cluster say the same thing the same way.

#: Error messages that name a known upstream problem: (text to look for, short description).
KNOWN_ERRORS: tuple[tuple[str, str], ...] = (
    ("You must feed a value for placeholder tensor", "You must feed a value for placeholder tensor"),
    ("Attempt to convert a value (PerReplica", "Attempt to convert a value (PerReplica:{...}) to a Tensor"),
)

#: A line that starts a Python exception in a log (``ValueError: ...``, ``SystemExit``).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(.*))?$"
)
_QUOTED = re.compile(r"'[^']*'")
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\]")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
#: TensorFlow's status codes, which start the lines of a "Graph execution error" that name a cause.
_STATUS = re.compile(
    r"\b(INVALID_ARGUMENT|FAILED_PRECONDITION|NOT_FOUND|OUT_OF_RANGE|RESOURCE_EXHAUSTED|"
    r"UNIMPLEMENTED|INTERNAL|UNAVAILABLE|ABORTED|ALREADY_EXISTS|PERMISSION_DENIED|UNKNOWN|"
    r"CANCELLED|DEADLINE_EXCEEDED|DATA_LOSS|UNAUTHENTICATED):\s+(.*)$"
)


def first_line(message: Optional[str]) -> str:
    """The first line of a hint (what the grader's table shows)."""
    return (message or "").strip().splitlines()[0] if (message or "").strip() else ""


def _is_notebook_file(filename: str) -> bool:
    return "<ipython-input" in filename or "/ipykernel_" in filename


def describe_raised(error: BaseException) -> str:
    """``"TypeError: <message> (at `<the student's line>`)"``, one line.

    An error raised inside ``tf.function`` carries TensorFlow's report ("in user code:", the
    frames, then the real error on its last line): the real error and the notebook's line are
    quoted from that report, not its first line. A "Graph execution error" is named by its first
    root cause (``INVALID_ARGUMENT: ...``) and the node it names.
    """
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    name, message, code = type(error).__name__, lines[0] if lines else "", ""
    root = next((m for m in map(_STATUS.search, lines) if m), None)
    if root and message.startswith("Graph execution error"):
        node = re.search(r"\[\[\{\{node ([^}]+)\}\}\]\]", text)
        message = _OP_SUFFIX.sub("", root.group(2)).strip() + (f" (node {node.group(1)})" if node else "")
    if lines and lines[0].startswith("in user code"):
        last = lines[-1]
        head, sep, rest = last.partition(": ")
        if sep and head.replace(".", "").isidentifier():
            name, message = head.rsplit(".", 1)[-1], rest
        else:
            message = last
        for i, line in enumerate(lines[:-1]):
            if line.startswith("File ") and _is_notebook_file(line):
                code = lines[i + 1]
                break
    if not code:
        for frame in reversed(traceback.extract_tb(error.__traceback__)):
            if _is_notebook_file(frame.filename):
                code = (frame.line or "").strip()
                break
    return f"{name}: {message}" + (f" (at `{code}`)" if code else "")


def describe_error(error: BaseException, limit: int = 160) -> str:
    """``"NotFoundError: TPUs not found in the cluster..."``: type and a stable first line.

    TensorFlow's messages go on with node attributes whose order changes from run to run; the
    text is cut before them (at ``" used by "`` or a newline) and at ``limit`` characters.
    """
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    for cut in (" used by ", " with these attrs"):
        if cut in line:
            line = line.split(cut)[0]
    if len(line) > limit:
        line = line[: limit - 3].rstrip() + "..."
    name = type(error).__name__
    return f"{name}: {line}" if line else name


def exception_line(error: BaseException) -> str:
    """``TypeName: the message`` in one stable line (known upstream errors get a fixed text)."""
    text = str(error)
    for needle, short in KNOWN_ERRORS:
        if needle in text:
            return f"{type(error).__name__}: {short}"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return f"{type(error).__name__}: {first[:100]}" if first else type(error).__name__


def shorten_error(text: str, limit: int = 240) -> str:
    """One stable line from an exception message (see :func:`summarize_error`)."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"(PerReplica|Mirrored|SyncOnRead|DistributedValues):\{.*?\}\)", r"\1:{...})", text)
    text = re.sub(r"<class '[\w.]*\.(\w+)'>", r"\1", text)
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)
    text = re.sub(r"^(?:[A-Za-z_]\w*\.)+([A-Z]\w*(?:Error|Exception))", r"\1", text)
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return text


def summarize_error(lines: Sequence[str], limit: int = 240) -> str:
    """The Python exception at the end of a log, on one line: ``ValueError: ...``.

    Multi-line messages are joined; the contents of distributed values (``PerReplica:{...}``)
    and memory addresses are left out so that the line is the same from run to run.
    """
    lines = [line.rstrip() for line in lines if line.strip()]
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[i]) and not lines[i].startswith(" "):
            start = i
            break
    if start is None:
        return ""
    text = " ".join(part.strip() for part in lines[start:])
    return shorten_error(text, limit)


def stable_error_line(stderr: str) -> str:
    """The error a process died of, as ``TypeName: message`` in one line that does not vary.

    For TensorFlow's multi-line ``Graph execution error`` it takes the first root error after
    it (``INVALID_ARGUMENT: ...``) as the message. Quoted names (node and tensor names, which
    change from run to run), ``[Op:...]`` suffixes and addresses are replaced by ``...``.
    """
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    found = None
    for index in range(len(lines) - 1, -1, -1):
        match = re.match(r"^([\w.]+(?:Error|Exception)):\s*(.*)$", lines[index])
        if match:
            found = index, match.group(1).rsplit(".", 1)[-1], match.group(2)
            break
    if found is None:
        return ""
    index, exception, message = found
    for line in lines[index + 1 :]:
        root = _STATUS.search(line)
        if root:
            message = root.group(2)
            break
    message = _OP_SUFFIX.sub("", message)
    message = _QUOTED.sub("'...'", message)
    message = _ADDRESS.sub("0x...", message)
    message = re.sub(r" with dtype \w+$", "", message.strip())
    return f"{exception}: {message}".strip()


def last_error_line(stderr: str) -> str:
    """The last line of ``stderr`` that names an exception (``...Error: ...``), or ''."""
    for line in reversed(stderr.strip().splitlines()):
        if "Error" in line or "Exception" in line:
            return line.strip()
    return ""
