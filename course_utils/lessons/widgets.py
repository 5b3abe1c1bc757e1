"""Notebook 01: its data, its pictures and the batch-split explorer; the lesson's code is in its cells.

:func:`make_problem` (a small learnable batch and starting weights); the pictures
:func:`data_parallelism_picture`, :func:`timelines`, :func:`sync_async_picture`,
:func:`ring_picture` and :func:`traffic_picture`, drawn from the numbers the cells computed; and
:func:`explore_data_parallelism`, sliders for the replicas and the global batch that rerun the
notebook's own step (where widgets cannot render, as under nbval, the same figure for the default
values, its numbers in text). Figures are ``matplotlib.figure.Figure`` shown as PNG: the same
under any backend, never shown twice.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..compare import factor, flat

Params = dict[str, np.ndarray]
#: The notebook's ``data_parallel_step(params, x, y, replicas, local_mean=False)``: it returns
#: (each replica's gradient, the all-reduced gradients, each replica's new weights).
Step = Callable[..., tuple[list[Params], list[Params], list[Params]]]
#: The notebook's ``loss_gradients(params, x, y, denominator)``.
Gradient = Callable[[Params, np.ndarray, np.ndarray, float], Params]

#: Colours of replicas 0, 1, 2, ... (tab10, so they match matplotlib's defaults).
REPLICA_COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]

#: Slider ranges of the explorer.
MAX_REPLICAS = 8
MIN_BATCH, MAX_BATCH, BATCH_STEP = 8, 128, 4
DEFAULT_REPLICAS, DEFAULT_BATCH = 4, 32


def make_problem(
    examples: int = 64, features: int = 4, classes: int = 3, seed: int = 0
) -> tuple[Params, np.ndarray, np.ndarray]:
    """``(params, x, y)``: a deterministic batch whose labels come from a hidden linear "teacher"
    plus noise, and small starting weights ``{"kernel", "bias"}``. The floats are float64 holding
    float32 values, so TensorFlow in float32 gets exactly the same numbers."""
    if examples < 1 or features < 1 or classes < 2:
        raise ValueError("make_problem needs examples >= 1, features >= 1 and classes >= 2.")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, features)).astype(np.float32)
    teacher = rng.normal(size=(features, classes))
    y = np.argmax(x @ teacher + 0.5 * rng.normal(size=(examples, classes)), axis=1).astype(np.int32)
    kernel = (0.1 * rng.normal(size=(features, classes))).astype(np.float32)
    return {"kernel": kernel.astype(np.float64), "bias": np.zeros(classes)}, x.astype(np.float64), y


# --------------------------------------------------------------------------- showing figures


def figure_png(fig: Any, dpi: int = 90) -> bytes:
    """Render a matplotlib figure to PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def show_figure(fig: Any, dpi: int = 90) -> None:
    """Show a figure as a PNG image in a notebook (or say what it is, outside one)."""
    from IPython.display import Image, display

    display(Image(data=figure_png(fig, dpi), format="png"))


def _color(replica: int) -> str:
    return REPLICA_COLORS[replica % len(REPLICA_COLORS)]


# --------------------------------------------------------------------------- the big picture


