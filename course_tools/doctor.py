"""``python -m course_tools.doctor [--json FILE]``: is this runtime ready for the course?

In about a minute, on whatever machine it runs (a laptop, Colab's CPU, GPU or TPU runtimes, a
lab machine), the doctor checks what the notebooks rely on and prints one row per check::

    check                     status  detail
    versions                  ok      TensorFlow 2.21.0 with Keras 3.15.1 matches the tested range ...
    2 replicas vs 1 device    ok      update on 2 replicas = 1.00x the single-device update ...
    trap keras#23085          note    present: a custom loop whose Adam is not built crashes ...

* ``ok``: works as the course needs; ``note``: worth knowing, nothing to fix (a known upstream
  bug is present, and the row says the workaround the course teaches); ``FAIL``: something the
  course needs does not work here, and the row says why in one line. The command exits with
  status 1 when a row says ``FAIL``, else 0.
* Every check that needs TensorFlow runs in fresh processes of its own, with a time limit,
  started at the same time as the others: a check that needs its own device count gets it, a
  crash or a hang becomes one row, never a traceback, and the process that calls the doctor
  (a notebook kernel, say) keeps its TensorFlow untouched. On a TPU runtime, run it before
  anything else takes the TPU: a TPU serves one process at a time.
* ``--json FILE`` also writes the rows as JSON (``{"ok", "seconds", "python", "tested_range",
  "rows": [{"name", "status", "detail", "seconds", "data"}]}``).

The checks: the versions against the tested range (:mod:`course_utils.versions`); the devices,
the strategy ``get_strategy()`` gives and what the ``auto`` chain tried; one SGD step on 2
replicas against the single-device step (the update factor, which must be 1.00); ``Model.fit``
and the custom loop (Adam built in the scope) under the strategy; a 2-worker local cluster
started, trained one step and stopped, with no process and no port left; the data source; and
the state of each known trap on this stack (keras-team/keras#23085, keras-team/keras#20585,
``Model.fit`` with ``steps_per_execution`` > 1 on the collective strategy over virtual CPUs).

Python API: :func:`run` returns :class:`Findings` (``.ok``, ``.table()``, ``.as_dict()``).
Importing this module starts nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from course_utils.errors import last_error_line, shorten_error

OK, NOTE, FAIL = "ok", "note", "FAIL"
STATUSES = (OK, NOTE, FAIL)

#: Seconds each check may take before it is stopped and reported as not finished.
DEFAULT_TIMEOUT = 150.0
#: Rows about a known upstream bug are named ``"trap ..."`` and listed last.
TRAP = "trap "
#: The most characters of an error a row quotes (on one line, as :func:`shorten_error` gives it).
ERROR_CHARS = 200


@dataclass(frozen=True)
class Row:
    """One line of the doctor's table: a check's ``name``, ``status`` (ok, note or FAIL) and a
    one-line ``detail``; ``seconds`` is the time of the check that produced it, ``data`` holds
    machine-readable extras (for ``--json`` and the tests)."""

    name: str
    status: str
    detail: str
    seconds: Optional[float] = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "seconds": self.seconds,
            "data": self.data,
        }


@dataclass(frozen=True)
class Check:
    """One check: the ``rows`` it reports (by name, in table order) and ``run(timeout)``, which
    returns them. ``failure`` is the status its rows get when the check itself crashes or
    times out: ``FAIL`` for what the course needs, ``note`` for a known-trap probe."""

    key: str
    rows: tuple[str, ...]
    run: Callable[[float], list[Row]]
    failure: str = FAIL


@dataclass(frozen=True)
class Findings:
    """What the doctor found: the rows in table order and the wall time of the whole run."""

    rows: tuple[Row, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        """True when no row says FAIL (notes are fine)."""
        return all(row.status != FAIL for row in self.rows)

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)

    def summary(self) -> str:
        """``"12 checks in 48 s: 9 ok, 3 notes, no failure"``."""
        counts = {s: sum(r.status == s for r in self.rows) for s in STATUSES}
        notes = f"{counts[NOTE]} note{'s' if counts[NOTE] != 1 else ''}"
        failed = f"{counts[FAIL]} FAIL" if counts[FAIL] else "no failure"
        return f"{len(self.rows)} checks in {self.seconds:.0f} s: {counts[OK]} ok, {notes}, {failed}"

    def table(self, width: int = 110) -> str:
        """The rows as a plain-text table (long details wrap under the detail column)."""
        header = ("check", "status", "detail")
        name_w = max([len(header[0])] + [len(r.name) for r in self.rows])
        status_w = max(len(s) for s in (header[1], *STATUSES))
        indent = name_w + status_w + 4
        detail_w = max(40, width - indent)
        lines = [f"{header[0]:<{name_w}}  {header[1]:<{status_w}}  {header[2]}"]
        lines.append(f"{'-' * name_w}  {'-' * status_w}  {'-' * min(detail_w, 60)}")
        for r in self.rows:
            wrapped = textwrap.wrap(r.detail, detail_w, break_long_words=False, break_on_hyphens=False) or [
                ""
            ]
            lines.append(f"{r.name:<{name_w}}  {r.status:<{status_w}}  {wrapped[0]}")
            lines.extend(" " * indent + rest for rest in wrapped[1:])
        lines.append("")
        lines.append(self.summary())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        from course_utils.versions import tested_range

        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "python": platform.python_version(),
            "tested_range": tested_range(),
            "rows": [r.as_dict() for r in self.rows],
        }


# --------------------------------------------------------------------------- helpers


def _failure_status(check: Check, name: str) -> str:
    """A known trap's row is never a failure: its probe failing is a note."""
    return NOTE if name.startswith(TRAP) else check.failure


