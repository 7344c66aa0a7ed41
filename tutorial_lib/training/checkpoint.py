"""Checkpoints: state dicts and plain values only, written atomically, loaded with ``weights_only=True``."""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError
from ..utils.io import atomic_write_bytes


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Serialise ``state`` (tensors, state dicts, numbers, strings, lists, dicts) atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` without unpickling arbitrary objects.

    A file that is not one (truncated, overwritten, another program's) raises :class:`ConfigError` naming it;
    torch's own message would suggest ``weights_only=False``, which runs whatever code the file holds.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, EOFError, RuntimeError, ValueError, KeyError, IndexError, pickle.UnpicklingError) as exc:
        if isinstance(exc, OSError) and not Path(path).is_file():
            raise
        raise ConfigError(f"{path} cannot be read as a checkpoint ({type(exc).__name__}): the file is damaged or "
                          f"is not a checkpoint of this library. Delete it, and the run starts afresh") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{path} holds a {type(state).__name__}, not a checkpoint of this library. Delete it, "
                          f"and the run starts afresh")
    return state
