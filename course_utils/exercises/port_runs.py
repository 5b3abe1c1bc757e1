"""Notebooks 07 and 10 (checks by same_update): the student's runs of a step, made in the grading kernel.

:func:`course_utils.compare.same_update` runs the student's step factory (its "port" runs) on
several replica counts, then again in its probes (a scaled loss, calmed or float32 layers, other
data). A check judged outside the student's kernel hands it a :func:`runner`: each such run crosses
to the kernel as a call of the check's harness with plain options, which runs it there
(:func:`run_there`) and sends back the :class:`~course_utils.compare.Run` as plain data. The
references, the noise estimate, the comparisons and the diagnosis stay with the check. The course's
model, optimizer and metric are never sent: each harness builds its own module's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .. import compare
from ..checks import expect
from . import in_kernel

#: The options of compare.attempt_run that cross as data (the factories are the harness's own).
PLAIN = ("batch", "weights", "seed", "adjust", "scale", "lr_scale", "distributed")


def run_there(
    factory: Callable[..., Any],
    replicas: int,
    data: Sequence[Any],
    options: dict[str, Any],
    *,
    make_model: Callable[[], Any],
    make_optimizer: Optional[Callable[[], Any]] = None,
    make_metric: Optional[Callable[[], Any]] = None,
) -> dict[str, Any]:
    """In the kernel: ``compare.attempt_run`` of the student's ``factory`` (any form same_update
    takes) on ``replicas`` replicas, with the options :func:`runner` sent; the Run as plain data."""
    plain = {k: options[k] for k in PLAIN if k in options}
    step = compare._binder(factory, bool(plain.get("distributed")), int(options["g"]))
    run = compare.attempt_run(
        int(replicas),
        step,
        [np.asarray(c) for c in data],
        **{**plain, "weights": [np.asarray(w) for w in plain["weights"]], "adjust": tuple(plain["adjust"])},
        make_model=make_model,
        make_optimizer=make_optimizer if options.get("optimizer") else None,
        make_metric=make_metric if options.get("metric") else None,
    )
    return dataclasses.asdict(run)  # replicas, losses, update, first_update, metrics, error, ...


def runner(
    harness: Callable[..., Any],
    student: Any,
    g: int,
    *,
    make_model: Callable[[], Any],
    make_optimizer: Optional[Callable[[], Any]] = None,
    make_metric: Optional[Callable[[], Any]] = None,
    on_reply: Optional[Callable[[dict], None]] = None,
) -> Callable[..., compare.Run]:
    """``same_update(..., runner=)``: each port run as ``in_kernel(harness, student, replicas, data,
    options)``, its reply checked (a run of this model: its steps, an update no larger than its
    weights) and read back as a Run; ``on_reply`` sees each reply (a harness may send more)."""

    def run(n: int, make_step: Any, data: Sequence[Any], **options: Any) -> compare.Run:
        ours = (make_model, make_optimizer, make_metric)
        theirs = [options.get(k) for k in ("make_model", "make_optimizer", "make_metric")]
        if options.get("fit") is not None or any(t is not None and t is not o for t, o in zip(theirs, ours)):
            raise ValueError("this runner runs the check's own step factory and model only")
        plain = {k: options[k] for k in PLAIN if k in options}
        plain.update(g=g, optimizer=theirs[1] is not None, metric=theirs[2] is not None)
        reply = in_kernel(harness, student, n, [np.asarray(c) for c in data], plain)
        steps = -(-len(data[0]) // int(options["batch"]))
        read = _read(reply, n, steps, compare.flat(options["weights"]).size)
        if on_reply is not None:
            on_reply(reply)
        return read

    return run


def _read(reply: Any, n: int, steps: int, size: int) -> compare.Run:
    """The Run a harness's reply describes (``size``: the model's weights, trainable or not); an
    answer that is not one fails the check."""
    ok = isinstance(reply, dict) and reply.get("replicas") == n and isinstance(reply.get("error"), str)
    fields = {k: reply.get(k) for k in ("losses", "metrics", "metric_names", "created")} if ok else {}
    ok = ok and all(isinstance(v, (list, tuple)) for v in fields.values())
    arrays = [reply.get(k) for k in ("update", "first_update")] if ok else []
    ok = ok and all(isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim == 1 for a in arrays)
    if ok and not reply["error"]:  # a run that ran: one loss a step, the whole model's update
        ok = len(fields["losses"]) == steps and all(0 < a.size <= size for a in arrays)
        ok = ok and len(fields["metrics"]) == len(fields["metric_names"])
    ok = ok and all(v is None or _number(v) for v in fields["losses"])
    ok = ok and all(_number(v) for v in fields["metrics"])
    ok = ok and all(isinstance(v, str) for v in [*fields["metric_names"], *fields["created"]])
    expect(ok, f"The grading kernel's answer is not a run of your step on {n} replica(s).")
    return compare.Run(
        n,
        tuple(None if v is None else float(v) for v in fields["losses"]),
        arrays[0],
        arrays[1],
        tuple(float(v) for v in fields["metrics"]),
        error=reply["error"],
        metric_names=tuple(fields["metric_names"]),
        created=tuple(fields["created"]),
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
