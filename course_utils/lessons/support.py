"""Notebook 02: the scaffolding around its support matrix (processes, the table, the pinned outcomes).

The probes (a tiny model trained with ``Model.fit`` or the custom loop under a strategy, and
``attempt``, which names what fails) are written in the notebook's cells. This module runs them
where a kernel cannot: :func:`start_cluster_runs` sends the source of those cells to a real
2-worker ``MultiWorkerMirroredStrategy`` cluster and to an in-process ``ParameterServerStrategy``
cluster, in the background; :class:`Row` and :func:`render_matrix` print the table. An outcome is
``"works: ..."``, ``"fails: <error>"``, ``"not run: <why>"`` or ``"-"``, never a number that varies
(losses, ports, times), so the notebook reproduces itself under any CI strategy.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..errors import last_error_line

#: The names the probe cells must define, for the cluster programs to call.
PROBE_NAMES = ("fit_probe", "custom_loop_probe", "attempt", "probe_model", "probe_dataset")
#: ``1`` in the course's own tests (the Makefile's TEST_ENV, tests/conftest.py), never in a student's run.
STRICT_PINS = "COURSE_STRICT_PINS"


def status(outcome: str) -> str:
    """``works``, ``fails``, ``not run`` or ``-``: an outcome's text before its first colon."""
    return outcome.split(":", 1)[0].strip()


def cell_source(*functions: Callable[..., Any]) -> str:
    """The whole text of each cell (or file) that defines ``functions``, once each, in order.

    IPython keeps every cell's source under the file name that ``function.__code__`` records, so
    the cluster processes can run exactly the cells the student reads.
    """
    import linecache

    files: list[str] = []
    for function in functions:
        name = function.__code__.co_filename
        if name not in files:
            files.append(name)
    sources = ["".join(linecache.getlines(name)) for name in files]
    missing = [f.__name__ for f, text in zip(functions, sources) if not text]
    if missing:
        raise ValueError(f"cannot read the source of {', '.join(missing)}: define it in a cell or a file.")
    return "\n\n".join(sources)


# --------------------------------------------------------------------------- clusters on this machine


#: Cluster processes use their CPU as one device, whatever the notebook's own settings are.
_PLAIN_CPU = {"COURSE_REPLICAS": "1", "COURSE_STRATEGY": "auto"}


def _result_of(stdout: str) -> Optional[dict[str, Any]]:
    """The result line a cluster program printed (:func:`course_utils.processes.print_result`)."""
    from ..processes import last_result

    try:
        data = last_result(stdout)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _program(probes: str, *args: object) -> str:
    """Code for ``run_python``: one program of :mod:`course_utils.workers.support_probes`."""
    arguments = [str(a) for a in args]
    return f"from course_utils.workers.support_probes import main; main({arguments!r}, {probes!r})"


def _crashed(result: Any, who: str) -> str:
    why = last_error_line(result.stderr) or f"exit code {result.returncode}"
    return f"fails: {who} crashed: {why[:100]}"


def run_multi_worker(probes: str, workers: int = 2, timeout: float = 240.0) -> dict[str, Any]:
    """Run the probes under ``MultiWorkerMirroredStrategy`` on a real cluster of ``workers`` processes.

    Each process gets its own ``TF_CONFIG`` (same cluster, its own task index) and runs the probe
    cells, then ``attempt(custom_loop_probe, strategy)`` and ``attempt(fit_probe, strategy)``.
    Returns ``{"replicas": n, "custom_loop": outcome, "fit": outcome, "agree": bool}``; ``agree``
    says every worker saw the same outcomes.
    """
    from ..cluster import cluster_spec, make_tf_config
    from ..processes import run_python

    spec = cluster_spec(workers=workers)
    envs = [
        {"TF_CONFIG": json.dumps(make_tf_config(spec, "worker", i)), **_PLAIN_CPU} for i in range(workers)
    ]
    code = _program(probes, "multi_worker")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_python, code, env=env, timeout=timeout) for env in envs]
        results = [future.result() for future in futures]
    seen = []
    replicas = None
    for result in results:
        data = _result_of(result.stdout)
        if data is None or not all(k in data for k in ("custom_loop", "fit")):
            crashed = _crashed(result, "worker")
            seen.append({"custom_loop": crashed, "fit": crashed})
            continue
        replicas = data.get("replicas") if replicas is None else replicas
        seen.append({k: str(data[k]) for k in ("custom_loop", "fit")})
    return {**seen[0], "replicas": replicas, "agree": all(s == seen[0] for s in seen)}


