"""Metrics and the evaluator against brute-force references (fake models with fixed scores)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tutorial_lib.data import SequenceDataset, leave_one_out, make_synthetic
from tutorial_lib.errors import ConfigError
from tutorial_lib.evaluation import EvalProtocol, Evaluator, metrics_from_ranks, ndcg_at_k, rank_of_target
from tutorial_lib.evaluation.evaluator import sample_negatives
from tutorial_lib.models import build_model

N_ITEMS, MAX_LEN = 150, 8


class TableModel(nn.Module):
    """Scores depend only on the last two items of the input (a fixed random table): fixed scores per user
    that any input width reproduces. Column 0 is deliberately finite (the evaluator must ignore it)."""

    def __init__(self, n_items: int, seed: int = 0, constant: bool = False):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        table = torch.zeros(n_items + 1, n_items + 1) if constant else torch.randn(n_items + 1, n_items + 1, generator=g)
        self.table = nn.Parameter(table, requires_grad=False)
        self.widths: list[int] = []

    def score_next(self, ids: torch.Tensor) -> torch.Tensor:
        self.widths.append(ids.shape[1])
        prev = ids[:, -2] if ids.shape[1] > 1 else torch.zeros_like(ids[:, -1])
        return self.table[ids[:, -1]] + self.table[prev]

    def reference_scores(self, history: np.ndarray) -> np.ndarray:
        t = self.table.detach().numpy()
        prev = history[-2] if len(history) > 1 else 0
        return t[history[-1]] + t[prev]


@pytest.fixture(scope="module")
def split():
    return leave_one_out(make_synthetic(n_users=120, n_items=N_ITEMS, n_clusters=3, min_len=3, max_len=20, seed=7))


def brute_rank(scores: np.ndarray, target: int, candidates) -> int:
    return sum(1 for j in candidates if j != target and scores[j] >= scores[target])


def brute_metrics(ranks, ks=(5, 10, 20)):
    out = {}
    for k in ks:
        out[f"hr@{k}"] = float(np.mean([r < k for r in ranks]))
        out[f"ndcg@{k}"] = float(np.mean([1 / math.log2(r + 2) if r < k else 0.0 for r in ranks]))
    out["mrr"] = float(np.mean([1 / (r + 1) for r in ranks]))
    return out


def reference_ranks(model, split, stage, protocol, evaluator=None):
    users = split.eval_users(stage) if evaluator is None else evaluator.stage_data(stage).users
    ranks = {}
    for row, u in enumerate(users):
        hist = split.history(u, stage)
        s = model.reference_scores(hist)
        target = int(split.targets(stage)[u])
        if protocol == "full":
            cands = range(1, split.n_items + 1)
        elif protocol == "full-nohist":
            cands = sorted(set(range(1, split.n_items + 1)) - set(hist.tolist()))
        else:
            cands = evaluator.stage_data(stage).candidates[row, 1:].tolist()
        ranks[int(u)] = brute_rank(s, target, cands)
    return ranks


# ------------------------------------------------------------------------------------------ metrics
def test_metric_definitions_on_hand_made_ranks():
    ranks = torch.tensor([0, 1, 4, 5, 9, 19, 20])
    m = metrics_from_ranks(ranks, ks=(1, 5, 10, 20))
    assert m["hr@1"] == pytest.approx(1 / 7)
    assert m["hr@5"] == pytest.approx(3 / 7)
    assert m["hr@10"] == pytest.approx(5 / 7)
    assert m["hr@20"] == pytest.approx(6 / 7)
    assert m["ndcg@1"] == pytest.approx(1 / 7)
    assert m["ndcg@5"] == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(6)) / 7)
    assert m["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(6) + 1 / math.log2(7)
                                          + 1 / math.log2(11)) / 7)
    assert m["mrr"] == pytest.approx(sum(1 / (r + 1) for r in ranks.tolist()) / 7)
    torch.testing.assert_close(ndcg_at_k(torch.tensor([0, 2, 10]), 10),
                               torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))


def test_rank_of_target_brute_force():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (50, 12), generator=g).float()    # many ties
    target = torch.randint(0, 12, (50,), generator=g)
    excluded = torch.rand(50, 12, generator=g) < 0.3
    r_all = rank_of_target(scores, target)
    r_ex = rank_of_target(scores, target, excluded)
    for b in range(50):
        t = int(target[b])
        assert r_all[b] == sum(1 for j in range(12) if j != t and scores[b, j] >= scores[b, t])
        assert r_ex[b] == sum(1 for j in range(12) if j != t and not excluded[b, j] and scores[b, j] >= scores[b, t])


def test_ties_are_pessimistic():
    scores = torch.zeros(2, 5)
    assert rank_of_target(scores, torch.tensor([1, 4])).tolist() == [4, 4]


def test_nan_scores_are_pessimistic():
    """A NaN never helps the target: a NaN competitor beats it, a NaN target is beaten by everything."""
    nan, inf = float("nan"), float("inf")
    scores = torch.tensor([[-inf, 0.1, nan, 0.3],     # the target (col 2) is NaN
                           [-inf, nan, 0.5, nan],     # two NaN competitors
                           [-inf, 0.2, 0.9, 0.4]])    # no NaN: the plain rank
    excluded = torch.tensor([[True, False, False, False]]).expand(3, -1)
    assert rank_of_target(scores, torch.tensor([2, 2, 2]), excluded).tolist() == [2, 2, 0]
    assert rank_of_target(scores, torch.tensor([2, 2, 2])).tolist() == [3, 2, 0]


# ---------------------------------------------------------------------------------------- evaluator
@pytest.mark.parametrize("protocol", ["full", "full-nohist", "sampled100"])
@pytest.mark.parametrize("stage", ["valid", "test"])
def test_evaluator_matches_brute_force(split, protocol, stage):
    model = TableModel(N_ITEMS, seed=1)
    ev = Evaluator(split, MAX_LEN, EvalProtocol(protocol), batch_size=16)
    ranks = ev.ranks(model, stage)
    ref = reference_ranks(model, split, stage, protocol, ev)
    users = ev.stage_data(stage).users
    assert sorted(users.tolist()) == split.eval_users(stage).tolist()
    assert dict(zip(users.tolist(), ranks.tolist())) == ref
    m = ev.evaluate(model, stage)
    expected = brute_metrics(list(ref.values()))
    for k, v in expected.items():
        assert m[k] == pytest.approx(v, abs=1e-12)
    assert m["users"] == len(users)
    assert max(model.widths) <= MAX_LEN and min(model.widths) < MAX_LEN    # batches are trimmed


class RecordingModel(nn.Module):
    """Records the item windows and user ids the evaluator passes (it asks for users like RKSA does)."""

    needs_users = True

    def __init__(self, n_items: int):
        super().__init__()
        self.n_items = n_items
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def score_next(self, ids: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        self.calls.append((ids.clone(), users.clone()))
        return torch.zeros(ids.shape[0], self.n_items + 1)


@pytest.mark.parametrize("stage", ["valid", "test"])
def test_each_user_is_scored_from_the_tail_of_its_own_history(split, stage):
    """The window a user is scored from is the last max_len items of its history for that stage, left-padded,
    trimmed to the batch's longest, and passed with that user's id (the fake model above sees only two items)."""
    ev = Evaluator(split, MAX_LEN, EvalProtocol("full"), batch_size=16)
    model = RecordingModel(N_ITEMS)
    ev.ranks(model, stage)
    users = torch.cat([u for _, u in model.calls]).tolist()
    assert users == ev.stage_data(stage).users.tolist()
    windows = [row for ids, _ in model.calls for row in ids.tolist()]
    for u, row in zip(users, windows):
        tail = split.history(u, stage)[-MAX_LEN:].tolist()
        assert row[len(row) - len(tail):] == tail and not any(row[:len(row) - len(tail)])
    for ids, _ in model.calls:                     # trimmed: the batch's longest window fills the width
        assert (ids[:, 0] != 0).any()


@pytest.mark.parametrize("protocol", ["full", "full-nohist", "sampled100"])
def test_constant_model_gets_the_worst_rank(split, protocol):
    ev = Evaluator(split, MAX_LEN, EvalProtocol(protocol))
    ranks = ev.ranks(TableModel(N_ITEMS, constant=True), "test")
    data = ev.stage_data("test")
    if protocol == "full":
        assert (ranks == N_ITEMS - 1).all()
    elif protocol == "sampled100":
        assert (ranks == 100).all()
    else:
        expect = [N_ITEMS - 1 - len(set(split.history(u, "test").tolist()) - {int(split.test_target[u])})
                  for u in data.users]
        assert ranks.tolist() == expect
    m = ev.evaluate(TableModel(N_ITEMS, constant=True), "test")
    assert m["hr@20"] == 0.0 and m["ndcg@20"] == 0.0


def test_nohist_never_excludes_the_target():
    # user 0 re-consumes item 2: the validation target is in the history
    ds = SequenceDataset("repeat", [np.array([1, 2, 3, 2, 5]), np.array([4, 6, 7, 8])], 10)
    split = leave_one_out(ds)
    assert split.valid_target[0] == 2 and 2 in split.history(0, "valid")
    model = TableModel(10, seed=0, constant=True)
    with torch.no_grad():
        model.table[3, 2] = 5.0          # after ...3 the target 2 scores highest
        model.table[3, 1] = 9.0          # a history item scores even higher: it must be ignored
    ev = Evaluator(split, 4, EvalProtocol("full-nohist"))
    ranks = dict(zip(ev.stage_data("valid").users.tolist(), ev.ranks(model, "valid").tolist()))
    assert ranks[0] == 0
    full = Evaluator(split, 4, EvalProtocol("full"))
    assert dict(zip(full.stage_data("valid").users.tolist(), full.ranks(model, "valid").tolist()))[0] == 1


def test_sampled_candidates(split):
    ev = Evaluator(split, MAX_LEN, EvalProtocol("sampled100", seed=3))
    for stage in ("valid", "test"):
        data = ev.stage_data(stage)
        cands = data.candidates
        assert cands.shape == (len(data.users), 101)
        assert torch.equal(cands[:, 0], data.targets)
        for row, u in enumerate(data.users):
            neg = cands[row, 1:].tolist()
            assert len(set(neg)) == 100
            everything = set(split.history(u, "test").tolist()) | {int(split.test_target[u])}
            assert not set(neg) & everything
            assert min(neg) >= 1 and max(neg) <= N_ITEMS
    # the same across evaluators with the same seed; another seed draws others
    again = Evaluator(split, MAX_LEN, EvalProtocol("sampled100", seed=3))
    assert torch.equal(again.stage_data("test").candidates, ev.stage_data("test").candidates)
    other = Evaluator(split, MAX_LEN, EvalProtocol("sampled100", seed=4))
    assert not torch.equal(other.stage_data("test").candidates, ev.stage_data("test").candidates)


def test_validation_and_test_draw_different_negatives(split):
    """Selecting on validation must not see the test's candidates: a user's negatives differ between the stages
    (and the test draw is the one earlier versions made, so kept models' test numbers still reproduce)."""
    ev = Evaluator(split, MAX_LEN, EvalProtocol("sampled100", seed=3))
    valid, test = ev.stage_data("valid"), ev.stage_data("test")
    negatives = {stage: {int(u): set(d.candidates[row, 1:].tolist()) for row, u in enumerate(d.users)}
                 for stage, d in (("valid", valid), ("test", test))}
    shared = [len(negatives["valid"][u] & negatives["test"][u]) for u in negatives["test"] if u in negatives["valid"]]
    assert shared and max(shared) < 100
    # about what two independent draws of 100 from a user's allowed items share: 100^2 / allowed
    expected = [100 * 100 / (N_ITEMS - len(split.history(u, "test")) - 1) for u in negatives["test"] if u in negatives["valid"]]
    assert abs(sum(shared) - sum(expected)) / len(shared) < 3


def test_sampled_negatives_can_follow_sasrec_code(split):
    """``negatives_exclude="train"``: negatives avoid only the training items and the target, so at test time
    the validation item (the last input item) is sometimes a negative; the default never draws it."""
    ours = Evaluator(split, MAX_LEN, EvalProtocol("sampled100", seed=3))
    tf = Evaluator(split, MAX_LEN, EvalProtocol("sampled100", seed=3, negatives_exclude="train"))
    drawn = {}
    for stage in ("valid", "test"):
        data = tf.stage_data(stage)
        assert (data.users == ours.stage_data(stage).users).all()
        for row, u in enumerate(data.users.tolist()):
            neg = set(data.candidates[row, 1:].tolist())
            assert len(neg) == 100 and int(data.candidates[row, 0]) == int(data.targets[row])
            assert not neg & (set(split.train[u].tolist()) | {int(data.targets[row])})
            assert not set(ours.stage_data(stage).candidates[row, 1:].tolist()) & {
                int(split.valid_target[u]), int(split.test_target[u])}
            if stage == "test":
                drawn[u] = int(split.valid_target[u]) in neg
    assert 0 < sum(drawn.values()) < len(drawn)   # 100 of the ~140 items outside the training items
    # a model that scores the last input item far above everything loses each user whose validation item is drawn
    model = TableModel(N_ITEMS, seed=0)
    with torch.no_grad():
        model.table.diagonal().add_(100.0)
    ranks = dict(zip(tf.stage_data("test").users.tolist(), tf.ranks(model, "test").tolist()))
    for u, was_drawn in drawn.items():
        if was_drawn:
            assert ranks[u] >= 1
    assert ranks == reference_ranks(model, split, "test", "sampled100", tf)
    with pytest.raises(ConfigError, match="negatives_exclude"):
        EvalProtocol("sampled100", negatives_exclude="valid")


def test_sample_negatives():
    rng = np.random.default_rng(0)
    neg = sample_negatives(rng, 30, np.array([1, 2, 3, 3]), 27)
    assert sorted(neg.tolist()) == list(range(4, 31))
    with pytest.raises(ValueError, match="cannot draw"):
        sample_negatives(rng, 30, np.array([1, 2, 3]), 28)


def test_max_users_subsample(split):
    n_eval = len(split.eval_users("test"))
    ev = Evaluator(split, MAX_LEN, EvalProtocol(max_users=30, seed=5))
    users = ev.stage_data("test").users
    assert len(users) == 30 and len(set(users.tolist())) == 30
    assert set(users.tolist()) <= set(split.eval_users("test").tolist())
    assert sorted(Evaluator(split, MAX_LEN, EvalProtocol(max_users=30, seed=5)).stage_data("test").users.tolist()) \
        == sorted(users.tolist())
    assert sorted(Evaluator(split, MAX_LEN, EvalProtocol(max_users=30, seed=6)).stage_data("test").users.tolist()) \
        != sorted(users.tolist())
    assert len(Evaluator(split, MAX_LEN, EvalProtocol(max_users=10_000)).stage_data("test").users) == n_eval
    assert Evaluator(split, MAX_LEN, EvalProtocol(max_users=30, seed=5)).evaluate(TableModel(N_ITEMS), "test")[
        "users"] == 30


@pytest.mark.parametrize("protocol", ["full", "full-nohist", "sampled100"])
def test_batch_size_does_not_change_results(split, protocol):
    model = TableModel(N_ITEMS, seed=4)
    results = [Evaluator(split, MAX_LEN, EvalProtocol(protocol), batch_size=bs).ranks(model, "test")
               for bs in (1, 7, None)]
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


def test_batch_size_with_a_real_model(split):
    torch.manual_seed(0)
    model = build_model("sasrec", N_ITEMS, MAX_LEN, d_model=16, n_layers=1).train()
    small, large = Evaluator(split, MAX_LEN, batch_size=5), Evaluator(split, MAX_LEN, batch_size=500)
    r1, r2 = small.ranks(model, "valid"), large.ranks(model, "valid")
    assert int((r1 != r2).sum()) <= 1          # batched matmuls may round a near-tie differently, no more
    m1, m2 = small.evaluate(model, "valid"), large.evaluate(model, "valid")
    for k in m1:
        assert m1[k] == pytest.approx(m2[k], abs=1.0 / m1["users"])
    assert model.training                     # the evaluator restores the mode it found
    small.evaluate(model.eval(), "valid")
    assert not model.training                 # either mode


def test_protocol_validation():
    with pytest.raises(ConfigError, match="full-nohist"):
        EvalProtocol("bogus")
    with pytest.raises(ConfigError):
        EvalProtocol(max_users=0)
    with pytest.raises(ConfigError):
        EvalProtocol(n_negatives=0)


def test_a_model_that_is_not_a_module_gets_a_clear_error(split):
    class Plain:  # what a learner might write from "the evaluator needs score_next"
        def score_next(self, item_ids):
            return torch.zeros(len(item_ids), N_ITEMS + 1)

    with pytest.raises(TypeError, match="torch.nn.Module.*score_next.*got Plain"):
        Evaluator(split, MAX_LEN).evaluate(Plain(), "test")
    with pytest.raises(TypeError, match="score_next.*got Linear"):
        Evaluator(split, MAX_LEN).ranks(nn.Linear(2, 2), "valid")


def test_batch_scores_leaves_the_callers_grad_mode_alone(split):
    model = TableModel(N_ITEMS)
    evaluator = Evaluator(split, MAX_LEN, batch_size=8)
    for rows, scores in evaluator.batch_scores(model, "valid"):
        assert not torch.is_inference_mode_enabled() and scores.shape == (rows.stop - rows.start, N_ITEMS + 1)
        break
    assert not torch.is_inference_mode_enabled()
