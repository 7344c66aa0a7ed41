"""Which items are in which user's training history: a membership test for batches of any shape.

Used by the BCE negative sampler (draw outside the history) and by RKSA's co-occurrence counts (leave the
user's own contribution out).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class UserItemSet:
    """The pairs ``(user, item)`` of the training histories, as one sorted array of keys
    ``user * (n_items + 1) + item``; :meth:`contains` is one binary search per entry.

    Args:
        train: per-user training item arrays; the user index is the position in the list.
        n_items: catalogue size (ids ``1..n_items``).
    """

    def __init__(self, train: Sequence[np.ndarray], n_items: int):
        self.n_items = int(n_items)
        lengths = [len(s) for s in train]
        base = np.repeat(np.arange(len(train), dtype=np.int64) * (self.n_items + 1), lengths)
        items = np.concatenate([np.asarray(s, dtype=np.int64) for s in train]) if sum(lengths) else np.empty(0, np.int64)
        self.keys = torch.from_numpy(np.unique(base + items))

    def contains(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Bool tensor of ``items``' shape: ``items[...]`` is in the history of ``users[...]`` (same shape, or
        broadcastable to it). Padding (id 0) is never contained."""
        if self.keys.numel() == 0:
            return torch.zeros(torch.broadcast_shapes(users.shape, items.shape), dtype=torch.bool, device=items.device)
        keys = self.keys.to(items.device)
        q = users * (self.n_items + 1) + items
        pos = torch.searchsorted(keys, q.reshape(-1)).clamp_(max=len(keys) - 1).view_as(q)
        return keys[pos].eq(q) & (items > 0)