def data_parallelism_picture(replicas: int = 3, examples_per_replica: int = 4) -> Any:
    """The idea in one picture: a global batch cut into slices, the same model on every device,
    per-device gradients summed by an all-reduce, one update, the new model on every device."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

    n = int(replicas)
    if not 1 <= n <= len(REPLICA_COLORS):
        raise ValueError(f"replicas must be between 1 and {len(REPLICA_COLORS)}, got {replicas}.")
    per = int(examples_per_replica)
    height = 1.35 * n + 1.0
    fig = Figure(figsize=(12.5, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, 12.5)
    ax.set_ylim(0, height)
    ax.axis("off")

    def box(x, y, w, h, text, face="white", edge="black", size=9, weight="normal"):
        ax.add_patch(
            FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", facecolor=face, edgecolor=edge, lw=1.2)
        )
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight)

    def arrow(a, b, color="black", ls="-", bend=0.0):
        ax.add_patch(
            FancyArrowPatch(
                a,
                b,
                arrowstyle="-|>",
                mutation_scale=12,
                color=color,
                lw=1.3,
                linestyle=ls,
                connectionstyle=f"arc3,rad={bend}",
            )
        )

    # 1. the global batch, one colour per slice
    total = n * per
    cell = min(0.32, (height - 1.05) / total)
    top = height - 0.75
    ax.text(
        0.75,
        height - 0.35,
        f"global batch\n{total} examples",
        ha="center",
        va="center",
        fontsize=9,
        weight="bold",
    )
    centers = []
    for r in range(n):
        for e in range(per):
            y = top - (r * per + e + 1) * cell
            ax.add_patch(Rectangle((0.55, y), 0.4, cell * 0.9, facecolor=_color(r), edgecolor="white"))
        centers.append(top - (r * per + per / 2) * cell)

    # 2. one device per replica, the same model on each
    rows = [height - 1.05 - r * 1.35 for r in range(n)]
    for r in range(n):
        y = rows[r] - 0.5
        ax.add_patch(
            FancyBboxPatch(
                (2.3, y - 0.05), 4.4, 1.05, boxstyle="round,pad=0.04", facecolor="#f4f4f4", edgecolor="gray"
            )
        )
        ax.text(2.4, y + 0.9, f"device {r}  (replica {r})", fontsize=8, color="dimgray", va="center")
        box(2.45, y + 0.1, 1.15, 0.6, f"slice {r}\n{per} examples", face=_color(r), size=8)
        box(3.95, y + 0.1, 1.15, 0.6, "model w\n(same copy)", face="#fff7d6", size=8)
        box(5.45, y + 0.1, 1.1, 0.6, f"gradient\ng{r}", face="white", size=8)
        arrow((3.62, y + 0.4), (3.93, y + 0.4))
        arrow((5.12, y + 0.4), (5.43, y + 0.4))
        arrow((1.0, centers[r]), (2.42, y + 0.4), color=_color(r))

    # 3. all-reduce, one update, the new model everywhere
    mid = (rows[0] + rows[-1]) / 2
    terms = " + ".join(f"g{r}" for r in range(n)) if n <= 4 else f"g0 + ... + g{n - 1}"
    box(7.2, mid - 0.55, 1.7, 1.1, f"all-reduce\n(sum)\ng = {terms}", face="#e3f0fb", size=8, weight="bold")
    for r in range(n):
        arrow((6.6, rows[r] - 0.1), (7.18, mid), color="gray")
    box(9.3, mid - 0.45, 1.35, 0.9, "one update\nw - lr * g", face="#e6f5e1", size=8, weight="bold")
    arrow((8.92, mid), (9.28, mid))
    box(11.0, mid - 0.45, 1.35, 0.9, "new model w'\non every device", face="#fff7d6", size=8, weight="bold")
    arrow((10.67, mid), (10.98, mid))
    arrow((11.7, mid + 0.5), (4.5, rows[0] + 0.58), color="gray", ls="--", bend=0.12)
    ax.text(
        7.9,
        rows[0] - 0.05,
        "the next step starts from w' on every replica",
        fontsize=8,
        color="dimgray",
        ha="center",
        va="top",
    )
    return fig


# --------------------------------------------------------------------------- sync vs async


@dataclass(frozen=True)
class Timeline:
    """Gradient computations of several workers on a time line.

    ``work`` holds ``(worker, start, end, staleness)``; staleness counts the updates others applied
    between the worker reading the weights and its gradient being applied. ``barriers`` are the
    ends of the synchronous steps (none when asynchronous).
    """

    kind: str  # "sync" or "async"
    workers: int
    work: list[tuple[int, float, float, int]]
    barriers: list[float]

    @property
    def updates(self) -> int:
        """How many times the weights changed."""
        return len(self.barriers) if self.kind == "sync" else len(self.work)

    @property
    def idle_fraction(self) -> float:
        """Share of the workers' time spent waiting, up to the last update."""
        end = self.barriers[-1] if self.kind == "sync" else max(w[2] for w in self.work)
        return 1.0 - sum(w[2] - w[1] for w in self.work) / (self.workers * end)

    @property
    def max_staleness(self) -> int:
        return max((w[3] for w in self.work), default=0)


