"""Notebook 02: which training API works with which strategy on this stack (its support matrix).

The TensorFlow guide has a table of what is "supported"; on Keras 3 it is not always true. This
module holds small *probes*, each a few real training steps of a tiny model, so that every cell
of the course's matrix is backed by a run (or, where a run needs hardware this machine lacks, by
a named upstream issue):

* :func:`fit_probe` and :func:`custom_loop_probe` train under a strategy you pass in;
* :func:`attempt` runs a probe and turns what happened into an :class:`Outcome`;
* :func:`run_multi_worker` starts a real 2-worker ``MultiWorkerMirroredStrategy`` cluster on this
  machine (two fresh processes with ``TF_CONFIG``), :func:`run_parameter_server` an in-process
  ``ParameterServerStrategy`` cluster (one fresh process); :func:`start_cluster_runs` starts both
  in the background so the notebook can do other work meanwhile;
* :func:`render_matrix` prints the table.

Outcomes never contain numbers that vary (losses, ports, times), so a notebook that prints them
reproduces itself under any CI strategy.
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

from ..errors import exception_line, last_error_line

#: Examples per step across all replicas, and steps per probe: enough to trace, run and apply
#: real updates, small enough that a probe costs about a second.
GLOBAL_BATCH = 16
STEPS = 2
FEATURES = 8


# --------------------------------------------------------------------------- probes


def probe_data(n: int = 64, seed: int = 0) -> tuple[Any, Any]:
    """A small, learnable, deterministic classification problem: ``(x, y)`` NumPy arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    return x, y


def probe_model(seed: int = 0) -> Any:
    """Dense(8, relu) -> Dense(2 logits). Build it inside ``strategy.scope()``."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation="relu", kernel_initializer=init),
            keras.layers.Dense(2, kernel_initializer=init),
        ]
    )


def probe_dataset() -> Any:
    """The probe data as a repeated ``tf.data.Dataset`` of global batches."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(probe_data()).batch(GLOBAL_BATCH).repeat()


def fit_probe(strategy: Any, steps: int = STEPS) -> list[float]:
    """Compile a tiny model in ``strategy.scope()`` and ``fit`` it for ``steps`` steps; the losses."""
    import keras

    with strategy.scope():
        model = probe_model()
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    # One step per epoch, so that the history holds the loss of every step.
    history = model.fit(probe_dataset(), epochs=steps, steps_per_epoch=1, shuffle=False, verbose=0)
    return [float(v) for v in history.history["loss"]]


def custom_loop_probe(strategy: Any, *, build_optimizer: bool = False, steps: int = STEPS) -> list[float]:
    """The custom training tutorial's loop with Adam for ``steps`` steps; the global losses.

    ``build_optimizer=True`` creates Adam's slot variables inside ``strategy.scope()`` before the
    first step (``optimizer.build(model.trainable_variables)``), the work-around of
    keras-team/keras#23085.
    """
    import keras
    import tensorflow as tf

    with strategy.scope():
        model = probe_model()
        optimizer = keras.optimizers.Adam(0.01)
        if build_optimizer:
            optimizer.build(model.trainable_variables)
        per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    dataset = strategy.experimental_distribute_dataset(probe_dataset())

    def step_fn(inputs: Any) -> Any:
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                per_example(y, model(x, training=True)), global_batch_size=GLOBAL_BATCH
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch: Any) -> Any:
        per_replica = strategy.run(step_fn, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dataset)
    return [float(train_step(next(iterator))) for _ in range(steps)]


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """What happened to one cell of the matrix, and why.

    ``status`` is ``works``, ``fails``, ``not run`` (needs hardware this machine lacks) or ``-``
    (does not apply).
    """

    status: str
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "works"

    def __str__(self) -> str:
        return f"{self.status}: {self.note}" if self.note else self.status


def attempt(probe: Callable[..., Sequence[float]], *args: Any, **kwargs: Any) -> Outcome:
    """Run a probe; ``works`` when it trained and every loss is finite, else ``fails`` and why."""
    import math

    try:
        losses = probe(*args, **kwargs)
    except Exception as error:  # a probe failing is the information we are after
        return Outcome("fails", exception_line(error))
    if not losses or not all(math.isfinite(v) for v in losses):
        return Outcome("fails", f"non-finite loss after {len(losses)} steps")
    return Outcome("works", f"{len(losses)} steps, finite loss")


# --------------------------------------------------------------------------- clusters on this machine


#: Cluster processes use their CPU as one device, whatever the notebook's own settings are.
_PLAIN_CPU = {"COURSE_REPLICAS": "1", "COURSE_STRATEGY": "auto"}


def _result_of(stdout: str) -> Optional[dict[str, Any]]:
    """The result line a probe program printed (:func:`course_utils.processes.print_result`)."""
    from ..processes import last_result

    try:
        data = last_result(stdout)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _program(*args: object) -> str:
    """Code for ``run_python`` that runs one program of :mod:`course_utils.workers.support_probes`."""
    return f"from course_utils.workers.support_probes import main; main({[str(a) for a in args]!r})"


