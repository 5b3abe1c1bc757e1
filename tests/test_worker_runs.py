"""Notebook 07's runs of the worker program (course_utils.lessons.worker_runs) and notebook 08's picture:
what a run's summary says, the error a survivor's log names, and what each picture draws."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course_utils.cluster import ClusterResult, TaskLog  # noqa: E402
from course_utils.lessons.parameter_servers import draw_parameter_servers  # noqa: E402
from course_utils.lessons.worker_runs import (  # noqa: E402
    RunTimes,
    draw_cluster,
    draw_timeline,
    heartbeat_error,
    summarise_run,
)


def _run(
    first: int, last: int, restored: int = 0, losses_differ: bool = False, start: float = 0.0
) -> ClusterResult:
    """A run of train.py as its two workers report it: [step, epoch, loss, my example ids, time]."""
    tasks = {}
    for index in (0, 1):
        steps = [
            [
                s,
                (s - 1) // 4,
                1.0 / s + (index if losses_differ else 0),
                [index * 8 + i for i in range(8)],
                start + s,
            ]
            for s in range(first, last + 1)
        ]
        lines = [f"saved checkpoints/ckpt-{s}" for s in range(first, last + 1) if s % 5 == 0 or s % 4 == 0]
        tasks[f"worker {index}"] = TaskLog(
            f"worker {index}", 0, lines, {"restored": restored, "steps": steps}
        )
    return ClusterResult(tasks, {"worker": ["localhost:1", "localhost:2"]})


def test_the_summary_names_the_steps_the_losses_and_the_saves() -> None:
    assert summarise_run(_run(1, 12)) == [
        "steps 1-12: worker 0 and worker 1 reported the same 12 losses, each on 8 of the 16 examples of a step",
        "saved after steps 4, 5, 8, 10, 12: worker 0 into checkpoints/, worker 1 a temporary copy it deleted",
    ]
    resumed = summarise_run(_run(6, 9, restored=5, losses_differ=True))
    assert resumed[0] == "both workers restored ckpt-5 and resumed at global step 6"
    assert "DIFFERENT 4 losses" in resumed[1]


def test_the_survivor_s_error_is_read_from_its_log() -> None:
    tail = [
        "Traceback (most recent call last):",
        "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: ...",
        "The following tasks are unhealthy (stopped sending heartbeats):",
        "/job:worker/replica:0/task:1",
        "Additional GRPC error information ...",
    ]
    task = TaskLog("worker 0", 1, stderr_tail=tail)
    assert heartbeat_error(task) == (
        "UnavailableError: The following tasks are unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1"
    )
    assert heartbeat_error(TaskLog("worker 0", 0)) == ""


def test_the_timeline_draws_every_run_from_its_own_times() -> None:
    killed = RunTimes(start=0.0, end=20.0, kill=8.0, killed="worker 1")
    runs = {
        "killed": (_run(1, 7), killed),
        "resumed": (_run(6, 12, restored=5, start=30.0), RunTimes(start=30.0)),
    }
    fig = draw_timeline(runs)
    (ax,) = fig.axes
    assert len(ax.patches) == 2 * 2 * 2  # per run and worker: a start-up bar and a steps bar
    steps_bar = ax.patches[3]  # the killed run's worker 1: from its first step's time to its last
    assert (steps_bar.get_x(), steps_bar.get_width()) == (1.0, 6.0)
    assert ax.get_title() == "Killed (blue), resumed (amber); grey: start-up; dotted: worker 0 gives up"
    plt.close(fig)


def test_the_cluster_and_the_parameter_servers_are_drawn() -> None:
    fig = draw_cluster({"worker": ["localhost:1", "localhost:2"]}, title="two workers")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sum("process: python train.py" in t for t in texts) == 2
    assert any("worker 0  - the chief" in t for t in texts)
    plt.close(fig)
    fig = draw_parameter_servers()
    assert len(fig.axes[0].patches) == 5  # the coordinator, 2 workers, 2 parameter servers
    plt.close(fig)
