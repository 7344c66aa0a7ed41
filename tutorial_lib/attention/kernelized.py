"""Relation-aware kernelized stochastic self-attention (RKSA, Ji et al., AAAI 2020).

The attention logits are not ``QK^T/sqrt(d)`` but a *sample* ``z`` of a multivariate skew-normal whose
correlation comes from kernels over the items, the user and their co-occurrence (paper Eq. 5-13). No
public code exists; this follows the concrete design of docs/methods.md §6.2, and every ambiguity it lists
(A1-A16) is resolved as proposed there. Per layer and head, for query row ``t`` and key ``j``:

* location (Eq. 7, A2): ``Ξ_tj = (x_t W_Q)(x_j W_K)^T / sqrt(d_h)`` (``f`` = identity, so the layer is
  dot-product attention plus structured noise);
* scale (Eq. 8, A1 row-wise): ``Ω_tj = softplus((x_t W_Qω)(x_j W_Kω)^T / sqrt(d_h)) + 1e-4``;
* correlation (Eq. 9, A3, A5), shared by the rows of a sequence: ``ψ = Σ_κ r_κ K_κ`` over the chosen
  kernels, ``r = softmax(u W_u + b_u)`` renormalised over them, with
  counting ``K_c[j,l] = P_jl^2 / (P_j P_l)`` (1 on the diagonal), item ``K_i = x̂_j · x̂_l`` (linear) or
  ``exp(-|x̂_j - x̂_l|^2)`` (RBF), user ``K_u = cos(g ⊙ x̂_j, g ⊙ x̂_l)`` with ``g = W_s u``, where
  ``x̂`` is the L2-normalised layer input. Padding rows/columns are the identity; then
  ``ψ <- (ψ + εI)/(1 + ε)``, ``ε = 1e-3``. Every kernel is a unit-diagonal PSD matrix, so ``ψ`` is a
  valid correlation matrix and has a Cholesky factor ``L`` (batched);
* shape (Eq. 10-11, A1, A9), causal: with ``C`` the co-occurrence counts of the sequence and its
  diagonal replaced by the mean of the off-diagonal real entries of its row *among the items <= t*,
  ``α̂_tj = Σ_{k<=t} C̄[j,k] C̄[k,t]``, ``ᾱ_tj = α̂_tj / max_{j'<=t} α̂_tj'`` and
  ``α_tj = softplus((x_t W_Qs)(x_j W_Ks)^T / sqrt(d_h)) ᾱ_tj``; ``δ = α / sqrt(1 + α^2)``;
* sample (Eq. 13, A6, A7), training: ``y_0 ~ N(0, 1)`` per row, ``Y = ε L^T`` (each row ``~ N(0, ψ)``),
  ``ẑ = δ |y_0| + sqrt(1 - δ^2) Y``, ``Z = Ξ + Ω ⊙ ẑ``; evaluation uses the mean
  ``E[Z] = Ξ + Ω ⊙ δ sqrt(2/π)`` (deterministic);
* causal and padding masks, softmax over keys, dropout, ``@ V``, output projection.

A1 offers two readings, because the paper writes ``ω, s, α`` for the last item only while SASRec trains
every position: every query row gets them (the default, above), or only the last row does
(``stochastic_rows="last"``) and the other rows keep the location ``Ξ`` alone.

Causality: ``Ξ, Ω, α`` of row ``t`` use keys ``<= t``; the Cholesky factor's row ``j`` depends on
``ψ[:j+1, :j+1]`` only, so the noise of keys ``<= t`` depends on items ``<= t`` only.

**Listwise co-occurrence loss** (A8): for every real row ``t`` with at least two earlier real keys, at least
one of which co-occurs with it (``Σ_j C[t, j] > 0``), ListNet top-1 between ``q_t = softmax_j(log(1 + C[t, j]))`` and
``p_t = softmax_j(ψ[t, j] / τ)`` over the earlier keys ``j < t``, ``τ = 0.1``; averaged over rows,
multiplied by ``λ_r`` and exposed as ``aux_loss`` (the backbone sums it over layers).

**Leaving the user's own history out** (``leave_user_out=True``, our variant, off by default): the counts
``P`` come from the training split, which contains the user's own history, so in training (and on the
validation input) every pair of the window co-occurs at least once, by the user alone, while at test time
the newest input item (the validation item) was never counted with the user's history. With the option
every count is taken over the *other* users: ``P_jl - 1`` where both items are in the user's training
history, ``P_j - 1`` for such an item; training, validation and test then see the same kind of statistic.

Eq. 13 is Azzalini & Dalla Valle's per-coordinate construction: its covariance is
``ω_j ω_k [δ_j δ_k (1 - 2/π) + sqrt((1 - δ_j^2)(1 - δ_k^2)) ψ_jk]``, not ``ω ψ ω`` (A6).
``construction="exact"`` (our variant, off by default) draws from ``SN(ξ, ωψω, α)`` as Eq. 4 writes it instead:
``δ = ψα / sqrt(1 + αᵀψα)`` per row, so the skew of one key is shared with the keys correlated with it and the
whole row's ``α`` sets how far the row is skewed (:func:`exact_skew_normal_sample`).

``shape_counts="normalized"`` (A9's ablation, off by default) builds the shape ratio of Eq. 10 from the
counting kernel ``P_jl^2 / (P_j P_l)`` instead of the raw counts, which popular items dominate.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .base import Attention, SequenceContext, check_heads, float32_region, merge_heads, split_heads

KERNELS = "ciu"
JITTER = 1e-3
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

if TYPE_CHECKING:
    from ..data.split import LeaveOneOutSplit


# ----------------------------------------------------------------------------- pieces, testable alone
def skew_normal_sample(xi: torch.Tensor, omega: torch.Tensor, delta: torch.Tensor, chol: torch.Tensor,
                       generator: torch.Generator | None = None, spread: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 13: ``z = ξ + ω ⊙ (δ |y_0| + sqrt(1 - δ^2) y)`` with ``y_0 ~ N(0, 1)`` per row and ``y ~ N(0, ψ)``.

    Args:
        xi, omega, delta: ``(..., R, N)`` location, scale and ``δ in [0, 1)`` (``R`` rows of ``N`` keys).
        chol: ``(..., N, N)`` lower Cholesky factor of ``ψ`` (broadcast over the heads and rows).
        spread: ``sqrt(1 - δ^2)`` if the caller has it in a stable form (``1 / sqrt(1 + α^2)``: with ``δ``
            rounded to 1, as bf16 does from ``α ≈ 16``, ``sqrt(1 - δ^2)`` is 0 and its gradient is not finite).
    Returns:
        ``(..., R, N)`` samples, differentiable in ``xi, omega, delta, chol``.
    """
    shape = xi.shape
    y0 = torch.randn((*shape[:-1], 1), generator=generator, dtype=xi.dtype, device=xi.device).abs()
    eps = torch.randn(shape, generator=generator, dtype=xi.dtype, device=xi.device)
    y = eps @ chol.transpose(-2, -1)                                  # rows ~ N(0, L L^T = ψ)
    if spread is None:
        spread = torch.sqrt(1.0 - delta ** 2)
    return xi + omega * (delta * y0 + spread * y)


