"""Training windows and batches.

Each user contributes one window per epoch: the most recent ``max_len + 1`` training items, split
into inputs (all but the last) and targets (all but the first), left-padded with 0. Every valid
position ``t`` is trained to predict the item at ``t + 1`` (all-position autoregressive training,
as in SASRec).

With random windows (``TrainConfig(window_sampling="random")``) a user whose training history is
longer than ``max_len + 1`` contributes a window drawn uniformly from all of its ``max_len + 1``-item
windows instead, a fresh draw every epoch (:meth:`TrainingWindows.resampled`), so the older part of a
long history is trained on too.

With ``bucketing`` the users of a batch have similar lengths and the batch is trimmed to its
longest window, so short sequences do not pay for ``max_len`` columns of padding. Because
positions are counted from the right (see the backbone), trimming changes no result.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError

WINDOW_SAMPLINGS = ("recent", "random")


def left_pad(sequences: list[np.ndarray], width: int) -> np.ndarray:
    """Right-align each sequence's last ``width`` items in a ``(len(sequences), width)`` zero matrix."""
    out = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        tail = seq[-width:]
        if len(tail):
            out[row, width - len(tail):] = tail
    return out


@dataclass
class TrainingWindows:
    """All training windows of a split, built once.

    Attributes:
        users: ``(N,)`` user index of each window (users with at least 2 training items).
        windows: ``(N, max_len + 1)`` left-padded most recent training items.
        lengths: ``(N,)`` number of valid inputs (= valid targets) per window, ``<= max_len``.
        items: ``(T,)`` every window user's whole training history, concatenated (for :meth:`resampled`).
        starts: ``(N,)`` offset of each user's history in ``items``; ``history_lengths`` ``(N,)`` its length.
    """

    users: torch.Tensor
    windows: torch.Tensor
    lengths: torch.Tensor
    max_len: int
    items: torch.Tensor | None = None
    starts: torch.Tensor | None = None
    history_lengths: torch.Tensor | None = None

    @classmethod
    def from_train(cls, train: list[np.ndarray], max_len: int) -> "TrainingWindows":
        """The most recent window of every user of ``train`` (per-user item arrays) with at least 2 items."""
        if max_len < 2:
            raise ConfigError(f"max_len must be >= 2, got {max_len}")
        users = np.array([u for u, s in enumerate(train) if len(s) >= 2], dtype=np.int64)
        if users.size == 0:
            raise ConfigError("no user has at least 2 training items; the dataset is too short to train on")
        histories = [np.asarray(train[u], dtype=np.int64) for u in users]
        windows = left_pad(histories, max_len + 1)
        full = np.array([len(h) for h in histories], dtype=np.int64)
        lengths = np.minimum(full - 1, max_len)
        starts = np.concatenate([[0], np.cumsum(full)[:-1]])
        return cls(torch.from_numpy(users), torch.from_numpy(windows), torch.from_numpy(lengths), max_len,
                   torch.from_numpy(np.concatenate(histories)), torch.from_numpy(starts), torch.from_numpy(full))

    def __len__(self) -> int:
        """Number of windows ``N``."""
        return len(self.users)

    def n_targets(self) -> int:
        """Number of (input, target) pairs per epoch."""
        return int(self.lengths.sum())

    def n_history_targets(self) -> int:
        """Number of (input, target) pairs in the whole training histories (what random windows can reach)."""
        return int((self.history_lengths - 1).sum())

    def resampled(self, generator: torch.Generator) -> "TrainingWindows":
        """A copy in which every user with more than ``max_len + 1`` training items has a window drawn
        uniformly from all its ``max_len + 1``-item windows (the oldest to the most recent); shorter
        histories fit whole and keep theirs. Draws from ``generator`` (one number per window).
        Only the training split is read: validation and test items never enter a window."""
        if self.items is None:
            raise ConfigError("these windows were built without the histories; use TrainingWindows.from_train")
        span = self.max_len + 1
        choices = torch.clamp(self.history_lengths - span + 1, min=1)  # number of possible windows
        offset = (torch.rand(len(self), generator=generator, dtype=torch.float64) * choices).long()
        offset = torch.minimum(offset, choices - 1)
        long = self.history_lengths > span
        windows = self.windows.clone()
        if bool(long.any()):
            first = self.starts[long] + offset[long]
            windows[long] = self.items[first[:, None] + torch.arange(span)]
        return TrainingWindows(self.users, windows, self.lengths, self.max_len, self.items, self.starts,
                               self.history_lengths)


@dataclass
class Batch:
    """One training batch. ``inputs`` and ``targets`` are ``(B, L)`` (0 = padding), ``users`` ``(B,)``."""

    users: torch.Tensor
    inputs: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device) -> "Batch":
        """The batch on ``device`` (inputs and targets copied without blocking)."""
        return Batch(self.users.to(device), self.inputs.to(device, non_blocking=True),
                     self.targets.to(device, non_blocking=True))


