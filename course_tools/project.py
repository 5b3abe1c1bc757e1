"""Instructors and graders: where the course folder is, its configured repository, and a scoped environment.

Authoring, presenting and the grader all start from these three; they live here so that none of
those modules has to import another to find the course.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Mapping, Optional

from .cellmeta import AuthoringError


def find_root(start: Optional[Path] = None) -> Path:
    """The course folder: the nearest parent holding ``pyproject.toml`` and ``solutions/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "solutions").is_dir():
            return folder
    raise AuthoringError("Run this from inside the course folder (no pyproject.toml + solutions/ found).")


def course_config(root: Path) -> dict[str, str]:
    """``[tool.course]`` of ``pyproject.toml``: ``repository`` and ``branch``."""
    import tomllib

    data = tomllib.loads((root / "pyproject.toml").read_text())
    config = data.get("tool", {}).get("course", {})
    repository = str(config.get("repository", "")).rstrip("/")
    if not repository.startswith("https://github.com/"):
        raise AuthoringError("[tool.course] repository must be a https://github.com/OWNER/REPO address.")
    return {"repository": repository, "branch": str(config.get("branch", "main"))}


@contextlib.contextmanager
def environment(env: Optional[Mapping[str, Optional[str]]]) -> Iterator[None]:
    """Set environment variables for the block (kernels started inside inherit them; a value of
    None unsets one), then restore."""
    saved = {k: os.environ.get(k) for k in (env or {})}
    for key, value in (env or {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
