"""``python -m course_tools.deploy [--workers N] [--ps N] [--chief] [--evaluator] --out DIR``.

Writes what Kubernetes, Vertex AI and Slurm need to run notebook 07's worker program on a real
cluster, and checks every task's ``TF_CONFIG`` before anything is deployed.

The local launcher (:mod:`course_utils.cluster`) describes a cluster as a dict of jobs and
addresses, ``{"worker": ["localhost:PORT", ...]}``, and gives each task the ``TF_CONFIG`` that
:func:`course_utils.cluster.make_tf_config` writes. On a real cluster an engine starts the
processes and tells each one *which* of them it is, in its own way:

* **Kubernetes**, an Indexed Job: ``JOB_COMPLETION_INDEX`` (0, 1, ...) in every pod; a headless
  Service gives the pods stable names (``trainer-0.trainer``, ``trainer-1.trainer``);
* **Vertex AI**, a custom job: ``CLUSTER_SPEC``, a JSON string naming its worker pools
  (``workerpool0``, ``workerpool1``, ...) and this replica's pool and index. Vertex also sets a
  ``TF_CONFIG`` of its own, whose first pool is a ``chief`` task; the embedded lines replace it
  with the launcher's, where the primary replica is worker 0 unless the cluster has a chief;
* **Slurm**, ``srun``: ``SLURM_PROCID`` (the task's rank) and the job's node list.

For each engine this module writes what it needs (:func:`kubernetes_manifests`,
:func:`vertex_worker_pools`, :func:`slurm_script`), from the same description the launcher uses.
Each embeds a few lines of Python, run in front of the program (``python -c DERIVE program ...``),
that turn the engine's variables into the ``TF_CONFIG`` the launcher would have written for that
task, then replace themselves with the program (``os.execvp``): the program itself never changes.
Notebook 07's section 11 writes the Kubernetes lines in a cell. The command runs each file's
embedded code with the engine's variables simulated, for every task, against the launcher's
``TF_CONFIG``, then writes the three files (``tests/test_deploy.py`` does the same for several
cluster shapes).

Python API::

    from course_tools import deploy
    from course_utils.cluster import cluster_spec
    local = cluster_spec(workers=2)                      # what LocalCluster uses
    print(deploy.kubernetes_yaml(local))                 # Service + Indexed Job
    for job in deploy.deployments(local):                # all three, each task's TF_CONFIG checked
        assert job.derived == job.expected
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from course_utils.cluster import TASK_TYPES, cluster_spec, make_tf_config, tasks_of
from course_utils.errors import ConfigError

#: The command every task runs: notebook 07's worker program and a folder all tasks can reach.
PROGRAM = ("python", "train.py", "/shared/run")
#: A container image holding TensorFlow, ``course_utils`` and ``train.py`` (build your own).
IMAGE = "REGISTRY/trainer:latest"
#: The port every task's gRPC server listens on when each task has a host of its own.
PORT = 2222

# --------------------------------------------------------------------------- the embedded code
# Each snippet reads the engine's variables, writes TF_CONFIG, then runs the program given after
# it on the command line (``python -c SNIPPET python train.py RUN_DIR``). Kept short: it is printed.

KUBERNETES_DERIVE = """\
import json, os, sys
cluster = json.loads(os.environ["CLUSTER"])   # the same in every pod
jobs = ("chief", "worker", "ps", "evaluator")  # numbered in this order, as the launcher does
tasks = [(job, i) for job in jobs for i in range(len(cluster.get(job, [])))]
job, index = tasks[int(os.environ["JOB_COMPLETION_INDEX"])]
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
os.execvp(sys.argv[1], sys.argv[1:])   # become the program: same process, TF_CONFIG set
"""

VERTEX_DERIVE = """\
import json, os, sys
spec, pools = json.loads(os.environ["CLUSTER_SPEC"]), json.loads(os.environ["POOL_JOBS"])
cluster, first = {}, {}   # pools in order: workerpool0 is the first task of its job
for n, job in enumerate(pools):
    first[f"workerpool{n}"] = len(cluster.setdefault(job, []))
    cluster[job] += spec["cluster"].get(f"workerpool{n}", [])
