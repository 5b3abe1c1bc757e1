"""Notebook 01: pictures and the interactive batch-split explorer of data parallelism.

* :func:`data_parallelism_picture`: slices of a batch, the same model on every device, gradients
  aggregated, one update, a new model.
* :func:`sync_async_picture`: synchronous and asynchronous workers on a time line.
* :func:`explore_data_parallelism`: sliders for the number of replicas and the global batch size
  that redraw how the batch is split, each replica's batch, the loss denominator and the
  resulting gradient against the single-device one. Where widgets cannot render (a notebook run
  by nbval or nbclient, a static viewer, no ipywidgets installed) it shows the same figure for the
  default values instead, with the same numbers in text.

Figures are drawn with ``matplotlib.figure.Figure`` (not pyplot) and shown as PNG images, so they
look the same whatever matplotlib backend is active and are never shown twice.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import simulation as sim

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


def sync_async_picture(durations: tuple[float, ...] = (1.0, 1.25, 2.0), horizon: float = 8.0) -> Any:
    """Two time lines of the same workers: synchronous steps (everyone waits for the slowest) and
    asynchronous pushes to a parameter server (nobody waits; gradients may be stale)."""
    from matplotlib.figure import Figure

    sync = sim.sync_schedule(durations, horizon)
    asyn = sim.async_schedule(durations, horizon)
    n = len(durations)
    fig = Figure(figsize=(11, 1.0 * n + 2.6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for w in sync.work:
        top.barh(
            w.worker, w.end - w.start, left=w.start, color=_color(w.worker), edgecolor="black", height=0.6
        )
        step_end = min(b for b in sync.barriers if b >= w.end - 1e-9)
        if step_end - w.end > 1e-9:
            top.barh(
                w.worker,
                step_end - w.end,
                left=w.end,
                color="white",
                edgecolor="gray",
                hatch="///",
                height=0.6,
            )
    for b in sync.barriers:
        top.axvline(b, color="black", lw=1, ls="--")
    top.set_title(
        f"synchronous: {sync.updates} updates, workers idle {100 * sync.idle_fraction:.0f}% of the time "
        "(hatched), every gradient fresh",
        fontsize=10,
    )
    for w in asyn.work:
        bottom.barh(
            w.worker, w.end - w.start, left=w.start, color=_color(w.worker), edgecolor="black", height=0.6
        )
        bottom.text(
            (w.start + w.end) / 2,
            w.worker,
            f"{w.staleness}",
            ha="center",
            va="center",
            fontsize=8,
            color="white",
            weight="bold",
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


# --------------------------------------------------------------------------- the explorer


@dataclass(frozen=True)
class SplitSummary:
    """Everything the explorer shows for one (replicas, global batch) setting."""

    replicas: int
    global_batch: int
    shard_sizes: list[int]
    single: dict[str, np.ndarray]
    data_parallel: dict[str, np.ndarray]
    local_mean: dict[str, np.ndarray]

    @property
    def matches(self) -> bool:
        """The all-reduced gradient equals the single-device gradient (to 1e-6)."""
        return sim.max_abs_difference(self.data_parallel, self.single) <= 1e-6

    @property
    def local_mean_ratio(self) -> float:
        return sim.ratio(self.local_mean, self.single)

    def text(self) -> str:
        sizes = ", ".join(str(s) for s in self.shard_sizes)
        even = "" if len(set(self.shard_sizes)) == 1 else "  (uneven: the first replicas get one more)"
        return "\n".join(
            [
                f"{self.replicas} replica{'s' if self.replicas != 1 else ''}, global batch {self.global_batch}",
                f"examples per replica: {sizes}{even}",
                f"each replica's loss: sum of its per-example losses / {self.global_batch} (the global batch)",
                f"all-reduced gradient equals the single-device gradient (to 1e-6): {self.matches}",
                f"averaging locally, then summing: {self.local_mean_ratio:.2f}x the single-device gradient",
            ]
        )


_PROBLEM: Optional[sim.Problem] = None


def _problem() -> sim.Problem:
    global _PROBLEM
    if _PROBLEM is None:
        _PROBLEM = sim.make_problem(MAX_BATCH, features=4, classes=3, seed=0)
    return _PROBLEM


def split_summary(replicas: int, global_batch: int, problem: Optional[sim.Problem] = None) -> SplitSummary:
    """Split the first ``global_batch`` examples over ``replicas`` and compute the three gradients."""
    base = problem or _problem()
    if not 1 <= global_batch <= base.batch:
        raise ValueError(f"global_batch must be between 1 and {base.batch}, got {global_batch}.")
    p = base.head(global_batch)
    right = sim.data_parallel_step(p.params, p.x, p.y, replicas)
    wrong = sim.data_parallel_step(p.params, p.x, p.y, replicas, local_mean=True)
    return SplitSummary(
        replicas=int(replicas),
        global_batch=int(global_batch),
        shard_sizes=right.shard_sizes,
        single=sim.single_device_gradients(p.params, p.x, p.y),
        data_parallel=right.gradients,
        local_mean=wrong.gradients,
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

    single = sim.flatten(summary.single)[:entries]
    right = sim.flatten(summary.data_parallel)[:entries]
    wrong = sim.flatten(summary.local_mean)[:entries]
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
    """Two sliders (replicas, global batch) and an output that redraws on every change.

    ``summary`` holds the numbers shown last and ``redraws`` counts the redraws (what the tests
    look at); ``widget`` is the ipywidgets box to display.
    """

    def __init__(self, replicas: int = DEFAULT_REPLICAS, global_batch: int = DEFAULT_BATCH) -> None:
        import ipywidgets as w

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
        summary = split_summary(self.replicas.value, self.global_batch.value)
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
    replicas: int = DEFAULT_REPLICAS,
    global_batch: int = DEFAULT_BATCH,
    *,
    interactive: Optional[bool] = None,
) -> Optional[DataParallelExplorer]:
    """Show the batch-split explorer: live sliders where a front end can draw them, otherwise the
    same figure and numbers for ``replicas`` and ``global_batch``.

    ``interactive=None`` decides with :func:`frontend_renders_widgets`; ``True`` or ``False``
    forces one way. Returns the explorer when it is live, else None.
    """
    from IPython.display import display

    live = frontend_renders_widgets() if interactive is None else interactive
    if live:
        explorer = DataParallelExplorer(replicas, global_batch)
        display(explorer.widget)
        return explorer
    summary = split_summary(replicas, global_batch)
    show_figure(batch_split_figure(summary), dpi=80)
    print(summary.text())
    print(
        "(A still picture for these values: in JupyterLab, Jupyter Notebook, VS Code or Colab "
        "the same cell shows sliders.)"
    )
    return None
