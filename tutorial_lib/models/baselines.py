"""Non-neural baselines that plug into the same :class:`~tutorial_lib.evaluation.Evaluator` as the models.

A baseline is an ``nn.Module`` with ``score_next(item_ids) -> (B, n_items + 1)``, exactly like the
attention models, so every protocol (``full``, ``full-nohist``, ``sampled100``) evaluates it unchanged.
Baselines have no trainable parameters: what they "learn" is kept in buffers (which also tell the
evaluator which device to use). They are deliberately not in the model registry: they need the training
split to be built, not ``n_items`` / ``max_len``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.split import LeaveOneOutSplit


class PopularityRecommender(nn.Module):
    """Most-popular baseline: every user gets the same ranking, by number of training interactions.

    ``score(i) = count of item i in the training part of all users' sequences`` (validation and test
    targets are never counted, so the baseline cannot peek at what it is evaluated on). The padding
    column 0 scores ``-inf``.

    Items with equal counts tie; the evaluator ranks ties pessimistically (the target goes below every
    item with the same score), so items never seen in training all share the worst rank.

    Args:
        split: a :class:`~tutorial_lib.data.LeaveOneOutSplit` (its ``train`` part is counted), or a
            sequence of per-user training arrays together with ``n_items``.
        n_items: item vocabulary size; taken from ``split`` when it is a ``LeaveOneOutSplit``.

    Attributes:
        counts: buffer ``(n_items + 1,)`` float32, ``counts[i]`` = training interactions of item ``i``
            (``counts[0] = 0``).
    """

    counts: torch.Tensor

    def __init__(self, split: LeaveOneOutSplit | Sequence[np.ndarray], n_items: int | None = None):
        super().__init__()
        if isinstance(split, LeaveOneOutSplit):
            train, n_items = split.train, split.n_items if n_items is None else n_items
        else:
            train = list(split)
            if n_items is None:
                raise ValueError("pass n_items when `split` is a list of training sequences")
        if n_items < 1:
            raise ValueError(f"n_items must be >= 1, got {n_items}")
        items = np.concatenate([np.asarray(s, dtype=np.int64) for s in train]) if len(train) else np.empty(0, np.int64)
        if items.size and (items.min() < 1 or items.max() > n_items):
            raise ValueError(f"training item ids must lie in 1..{n_items}, found {items.min()}..{items.max()}")
        counts = np.bincount(items, minlength=n_items + 1).astype(np.float32)
        counts[0] = 0.0
        self.n_items = int(n_items)
        self.register_buffer("counts", torch.from_numpy(counts))

    def score_next(self, item_ids: torch.Tensor, **extras: Any) -> torch.Tensor:
        """Scores of every candidate next item: ``(B, L)`` -> ``(B, n_items + 1)`` (a fresh, writable
        tensor on the buffer's device; the input is ignored apart from its batch size)."""
        scores = self.counts.expand(item_ids.shape[0], -1).clone()
        scores[:, 0] = float("-inf")
        return scores

    def forward(self, item_ids: torch.Tensor, **extras: Any) -> torch.Tensor:
        """Same as :meth:`score_next`: ``(B, L)`` -> ``(B, n_items + 1)``."""
        return self.score_next(item_ids, **extras)

    def top_items(self, k: int = 10) -> torch.Tensor:
        """The ``k`` most popular item ids (ties broken by smaller id), ``(k,)`` long."""
        order = np.lexsort((np.arange(self.n_items + 1), -self.counts.cpu().numpy()))
        order = order[order != 0]
        return torch.from_numpy(order[:k].astype(np.int64))

    def extra_repr(self) -> str:
        """Catalogue size and number of counted interactions, for the module's repr."""
        return f"n_items={self.n_items}, interactions={int(self.counts.sum().item())}"


__all__ = ["PopularityRecommender"]
