"""Checkpoints: state dicts and plain values only, written atomically, loaded with ``weights_only=True``."""
from __future__ import annotations

import io
import warnings
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes the unpickler raise
            if isinstance(exc, OSError) and not Path(path).is_file():
                if Path(path).is_dir():
                    raise ConfigError(f"{path} is a folder; name the checkpoint file in it") from None
                raise
            kind = type(exc)     # struct.error, zipfile.BadZipFile, ...: the module says what could not be read
            failure = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        else:
            failure = None
    if failure is not None:  # torch's warnings about the damaged bytes would only confuse; the error says it all
        raise ConfigError(f"{path} cannot be read as a checkpoint ({failure}): the file is damaged or "
                          f"is not a checkpoint of this library. Delete it, and the run starts afresh")
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if not isinstance(state, dict):
        raise ConfigError(f"{path} holds a {type(state).__name__}, not a checkpoint of this library. Delete it, "
                          f"and the run starts afresh")
    return state
