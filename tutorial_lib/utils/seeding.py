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