def batch_order(windows: TrainingWindows, batch_size: int, generator: torch.Generator, bucketing: bool = True,
                bucket_span: int = 32) -> list[torch.Tensor]:
    """Shuffled window indices, cut into batches that cover every window once.

    With ``bucketing`` the windows are shuffled, cut into spans of ``bucket_span`` batches, sorted by
    length inside each span, batched, and the batch order is shuffled again (so each batch holds
    windows of similar length and can be trimmed).
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    n = len(windows)
    order = torch.randperm(n, generator=generator)
    if bucketing:
        span = batch_size * bucket_span
        chunks = []
        for start in range(0, n, span):
            idx = order[start:start + span]
            chunks.append(idx[torch.argsort(windows.lengths[idx], descending=True, stable=True)])
        order = torch.cat(chunks)
    batches = list(order.split(batch_size))
    if bucketing:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def iterate_batches(windows: TrainingWindows, batch_size: int, generator: torch.Generator,
                    bucketing: bool = True, bucket_span: int = 32) -> Iterator[Batch]:
    """Yield shuffled next-item batches covering every window once (see :func:`batch_order`).

    With ``bucketing`` each batch is trimmed to its longest window; without it every batch has
    ``max_len`` columns.
    """
    for idx in batch_order(windows, batch_size, generator, bucketing, bucket_span):
        width = int(windows.lengths[idx].max()) if bucketing else windows.max_len
        w = windows.windows[idx, -(width + 1):]
        inputs = w[:, :-1]
        # the oldest item of a short window is a target only if an input precedes it
        yield Batch(windows.users[idx], inputs, w[:, 1:] * inputs.ne(0))


def iterate_cloze_batches(windows: TrainingWindows, batch_size: int, generator: torch.Generator,
                          mask_prob: float, mask_id: int, bucketing: bool = True, bucket_span: int = 32
                          ) -> Iterator[Batch]:
    """Yield shuffled cloze (masked-item) batches for a bidirectional model (BERT4Rec).

    Each user contributes its most recent ``max_len`` training items. Every item is replaced by
    ``mask_id`` with probability ``mask_prob``; a row in which nothing was drawn gets its most recent
    item masked (the position that inference predicts). ``targets`` hold the original item at
    masked positions and 0 elsewhere, so the losses of :mod:`tutorial_lib.training.losses` apply unchanged.
    """
    if not 0.0 < mask_prob < 1.0:
        raise ConfigError(f"mask_prob must be in (0, 1), got {mask_prob}")
    full = torch.clamp(windows.lengths + 1, max=windows.max_len)  # items available to a cloze window
    for idx in batch_order(windows, batch_size, generator, bucketing, bucket_span):
        width = int(full[idx].max()) if bucketing else windows.max_len
        seq = windows.windows[idx, -width:]
        valid = seq.ne(0)
        masked = (torch.rand(seq.shape, generator=generator) < mask_prob) & valid
        none = ~masked.any(dim=1)
        masked[none, -1] = True
        inputs = torch.where(masked, torch.full_like(seq, mask_id), seq)
        yield Batch(windows.users[idx], inputs, seq * masked)


@dataclass
class PrefixSamples:
    """Every prefix of every training history as its own sample (RecBole's "data augmentation").

    Sample ``i`` is user ``users[i]``'s training items before index ``ends[i]`` (at most ``max_len``
    of them, the most recent), and its target is the item at ``ends[i]``. A user with ``n`` training
    items gives ``n - 1`` samples, so an epoch has about ``average length`` times more samples than
    windows: this is what makes this training slow on long histories.
    """

    train: list[np.ndarray]
    users: np.ndarray
    ends: np.ndarray
    max_len: int

    @classmethod
    def from_train(cls, train: list[np.ndarray], max_len: int) -> "PrefixSamples":
        """Every prefix of ``train`` (per-user item arrays): ``n - 1`` samples for a user with ``n`` items."""
        if max_len < 1:
            raise ConfigError(f"max_len must be >= 1, got {max_len}")
        counts = np.array([max(len(s) - 1, 0) for s in train], dtype=np.int64)
        if counts.sum() == 0:
            raise ConfigError("no user has at least 2 training items; the dataset is too short to train on")
        users = np.repeat(np.arange(len(train), dtype=np.int64), counts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        ends = np.arange(counts.sum(), dtype=np.int64) - np.repeat(starts, counts) + 1
        return cls(train, users, ends, max_len)

    def __len__(self) -> int:
        """Number of samples (prefixes)."""
        return len(self.users)


def iterate_prefix_batches(samples: PrefixSamples, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
    """Yield shuffled batches of prefix samples: ``inputs`` left-padded and trimmed to the batch's longest
    prefix; ``targets`` are 0 except in the last column, which holds each sample's next item."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    order = torch.randperm(len(samples), generator=generator).numpy()
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        users, ends = samples.users[idx], samples.ends[idx]
        prefixes = [samples.train[u][max(0, e - samples.max_len):e] for u, e in zip(users, ends)]
        width = max(len(p) for p in prefixes)
        inputs = torch.from_numpy(left_pad(prefixes, width))
        targets = torch.zeros_like(inputs)
        targets[:, -1] = torch.from_numpy(np.array([samples.train[u][e] for u, e in zip(users, ends)]))
        yield Batch(torch.from_numpy(users), inputs, targets)


def eval_inputs(histories: list[np.ndarray], max_len: int) -> torch.Tensor:
    """``(N, max_len)`` left-padded most recent ``max_len`` items of each history."""
    return torch.from_numpy(left_pad(histories, max_len))
