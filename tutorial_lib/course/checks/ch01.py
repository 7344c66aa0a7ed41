"""Checks of notebook 01 (data and evaluation): NDCG@K from ranks, and the pessimistic rank of the target."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .base import Case, check_function, exercise_check, to_numpy

NDCG_LIBRARY = "tutorial_lib.evaluation.ndcg_at_k"
RANK_LIBRARY = "tutorial_lib.evaluation.rank_of_target"


# ----------------------------------------------------------------------------------------- ndcg_at_k
def ndcg_cases(seed: int = 0, n_random: int = 8) -> list[Case]:
    """Edge cases first (rank 0, rank k-1, rank k, k = 1), then seeded random ranks."""
    cases = [
        Case((torch.tensor([0]), 10), label="rank 0: the target is the top recommendation"),
        Case((torch.tensor([9]), 10), label="rank k-1: the last position inside the top 10"),
        Case((torch.tensor([10]), 10), label="rank k: the first position outside the top 10"),
        Case((torch.tensor([0, 1, 2, 3]), 1), label="k = 1: only rank 0 counts"),
        Case((torch.tensor([0, 1, 4, 5, 9, 10, 19, 20, 3415]), 10), label="a mix of hits and misses"),
        Case((torch.tensor([3, 0, 7]), 5), label="an unsorted batch"),
    ]
    rng = np.random.default_rng(seed)
    for _ in range(n_random):
        k = int(rng.choice([1, 5, 10, 20, 50]))
        ranks = torch.from_numpy(rng.integers(0, 3 * k, size=int(rng.integers(1, 40))))
        cases.append(Case((ranks, k), label="random ranks"))
    return cases


#: cut-offs a learner may write instead of using the argument ``k``
FIXED_CUTOFFS = (5, 10, 20)


def _ndcg_variants(ranks: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """The usual wrong versions of NDCG@K, to recognise which mistake was made."""
    r = ranks.astype(np.float64)
    hit = r < k
    with np.errstate(divide="ignore"):
        return {
            "log2_rank": np.where(hit, 1.0 / np.log2(r), 0.0),
            "miss_scores_one": np.where(hit, 1.0 / np.log2(r + 2.0), 1.0),
            "no_reciprocal": np.where(hit, np.log2(r + 2.0), 0.0),
            "cutoff": np.where(r <= k, 1.0 / np.log2(r + 2.0), 0.0),
            "cutoff_early": np.where(r < k - 1, 1.0 / np.log2(r + 2.0), 0.0),
            "one_based": np.where(hit, 1.0 / np.log2(r + 1.0), 0.0),
            "one_based_cutoff": np.where(r <= k, 1.0 / np.log2(r + 1.0), 0.0),
            "ln": np.where(hit, 1.0 / np.log(r + 2.0), 0.0),
            "log10": np.where(hit, 1.0 / np.log10(r + 2.0), 0.0),
            "no_cutoff": 1.0 / np.log2(r + 2.0),
            "hit": hit.astype(np.float64),
            "reciprocal": np.where(hit, 1.0 / (r + 1.0), 0.0),
            **{f"fixed_k{K}": np.where(r < K, 1.0 / np.log2(r + 2.0), 0.0) for K in FIXED_CUTOFFS if K != k},
        }


NDCG_HINTS = {
    "log2_rank": ("`log2(rank)` is 0 at the top (rank 0 gives 1 / log2(0) = -0, rank 1 divides by zero): with 0-based "
                  "ranks the discount is 1 / log2(rank + 2), so that the top position scores exactly 1."),
    "miss_scores_one": "a miss (rank >= K) earns 0, not 1: only a target inside the top K contributes.",
    "no_reciprocal": ("the discount is the reciprocal, 1 / log2(rank + 2): it shrinks as the rank grows (1 at the top, "
                      "0.63 at rank 1)."),
    "cutoff": ("off by one in the cut-off: ranks are 0-based, so rank k is the (k+1)-th position and lies OUTSIDE "
               "the top K. Keep `ranks < k`, not `ranks <= k`."),
    "cutoff_early": ("off by one in the cut-off, the other way: rank k - 1 is the K-th position and lies INSIDE the "
                     "top K. With 0-based ranks the test is `ranks < k` (with 1-based positions p = rank + 1 it is "
                     "`p <= k`)."),
    "one_based": ("off by one in the discount: with 0-based ranks the top position (rank 0) must score "
                  "1 / log2(0 + 2) = 1. `log2(rank + 1)` is the formula for 1-based positions (and divides by "
                  "log2(1) = 0 at the top)."),
    "one_based_cutoff": ("two off-by-one mistakes: use `1 / log2(rank + 2)` for 0-based ranks, and `ranks < k` "
                         "for the cut-off."),
    "ln": ("wrong logarithm: NDCG discounts with log base 2 (so that the top position scores exactly 1); "
           "`torch.log` is the natural logarithm. Use `torch.log2`."),
    "log10": "wrong logarithm: NDCG discounts with log base 2, not 10. Use `torch.log2`.",
    "no_cutoff": ("the cut-off is missing: a target ranked at position k or lower (rank >= k) contributes 0 to "
                  "NDCG@K."),
    "hit": "this is HR@K (1 for a hit). NDCG also discounts a hit by its position: 1 / log2(rank + 2).",
    "reciprocal": "this is a reciprocal rank (MRR-style, 1 / (rank + 1)); NDCG uses 1 / log2(rank + 2).",
    **{f"fixed_k{K}": (f"the cut-off ignores the argument `k`: your values are those of NDCG@{K} whatever `k` is. "
                       "Use `ranks < k`, not a fixed number.") for K in FIXED_CUTOFFS},
}


def _diagnose_ndcg(case: Case, yours: Any, expected: torch.Tensor, learner: Callable[..., Any] | None = None
                   ) -> str | None:
    ranks, k = to_numpy(case.args[0]), case.args[1]
    try:
        mine = to_numpy(yours).astype(np.float64)
    except (TypeError, ValueError):
        return "return a 1-D tensor with one NDCG value per user"
    if mine.shape != ranks.shape:
        if mine.size == 1:
            return ("return one value PER USER (shape (N,)), not the average: averaging over users happens later "
                    "(metrics_from_ranks).")
        return f"the result must have the shape of `ranks`, {tuple(ranks.shape)}"
    matches = [name for name, variant in _ndcg_variants(ranks, k).items()
               if np.allclose(mine, variant, atol=1e-6, equal_nan=True) and not np.allclose(variant, to_numpy(expected))]
    if matches and learner is not None:
        # one case cannot tell the mistakes apart (e.g. rank == k, or rank k - 1 under a fixed cut-off of 5): ask
        # the learner's function about more ranks, and keep only the mistakes that explain all of them
        probe = torch.arange(max(3 * k + 3, 3 * max(FIXED_CUTOFFS)))   # past every fixed cut-off too
        try:
            theirs = to_numpy(learner(probe.clone(), k)).astype(np.float64)
        except Exception:  # noqa: BLE001 - the hint is a bonus; the failure itself is already explained
            theirs = None
        if theirs is not None and theirs.shape == probe.shape:
            variants = _ndcg_variants(probe.numpy(), k)
            matches = [m for m in matches if np.allclose(theirs, variants[m], atol=1e-6, equal_nan=True)]
    return NDCG_HINTS[matches[0]] if matches else None


@exercise_check
def check_ndcg_at_k(ndcg_at_k: Callable[..., Any]) -> None:
    """Check ``ndcg_at_k(ranks, k) -> (N,)`` against :func:`tutorial_lib.evaluation.ndcg_at_k`."""
    from ...evaluation import ndcg_at_k as reference

    def diagnose(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
        return _diagnose_ndcg(case, yours, expected, ndcg_at_k)

    check_function(ndcg_at_k, reference, ndcg_cases(), library=NDCG_LIBRARY, diagnose=diagnose,
                   atol=1e-6, rtol=1e-6,
                   hint="with 0-based ranks, NDCG@K = 1 / log2(rank + 2) if rank < K, else 0 (one value per user)")


# ------------------------------------------------------------------------------------ rank_of_target
def rank_cases(seed: int = 0, n_random: int = 8) -> list[Case]:
    """Hand-made score tables (distinct scores, ties, all equal, target first/last), then random ones."""
    cases = [
        Case((torch.tensor([[0.1, 0.9, 0.5, 0.3, 0.2]]), torch.tensor([2])), label="distinct scores: one item above"),
        Case((torch.tensor([[0.1, 0.9, 0.5, 0.3]]), torch.tensor([1])), label="the target has the best score"),
        Case((torch.tensor([[0.1, 0.9, 0.5, 0.3]]), torch.tensor([0])), label="the target has the worst score"),
        Case((torch.tensor([[0.2, 0.7, 0.7, 0.1, 0.7]]), torch.tensor([2])), label="two other items tie with the target"),
        Case((torch.zeros(2, 6), torch.tensor([0, 5])), label="all scores equal (an untrained model)"),
        Case((torch.tensor([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]]), torch.tensor([0, 0])), label="a batch of two users"),
    ]
    rng = np.random.default_rng(seed)
    for i in range(n_random):
        b, c = int(rng.integers(1, 8)), int(rng.integers(2, 30))
        scores = torch.from_numpy(rng.integers(0, 5, size=(b, c)).astype(np.float32)) if i % 2 == 0 else \
            torch.from_numpy(rng.standard_normal((b, c)).astype(np.float32))
        target = torch.from_numpy(rng.integers(0, c, size=b))
        cases.append(Case((scores, target), label="random scores with ties" if i % 2 == 0 else "random scores"))
    nan = float("nan")
    cases.append(Case((torch.tensor([[0.1, nan, 0.5], [nan, 0.2, 0.3]]), torch.tensor([1, 1])),
                      label="NaN scores (section 4): a NaN target ranks last, a NaN candidate above the target"))
    return cases


def _rank_variants(scores: np.ndarray, target: np.ndarray) -> dict[str, np.ndarray]:
    t = scores[np.arange(len(target)), target][:, None]
    ge, gt = (scores >= t).sum(1), (scores > t).sum(1)
    return {"optimistic": gt, "self": ge, "one_based": ge, "one_based_opt": gt + 1,
            "below": (scores < t).sum(1), "average": gt + ((scores == t).sum(1) - 1) / 2}


RANK_HINTS = {
    "optimistic": ("ties are counted in the target's favour (`>`). The course ranks ties pessimistically: every "
                   "OTHER candidate whose score is >= the target's score goes above it (use `>=`, then do not count "
                   "the target itself)."),
    "self": ("the target is counted against itself: with `>=` the target's own score is included. Subtract it "
             "(or exclude its column), so that the best item has rank 0."),
    "one_based_opt": "ranks are 0-based here (the top item has rank 0), and ties count against the target (`>=`).",
    "below": "you counted the candidates BELOW the target; the rank is the number of candidates ranked ABOVE it.",
    "average": ("this is the average (mid-rank) tie rule; the course uses the pessimistic rule: every other "
                "candidate with an equal score ranks above the target."),
}


TIE_ORDER_HINT = ("each of your ranks lies within the target's group of tied scores, but not always at its bottom: "
                  "ties are not broken pessimistically (a sort such as argsort or topk puts them anywhere in the "
                  "group; an average rank puts them in its middle). The course ranks ties pessimistically, without "
                  "sorting: count the OTHER candidates whose score is >= the target's.")


NAN_HINT = ("every comparison with NaN is False, so with `>=` a NaN target beats every candidate and a NaN "
            "candidate never competes (section 4); replacing NaN by -inf first hides a NaN candidate the same way. "
            "Count the candidates that are NOT BELOW the target, `~(scores < target_score)`: for numbers that is "
            "`>=`, and NaN then counts against the target")


def _diagnose_rank(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    scores, target = to_numpy(case.args[0]), to_numpy(case.args[1])
    if np.isnan(scores).any():
        return NAN_HINT
    try:
        mine = to_numpy(yours)
    except (TypeError, ValueError):
        return "return a 1-D integer tensor: one rank per row of `scores`"
    if mine.shape != target.shape:
        return f"return one rank per user: shape {tuple(target.shape)}"
    exp = to_numpy(expected)
    variants = _rank_variants(scores, target)
    optimistic, pessimistic = variants["optimistic"], variants["self"] - 1
    if (np.all((optimistic <= mine) & (mine <= pessimistic)) and not np.array_equal(mine, optimistic)
            and not np.array_equal(mine, pessimistic)):
        return TIE_ORDER_HINT
    for name, variant in variants.items():
        if np.array_equal(mine.astype(np.float64), variant.astype(np.float64)) and not np.array_equal(variant, exp):
            return RANK_HINTS["self" if name == "one_based" else name]
    return None


@exercise_check
def check_rank_of_target(rank_of_target: Callable[..., Any]) -> None:
    """Check ``rank_of_target(scores, target_index) -> (B,)`` against
    :func:`tutorial_lib.evaluation.rank_of_target` (without the ``excluded`` argument)."""
    from ...evaluation import rank_of_target as reference

    check_function(rank_of_target, lambda s, t: reference(s, t), rank_cases(), library=RANK_LIBRARY,
                   name=getattr(rank_of_target, "__name__", "rank_of_target"), diagnose=_diagnose_rank,
                   hint="rank = number of OTHER candidates whose score is not below the target's, "
                        "`~(scores < target_score)`, which is >= for numbers (0 = the top)")


def ndcg_by_hand(rank: int, k: int) -> float:
    """NDCG@K of one 0-based rank (for the notebook's worked example)."""
    return 1.0 / math.log2(rank + 2) if rank < k else 0.0


__all__ = ["check_ndcg_at_k", "check_rank_of_target", "ndcg_cases", "rank_cases", "ndcg_by_hand"]