def run_multi_worker(workers: int = 2, timeout: float = 240.0) -> dict[str, Any]:
    """Train with ``MultiWorkerMirroredStrategy`` on a real cluster of ``workers`` processes.

    Each process gets its own ``TF_CONFIG`` (same cluster, its own task index), runs
    :func:`custom_loop_probe`, then :func:`fit_probe`. Returns ``{"replicas": n, "custom_loop":
    Outcome, "fit": Outcome, "agree": bool}``; ``agree`` says every worker saw the same outcomes.
    """
    from ..cluster import cluster_spec, make_tf_config
    from ..processes import run_python

    spec = cluster_spec(workers=workers)
    envs = [
        {"TF_CONFIG": json.dumps(make_tf_config(spec, "worker", i)), **_PLAIN_CPU} for i in range(workers)
    ]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(run_python, _program("multi_worker"), env=env, timeout=timeout) for env in envs
        ]
        results = [future.result() for future in futures]
    parsed = []
    replicas = None
    for result in results:
        data = _result_of(result.stdout)
        if data is None or not all(k in data for k in ("custom_loop", "fit")):
            why = last_error_line(result.stderr) or f"exit code {result.returncode}"
            parsed.append(
                {k: Outcome("fails", f"worker crashed: {why[:100]}") for k in ("custom_loop", "fit")}
            )
            continue
        replicas = data.get("replicas") if replicas is None else replicas
        parsed.append({k: Outcome(**data[k]) for k in ("custom_loop", "fit")})
    first = parsed[0]
    return {
        "replicas": replicas,
        "custom_loop": first["custom_loop"],
        "fit": first["fit"],
        "agree": all(p == first for p in parsed),
    }


def run_parameter_server(workers: int = 2, timeout: float = 240.0) -> dict[str, Any]:
    """Train asynchronously with ``ParameterServerStrategy`` on an in-process cluster.

    One fresh process starts ``workers`` worker servers and one parameter server on free local
    ports (as in the parameter-server tutorial), schedules the probe's training steps with a
    ``ClusterCoordinator``, then tries :func:`fit_probe`. Returns the :class:`Outcome` of each
    (``custom_loop``, ``fit``), the type of a variable and where it lives, and whether Keras has
    ``DatasetCreator`` (what ``Model.fit`` needed for this strategy in Keras 2).
    """
    from ..processes import run_python

    result = run_python(_program("parameter_server", workers), env=_PLAIN_CPU, timeout=timeout)
    data = _result_of(result.stdout)
    if data is not None and all(k in data for k in ("custom_loop", "fit")):
        for key in ("custom_loop", "fit"):
            data[key] = Outcome(**data[key])
        return data
    why = last_error_line(result.stderr) or f"exit code {result.returncode}"
    crashed = Outcome("fails", f"cluster process crashed: {why[:100]}")
    return {"custom_loop": crashed, "fit": crashed}


def start_cluster_runs(timeout: float = 240.0) -> dict[str, Future]:
    """Start :func:`run_multi_worker` and :func:`run_parameter_server` in the background.

    Returns ``{"multi_worker": future, "parameter_server": future}``; call ``.result()`` on each
    when you need it. The three processes start at once, so their TensorFlow start-ups overlap
    with whatever the notebook does meanwhile.
    """
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {
        "multi_worker": pool.submit(run_multi_worker, 2, timeout),
        "parameter_server": pool.submit(run_parameter_server, 2, timeout),
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
    fit: Outcome
    custom_loop: Outcome
    issue: str = ""
    alternative: str = ""


def render_matrix(rows: Sequence[Row]) -> str:
    """A plain-text table (strategy | Model.fit | custom loop) with numbered notes under it.

    A cell that does not work gets a note: the error, then (once per row) the upstream issue and
    the way that works instead. Identical notes share one number.
    """
    notes: list[str] = []
    table: list[tuple[str, ...]] = [("strategy", "Model.fit", "custom loop (Adam)")]
    for row in rows:
        cells = []
        explained = False
        for outcome in (row.fit, row.custom_loop):
            text = outcome.status
            if outcome.status not in ("works", "-") and outcome.note:
                extra = [outcome.note.rstrip(".")]
                if not explained and row.issue:
                    extra.append(row.issue)
                if not explained and row.alternative:
                    extra.append(f"works instead: {row.alternative}")
                explained = True
                note = "; ".join(extra) + "."
                if note not in notes:
                    notes.append(note)
                text += f" [{notes.index(note) + 1}]"
            cells.append(text)
        table.append((row.strategy, *cells))
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    lines = []
    for i, line in enumerate(table):
        lines.append("  ".join(f"{line[j]:<{widths[j]}}" for j in range(3)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if notes:
        lines.append("")
        for number, note in enumerate(notes, 1):
            lines.append(f"[{number}] {note}")
    return "\n".join(lines)


def as_dict(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The matrix as plain data (for JSON or tests)."""
    return [asdict(r) for r in rows]
