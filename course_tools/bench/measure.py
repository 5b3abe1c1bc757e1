"""The benchmark: measuring, each (loop, replicas) pair in a fresh process, taking turns."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from course_utils.errors import CourseError, last_error_line
from course_utils.processes import last_result, print_result

from .flops import LayerFlops, MachineLimit, ModelFlops, machine_limit
from .settings import BenchConfig, Measurement


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
    from .loops import LoopOptions, make_trainer

    options = LoopOptions(per_replica_batch=config.per_replica_batch, steps_per_call=config.steps_per_call)
    trainer = make_trainer(loop, strategy, images, labels, options)
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
        from course_utils.data import FAST_SIZES, load_fashion_mnist
        from course_utils.runtime import setup
        from course_utils.strategies import mirrored_cpus

        from .threads import use_op_threads

        setup(seed=42, show_report=False)
        replicas = int(spec["replicas"])
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in spec["config"].items()
        }
        config = BenchConfig(**fields)
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
        print_result(asdict(result))
    finally:
        if turns is not None:
            turns.done()  # never leave the others waiting, even after an error


def _limit_child(size: int) -> None:
    from course_utils.runtime import setup

    setup(seed=42, show_report=False)
    limit = machine_limit(size)
    print_result(asdict(limit))


def _run_child(call: str, *, replicas: int, timeout: float, what: str) -> dict[str, Any]:
    from course_utils.processes import run_python

    code = f"from course_tools.bench.measure import _child, _limit_child\n{call}\n"
    # The child sets up its own devices: nothing of the caller's COURSE_* settings may leak in
    # (a notebook running under COURSE_REPLICAS=2 would otherwise split the CPU of every child).
    env = {"COURSE_OFFLINE": "1", "COURSE_STRATEGY": "default"}
    result = run_python(code, replicas=replicas, env=env, timeout=timeout)
    try:
        return last_result(result.stdout)
    except ValueError:
        raise CourseError(
            f"Measuring {what} failed (exit code {result.returncode}): "
            f"{last_error_line(result.stderr) or result.stderr.strip()[-300:]}"
        ) from None


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
            specs: list[dict[str, Any]] = [
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
