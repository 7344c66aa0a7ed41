"""Negative sampling for BCE: uniform items that the user has not interacted with in training."""
from __future__ import annotations

import numpy as np
import torch

from ..data.user_items import UserItemSet


class NegativeSampler:
    """Draw negatives outside each user's training history (as SASRec's sampler does).

    Membership is tested with :class:`~tutorial_lib.data.user_items.UserItemSet` (one sorted array of keys
    and a binary search), so a batch of any shape is sampled with a few vectorised passes.
    """

    def __init__(self, train: list[np.ndarray], n_items: int, max_rounds: int = 20):
        self.n_items, self.max_rounds = n_items, max_rounds
        self.history = UserItemSet(train, n_items)

    def _seen(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.history.contains(users, items)

    def sample(self, users: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """``users`` ``(B,)`` -> negatives of ``shape`` ``(B, ...)`` with ids in ``1..n_items``.

        Resamples hits of the history up to ``max_rounds`` times (a user who has seen nearly every
        item may keep a few hits; that is rare and harmless).
        """
        u = users.view(-1, *([1] * (len(shape) - 1))).expand(shape)
        neg = torch.randint(1, self.n_items + 1, shape, generator=generator)
        for _ in range(self.max_rounds):
            hit = self._seen(u, neg)
            if not bool(hit.any()):
                break
            neg[hit] = torch.randint(1, self.n_items + 1, (int(hit.sum()),), generator=generator)
        return neg
