"""Seed every random number generator the course uses."""
from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from ..errors import ConfigError


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


#: cuBLAS's setting for reproducible matrix products (CUDA 10.2 and later); without it torch refuses them
CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"
#: what torch's message says when an operation has no deterministic version
NO_DETERMINISTIC_VERSION = "does not have a deterministic implementation"


@contextmanager
def deterministic_algorithms(enabled: bool = True) -> Iterator[None]:
    """Inside the block, run PyTorch's deterministic kernels only; afterwards, restore the settings it found.

    On a CPU the library's runs repeat exactly with one seed anyway. On a GPU some kernels add up in an order
    that changes from run to run (the backward passes of fused attention, of the embedding and of
    ``index_add_``; cuBLAS's split reductions), so two runs with one seed drift apart by rounding. This turns on
    ``torch.use_deterministic_algorithms`` in its strict form (with ``warn_only`` the fused attention's backward
    would stay non-deterministic and only warn), cuDNN's deterministic mode without its autotuner, and sets
    ``CUBLAS_WORKSPACE_CONFIG`` when it is not set (cuBLAS sizes its workspace when CUDA first multiplies
    matrices, so in a notebook that has already used the GPU, set it before that or restart the kernel). The
    price is speed on a GPU; nothing changes on a CPU. An operation that has no deterministic version raises
    :class:`~tutorial_lib.errors.ConfigError` naming it. ``enabled=False`` leaves everything as it is.
    """
    if not enabled:
        yield
        return
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    except RuntimeError as exc:
        if NO_DETERMINISTIC_VERSION not in str(exc):
            raise
        operation = str(exc).strip().split(NO_DETERMINISTIC_VERSION)[0].strip()
        raise ConfigError(f"deterministic training was asked for, but this model uses {operation}, which has no "
                          f"deterministic version on this device; train without it (deterministic=False; on the "
                          f"command line, leave out --deterministic)") from exc
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = previous[2], previous[3]