def _failed_rows(check: Check, reason: str, seconds: Optional[float]) -> list[Row]:
    return [Row(name, _failure_status(check, name), reason, seconds) for name in check.rows]


def run_check(check: Check, timeout: float) -> list[Row]:
    """Run one check; whatever happens, return exactly its rows, in its order (a check that
    raises, or returns rows it did not announce, becomes one-line rows with its failure status)."""
    start = time.monotonic()
    try:
        rows = list(check.run(timeout))
    except Exception as error:  # a check must never take the doctor down: it becomes its rows
        reason = shorten_error(f"{type(error).__name__}: {error}".rstrip(": "), ERROR_CHARS)
        return _failed_rows(check, f"the check could not run: {reason}", round(time.monotonic() - start, 1))
    seconds = round(time.monotonic() - start, 1)
    by_name = {r.name: r for r in rows}
    result = []
    for name in check.rows:
        row = by_name.get(name)
        if row is None:
            result.append(
                Row(name, _failure_status(check, name), "the check did not report this row", seconds)
            )
        else:
            result.append(Row(row.name, row.status, row.detail, seconds, row.data))
    return result


def in_fresh_process(
    function: str,
    rows: Sequence[str],
    *,
    replicas: Optional[int] = None,
    gpus: bool = False,
    failure: str = FAIL,
) -> Callable[[float], list[Row]]:
    """A check's ``run`` that calls ``course_tools.doctor.<function>()`` in a new Python process
    (``COURSE_REPLICAS=replicas`` when given; GPUs hidden unless ``gpus``) and reads the rows it
    prints. A crash or a timeout becomes the check's rows with status ``failure`` and the reason."""

    def run(timeout: float) -> list[Row]:
        from course_utils.errors import CourseError
        from course_utils.processes import run_python

        code = f"from course_tools import doctor\ndoctor.emit(doctor.{function}())\n"
        try:
            result = run_python(code, replicas=replicas, timeout=timeout, gpus=gpus)
        except CourseError:
            return [
                Row(name, failure, f"did not finish within {timeout:g} s and was stopped") for name in rows
            ]
        found = parse_rows(result.stdout)
        if found is not None:
            return found
        why = last_error_line(result.stderr) or f"exit code {result.returncode}"
        return [Row(name, failure, f"its process failed: {shorten_error(why, ERROR_CHARS)}") for name in rows]

    return run


def emit(rows: Sequence[Row]) -> None:
    """Print ``rows`` as one result line (how a check's fresh process hands them back; the
    protocol of :func:`course_utils.processes.print_result`)."""
    from course_utils.processes import print_result

    print_result({"doctor_rows": [r.as_dict() for r in rows]})


def parse_rows(stdout: str) -> Optional[list[Row]]:
    """The rows a fresh process printed with :func:`emit`, or None when it printed none."""
    from course_utils.processes import parse_result

    for line in reversed(stdout.splitlines()):
        data = parse_result(line)
        if isinstance(data, dict) and "doctor_rows" in data:
            try:
                return [
                    Row(i["name"], i["status"], i["detail"], i.get("seconds"), i.get("data") or {})
                    for i in data["doctor_rows"]
                ]
            except (KeyError, TypeError, ValueError):
                return None
    return None


# --------------------------------------------------------------------------- the checks
# Functions named check_* run inside a fresh process (see in_fresh_process) and return rows.


