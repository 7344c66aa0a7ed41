"""The one interface every attention family implements.

``y, weights = attention(x, ctx)`` with

* ``x``: ``(B, L, d)`` token states entering the layer,
* ``ctx``: a :class:`SequenceContext` (item ids, padding mask, causal flag, optional user vector and
  per-batch extras),
* ``y``: ``(B, L, d)`` mixed token states,
* ``weights``: ``(B, H, L, L)`` attention weights when the family has them and ``ctx.need_weights``
  is set, else ``None``.

Sequences are left-padded: the most recent item sits at index ``L - 1`` and item id 0 is padding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import ConfigError


@dataclass
class SequenceContext:
    """What a layer may know about the batch besides the token states.

    Attributes:
        item_ids: ``(B, L)`` long, 0 = padding.
        padding_mask: ``(B, L)`` bool, ``True`` at padding positions.
        causal: if ``True`` position ``t`` may only use positions ``<= t``.
        user: optional ``(B, d_u)`` user representation (Locker's adaptive encoder).
        users: optional ``(B,)`` long user indices (families with a user embedding table, e.g. RKSA).
        max_len: the model's longest window ``n``; with it, :attr:`positions` gives absolute positions.
        extras: optional per-batch data of a family (e.g. co-occurrence lookups, the input embeddings,
            and for cloze models ``item_mask``: ``(B, L)`` bool, ``True`` at real items, neither padding nor ``[MASK]``).
        need_weights: ask the layer to return its attention weights (slower: no fused kernel).
    """

    item_ids: torch.Tensor
    padding_mask: torch.Tensor
    causal: bool = True
    user: torch.Tensor | None = None
    users: torch.Tensor | None = None
    max_len: int | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    need_weights: bool = False
    _allowed: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def from_item_ids(cls, item_ids: torch.Tensor, causal: bool = True, **kwargs: Any) -> "SequenceContext":
        """Context for ``(B, L)`` long ``item_ids`` whose padding mask is ``item_ids == 0``."""
        return cls(item_ids=item_ids, padding_mask=item_ids.eq(0), causal=causal, **kwargs)

    @property
    def valid_mask(self) -> torch.Tensor:
        """``(B, L)`` bool, ``True`` at real items."""
        return ~self.padding_mask

    @property
    def length(self) -> int:
        """``L``, the number of columns of the batch."""
        return self.item_ids.shape[1]

    @property
    def positions(self) -> torch.Tensor:
        """``(L,)`` long absolute positions of the columns, counted so that the most recent item (column
        ``L - 1``) is always position ``max_len - 1``: ``max_len - L, ..., max_len - 1``.

        Sequences are left-padded, so a position says "how far from the most recent item", and a batch
        trimmed to fewer columns keeps every item's position.
        """
        n = self.max_len if self.max_len is not None else self.length
        if self.length > n:
            raise ValueError(f"input has {self.length} columns but max_len is {n}")
        return torch.arange(n - self.length, n, device=self.item_ids.device)

    def allowed(self) -> torch.Tensor:
        """``(B, 1, L, L)`` bool: may query ``i`` look at key ``j``? Built once per batch, shared by layers.

        Padding keys are never visible; with ``causal`` neither are future keys. Every position may
        always see itself, so no row is empty (padding queries produce finite garbage that the
        loss and the evaluator never read, instead of NaNs).
        """
        if self._allowed is None:
            L = self.length
            dev = self.item_ids.device
            allowed = self.valid_mask[:, None, None, :].expand(-1, 1, L, L)
            if self.causal:
                allowed = allowed & torch.ones(L, L, dtype=torch.bool, device=dev).tril()
            self._allowed = allowed | torch.eye(L, dtype=torch.bool, device=dev)
        return self._allowed

    def has_padding(self) -> bool:
        """Whether any row of the batch has a padding position."""
        return bool(self.padding_mask.any())


def check_heads(d_model: int, n_heads: int) -> None:
    """Raise :class:`ConfigError` unless ``n_heads >= 1`` divides ``d_model`` (each head gets ``d_model / n_heads``
    channels)."""
    if n_heads < 1:
        raise ConfigError(f"n_heads must be >= 1, got {n_heads}")
    if d_model % n_heads:
        raise ConfigError(f"d_model={d_model} must be divisible by n_heads={n_heads}")


class Attention(nn.Module):
    """Base class: subclasses implement :meth:`forward` with the interface above."""

    #: whether the family produces a ``(B, H, L, L)`` weight matrix for plots
    has_weights: bool = True

    def forward(self, x: torch.Tensor, ctx: SequenceContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` -> mixed states ``(B, L, d)`` and ``(B, H, L, L)`` weights or ``None``."""
        raise NotImplementedError


def apply_shared_pattern(logits: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, causal: bool = True
                         ) -> torch.Tensor:
    """Attention whose logits do not depend on the items, only on positions: ``(H, L, L)`` logits shared
    by the whole batch (PARec/FPARec, handcrafted patterns, LightSANs' decoupled positions).

    Computes, for every row ``b``, ``softmax`` over the keys that are real items of row ``b`` (and,
    if ``causal``, not in the future) times ``v``, exactly, without materialising ``(B, H, L, L)``:
    the exponentials are shared and only the normaliser depends on the row.

    Args:
        logits: ``(H, L, L)``; must be bounded (e.g. soft-capped to ±30) so that shifting by the row
            maximum cannot underflow every real key.
        v: ``(B, H, L, dh)`` values.
        valid: ``(B, L)`` bool, real items.
    Returns:
        ``(B, H, L, dh)`` in ``v``'s dtype; a query with no visible real key (padding) gets 0. Computed in
        float32 whatever the autocast precision (:func:`float32_region`).
    """
    L = logits.shape[-1]
    with float32_region(v):
        logits, v32 = logits.float(), v.float()
        if causal:
            future = torch.ones(L, L, dtype=torch.bool, device=logits.device).triu(1)
            logits = logits.masked_fill(future, float("-inf"))
        e = torch.exp(logits - logits.amax(dim=-1, keepdim=True))          # (H, L, L), shared by the batch
        keep = valid.float()
        numerator = torch.einsum("hij,bhjd->bhid", e, v32 * keep[:, None, :, None])
        denominator = torch.einsum("hij,bj->bhi", e, keep)
        out = numerator / denominator.clamp_min(1e-30)[..., None]
    return out.to(v.dtype)


def float32_region(t: torch.Tensor) -> torch.autocast:
    """A context in which autocast is off, for the numerically delicate parts of an attention layer
    (exponentials shifted by a maximum over the window, their normalisers, a Cholesky factorisation).
    Under mixed precision fp16 underflows them (a 1e-30 floor rounds to 0, so a padding row becomes
    0/0 = NaN) and bf16's 8-bit mantissa breaks a Gram matrix's positive definiteness. Inside, cast the
    inputs with ``.float()``; ``t`` only names the device type."""
    return torch.autocast(t.device.type, enabled=False)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, L, H*dh)`` -> ``(B, H, L, dh)``."""
    B, L, D = x.shape
    return x.view(B, L, n_heads, D // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, dh)`` -> ``(B, L, H*dh)``."""
    B, H, L, dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * dh)
