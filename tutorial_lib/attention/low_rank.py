"""Low-rank decomposed self-attention (LightSANs, Fan et al., SIGIR 2021).

Each query attends to ``k`` *latent interests* instead of to every item (paper Eq. 1-3):

.. math::
    D = \\mathrm{softmax}_{\\text{items}}(K\\Theta_K^\\top), \\quad \\tilde K = D^\\top K, \\quad
    \\tilde V = \\mathrm{softmax}_{\\text{items}}(V\\Theta_V^\\top)^\\top V, \\quad
    \\tilde S_h = \\mathrm{softmax}_{\\text{interests}}\\Big(\\frac{Q_h \\tilde K_h^\\top}{\\sqrt{d/h}}\\Big) \\tilde V_h

and, with *decoupled position encoding* (Eq. 4), a separate position-to-position attention computed
from the position table alone (shared by the whole batch) and added to the item part:

.. math:: \\tilde S = \\tilde A_{item} f(V) + \\mathrm{softmax}\\Big(\\frac{P U_Q (P U_K)^\\top}{\\sqrt{d/h}}\\Big) V.

(The paper writes ``P U_Q``; like the released code, ``P`` is layer-normalised first and ``U_Q, U_K`` have
biases: ``LN(P) U_Q + b``.)

**Causal aggregation.** The paper aggregates the whole sequence, which is fine for RecBole's
training (one prefix per sample, loss at its last position) but leaks the future when every position
is trained at once. Here the interests seen by position ``t`` are aggregated from items ``1..t`` only:
with ``e_{j\\kappa} = \\exp(a_{j\\kappa})`` and prefix sums over ``j``,

.. math:: \\tilde K_{t\\kappa} = \\frac{\\sum_{j \\le t} e_{j\\kappa} K_j}{\\sum_{j \\le t} e_{j\\kappa}},

which costs ``O(L k d)`` memory and time: linear in the length ``L`` (SASRec's attention is
``O(L^2 H)``). Padding items get ``e = 0``. Both interest logits and position logits are soft-capped
to ``±30`` (``30 tanh(x/30)``, within 1 % of the identity for ``|x| < 5``), so every exponential,
shifted by the constant cap (``exp(a - 30)`` lies in ``[e^-60, 1]``), stays inside float32's range. The
shift is a constant, not a maximum over the window: a maximum would let later items move earlier positions'
outputs through float rounding. So no position ever depends on a later one, whatever the values.

**Released-code compatibility** (``compat=True``, docs/methods.md §3.2): interest logits ``K Θ`` with
``Θ ~ N(0, 1)``, aggregation over the *whole* window without masks, item attention normalised over
the *sequence* axis (dim -2) instead of over the interests, position logits scaled by
``1 / (sqrt(2) d_h)``, normalised over dim -2, unmasked. It is non-causal, so it must be trained
on prefix samples with the loss at the last position (``objective="last"`` of the backbone).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .base import (Attention, SequenceContext, apply_shared_pattern, check_heads, float32_region, merge_heads,
                   split_heads)

#: logits are soft-capped to this magnitude before any exponential (see the module docstring)
LOGIT_CAP = 30.0


def soft_cap(x: torch.Tensor, cap: float = LOGIT_CAP) -> torch.Tensor:
    """``cap * tanh(x / cap)``: the identity for small ``x``, bounded by ``±cap``."""
    return cap * torch.tanh(x / cap)


def causal_interest_aggregation(x: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor,
                                return_weights: bool = False
                                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prefix aggregation of items into ``k`` interests.

    Args:
        x: ``(B, L, d)`` item states (keys or values).
        logits: ``(B, L, k)`` item-to-interest relevance ``a_{jκ}`` (already soft-capped).
        valid: ``(B, L)`` bool, real items.
        return_weights: also return the ``(B, L, L, k)`` aggregation weights ``D_{t j κ}`` (for plots).
    Returns:
        ``(B, L, k, d)`` interests seen from each position ``t`` (aggregated over ``j <= t``;
        all-zero before the first real item), and optionally the weights.
    """
    e = torch.exp(logits - LOGIT_CAP) * valid[..., None].to(logits.dtype)  # (B, L, k); a constant shift: causal
    numerator = torch.cumsum(e[..., None] * x[:, :, None, :], dim=1)                          # (B, L, k, d)
    denominator = torch.cumsum(e, dim=1)                                                      # (B, L, k)
    interests = numerator / denominator.clamp_min(1e-30)[..., None]
    weights = None
    if return_weights:
        L = x.shape[1]
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        weights = e[:, None, :, :] * causal[None, :, :, None] / denominator.clamp_min(1e-30)[:, :, None, :]
    return interests, weights


