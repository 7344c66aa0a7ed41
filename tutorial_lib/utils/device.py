"""Pick the compute device: CUDA, then Apple MPS, then CPU (or what ``$SEQREC_DEVICE`` says); describe the hardware
a run trained on, for its results row."""
from __future__ import annotations

import os
import platform

import torch

from ..errors import ConfigError

#: the environment variable that decides what ``"auto"`` means for every run, notebook and script of the course
#: (``cpu``, ``cuda``, ``mps``): e.g. ``SEQREC_DEVICE=cpu`` keeps an Apple-silicon Mac off MPS; unset or ``auto``,
#: the default order
DEVICE_ENV = "SEQREC_DEVICE"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto"`` (or an explicit name) into a ``torch.device``.

    ``"auto"`` is ``$SEQREC_DEVICE`` when that is set (and not ``auto``), else CUDA, then MPS, then CPU. An
    explicit device that is not available raises a :class:`ConfigError` saying which devices are.
    """
    if isinstance(device, torch.device):
        return device
    name = str(device).strip().lower()
    if name == "auto":
        chosen = os.environ.get(DEVICE_ENV, "").strip().lower()
        if chosen and chosen != "auto":
            try:
                return resolve_device(chosen)
            except ConfigError as exc:
                raise ConfigError(f"{DEVICE_ENV}={chosen!r} in the environment: {exc} (or unset {DEVICE_ENV})") from exc
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was requested but no CUDA GPU is visible; use device='auto' or 'cpu' (on the "
                          "command line, --device auto or --device cpu)")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("device 'mps' was requested but MPS is not available; use device='auto' or 'cpu' (on the "
                          "command line, --device auto or --device cpu)")
    try:
        return torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {device!r}; use 'auto', 'cpu', 'cuda' or 'mps'") from exc


def synchronize(device: torch.device) -> None:
    """Wait for the kernels queued on ``device`` (CUDA, MPS), so that a wall-clock time covers the work; a no-op
    on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def hardware_description(device: torch.device) -> str:
    """E.g. ``"cpu: Intel Xeon ... x2 threads"`` or ``"cuda: NVIDIA H100"``."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{device.type}: {cpu} x{torch.get_num_threads()} threads"


def describe_machines(machines: list[list]) -> str:
    """Where a run trained, from :attr:`~tutorial_lib.training.TrainResult.machines` (``[description, first epoch,
    last epoch]`` per stretch of epochs on one machine): ``"cuda: NVIDIA H200 (epochs 1-174); cpu: AMD EPYC x1
    threads (epochs 175-180)"`` when a resumed run moved, the one description when it never did, ``""`` for none."""
    if len({name for name, _, _ in machines}) <= 1:
        return machines[0][0] if machines else ""
    return "; ".join(f"{name} (epoch {first})" if first == last else f"{name} (epochs {first}-{last})"
                     for name, first, last in machines)
