"""Notebook 08: the scaffolding around a kernel that coordinates an in-process cluster, and its picture.

:func:`draw_parameter_servers` draws who does what under ``ParameterServerStrategy`` (coordinator,
workers, servers).

Once a process has made a ``ParameterServerStrategy``, TensorFlow's C++ runtime tells every server
when Python frees a traced function; a server that never had it answers with an error that the
runtime logs on file descriptor 2 ("Failed to remove function remotely due to Tried to remove
non-existent function '__inference_...'"). Nothing is wrong, but garbage collection frees objects
under whichever cell runs, and Jupyter shows file descriptor 2 under the running cell; the C++ log
level cannot change once TensorFlow is imported. :func:`native_logs_to_file` sends file descriptor
2 to a file before the kernel joins the cluster; ``print``, warnings and tracebacks still show.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

from ..scratch import scratch_dir

#: The file that receives native stderr, once :func:`native_logs_to_file` has run in this process.
_LOG_FILE: Optional[Path] = None
#: Where file descriptor 2 pointed before (Jupyter's pipe or a terminal), kept open for good.
_SAVED_FD: Optional[int] = None


def native_logs_to_file(notebook: str = "08_parameter_servers", name: str = "tensorflow_native.log") -> Path:
    """From now on, write what native code (TensorFlow's C++ runtime, gRPC) prints on stderr to a
    file in the notebook's scratch folder, and return that file.

    Call it before the kernel joins a cluster; calling it again keeps the first file. Where Python's
    own ``sys.stderr`` also writes to file descriptor 2 (a plain ``python`` process, not a kernel),
    it is moved to a copy of the old descriptor first, so Python's messages still show.
    """
    global _LOG_FILE, _SAVED_FD
    if _LOG_FILE is not None:
        return _LOG_FILE
    path = scratch_dir(notebook, clean=False) / name
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 at all (some embedded runtimes): nothing would show anyway
        _LOG_FILE = path
        return path
    try:
        python_uses_fd_2 = sys.stderr is not None and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # Jupyter's stream has no descriptor of its own
        python_uses_fd_2 = False
    sys.stderr.flush()
    if python_uses_fd_2:
        sys.stderr = open(saved, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # this kernel's log only
    os.dup2(log, 2)
    os.close(log)
    _SAVED_FD, _LOG_FILE = saved, path  # the saved copy keeps Jupyter's pipe open: never closed
    return path


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
