"""The same worker program on a real cluster (course_tools.deploy), checked offline.

For Kubernetes, Vertex AI and Slurm, the code each manifest embeds is run with that engine's
variables simulated for every task (``JOB_COMPLETION_INDEX``; ``CLUSTER_SPEC``; ``SLURM_PROCID``
and the node list, through the whole sbatch script with a stand-in ``srun``), and the
``TF_CONFIG`` it hands the program must be the one the local launcher gives the same task.
The manifests must also parse (YAML when PyYAML is installed, JSON otherwise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from course_tools import deploy
from course_utils.cluster import cluster_spec, make_tf_config, run_cluster, tasks_of

ENGINES = ["kubernetes", "vertex", "slurm"]
SHAPES = {
    "notebook 07 (2 workers)": {"workers": 2},
    "chief, workers, ps, evaluator": {"chief": 1, "workers": 3, "ps": 2, "evaluator": 1},
    "one worker and a ps": {"workers": 1, "ps": 1},
}

# A task program for the real launcher: it hands back the TF_CONFIG it was started with.
REPORT_TF_CONFIG = """\
import json, os
print("@@result " + json.dumps({"tf_config": json.loads(os.environ["TF_CONFIG"])}), flush=True)
"""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_task_derives_the_launchers_tf_config(engine: str, shape: str) -> None:
    local = cluster_spec(**SHAPES[shape])
    at = deploy.engine_cluster(local, engine)
    assert tasks_of(at) == tasks_of(local), "the engine's cluster has other tasks than the local one"
    derived = deploy.derived_tf_configs(local, engine)
    expected = {f"{job} {i}": make_tf_config(at, job, i) for job, i in tasks_of(local)}
    assert derived == expected


def test_derived_tf_configs_equal_what_real_launcher_processes_received(tmp_path: Path) -> None:
    program = tmp_path / "report_tf_config.py"
    program.write_text(REPORT_TF_CONFIG)
    result = run_cluster(str(program), chief=1, workers=2, ps=1, verbose=False, timeout=120)
    given = {task.task: task.data["tf_config"] for task in result}
    assert list(given) == ["chief 0", "worker 0", "worker 1", "ps 0"]
    # The tasks at the very addresses the launcher used: the Indexed Job embeds them, the
    # simulated CLUSTER_SPEC lists them.
    for engine in ("kubernetes", "vertex"):
        assert deploy.derived_tf_configs(result.cluster, engine, addresses=result.cluster) == given, engine


def test_slurm_on_one_node_gives_the_launchers_tf_config_exactly() -> None:
    local = cluster_spec(workers=3, ports=[2222, 2223, 2224])  # one host, consecutive ports
    derived = deploy.derived_tf_configs(local, "slurm", addresses=local, tasks_per_node=3)
    assert derived == deploy.launcher_tf_configs(local)


def test_slurm_expands_a_compressed_node_list() -> None:
    local = cluster_spec(workers=4, ports=[1, 2, 3, 4])
    script = deploy.slurm_script(local, program=deploy.SHOW_TF_CONFIG, tasks_per_node=2)
    lines = deploy.run_slurm_script(script, ntasks=4, nodelist="gpu[07-08]", tasks_per_node=2)
    configs = [json.loads(line) for line in lines]
    assert configs[0]["cluster"] == {"worker": ["gpu07:2222", "gpu07:2223", "gpu08:2222", "gpu08:2223"]}
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(4)]
    lines = deploy.run_slurm_script(
        deploy.slurm_script(cluster_spec(workers=3, ports=[1, 2, 3]), program=deploy.SHOW_TF_CONFIG),
        ntasks=3,
        nodelist="a[1-2],b",
        tasks_per_node=1,
    )
    assert json.loads(lines[2])["cluster"]["worker"] == ["a1:2222", "a2:2222", "b:2222"]


def test_kubernetes_manifests_parse_and_run_the_program() -> None:
    local = cluster_spec(workers=2)
    docs = deploy.parse_text(deploy.kubernetes_yaml(local))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    service, job = docs
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"job-name": "trainer"}
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["args"] == list(deploy.PROGRAM)
    assert container["command"][:2] == ["python", "-c"]
    assert json.loads(container["env"][0]["value"]) == deploy.kubernetes_cluster(local)


def test_vertex_pools_parse_and_pool_zero_is_the_primary_replica() -> None:
    local = cluster_spec(chief=1, workers=3, ps=2)
    (config,) = deploy.parse_text(deploy.to_text(deploy.vertex_config(local)))
    pools = config["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 3, 2]
    assert all(p["containerSpec"]["args"][:2] == ["python", "train.py"] for p in pools)
    two = deploy.vertex_worker_pools(cluster_spec(workers=2))
    assert [p["replicaCount"] for p in two] == [1, 1]  # worker 0 is the primary replica
    skipped = deploy.vertex_worker_pools(cluster_spec(workers=1, ps=1))
    assert skipped[1] == {} and skipped[2]["replicaCount"] == 1  # an empty pool is skipped


def test_slurm_script_is_valid_bash() -> None:
    script = deploy.slurm_script(cluster_spec(workers=2))
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    assert script.rstrip().endswith('srun python -c "$DERIVE" python train.py /shared/run')
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_without_pyyaml_the_manifests_are_json(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    text = deploy.kubernetes_yaml(cluster_spec(workers=2))
    assert text.lstrip().startswith("[")
    assert [d["kind"] for d in deploy.parse_text(text)] == ["Service", "Job"]


def test_deployments_give_every_task_the_launchers_tf_config() -> None:
    """What ``python -m course_tools.deploy`` writes: one file per engine, each task's TF_CONFIG checked."""
    local = cluster_spec(workers=2, ports=[41001, 41002])
    jobs = deploy.deployments(local)
    assert [job.engine for job in jobs] == ["kubernetes", "vertex", "slurm"]
    assert [job.file for job in jobs] == ["trainer.yaml", "vertex_job.yaml", "trainer.sbatch"]
    for job in jobs:
        assert job.derived == job.expected, job.engine
        assert set(job.derived) == {"worker 0", "worker 1"}
        assert job.text.strip()
    assert jobs[0].derived["worker 1"]["cluster"] == {
        "worker": ["trainer-0.trainer:2222", "trainer-1.trainer:2222"]
    }


def test_the_command_writes_the_three_files_and_checks_them(tmp_path: Path, capsys) -> None:
    assert deploy.main(["--workers", "2", "--ps", "1", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trainer.sbatch", "trainer.yaml", "vertex_job.yaml"]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and all(line.endswith("the launcher's: True") for line in printed)
    assert deploy.main(["--workers", "0", "--out", str(tmp_path / "none")]) == 2  # one line, no traceback
    assert "deploy: " in capsys.readouterr().err and not (tmp_path / "none").exists()
    with pytest.raises(SystemExit) as usage:  # a count that is not a whole number >= 0
        deploy.main(["--workers", "-1", "--out", str(tmp_path / "none")])
    assert usage.value.code == 2 and "'-1' is not a whole number of tasks" in capsys.readouterr().err


def test_the_notebooks_kubernetes_lines_are_the_manifests(tmp_path: Path) -> None:
    """Notebook 07 writes the pod's start-up lines in a cell; they are the lines the Indexed Job embeds."""
    import nbformat

    master = Path(__file__).resolve().parents[1] / "solutions" / "07_multi_worker_training.ipynb"
    cells = [c.source for c in nbformat.read(master, as_version=4).cells if c.cell_type == "code"]
    assert any(deploy.KUBERNETES_DERIVE.strip() in source for source in cells)
