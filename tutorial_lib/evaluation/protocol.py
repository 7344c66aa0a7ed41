"""Evaluation protocols: one evaluator, explicit switches.

* ``full``: rank the target against every item; the user's history stays in the ranking (default).
* ``full-nohist``: full ranking with the items the user already interacted with removed (Locker; its code also
  removes the test item when it validates and ranks ties optimistically, so only test numbers compare).
* ``sampled100``: rank the target against 100 sampled negatives (SASRec / RKSA papers).

Which items the sampled negatives avoid is a separate switch (docs/methods.md A13): by default the user's
whole history and both held-out items (no negative is an item the user is known to have consumed), or, as
SASRec's released code does, only the training items and the target (``negatives_exclude="train"``; the
validation item can then be a negative when the test item is ranked).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

PROTOCOLS = ("full", "full-nohist", "sampled100")
#: what sampled negatives avoid: the user's whole history and held-out items, or the training items only
NEGATIVE_EXCLUSIONS = ("history", "train")


@dataclass(frozen=True)
class EvalProtocol:
    """Switches of the evaluator.

    Attributes:
        name: one of :data:`PROTOCOLS`.
        n_negatives: negatives per user for sampled ranking.
        max_users: evaluate a random subset of at most this many users (``None`` = all).
        seed: seeds the negatives and the user subsample; fixed per evaluator, so every epoch and
            every model sees the same candidates. Validation and test draw their negatives from different
            generators, so that selecting on validation never picks an epoch on the test's candidates.
        negatives_exclude: for sampled ranking, ``"history"`` (default): negatives are never in the user's
            training items, validation item or test item; ``"train"``: never a training item or the stage's
            target, the items SASRec's code avoids (at test time the validation item, which the input ends with,
            can be drawn; the code also draws with replacement and can draw the target, where this draws 100
            distinct items).
    """

    name: str = "full"
    n_negatives: int = 100
    max_users: int | None = None
    seed: int = 0
    negatives_exclude: str = "history"

    def __post_init__(self) -> None:
        """Raise :class:`ConfigError` for an unknown protocol or exclusion, or a setting out of range."""
        if self.name not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {self.name!r}; valid protocols are: {', '.join(PROTOCOLS)}")
        if self.n_negatives < 1:
            raise ConfigError(f"n_negatives must be >= 1, got {self.n_negatives}")
        if self.negatives_exclude not in NEGATIVE_EXCLUSIONS:
            raise ConfigError(f"unknown negatives_exclude {self.negatives_exclude!r}; valid values are: "
                              f"{', '.join(NEGATIVE_EXCLUSIONS)}")
        if self.max_users is not None and self.max_users < 1:
            raise ConfigError(f"max_users must be >= 1 or None, got {self.max_users}")

    @property
    def sampled(self) -> bool:
        """Whether the target is ranked among ``n_negatives`` sampled items (``sampled100``)."""
        return self.name == "sampled100"

    @property
    def exclude_history(self) -> bool:
        """Whether the user's history items are removed from the candidates (``full-nohist``)."""
        return self.name == "full-nohist"
