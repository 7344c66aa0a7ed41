"""The one internal representation of a sequential-recommendation dataset.

Every reader in :mod:`tutorial_lib.data` produces a :class:`SequenceDataset`: one chronological
``int64`` array of item ids per user, with item ids contiguous from 1 (0 is reserved for padding)
and users numbered by their position in the list (user id = index + 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class DatasetStats:
    """Summary statistics of a dataset, as the papers report them."""

    users: int
    items: int
    interactions: int
    avg_len: float
    min_len: int
    max_len: int
    density: float

    def as_dict(self) -> dict[str, float | int]:
        """The statistics as a plain dict."""
        return dict(self.__dict__)


@dataclass
class SequenceDataset:
    """Per-user chronological item sequences.

    Attributes:
        name: registry name (``"ml-1m"``) or a free label (``"synthetic"``).
        sequences: list of length ``n_users``; ``sequences[u]`` is a 1-D ``int64`` array of item ids
            in chronological order, ids in ``1..n_items``.
        n_items: size of the item vocabulary (without the padding id 0).
        item_titles: optional human-readable names, ``item_titles[i]`` for item id ``i``
            (index 0 is the padding token).
        meta: free-form provenance (source file, preprocessing applied, planted structure, ...).
    """

    name: str
    sequences: list[np.ndarray]
    n_items: int
    item_titles: list[str] | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Store the sequences as int64 arrays; ValueError for no user, an empty sequence or an id out of range."""
        self.sequences = [np.asarray(s, dtype=np.int64) for s in self.sequences]
        if not self.sequences:
            raise ValueError(f"dataset {self.name!r} has no users")
        for u, seq in enumerate(self.sequences):
            if seq.ndim != 1 or seq.size == 0:
                raise ValueError(f"dataset {self.name!r}: user {u + 1} has an empty or malformed sequence")
        lo = min(int(s.min()) for s in self.sequences)
        hi = max(int(s.max()) for s in self.sequences)
        if lo < 1 or hi > self.n_items:
            raise ValueError(
                f"dataset {self.name!r}: item ids must lie in 1..{self.n_items} (0 is padding), found {lo}..{hi}"
            )

    @property
    def n_users(self) -> int:
        """Number of users (sequences)."""
        return len(self.sequences)

    def lengths(self) -> np.ndarray:
        """Sequence length of every user, shape ``(n_users,)``."""
        return np.fromiter((len(s) for s in self.sequences), dtype=np.int64, count=self.n_users)

    def stats(self) -> DatasetStats:
        """Users, items (distinct ids that occur), interactions, length statistics and density."""
        lengths = self.lengths()
        seen = np.unique(np.concatenate(self.sequences))
        n = int(lengths.sum())
        return DatasetStats(
            users=self.n_users,
            items=int(seen.size),
            interactions=n,
            avg_len=float(lengths.mean()),
            min_len=int(lengths.min()),
            max_len=int(lengths.max()),
            density=n / (self.n_users * max(int(seen.size), 1)),
        )

    def title(self, item_id: int) -> str:
        """A printable name for an item id (its title when known, else ``item <id>``)."""
        if self.item_titles is not None and 0 < item_id < len(self.item_titles):
            return self.item_titles[item_id]
        return f"item {item_id}"
