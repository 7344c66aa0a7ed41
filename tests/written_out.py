"""Written-out references shared by the attention tests: masks built with loops, no library helper."""
from __future__ import annotations

import math

import torch


def allowed_by_loops(ids: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """``(B, L, L)`` bool: query ``t`` may see key ``j`` if ``j`` is a real item (id > 0) and, when causal,
    ``j <= t``; every position also sees itself (the library's contract, so no row is empty)."""
    B, L = ids.shape
    out = torch.zeros(B, L, L, dtype=torch.bool)
    for b in range(B):
        for t in range(L):
            for j in range(L):
                out[b, t, j] = j == t or (ids[b, j] > 0 and (not causal or j <= t))
    return out


def heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, L, D)`` -> ``(B, H, L, D / H)``."""
    B, L, D = x.shape
    return x.reshape(B, L, n_heads, D // n_heads).permute(0, 2, 1, 3)


def masked_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q kᵀ / sqrt(d_h))`` over the allowed keys, and the weighted values merged back to ``(B, L, D)``.
    ``q, k, v`` ``(B, H, L, d_h)``, ``allowed`` ``(B, L, L)``."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(logits.masked_fill(~allowed[:, None], float("-inf")), dim=-1)
    out = w @ v
    B, H, L, dh = out.shape
    return out.permute(0, 2, 1, 3).reshape(B, L, H * dh), w