def timelines(durations: Sequence[float], horizon: float) -> tuple[Timeline, Timeline]:
    """The same workers (seconds per batch each) until ``horizon``: synchronous steps that end when
    the slowest is done, and asynchronous workers that push each gradient to a parameter server as
    soon as it is ready (ties: the lower worker first)."""
    step, n = max(durations), len(durations)
    count = int(horizon / step + 1e-9)
    sync = [(w, k * step, k * step + d, 0) for k in range(count) for w, d in enumerate(durations)]
    barriers = [round((k + 1) * step, 9) for k in range(count)]
    work: list[tuple[int, float, float, int]] = []
    start, read, version = [0.0] * n, [0] * n, 0
    while True:
        ends = [start[w] + d for w, d in enumerate(durations)]
        w = int(np.argmin(ends))
        if ends[w] > horizon + 1e-9:
            break
        work.append((w, start[w], ends[w], version - read[w]))
        version += 1
        start[w], read[w] = ends[w], version
    return Timeline("sync", n, sync, barriers), Timeline("async", n, work, [])


def sync_async_picture(sync: Timeline, asyn: Timeline) -> Any:
    """Two time lines of the same workers: synchronous steps (everyone waits for the slowest) and
    asynchronous pushes to a parameter server (nobody waits; gradients may be stale)."""
    from matplotlib.figure import Figure

    n = sync.workers
    horizon = max(sync.barriers[-1], max(w[2] for w in asyn.work))
    fig = Figure(figsize=(11, 1.0 * n + 2.6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for worker, start, end, _ in sync.work:
        top.barh(worker, end - start, left=start, color=_color(worker), edgecolor="black", height=0.6)
        step_end = min(b for b in sync.barriers if b >= end - 1e-9)
        if step_end - end > 1e-9:
            top.barh(
                worker, step_end - end, left=end, color="white", edgecolor="gray", hatch="///", height=0.6
            )
    for b in sync.barriers:
        top.axvline(b, color="black", lw=1, ls="--")
    top.set_title(
        f"synchronous: {sync.updates} updates, workers idle {100 * sync.idle_fraction:.0f}% of the time "
        "(hatched), every gradient fresh",
        fontsize=10,
    )
    for worker, start, end, stale in asyn.work:
        bottom.barh(worker, end - start, left=start, color=_color(worker), edgecolor="black", height=0.6)
        bottom.text(
            (start + end) / 2, worker, str(stale), ha="center", va="center", fontsize=8, color="white"
        )
    bottom.set_title(
        f"asynchronous: {asyn.updates} updates, nobody waits, but a gradient can be up to "
        f"{asyn.max_staleness} updates stale (number in each bar)",
        fontsize=10,
    )
    for ax in (top, bottom):
        ax.set_yticks(range(n), [f"worker {i}" for i in range(n)])
        ax.invert_yaxis()
        ax.set_xlim(0, horizon)
    bottom.set_xlabel("time (one unit = the fastest worker's step)")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- all-reduce


def ring_picture(steps: Sequence[tuple[str, np.ndarray, Sequence[Optional[int]]]]) -> Any:
    """One row per step of a ring all-reduce, one column per device, each device's gradient drawn
    as N chunks, darker as it sums more devices' values.

    ``steps`` is what the notebook's ``ring_allreduce`` recorded: ``(label, held, sent)`` after
    each step, ``held[device, chunk]`` the number of devices summed in that chunk and
    ``sent[device]`` the chunk it sent to its right neighbour (None at the start).
    """
    import matplotlib.colors as mcolors
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, Rectangle

    n = len(steps[0][1])
    cmap = mcolors.LinearSegmentedColormap.from_list("sum", ["#deebf7", "#08306b"])
    fig = Figure(figsize=(1.9 * n + 3.2, 0.62 * len(steps) + 0.9))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-2.3, 1.9 * n + 0.9)
    ax.set_ylim(-len(steps) - 0.1, 1.1)
    ax.axis("off")
    w = 1.3 / n

    def arrow(x0: float, x1: float, y: float) -> None:
        ax.add_patch(
            FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=9, color="tab:orange")
        )

    for d in range(n):
        ax.text(d * 1.9 + 0.65, 0.55, f"device {d}", ha="center", va="center", fontsize=10, weight="bold")
    for row, (label, held, sent) in enumerate(steps):
        y = -row - 0.35
        ax.text(-2.2, y + 0.3, label, ha="left", va="center", fontsize=9)
        for d in range(n):
            x0 = d * 1.9
            for c in range(n):
                k = int(held[d][c])
                face = cmap((k - 1) / max(n - 1, 1))
                ax.add_patch(
                    Rectangle((x0 + c * w, y), w * 0.92, 0.6, facecolor=face, edgecolor="black", lw=0.6)
                )
                color = "white" if k > n / 2 else "black"
                ax.text(
                    x0 + (c + 0.46) * w, y + 0.3, str(k), ha="center", va="center", fontsize=7, color=color
                )
            chunk = sent[d]
            if chunk is not None:  # the chunk this device sent in this step: outlined in orange
                ax.add_patch(
                    Rectangle((x0 + chunk * w, y), w * 0.92, 0.6, fill=False, edgecolor="tab:orange", lw=2.2)
                )
                if d < n - 1:
                    arrow(x0 + 1.33, x0 + 1.87, y + 0.3)
        if sent[0] is not None:
            x_end = 1.9 * (n - 1) + 1.33
            arrow(x_end, x_end + 0.35, y + 0.3)
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


