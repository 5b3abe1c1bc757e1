"""``python -m course_utils.bench``: the training loops of the course, timed side by side.

It trains the same model (:func:`course_utils.models.custom_training_cnn`) on the same data (the
offline Fashion-MNIST stand-in, ``COURSE_OFFLINE=1``) with the three loops of
:mod:`course_utils.loops` (``naive_ctl``, ``ctl``, ``fit``) on 1, 2 and 4 replicas (virtual CPUs),
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
"median_step_ms"}`` as a JSON list. Notebook 09 uses the same functions.

``--jobs 1`` runs the processes one after the other instead (no interleaving).

What the loops share and what separates them is in :mod:`course_utils.loops`. One caveat:
``naive_ctl`` iterates epoch after epoch as the tutorial does, and starting an epoch costs it a
new distributed iterator and a refilled shuffle buffer (tenths of a second). With 60,000 images
that happens every 938 / 469 / 235 steps on 1 / 2 / 4 replicas, so a few timed runs include it
and the median mostly does not: if anything, the table flatters ``naive_ctl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from .errors import CourseError
from .loops import LOOPS

#: Marker of the one line a measuring process prints for its parent.
RESULT_MARKER = "BENCH_RESULT "
#: The thread settings besides a number (see :attr:`BenchConfig.threads`).
THREAD_CHOICES: tuple[str, ...] = ("per-replica", "default")
#: The keys of a row of ``--json``.
ROW_KEYS: tuple[str, ...] = ("loop", "replicas", "examples_per_s", "median_step_ms")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class BenchConfig:
    """What to measure and how long. The defaults are the benchmark of ``make bench``."""

    loops: tuple[str, ...] = LOOPS
    replicas: tuple[int, ...] = (1, 2, 4)
    examples: int = 60_000  #: training images (the size of Fashion-MNIST's training set)
    per_replica_batch: int = 64
    steps_per_call: int = 25
    steps: int = 50  #: steps per timed run (a multiple of steps_per_call)
    runs: int = 10  #: timed runs per process
    warmup_runs: int = 1  #: untimed runs first (tracing, graph optimisation, pipeline start)
    rounds: int = 1  #: processes per (loop, replicas); their runs are pooled
    jobs: int = 3  #: processes started together; they take turns for their timed runs
    matmul_size: int = 1024
    timeout: float = 900.0
    #: threads per operation: "per-replica" (the replicas divide the cores between them),
    #: "default" (TensorFlow's: every operation of every replica may use every core), or a number
    threads: str = "per-replica"

    def __post_init__(self) -> None:
        unknown = [loop for loop in self.loops if loop not in LOOPS]
        if unknown:
            raise CourseError(f"Unknown loop(s) {unknown}; choose from {', '.join(LOOPS)}.")
        if not self.loops or not self.replicas or any(n < 1 for n in self.replicas):
            raise CourseError("Give at least one loop and replica counts >= 1.")
        if self.steps_per_call < 1 or self.steps < 1 or self.steps % self.steps_per_call:
            raise CourseError(
                f"steps={self.steps} must be a positive multiple of steps_per_call="
                f"{self.steps_per_call} (ctl and fit run whole calls)."
            )
        if self.examples < self.per_replica_batch * max(self.replicas):
            raise CourseError(
                f"examples={self.examples} is less than one global batch "
                f"({self.per_replica_batch} x {max(self.replicas)} replicas)."
            )
        if self.runs < 1 or self.warmup_runs < 0 or self.rounds < 1 or self.jobs < 1:
            raise CourseError("runs, rounds and jobs must be >= 1, warmup_runs >= 0.")
        if self.threads not in THREAD_CHOICES and not (
            str(self.threads).isdigit() and int(self.threads) >= 1
        ):
            raise CourseError(
                f"threads={self.threads!r}: give 'per-replica', 'default' or a whole number >= 1."
            )

    def op_threads(self, replicas: int) -> Optional[int]:
        """Threads per operation for a run on ``replicas`` replicas (None: TensorFlow's default)."""
        from .devices import threads_per_replica

        if self.threads == "default":
            return None
        if self.threads == "per-replica":
            return threads_per_replica(replicas)
        return int(self.threads)

    def threads_text(self) -> str:
        if self.threads == "default":
            return "each operation may use every core (TensorFlow's default)"
        if self.threads == "per-replica":
            return "the replicas divide the cores (threads per operation = cores // replicas, at least 1)"
        return f"{int(self.threads)} thread(s) per operation"


# --------------------------------------------------------------------------- results


def median_throughput(seconds: Sequence[float], examples_per_run: int, warmup_runs: int = 0) -> float:
    """Examples per second of the median run, the first ``warmup_runs`` runs left out."""
    timed = list(seconds)[warmup_runs:]
    if not timed:
        raise ValueError("No timed runs left after the warm-up.")
    return examples_per_run / statistics.median(timed)


def scaling_efficiency(throughput: float, single_replica_throughput: float, replicas: int) -> float:
    """Throughput on ``replicas`` devices divided by ``replicas`` times that of one device."""
    return throughput / (replicas * single_replica_throughput)


@dataclass(frozen=True)
class Measurement:
    """The timed runs of one loop on one replica count."""

    loop: str
    replicas: int
    global_batch: int
    steps: int
    seconds: tuple[float, ...]

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def examples_per_s(self) -> float:
        return median_throughput(self.seconds, self.global_batch * self.steps)

    @property
    def median_step_ms(self) -> float:
        return 1000.0 * self.median_seconds / self.steps

    def row(self) -> dict[str, Any]:
        """The row of ``--json``: exactly :data:`ROW_KEYS`."""
        return {
            "loop": self.loop,
            "replicas": self.replicas,
            "examples_per_s": round(self.examples_per_s, 1),
            "median_step_ms": round(self.median_step_ms, 3),
        }


@dataclass(frozen=True)
class LayerFlops:
    """One layer's forward FLOPs on one example; ``shape`` says what it computes."""

    kind: str
    shape: str
    forward: int


@dataclass(frozen=True)
class ModelFlops:
    """Floating-point operations of one example, counted from the layer shapes."""

    layers: tuple[LayerFlops, ...]

    @property
    def forward(self) -> int:
        return sum(layer.forward for layer in self.layers)

    @property
    def training(self) -> int:
        """Forward + backward: the backward pass computes two products per layer (the gradient
        of the input and of the weights), each as costly as the forward one, so ~3x forward."""
        return 3 * self.forward

    def table(self) -> str:
        lines = [f"{'layer':<8}{'what it computes':<34}{'forward FLOPs':>14}"]
        for layer in self.layers:
            lines.append(f"{layer.kind:<8}{layer.shape:<34}{layer.forward:>14,}")
        lines.append(f"{'total (one example, forward)':<42}{self.forward:>14,}")
        lines.append(f"{'training: ~3x forward':<42}{self.training:>14,}")
        return "\n".join(lines)


@dataclass(frozen=True)
class MachineLimit:
    """This machine's float32 matmul rate and the model's FLOPs: the arithmetic limit."""

    matmul_gflops: float
    matmul_size: int
    flops: ModelFlops
    profiler_forward: Optional[int] = None

    @property
    def examples_per_s_limit(self) -> float:
        """Examples per second if training ran at the matmul rate (it never quite does)."""
        return self.matmul_gflops * 1e9 / self.flops.training

    def share(self, examples_per_s: float) -> float:
        """Fraction of the matmul rate that ``examples_per_s`` training examples use."""
        return examples_per_s * self.flops.training / (self.matmul_gflops * 1e9)


# --------------------------------------------------------------------------- counting FLOPs


def conv2d_flops(height: int, width: int, in_channels: int, filters: int, kernel: int) -> int:
    """Forward FLOPs of a 'valid', stride-1 square convolution on one example: every output value
    is a dot product of ``kernel*kernel*in_channels`` pairs, a multiply and an add each."""
    out_h, out_w = height - kernel + 1, width - kernel + 1
    return 2 * out_h * out_w * filters * kernel * kernel * in_channels


def dense_flops(inputs: int, units: int) -> int:
    """Forward FLOPs of a dense layer on one example: ``units`` dot products of length ``inputs``."""
    return 2 * inputs * units


def model_flops(model: Any) -> ModelFlops:
    """Count the multiply-adds of the Conv2D and Dense layers of a built Keras model (x2 FLOPs).

    Bias additions, activations and pooling are left out: they are a few percent here.
    """
    layers = []
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "Conv2D":
            kh, kw = layer.kernel_size
            in_h, in_w, in_c = (int(d) for d in layer.input.shape[1:])
            out_h, out_w, filters = (int(d) for d in layer.output.shape[1:])
            forward = 2 * out_h * out_w * filters * kh * kw * in_c
            shape = f"{kh}x{kw}x{in_c} -> {filters}, {in_h}x{in_w} -> {out_h}x{out_w}"
        elif kind == "Dense":
            inputs, units = int(layer.input.shape[-1]), int(layer.units)
            forward = dense_flops(inputs, units)
            shape = f"{inputs} -> {units}"
        else:
            continue
        layers.append(LayerFlops(kind, shape, int(forward)))
    return ModelFlops(tuple(layers))


def profiler_forward_flops(model: Any) -> Optional[int]:
    """FLOPs of one forward pass as TensorFlow's graph profiler counts them (a cross-check:
    it also counts bias additions and pooling). None when the profiler is not available."""
    try:
        from .runtime import import_tensorflow

        tf = import_tensorflow()
        from tensorflow.python.profiler import model_analyzer, option_builder

        shape = [1, *model.input_shape[1:]]
        graph = tf.function(lambda x: model(x)).get_concrete_function(tf.TensorSpec(shape, tf.float32)).graph
        options = (
            option_builder.ProfileOptionBuilder(option_builder.ProfileOptionBuilder.float_operation())
            .with_empty_output()
            .build()
        )
        return int(model_analyzer.profile(graph=graph, options=options).total_float_ops)
    except Exception:  # an internal API: a cross-check only
        return None


def matmul_gflops(size: int = 1024, repeats: int = 10, warmup: int = 2) -> float:
    """This process's float32 matrix-multiply rate in GFLOP/s: the fastest of ``repeats``
    products of two ``size x size`` matrices (2 * size**3 FLOPs each), after ``warmup``.

    The fastest, not the median: this is the limit, what the hardware can do, and other
    programs on the machine only ever slow a run down.
    """
    from .runtime import import_tensorflow

    tf = import_tensorflow()
    a = tf.random.stateless_normal((size, size), seed=(1, 2))
    b = tf.random.stateless_normal((size, size), seed=(3, 4))

    @tf.function
    def product() -> Any:
        return tf.reduce_sum(tf.matmul(a, b))  # a scalar to fetch, so the clock sees the end

    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        product().numpy()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return 2 * size**3 / min(times) / 1e9


def machine_limit(size: int = 1024, model: Any = None) -> MachineLimit:
    """Measure the matmul rate here and count the FLOPs of the custom-training CNN (in-process)."""
    from .models import custom_training_cnn

    model = model or custom_training_cnn(seed=1)
    return MachineLimit(matmul_gflops(size), size, model_flops(model), profiler_forward_flops(model))


# --------------------------------------------------------------------------- measuring in a process


def measure_here(
    loop: str,
    strategy: Any,
    images: Any,
    labels: Any,
    config: BenchConfig = BenchConfig(),
    *,
    before_run: Optional[Callable[[], None]] = None,
    after_run: Optional[Callable[[], None]] = None,
) -> Measurement:
    """Time one loop in this process, on this strategy (warm-up excluded)."""
    from .loops import make_trainer

    trainer = make_trainer(
        loop,
        strategy,
        images,
        labels,
        per_replica_batch=config.per_replica_batch,
        steps_per_call=config.steps_per_call,
    )
    seconds = trainer.time_runs(
        config.steps, config.runs, config.warmup_runs, before_run=before_run, after_run=after_run
    )
    return Measurement(loop, trainer.replicas, trainer.global_batch, config.steps, tuple(seconds))


class _Turns:
    """Processes started together take turns: one timed run each, round after round.

    Nobody times anything until every process of the group has warmed up (or failed), and then
    only the process whose turn it is runs; the others wait, idle. Interleaving the runs this way
    means that a change in the machine's load during the benchmark affects every loop alike.
    """

    def __init__(self, folder: str, index: int, group: int, timeout: float) -> None:
        self.folder, self.index, self.group, self.timeout = Path(folder), index, group, timeout
        self._started = False

    def _locked(self) -> Any:
        import contextlib
        import fcntl

        @contextlib.contextmanager
        def locked() -> Any:
            with open(self.folder / "turn.lock", "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

        return locked()

    def _turn(self) -> int:
        try:
            return int((self.folder / "turn").read_text() or 0)
        except FileNotFoundError:
            return 0

    def _set_turn(self, turn: int) -> None:
        tmp = self.folder / f"turn.{self.index}.tmp"
        tmp.write_text(str(turn))
        os.replace(tmp, self.folder / "turn")

    def _count(self, prefix: str) -> set[int]:
        return {int(p.name.split("-")[1]) for p in self.folder.glob(f"{prefix}-*")}

    def before_run(self) -> None:
        deadline = time.monotonic() + self.timeout
        if not self._started:
            (self.folder / f"ready-{self.index}").touch()
            self._started = True
            while len(self._count("ready") | self._count("done")) < self.group:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        while time.monotonic() < deadline:
            with self._locked():
                turn = self._turn()
                owner = turn % self.group
                if owner == self.index:
                    return
                if owner in self._count("done"):  # finished or failed: skip its turns
                    self._set_turn(turn + 1)
                    continue
            time.sleep(0.005)

    def after_run(self) -> None:
        with self._locked():
            self._set_turn(self._turn() + 1)

    def done(self) -> None:
        (self.folder / f"ready-{self.index}").touch()
        (self.folder / f"done-{self.index}").touch()


def _child(spec: dict[str, Any]) -> None:
    """Run in a fresh process by :func:`measure_many`: set up the replicas, time, print one line."""
    turns = _Turns(**spec["turns"]) if spec.get("turns") else None
    try:
        from .data import FAST_SIZES, load_fashion_mnist
        from .devices import use_op_threads
        from .runtime import setup
        from .strategies import mirrored_cpus

        setup(seed=42, show_report=False)
        replicas = int(spec["replicas"])
        config = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["config"].items()})
        threads = config.op_threads(replicas)
        if threads is not None:
            use_op_threads(threads)
        # A MirroredStrategy on every count, one replica included (the tutorial creates one
        # whatever the machine has): the rows differ only in the number of replicas.
        strategy = mirrored_cpus(replicas, needed_by="The benchmark", all_reduce="one_device")
        data = load_fashion_mnist(fast=config.examples <= FAST_SIZES[0], quiet=True)
        result = measure_here(
            spec["loop"],
            strategy,
            data.train_images[: config.examples],
            data.train_labels[: config.examples],
            config,
            before_run=turns.before_run if turns else None,
            after_run=turns.after_run if turns else None,
        )
        print(RESULT_MARKER + json.dumps(asdict(result)), flush=True)
    finally:
        if turns is not None:
            turns.done()  # never leave the others waiting, even after an error


