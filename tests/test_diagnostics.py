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


# ----------------------------------------------------------------------------- at the training positions
class EchoModel(nn.Module):
    """A next-item model with random scores plus ``boost`` on the item just read (its id rides along in the last
    coordinate of the hidden state, so :meth:`score` can find it)."""

    objective = "next"

    def __init__(self, n_items: int, boost: float, d: int = 6, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = nn.Parameter(torch.randn(n_items + 1, d, generator=g))
        self.boost = boost

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.table[ids], ids[..., None].float()], dim=-1)

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        scores = hidden[..., :-1] @ self.table.t()
        scores = scores + self.boost * nn.functional.one_hot(hidden[..., -1].long(), len(self.table))
        scores[..., 0] = float("-inf")
        return scores

    def reference(self, seen: int) -> np.ndarray:
        """Scores of items ``1..n`` after reading ``seen``, in float64."""
        table = self.table.detach().double().numpy()
        scores = table[seen] @ table.T
        scores[seen] += self.boost
        return scores[1:]


def brute_force_input(model: EchoModel, windows, k: int = 10) -> dict[str, float]:
    ranks, probs, costs, losses, repeats = [], [], [], [], []
    for window in windows.windows.numpy():
        for seen, target in zip(window[:-1], window[1:]):
            if seen == 0 or target == 0:
                continue
            scores = model.reference(seen)
            top = scores.max()
            log_p = scores - top - np.log(np.exp(scores - top).sum())
            losses.append(-log_p[target - 1])
            repeats.append(seen == target)
            if seen == target:
                continue
            ranks.append(1 + sum(1 for j in range(len(scores)) if j != seen - 1 and scores[j] >= scores[seen - 1]))
            probs.append(np.exp(log_p[seen - 1]))
            rest = np.delete(log_p, seen - 1)
            costs.append(-(rest.max() + np.log(np.exp(rest - rest.max()).sum())))   # -log(1 - p), stably
    return {"positions": float(len(repeats)), "input_is_target": float(np.mean(repeats)),
            "input_item_median_rank": float(sorted(ranks)[(len(ranks) - 1) // 2]),
            f"input_item_in_top{k}": float(np.mean([r <= k for r in ranks])),
            "input_item_probability": float(np.mean(probs)), "input_item_loss": float(np.mean(costs)),
            "loss": float(np.mean(losses))}


def _windows_with_a_repeat(split):
    from tutorial_lib.data.batching import TrainingWindows

    train = [s.copy() for s in split.train]
    train[0] = np.concatenate([train[0], train[0][-1:]])          # a true repeat at the end of user 0
    return TrainingWindows.from_train(train, MAX_LEN)


@pytest.mark.parametrize("boost", [0.0, 3.0, 40.0])
def test_input_item_diagnosis_matches_brute_force(split, boost):
    from tutorial_lib.evaluation.diagnostics import input_item_diagnosis

    windows = _windows_with_a_repeat(split)
    model = EchoModel(N_ITEMS, boost)
    got = input_item_diagnosis(model, windows, batch_size=7)
    want = brute_force_input(model, windows)
    assert want["input_is_target"] > 0                             # the repeat is counted, not ranked
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-9), key


def test_input_item_diagnosis_of_a_strong_echo_and_of_a_trained_model(split):
    from tutorial_lib.data.batching import TrainingWindows
    from tutorial_lib.evaluation.diagnostics import input_item_diagnosis
    from tutorial_lib.models import build_model

    windows = TrainingWindows.from_train(split.train, MAX_LEN)
    echo = input_item_diagnosis(EchoModel(N_ITEMS, boost=100.0), windows)
    assert echo["input_item_median_rank"] == 1.0 and echo["input_item_in_top10"] == 1.0
    assert echo["input_item_probability"] > 0.99 and echo["input_item_loss"] > 20.0
    model = build_model("sasrec", n_items=N_ITEMS, max_len=MAX_LEN, d_model=8).train()
    got = input_item_diagnosis(model, windows)
    assert model.training                                          # the caller's mode is restored
    assert got["positions"] == windows.n_targets() and 1 <= got["input_item_median_rank"] <= N_ITEMS
    assert 0 < got["input_item_probability"] < 1 and got["loss"] == pytest.approx(math.log(N_ITEMS), rel=0.2)


def test_input_item_diagnosis_needs_a_next_item_model(split):
    from tutorial_lib.data.batching import TrainingWindows
    from tutorial_lib.evaluation.diagnostics import input_item_diagnosis
    from tutorial_lib.models import build_model

    windows = TrainingWindows.from_train(split.train, MAX_LEN)
    with pytest.raises(ConfigError, match="objective 'next'"):
        input_item_diagnosis(build_model("bert4rec", n_items=N_ITEMS, max_len=MAX_LEN, d_model=8), windows)
    with pytest.raises(ConfigError, match="batch_size"):
        input_item_diagnosis(EchoModel(N_ITEMS, 0.0), windows, batch_size=0)
