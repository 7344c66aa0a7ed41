"""Positional attention (PARec / FPARec, Luo et al. 2024) and handcrafted position patterns.

The attention weights depend on positions only, not on the items:

.. math::
    V = \\mathrm{LN}(H) W_V, \\qquad
    \\mathrm{PA}(H) = \\mathrm{softmax}\\Big(\\mathrm{causal}\\Big(\\frac{W_{pos}}{\\sqrt{d/h}}\\Big)\\Big) V

with a learnable ``n x n`` matrix ``W_pos`` per layer and head (PARec), or its rank-``k`` factorisation
``W_pos = F_1 F_2^T`` with ``F_1, F_2 in R^{n x k}`` (FPARec). The scaled logits are soft-capped to ``±30``
(``30 tanh(x/30)``, the identity within 1 % for ``|x| < 5``) before the softmax, as in the low-rank module: the
pattern's normaliser is shared by the batch and needs bounded exponentials. ``n`` is the model's ``max_len`` and
positions are absolute with left padding, so the most recent item always reads row ``n - 1``. (The
paper's equations were lost in the text extraction; this follows docs/methods.md §4, reconstructed from
the authors' code: the ``1/sqrt(d/h)`` scale, truncated-normal initialisation with std 0.01 for
PARec and ``sqrt(0.01)/k^{1/4}`` for ``F_1, F_2`` so that ``F_1 F_2^T`` has std about 0.01 too.)

Per layer the parameters are ``d^2`` for ``W_V`` plus ``h n^2`` (PARec) or ``2 h n k`` (FPARec),
against ``3 d^2`` for the ``Q, K, V`` projections of SASRec (biases and any output projection aside).

**Handcrafted patterns** (the paper's ablation, Table 4, whose formulas Eq. 12-14 were also lost):
unnormalised scores for key ``j <= i`` (positions of the window, ``n`` = max length), each row
then divided by its sum over the visible real keys (Eq. 15):

* ``average``:     ``a_ij = 1``                      (every earlier item counts the same)
* ``linear``:      ``b_ij = n - (i - j)``             (linearly less weight with distance)
* ``exponential``: ``c_ij = exp(-(i - j) / tau)``     (``tau = 1`` by default: most weight on the last few items)

They are implemented as fixed logits ``log a_ij`` (so ``softmax`` gives exactly ``a_ij / Σ_j a_ij``).

Because the logits are shared by the whole batch, the layer never materialises a ``(B, H, L, L)``
tensor unless weights are requested or dropout on the weights is on
(:func:`~tutorial_lib.attention.base.apply_shared_pattern`).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .base import Attention, SequenceContext, apply_shared_pattern, check_heads, merge_heads, split_heads
from .low_rank import soft_cap

PATTERNS = ("average", "linear", "exponential")


def handcrafted_logits(pattern: str, max_len: int, tau: float = 1.0) -> torch.Tensor:
    """``(max_len, max_len)`` log-scores of a handcrafted pattern (future entries are ``-inf``)."""
    if pattern not in PATTERNS:
        raise ConfigError(f"unknown pattern {pattern!r}; valid patterns are: {', '.join(PATTERNS)}")
    if tau <= 0:
        raise ConfigError(f"tau must be > 0, got {tau}")
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    distance = (i - j).float()
    if pattern == "average":
        logits = torch.zeros(max_len, max_len)
    elif pattern == "linear":
        logits = torch.log(max_len - distance.clamp(min=0))
    else:
        logits = -distance / tau
    return logits.masked_fill(j > i, float("-inf"))


class PositionalAttention(Attention):
    """Attention with position-only weights: learned (``"full"``: PARec, ``"factorized"``: FPARec) or
    fixed (``"average"``, ``"linear"``, ``"exponential"``).

    Args:
        d_model: width ``d``; ``n_heads`` must divide it.
        n_heads: heads; each learned head has its own pattern.
        max_len: ``n``, the size of the pattern.
        kind: ``"full"``, ``"factorized"`` or one of :data:`PATTERNS`.
        rank: ``k`` of the factorisation (FPARec).
        attn_dropout: dropout on the attention weights (the released code has it; it forces the
            explicit ``(B, H, L, L)`` path while training).
        out_proj: an output projection ``W_O`` after the heads (the paper and the code have none).
        tau: decay length of the exponential pattern.
    """

    def __init__(self, d_model: int, n_heads: int, max_len: int, kind: str = "full", rank: int = 40,
                 attn_dropout: float = 0.0, out_proj: bool = False, tau: float = 1.0):
        super().__init__()
        check_heads(d_model, n_heads)
        if kind not in ("full", "factorized", *PATTERNS):
            raise ConfigError(f"kind must be 'full', 'factorized' or one of {PATTERNS}, got {kind!r}")
        if kind == "factorized" and not 1 <= rank <= max_len:
            raise ConfigError(f"rank k must be in 1..max_len={max_len} (a larger k is no longer a factorisation), "
                              f"got {rank}")
        self.d_model, self.n_heads, self.max_len, self.kind, self.rank = d_model, n_heads, max_len, kind, rank
        self.scale = 1.0 / math.sqrt(d_model // n_heads)
        self.attn_dropout = attn_dropout
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model) if out_proj else nn.Identity()
        if kind == "full":
            self.w_pos = nn.Parameter(torch.empty(n_heads, max_len, max_len))
        elif kind == "factorized":
            self.f1 = nn.Parameter(torch.empty(n_heads, max_len, rank))
            self.f2 = nn.Parameter(torch.empty(n_heads, max_len, rank))
        else:
            self.register_buffer("fixed_logits", handcrafted_logits(kind, max_len, tau), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated normal as the released code: std 0.01 for ``W_pos``; ``sqrt(0.01)/k^{1/4}`` for
        ``F_1, F_2``, so that entries of ``F_1 F_2^T`` have std about 0.01 as well."""
        if self.kind == "full":
            nn.init.trunc_normal_(self.w_pos, std=0.01, a=-0.02, b=0.02)
        elif self.kind == "factorized":
            std = math.sqrt(0.01) / self.rank ** 0.25
            for f in (self.f1, self.f2):
                nn.init.trunc_normal_(f, std=std, a=-2 * std, b=2 * std)

    def pattern_logits(self) -> torch.Tensor:
        """``(H, n, n)`` logits over all positions (before masking)."""
        if self.kind == "full":
            return soft_cap(self.w_pos * self.scale)
        if self.kind == "factorized":
            return soft_cap(self.f1 @ self.f2.transpose(-2, -1) * self.scale)
        return self.fixed_logits.expand(self.n_heads, -1, -1)

    def batch_logits(self, ctx: SequenceContext) -> torch.Tensor:
        """``(H, L, L)`` logits for the columns of this batch (absolute positions, counted from the right)."""
        if ctx.max_len not in (None, self.max_len):
            raise ConfigError(f"the pattern has size {self.max_len} but the model's max_len is {ctx.max_len}")
        pos = torch.arange(self.max_len - ctx.length, self.max_len, device=ctx.item_ids.device)
        return self.pattern_logits()[:, pos][:, :, pos]

    def weights(self, ctx: SequenceContext) -> torch.Tensor:
        """``(B, H, L, L)`` attention weights (rows of padding queries attend to themselves)."""
        logits = self.batch_logits(ctx)[None].masked_fill(~ctx.allowed(), float("-inf"))
        return torch.softmax(logits, dim=-1)

    def forward(self, x: torch.Tensor, ctx: SequenceContext, memory: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` (values from ``memory`` ``(B, L, d)`` if given) -> ``(B, L, d)`` and, with
        ``ctx.need_weights``, the ``(B, H, L, L)`` weights (else ``None``)."""
        v = split_heads(self.v_proj(x if memory is None else memory), self.n_heads)   # (B, H, L, dh)
        p = self.attn_dropout if self.training else 0.0
        weights = None
        if ctx.need_weights or p > 0:
            weights = self.weights(ctx)
            out = F.dropout(weights, p, self.training) @ v
        else:
            out = apply_shared_pattern(self.batch_logits(ctx), v, ctx.valid_mask, causal=ctx.causal)
        return self.out_proj(merge_heads(out)), weights if ctx.need_weights else None