def run_parameter_server(probes: str, workers: int = 2, timeout: float = 240.0) -> dict[str, Any]:
    """Run the probes under ``ParameterServerStrategy`` on an in-process cluster.

    One fresh process starts ``workers`` worker servers and one parameter server on free local
    ports (as in the parameter-server tutorial), trains the probe model with a
    ``ClusterCoordinator`` (notebook 08 teaches that loop), then tries ``attempt(fit_probe, ...)``.
    Returns both outcomes (``custom_loop``, ``fit``), the type of a variable and where it lives,
    and whether Keras has ``DatasetCreator`` (what ``Model.fit`` needed here in Keras 2).
    """
    from ..processes import run_python

    result = run_python(_program(probes, "parameter_server", workers), env=_PLAIN_CPU, timeout=timeout)
    data = _result_of(result.stdout)
    if data is not None and all(k in data for k in ("custom_loop", "fit")):
        return data
    crashed = _crashed(result, "cluster process")
    return {"custom_loop": crashed, "fit": crashed}


def start_cluster_runs(*functions: Callable[..., Any], timeout: float = 240.0) -> dict[str, Future]:
    """Start :func:`run_multi_worker` and :func:`run_parameter_server` in the background, on the
    cells that define ``functions`` (:func:`cell_source`). Returns
    ``{"multi_worker": future, "parameter_server": future}``; call ``.result()`` on each when you
    need it, so the three processes start up while the notebook works.
    """
    probes = cell_source(*functions)
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {
        "multi_worker": pool.submit(run_multi_worker, probes, 2, timeout),
        "parameter_server": pool.submit(run_parameter_server, probes, 2, timeout),
    }
    pool.shutdown(wait=False)
    return futures


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    """One line of the matrix: a strategy (as set up here) and the outcome of each training API.

    ``issue`` names the upstream issue behind a failure and ``alternative`` the way that works
    instead (itself run in the notebook); both go into a numbered note under the table.
    """

    strategy: str
    fit: str
    custom_loop: str
    issue: str = ""
    alternative: str = ""

    @property
    def statuses(self) -> tuple[str, str]:
        """The status of ``Model.fit`` and of the custom loop (:func:`status`)."""
        return status(self.fit), status(self.custom_loop)


def render_matrix(rows: Sequence[Row]) -> str:
    """A plain-text table (strategy | Model.fit | custom loop) with numbered notes under it.

    A cell that does not work gets a note: the error, then (once per row) the upstream issue and
    the way that works instead. Identical notes share one number.
    """
    notes: list[str] = []
    table: list[tuple[str, ...]] = [("strategy", "Model.fit", "custom loop (Adam)")]
    for row in rows:
        row_cells: list[str] = []
        explained = False
        for outcome in (row.fit, row.custom_loop):
            text = status(outcome)
            note = outcome.split(":", 1)[1].strip() if ":" in outcome else ""
            if text not in ("works", "-") and note:
                extra = [note.rstrip(".")]
                if not explained and row.issue:
                    extra.append(row.issue)
                if not explained and row.alternative:
                    extra.append(f"works instead: {row.alternative}")
                explained = True
                explanation = "; ".join(extra) + "."
                if explanation not in notes:
                    notes.append(explanation)
                text += f" [{notes.index(explanation) + 1}]"
            row_cells.append(text)
        table.append((row.strategy, *row_cells))
    widths = [max(len(cells[i]) for cells in table) for i in range(3)]
    lines = []
    for i, cells in enumerate(table):
        lines.append("  ".join(f"{cells[j]:<{widths[j]}}" for j in range(3)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if notes:
        lines.append("")
        lines.extend(f"[{number}] {note}" for number, note in enumerate(notes, 1))
    return "\n".join(lines)


def compare_with_pins(
    rows: Sequence[Row], expected: dict[str, tuple[str, str]], facts: dict[str, bool]
) -> str:
    """Whether ``rows`` show ``expected`` (row -> statuses) and ``facts`` (each true), as the pinned stack
    (:data:`course_utils.versions.NEWEST`) does: the text returned lists the rows that differ. Only in the
    course's tests (:data:`STRICT_PINS`) on the pinned releases does a difference raise (update section 7)."""
    import keras
    import tensorflow as tf

    from ..versions import NEWEST, release

    found = {row.strategy: row.statuses for row in rows}
    differences = [
        f"{k.strip()}: expected {v}, found {found.get(k)}" for k, v in expected.items() if found.get(k) != v
    ]
    differences += [f"no longer true: {fact}" for fact, holds in facts.items() if not holds]
    pinned = (NEWEST["tensorflow"], NEWEST["keras"])
    on_pins = (release(tf.__version__), release(keras.__version__)) == pinned
    if differences and on_pins and os.environ.get(STRICT_PINS) == "1":
        raise AssertionError("upstream changed: update section 7 and its appendix. " + "; ".join(differences))
    pins = "TensorFlow {}.{}, Keras {}.{}".format(*pinned[0], *pinned[1])
    found_text = f"the matrix of TensorFlow {tf.__version__}, Keras {keras.__version__}"
    if differences:
        return f"{found_text} differs from the pinned stack ({pins}) in:\n  " + "\n  ".join(differences)
    return f"{found_text} matches the pinned stack ({pins})"
