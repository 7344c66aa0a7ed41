"""Training windows and batches.

Each user contributes one window per epoch: the most recent ``max_len + 1`` training items, split
into inputs (all but the last) and targets (all but the first), left-padded with 0. Every valid
position ``t`` is trained to predict the item at ``t + 1`` (all-position autoregressive training,
as in SASRec).

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
    """

    users: torch.Tensor
    windows: torch.Tensor
    lengths: torch.Tensor
    max_len: int

    @classmethod
    def from_train(cls, train: list[np.ndarray], max_len: int) -> "TrainingWindows":
        if max_len < 2:
            raise ConfigError(f"max_len must be >= 2, got {max_len}")
        users = np.array([u for u, s in enumerate(train) if len(s) >= 2], dtype=np.int64)
        if users.size == 0:
            raise ConfigError("no user has at least 2 training items; the dataset is too short to train on")
        windows = left_pad([train[u] for u in users], max_len + 1)
        lengths = np.minimum(np.array([len(train[u]) for u in users]) - 1, max_len)
        return cls(torch.from_numpy(users), torch.from_numpy(windows), torch.from_numpy(lengths), max_len)

    def __len__(self) -> int:
        return len(self.users)

    def n_targets(self) -> int:
        """Number of (input, target) pairs per epoch."""
        return int(self.lengths.sum())


@dataclass
class Batch:
    """One training batch. ``inputs`` and ``targets`` are ``(B, L)`` (0 = padding), ``users`` ``(B,)``."""

    users: torch.Tensor
    inputs: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device) -> "Batch":
        return Batch(self.users.to(device), self.inputs.to(device, non_blocking=True),
                     self.targets.to(device, non_blocking=True))


def iterate_batches(windows: TrainingWindows, batch_size: int, generator: torch.Generator,
                    bucketing: bool = True, bucket_span: int = 32) -> Iterator[Batch]:
    """Yield shuffled batches covering every window once.

    With ``bucketing`` the windows are shuffled, cut into spans of ``bucket_span`` batches, sorted by
    length inside each span, batched, trimmed to the longest window of the batch, and the batch
    order is shuffled again. Without it every batch has ``max_len`` columns.
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
    for idx in batches:
        width = int(windows.lengths[idx].max()) if bucketing else windows.max_len
        w = windows.windows[idx, -(width + 1):]
        inputs = w[:, :-1]
        # the oldest item of a short window is a target only if an input precedes it
        yield Batch(windows.users[idx], inputs, w[:, 1:] * inputs.ne(0))


def eval_inputs(histories: list[np.ndarray], max_len: int) -> torch.Tensor:
    """``(N, max_len)`` left-padded most recent ``max_len`` items of each history."""
    return torch.from_numpy(left_pad(histories, max_len))