def _limit_child(size: int) -> None:
    from .runtime import setup

    setup(seed=42, show_report=False)
    limit = machine_limit(size)
    print(RESULT_MARKER + json.dumps(asdict(limit)), flush=True)


def _parse_result(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    raise ValueError("no result line")


def _run_child(call: str, *, replicas: int, timeout: float, what: str) -> dict[str, Any]:
    from .processes import run_python

    code = f"from course_utils.bench import _child, _limit_child\n{call}\n"
    # The child sets up its own devices: nothing of the caller's COURSE_* settings may leak in
    # (a notebook running under COURSE_REPLICAS=2 would otherwise split the CPU of every child).
    env = {"COURSE_OFFLINE": "1", "COURSE_STRATEGY": "default"}
    result = run_python(code, replicas=replicas, env=env, timeout=timeout)
    try:
        return _parse_result(result.stdout)
    except ValueError:
        raise CourseError(
            f"Measuring {what} failed (exit code {result.returncode}): "
            f"{result.last_error_line() or result.stderr.strip()[-300:]}"
        ) from None


def measure(loop: str, replicas: int, config: BenchConfig = BenchConfig()) -> Measurement:
    """Time one loop on ``replicas`` virtual CPUs in a fresh process."""
    return measure_many([(loop, replicas)], replace(config, jobs=1))[0]


def measure_many(
    pairs: Iterable[tuple[str, int]],
    config: BenchConfig = BenchConfig(),
    progress: Optional[Callable[[str], None]] = None,
) -> list[Measurement]:
    """Time each (loop, replicas) pair in its own fresh process, ``config.rounds`` times.

    The pairs are taken ``config.jobs`` at a time: those processes start together, warm up
    together, then take turns for their timed runs (one run of one process at a time, round
    after round). The runs of all rounds of a pair are pooled into one :class:`Measurement`.
    """
    pairs = list(pairs)
    try:
        import fcntl  # noqa: F401 - taking turns uses file locks (POSIX: Linux, macOS, Colab)
    except ImportError:
        config = replace(config, jobs=1)
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}
    order = [pair for _ in range(config.rounds) for pair in pairs]  # round-robin over rounds
    results: list[dict[str, Any]] = []
    for start in range(0, len(order), config.jobs):
        group = order[start : start + config.jobs]
        with tempfile.TemporaryDirectory(prefix="course-bench-") as folder:
            specs = [
                {
                    "loop": loop,
                    "replicas": n,
                    "config": plain,
                    "turns": {"folder": folder, "index": i, "group": len(group), "timeout": config.timeout}
                    if len(group) > 1
                    else None,
                }
                for i, (loop, n) in enumerate(group)
            ]
            with ThreadPoolExecutor(max_workers=len(group)) as pool:
                futures = [
                    pool.submit(
                        _run_child,
                        f"_child({spec!r})",
                        replicas=spec["replicas"],
                        timeout=config.timeout,
                        what=f"{spec['loop']} on {spec['replicas']} replica(s)",
                    )
                    for spec in specs
                ]
                for future in futures:
                    results.append(future.result())
        if progress:
            progress(", ".join(f"{loop}x{n}" for loop, n in group))
    pooled: list[Measurement] = []
    for loop, n in pairs:
        mine = [r for r in results if r["loop"] == loop and r["replicas"] == n]
        seconds = tuple(s for r in mine for s in r["seconds"])
        pooled.append(Measurement(loop, n, mine[0]["global_batch"], mine[0]["steps"], seconds))
    return pooled


