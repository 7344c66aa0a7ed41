"""UserItemSet: membership of (user, item) pairs against a brute-force set."""
from __future__ import annotations

import numpy as np
import torch

from tutorial_lib.data.user_items import UserItemSet


def test_contains_matches_brute_force_for_any_shape():
    rng = np.random.default_rng(0)
    train = [rng.choice(np.arange(1, 21), size=n, replace=False) for n in (5, 1, 12, 7)]
    index = UserItemSet(train, 20)
    users = torch.from_numpy(rng.integers(0, 4, (3, 6)))
    items = torch.from_numpy(rng.integers(0, 21, (3, 6)))
    want = [[bool(i) and i in set(train[u].tolist()) for u, i in zip(ur, ir)]
            for ur, ir in zip(users.tolist(), items.tolist())]
    assert index.contains(users, items).tolist() == want
    row = index.contains(torch.tensor([[2]]), torch.from_numpy(train[2])[None])     # broadcast users over items
    assert row.all() and row.shape == (1, 12)
    assert not index.contains(torch.tensor([0]), torch.tensor([0])).any()           # padding is never an item


def test_empty_histories():
    index = UserItemSet([np.array([], dtype=np.int64)] * 2, 5)
    assert index.contains(torch.tensor([0, 1]), torch.tensor([1, 5])).tolist() == [False, False]