def versions_rows() -> list[Row]:
    """The versions against the tested range, read from the package metadata (no import)."""
    from course_utils.versions import installed, judge, legacy_keras

    found = installed()
    python = f"Python {platform.python_version()}"
    if found["tensorflow"] is None:
        return [
            Row(
                "versions",
                FAIL,
                f"TensorFlow is not installed ({python}); Colab's TPU runtimes ship none: the README "
                "says what to install",
            )
        ]
    if found["keras"] is None:
        return [Row("versions", FAIL, f"TensorFlow {found['tensorflow']} but no Keras 3 ({python})")]
    verdict = judge(found["tensorflow"], found["keras"], legacy_keras=legacy_keras())
    status = OK if verdict.tested else NOTE if verdict.supported else FAIL
    return [
        Row(
            "versions",
            status,
            f"{verdict.message} {python}.",
            data={"tensorflow": found["tensorflow"], "keras": found["keras"], "verdict": verdict.status},
        )
    ]


def check_runtime() -> list[Row]:
    """In this process, as a notebook's set-up cell leaves it: the devices, the strategy
    ``get_strategy()`` gives and the chain ``auto`` tried, then ``Model.fit`` and the custom loop
    (Adam built in the scope) for two steps each under that strategy."""
    import course_utils
    from course_tools import probes as support
    from course_utils import hardware
    from course_utils.runtime import devices_line

    settings = course_utils.setup(show_report=False)
    rows = [Row("devices", OK, devices_line())]
    plan = hardware.plan_hardware(find_tpu=hardware.find_tpu_if_hinted)
    strategy = course_utils.get_strategy(verbose=False)
    about = course_utils.describe(strategy, show=False)
    replicas = about.replicas
    where = (
        f"{about.name} with {replicas} replica{'s' if replicas != 1 else ''} on {', '.join(about.devices)}"
    )
    rows.append(
        Row("strategy", OK, f"{where} (COURSE_STRATEGY={settings.strategy})", data={"replicas": replicas})
    )
    rows.append(Row("auto chain", OK, f"tried: {plan.tried()}"))
    on = f"on {about.name} ({replicas} replica{'s' if replicas != 1 else ''})"
    fit = support.attempt(support.fit_probe, strategy)
    rows.append(
        Row("Model.fit", OK, f"2 steps {on}, finite loss")
        if fit.ok
        else Row("Model.fit", FAIL, f"fails {on}: {fit.note}")
    )
    loop = support.attempt(support.custom_loop_probe, strategy, build_optimizer=True)
    what = "custom loop with Adam built in strategy.scope()"
    rows.append(
        Row("custom loop", OK, f"2 steps of the {what} {on}, finite loss")
        if loop.ok
        else Row("custom loop", FAIL, f"the {what} fails {on}: {loop.note}")
    )
    return rows


def check_factor() -> list[Row]:
    """One SGD step of the course CNN on 2 replicas against the step written out on one device:
    the update must be 1.00x the single-device one (what every check of the course relies on)."""
    import course_utils
    from course_utils.lessons import reference

    course_utils.use_virtual_cpus(2)  # before the first model starts TensorFlow
    weights = reference.initial_weights()
    images, labels = reference.check_batch()
    strategy = reference.checking_strategy(2)
    step = reference.run_train_step(strategy, reference.tutorial_train_step, weights, images, labels)
    single = reference.reference_step(weights, images, labels)
    factor = reference.factor(step.update, single.update)
    loss_factor = step.loss / single.loss if step.loss is not None and single.loss else float("nan")
    same = reference.same(step.update, single.update) and abs(loss_factor - 1) < 1e-3
    detail = (
        f"update on {step.replicas} replicas = {factor:.2f}x the single-device update, loss "
        f"{loss_factor:.2f}x (one SGD step of the course CNN, {len(labels)} images)"
    )
    if not same:
        detail += "; the distributed step is not the single-device step: distribution is broken here"
    return [Row("2 replicas vs 1 device", OK if same else FAIL, detail, data={"factor": factor})]


def check_trap_23085() -> list[Row]:
    """keras-team/keras#23085: the custom loop with an Adam that is not built before the first
    step, on the collective MirroredStrategy over 2 virtual CPUs."""
    from course_tools import probes as support
    from course_utils.devices import use_virtual_cpus
    from course_utils.strategies import mirrored_cpus

    use_virtual_cpus(2)  # a fresh process: split its CPU before the strategy needs two
    outcome = support.attempt(support.custom_loop_probe, mirrored_cpus(2), build_optimizer=False)
    if outcome.ok:
        detail = (
            "fixed: a custom loop with an unbuilt Adam trains on the collective MirroredStrategy; "
            "optimizer.build(model.trainable_variables) in the scope, as the course teaches, is still right"
        )
        return [Row("trap keras#23085", OK, detail, data={"state": "fixed"})]
    detail = (
        f"present: a custom loop whose Adam is not built crashes on the collective MirroredStrategy "
        f"({outcome.note}); the course calls optimizer.build(model.trainable_variables) in strategy.scope()"
    )
    return [Row("trap keras#23085", NOTE, detail, data={"state": "present"})]


