"""Notebook 01: all-reduce and what it costs.

After each replica has computed its gradient, every replica needs the SUM of all of them. A ring
all-reduce does it without a central node: the N devices form a ring, every gradient is cut into
N chunks, and

* **reduce-scatter** (N-1 steps): each device passes one chunk to its right neighbour, which adds
  it to its own copy; afterwards every device holds the complete sum of exactly one chunk;
* **all-gather** (N-1 steps): the completed chunks travel once more around the ring, so every
  device ends with the whole sum.

Each device sends 2(N-1) chunks of 1/N of the model: ``2 (N-1)/N x model size`` bytes, nearly
constant in N. A single parameter server instead receives N gradients and sends N copies of the
parameters back each step: its traffic grows with N.

:func:`ring_allreduce` runs the algorithm on NumPy arrays and counts what was really sent, so the
formula is checked, not just stated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

#: Parameter counts of two large real models, with where each number comes from.
REFERENCE_MODELS: dict[str, tuple[int, str]] = {
    "ResNet-50": (
        25_636_712,
        "keras.applications.ResNet50(weights=None).count_params() (25.6M, He et al. 2016)",
    ),
    "BERT-base": (
        110_000_000,
        "Devlin et al. 2019, BERT paper: BERT-BASE (L=12, H=768, A=12), total parameters 110M",
    ),
}

#: Bytes of one float32 parameter (or gradient entry).
FLOAT32_BYTES = 4


# --------------------------------------------------------------------------- formulas


def _check_replicas(replicas: int) -> int:
    if isinstance(replicas, bool) or int(replicas) != replicas or replicas < 1:
        raise ValueError(f"replicas must be a whole number >= 1, got {replicas!r}.")
    return int(replicas)


def ring_bytes_per_device(num_params: int, replicas: int, bytes_per_param: int = FLOAT32_BYTES) -> float:
    """Bytes each device sends (and receives) in one ring all-reduce: 2 (N-1)/N x model bytes."""
    n = _check_replicas(replicas)
    return 2 * (n - 1) / n * num_params * bytes_per_param


def naive_bytes_per_device(num_params: int, replicas: int, bytes_per_param: int = FLOAT32_BYTES) -> float:
    """Bytes each device sends when it simply sends its whole gradient to every other device."""
    n = _check_replicas(replicas)
    return (n - 1) * num_params * bytes_per_param


@dataclass(frozen=True)
class ParameterServerTraffic:
    """Bytes moved in one synchronous step with parameter servers (the model split evenly)."""

    worker_sends: float  # its gradient
    worker_receives: float  # the new parameters
    server_sends: float  # per server: parameters to every worker
    server_receives: float  # per server: gradients from every worker


def parameter_server_bytes(
    num_params: int, workers: int, bytes_per_param: int = FLOAT32_BYTES, servers: int = 1
) -> ParameterServerTraffic:
    """Traffic of one step with ``servers`` parameter servers holding ``1/servers`` of the model.

    Every worker pushes its whole gradient and pulls the whole model; each server receives
    ``workers`` gradients of its part and sends its part to ``workers`` workers.
    """
    n = _check_replicas(workers)
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}.")
    model = num_params * bytes_per_param
    return ParameterServerTraffic(model, model, n * model / servers, n * model / servers)


def format_bytes(value: float) -> str:
    """Decimal units, 4 significant figures at most: ``487.7 kB``, ``220.0 MB``, ``1.1 GB``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def traffic_rows(
    models: Mapping[str, int], replicas: Sequence[int], bytes_per_param: int = FLOAT32_BYTES
) -> list[dict[str, Any]]:
    """One row per (model, N): bytes SENT in one step by a ring device, a parameter-server worker
    and a single parameter server (each also receives as much as it sends)."""
    rows = []
    for name, params in models.items():
        for n in replicas:
            ps = parameter_server_bytes(params, n, bytes_per_param)
            rows.append(
                {
                    "model": name,
                    "params": params,
                    "replicas": n,
                    "model_bytes": params * bytes_per_param,
                    "ring_per_device": ring_bytes_per_device(params, n, bytes_per_param),
                    "ps_worker": ps.worker_sends,
                    "ps_server": ps.server_sends,
                }
            )
    return rows


