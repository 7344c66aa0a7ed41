"""Chronological leave-one-out split (SASRec protocol).

For a user with items ``s_1 .. s_n`` (n >= 3): training = ``s_1 .. s_{n-2}``, validation target =
``s_{n-1}`` (input: the training items), test target = ``s_n`` (input: training items + the validation
item). Users with fewer than 3 items keep everything for training and are not evaluated (as in
SASRec's code).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dataset import SequenceDataset

MIN_EVAL_LENGTH = 3


@dataclass
class LeaveOneOutSplit:
    """Leave-one-out split of a :class:`SequenceDataset`.

    Attributes:
        train: per user, the training items (chronological int64 arrays).
        valid_target: ``(n_users,)`` validation item per user, 0 when the user is not evaluated.
        test_target: ``(n_users,)`` test item per user, 0 when the user is not evaluated.
        n_items: item vocabulary size.
    """

    train: list[np.ndarray]
    valid_target: np.ndarray
    test_target: np.ndarray
    n_items: int
    dataset_name: str = ""

    @property
    def n_users(self) -> int:
        """Number of users (evaluated or not)."""
        return len(self.train)

    def eval_users(self, stage: str) -> np.ndarray:
        """Indices of users that have a target for ``stage`` (``"valid"`` or ``"test"``)."""
        return np.flatnonzero(self.targets(stage) > 0)

    def targets(self, stage: str) -> np.ndarray:
        """``(n_users,)`` target item of every user at ``stage`` (``"valid"`` or ``"test"``), 0 when not evaluated."""
        if stage == "valid":
            return self.valid_target
        if stage == "test":
            return self.test_target
        raise ValueError(f"stage must be 'valid' or 'test', got {stage!r}")

    def history(self, user: int, stage: str) -> np.ndarray:
        """The items a model may read before predicting ``stage``'s target of ``user``."""
        if stage == "valid":
            return self.train[user]
        if stage == "test":
            v = self.valid_target[user]
            return np.append(self.train[user], v) if v > 0 else self.train[user]
        raise ValueError(f"stage must be 'valid' or 'test', got {stage!r}")


def leave_one_out(dataset: SequenceDataset) -> LeaveOneOutSplit:
    """Split every user's sequence chronologically: last item test, second-last validation."""
    n = dataset.n_users
    valid = np.zeros(n, dtype=np.int64)
    test = np.zeros(n, dtype=np.int64)
    train = []
    for u, seq in enumerate(dataset.sequences):
        if len(seq) < MIN_EVAL_LENGTH:
            train.append(seq)
            continue
        train.append(seq[:-2])
        valid[u], test[u] = seq[-2], seq[-1]
    return LeaveOneOutSplit(train, valid, test, dataset.n_items, dataset.name)
