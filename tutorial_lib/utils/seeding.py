"""Seed every random number generator the course uses, and ask PyTorch for deterministic kernels."""
from __future__ import annotations

import os
import random
import re
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
#: torch's message when an operation has no deterministic version: "<operation> does not have a deterministic ..."
_NO_DETERMINISTIC_VERSION = re.compile(r"(\S+) does not have a deterministic implementation")


@contextmanager
def forked_torch_rng(seed: int | None = None) -> Iterator[None]:
    """Run the block on a copy of torch's CPU random generator, seeded with ``seed`` when one is given.

    Afterwards the caller's generator is as it was, even when the block raises: building a reference module with
    a fixed seed does not change the random numbers of the code around it."""
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        yield


@contextmanager
def deterministic_algorithms(enabled: bool = True) -> Iterator[None]:
    """Inside the block, run PyTorch's deterministic kernels only; afterwards, restore the settings it found.

    A CPU run of the library repeats exactly with one seed anyway. On a GPU, the backward passes of the fused
    attention kernels (flash and memory-efficient) add up in an order that changes from run to run, so two runs
    with one seed drift apart by rounding. This turns on ``torch.use_deterministic_algorithms`` in its strict form
    (with ``warn_only`` those backward passes would only warn and stay as they are) and switches off cuDNN's
    autotuner. It also sets ``CUBLAS_WORKSPACE_CONFIG`` when it is not set, and leaves it set: cuBLAS reads it
    when CUDA first multiplies matrices, so in a notebook that has already used the GPU, set it before that or
    restart the kernel (the command line sets it before any CUDA work). The price is speed on a GPU; on a CPU
    only a little time. An operation that has no deterministic version (on CUDA, ``cumsum`` in older torch
    releases) raises :class:`~tutorial_lib.errors.ConfigError` naming it. ``enabled=False`` changes nothing.
    """
    if not enabled:
        yield
        return
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.backends.cudnn.benchmark)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    except RuntimeError as exc:
        found = _NO_DETERMINISTIC_VERSION.search(str(exc))
        if found is None:
            raise
        raise ConfigError(f"deterministic training was asked for, but training uses {found.group(1)}, which has "
                          f"no deterministic version on this device (torch {torch.__version__}); train without "
                          f"it (deterministic=False; on the command line, leave out --deterministic)") from exc
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.backends.cudnn.benchmark = previous[2]
