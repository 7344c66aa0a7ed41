"""Trained models on disk: the weights a finished run selected, and what it takes to rebuild the model.

The runner deletes a run's checkpoint when the run finishes (its row and curve are the record), so the
selected model is kept in a file of its own: ``runs/models/<tag>_<run_id>.pt``. It holds plain values and
one state dict, is written atomically and is loaded with ``weights_only=True``:

* ``model``, ``options``: the registry name and the resolved options it was built with;
* ``n_items``, ``n_users``, ``max_len``: the sizes it was built for;
* ``dataset``, ``run_id``: which run produced it (the run's row in ``results/runs.csv`` has the same ``run_id``);
* ``state``: the state dict of the weights selected on validation.

    model, meta = load_trained("runs/models/sasrec_ml-1m_ce_full_s42_c98e650fa409.pt")
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ConfigError
from ..models import build_model
from ..training.checkpoint import load_checkpoint, save_checkpoint

META_KEYS = ("model", "options", "n_items", "n_users", "max_len", "dataset", "run_id")


def trained_model_path(folder: str | Path, tag: str, run_id: str) -> Path:
    """``<folder>/<tag>_<run_id>.pt``, the same stem as the run's checkpoint and curve."""
    return Path(folder) / f"{tag}_{run_id}.pt"


def save_trained(path: str | Path, model: nn.Module, *, model_name: str, options: dict[str, Any], n_items: int,
                 n_users: int | None, max_len: int, dataset: str = "", run_id: str = "") -> Path:
    """Write ``model``'s current weights (on CPU) with the facts :func:`load_trained` rebuilds it from."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_checkpoint(path, {"model": model_name, "options": dict(options), "n_items": int(n_items),
                           "n_users": None if n_users is None else int(n_users), "max_len": int(max_len),
                           "dataset": dataset, "run_id": run_id, "state": state})
    return path


def load_trained(path: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model saved by :func:`save_trained`, load its weights, and return it in eval mode with
    the file's metadata. Models that need statistics of the training split (RKSA) still need
    ``model.prepare(split)`` before use."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"no trained model at {path}: the benchmark and `train` write one to runs/models/ "
                          "when a run finishes")
    blob = load_checkpoint(path)
    missing = [k for k in (*META_KEYS, "state") if k not in blob]
    if missing:
        raise ConfigError(f"{path} is not a trained-model file (missing {missing}); a training checkpoint "
                          "(runs/benchmark/*.pt) is resumed with the command that started it instead")
    model = build_model(blob["model"], n_items=blob["n_items"], max_len=blob["max_len"], n_users=blob["n_users"],
                        **blob["options"])
    model.load_state_dict(blob["state"])
    return model.to(device).eval(), {k: blob[k] for k in META_KEYS}


__all__ = ["trained_model_path", "save_trained", "load_trained"]