def check_trap_steps_per_execution() -> list[Row]:
    """``Model.fit`` with ``steps_per_execution=2`` on the collective MirroredStrategy over 2
    virtual CPUs."""
    import keras

    from course_tools import probes as support
    from course_utils.devices import use_virtual_cpus
    from course_utils.strategies import mirrored_cpus

    use_virtual_cpus(2)  # a fresh process: split its CPU before the strategy needs two

    def fit_two_per_call(strategy: Any) -> list[float]:
        with strategy.scope():
            model = support.probe_model()
            model.compile(
                optimizer=keras.optimizers.SGD(0.1),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                steps_per_execution=2,
            )
        history = model.fit(support.probe_dataset(), epochs=1, steps_per_epoch=4, verbose=0)
        return [float(v) for v in history.history["loss"]]

    outcome = support.attempt(fit_two_per_call, mirrored_cpus(2))
    name = "trap steps_per_execution"
    if outcome.ok:
        detail = (
            "fixed: Model.fit with steps_per_execution=2 trains on the collective MirroredStrategy "
            "over virtual CPUs"
        )
        return [Row(name, OK, detail, data={"state": "fixed"})]
    detail = (
        f"present: Model.fit with steps_per_execution=2 fails on the collective MirroredStrategy over "
        f"virtual CPUs ({outcome.note}); the course's benchmark uses "
        "mirrored_cpus(n, all_reduce='one_device') (ReductionToOneDevice) there"
    )
    return [Row(name, NOTE, detail, data={"state": "present"})]


def check_data() -> list[Row]:
    """Where the notebooks' data comes from here (the data module's own line)."""
    import course_utils

    data = course_utils.load_mnist(quiet=True)
    builtin = data.source.startswith("the built-in")
    detail = data.summary().removeprefix("Data: ")
    if builtin:
        detail += "; the notebooks run on this learnable stand-in"
    return [Row("data", NOTE if builtin else OK, detail, data={"source": data.source})]


#: The program every task of the cluster check runs.
CLUSTER_WORKER = "course_tools.doctor_worker"


def cluster_rows(
    timeout: float, *, target: str = CLUSTER_WORKER, args: Sequence[str] = ("--fit",)
) -> list[Row]:
    """A 2-worker ``MultiWorkerMirroredStrategy`` cluster on this machine: started on free ports,
    one synchronous training step (the same weights on both workers after it), then
    ``Model.fit`` (keras-team/keras#20585), stopped; no process and no port may be left.

    ``target`` and ``args`` name the worker program (:mod:`course_tools.doctor_worker`; the
    tests pass others to make the cluster fail)."""
    from course_utils.cluster import (
        ClusterError,
        ClusterOptions,
        LocalCluster,
        WorkerFailed,
        leftover_processes,
        port_is_free,
    )

    cluster = LocalCluster(
        target,
        list(args),
        workers=2,
        verbose=False,
        timeout=timeout,
        options=ClusterOptions(start_timeout=timeout, name="course_tools.doctor"),
    )
    steps: dict[str, str] = {}
    fit_line = ""
    problem = ""
    try:
        with cluster:
            for task in ("worker 0", "worker 1"):
                steps[task] = cluster.wait_for_line(task, r"^custom step: ")
            result = cluster.wait()
            fit_line = next((line for line in result["worker 0"].lines if line.startswith("fit: ")), "")
    except WorkerFailed as error:
        problem = f"{error.task} failed: {shorten_error(error.reason, ERROR_CHARS)}"
    except ClusterError as error:
        problem = shorten_error(str(error).splitlines()[0], ERROR_CHARS)
    ports = list(cluster.ports)
    limit = time.monotonic() + 5.0
    while True:  # a port is free once the killed server's socket is closed: give it a moment
        left = leftover_processes()
        busy = [p for p in ports if not port_is_free(p)]
        if (not left and not busy) or time.monotonic() > limit:
            break
        time.sleep(0.2)
    data = {
        "ports": ports,
        "pids": sorted(cluster.pids.values()),
        "leftover_processes": left,
        "busy_ports": busy,
    }
    clean = not left and not busy
    tail = (
        "stopped: no process or port left"
        if clean
        else f"{len(left)} process(es) and {len(busy)} port(s) left after the cluster stopped"
    )
    hashes = {line.rsplit("weights=", 1)[-1] for line in steps.values()}
    if len(steps) == 2 and len(hashes) == 1 and clean and not problem:
        row = Row(
            "2-worker cluster",
            OK,
            f"2 worker processes started on free ports, trained 1 synchronous step (the same weights on "
            f"both), {tail}",
            data=data,
        )
    else:
        why = problem or ("the workers' weights differ after the step" if len(hashes) > 1 else "")
        row = Row("2-worker cluster", FAIL, "; ".join(p for p in (why, tail) if p), data=data)
    return [row, _fit_trap_row(fit_line, problem)]