pool, index = spec["task"]["type"], spec["task"]["index"]
task = {"type": pools[int(pool[len("workerpool"):])], "index": first[pool] + index}
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
os.execvp(sys.argv[1], sys.argv[1:])
"""

SLURM_DERIVE = """\
import json, os, re, sys
hosts = []   # SLURM_JOB_NODELIST, e.g. "node[07-08],gpu3", one name per node
for prefix, ranges in re.findall(r"([^,\\[]+)(?:\\[([^\\]]*)\\])?", os.environ["SLURM_JOB_NODELIST"]):
    for part in ranges.split(",") if ranges else [""]:
        a, _, b = part.partition("-")
        hosts += [prefix + str(n).zfill(len(a)) for n in range(int(a), int(b or a) + 1)] if a else [prefix]
per_node, port = int(os.environ.get("SLURM_NTASKS_PER_NODE", "1")), int(os.environ["PORT"])
jobs, rank = json.loads(os.environ["JOBS"]), int(os.environ["SLURM_PROCID"])
cluster = {}
for r, job in enumerate(jobs):
    cluster.setdefault(job, []).append(f"{hosts[r // per_node]}:{port + r % per_node}")
task = {"type": jobs[rank], "index": jobs[:rank].count(jobs[rank])}
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
os.execvp(sys.argv[1], sys.argv[1:])
"""


# --------------------------------------------------------------------------- cluster descriptions


def _check(cluster: Mapping[str, Sequence[str]]) -> list[tuple[str, int]]:
    unknown = [job for job in cluster if job not in TASK_TYPES]
    if unknown:
        raise ConfigError(f"Unknown job(s) {unknown}: a cluster has the jobs {', '.join(TASK_TYPES)}.")
    tasks = tasks_of(cluster)
    if not tasks:
        raise ConfigError("The cluster has no task.")
    return tasks


def jobs_in_order(cluster: Mapping[str, Sequence[str]]) -> list[str]:
    """The job of every task, in the order the engines number them (chief, workers, ps, evaluator)."""
    return [job for job, _ in _check(cluster)]


def readdress(cluster: Mapping[str, Sequence[str]], address: Any) -> dict[str, list[str]]:
    """The same jobs and tasks with new addresses: ``address(job, index, rank)`` for each task."""
    out: dict[str, list[str]] = {}
    for rank, (job, index) in enumerate(_check(cluster)):
        out.setdefault(job, []).append(address(job, index, rank))
    return {job: out[job] for job in TASK_TYPES if job in out}


def kubernetes_cluster(
    cluster: Mapping[str, Sequence[str]], name: str = "trainer", port: int = PORT
) -> dict[str, list[str]]:
    """The cluster with each task at its pod's stable name: pod ``NAME-RANK`` of the Indexed Job
    ``NAME``, behind the headless Service ``NAME`` (``trainer-0.trainer:2222``)."""
    return readdress(cluster, lambda job, index, rank: f"{name}-{rank}.{name}:{port}")


def slurm_cluster(
    cluster: Mapping[str, Sequence[str]], hosts: Sequence[str], tasks_per_node: int = 1, port: int = PORT
) -> dict[str, list[str]]:
    """The cluster as the Slurm script derives it: rank ``r`` on node ``r // tasks_per_node``,
    listening on ``port + r % tasks_per_node`` (Slurm's default block distribution)."""
    return readdress(
        cluster, lambda job, index, rank: f"{hosts[rank // tasks_per_node]}:{port + rank % tasks_per_node}"
    )


def vertex_pools(cluster: Mapping[str, Sequence[str]]) -> list[tuple[str, int]]:
    """``(job, replicas)`` of each Vertex AI worker pool. Pool 0 holds exactly one replica, the
    first task (the chief, or worker 0 when there is no chief job); pool 1 the other workers;
    pool 2 the parameter servers; pool 3 the evaluator. Empty pools at the end are left out."""
    _check(cluster)
    if not cluster.get("chief") and not cluster.get("worker"):
        raise ConfigError("Vertex AI needs a chief or a worker for its first pool (the primary replica).")
    first = "chief" if cluster.get("chief") else "worker"
    workers = len(cluster.get("worker", [])) - (first == "worker")
    pools = [
        (first, 1),
        ("worker", workers),
        ("ps", len(cluster.get("ps", []))),
        ("evaluator", len(cluster.get("evaluator", []))),
    ]
    while pools[-1][1] == 0:
        pools.pop()
    return pools


# --------------------------------------------------------------------------- Kubernetes


def kubernetes_manifests(
    cluster: Mapping[str, Sequence[str]],
    *,
    name: str = "trainer",
    image: str = IMAGE,
    program: Sequence[str] = PROGRAM,
    port: int = PORT,
    shared_claim: str = "shared-run",
    addresses: Optional[Mapping[str, Sequence[str]]] = None,
) -> list[dict[str, Any]]:
    """A headless Service and an Indexed Job running ``program`` in one pod per task.

    Every pod gets the whole cluster (pod names, :func:`kubernetes_cluster`, unless
    ``addresses`` gives others) in ``CLUSTER`` and derives its ``TF_CONFIG`` from
    ``JOB_COMPLETION_INDEX``. ``shared_claim`` names a ReadWriteMany volume claim mounted at
    ``/shared`` (the checkpoints every worker must reach).
    """
    tasks = _check(cluster)
    described = dict(addresses) if addresses is not None else kubernetes_cluster(cluster, name, port)
    if tasks_of(described) != tasks:
        raise ConfigError("addresses must hold the same jobs and task counts as the cluster.")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"job-name": name}},  # headless: DNS names only
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",  # pod NAME-i gets JOB_COMPLETION_INDEX=i
            "completions": len(tasks),
            "parallelism": len(tasks),
            "backoffLimit": 6,
            "template": {
                "spec": {
                    "subdomain": name,  # with the Service: NAME-i.NAME resolves to pod i
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "task",
                            "image": image,
                            "command": ["python", "-c", KUBERNETES_DERIVE],
                            "args": list(program),
                            "env": [{"name": "CLUSTER", "value": json.dumps(described)}],
                            "ports": [{"containerPort": port}],
                            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                        }
                    ],
                    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": shared_claim}}],
                }
            },
        },
    }
    return [service, job]