def traffic_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of :func:`traffic_rows` as a fixed-width text table."""
    head = (
        f"{'model':<18} {'N':>3}  {'model size':>10}  {'ring: each device':>17}  "
        f"{'PS: each worker':>15}  {'PS: the server':>14}"
    )
    lines = ["bytes sent in one step (each node receives as much as it sends)", head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['model']:<18} {r['replicas']:>3}  {format_bytes(r['model_bytes']):>10}  "
            f"{format_bytes(r['ring_per_device']):>17}  {format_bytes(r['ps_worker']):>15}  "
            f"{format_bytes(r['ps_server']):>14}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the algorithm


@dataclass(frozen=True)
class RingStep:
    """The state after one step of a ring all-reduce."""

    phase: str  # "start", "reduce-scatter" or "all-gather"
    number: int  # 1-based within its phase (0 for "start")
    sent_chunk: Sequence[Optional[int]]  # chunk each device sent in this step (None at the start)
    contributions: np.ndarray  # (device, chunk): how many devices' values that chunk now holds


@dataclass(frozen=True)
class RingResult:
    """What :func:`ring_allreduce` computed and sent."""

    results: list[np.ndarray]
    steps: list[RingStep]
    elements_sent: list[int]  # per device

    def bytes_sent(self, bytes_per_element: int = FLOAT32_BYTES) -> list[int]:
        return [e * bytes_per_element for e in self.elements_sent]


def ring_allreduce(values: Sequence[np.ndarray]) -> RingResult:
    """Sum ``values`` (one array per device) with a ring all-reduce, step by step.

    Device ``i`` sends only to device ``i+1`` (mod N). Returns every device's result (all equal
    to the sum), the state after each step, and how many elements each device sent.
    """
    n = len(values)
    if n < 1:
        raise ValueError("ring_allreduce needs at least one device's values.")
    shape = np.shape(values[0])
    flat = [np.asarray(v, np.float64).reshape(-1).copy() for v in values]
    if any(f.size != flat[0].size for f in flat):
        raise ValueError("every device must hold an array of the same shape.")
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(flat[0].size), n)])
    chunk = [slice(bounds[c], bounds[c + 1]) for c in range(n)]
    contributions = np.ones((n, n), dtype=int)
    steps = [RingStep("start", 0, [None] * n, contributions.copy())]
    sent = [0] * n

    for s in range(n - 1):  # reduce-scatter
        send = [(i - s) % n for i in range(n)]
        payload = [flat[i][chunk[send[i]]].copy() for i in range(n)]  # all send at once
        incoming = [contributions[i, send[i]] for i in range(n)]
        for i in range(n):
            right, c = (i + 1) % n, send[i]
            flat[right][chunk[c]] += payload[i]
            contributions[right, c] += incoming[i]
            sent[i] += payload[i].size
        steps.append(RingStep("reduce-scatter", s + 1, send, contributions.copy()))

    for s in range(n - 1):  # all-gather: pass the completed chunks around
        send = [(i + 1 - s) % n for i in range(n)]
        payload = [flat[i][chunk[send[i]]].copy() for i in range(n)]
        for i in range(n):
            right, c = (i + 1) % n, send[i]
            flat[right][chunk[c]] = payload[i]
            contributions[right, c] = n
            sent[i] += payload[i].size
        steps.append(RingStep("all-gather", s + 1, send, contributions.copy()))

    return RingResult([f.reshape(shape) for f in flat], steps, sent)


# --------------------------------------------------------------------------- pictures


def plot_ring_allreduce(replicas: int = 4) -> Any:
    """A grid: one row per step of a ring all-reduce of ``replicas`` devices, one column per
    device; each device's gradient is drawn as N chunks, darker as it holds more devices' sums."""
    import matplotlib.colors as mcolors
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, Rectangle

    n = _check_replicas(replicas)
    if n < 2:
        raise ValueError("a ring needs at least 2 devices.")
    result = ring_allreduce([np.full(n, float(i + 1)) for i in range(n)])
    steps = result.steps
    cmap = mcolors.LinearSegmentedColormap.from_list("sum", ["#deebf7", "#08306b"])
    fig = Figure(figsize=(1.9 * n + 3.2, 0.62 * len(steps) + 0.9))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-2.3, 1.9 * n + 0.9)
    ax.set_ylim(-len(steps) - 0.1, 1.1)
    ax.axis("off")
    w = 1.3 / n
    for d in range(n):
        ax.text(d * 1.9 + 0.65, 0.55, f"device {d}", ha="center", va="center", fontsize=10, weight="bold")
    for row, step in enumerate(steps):
        y = -row - 0.35
        label = "start" if step.phase == "start" else f"{step.phase} {step.number}"
        ax.text(-2.2, y + 0.3, label, ha="left", va="center", fontsize=9)
        for d in range(n):
            x0 = d * 1.9
            for c in range(n):
                k = int(step.contributions[d, c])
                face = cmap((k - 1) / max(n - 1, 1))
                ax.add_patch(
                    Rectangle((x0 + c * w, y), w * 0.92, 0.6, facecolor=face, edgecolor="black", lw=0.6)
                )
                ax.text(
                    x0 + c * w + w * 0.46,
                    y + 0.3,
                    str(k),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if k > n / 2 else "black",
                )
            sent = step.sent_chunk[d]
            if sent is not None:  # the chunk this device sent in this step: outlined in orange
                ax.add_patch(
                    Rectangle((x0 + sent * w, y), w * 0.92, 0.6, fill=False, edgecolor="tab:orange", lw=2.2)
                )
                if d < n - 1:
                    ax.add_patch(
                        FancyArrowPatch(
                            (x0 + 1.33, y + 0.3),
                            (x0 + 1.87, y + 0.3),
                            arrowstyle="-|>",
                            mutation_scale=9,
                            color="tab:orange",
                        )
                    )
        if step.phase != "start" and n > 1:
            x_end = 1.9 * (n - 1) + 1.33
            ax.add_patch(
                FancyArrowPatch(
                    (x_end, y + 0.3),
                    (x_end + 0.35, y + 0.3),
                    arrowstyle="-|>",
                    mutation_scale=9,
                    color="tab:orange",
                )
            )
            ax.text(
                x_end + 0.4, y + 0.3, "to device 0", ha="left", va="center", fontsize=7, color="tab:orange"
            )
    ax.text(
        -2.2,
        -len(steps) + 0.05,
        "number in a chunk = how many devices' gradients it already sums; orange = sent to the right neighbour",
        fontsize=8,
        va="center",
    )
    return fig


def plot_traffic(models: Mapping[str, int], replicas: Sequence[int] = (2, 4, 8, 16, 32, 64)) -> Any:
    """Bytes sent per step against N: a ring device vs a single parameter server, one panel per model."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * len(models), 3.4))
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    ns = list(replicas)
    for index, (ax, (name, params)) in enumerate(zip(axes, models.items())):
        ring = [ring_bytes_per_device(params, n) / 1e6 for n in ns]
        server = [parameter_server_bytes(params, n).server_sends / 1e6 for n in ns]
        ax.plot(ns, server, marker="s", color="tab:red", label="one parameter server")
        ax.plot(ns, ring, marker="o", color="tab:blue", label="ring all-reduce: each device")
        ax.axhline(2 * params * FLOAT32_BYTES / 1e6, color="gray", ls=":", lw=1, label="2 x model size")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_title(f"{name}: {params:,} parameters", fontsize=10)
        ax.set_xlabel("devices N")
        if index == 0:
            ax.set_ylabel("MB sent per step")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
