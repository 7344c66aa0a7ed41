"""Item co-occurrence statistics of the training split (RKSA's counting kernel and shape parameter).

``P_i`` = number of users whose training history contains item ``i``; ``P_ij`` = number of users whose
training history contains both ``i`` and ``j`` (user-level set co-occurrence, docs/methods.md A4), with
``P_ii = P_i``. Only ``split.train`` is counted: validation and test items never enter.

Two storages behind one lookup, chosen by catalogue size:

* **dense** (``n_items <= DENSE_MAX_ITEMS``): the ``(n+1) x (n+1)`` count matrix, computed as
  ``X^T X`` from the user x item incidence matrix in chunks of users (ML-1M: 3,417^2 floats = 47 MB);
  a batch block is one gather.
* **sparse**: the sorted keys ``i * (n+1) + j`` of the co-occurring pairs and their counts; a batch
  block is a binary search per entry. Memory is proportional to ``Σ_u n_u^2`` over the users, which is
  small for the short-history datasets that have large catalogues (Beauty-Locker: 54,542 items, about
  6 M pairs).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .user_items import UserItemSet

#: largest catalogue stored as a dense matrix (8,000^2 float32 = 256 MB)
DENSE_MAX_ITEMS = 8000


class CooccurrenceTable:
    """User-level co-occurrence counts with a fast ``(B, L, L)`` lookup.

    Args:
        train: per-user training item arrays (ids ``1..n_items``).
        n_items: catalogue size.
        dense: force (``True``/``False``) or choose by size (``None``).
    """

    def __init__(self, train: Sequence[np.ndarray], n_items: int, dense: bool | None = None,
                 user_chunk: int = 2048):
        self.n_items = int(n_items)
        self._train, self._history = train, None        # for owned(), built on first use
        sets = [np.unique(np.asarray(s, dtype=np.int64)) for s in train]
        sets = [s[s > 0] for s in sets]
        flat = np.concatenate(sets) if sets else np.empty(0, np.int64)
        if flat.size and flat.max() > n_items:
            raise ValueError(f"item ids must lie in 1..{n_items}, found {flat.max()}")
        self.counts = torch.from_numpy(np.bincount(flat, minlength=n_items + 1).astype(np.float32))
        self.dense = (n_items <= DENSE_MAX_ITEMS) if dense is None else dense
        if self.dense:
            self.matrix = self._dense(sets, user_chunk)
            self.keys = self.values = None
        else:
            self.matrix = None
            self.keys, self.values = self._sparse(sets)

    # ---------------------------------------------------------------- building
    def _dense(self, sets: list[np.ndarray], user_chunk: int) -> torch.Tensor:
        n = self.n_items + 1
        out = torch.zeros(n, n)
        for start in range(0, len(sets), user_chunk):
            chunk = sets[start:start + user_chunk]
            rows = np.repeat(np.arange(len(chunk)), [len(s) for s in chunk])
            x = torch.zeros(len(chunk), n)
            if rows.size:
                x[torch.from_numpy(rows), torch.from_numpy(np.concatenate(chunk))] = 1.0
            out += x.t() @ x
        return out

    def _sparse(self, sets: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.n_items + 1
        keys, counts = np.empty(0, np.int64), np.empty(0, np.int64)
        batch: list[np.ndarray] = []
        pending = 0

        def flush() -> None:
            nonlocal keys, counts, batch, pending
            if not batch:
                return
            new, c = np.unique(np.concatenate(batch), return_counts=True)
            merged = np.concatenate([keys, new])
            weights = np.concatenate([counts, c])
            keys, inverse = np.unique(merged, return_inverse=True)
            counts = np.bincount(inverse, weights=weights).astype(np.int64)
            batch, pending = [], 0

        for s in sets:
            pairs = (s[:, None] * n + s[None, :]).ravel()
            batch.append(pairs)
            pending += pairs.size
            if pending > 20_000_000:
                flush()
        flush()
        return torch.from_numpy(keys), torch.from_numpy(counts.astype(np.float32))

    # ---------------------------------------------------------------- lookups
    @property
    def nbytes(self) -> int:
        """Bytes of the pair counts: the dense matrix, or the sparse keys and values (per-item counts aside)."""
        if self.dense:
            return self.matrix.numel() * 4
        return self.keys.numel() * 8 + self.values.numel() * 4

    def _on(self, name: str, device: torch.device) -> torch.Tensor:
        """The table ``name`` on ``device``, copied there once: a GPU would otherwise receive the whole table
        (47 MB for ML-1M's dense counts) with every batch."""
        table = getattr(self, name)
        if table.device == device:
            return table
        copies = self.__dict__.setdefault("_device_copies", {})
        key = (name, str(device))
        if key not in copies:
            copies[key] = table.to(device)
        return copies[key]

    def _check_ids(self, ids: torch.Tensor) -> None:
        """Refuse ids outside ``0..n_items``: the dense gather would wrap a negative id around to another item's
        row, and the sparse key ``i * (n+1) + j`` of an id above ``n_items`` is another pair's key, so either
        would return a wrong count instead of failing."""
        if ids.numel() == 0:
            return
        low, high = (int(v) for v in torch.aminmax(ids))
        if low < 0 or high > self.n_items:
            bad = low if low < 0 else high
            raise ValueError(f"item id {bad} is outside 0..{self.n_items} (0 = padding, 1..{self.n_items} the items "
                             f"of the table's catalogue): pass ids of the dataset the table was built from")

    def pair_counts(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``P_ab`` for item id tensors ``a`` and ``b`` of the same shape (0 where either is padding).

        Ids must lie in ``0..n_items`` (``ValueError`` otherwise)."""
        self._check_ids(a)
        self._check_ids(b)
        return self._lookup(a, b)

    def _lookup(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``pair_counts`` without the id check (the caller has checked the ids).

        Padding needs no mask: item 0 is never counted, so the dense matrix's row and column 0 are 0 and no
        sparse key ``i * (n+1) + j`` (``i, j >= 1``) equals a key with a 0 in it (a mask cost a third of the
        lookup's time)."""
        if self.dense:
            return self._on("matrix", a.device)[a, b]
        keys = self._on("keys", a.device)
        q = a * (self.n_items + 1) + b
        pos = torch.searchsorted(keys, q.reshape(-1)).clamp_(max=len(keys) - 1).view_as(q)
        return torch.where(keys[pos] == q, self._on("values", a.device)[pos], torch.zeros((), device=a.device))

    def block(self, item_ids: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` ids -> ``(B, L, L)`` float counts ``C[b, j, l] = P(i_j, i_l)`` (0 at padding)."""
        self._check_ids(item_ids)                     # on the (B, L) ids, not on the L times larger expanded pair
        return self._lookup(item_ids[:, :, None].expand(-1, -1, item_ids.shape[1]),
                            item_ids[:, None, :].expand(-1, item_ids.shape[1], -1))

    def owned(self, users: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        """``(B,)`` user indices and ``(B, L)`` ids -> ``(B, L)`` bool: the item is in that user's training
        history, so the user's own history contributed 1 to its count and to its pairs with the other owned items."""
        if self._history is None:
            self._history = UserItemSet(self._train, self.n_items)
        return self._history.contains(users[:, None], item_ids)

    def item_counts(self, item_ids: torch.Tensor) -> torch.Tensor:
        """``P_i`` for every entry of ``item_ids`` (0 for padding; ids in ``0..n_items``)."""
        self._check_ids(item_ids)
        return self._on("counts", item_ids.device)[item_ids] * (item_ids > 0)