def exclusive_cumsum(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Sums of the blocks *before* each block along ``dim`` (zero for the first). Not ``cumsum(x) - x``: when a
    block's own sum dwarfs the earlier ones (interest weights span up to e^60), that subtraction cancels them
    in float32, and the block's later positions would move its earlier ones' outputs."""
    shifted = torch.cumsum(x, dim).narrow(dim, 0, x.shape[dim] - 1)
    return torch.cat([torch.zeros_like(x.narrow(dim, 0, 1)), shifted], dim)


def chunked_low_rank_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logits_k: torch.Tensor,
                               logits_v: torch.Tensor, valid: torch.Tensor, n_heads: int, chunk: int,
                               dropout: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal item-to-interest attention (Eq. 3 with prefix aggregation), computed in chunks.

    Equal to aggregating with :func:`causal_interest_aggregation` and attending over the ``k`` interests,
    but without the ``(B, L, k, d)`` prefix tensor. The sequence is cut into blocks of ``chunk``
    positions; sums over *earlier blocks* are carried as block states ``(B, L/c, k, d)``, and the
    items of a position's *own block* are added through a ``c x c`` causal matrix (as chunked linear
    attention does). Time ``O(L (c + k) d)``, memory ``O(L c H + L k H + L k d / c)``: linear in ``L``.

    Args:
        q, k, v: ``(B, L, d)`` projections. logits_k, logits_v: ``(B, L, k)`` interest logits (soft-capped).
        valid: ``(B, L)`` real items. n_heads: heads ``H``. chunk: block length ``c``.
        dropout: applied to the attention weights over the interests.
    Returns:
        ``(B, H, L, d/H)`` outputs and ``(B, H, L, k)`` attention weights over the interests.
    """
    B, L, d = q.shape
    H, dh, kk = n_heads, d // n_heads, logits_k.shape[-1]
    c = min(chunk, L)
    n_chunks = -(-L // c)
    pad = n_chunks * c - L                                     # left padding up to whole blocks

    def blocks(t: torch.Tensor) -> torch.Tensor:               # (B, L, ...) -> (B, C, c, ...)
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (pad, 0)) if pad else t
        return t.reshape(B, n_chunks, c, *t.shape[2:])

    real = valid[..., None].to(q.dtype)
    weights_k = torch.exp(logits_k - LOGIT_CAP) * real    # shifted by the constant cap, not a window maximum:
    weights_v = torch.exp(logits_v - LOGIT_CAP) * real    # no later item can move an earlier output
    qb, kb, vb = blocks(q).view(B, n_chunks, c, H, dh), blocks(k), blocks(v)
    ek, ev = blocks(weights_k), blocks(weights_v)                                          # (B, C, c, k)
    tri = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()                      # j <= t in a block

    def prefix(e: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """States of the earlier blocks: Σ e x ``(B, C, k, H, dh)`` and Σ e ``(B, C, 1, k)`` up to each block."""
        state = exclusive_cumsum(torch.einsum("bCjk,bCjd->bCkd", e, x)).view(B, n_chunks, kk, H, dh)
        norm = exclusive_cumsum(e.sum(2))
        return state, (norm[:, :, None] + torch.cumsum(e, 2))                              # Z at every position

    state_k, z_k = prefix(ek, kb)
    state_v, z_v = prefix(ev, vb)
    kh, vh = kb.view(B, n_chunks, c, H, dh), vb.view(B, n_chunks, c, H, dh)
    scores = torch.einsum("bCthd,bCjhd->bhCtj", qb, kh).masked_fill(~tri, 0.0)             # q_t . k_j in the block
    numer = torch.einsum("bCthd,bCkhd->bhCtk", qb, state_k) + torch.einsum("bhCtj,bCjk->bhCtk", scores, ek)
    z_k = z_k[:, None]                                                                     # (B, 1, C, c, k)
    logits = torch.where(z_k > 0, numer / z_k.clamp_min(1e-30), torch.zeros((), device=q.device)) / math.sqrt(dh)
    attn = torch.softmax(logits, dim=-1)                                                   # over the interests
    dropped = dropout(attn) if dropout is not None else attn
    z_v = z_v[:, None]
    scaled = torch.where(z_v > 0, dropped / z_v.clamp_min(1e-30), torch.zeros((), device=q.device))
    mix = torch.einsum("bhCtk,bCjk->bhCtj", scaled, ev).masked_fill(~tri, 0.0)
    out = torch.einsum("bhCtk,bCkhd->bhCtd", scaled, state_v) + torch.einsum("bhCtj,bCjhd->bhCtd", mix, vh)
    out = out.reshape(B, H, n_chunks * c, dh)[:, :, pad:]
    return out, attn.reshape(B, H, n_chunks * c, kk)[:, :, pad:]


def full_interest_aggregation(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The released code's aggregation: softmax over the *whole* window (pads included), no mask.
    ``(B, L, d), (B, L, k) -> (B, k, d)``."""
    return torch.softmax(logits, dim=1).transpose(1, 2) @ x


class DecoupledPositionAttention(nn.Module):
    """Position-to-position attention of Eq. 4, shared by every sequence of the batch.

    ``A_pos = softmax(LN(P) U_Q (LN(P) U_K)^T / sqrt(d_h))`` over the positions of the batch, causal
    and restricted to each row's real items (left padding: the keys of row ``b`` are ``start_b..t``).
    The ``(H, L, L)`` logits are computed once; only the normalisation depends on the row.

    Args:
        position_table: the model's ``nn.Embedding(max_len, d)`` (shared by all layers).
        d_model, n_heads: width and heads.
        compat: released-code scale ``1/(sqrt(2) d_h)`` and normalisation over dim -2, no mask.
    """

    def __init__(self, position_table: nn.Embedding, d_model: int, n_heads: int, compat: bool = False):
        super().__init__()
        self.position_table = position_table
        self.n_heads, self.compat = n_heads, compat
        self.norm = nn.LayerNorm(d_model)
        self.u_q = nn.Linear(d_model, d_model)
        self.u_k = nn.Linear(d_model, d_model)

    def logits(self, ctx: SequenceContext) -> torch.Tensor:
        """``(H, L, L)`` position logits for the columns of this batch (soft-capped)."""
        p = self.norm(self.position_table(ctx.positions))              # (L, d)
        dh = p.shape[-1] // self.n_heads
        q = self.u_q(p).view(-1, self.n_heads, dh).transpose(0, 1)      # (H, L, dh)
        k = self.u_k(p).view(-1, self.n_heads, dh).transpose(0, 1)
        scale = 1.0 / (math.sqrt(2.0) * dh) if self.compat else 1.0 / math.sqrt(dh)
        return soft_cap(q @ k.transpose(-2, -1) * scale)

    def weights(self, ctx: SequenceContext) -> torch.Tensor:
        """``(B, H, L, L)`` attention weights (materialised: for plots and the reference tests)."""
        s = self.logits(ctx)
        if self.compat:
            return torch.softmax(s, dim=-2).expand(ctx.item_ids.shape[0], -1, -1, -1)
        allowed = ctx.allowed()                                          # (B, 1, L, L)
        return torch.softmax(s[None].masked_fill(~allowed, float("-inf")), dim=-1)

    def forward(self, v: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        """``v`` ``(B, H, L, dh)`` per-position values -> ``(B, H, L, dh)``."""
        s = self.logits(ctx)
        if self.compat:
            return torch.softmax(s, dim=-2) @ v
        return apply_shared_pattern(s, v, ctx.valid_mask, causal=ctx.causal)


class LowRankAttention(Attention):
    """LightSANs' low-rank decomposed self-attention.

    Args:
        d_model: width ``d`` (divisible by ``n_heads``).
        n_heads: heads ``h``; the interests are shared by the heads (aggregation on the full ``d``).
        k_interests: number of latent interests ``k``.
        attn_dropout: dropout on the item-to-interest attention weights.
        position_table: the shared position embedding for decoupled position encoding (LightSANs);
            ``None`` for LightSANs-ape (positions are then added to the input by the backbone).
        compat: the released code's behaviour (see the module docstring); non-causal.
        chunk: block length of the chunked prefix computation (:func:`chunked_low_rank_attention`).
    """

    def __init__(self, d_model: int, n_heads: int, k_interests: int, attn_dropout: float = 0.0,
                 position_table: nn.Embedding | None = None, compat: bool = False, chunk: int = 32):
        super().__init__()
        check_heads(d_model, n_heads)
        if k_interests < 1:
            raise ConfigError(f"k_interests must be >= 1, got {k_interests}")
        if chunk < 1:
            raise ConfigError(f"chunk must be >= 1, got {chunk}")
        self.d_model, self.n_heads, self.k, self.compat, self.chunk = d_model, n_heads, k_interests, compat, chunk
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.theta_k = nn.Parameter(torch.empty(k_interests, d_model))
        self.theta_v = nn.Parameter(torch.empty(k_interests, d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(attn_dropout)
        self.position = (DecoupledPositionAttention(position_table, d_model, n_heads, compat)
                         if position_table is not None else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Θ ~ Glorot-uniform (interest logits of order 1), or N(0, 1) as the released code."""
        for theta in (self.theta_k, self.theta_v):
            nn.init.normal_(theta) if self.compat else nn.init.xavier_uniform_(theta)

    def forward(self, x: torch.Tensor, ctx: SequenceContext, memory: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` -> ``(B, L, d)`` and, with ``ctx.need_weights`` (not ``compat``), the ``(B, H, L, L)``
        effective item-to-item weights (else ``None``)."""
        if memory is not None:
            raise ConfigError("low-rank attention supports the 'paper' layout only")
        if ctx.causal != (not self.compat):
            raise ConfigError("LightSANs' causal aggregation needs a causal backbone; compat=True (the released "
                              "code) is non-causal and needs objective='last' (prefix samples)")
        B, L, _ = x.shape
        H, dh = self.n_heads, self.d_model // self.n_heads
        q, k, v = self.in_proj(x).chunk(3, dim=-1)
        if self.compat:
            k_t = full_interest_aggregation(k, k @ self.theta_k.t())              # (B, k, d)
            v_t = full_interest_aggregation(v, v @ self.theta_v.t())
            qh = split_heads(q, H)                                                 # (B, H, L, dh)
            kh, vh = split_heads(k_t, H), split_heads(v_t, H)                      # (B, H, k, dh)
            item_weights = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(dh), dim=-2)
            item = self.dropout(item_weights) @ vh                                 # (B, H, L, dh)
            agg_v = None
        else:
            valid = ctx.valid_mask
            with float32_region(x):   # shifted exponentials and prefix normalisers: fp16 overflows them
                q, k, v = q.float(), k.float(), v.float()
                item, item_weights = chunked_low_rank_attention(
                    q, k, v, soft_cap(k @ self.theta_k.t()), soft_cap(v @ self.theta_v.t()), valid, H, self.chunk,
                    self.dropout)
                agg_v = None
                if ctx.need_weights:  # the (B, L, L, k) aggregation weights, for the effective item-to-item map
                    _, agg_v = causal_interest_aggregation(v, soft_cap(v @ self.theta_v.t()), valid, True)
        self.last_interest_weights = item_weights.detach() if ctx.need_weights else None
        out = item
        if self.position is not None:
            out = out + self.position(split_heads(v, H), ctx)
        weights = self._effective_weights(item_weights, agg_v, ctx) if ctx.need_weights and agg_v is not None else None
        return self.out_proj(merge_heads(out)), weights

    def _effective_weights(self, item_weights: torch.Tensor, agg_v: torch.Tensor, ctx: SequenceContext
                           ) -> torch.Tensor:
        """``(B, H, L, L)`` item-to-item map equivalent to the layer (before ``W_O``): ``y_t = Σ_j W[t, j] V_j``.

        ``W = Σ_κ A_item[t, κ] D_V[t, j, κ]`` plus the position attention: each part's rows sum to 1,
        so rows of the decoupled version sum to 2.
        """
        w = torch.einsum("bhtk,btjk->bhtj", item_weights, agg_v)
        if self.position is not None:
            w = w + self.position.weights(ctx)
        return w