def measure_limit(size: int = 1024, timeout: float = 300.0) -> MachineLimit:
    """:func:`machine_limit` in a fresh process (one device, nothing else running in it)."""
    raw = _run_child(f"_limit_child({size!r})", replicas=1, timeout=timeout, what="the matmul rate")
    flops = ModelFlops(tuple(LayerFlops(**layer) for layer in raw["flops"]["layers"]))
    return MachineLimit(raw["matmul_gflops"], raw["matmul_size"], flops, raw.get("profiler_forward"))


# --------------------------------------------------------------------------- the report


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or 'n/a' where the system has none."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except (OSError, AttributeError):
        return "n/a"


def rows(measurements: Iterable[Measurement]) -> list[dict[str, Any]]:
    return [m.row() for m in measurements]


def table(
    measurements: Sequence[Measurement],
    limit: Optional[MachineLimit] = None,
) -> str:
    """The benchmark table: throughput, step time, achieved GFLOP/s and share of the limit."""
    head = f"{'loop':<10} {'replicas':>8} {'examples/s':>11} {'step (ms)':>10}"
    if limit:
        head += f" {'GFLOP/s':>8} {'of matmul':>9}"
    lines = [head, "-" * len(head)]
    for m in measurements:
        line = f"{m.loop:<10} {m.replicas:>8} {m.examples_per_s:>11,.0f} {m.median_step_ms:>10.2f}"
        if limit:
            achieved = m.examples_per_s * limit.flops.training / 1e9
            line += f" {achieved:>8.1f} {limit.share(m.examples_per_s):>9.0%}"
        lines.append(line)
    return "\n".join(lines)


