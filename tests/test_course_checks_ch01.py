"""Checks of notebook 01: the references pass, stubs say 'not done', typical mistakes get their hint."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch01
from tutorial_lib.evaluation import ndcg_at_k, rank_of_target


def stub(*args):
    raise NotImplementedError()


def test_references_pass(capsys):
    ch01.check_ndcg_at_k(ndcg_at_k)
    ch01.check_rank_of_target(rank_of_target)
    assert capsys.readouterr().out.count("✅") == 2


def test_a_float32_or_numpy_solution_passes(capsys):
    def ndcg32(ranks, k):
        r = ranks.float()
        return torch.where(r < k, 1.0 / torch.log2(r + 2), torch.zeros_like(r))

    def rank_np(scores, target):
        s = scores.numpy()
        t = s[np.arange(len(s)), target.numpy()][:, None]
        with np.errstate(invalid="ignore"):
            return torch.from_numpy((~(s < t)).sum(1) - 1)

    ch01.check_ndcg_at_k(ndcg32)
    ch01.check_rank_of_target(rank_np)
    assert capsys.readouterr().out.count("✅") == 2


@pytest.mark.parametrize("check", [ch01.check_ndcg_at_k, ch01.check_rank_of_target])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


@pytest.mark.parametrize("mistake, hint", [
    (lambda r, k: torch.where(r <= k, 1.0 / torch.log2(r.double() + 2), torch.zeros(len(r), dtype=torch.float64)),
     "off by one in the cut-off"),
    (lambda r, k: torch.where(r + 1 < k, 1.0 / torch.log2(r.double() + 2), torch.zeros(len(r), dtype=torch.float64)),
     "the other way: rank k - 1"),                                   # 1-based positions, but `<` kept
    (lambda r, k: torch.where(r < k, 1.0 / torch.log2(r.double() + 1), torch.zeros(len(r), dtype=torch.float64)),
     "off by one in the discount"),
    (lambda r, k: torch.where(r < k, 1.0 / torch.log(r.double() + 2), torch.zeros(len(r), dtype=torch.float64)),
     "natural logarithm"),
    (lambda r, k: torch.where(r < k, 1.0 / torch.log10(r.double() + 2), torch.zeros(len(r), dtype=torch.float64)),
     "not 10"),
    (lambda r, k: 1.0 / torch.log2(r.double() + 2), "cut-off is missing"),
    (lambda r, k: torch.where(r < 10, 1.0 / torch.log2(r.double() + 2), torch.zeros(len(r), dtype=torch.float64)),
     "ignores the argument `k`: your values are those of NDCG@10"),
    (lambda r, k: (r < k).double(), "this is HR@K"),
    (lambda r, k: torch.where(r < k, 1.0 / torch.log2(r.double() + 2), torch.zeros(len(r), dtype=torch.float64)).mean(),
     "PER USER"),
])
def test_ndcg_mistakes_get_their_hint(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        ch01.check_ndcg_at_k(mistake)


def _count(scores, target, op):
    t = scores.gather(1, target[:, None])
    return op(scores, t).sum(1)


@pytest.mark.parametrize("mistake, hint", [
    (lambda s, t: _count(s, t, torch.gt), "pessimistically"),
    (lambda s, t: _count(s, t, torch.ge), "counted against itself"),
    (lambda s, t: _count(s, t, torch.lt), "BELOW"),
    (lambda s, t: _count(s, t, torch.ge) - 1, "NOT BELOW"),          # right for numbers, wrong for NaN
    (lambda s, t: (_count(s, t, torch.ge) - 1).clamp(min=0), "NOT BELOW"),
    (lambda s, t: (s.argsort(dim=1, descending=True, stable=True) == t[:, None]).int().argmax(1),  # sort position
     "group of tied scores"),
])
def test_rank_mistakes_get_their_hint(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        ch01.check_rank_of_target(mistake)


def test_edge_cases_are_in_the_ndcg_cases():
    cases = ch01.ndcg_cases()
    singles = {(int(c.args[0][0]), c.args[1]) for c in cases if len(c.args[0]) == 1}
    assert {(0, 10), (9, 10), (10, 10)} <= singles
    assert ch01.ndcg_by_hand(0, 10) == 1.0 and ch01.ndcg_by_hand(10, 10) == 0.0


def test_a_missing_return_is_not_blamed_on_something_else():
    def no_return(ranks, k):
        torch.where(ranks < k, 1.0 / torch.log2(ranks.double() + 2), torch.zeros(len(ranks), dtype=torch.float64))

    with pytest.raises(CheckFailed, match="return") as failure:
        ch01.check_ndcg_at_k(no_return)
    assert "per user" not in str(failure.value).lower()      # neither the diagnosis nor the generic hint


def test_integer_results_where_floats_are_expected_are_pointed_out():
    def truncated(ranks, k):
        return torch.where(ranks < k, 1.0 / torch.log2(ranks.double() + 2), torch.zeros(len(ranks))).long()

    with pytest.raises(CheckFailed, match="integer cast"):
        ch01.check_ndcg_at_k(truncated)


@pytest.mark.parametrize("wrong, hint", [
    (lambda ranks, k: torch.where(ranks < k, 1.0 / torch.log2(ranks.double()), torch.zeros((), dtype=torch.double)),
     "`log2(rank)` is 0 at the top"),
    (lambda ranks, k: torch.where(ranks < k, 1.0 / torch.log2(ranks + 2.0), torch.ones(())),
     "a miss (rank >= K) earns 0"),
    (lambda ranks, k: torch.where(ranks < k, torch.log2(ranks + 2.0), torch.zeros(())), "the discount is the reciprocal"),
])
def test_more_ndcg_mistakes_get_their_hints(wrong, hint):
    """Mistakes a learner tried in a walkthrough that got only the reminder."""
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch01.check_ndcg_at_k(wrong)