def kubernetes_yaml(cluster: Mapping[str, Sequence[str]], **options: Any) -> str:
    """:func:`kubernetes_manifests` as one text (``kubectl apply -f``): YAML, or JSON without PyYAML."""
    return to_text(kubernetes_manifests(cluster, **options))


# --------------------------------------------------------------------------- Vertex AI


def vertex_worker_pools(
    cluster: Mapping[str, Sequence[str]],
    *,
    image: str = IMAGE,
    program: Sequence[str] = ("python", "train.py", "/gcs/BUCKET/run"),
    machine_type: str = "n1-standard-4",
) -> list[dict[str, Any]]:
    """``workerPoolSpecs`` of a Vertex AI custom job running ``program`` on every task.

    Vertex starts ``replicaCount`` replicas of each pool and sets ``CLUSTER_SPEC`` in each; the
    embedded code maps the pools back to the jobs of ``cluster`` (``POOL_JOBS``). Vertex mounts
    Cloud Storage at ``/gcs/``, a folder every replica reaches. An empty pool is ``{}`` (skipped).
    """
    pools = vertex_pools(cluster)
    jobs = json.dumps([job for job, _ in pools])
    out: list[dict[str, Any]] = []
    for _, replicas in pools:
        if replicas == 0:
            out.append({})
            continue
        out.append(
            {
                "machineSpec": {"machineType": machine_type},
                "replicaCount": replicas,
                "containerSpec": {
                    "imageUri": image,
                    "command": ["python", "-c", VERTEX_DERIVE],
                    "args": list(program),
                    "env": [{"name": "POOL_JOBS", "value": jobs}],
                },
            }
        )
    return out


def vertex_config(cluster: Mapping[str, Sequence[str]], **options: Any) -> dict[str, Any]:
    """The job spec of ``gcloud ai custom-jobs create --config`` (``workerPoolSpecs``)."""
    return {"workerPoolSpecs": vertex_worker_pools(cluster, **options)}


def vertex_cluster_spec(cluster: Mapping[str, Sequence[str]], job: str, index: int) -> dict[str, Any]:
    """The ``CLUSTER_SPEC`` Vertex AI would set in the replica of task ``job index`` if its
    replicas had the addresses of ``cluster`` (to simulate it: Vertex writes the real one)."""
    spec: dict[str, list[str]] = {}
    where: dict[tuple[str, int], tuple[str, int]] = {}
    used: dict[str, int] = {}
    for n, (pool_job, replicas) in enumerate(vertex_pools(cluster)):
        start = used.get(pool_job, 0)
        if replicas:
            spec[f"workerpool{n}"] = list(cluster[pool_job])[start : start + replicas]
        for i in range(replicas):
            where[(pool_job, start + i)] = (f"workerpool{n}", i)
        used[pool_job] = start + replicas
    if (job, index) not in where:
        raise ConfigError(f"No task {job} {index} in this cluster.")
    pool, i = where[(job, index)]
    return {"cluster": spec, "environment": "cloud", "task": {"type": pool, "index": i}}