def _fit_trap_row(line: str, problem: str) -> Row:
    name = "trap keras#20585"
    if line == "fit: works":
        return Row(name, OK, "fixed: Model.fit trains under MultiWorkerMirroredStrategy with 2 workers")
    if line.startswith("fit: "):
        reason = line.split(": ", 2)[-1]
        return Row(
            name,
            NOTE,
            f"present: Model.fit under MultiWorkerMirroredStrategy with 2 workers fails ({reason}); the course "
            "trains multi-worker with a custom loop (notebook 07), or with tf-keras (TF_USE_LEGACY_KERAS=1)",
            data={"state": "present"},
        )
    return Row(name, NOTE, f"not tried: {problem or 'the cluster did not get that far'}")


def default_checks() -> list[Check]:
    """The doctor's checks, in table order."""
    return [
        Check("versions", ("versions",), lambda timeout: versions_rows()),
        Check(
            "runtime",
            ("devices", "strategy", "auto chain", "Model.fit", "custom loop"),
            in_fresh_process(
                "check_runtime", ("devices", "strategy", "auto chain", "Model.fit", "custom loop"), gpus=True
            ),
        ),
        Check(
            "factor",
            ("2 replicas vs 1 device",),
            in_fresh_process("check_factor", ("2 replicas vs 1 device",), replicas=2),
        ),
        Check("cluster", ("2-worker cluster", "trap keras#20585"), cluster_rows),
        Check("data", ("data",), in_fresh_process("check_data", ("data",))),
        Check(
            "keras_23085",
            ("trap keras#23085",),
            in_fresh_process("check_trap_23085", ("trap keras#23085",), replicas=2, failure=NOTE),
            failure=NOTE,
        ),
        Check(
            "steps_per_execution",
            ("trap steps_per_execution",),
            in_fresh_process(
                "check_trap_steps_per_execution", ("trap steps_per_execution",), replicas=2, failure=NOTE
            ),
            failure=NOTE,
        ),
    ]


_NEEDS_TENSORFLOW = {"runtime", "factor", "cluster", "data", "keras_23085", "steps_per_execution"}


def run(
    checks: Optional[Sequence[Check]] = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    show: bool = False,
) -> Findings:
    """Run every check at the same time (each with ``timeout`` seconds) and return the findings.

    ``checks`` defaults to :func:`default_checks`. ``show=True`` prints the table. Without
    TensorFlow installed, the checks that need it are not started and say so.
    """
    from course_utils.versions import installed

    start = time.monotonic()
    checks = list(default_checks() if checks is None else checks)
    skip = installed()["tensorflow"] is None
    results: dict[str, list[Row]] = {}
    runnable = []
    for check in checks:
        if skip and check.key in _NEEDS_TENSORFLOW:
            results[check.key] = _failed_rows(check, "not run: TensorFlow is not installed", None)
        else:
            runnable.append(check)
    with ThreadPoolExecutor(max_workers=max(1, len(runnable))) as pool:
        futures = {c.key: pool.submit(run_check, c, timeout) for c in runnable}
        for key, future in futures.items():
            results[key] = future.result()
    rows = [row for check in checks for row in results[check.key]]
    rows.sort(key=lambda row: row.name.startswith(TRAP))  # the known traps last, in check order
    findings = Findings(tuple(rows), time.monotonic() - start)
    if show:
        print(findings.table())
    return findings


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line: print the table, write ``--json FILE``; 1 when a row says FAIL."""
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.doctor",
        description="Check in about a minute that this runtime runs the course (each check in a fresh process).",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the rows to FILE as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds each check may take (default %(default)s)",
    )
    args = parser.parse_args(argv)
    findings = run(timeout=args.timeout)
    print(findings.table())
    if args.json:
        Path(args.json).write_text(json.dumps(findings.as_dict(), indent=2) + "\n")
        print(f"wrote {len(findings.rows)} rows to {args.json}")
    return 0 if findings.ok else 1


if __name__ == "__main__":
    sys.exit(main())