def traffic_picture(
    devices: Sequence[int], ring: Mapping[str, Sequence[float]], server: Mapping[str, Sequence[float]]
) -> Any:
    """Bytes sent per step against the number of devices, one panel per model: ``ring[model]`` of a
    ring device and ``server[model]`` of a single parameter server, one number per entry of ``devices``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * len(ring), 3.4))
    axes = fig.subplots(1, len(ring), squeeze=False)[0]
    ns = list(devices)
    for index, (ax, name) in enumerate(zip(axes, ring)):
        ax.plot(ns, np.asarray(server[name]) / 1e6, marker="s", color="tab:red", label="one parameter server")
        ax.plot(
            ns,
            np.asarray(ring[name]) / 1e6,
            marker="o",
            color="tab:blue",
            label="ring all-reduce: each device",
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("devices N")
        if index == 0:
            ax.set_ylabel("MB sent per step")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- the explorer


@dataclass(frozen=True)
class SplitSummary:
    """Everything the explorer shows for one (replicas, global batch) setting; gradients flattened."""

    replicas: int
    global_batch: int
    shard_sizes: list[int]
    single: np.ndarray
    data_parallel: np.ndarray
    local_mean: np.ndarray

    @property
    def matches(self) -> bool:
        """The all-reduced gradient equals the single-device gradient (to 1e-6)."""
        return bool(np.max(np.abs(self.data_parallel - self.single)) <= 1e-6)

    @property
    def local_mean_ratio(self) -> float:
        return factor(self.local_mean, self.single)

    def text(self) -> str:
        sizes = ", ".join(str(s) for s in self.shard_sizes)
        even = (
            "" if len(set(self.shard_sizes)) == 1 else "  (uneven: ceil(B/N) each until the batch runs out)"
        )
        return "\n".join(
            [
                f"{self.replicas} replica{'s' if self.replicas != 1 else ''}, global batch {self.global_batch}",
                f"examples per replica: {sizes}{even}",
                f"each replica's loss: sum of its per-example losses / {self.global_batch} (the global batch)",
                f"all-reduced gradient equals the single-device gradient (to 1e-6): {self.matches}",
                f"averaging locally, then summing: {self.local_mean_ratio:.2f}x the single-device gradient",
            ]
        )


_PROBLEM: Optional[tuple[Params, np.ndarray, np.ndarray]] = None


def split_summary(step: Step, gradient: Gradient, replicas: int, global_batch: int) -> SplitSummary:
    """Run ``step`` on the first ``global_batch`` examples of the explorer's batch on ``replicas``
    replicas, dividing by the global batch and by each replica's own batch, next to ``gradient``
    of the whole batch on one device."""
    global _PROBLEM
    if _PROBLEM is None:
        _PROBLEM = make_problem(MAX_BATCH, features=4, classes=3, seed=0)
    params, x, y = _PROBLEM
    if not 1 <= global_batch <= len(x):
        raise ValueError(f"global_batch must be between 1 and {len(x)}, got {global_batch}.")
    x, y = x[:global_batch], y[:global_batch]
    _, right, _ = step(params, x, y, replicas)
    _, wrong, _ = step(params, x, y, replicas, local_mean=True)
    per = -(-global_batch // replicas)  # tf.distribute's split, as the notebook's shard()
    return SplitSummary(
        replicas=int(replicas),
        global_batch=int(global_batch),
        shard_sizes=[min(per, max(0, global_batch - r * per)) for r in range(replicas)],
        single=flat(list(gradient(params, x, y, global_batch).values())),
        data_parallel=flat(list(right[0].values())),
        local_mean=flat(list(wrong[0].values())),
    )


def batch_split_figure(summary: SplitSummary, entries: int = 8) -> Any:
    """Three panels: how the batch is split, the loss denominator per replica, the gradients."""
    from matplotlib.figure import Figure

    n, b = summary.replicas, summary.global_batch
    fig = Figure(figsize=(12.5, 4.3))
    split, denom, grad = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.2, 1.0, 1.4]})

    start = 0
    for r, size in enumerate(summary.shard_sizes):
        split.barh(r, size, left=start, color=_color(r), edgecolor="black", height=0.7)
        split.text(
            start + size / 2, r, str(size), ha="center", va="center", fontsize=8, color="white", weight="bold"
        )
        start += size
    split.set_xlim(0, MAX_BATCH)
    split.set_ylim(MAX_REPLICAS - 0.5, -0.5)
    split.set_yticks(range(n), [f"replica {r}" for r in range(n)])
    split.set_xlabel("example index in the global batch")
    split.set_title(f"global batch {b} split over {n} replica{'s' if n != 1 else ''}", fontsize=10)

    idx = np.arange(n)
    denom.bar(idx - 0.2, [b] * n, width=0.4, color="tab:green", label="right: global batch")
    denom.bar(
        idx + 0.2, summary.shard_sizes, width=0.4, color="tab:red", label="wrong: own batch (reduce_mean)"
    )
    denom.set_xticks(idx, [str(r) for r in idx])
    denom.set_xlabel("replica")
    denom.set_ylim(0, MAX_BATCH * 1.15)
    denom.set_title("what each replica divides its loss sum by", fontsize=10)
    denom.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)

    single, right, wrong = (v[:entries] for v in (summary.single, summary.data_parallel, summary.local_mean))
    k = np.arange(len(single))
    grad.bar(k - 0.27, single, width=0.27, color="black", label="one device, whole batch")
    grad.bar(k, right, width=0.27, color="tab:green", label=f"{n} replicas, all-reduced (right)")
    grad.bar(
        k + 0.27,
        wrong,
        width=0.27,
        color="tab:red",
        label=f"local average, then sum: {summary.local_mean_ratio:.2f}x",
    )
    grad.axhline(0, color="gray", lw=0.8)
    limit = max(0.05, float(np.max(np.abs(np.concatenate([single, wrong])))) * 1.15)
    grad.set_ylim(-limit, limit)
    grad.set_xticks(k, [str(i) for i in k])
    grad.set_xlabel(f"first {len(k)} gradient entries", labelpad=1)
    grad.set_title("the gradient applied in the update", fontsize=10)
    grad.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    fig.tight_layout()
    return fig


def frontend_renders_widgets() -> bool:
    """Best guess whether this code runs in a kernel whose front end draws ipywidgets.

    True in a kernel started by Jupyter Server (JupyterLab, Notebook 7: they set
    ``JPY_SESSION_NAME``), in Colab and in VS Code; False in plain Python and in kernels run by
    nbval, nbclient or papermill (nobody there can move a slider).
    """
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    from ..devices import in_colab

    return bool(os.environ.get("JPY_SESSION_NAME") or in_colab() or "__vsc_ipynb_file__" in shell.user_ns)


def _png_output(png: bytes, alt: str) -> dict[str, Any]:
    return {
        "output_type": "display_data",
        "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": alt},
        "metadata": {},
    }


class DataParallelExplorer:
    """Two sliders (replicas, global batch) and an output that reruns ``step`` and redraws on every
    change.

    ``summary`` holds the numbers shown last and ``redraws`` counts the redraws (what the tests
    look at); ``widget`` is the ipywidgets box to display.
    """

    def __init__(
        self,
        step: Step,
        gradient: Gradient,
        replicas: int = DEFAULT_REPLICAS,
        global_batch: int = DEFAULT_BATCH,
    ) -> None:
        import ipywidgets as w

        self.step, self.gradient = step, gradient
        self.replicas = w.IntSlider(
            value=replicas,
            min=1,
            max=MAX_REPLICAS,
            step=1,
            description="replicas",
            continuous_update=False,
        )
        self.global_batch = w.IntSlider(
            value=global_batch,
            min=MIN_BATCH,
            max=MAX_BATCH,
            step=BATCH_STEP,
            description="global batch",
            continuous_update=False,
            style={"description_width": "initial"},
        )
        self.output = w.Output()
        self.widget = w.VBox([w.HBox([self.replicas, self.global_batch]), self.output])
        self.widget.add_class("course-data-parallel-explorer")
        self.redraws = 0
        self.summary: Optional[SplitSummary] = None
        self.replicas.observe(self._changed, names="value")
        self.global_batch.observe(self._changed, names="value")
        self.redraw()

    def _changed(self, _change: Any) -> None:
        self.redraw()

    def redraw(self) -> None:
        summary = split_summary(self.step, self.gradient, self.replicas.value, self.global_batch.value)
        png = figure_png(batch_split_figure(summary), dpi=80)
        self.output.outputs = (
            _png_output(png, f"<figure: {summary.replicas} replicas, global batch {summary.global_batch}>"),
            {"output_type": "stream", "name": "stdout", "text": summary.text() + "\n"},
        )
        self.summary = summary
        self.redraws += 1

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def explore_data_parallelism(
    step: Step,
    gradient: Gradient,
    replicas: int = DEFAULT_REPLICAS,
    global_batch: int = DEFAULT_BATCH,
    *,
    interactive: Optional[bool] = None,
) -> Optional[DataParallelExplorer]:
    """Show the batch-split explorer of ``step`` (the notebook's ``data_parallel_step``) against
    ``gradient`` (its ``loss_gradients``) on one device: live sliders where a front end can draw
    them, otherwise the same figure and numbers for ``replicas`` and ``global_batch``.

    ``interactive=None`` decides with :func:`frontend_renders_widgets`; ``True`` or ``False``
    forces one way. Returns the explorer when it is live, else None.
    """
    from IPython.display import display

    live = frontend_renders_widgets() if interactive is None else interactive
    if live:
        explorer = DataParallelExplorer(step, gradient, replicas, global_batch)
        display(explorer.widget)
        return explorer
    summary = split_summary(step, gradient, replicas, global_batch)
    show_figure(batch_split_figure(summary), dpi=80)
    print(summary.text())
    print(
        "(A still picture for these values: in JupyterLab, Jupyter Notebook, VS Code or Colab "
        "the same cell shows sliders.)"
    )
    return None