# --------------------------------------------------------------------------- Slurm


def slurm_script(
    cluster: Mapping[str, Sequence[str]],
    *,
    program: Sequence[str] = PROGRAM,
    tasks_per_node: int = 1,
    port: int = PORT,
    name: str = "trainer",
) -> str:
    """An ``sbatch`` script: ``srun`` starts one task per rank, each deriving its ``TF_CONFIG``
    from ``SLURM_PROCID`` and the job's node list (rank r: node ``r // tasks_per_node``, port
    ``port + r % tasks_per_node``). The folder in ``program`` must be on a shared file system."""
    jobs = jobs_in_order(cluster)
    if tasks_per_node < 1 or len(jobs) % tasks_per_node:
        raise ConfigError(f"{len(jobs)} tasks do not fill nodes of {tasks_per_node} task(s) each.")
    return "\n".join(
        [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --nodes={len(jobs) // tasks_per_node}",
            f"#SBATCH --ntasks-per-node={tasks_per_node}",
            f"export JOBS={shlex.quote(json.dumps(jobs))} PORT={port}  # the job of each rank; first port",
            "DERIVE=$(cat <<'PY'",
            SLURM_DERIVE.rstrip("\n"),
            "PY",
            ")",
            f'srun python -c "$DERIVE" {shlex.join(program)}',
            "",
        ]
    )


#: Stands in for ``srun`` in :func:`run_slurm_script`: runs its command once per rank, in turn.
FAKE_SRUN = """#!/bin/sh
rank=0
while [ "$rank" -lt "$FAKE_NTASKS" ]; do
    SLURM_PROCID=$rank SLURM_LOCALID=$((rank % SLURM_NTASKS_PER_NODE)) "$@" || exit 1
    rank=$((rank + 1))
done
"""


def run_slurm_script(script: str, ntasks: int, nodelist: str, tasks_per_node: int = 1) -> list[str]:
    """Run a whole script of :func:`slurm_script` with ``bash``, Slurm's variables simulated and a
    stand-in ``srun`` that runs the command of each rank in turn; return what each rank printed
    (one line per rank)."""
    with tempfile.TemporaryDirectory() as folder:
        bin_dir = Path(folder)
        (bin_dir / "srun").write_text(FAKE_SRUN)
        (bin_dir / "srun").chmod(0o755)
        (bin_dir / "python").symlink_to(sys.executable)
        (bin_dir / "job.sh").write_text(script)
        env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
            "FAKE_NTASKS": str(ntasks),
        }
        out = subprocess.run(
            ["bash", str(bin_dir / "job.sh")], env=env, capture_output=True, text=True, timeout=120
        )
    if out.returncode != 0:
        raise ConfigError(f"The Slurm script failed: {out.stderr.strip()[-500:]}")
    return out.stdout.splitlines()


# --------------------------------------------------------------------------- text and checks


def to_text(documents: Any) -> str:
    """YAML when PyYAML is installed (a list: one document each, ``---`` between), else JSON."""
    try:
        import yaml
    except ImportError:
        return json.dumps(documents, indent=2) + "\n"

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: Any, value: str) -> Any:  # multi-line strings (the embedded code) as blocks
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    docs = documents if isinstance(documents, list) else [documents]
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=110)


def parse_text(text: str) -> list[Any]:
    """The documents of :func:`to_text`, read back as ``kubectl`` or ``gcloud`` would."""
    try:
        import yaml
    except ImportError:
        parsed = json.loads(text)
        return parsed if isinstance(parsed, list) else [parsed]
    return list(yaml.safe_load_all(text))


#: The program that stands in for train.py when the embedded code is tried: it prints TF_CONFIG.
SHOW_TF_CONFIG = ("python", "-c", "import os; print(os.environ['TF_CONFIG'])")


