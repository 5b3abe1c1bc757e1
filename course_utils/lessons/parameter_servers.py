"""Notebook 08: the parameter-server architecture in one picture (coordinator, workers, servers)."""

from __future__ import annotations

from typing import Any


def draw_parameter_servers() -> Any:
    """Draw who does what under ``ParameterServerStrategy``: the coordinator (the chief) schedules
    steps on 2 workers, which read the variables of 2 parameter servers and send them updates.
    Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    def box(x: float, y: float, text: str, color: str) -> None:
        ax.add_patch(
            FancyBboxPatch((x - 0.13, y - 0.07), 0.26, 0.14, boxstyle="round,pad=0.01", fc=color, ec="black")
        )
        ax.text(x, y, text, ha="center", va="center", fontsize=9)

    def arrow(
        start: tuple[float, float], end: tuple[float, float], text: str = "", both: bool = False
    ) -> None:
        ax.annotate(
            "", xy=end, xytext=start, arrowprops=dict(arrowstyle="<->" if both else "->", color="gray")
        )
        if text:
            ax.text(
                (start[0] + end[0]) / 2 + 0.01, (start[1] + end[1]) / 2, text, fontsize=8, color="dimgray"
            )

    fig, ax = plt.subplots(figsize=(7, 3.6))
    box(0.5, 0.88, "coordinator (chief)\nschedule(step)", "#fde9c9")
    for i, x in enumerate([0.25, 0.75]):
        box(x, 0.5, f"worker {i}\nruns steps", "#d6e6f5")
        arrow((0.5, 0.81), (x, 0.57), "a step" if i == 0 else "")
    for j, x in enumerate([0.25, 0.75]):
        box(x, 0.12, f"ps {j}\nholds variables", "#dcefd9")
    for wx in [0.25, 0.75]:
        for px in [0.25, 0.75]:
            arrow((wx, 0.43), (px, 0.19), both=True)
    ax.text(0.5, 0.3, "read variables, send updates", ha="center", fontsize=8, color="dimgray")
    ax.set(xlim=(0, 1), ylim=(0, 1), title="ParameterServerStrategy: who does what")
    ax.axis("off")
    return fig
