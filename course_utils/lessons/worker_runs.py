"""Notebook 07: the scaffolding around runs of the worker program: start it, tell what happened, draw it.

The lesson is ``train.py`` and what its workers print. These helpers start it on a local cluster of
worker processes (:class:`course_utils.cluster.LocalCluster`), kill a worker on cue, sum up what
the workers reported, show the logs, and draw the cluster and the runs from the runs' own numbers.
"""

from __future__ import annotations

import html
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from ..cluster import ClusterResult, LocalCluster, TaskLog, WorkerFailed
from ..errors import CourseError, shorten_error, summarize_error

#: The exit code of a worker that saved its checkpoint on a preemption notice (``train.py``, part 4).
PREEMPTED = 42


@dataclass
class RunTimes:
    """When a run started, when its worker was killed (if one was) and when the others ended."""

    start: float
    end: Optional[float] = None
    kill: Optional[float] = None
    killed: Optional[str] = None


def run_workers(
    program: Union[str, Path],
    *args: Any,
    sigkill: Optional[str] = None,
    cwd: Union[str, Path, None] = None,
    timeout: float = 600.0,
) -> tuple[ClusterResult, RunTimes]:
    """Run ``program`` with ``args`` on 2 worker processes until each has ended by itself.

    With ``sigkill="worker 1"``, that worker is sent ``SIGKILL`` once it prints ``holding still``.
    ``cwd`` defaults to the program's folder; ``timeout`` is the run's limit in seconds. Returns
    every task's log and the run's times. A run whose outcome was asked for (the kill happened, or
    every worker exited with code 0 or 42, the code of a preemption) returns; any other failure
    is raised (:class:`WorkerFailed`, naming the worker and how it ended).
    """
    program = Path(program).resolve()
    times = RunTimes(start=time.time())
    try:
        with LocalCluster(
            str(program), args, workers=2, cwd=cwd or program.parent, timeout=timeout, stream="none"
        ) as cluster:
            if sigkill:
                cluster.wait_for_line(sigkill, "holding still")
                times.kill, times.killed = time.time(), sigkill
                cluster.kill(sigkill)
            try:  # let the others end by themselves: what do they do?
                result = cluster.wait(stop_on_failure=False)
            finally:
                times.end = time.time()
            return result, times
    except WorkerFailed as failed:
        if times.kill is not None or {task.returncode for task in failed.result} <= {0, PREEMPTED}:
            return failed.result, times
        raise


def show_run(result: ClusterResult, events: list[str]) -> None:
    """Print one line per event, then every task's whole log in a collapsed block."""
    from IPython.display import HTML, display

    for line in events:
        print(line)
    log = [f"[{task.task}] {line}" for task in result for line in task.lines]
    display(
        HTML(
            f"<details><summary>full log ({len(log)} lines)</summary>"
            f"<pre>{html.escape(chr(10).join(log))}</pre></details>"
        )
    )


def summarise_run(result: ClusterResult) -> list[str]:
    """The events of a run of notebook 07's ``train.py``, from what its two workers printed and reported."""
    for task in result:
        if not task.data.get("steps"):
            raise CourseError(f"{task.task} trained no step: it ended with {task.how_it_ended()}.")
    w0, w1 = result["worker 0"], result["worker 1"]
    steps = [s[0] for s in w0.data["steps"]]
    same = [s[2] for s in w0.data["steps"]] == [s[2] for s in w1.data["steps"]]
    saved = [m[1] for line in w0.lines if line.startswith("saved") and (m := re.search(r"ckpt-(\d+)", line))]
    events = []
    if w0.data["restored"]:
        events.append(
            f"both workers restored ckpt-{w0.data['restored']} and resumed at global step {steps[0]}"
        )
    mine, theirs = len(w0.data["steps"][0][3]), len(w1.data["steps"][0][3])  # example ids of the first step
    events.append(
        f"steps {steps[0]}-{steps[-1]}: worker 0 and worker 1 reported "
        f"{'the same' if same else 'DIFFERENT'} {len(steps)} losses, each on {mine} of the "
        f"{mine + theirs} examples of a step"
    )
    events.append(
        f"saved after steps {', '.join(saved)}: worker 0 into checkpoints/, worker 1 a temporary copy it deleted"
    )
    return events


def survivor_error(task: TaskLog) -> str:
    """The error ``task`` ended with, on one line (``Type: message``, as :meth:`TaskLog.how_it_ended`
    reads it), or ``""``. When the message names tasks that stopped sending heartbeats, only that
    clause is kept: ``UnavailableError: The following tasks are unhealthy (...): /job:...``."""
    error = summarize_error(task.stderr_tail, limit=100_000)
    kind, _, message = error.partition(": ")
    unhealthy = re.search(r"The following tasks are unhealthy[^:]*:\s*\S+", message)
    return f"{kind}: {unhealthy[0]}" if unhealthy else shorten_error(error)