def run_derive(command: Sequence[str], env: Mapping[str, str], timeout: float = 60.0) -> dict[str, Any]:
    """Run an embedded ``["python", "-c", CODE]`` as the engine would, with only ``env`` (the
    engine's variables) and ``PATH`` set, in front of :data:`SHOW_TF_CONFIG`; return the
    ``TF_CONFIG`` the program was started with."""
    if len(command) != 3 or command[1] != "-c":
        raise ConfigError(f"Expected ['python', '-c', CODE], got {list(command)[:2]}...")
    clean = {"PATH": os.environ.get("PATH", ""), **{k: str(v) for k, v in env.items()}}
    show = [sys.executable, *SHOW_TF_CONFIG[1:]]
    out = subprocess.run(
        [sys.executable, "-c", command[2], *show], env=clean, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise ConfigError(f"The embedded code failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def launcher_tf_configs(cluster: Mapping[str, Sequence[str]]) -> dict[str, dict[str, Any]]:
    """What the local launcher gives each task of ``cluster``: ``{"worker 0": TF_CONFIG, ...}``."""
    return {f"{job} {index}": make_tf_config(cluster, job, index) for job, index in _check(cluster)}


def engine_cluster(
    cluster: Mapping[str, Sequence[str]],
    engine: str,
    *,
    name: str = "trainer",
    hosts: Optional[Sequence[str]] = None,
    tasks_per_node: int = 1,
    port: int = PORT,
) -> dict[str, list[str]]:
    """The tasks of ``cluster`` at the addresses ``engine`` gives them: Kubernetes, the pods'
    names (``trainer-0.trainer:2222``); Vertex AI, replica names standing in for the ones Vertex
    picks (``workerpool1-0:2222``); Slurm, ``hosts`` (default ``node01``, ``node02``...) and ports
    by the script's rule."""
    tasks = _check(cluster)
    if engine == "kubernetes":
        return kubernetes_cluster(cluster, name, port)
    if engine == "vertex":
        where: dict[tuple[str, int], str] = {}
        for n, (job, replicas) in enumerate(vertex_pools(cluster)):
            start = sum(1 for (j, _) in where if j == job)
            for i in range(replicas):
                where[(job, start + i)] = f"workerpool{n}-{i}:{port}"
        return readdress(cluster, lambda job, index, rank: where[(job, index)])
    if engine == "slurm":
        nodes = -(-len(tasks) // tasks_per_node)
        hosts = list(hosts) if hosts is not None else [f"node{n + 1:02d}" for n in range(nodes)]
        return slurm_cluster(cluster, hosts, tasks_per_node, port)
    raise ConfigError(f"engine={engine!r}: use 'kubernetes', 'vertex' or 'slurm'.")


def derived_tf_configs(
    cluster: Mapping[str, Sequence[str]],
    engine: str,
    addresses: Optional[Mapping[str, Sequence[str]]] = None,
    *,
    tasks_per_node: int = 1,
) -> dict[str, dict[str, Any]]:
    """Every task's ``TF_CONFIG`` as the code written for ``engine`` derives it, run with that
    engine's variables simulated for each task (``"kubernetes"``, ``"vertex"``, ``"slurm"``).

    The tasks sit at ``addresses`` (default :func:`engine_cluster`): the Indexed Job embeds them,
    the simulated ``CLUSTER_SPEC`` lists them, the Slurm node list is their hosts (one node per
    ``tasks_per_node`` tasks, ports from the first task's port on). Compare with
    :func:`launcher_tf_configs` of the same addresses.
    """
    tasks = _check(cluster)
    if addresses is None:
        addresses = engine_cluster(cluster, engine, tasks_per_node=tasks_per_node)
    if tasks_of(addresses) != tasks:
        raise ConfigError("addresses must hold the same jobs and task counts as the cluster.")
    out: dict[str, dict[str, Any]] = {}
    if engine == "kubernetes":
        job = kubernetes_manifests(cluster, addresses=addresses)[1]
        container = job["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        for rank, (kind, index) in enumerate(tasks):
            variables = {**env, "JOB_COMPLETION_INDEX": str(rank)}
            out[f"{kind} {index}"] = run_derive(container["command"], variables)
    elif engine == "vertex":
        pools = vertex_worker_pools(cluster)
        for kind, index in tasks:
            spec = vertex_cluster_spec(addresses, kind, index)
            container = pools[int(spec["task"]["type"][len("workerpool") :])]["containerSpec"]
            env = {e["name"]: e["value"] for e in container["env"]}
            out[f"{kind} {index}"] = run_derive(
                container["command"], {**env, "CLUSTER_SPEC": json.dumps(spec)}
            )
    elif engine == "slurm":
        listed = [addresses[kind][index] for kind, index in tasks]
        port = int(listed[0].rsplit(":", 1)[1])
        hosts = [address.rsplit(":", 1)[0] for address in listed][::tasks_per_node]
        script = slurm_script(cluster, program=SHOW_TF_CONFIG, tasks_per_node=tasks_per_node, port=port)
        lines = run_slurm_script(script, len(tasks), ",".join(hosts), tasks_per_node)
        if len(lines) != len(tasks):
            raise ConfigError(f"{len(tasks)} ranks printed {len(lines)} lines: {lines[-3:]}")
        out = {f"{kind} {index}": json.loads(line) for (kind, index), line in zip(tasks, lines)}
    else:
        raise ConfigError(f"engine={engine!r}: use 'kubernetes', 'vertex' or 'slurm'.")
    return out


@dataclass(frozen=True)
class Deployment:
    """What one engine needs to run the program on ``cluster``'s tasks, checked.

    ``file`` and ``text``: the file to hand the engine; ``reads``: what each task learns its place
    from; ``derived``: every task's ``TF_CONFIG`` as the file's embedded lines derive it (run with the
    engine's variables simulated); ``expected``: what the local launcher gives the same tasks at
    the engine's addresses. ``derived == expected`` when the file is right.
    """

    engine: str
    file: str
    text: str
    reads: str
    derived: dict[str, dict[str, Any]]
    expected: dict[str, dict[str, Any]]


#: Per engine: the file written, and what each task reads to learn which task it is.
ENGINE_FILES = {
    "kubernetes": ("trainer.yaml", "JOB_COMPLETION_INDEX"),
    "vertex": ("vertex_job.yaml", "CLUSTER_SPEC"),
    "slurm": ("trainer.sbatch", "SLURM_PROCID and the node list"),
}


def deployments(cluster: Mapping[str, Sequence[str]]) -> list[Deployment]:
    """For Kubernetes, Vertex AI and Slurm: the file each needs to run ``cluster``'s tasks, and the
    ``TF_CONFIG`` it gives every task next to the launcher's (notebook 07, section 11)."""
    texts = {
        "kubernetes": kubernetes_yaml(cluster),
        "vertex": to_text(vertex_config(cluster)),
        "slurm": slurm_script(cluster),
    }
    return [
        Deployment(
            engine,
            file,
            texts[engine],
            reads,
            derived_tf_configs(cluster, engine),
            launcher_tf_configs(engine_cluster(cluster, engine)),
        )
        for engine, (file, reads) in ENGINE_FILES.items()
    ]


def _count(text: str) -> int:
    """A number of tasks on the command line: a whole number >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tasks >= 0")
    return int(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write the three engines' files for a cluster shape into ``--out``; exit 1 when a task's
    derived ``TF_CONFIG`` differs from the launcher's (the files are still written, to be read),
    2 on counts that one of the engines cannot lay out (nothing written)."""
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.deploy",
        description="Write Kubernetes, Vertex AI and Slurm files for notebook 07's worker program, checked.",
    )
    parser.add_argument("--workers", type=_count, default=2, help="worker tasks (default 2)")
    parser.add_argument("--ps", type=_count, default=0, help="parameter-server tasks (default 0)")
    parser.add_argument("--chief", action="store_true", help="add a chief task")
    parser.add_argument("--evaluator", action="store_true", help="add an evaluator task")
    parser.add_argument("--out", type=Path, required=True, help="folder to write the files into")
    args = parser.parse_args(argv)
    try:
        local = cluster_spec(
            workers=args.workers, ps=args.ps, chief=int(args.chief), evaluator=int(args.evaluator)
        )
        jobs = deployments(local)
    except ConfigError as error:
        print(f"deploy: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    for job in jobs:
        (args.out / job.file).write_text(job.text)
        same = job.derived == job.expected
        ok = ok and same
        print(
            f"{job.engine:<10} {args.out / job.file}: each task reads {job.reads}; "
            f"every task's TF_CONFIG is the launcher's: {same}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
