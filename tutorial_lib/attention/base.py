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


@dataclass
class SequenceContext:
    """What a layer may know about the batch besides the token states.

    Attributes:
        item_ids: ``(B, L)`` long, 0 = padding.
        padding_mask: ``(B, L)`` bool, ``True`` at padding positions.
        causal: if ``True`` position ``t`` may only use positions ``<= t``.
        user: optional ``(B, d_u)`` user representation (Locker's adaptive encoder).
        extras: optional per-batch data of a family (e.g. co-occurrence lookups).
        need_weights: ask the layer to return its attention weights (slower: no fused kernel).
    """

    item_ids: torch.Tensor
    padding_mask: torch.Tensor
    causal: bool = True
    user: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    need_weights: bool = False
    _allowed: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def from_item_ids(cls, item_ids: torch.Tensor, causal: bool = True, **kwargs: Any) -> "SequenceContext":
        return cls(item_ids=item_ids, padding_mask=item_ids.eq(0), causal=causal, **kwargs)

    @property
    def valid_mask(self) -> torch.Tensor:
        """``(B, L)`` bool, ``True`` at real items."""
        return ~self.padding_mask

    @property
    def length(self) -> int:
        return self.item_ids.shape[1]

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
        return bool(self.padding_mask.any())


class Attention(nn.Module):
    """Base class: subclasses implement :meth:`forward` with the interface above."""

    #: whether the family produces a ``(B, H, L, L)`` weight matrix for plots
    has_weights: bool = True

    def forward(self, x: torch.Tensor, ctx: SequenceContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, L, H*dh)`` -> ``(B, H, L, dh)``."""
    B, L, D = x.shape
    return x.view(B, L, n_heads, D // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, dh)`` -> ``(B, L, H*dh)``."""
    B, H, L, dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * dh)