def ratios(measurements: Sequence[Measurement]) -> dict[int, dict[str, float]]:
    """Per replica count: ctl / fit and ctl / naive_ctl throughput (where both were measured)."""
    by = {(m.loop, m.replicas): m.examples_per_s for m in measurements}
    out: dict[int, dict[str, float]] = {}
    for n in sorted({m.replicas for m in measurements}):
        if ("ctl", n) not in by:
            continue
        out[n] = {
            f"ctl/{other}": by[("ctl", n)] / by[(other, n)]
            for other in ("fit", "naive_ctl")
            if (other, n) in by
        }
    return out


def report(
    measurements: Sequence[Measurement],
    limit: Optional[MachineLimit],
    config: BenchConfig,
    loads: tuple[str, str] = ("n/a", "n/a"),
) -> str:
    lines = [
        "Training throughput of the custom-training CNN on the offline Fashion-MNIST stand-in "
        f"({config.examples:,} training images)",
        f"{config.per_replica_batch} examples per replica per step; ctl and fit run "
        f"{config.steps_per_call} steps per call; median of {config.runs * config.rounds} runs of "
        f"{config.steps} steps after {config.warmup_runs} warm-up run(s); each (loop, replicas) "
        "in a fresh process"
        + (f", {config.jobs} processes at a time taking turns run by run." if config.jobs > 1 else "."),
        f"A MirroredStrategy over 1 to {max(config.replicas)} virtual CPUs on {_cores()} core(s); "
        f"{config.threads_text()}.",
        "",
        table(measurements, limit),
        "",
    ]
    for n, values in ratios(measurements).items():
        if values:
            lines.append(f"{n} replica(s): " + ", ".join(f"{k} = {v:.2f}x" for k, v in values.items()))
    if limit:
        lines += [
            "",
            f"Arithmetic limit: float32 matmul {limit.matmul_size}x{limit.matmul_size} runs at "
            f"{limit.matmul_gflops:.1f} GFLOP/s here.",
            f"Model: {limit.flops.forward / 1e6:.2f} MFLOP forward per example, counted from the "
            "layer shapes (Conv2D and Dense multiply-adds x2)"
            + (
                f"; TensorFlow's graph profiler counts {limit.profiler_forward / 1e6:.2f} MFLOP "
                "(it adds biases and pooling)"
                if limit.profiler_forward
                else ""
            )
            + ".",
            f"Training: ~3x forward = {limit.flops.training / 1e6:.2f} MFLOP per example, so at "
            f"most ~{limit.examples_per_s_limit:,.0f} examples/s at the matmul rate.",
        ]
    lines += ["", f"Load average (1, 5, 15 min): {loads[0]} before, {loads[1]} after."]
    return "\n".join(lines)


