"""``python -m course_tools.bench``: the course's training loops timed side by side (the loops notebook 09 writes in its cells).

It trains the same model (:func:`course_utils.models.custom_training_cnn`) on the same data (the
offline Fashion-MNIST stand-in, ``COURSE_OFFLINE=1``) with the three loops of
:mod:`.loops` (``naive_ctl``, ``ctl``, ``fit``) on 1, 2 and 4 replicas (virtual CPUs),
and prints examples per second. How it measures:

* each (loop, replicas) pair runs in a fresh process: TensorFlow fixes its devices when it starts,
  and a process that already trained another loop would carry its threads and caches along;
* the processes of one replica count (``--jobs``, 3 by default: the three loops) start together,
  warm up, then take turns: one timed run of one process at a time, round after round. Nothing
  is ever timed while another measuring process computes, and a change in the machine's load
  during the benchmark slows every loop alike, so the ratios between loops stay meaningful on a
  busy machine;
* the first run of a loop traces and optimises its graph, so ``--warmup`` runs are excluded;
* every timed run ends by fetching a number into Python: TensorFlow may hand control back before
  the work is done (on accelerators, and in ``tf.data``), and a clock read then measures only the
  dispatch;
* the figure reported is the median of ``--runs`` timed runs: one run slowed down by another
  program moves a mean, not a median;
* every row uses a ``MirroredStrategy`` with ``ReductionToOneDevice``, one replica included, as
  the tutorial does whatever the machine has: the rows differ only in the number of replicas.
  (Not TensorFlow's own collective all-reduce, which the notebooks use: with it, ``Model.fit``
  with ``steps_per_execution`` > 1 fails on virtual CPUs; see ``strategies.mirrored_cpus``.)
* the replicas divide the cores between them (``--threads per-replica``: each operation runs on
  at most ``cores // replicas`` threads, at least 1). TensorFlow's default lets every operation
  use every core, so on virtual CPUs the operations of different replicas compete for the same
  cores; ``--threads default`` measures that setting. It changes little (a few percent, in
  favour of the multi-step loops) and adds no core.

It also measures what this machine can do at best (the float32 matrix-multiply rate) and counts
the model's floating-point operations per example, and reports each loop's share of that limit.
With ``--json FILE`` it writes the rows ``{"loop", "replicas", "examples_per_s",
"median_step_ms"}`` as a JSON list.

``--jobs 1`` runs the processes one after the other instead (no interleaving).

What the loops share and what separates them is in :mod:`.loops`. One caveat:
``naive_ctl`` iterates epoch after epoch as the tutorial does, and starting an epoch costs it a
new distributed iterator and a refilled shuffle buffer (tenths of a second). With 60,000 images
that happens every 938 / 469 / 235 steps on 1 / 2 / 4 replicas, so a few timed runs include it
and the median mostly does not: if anything, the table flatters ``naive_ctl``.

Its parts: :mod:`.settings` (the configuration and a measurement), :mod:`.measure` (fresh
processes taking turns), :mod:`.flops` (the machine's limit), :mod:`.report` (the table) and
:mod:`.cli` (the command line).
"""

from __future__ import annotations

from .cli import main
from .flops import (
    LayerFlops,
    MachineLimit,
    ModelFlops,
    conv2d_flops,
    dense_flops,
    machine_limit,
    matmul_gflops,
    model_flops,
    profiler_forward_flops,
)
from .measure import measure_here, measure_limit, measure_many
from .report import load_average, ratios, report, rows, table
from .settings import (
    ROW_KEYS,
    THREAD_CHOICES,
    BenchConfig,
    Measurement,
    median_throughput,
    scaling_efficiency,
)

__all__ = [
    "ROW_KEYS",
    "THREAD_CHOICES",
    "BenchConfig",
    "LayerFlops",
    "MachineLimit",
    "Measurement",
    "ModelFlops",
    "conv2d_flops",
    "dense_flops",
    "load_average",
    "main",
    "machine_limit",
    "matmul_gflops",
    "measure_here",
    "measure_limit",
    "measure_many",
    "median_throughput",
    "model_flops",
    "profiler_forward_flops",
    "ratios",
    "report",
    "rows",
    "scaling_efficiency",
    "table",
]
