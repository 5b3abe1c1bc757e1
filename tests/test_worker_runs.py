"""Notebook 07's runs of the worker program (course_utils.lessons.worker_runs) and notebook 08's picture:
which failures a run raises, what a run's summary says, the error a survivor's log names, and what
each picture draws. No cluster is started: the launcher is replaced by one that replays an outcome."""

from __future__ import annotations

import signal
from typing import Any, Optional

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course_utils.cluster import ClusterResult, TaskLog, WorkerFailed  # noqa: E402
from course_utils.errors import CourseError  # noqa: E402
from course_utils.lessons import worker_runs  # noqa: E402
from course_utils.lessons.coordinator import draw_parameter_servers  # noqa: E402
from course_utils.lessons.worker_runs import (  # noqa: E402
    RunTimes,
    draw_cluster,
    draw_timeline,
    run_workers,
    summarise_run,
    survivor_error,
)

NOT_IMPLEMENTED = [
    "Traceback (most recent call last):",
    '  File "train.py", line 25, in resume_point',
    "NotImplementedError: Exercise resume_point: replace this line with your code",
]


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


def _ended(codes: dict[str, int], stderr: Optional[list[str]] = None) -> ClusterResult:
    """A finished run whose workers exited with ``codes``; those with code 1 printed ``stderr``."""
    tasks = {
        name: TaskLog(name, code, stderr_tail=(stderr or []) if code == 1 else [])
        for name, code in codes.items()
    }
    return ClusterResult(tasks, {"worker": ["localhost:1", "localhost:2"]})


class _Replay:
    """Stands in for LocalCluster: ``wait_for_line`` and ``wait`` end as ``outcome`` says."""

    def __init__(self, outcome: ClusterResult, fails_in: str) -> None:
        self.outcome, self.fails_in, self.killed = outcome, fails_in, ""

    def __call__(self, *args: Any, **settings: Any) -> "_Replay":
        return self

    def __enter__(self) -> "_Replay":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def _end(self, step: str) -> ClusterResult:
        if step == self.fails_in:
            failed = next(t for t in self.outcome if not t.ok)
            raise WorkerFailed(
                f"{failed.task} failed: {failed.how_it_ended()}.", failed.task, "", [], self.outcome
            )
        return self.outcome

    def wait_for_line(self, task: str, pattern: str) -> str:
        self._end("wait_for_line")
        return "holding still after step 7"

    def kill(self, task: str) -> None:
        self.killed = task

    def wait(self, stop_on_failure: bool = True) -> ClusterResult:
        assert not stop_on_failure  # the others end by themselves
        return self._end("wait")


def test_a_run_returns_the_outcomes_it_asked_for_and_raises_every_other(monkeypatch: Any) -> None:
    def run(
        outcome: ClusterResult, fails_in: str = "wait", **settings: Any
    ) -> tuple[ClusterResult, RunTimes]:
        monkeypatch.setattr(worker_runs, "LocalCluster", _Replay(outcome, fails_in))
        return run_workers("train.py", "run", **settings)

    finished, times = run(_ended({"worker 0": 0, "worker 1": 0}), fails_in="")
    assert finished.ok and times.end is not None and times.kill is None
    preempted, times = run(_ended({"worker 0": 42, "worker 1": 42}))
    assert [t.returncode for t in preempted] == [42, 42] and times.end is not None
    killed, times = run(_ended({"worker 0": 1, "worker 1": -signal.SIGKILL}), sigkill="worker 1")
    assert times.killed == "worker 1" and times.kill is not None and times.end is not None
    with pytest.raises(WorkerFailed, match=r"worker 0 failed: exit code 1 \(NotImplementedError: Exercise"):
        run(_ended({"worker 0": 1, "worker 1": 1}, NOT_IMPLEMENTED))
    with pytest.raises(WorkerFailed, match="worker 0 failed"):  # a crash before the kill
        run(_ended({"worker 0": 1, "worker 1": 0}), fails_in="wait_for_line", sigkill="worker 1")


def test_a_run_in_which_a_worker_trained_no_step_is_not_summed_up() -> None:
    run = _run(1, 12)
    run.tasks["worker 1"] = TaskLog("worker 1", 1, [], {}, NOT_IMPLEMENTED)
    with pytest.raises(CourseError) as caught:
        summarise_run(run)
    assert str(caught.value) == (
        "worker 1 trained no step: it ended with exit code 1 "
        "(NotImplementedError: Exercise resume_point: replace this line with your code)."
    )


def test_the_survivor_s_error_is_read_from_its_log() -> None:
    tail = [
        "Traceback (most recent call last):",
        "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: ...",
        "The following tasks are unhealthy (stopped sending heartbeats):",
        "/job:worker/replica:0/task:1",
        "Additional GRPC error information ...",
    ]
    task = TaskLog("worker 0", 1, stderr_tail=tail)
    assert survivor_error(task) == (
        "UnavailableError: The following tasks are unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1"
    )
    timed_out = [
        "Traceback (most recent call last):",
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective has timed out waiting for other workers.",
    ]
    assert survivor_error(TaskLog("worker 0", 1, stderr_tail=timed_out)) == (
        "DeadlineExceededError: Collective has timed out waiting for other workers."
    )
    assert survivor_error(TaskLog("worker 0", 0)) == ""


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
