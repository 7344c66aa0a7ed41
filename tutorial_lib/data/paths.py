"""Where dataset files live on disk.

Lookup order: an explicit argument, then the environment variable ``SEQREC_DATA_DIR``, then a
git-ignored cache ``data/cache/`` in the project checkout (or ``~/.cache/tutorial_lib`` when the
package is installed outside a source checkout).
"""
from __future__ import annotations

import os
from pathlib import Path

from tutorial_lib.data.registry import DatasetSpec, get_spec

ENV_VAR = "SEQREC_DATA_DIR"
_PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root() -> Path | None:
    """The source checkout that holds this package (``pyproject.toml`` or ``.git`` next to it), if any."""
    root = Path(__file__).resolve().parents[2]
    if (root / "tutorial_lib").is_dir() and any((root / m).exists() for m in _PROJECT_MARKERS):
        return root
    return None


def default_cache_dir() -> Path:
    """``<project>/data/cache`` in a source checkout, else ``~/.cache/tutorial_lib``."""
    root = project_root()
    if root is not None:
        return root / "data" / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tutorial_lib"


def data_dir(override: str | os.PathLike | None = None) -> Path:
    """The data directory: ``override``, else ``$SEQREC_DATA_DIR``, else :func:`default_cache_dir`."""
    if override is not None and str(override) != "":
        return Path(override).expanduser()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    return default_cache_dir()


def dataset_folder(spec: DatasetSpec | str, root: str | os.PathLike | None = None) -> Path:
    """The folder of one dataset inside the data directory (``<data_dir>/<spec.folder>``)."""
    return data_dir(root) / get_spec(spec).folder
