"""Seed every random number generator the course uses."""
from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy's legacy global RNG and torch (CPU and CUDA).

    Returns a fresh ``np.random.Generator`` seeded with ``seed`` for code that prefers explicit
    generators (all of ``tutorial_lib`` does).
    """
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def device_rng_state(device: torch.device) -> torch.Tensor | None:
    """The state of ``device``'s own random generator (CUDA or MPS: dropout masks and sampling drawn on the
    device use it, not the CPU's); ``None`` on the CPU, whose state ``torch.get_rng_state`` gives."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    if device.type == "mps":
        return torch.mps.get_rng_state()
    return None


def set_device_rng_state(device: torch.device, state: torch.Tensor | None) -> None:
    """Restore a state from :func:`device_rng_state`. ``None`` (a checkpoint written on the CPU, or before
    device states were saved) leaves the generator as it is; a state from another device type is ignored."""
    if state is None:
        return
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    elif device.type == "mps":
        torch.mps.set_rng_state(state)
