"""``python -m course_tools.bench [--json FILE]``: the command line of the benchmark.

How it measures is said in :mod:`course_tools.bench`; this module only reads the arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from course_utils.errors import CourseError

from .measure import measure_limit, measure_many
from .report import load_average, report, rows
from .settings import BenchConfig


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
        prog="python -m course_tools.bench",
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
