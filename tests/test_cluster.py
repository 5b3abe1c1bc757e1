"""The local-cluster launcher (course_utils.cluster): free ports, TF_CONFIG, readiness, failures,
and above all clean-up: no process and no port may outlive a cluster, however it ends.

Most tests use the TensorFlow-free worker ``show_tf_config --serve`` (it listens on its task's
port like a server), so they take a second. Two tests start real TensorFlow clusters: one runs a
cluster twice and counts the ports and processes left, one kills a worker in the middle of
training and checks that the restarted cluster resumes from the last checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from course_utils import cluster as cl
from course_utils.errors import ConfigError, summarize_error

SHOW = "course_utils.workers.show_tf_config"
MULTI = "course_utils.workers.multi_worker"
ROOT = Path(__file__).resolve().parents[1]
#: A TensorFlow cluster on a busy 2-core machine may take minutes to start its servers.
SLOW_START = cl.ClusterOptions(start_timeout=300)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids, seconds: float = 10.0) -> list[int]:
    limit = time.monotonic() + seconds
    alive = [p for p in pids if _pid_alive(p)]
    while alive and time.monotonic() < limit:
        time.sleep(0.1)
        alive = [p for p in alive if _pid_alive(p)]
    return alive


def _nothing_left(cluster: cl.LocalCluster) -> None:
    pids = list(cluster.pids.values())
    assert pids, "the cluster started no process"
    assert _wait_gone(pids) == [], "a task process outlived its cluster"
    busy = [p for p in cluster.ports if not cl.port_is_free(p)]
    assert busy == [], f"{len(busy)} of {len(cluster.ports)} ports still taken after the cluster ended"
    assert cluster not in cl.running_clusters()


# --------------------------------------------------------------------------- pure functions


def test_cluster_spec_picks_distinct_free_ports() -> None:
    spec = cl.cluster_spec(workers=3, ps=2, chief=1)
    assert list(spec) == ["chief", "worker", "ps"]
    addresses = [a for job in spec.values() for a in job]
    ports = [int(a.rsplit(":", 1)[1]) for a in addresses]
    assert len(set(ports)) == 6 and all(cl.port_is_free(p) for p in ports)
    assert cl.chief_of(spec) == "chief 0"
    assert cl.chief_of({"worker": ["a:1", "b:2"]}) == "worker 0"
    assert cl.tasks_of(spec)[:2] == [("chief", 0), ("worker", 0)]
    assert cl.describe_jobs(spec) == "1 chief, 3 workers, 2 ps"
    assert cl.describe_jobs({"worker": ["a:1"]}) == "1 worker"


def test_make_tf_config_is_what_tensorflow_reads(monkeypatch) -> None:
    import tensorflow as tf

    spec = {"worker": ["host-a:2222", "host-b:2222"]}
    config = cl.make_tf_config(spec, "worker", 1)
    assert config == {"cluster": spec, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.cluster_spec().as_dict() == spec
    with pytest.raises(ConfigError, match="index 2 does not exist"):
        cl.make_tf_config(spec, "worker", 2)
    with pytest.raises(ConfigError, match="no 'ps' job"):
        cl.make_tf_config(spec, "ps", 0)


def test_summarize_error_gives_one_stable_line() -> None:
    log = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ValueError: Attempt to convert a value (PerReplica:{",
        "  0: <tf.Tensor: shape=(4, 4), dtype=float32, numpy=",
        "array([[1., 1.]], dtype=float32)>",
        "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.",
    ]
    assert summarize_error(log) == (
        "ValueError: Attempt to convert a value (PerReplica:{...}) with an unsupported type "
        "(PerReplica) to a Tensor."
    )
    assert summarize_error(["just a line"]) == ""


def test_the_rarely_used_settings_are_one_frozen_record() -> None:
    import dataclasses
    import inspect

    options = cl.ClusterOptions(start_timeout=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.start_timeout = 6  # type: ignore[misc]
    assert cl.ClusterOptions() == cl.ClusterOptions(start_timeout=180.0, wait_ready=True, tf_config=True)
    assert len(inspect.signature(cl.LocalCluster).parameters) <= 11
    cluster = cl.LocalCluster(SHOW, options=cl.ClusterOptions(name="cell", evaluator=1, prefix=False))
    assert cluster.name == "cell" and cluster.counts["evaluator"] == 1 and not cluster.running
    assert cl.LocalCluster(SHOW).name == SHOW
    with pytest.raises(ConfigError, match="give a ClusterOptions"):
        cl.LocalCluster(SHOW, options={"start_timeout": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="start_timeout"):
        cl.LocalCluster(SHOW, start_timeout=5)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="at most one chief and one evaluator"):
        cl.LocalCluster(SHOW, options=cl.ClusterOptions(evaluator=2))


def test_importing_any_cluster_module_registers_nothing() -> None:
    """No ``atexit`` hook and no signal handler on import: the exit hook comes with the first cluster."""
    code = f"""
        import atexit, importlib, json, pkgutil, signal, sys

        calls = []

        def recorder(kind, real):
            def record(*args, **kwargs):
                caller = sys._getframe(1).f_globals.get("__name__", "")
                if caller.startswith("course_utils"):
                    calls.append([kind, caller, getattr(args[0], "__qualname__", repr(args[0]))])
                return real(*args, **kwargs)
            return record

        atexit.register = recorder("atexit", atexit.register)
        signal.signal = recorder("signal", signal.signal)
        names = []
        for package in ("course_utils.cluster", "course_utils.workers"):
            names.append(package)
            module = importlib.import_module(package)
            names += [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")]
        for name in names:
            importlib.import_module(name)
        print("IMPORTED", json.dumps(sorted(names)), flush=True)
        print("CALLS", json.dumps(calls), flush=True)

        from course_utils.cluster import run_cluster
        for _ in range(2):
            run_cluster({SHOW!r}, workers=1, verbose=False)
        print("STARTED", json.dumps(calls), flush=True)
        """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines()}
    imported = json.loads(lines["IMPORTED"])
    assert {
        "course_utils.cluster.registry",
        "course_utils.cluster.launcher",
        "course_utils.workers.common",
    } <= set(imported)
    assert json.loads(lines["CALLS"]) == [], "importing a module registered a hook"
    # The first cluster registers the exit hook, once; the second adds nothing.
    assert json.loads(lines["STARTED"]) == [["atexit", "course_utils.cluster.registry", "stop_all"]]


# --------------------------------------------------------------------------- processes (no TF)


def test_every_task_reads_its_own_tf_config(capsys) -> None:
    result = cl.run_cluster(SHOW, workers=3)
    out = capsys.readouterr().out
    assert result.ok and list(result.tasks) == ["worker 0", "worker 1", "worker 2"]
    assert result["worker 0"].lines[-1].startswith("I am the chief")
    assert result["worker 2"].lines == [
        "I am worker 2 in a cluster of 3 workers (hosts: localhost)",
        "the chief is worker 0",
    ]
    # Printed task after task, never a port or a process id.
    assert out.index("[worker 0]") < out.index("[worker 1]") < out.index("[worker 2]")
    for port in result.cluster["worker"]:
        assert port.rsplit(":", 1)[1] not in out


def test_run_module_runs_one_plain_process(capsys) -> None:
    """``run_module`` (notebook 08): no ``TF_CONFIG``, no launcher lines, no task prefix."""
    log = cl.run_module(SHOW)
    assert log.ok and log.lines == ["no TF_CONFIG: a single process, not part of any cluster"]
    assert capsys.readouterr().out == "no TF_CONFIG: a single process, not part of any cluster\n"
    cl.run_module(SHOW, options=cl.ClusterOptions(prefix=True, announce=True, tf_config=True))
    out = capsys.readouterr().out
    assert "[cluster] started 1 worker" in out and "[worker 0] I am worker 0 in a cluster of 1 worker" in out


@pytest.mark.parametrize("run", [1, 2])
def test_ports_are_held_while_running_and_freed_after(run: int) -> None:
    with cl.LocalCluster(SHOW, ["--serve", "60", "--child"], workers=2, chief=1, verbose=False) as cluster:
        assert len(cluster.ports) == 3
        # Ready means listening: every port is taken now, by the task that owns it.
        assert [cl.port_is_free(p) for p in cluster.ports] == [False] * 3
        assert sorted(cluster.alive()) == ["chief 0", "worker 0", "worker 1"]
        cluster.wait_for_line("worker 1", "I am worker 1")
        children = [c for t in cluster._tasks.values() for c in t.log.data.get("children", [])]
        assert len(children) == 3
    _nothing_left(cluster)
    assert _wait_gone(children) == [], "a child of a task outlived the cluster (process group not killed)"
    assert cl.leftover_processes() == []


def test_exception_and_interrupt_inside_the_block_clean_up() -> None:
    for error in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            with cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, verbose=False) as cluster:
                raise error
        _nothing_left(cluster)


def test_interrupt_while_waiting_cleans_up(monkeypatch) -> None:
    cluster = cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, verbose=False).start()
    calls = {"n": 0}
    real_pump = cluster._pump

    def interrupted(wait: float) -> None:
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        real_pump(wait)

    monkeypatch.setattr(cluster, "_pump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cluster.wait()
    _nothing_left(cluster)


def test_rerunning_a_cell_stops_the_earlier_cluster(capsys) -> None:
    cell = cl.ClusterOptions(name="cell")
    first = cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, options=cell).start()
    second = cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, options=cell).start()
    try:
        assert "stopped the earlier cluster" in capsys.readouterr().out
        _nothing_left(first)
        assert sorted(second.alive()) == ["worker 0", "worker 1"]
    finally:
        second.stop()
    _nothing_left(second)


def test_a_failing_worker_is_reported_and_the_others_stopped() -> None:
    cluster = cl.LocalCluster(SHOW, ["--serve", "60", "--fail", "worker 1"], workers=2, verbose=False)
    with pytest.raises(cl.WorkerFailed) as caught:
        cluster.start()
        cluster.wait()
    error = caught.value
    assert error.task == "worker 1"
    assert "exit code 1 (RuntimeError: worker 1 was asked to fail (--fail))" in str(error)
    assert "[worker 1] the chief is worker 0" in str(error)
    assert "Traceback" not in str(error)
    _nothing_left(cluster)


def test_a_killed_worker_is_reported() -> None:
    with cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, verbose=False) as cluster:
        cluster.kill("worker 1")
        with pytest.raises(cl.WorkerFailed, match="worker 1 failed: killed by signal SIGKILL") as caught:
            cluster.wait()
        assert "stopped the other task (worker 0)" in str(caught.value)
        assert caught.value.result["worker 0"].stopped_by_launcher
    _nothing_left(cluster)


def test_time_limit_stops_the_cluster() -> None:
    cluster = cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, timeout=2, verbose=False)
    with pytest.raises(cl.ClusterError, match=r"time limit \(2 s\): worker 0, worker 1 still running"):
        cluster.start()
        cluster.wait()
    _nothing_left(cluster)


def test_a_wait_that_leaves_the_others_alone_still_ends_at_the_time_limit() -> None:
    with cl.LocalCluster(SHOW, ["--serve", "60"], workers=2, timeout=5, verbose=False) as cluster:
        cluster.kill("worker 1")  # worker 0 is not stopped for it: it serves on, past the limit
        with pytest.raises(
            cl.ClusterError, match=r"\(5 s\): worker 0 still running, stopped by the launcher"
        ):
            cluster.wait(stop_on_failure=False)
    _nothing_left(cluster)


def _script_pids(code: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    pids = [int(p) for p in re.findall(r"PID (\d+)", done.stdout)]
    return done, pids


def test_interpreter_exit_stops_the_cluster() -> None:
    done, pids = _script_pids(
        f"""
        from course_utils.cluster import LocalCluster
        cluster = LocalCluster({SHOW!r}, ["--serve", "600"], workers=2, verbose=False).start()
        globals()["keep"] = cluster
        for pid in cluster.pids.values():
            print("PID", pid, flush=True)
        raise SystemExit(0)   # no stop(): atexit must do it
        """
    )
    assert done.returncode == 0, done.stderr
    assert len(pids) == 2 and _wait_gone(pids) == []


def test_workers_end_themselves_when_the_launcher_is_killed() -> None:
    code = textwrap.dedent(
        f"""
        import os, signal
        from course_utils.cluster import LocalCluster
        cluster = LocalCluster({SHOW!r}, ["--serve", "600"], workers=2, verbose=False).start()
        for pid in cluster.pids.values():
            print("PID", pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)   # no atexit, no clean-up: the watchdog must act
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    pids = [int(p) for p in re.findall(r"PID (\d+)", done.stdout)]
    assert done.returncode == -signal.SIGKILL
    assert len(pids) == 2 and _wait_gone(pids, 15) == []


# --------------------------------------------------------------------------- real TensorFlow clusters


@pytest.mark.parametrize("run", [1, 2])
def test_tensorflow_cluster_twice_leaves_no_process_and_no_port(run: int, capsys) -> None:
    with cl.LocalCluster(MULTI, ["--epochs", "0"], workers=2, timeout=400, options=SLOW_START) as cluster:
        busy = [p for p in cluster.ports if not cl.port_is_free(p)]
        assert len(busy) == 2, "both gRPC servers should be listening once the cluster is ready"
        result = cluster.wait()
    assert result.ok
    out = capsys.readouterr().out
    assert "[cluster] ready: worker 0, worker 1 are up" in out
    assert "MultiWorkerMirroredStrategy: 2 replicas in sync" in out
    assert not re.search(r"grpc://|localhost:\d+|\bpid\b", out)
    _nothing_left(cluster)


def test_killing_a_worker_mid_training_then_resuming(tmp_path: Path) -> None:
    args = ["--checkpoint-dir", str(tmp_path), "--epochs", "3", "--steps", "4", "--save-every", "2"]
    cluster = cl.LocalCluster(MULTI, args, workers=2, timeout=400, options=SLOW_START, verbose=False)
    with pytest.raises(cl.WorkerFailed) as caught:
        with cluster:
            # Kill worker 1 at whatever moment it is at once the first checkpoint exists.
            cluster.wait_for_line("worker 0", r"^saved checkpoints/ckpt-")
            cluster.kill("worker 1")
            cluster.wait()
    assert caught.value.task == "worker 1" and "SIGKILL" in caught.value.reason
    _nothing_left(cluster)
    before = caught.value.result["worker 0"].lines
    saved = [int(m.group(1)) for line in before if (m := re.match(r"saved checkpoints/ckpt-(\d+)", line))]
    computed = {
        (int(m.group(1)), int(m.group(2))): m.group(3)
        for line in before
        if (m := re.match(r"epoch (\d+) step (\d+)  loss=(\S+)", line))
    }
    assert saved and saved[-1] < 12

    result = cl.run_cluster(MULTI, args, workers=2, timeout=400, options=SLOW_START, verbose=False)
    chief = result["worker 0"]
    restored = chief.data["restored_from"]
    resumed_at = int(restored.rsplit("-", 1)[1])
    # The restart continues from the last checkpoint the chief wrote (at least the last one it
    # reported; one more may have been written in the instant before the kill).
    assert resumed_at >= saved[-1] and resumed_at % 2 == 0
    assert chief.data["first_step"] == resumed_at + 1
    assert chief.data["global_step"] == 12
    assert [s for s, _ in chief.data["losses"]] == list(range(resumed_at + 1, 13))
    # Steps computed before the failure and again after it give the same loss: nothing learned
    # before the last save was lost, and the data order is the same.
    again = {
        (int(m.group(1)), int(m.group(2))): m.group(3)
        for line in chief.lines
        if (m := re.match(r"epoch (\d+) step (\d+)  loss=(\S+)", line))
    }
    common = set(computed) & set(again)
    for key in common:
        assert computed[key] == again[key], f"step {key} gave a different loss after the restart"
    # And the result is the run that was never interrupted.
    from course_utils.workers.multi_worker import reference_losses

    reference = dict((s, l) for s, l in reference_losses())
    for step, loss in chief.data["losses"]:
        assert loss == pytest.approx(reference[step], rel=1e-4)
    assert all(cl.port_is_free(int(a.rsplit(":", 1)[1])) for a in result.cluster["worker"])
    assert cl.leftover_processes() == []


# --------------------------------------------------------------------------- in a notebook kernel


def test_running_a_notebook_cell_twice_leaves_nothing(tmp_path: Path) -> None:
    """What a student does: run a cluster cell, run it again, start a cluster and forget it, re-run.

    Counted inside the kernel (every process the launcher started, and their children) and from
    outside (every port bound again), after each step.
    """
    import nbformat
    from nbclient import NotebookClient

    count = (
        "import json\n"
        "print('COUNT', json.dumps({'left': cl.leftover_processes(), "
        "'busy': [p for p in ports if not cl.port_is_free(p)], 'ports': len(ports)}))"
    )
    run_cell = (
        f"result = cl.run_cluster({SHOW!r}, ['--serve', '0.5', '--child'], workers=2, chief=1)\n"
        "ports += [int(a.rsplit(':', 1)[1]) for job in result.cluster.values() for a in job]"
    )
    forget_cell = (
        f"cluster = cl.LocalCluster({SHOW!r}, ['--serve', '600'], workers=2,\n"
        "                         options=cl.ClusterOptions(name='forgotten')).start()\n"
        "ports += cluster.ports"
    )
    cells = [
        "from course_utils import cluster as cl\nports = []",
        run_cell,
        count,
        run_cell,
        count,  # the same cell run twice
        forget_cell,
        forget_cell,  # a cluster left running, cell re-run
        "print('RUNNING', len(cl.running_clusters()), len(cl.leftover_processes()))",
        "cluster.stop()",
        count,
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    counts = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith("COUNT ")]
    assert len(counts) == 3
    for seen in counts:
        assert seen["left"] == [] and seen["busy"] == [], seen
    assert counts[-1]["ports"] == 3 + 3 + 2 + 2
    assert "stopped the earlier cluster running forgotten" in text
    # While the forgotten cluster ran: 1 cluster, its 2 task processes (the re-run stopped the first).
    assert "RUNNING 1 2" in text
