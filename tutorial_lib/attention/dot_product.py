"""Scaled dot-product multi-head self-attention (SASRec, Vaswani et al.).

.. math:: \\mathrm{Attention}(Q, K, V) = \\mathrm{softmax}\\Big(\\frac{QK^\\top}{\\sqrt{d_h}} + M\\Big) V

with ``M`` = -inf where the key is padding or (causally) in the future.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import Attention, SequenceContext, check_heads, merge_heads, split_heads


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference implementation, written out: ``q, k, v`` are ``(B, H, L, dh)``, ``allowed`` broadcasts
    to ``(B, H, L, L)``. Returns ``(output (B, H, L, dh), weights (B, H, L, L))``."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    logits = logits.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(logits, dim=-1)
    dropped = F.dropout(weights, p=dropout_p, training=training)
    return dropped @ v, weights


class DotProductAttention(Attention):
    """Multi-head scaled dot-product attention.

    Args:
        d_model: model width ``d``; must be divisible by ``n_heads``.
        n_heads: number of heads ``H``.
        attn_dropout: dropout on the attention weights (SASRec's TF code). Anything above 0 makes
            PyTorch fall back from its fused kernel to the slower explicit path on CPU.
        out_proj: apply an output projection ``W_O`` (the TF code has none).
        bias: biases on the projections.
    """

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0, out_proj: bool = True,
                 bias: bool = True):
        super().__init__()
        check_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.attn_dropout = d_model, n_heads, attn_dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias) if out_proj else nn.Identity()

    def project(self, x: torch.Tensor, memory: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """Queries from ``x``; keys and values from ``memory`` (default ``x``). Each ``(B, H, L, dh)``."""
        if memory is None:
            q, k, v = self.in_proj(x).chunk(3, dim=-1)
        else:
            w_q, w_kv = self.in_proj.weight.split([self.d_model, 2 * self.d_model])
            b_q, b_kv = (None, None) if self.in_proj.bias is None else self.in_proj.bias.split(
                [self.d_model, 2 * self.d_model])
            q = F.linear(x, w_q, b_q)
            k, v = F.linear(memory, w_kv, b_kv).chunk(2, dim=-1)
        return tuple(split_heads(t, self.n_heads) for t in (q, k, v))

    def forward(self, x: torch.Tensor, ctx: SequenceContext, memory: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` (keys and values from ``memory`` ``(B, L, d)`` if given) -> ``(B, L, d)`` and,
        with ``ctx.need_weights``, the ``(B, H, L, L)`` weights (else ``None``)."""
        q, k, v = self.project(x, memory)
        p = self.attn_dropout if self.training else 0.0
        if ctx.need_weights:
            out, weights = naive_attention(q, k, v, ctx.allowed(), p, self.training)
        else:
            weights = None
            if ctx.causal and not ctx.has_padding():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.allowed(), dropout_p=p)
        return self.out_proj(merge_heads(out)), weights
