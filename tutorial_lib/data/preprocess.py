"""Preprocessing steps on interaction arrays: chronological order, k-core, contiguous ids."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def chronological_order(users: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
    """Permutation that groups interactions by user (ascending) and sorts each user's by time.

    Both sorts are stable, so interactions with equal timestamps keep their original (file) order.
    """
    order = np.argsort(np.asarray(timestamps), kind="stable")
    return order[np.argsort(np.asarray(users)[order], kind="stable")]


def group_by_user(users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Split ``items`` into one array per user; users ascending, order within a user kept.

    Returns ``(user_ids, sequences)``.
    """
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    if users.size == 0:
        return users, []
    if np.any(users[1:] < users[:-1]):  # already sorted files (the usual case) skip the sort
        order = np.argsort(users, kind="stable")
        users, items = users[order], items[order]
    cuts = np.flatnonzero(users[1:] != users[:-1]) + 1
    return users[np.concatenate(([0], cuts))], np.split(items, cuts)


def _counts(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Count of kept interactions of the id at each position (ids already compact 0..n-1)."""
    return np.bincount(ids[mask], minlength=int(ids.max()) + 1 if ids.size else 0)[ids]


def k_core(
    users: np.ndarray, items: np.ndarray, k: int = 5, k_items: int | None = None
) -> np.ndarray:
    """Iterative k-core filter: boolean mask of the interactions to keep.

    Repeatedly drops interactions whose user has fewer than ``k`` or whose item has fewer than
    ``k_items`` (default ``k``) remaining interactions, until every remaining user and item
    qualifies. One pass is not enough in general: dropping a rare item can push a user below ``k``.
    Repeated (user, item) interactions count each time.
    """
    k_items = k if k_items is None else k_items
    users = np.asarray(users)
    items = np.asarray(items)
    if users.shape != items.shape:
        raise ValueError(f"users and items must have the same shape, got {users.shape} and {items.shape}")
    _, u = np.unique(users, return_inverse=True)
    _, i = np.unique(items, return_inverse=True)
    mask = np.ones(users.shape, dtype=bool)
    while True:
        keep = mask & (_counts(u, mask) >= k) & (_counts(i, mask) >= k_items)
        if np.array_equal(keep, mask):
            return mask
        mask = keep


def is_contiguous(sequences: Sequence[np.ndarray]) -> bool:
    """True when the item ids used are exactly ``1..max`` (no gaps, no 0)."""
    if not sequences:
        return True
    ids = np.unique(np.concatenate(sequences))
    return bool(ids[0] == 1 and ids[-1] == ids.size)


def remap_contiguous(sequences: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """Renumber item ids to ``1..N`` in order of first appearance (sequences scanned in order).

    Returns ``(new_sequences, old_ids)`` where ``old_ids[new_id]`` is the original id
    (``old_ids[0] == 0`` stands for padding).
    """
    if not sequences:
        return [], np.zeros(1, dtype=np.int64)
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
    uniq, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")  # unique index -> rank of first appearance
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(by_first.size)
    new_flat = rank[inverse] + 1
    old_ids = np.concatenate(([0], uniq[by_first])).astype(np.int64)
    return np.split(new_flat.astype(np.int64), np.cumsum(lengths)[:-1]), old_ids
