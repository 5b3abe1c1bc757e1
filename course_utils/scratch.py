"""Every notebook that writes files: one scratch folder per notebook for checkpoints, logs and saved models.

Everything a notebook writes goes under ``./scratch/<notebook>/`` (git ignores ``scratch/``), so
re-running a notebook starts clean on purpose and never resumes by accident.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def scratch_root() -> Path:
    """``$COURSE_SCRATCH`` if set, else ``./scratch`` next to the running notebook."""
    return Path(os.environ.get("COURSE_SCRATCH") or Path.cwd() / "scratch")


def scratch_dir(notebook: str, *parts: str, clean: bool = True) -> Path:
    """Return (and create) the scratch folder of ``notebook``; ``clean=True`` empties it first.

    ``parts`` name a sub-folder, e.g. ``scratch_dir("04_custom_training", "checkpoints")``.
    """
    if not notebook or "/" in notebook or "\\" in notebook or notebook.startswith("."):
        raise ValueError(f"scratch_dir needs a plain notebook name, not {notebook!r}.")
    path = scratch_root().joinpath(notebook, *parts)
    if clean and path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path
