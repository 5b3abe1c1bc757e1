"""The benchmark's settings and what one measurement holds."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from course_utils.errors import CourseError

from .loops import LOOPS

#: The thread settings besides a number (see :attr:`BenchConfig.threads`).
THREAD_CHOICES: tuple[str, ...] = ("per-replica", "default")
#: The keys of a row of ``--json``.
ROW_KEYS: tuple[str, ...] = ("loop", "replicas", "examples_per_s", "median_step_ms")


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
        from .threads import threads_per_replica

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
