"""Synthetic sequences with planted, known structure: the offline default of the CLI and notebooks.

Generative story (all choices recorded in ``dataset.meta``):

* Items are split into ``n_clusters`` interest clusters; within a cluster, popularity follows a Zipf law.
* Every user has a long-term interest: one or two clusters (``user_clusters``).
* Short-term Markov structure: every item ``i`` has a fixed successor ``next_item[i]``. With probability
  ``markov_prob`` the next item is the successor of the current one; otherwise it is drawn from the
  user's interest clusters by popularity.
* A user never repeats an item (like the Amazon datasets): repeats are re-drawn.

A model that learns the transitions and the user's clusters beats popularity by a wide margin, which makes
every method's inductive bias visible in minutes.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .dataset import SequenceDataset


def make_synthetic(n_users: int = 2000, n_items: int = 500, n_clusters: int = 10, min_len: int = 10,
                   max_len: int = 50, markov_prob: float = 0.5, zipf_exponent: float = 1.0,
                   seed: int = 0, name: str = "synthetic") -> SequenceDataset:
    """Generate a :class:`SequenceDataset` with planted short- and long-term structure.

    Args:
        n_users, n_items: sizes (items get ids ``1..n_items``).
        n_clusters: number of long-term interest clusters (``<= n_items``).
        min_len, max_len: each user's sequence length is uniform in ``[min_len, max_len]``.
        markov_prob: probability that the next item is the current item's fixed successor.
        zipf_exponent: popularity skew inside a cluster.
        seed: everything is a deterministic function of the seed.
    """
    if n_users < 1:
        raise ConfigError(f"n_users must be >= 1, got {n_users}")
    if not 1 <= n_clusters <= n_items:
        raise ConfigError(f"n_clusters must be in 1..n_items={n_items}, got {n_clusters}")
    if not 3 <= min_len <= max_len:
        raise ConfigError(f"need 3 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if max_len > n_items // 2:
        raise ConfigError(f"max_len={max_len} must be at most n_items/2={n_items // 2} (users never repeat items)")
    if not 0.0 <= markov_prob <= 1.0:
        raise ConfigError(f"markov_prob must be in [0, 1], got {markov_prob}")
    rng = np.random.default_rng(seed)
    item_cluster = np.empty(n_items + 1, dtype=np.int64)
    item_cluster[0] = -1
    item_cluster[1:] = rng.permutation(np.arange(n_items) % n_clusters)
    members = [np.flatnonzero(item_cluster == c) for c in range(n_clusters)]
    popularity = [rng.permutation(1.0 / np.arange(1, len(m) + 1) ** zipf_exponent) for m in members]
    popularity = [p / p.sum() for p in popularity]
    next_item = np.zeros(n_items + 1, dtype=np.int64)
    next_item[1:] = rng.permutation(np.arange(1, n_items + 1))  # a random permutation: every item one successor

    user_clusters, sequences = [], []
    for _ in range(n_users):
        k = 1 + int(rng.random() < 0.5)
        clusters = rng.choice(n_clusters, size=min(k, n_clusters), replace=False)
        user_clusters.append(clusters)
        length = int(rng.integers(min_len, max_len + 1))
        seen: set[int] = set()
        seq: list[int] = []
        pool = sum(len(members[c]) for c in clusters)   # items of the user's clusters still unseen
        while len(seq) < length:
            if seq and rng.random() < markov_prob and int(next_item[seq[-1]]) not in seen:
                item = int(next_item[seq[-1]])
            elif pool > 0:
                c = int(rng.choice(clusters))
                item = int(rng.choice(members[c], p=popularity[c]))
                if item in seen:
                    continue
            else:  # the user's clusters are used up (tiny catalogues): any unseen item
                item = int(rng.choice(np.setdiff1d(np.arange(1, n_items + 1), np.fromiter(seen, dtype=np.int64))))
            pool -= int(item_cluster[item] in clusters)
            seen.add(item)
            seq.append(item)
        sequences.append(np.array(seq, dtype=np.int64))
    titles = ["[PAD]"] + [f"c{item_cluster[i]:02d}-item{i:04d}" for i in range(1, n_items + 1)]
    meta = dict(source="synthetic", seed=seed, n_clusters=n_clusters, markov_prob=markov_prob,
                item_cluster=item_cluster, next_item=next_item, user_clusters=user_clusters)
    return SequenceDataset(name, sequences, n_items, item_titles=titles, meta=meta)
