"""Measure the cost of one attention layer: forward+backward time, activation memory, FLOPs, parameters.

Used by ``benchmarks/attention_scaling.py`` (the efficiency lab's table and figure) and by notebook 03.

* time: median wall-clock of forward + backward over ``repeats`` runs after a warm-up;
* activation memory: bytes of the distinct storages autograd saves for the backward pass (deterministic
  and hardware independent; the quantity that grows with ``L^2`` when attention weights are stored);
* FLOPs: ``torch.utils.flop_counter`` on the forward pass (matrix products only).
"""
from __future__ import annotations

import math
import statistics
import time
from argparse import Namespace
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from ..data.split import LeaveOneOutSplit
from ..errors import ConfigError
from ..models import build_model
from ..models.backbone import user_inputs
from ..options import parse_key_value
from ..utils.device import synchronize

if TYPE_CHECKING:
    from ..attention.base import Attention
    from ..models.backbone import SequentialRecommender


def _register_cpu_sdpa_flops() -> None:
    """torch's flop counter knows the CUDA fused attention kernels but not the CPU one; count it the same way
    (2 matrix products of (L x dh) by (dh x L) and (L x L) by (L x dh) per head)."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is not None and op not in flop_counter.flop_registry:
        @flop_counter.register_flop_formula(op)
        def _cpu_sdpa(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


_register_cpu_sdpa_flops()


def saved_activation_bytes(fn: Callable[[], object]) -> tuple[object, int]:
    """Run ``fn()`` and return its result and the bytes of distinct storages autograd saved for backward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"sasrec:attn_dropout=0.2"`` -> ``("sasrec", {"attn_dropout": 0.2})``."""
    name, _, rest = spec.partition(":")
    try:
        return name, dict(parse_key_value(item) for item in rest.split(",") if item)
    except ValueError as exc:
        raise ConfigError(f"model spec {spec!r}: {exc}") from None


def make_layer(spec: str, length: int, d_model: int, n_items: int, device: torch.device
               ) -> tuple[SequentialRecommender, Attention]:
    """The model (on ``device``) and its first attention layer (with the modules it shares, e.g. position tables)."""
    name, options = parse_spec(spec)
    options = {"dropout": 0.0, **options}
    model = build_model(name, n_items=n_items, max_len=length, n_users=6040, d_model=d_model, **options)
    if hasattr(model, "prepare"):
        rng = np.random.default_rng(0)
        train = [rng.integers(1, n_items + 1, 60) for _ in range(8)]
        model.prepare(LeaveOneOutSplit(train, np.zeros(8, np.int64), np.zeros(8, np.int64), n_items))
    return model.to(device), model.blocks[0].attention


def measure(name: str, length: int, args: Namespace, device: torch.device) -> dict:
    """Cost of the first attention layer of model ``name`` (``"name:option=value"`` allowed) at length ``length``.

    ``args`` needs ``batch``, ``d_model``, ``n_items`` and ``repeats``. Returns a dict with ``ms``,
    ``activation_mib``, ``gflops``, ``params`` (whole model) and ``cuda_peak_mib`` (CUDA only).
    """
    model, layer = make_layer(name, length, args.d_model, args.n_items, device)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, args.n_items + 1, (args.batch, length), generator=g).to(device)
    users = torch.arange(args.batch, device=device) % 6040
    ctx = model.make_context(ids, **user_inputs(model, users))
    if ctx.user is not None:
        ctx.user = ctx.user.detach()  # the layer alone is measured, not the user embedding before it
    x = torch.randn(args.batch, length, args.d_model, device=device, requires_grad=True)
    ctx.extras["input_embeddings"] = x.detach()

    def step() -> torch.Tensor:
        y, _ = layer(x, ctx)
        return y

    with FlopCounterMode(display=False) as counter:
        with torch.no_grad():
            step()
    flops = counter.get_total_flops()
    y, act_bytes = saved_activation_bytes(step)
    y.float().square().mean().backward()
    times = []
    for _ in range(args.repeats):
        x.grad = None
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        step().float().square().mean().backward()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return {"model": name, "L": length, "ms": 1000 * statistics.median(times), "activation_mib": act_bytes / 2**20,
            "gflops": flops / 1e9, "params": sum(p.numel() for p in model.parameters()),
            "cuda_peak_mib": None if peak is None else peak / 2**20}


def growth_exponent(rows: list[dict], key: str) -> float:
    """Slope of log(key) against log(L) over the longest three measured lengths."""
    pts = [(r["L"], r[key]) for r in rows if r.get(key)][-3:]
    if len(pts) < 2:
        return math.nan
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])




def measure_layer(name: str, length: int, batch: int = 16, d_model: int = 64, n_items: int = 3416, repeats: int = 3,
                  device: str | torch.device = "cpu") -> dict:
    """Keyword version of :func:`measure` for notebooks."""
    from ..utils import resolve_device

    args = Namespace(batch=batch, d_model=d_model, n_items=n_items, repeats=repeats)
    return measure(name, length, args, resolve_device(device))


__all__ = ["measure", "measure_layer", "growth_exponent", "saved_activation_bytes", "parse_spec", "make_layer"]