def skew_normal_mean(xi: torch.Tensor, omega: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``E[z] = ξ + ω δ sqrt(2/π)`` (``E|y_0| = sqrt(2/π)``)."""
    return xi + omega * delta * SQRT_2_OVER_PI


def skew_normal_covariance(omega: torch.Tensor, delta: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Covariance of one row of Eq. 13: ``ω_j ω_k [δ_j δ_k (1 - 2/π) + sqrt((1-δ_j^2)(1-δ_k^2)) ψ_jk]``.

    ``omega, delta``: ``(N,)``; ``psi``: ``(N, N)``.
    """
    s = torch.sqrt(1.0 - delta ** 2)
    inner = torch.outer(delta, delta) * (1.0 - 2.0 / math.pi) + torch.outer(s, s) * psi
    return torch.outer(omega, omega) * inner


def exact_skew_normal_delta(alpha: torch.Tensor, psi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A6, the exact Azzalini-Capitanio parameter: ``δ = ψ α / sqrt(1 + αᵀ ψ α)`` for each row of ``α``.

    Args:
        alpha: ``(..., R, N)`` shape parameters, one row of ``N`` keys per query row.
        psi: ``(..., N, N)`` correlation matrix (symmetric), broadcast over the rows.
    Returns:
        ``δ`` ``(..., R, N)`` and the quadratic form ``αᵀ ψ α`` ``(..., R, 1)``.
    """
    psi_alpha = alpha @ psi                                                           # ψ symmetric: (ψα)ᵀ per row
    quad = (alpha * psi_alpha).sum(-1, keepdim=True).clamp_min(0.0)
    return psi_alpha * torch.rsqrt(1.0 + quad), quad


def exact_skew_normal_sample(xi: torch.Tensor, omega: torch.Tensor, alpha: torch.Tensor, psi: torch.Tensor,
                             chol: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A draw of ``SN_N(ξ, ω ψ ω, α)``, Eq. 4 exactly (A6's alternative to Eq. 13), reparameterised.

    ``z = ξ + ω ⊙ (δ |y_0| + w)`` with ``δ`` of :func:`exact_skew_normal_delta`, ``y_0 ~ N(0, 1)`` per row and
    ``w ~ N(0, ψ - δ δᵀ)``, independent (Azzalini & Capitanio's additive representation). ``w`` comes from
    ``y ~ N(0, ψ)`` (the shared Cholesky factor) without a factor per row: ``w = y - k δ (αᵀ y) / sqrt(1 + q)``
    with ``q = αᵀ ψ α`` and ``k = sqrt(1 + q) / (1 + sqrt(1 + q))``, the root of ``k² δᵀψ⁻¹δ - 2k + 1 = 0``
    (``ψ⁻¹ δ = α / sqrt(1 + q)``), which makes ``Cov(w) = ψ - δ δᵀ``.

    Args:
        xi, omega, alpha: ``(..., R, N)`` location, scale and shape (``α = 0`` on masked keys).
        psi, chol: ``(..., N, N)`` correlation matrix and its lower Cholesky factor (broadcast over the rows).
    Returns:
        ``(..., R, N)`` samples, differentiable in ``xi, omega, alpha, psi, chol``.
    """
    delta, quad = exact_skew_normal_delta(alpha, psi)
    y0 = torch.randn((*xi.shape[:-1], 1), generator=generator, dtype=xi.dtype, device=xi.device).abs()
    eps = torch.randn(xi.shape, generator=generator, dtype=xi.dtype, device=xi.device)
    y = eps @ chol.transpose(-2, -1)                                                  # rows ~ N(0, ψ)
    root = torch.sqrt(1.0 + quad)
    w = y - delta * (alpha * y).sum(-1, keepdim=True) / (1.0 + root)                  # k / sqrt(1 + q) = 1 / (1 + root)
    return xi + omega * (delta * y0 + w)


def exact_skew_normal_covariance(omega: torch.Tensor, delta: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Covariance of one row of the exact construction: ``ω_j ω_k (ψ_jk - (2/π) δ_j δ_k)``.

    ``omega, delta``: ``(N,)`` (``δ`` from :func:`exact_skew_normal_delta`); ``psi``: ``(N, N)``.
    """
    return torch.outer(omega, omega) * (psi - torch.outer(delta, delta) * (2.0 / math.pi))


def counting_kernel(cooc: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``K_c[j, l] = P_jl^2 / (P_j P_l)``, 1 on the diagonal. ``cooc`` ``(B, L, L)``, ``counts`` ``(B, L)``."""
    denom = counts[:, :, None] * counts[:, None, :]
    k = torch.where(denom > 0, cooc ** 2 / denom.clamp_min(1.0), torch.zeros((), device=cooc.device))
    eye = torch.eye(cooc.shape[-1], dtype=torch.bool, device=cooc.device)
    return k.masked_fill(eye, 1.0)


def valid_correlation(psi: torch.Tensor, valid: torch.Tensor, jitter: float = JITTER) -> torch.Tensor:
    """Make a unit-diagonal PSD ``(B, L, L)`` a positive-definite correlation matrix: padding rows and
    columns become the identity, then ``(ψ + εI) / (1 + ε)``."""
    L = psi.shape[-1]
    eye = torch.eye(L, dtype=psi.dtype, device=psi.device)
    pair = valid[:, :, None] & valid[:, None, :]
    psi = torch.where(pair, psi, eye.expand_as(psi))
    return (psi + jitter * eye) / (1.0 + jitter)


def causal_shape_ratio(cooc: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``ᾱ`` of Eq. 10, row-wise and causal: ``(B, L, L)`` with entry ``[t, j]`` for keys ``j <= t``.

    ``α̂_tj = Σ_{k<=t} C̄[j,k] C̄[k,t]`` where ``C̄`` is ``C`` with its diagonal replaced by the mean of
    the off-diagonal real entries of the row among the items ``<= t``; then each row is divided by its
    maximum over ``j <= t`` (0 where that maximum is 0). Entries ``j > t`` are 0.

    Only the diagonal (the same *position*) is replaced: two positions that hold the same item keep
    ``C = P_i``, the item's count, as their co-occurrence (and so does the listwise target). The datasets RKSA
    is run on here (Video Games, ML-1M) have no repeated items; on data with repeats this favours them.
    """
    B, L, _ = cooc.shape
    v = valid.to(cooc.dtype)
    eye = torch.eye(L, dtype=torch.bool, device=cooc.device)
    c0 = cooc.masked_fill(eye, 0.0) * v[:, :, None] * v[:, None, :]                 # zero diagonal, real pairs
    tri = torch.ones(L, L, dtype=torch.bool, device=cooc.device).triu()              # [k, t]: k <= t
    # D[j, t] = mean of C0[j, l] over real l <= t, l != j  (the replaced diagonal, as seen from row t)
    row_sums = torch.cumsum(c0, dim=2)                                                # [j, t] = Σ_{l<=t} C0[j, l]
    others = (torch.cumsum(v, dim=1) - 1.0).clamp_min(1.0)                           # real items <= t, minus one
    diag = row_sums / others[:, None, :]                                              # (B, j, t)
    # α̂[t, j] = Σ_{k<=t} C0[j,k] C0[k,t] + D[t,t] C0[j,t] + D[j,t] C0[j,t] + [j == t] D[t,t]^2
    two_hop = c0 @ (c0 * tri)                                                         # [j, t]
    d_tt = torch.diagonal(diag, dim1=1, dim2=2)                                       # (B, t)
    alpha = two_hop + d_tt[:, None, :] * c0 + diag * c0
    alpha = alpha + torch.diag_embed(d_tt ** 2)
    alpha = alpha.transpose(1, 2) * tri.t()[None] * v[:, None, :]                     # -> [t, j], keys j <= t real
    top = alpha.amax(dim=-1, keepdim=True)
    return torch.where(top > 0, alpha / top.clamp_min(1e-30), torch.zeros((), device=alpha.device))


def listwise_cooccurrence_loss(psi: torch.Tensor, cooc: torch.Tensor, valid: torch.Tensor, tau: float = 0.1
                               ) -> torch.Tensor:
    """ListNet top-1 between ``softmax(log(1 + C[t, j]))`` and ``softmax(ψ[t, j] / τ)`` over earlier real keys
    ``j < t``, averaged over the rows that have at least two such keys with some co-occurrence."""
    L = psi.shape[-1]
    earlier = torch.ones(L, L, dtype=torch.bool, device=psi.device).tril(-1)
    keys = earlier[None] & valid[:, None, :] & valid[:, :, None]
    rows = (keys.sum(-1) >= 2) & ((cooc * keys).sum(-1) > 0)
    if not rows.any():
        return psi.new_zeros(())
    neg = torch.finfo(psi.dtype).min
    target = torch.softmax(torch.log1p(cooc).masked_fill(~keys, neg), dim=-1)
    log_p = torch.log_softmax((psi / tau).masked_fill(~keys, neg), dim=-1)
    per_row = -(target * log_p).masked_fill(~keys, 0.0).sum(-1)
    return per_row[rows].mean()


class CooccurrenceProvider(nn.Module):
    """Holds the training split's co-occurrence table (shared by the layers of a model) and the
    per-batch lookups, computed once per batch and cached in ``ctx.extras``.

    Args:
        leave_user_out: count over the other users only (see the module docstring).
        shape_counts: what the two-hop shape ratio of Eq. 10 sums: ``"raw"`` counts ``C`` (default, the
            paper's "co-occurrence matrix"; popular items dominate them) or ``"normalized"``, the counting
            kernel ``P_jl^2 / (P_j P_l)`` (A9's ablation).
    """

    def __init__(self, leave_user_out: bool = False, shape_counts: str = "raw"):
        super().__init__()
        if shape_counts not in ("raw", "normalized"):
            raise ConfigError(f"shape_counts must be 'raw' (the co-occurrence counts C, the paper's Eq. 10) or "
                              f"'normalized' (the counting kernel P_jl^2 / (P_j P_l), docs/methods.md A9), "
                              f"got {shape_counts!r}")
        self.table = None
        self.leave_user_out = leave_user_out
        self.shape_counts = shape_counts

    def prepare(self, split: LeaveOneOutSplit) -> None:
        """Count co-occurrences in ``split.train`` (training items only)."""
        from ..data.cooccurrence import CooccurrenceTable  # data knows nothing of attention; the reverse is fine

        if self.table is None or getattr(self, "_split", None) is not split:
            self.table = CooccurrenceTable(split.train, split.n_items)
            self._split = split  # a reference, not an id: ids of collected objects are reused

    def batch(self, ctx: SequenceContext) -> dict[str, torch.Tensor]:
        """``cooc`` ``(B, L, L)``, item ``counts`` ``(B, L)`` and causal ``shape`` ratio ``(B, L, L)`` for this batch
        (the counting kernel is :meth:`counting`'s, built only when something reads it)."""
        cached = ctx.extras.get("rksa")
        if cached is not None:
            return cached
        if self.table is None:
            raise ConfigError("RKSA needs the co-occurrence counts of the training split: call "
                              "model.prepare(split) first (the Trainer does it)")
        ids = ctx.item_ids
        cooc, counts = self.table.block(ids), self.table.item_counts(ids)
        if self.leave_user_out:
            if ctx.users is None:
                raise ConfigError("RKSA with leave_user_out=True needs the user of every sequence: call the model "
                                  "with users=<(B,) user indices> (user_inputs(model, users) does it)")
            own = self.table.owned(ctx.users, ids).to(cooc.dtype)                   # (B, L)
            cooc = cooc - own[:, :, None] * own[:, None, :]                          # other users' counts only
            counts = counts - own
        out = {"cooc": cooc, "counts": counts}
        out["shape"] = causal_shape_ratio(cooc if self.shape_counts == "raw" else self.counting(out), ctx.valid_mask)
        ctx.extras["rksa"] = out
        return out

    @staticmethod
    def counting(stats: dict[str, torch.Tensor]) -> torch.Tensor:
        """The ``(B, L, L)`` counting kernel ``P_jl^2 / (P_j P_l)`` of a :meth:`batch` result, cached in it.
        Built on demand: with Eq. 13 and raw shape counts, evaluation never reads it (it costs ~0.14 s per
        256 x 200 batch on one CPU thread)."""
        if "counting" not in stats:
            stats["counting"] = counting_kernel(stats["cooc"], stats["counts"])
        return stats["counting"]


class KernelizedAttention(Attention):
    """RKSA attention (see the module docstring).

    Args:
        d_model, n_heads: width and heads (the paper uses one head; with more, ``Ξ, Ω, α`` are per head
            and ``ψ`` is shared, A10).
        cooccurrence: the model's shared :class:`CooccurrenceProvider`.
        kernels: subset of ``"ciu"`` (counting, item, user), e.g. ``"ci"``.
        item_kernel: ``"linear"`` or ``"rbf"``.
        attn_dropout: dropout on the attention weights.
        rank_weight: ``λ_r`` of the listwise co-occurrence loss (0 turns it off).
        tau: temperature of that loss.
        stochastic: sample ``z`` in training (``False``: always use the mean, an ablation).
        stochastic_rows: ``"all"`` (default, A1 option b: every query row is RKSA's, row-wise) or ``"last"``
            (A1 option a, closer to the paper, which defines ``ω, s, α`` for the last item only: only the
            last query row, the most recent item, gets the skew-normal logits; every other row uses the
            location ``Ξ`` alone, i.e. dot-product attention, in training and evaluation).
        construction: ``"eq13"`` (default, the paper's Eq. 13: ``δ_j = α_j / sqrt(1 + α_j^2)`` per key) or
            ``"exact"`` (A6: a draw of ``SN(ξ, ωψω, α)`` as Eq. 4 writes it, ``δ = ψα / sqrt(1 + αᵀψα)`` per
            row, :func:`exact_skew_normal_sample`; its mean at evaluation reads ``ψ``, so ``ψ`` is built there).
    """

    def __init__(self, d_model: int, n_heads: int, cooccurrence: CooccurrenceProvider, kernels: str = "ciu",
                 item_kernel: str = "linear", attn_dropout: float = 0.0, rank_weight: float = 1e-3,
                 tau: float = 0.1, stochastic: bool = True, stochastic_rows: str = "all",
                 construction: str = "eq13"):
        super().__init__()
        if construction not in ("eq13", "exact"):
            raise ConfigError(f"construction must be 'eq13' (the paper's per-coordinate sample, Eq. 13) or 'exact' "
                              f"(Azzalini-Capitanio's SN(ξ, ωψω, α) of Eq. 4, docs/methods.md A6), "
                              f"got {construction!r}")
        if stochastic_rows not in ("all", "last"):
            raise ConfigError(f"stochastic_rows must be 'all' (every query row) or 'last' (only the most recent "
                              f"item's row, docs/methods.md A1), got {stochastic_rows!r}")
        check_heads(d_model, n_heads)
        kernels = "".join(sorted(set(kernels.lower()), key=KERNELS.index)) if set(kernels.lower()) <= set(KERNELS) \
            else None
        if not kernels:
            raise ConfigError("kernels must be a non-empty combination of 'c' (counting), 'i' (item) and 'u' (user), "
                              "e.g. 'ciu' or 'ci'")
        if item_kernel not in ("linear", "rbf"):
            raise ConfigError(f"item_kernel must be 'linear' or 'rbf', got {item_kernel!r}")
        self.d_model, self.n_heads, self.dh = d_model, n_heads, d_model // n_heads
        self.kernels, self.item_kernel, self.rank_weight, self.tau = kernels, item_kernel, rank_weight, tau
        self.attn_dropout, self.stochastic, self.stochastic_rows = attn_dropout, stochastic, stochastic_rows
        self.construction = construction
        self.cooccurrence = cooccurrence
        self.qkv = nn.Linear(d_model, 3 * d_model)        # location Q, K and the values
        self.scale_qk = nn.Linear(d_model, 2 * d_model)   # Ω
        self.shape_qk = nn.Linear(d_model, 2 * d_model)   # s
        # W_s of the user kernel, and r = softmax(u W_u + b_u) over the chosen kernels (constant 1 for one kernel)
        self.user_gate = nn.Linear(d_model, d_model, bias=False) if "u" in kernels else None
        self.kernel_mix = nn.Linear(d_model, len(kernels)) if len(kernels) > 1 else None
        self.out_proj = nn.Linear(d_model, d_model)
        self.aux_loss: torch.Tensor | None = None
        self.last_psi: torch.Tensor | None = None

    def _bilinear(self, proj: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        a, b = (split_heads(t, self.n_heads) for t in proj(x).chunk(2, dim=-1))
        return a @ b.transpose(-2, -1) / math.sqrt(self.dh)                          # (B, H, L, L)

    def _row_logits(self, proj: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """The bilinear logits of the RKSA rows: ``(B, H, L, L)``, or ``(B, H, 1, L)`` for the last row only."""
        if self.stochastic_rows == "all":
            return self._bilinear(proj, x)
        w_q, w_k = proj.weight.chunk(2, dim=0)
        b_q, b_k = proj.bias.chunk(2, dim=0)
        a = split_heads(F.linear(x[:, -1:], w_q, b_q), self.n_heads)
        b = split_heads(F.linear(x, w_k, b_k), self.n_heads)
        return a @ b.transpose(-2, -1) / math.sqrt(self.dh)

    def correlation(self, x: torch.Tensor, ctx: SequenceContext, stats: dict[str, torch.Tensor]
                    ) -> torch.Tensor:
        """``(B, L, L)`` float32 correlation ``ψ`` (valid, positive definite).

        Built in float32 under any autocast precision (:func:`~tutorial_lib.attention.base.float32_region`):
        the item and user Gram matrices have rank at most ``d`` < ``L``, and bf16's rounding (~4e-3) is
        larger than the jitter that keeps ψ positive definite, so its Cholesky factorisation would fail.
        """
        user = ctx.user                                                               # (B, d) or None
        if self.uses_user and user is None:
            raise ConfigError("this RKSA variant needs the user embedding u: build the model with n_users and "
                              "call it with users=<(B,) user indices>")
        with float32_region(x):
            xn = F.normalize(x.float(), dim=-1)
            user = user.float() if user is not None else None
            parts = []
            if "c" in self.kernels:
                parts.append(("c", self.cooccurrence.counting(stats).float()))
            if "i" in self.kernels:
                gram = xn @ xn.transpose(1, 2)
                parts.append(("i", gram if self.item_kernel == "linear" else torch.exp(-(2.0 - 2.0 * gram).clamp_min(0))))
            if "u" in self.kernels:
                g = F.normalize(self.user_gate(user)[:, None, :] * xn, dim=-1)
                parts.append(("u", g @ g.transpose(1, 2)))
            if self.kernel_mix is None:
                psi = parts[0][1]
            else:
                r = torch.softmax(self.kernel_mix(user), dim=-1)                         # (B, n_kernels)
                psi = sum(r[:, i, None, None] * k for i, (_, k) in enumerate(parts))
            return valid_correlation(psi, ctx.valid_mask)

    @property
    def uses_user(self) -> bool:
        """Whether the layer reads the user embedding (user kernel, or a mixture of several kernels)."""
        return "u" in self.kernels or len(self.kernels) > 1

    def forward(self, x: torch.Tensor, ctx: SequenceContext, memory: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` -> ``(B, L, d)`` and, with ``ctx.need_weights``, the ``(B, H, L, L)`` weights (else
        ``None``). Sets :attr:`aux_loss` to ``rank_weight`` x the listwise loss in training when ``rank_weight > 0``
        (``None`` otherwise)."""
        if memory is not None:
            raise ConfigError("kernelized attention supports the 'paper' layout only")
        stats = self.cooccurrence.batch(ctx)
        q, k, v = (split_heads(t, self.n_heads) for t in self.qkv(x).chunk(3, dim=-1))
        xi = q @ k.transpose(-2, -1) / math.sqrt(self.dh)                             # (B, H, L, L)
        rows = slice(None) if self.stochastic_rows == "all" else slice(-1, None)     # query rows that are RKSA's
        omega = F.softplus(self._row_logits(self.scale_qk, x)) + 1e-4                # (B, H, R, L)
        alpha = F.softplus(self._row_logits(self.shape_qk, x)) * stats["shape"][:, None, rows]
        exact = self.construction == "exact"
        # with Eq. 13, ψ shapes the noise and the listwise loss only: the mean logit at evaluation does not read it
        psi = self.correlation(x, ctx, stats) if self.training or ctx.need_weights or exact else None
        self.last_psi = psi.detach() if ctx.need_weights else None
        sample = self.training and self.stochastic
        chol = torch.linalg.cholesky(psi.float())[:, None] if sample else None      # (B, 1, L, L), float32
        xi_rows = xi[:, :, rows]
        if exact:   # δ mixes a row's α through ψ (a matmul): float32, as ψ itself, under any autocast precision
            with float32_region(x):
                xi_f, omega_f, alpha_f = xi_rows.float(), omega.float(), alpha.float()
                z = (exact_skew_normal_sample(xi_f, omega_f, alpha_f, psi[:, None], chol) if sample else
                     skew_normal_mean(xi_f, omega_f, exact_skew_normal_delta(alpha_f, psi[:, None])[0]))
            z = z.to(xi.dtype)
        else:
            delta = alpha / torch.sqrt(1.0 + alpha ** 2)
            z = (skew_normal_sample(xi_rows, omega, delta, chol.to(x.dtype), spread=torch.rsqrt(1.0 + alpha ** 2))
                 if sample else skew_normal_mean(xi_rows, omega, delta))            # spread: sqrt(1 - δ^2), stably
        if self.stochastic_rows == "last":                                            # the other rows: Ξ alone
            z = torch.cat([xi[:, :, :-1], z], dim=2)
        allowed = ctx.allowed()
        weights = torch.softmax(z.masked_fill(~allowed, float("-inf")), dim=-1)
        p = self.attn_dropout if self.training else 0.0
        out = F.dropout(weights, p, self.training) @ v
        if self.training and self.rank_weight > 0:
            self.aux_loss = self.rank_weight * listwise_cooccurrence_loss(psi, stats["cooc"], ctx.valid_mask, self.tau)
        else:
            self.aux_loss = None
        return self.out_proj(merge_heads(out)), weights if ctx.need_weights else None
