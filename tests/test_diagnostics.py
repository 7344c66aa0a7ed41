"""The repeat diagnosis against a brute-force reference (fake models with fixed scores)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tutorial_lib.data import leave_one_out, make_synthetic
from tutorial_lib.errors import ConfigError
from tutorial_lib.evaluation import EvalProtocol, Evaluator
from tutorial_lib.evaluation.diagnostics import last_item_diagnosis

N_ITEMS, MAX_LEN = 120, 8


class LastItemModel(nn.Module):
    """Random scores per last item (a fixed table) plus ``boost`` on the last item itself."""

    def __init__(self, n_items: int, boost: float, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = nn.Parameter(torch.randn(n_items + 1, n_items + 1, generator=g), requires_grad=False)
        self.boost = boost

    def score_next(self, ids: torch.Tensor) -> torch.Tensor:
        last = ids[:, -1]
        scores = self.table[last].clone()
        scores[torch.arange(len(last)), last] += self.boost
        return scores

    def reference(self, history: np.ndarray) -> np.ndarray:
        scores = self.table.detach().numpy()[history[-1]].copy()
        scores[history[-1]] += self.boost
        return scores


@pytest.fixture(scope="module")
def split():
    return leave_one_out(make_synthetic(n_users=90, n_items=N_ITEMS, n_clusters=3, min_len=3, max_len=15, seed=3))


def brute_force(model: LastItemModel, split, stage: str, k: int = 10) -> dict[str, float]:
    last_ranks, full, without, repeats = [], [], [], []
    for u in split.eval_users(stage):
        history = split.history(u, stage)
        target = int(split.targets(stage)[u])
        scores = model.reference(history)
        last = int(history[-1])
        items = range(1, N_ITEMS + 1)
        last_ranks.append(1 + sum(1 for j in items if j != last and scores[j] >= scores[last]))
        full.append(sum(1 for j in items if j != target and scores[j] >= scores[target]))
        without.append(sum(1 for j in items if j not in (target, last) and scores[j] >= scores[target]))
        repeats.append(last == target)
    ndcg = lambda ranks: float(np.mean([1 / math.log2(r + 2) if r < k else 0.0 for r in ranks]))  # noqa: E731
    return {"last_item_median_rank": float(sorted(last_ranks)[(len(last_ranks) - 1) // 2]),  # lower median
            f"last_item_in_top{k}": float(np.mean([r <= k for r in last_ranks])),
            "target_is_last_item": float(np.mean(repeats)),
            f"hr@{k}": float(np.mean([r < k for r in full])), f"ndcg@{k}": ndcg(full),
            f"hr@{k}_without_last": float(np.mean([r < k for r in without])), f"ndcg@{k}_without_last": ndcg(without)}


@pytest.mark.parametrize("boost", [0.0, 3.0, 100.0])
@pytest.mark.parametrize("stage", ["valid", "test"])
def test_matches_brute_force(split, boost, stage):
    model = LastItemModel(N_ITEMS, boost)
    got = last_item_diagnosis(Evaluator(split, MAX_LEN, batch_size=16), model, stage)
    want = brute_force(model, split, stage)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    assert got["users"] == len(split.eval_users(stage))


def test_a_model_that_repeats_the_last_item_loses_a_top_slot(split):
    model = LastItemModel(N_ITEMS, boost=100.0)
    got = last_item_diagnosis(Evaluator(split, MAX_LEN), model, "test")
    assert got["last_item_median_rank"] == 1.0 and got["last_item_in_top10"] == 1.0
    assert got["ndcg@10_without_last"] > got["ndcg@10"]


@pytest.mark.parametrize("protocol", ["sampled100", "full-nohist"])
def test_needs_the_full_protocol(split, protocol):
    with pytest.raises(ConfigError, match="'full' protocol"):
        last_item_diagnosis(Evaluator(split, MAX_LEN, EvalProtocol(protocol, n_negatives=20)), LastItemModel(N_ITEMS, 0.0))
