"""Evaluation protocols: one evaluator, explicit switches.

* ``full``: rank the target against every item; the user's history stays in the ranking (default).
* ``full-nohist``: full ranking with the items the user already interacted with removed (Locker).
* ``sampled100``: rank the target against 100 sampled negatives (SASRec / RKSA papers).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

PROTOCOLS = ("full", "full-nohist", "sampled100")


@dataclass(frozen=True)
class EvalProtocol:
    """Switches of the evaluator.

    Attributes:
        name: one of :data:`PROTOCOLS`.
        n_negatives: negatives per user for sampled ranking.
        max_users: evaluate a random subset of at most this many users (``None`` = all).
        seed: seeds the negatives and the user subsample; fixed per evaluator, so every epoch and
            every model sees the same candidates.
    """

    name: str = "full"
    n_negatives: int = 100
    max_users: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {self.name!r}; valid protocols are: {', '.join(PROTOCOLS)}")
        if self.n_negatives < 1:
            raise ConfigError(f"n_negatives must be >= 1, got {self.n_negatives}")
        if self.max_users is not None and self.max_users < 1:
            raise ConfigError(f"max_users must be >= 1 or None, got {self.max_users}")

    @property
    def sampled(self) -> bool:
        return self.name == "sampled100"

    @property
    def exclude_history(self) -> bool:
        return self.name == "full-nohist"
