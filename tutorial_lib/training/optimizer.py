"""Adam with the fastest implementation torch offers for the model's device.

PyTorch's default Adam updates one parameter tensor at a time. Its ``fused`` kernel (CPU and CUDA) does the
whole update in one pass. On this course's 2-core CPU it made an Adam step of SASRec 3-17x faster, depending on
the catalogue size and the load (``benchmarks/optimizer_step.py``, ``results/benchmarks/optimizer_step.md``).
The update is the same algorithm; results agree with the default implementation to float32 rounding (tested).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

#: implementations tried in order: fused kernel, then multi-tensor (``foreach``), then the plain loop
IMPLEMENTATIONS = ({"fused": True}, {"foreach": True}, {})


def make_adam(params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999),
              weight_decay: float = 0.0, implementation: str = "auto") -> torch.optim.Adam:
    """``torch.optim.Adam`` over ``params``.

    Args:
        implementation: ``"auto"`` (fused where the device supports it, else foreach, else the loop),
            ``"fused"``, ``"foreach"`` or ``"loop"`` (PyTorch's per-tensor default on CPU).
    """
    params = list(params)
    choices = {"auto": IMPLEMENTATIONS, "fused": IMPLEMENTATIONS[:1], "foreach": IMPLEMENTATIONS[1:2],
               "loop": IMPLEMENTATIONS[2:]}
    if implementation not in choices:
        raise ValueError(f"implementation must be one of {sorted(choices)}, got {implementation!r}")
    error: Exception | None = None
    for extra in choices[implementation]:
        try:
            return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=weight_decay, **extra)
        except (RuntimeError, ValueError) as exc:  # e.g. fused kernel not available for this device/dtype
            error = exc
    raise RuntimeError(f"Adam with implementation={implementation!r} is not available here: {error}")


__all__ = ["make_adam", "IMPLEMENTATIONS"]