def _cores() -> int:
    from .devices import cores

    return cores()


def _int_list(values: Sequence[str]) -> tuple[int, ...]:
    out = []
    for value in values:
        out += [int(v) for v in str(value).split(",") if v.strip()]
    return tuple(out)


def _str_list(values: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        out += [v.strip() for v in str(value).split(",") if v.strip()]
    return tuple(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    defaults = BenchConfig()
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.bench",
        description="Time the course's training loops side by side (each in a fresh process).",
    )
    parser.add_argument("--loops", nargs="+", default=list(defaults.loops), help="naive_ctl, ctl, fit")
    parser.add_argument("--replicas", nargs="+", default=["1", "2", "4"], help="e.g. 1 2 4 or 1,2")
    parser.add_argument("--examples", type=int, default=defaults.examples, help="training images")
    parser.add_argument("--per-replica-batch", type=int, default=defaults.per_replica_batch)
    parser.add_argument("--steps-per-call", type=int, default=defaults.steps_per_call)
    parser.add_argument("--steps", type=int, default=defaults.steps, help="steps per timed run")
    parser.add_argument("--runs", type=int, default=defaults.runs, help="timed runs per process")
    parser.add_argument("--warmup", type=int, default=defaults.warmup_runs, help="untimed runs first")
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="processes per pair")
    parser.add_argument(
        "--jobs", type=int, default=defaults.jobs, help="processes started together, timed in turns"
    )
    parser.add_argument(
        "--threads",
        default=defaults.threads,
        help="threads per operation: per-replica (cores // replicas), default (TensorFlow's: all cores) or N",
    )
    parser.add_argument("--matmul-size", type=int, default=defaults.matmul_size)
    parser.add_argument("--no-limit", action="store_true", help="skip the matmul rate and FLOPs")
    parser.add_argument("--json", metavar="FILE", help="write the rows to FILE as JSON")
    args = parser.parse_args(argv)
    try:
        config = BenchConfig(
            loops=_str_list(args.loops),
            replicas=_int_list(args.replicas),
            examples=args.examples,
            per_replica_batch=args.per_replica_batch,
            steps_per_call=args.steps_per_call,
            steps=args.steps,
            runs=args.runs,
            warmup_runs=args.warmup,
            rounds=args.rounds,
            jobs=args.jobs,
            matmul_size=args.matmul_size,
            threads=args.threads,
        )
        before = load_average()
        limit = None if args.no_limit else measure_limit(config.matmul_size)
        pairs = [(loop, n) for n in config.replicas for loop in config.loops]
        measurements = measure_many(
            pairs, config, progress=lambda done: print(f"measured {done}", file=sys.stderr, flush=True)
        )
        after = load_average()
    except (CourseError, ValueError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    print(report(measurements, limit, config, (before, after)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows(measurements), indent=2) + "\n")
        print(f"\nwrote {len(measurements)} rows to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
