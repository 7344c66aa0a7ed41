"""Checkpoints: state dicts and plain values only, written atomically, loaded with ``weights_only=True``."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from ..utils.io import atomic_write_bytes


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Serialise ``state`` (tensors, state dicts, numbers, strings, lists, dicts) atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` without unpickling arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)