def draw_cluster(cluster: Mapping[str, list[str]], title: str = "") -> Any:
    """Draw a cluster of notebook 07's ``train.py``: its ``TF_CONFIG`` ``cluster``, one box per task
    (address, ``task``, checkpoint folder, the chief marked) and the all-reduce between them; returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    tasks = [(kind, index) for kind in cluster for index in range(len(cluster[kind]))]
    chief = "chief 0" if "chief" in cluster else "worker 0"
    ax.text(
        0.5,
        0.93,
        "TF_CONFIG 'cluster' (the same in every process):\n" + json.dumps(cluster),
        ha="center",
        va="center",
        fontsize=8,
        family="monospace",
        bbox=dict(boxstyle="round", fc="#eef3fb", ec="#4a6fa5"),
    )
    xs = [(i + 0.5) / len(tasks) for i in range(len(tasks))]
    for x, (kind, index) in zip(xs, tasks):
        name = f"{kind} {index}"
        task = json.dumps({"type": kind, "index": index})
        folder = (
            "checkpoints/ (the real one)" if name == chief else f"workertemp_{index}/checkpoints/ (deleted)"
        )
        label = (
            f"{name}{'  - the chief' if name == chief else ''}\nprocess: python train.py\n"
            f"listens on {cluster[kind][index]}\n'task': {task}\nsaves into {folder}"
        )
        ax.text(
            x,
            0.45,
            label,
            ha="center",
            va="center",
            fontsize=8,
            family="monospace",
            bbox=dict(boxstyle="round", fc="#fff4d6" if name == chief else "#f2f2f2", ec="#888"),
        )
        ax.annotate("", xy=(x, 0.66), xytext=(x, 0.84), arrowprops=dict(arrowstyle="->", color="#4a6fa5"))
    for left, right in zip(xs, xs[1:]):
        ax.annotate(
            "",
            xy=(right - 0.2, 0.45),
            xytext=(left + 0.2, 0.45),
            arrowprops=dict(arrowstyle="<->", color="#b04a4a", lw=1.5),
        )
    ax.text(
        0.5,
        0.12,
        "gradients all-reduced at every step (collective RING over gRPC)",
        ha="center",
        fontsize=8,
        color="#b04a4a",
    )
    ax.set_axis_off()
    ax.set_title(title)
    return fig


#: The timeline's colours, one per run in the order given, and their names for the title.
COLOURS = (("#4a6fa5", "blue"), ("#b07a00", "amber"), ("#3a8a4a", "green"), ("#7a4a9a", "purple"))


def draw_timeline(runs: Mapping[str, tuple[ClusterResult, RunTimes]]) -> Any:
    """Draw runs of notebook 07's ``train.py`` on one time axis, from the times its workers reported
    for each step: start-up in grey, then each worker's steps in its run's colour; a cross where a
    worker was killed and a dotted line where the survivor gave up. Returns the figure."""
    import matplotlib.pyplot as plt

    if not 1 <= len(runs) <= len(COLOURS):
        raise ValueError(f"draw_timeline draws 1 to {len(COLOURS)} runs, not {len(runs)}.")
    fig, ax = plt.subplots(figsize=(9, 2.8))
    tasks = ["worker 0", "worker 1"]
    t0 = min(times.start for _, times in runs.values())
    dotted = ""
    for (name, (run, times)), (colour, _) in zip(runs.items(), COLOURS):
        for row, task in enumerate(tasks):
            steps = run[task].data["steps"]
            first, last = steps[0][4] - t0, steps[-1][4] - t0
            ax.barh(row, first - (times.start - t0), left=times.start - t0, color="#dddddd", height=0.4)
            ax.barh(row, max(last - first, 0.3), left=first, color=colour, height=0.4)
            ax.text(first, row + 0.3, f"steps {steps[0][0]}-{steps[-1][0]}", fontsize=7, color=colour)
        if times.kill is not None and times.killed in tasks:
            ax.plot(times.kill - t0, tasks.index(times.killed), "x", color="#b04a4a", ms=14, mew=3)
            ax.text(
                times.kill - t0, -0.55, f"SIGKILL to {times.killed}", color="#b04a4a", ha="center", fontsize=8
            )
            if times.end is not None:
                ax.axvline(times.end - t0, color="#b04a4a", ls=":", lw=1)
                survivor = tasks[1 - tasks.index(times.killed)]
                dotted = f"; dotted: {survivor} gives up"
    legend = ", ".join(f"{name} ({colour})" for name, (_, colour) in zip(runs, COLOURS))
    ax.set(
        yticks=[0, 1],
        yticklabels=["worker 0 (chief)", "worker 1"],
        ylim=(-0.8, 1.6),
        xlabel="seconds since the first run started",
        title=f"{legend[:1].upper()}{legend[1:]}; grey: start-up{dotted}",
    )
    fig.tight_layout()
    return fig
