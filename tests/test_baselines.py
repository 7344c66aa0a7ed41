"""The popularity baseline: counts from the training split only, score shape, and the evaluator runs on it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tutorial_lib.data import SequenceDataset, leave_one_out, make_synthetic
from tutorial_lib.evaluation import EvalProtocol, Evaluator, metrics_from_ranks
from tutorial_lib.models.baselines import PopularityRecommender

N_ITEMS = 9


@pytest.fixture()
def small_split():
    # item 8 occurs only as a validation target, item 9 only as a test target; user 3 is too short to be
    # evaluated, so all of its items are training items
    ds = SequenceDataset("pop", [np.array([1, 2, 3, 8, 9]), np.array([2, 3, 4, 2, 9]), np.array([5, 1, 8, 9]),
                                 np.array([6, 3])], N_ITEMS)
    return leave_one_out(ds)


def test_counts_come_from_the_training_split_only(small_split):
    model = PopularityRecommender(small_split)
    expected = np.zeros(N_ITEMS + 1, dtype=np.float32)
    for seq in small_split.train:
        for i in seq:
            expected[i] += 1
    assert model.counts.tolist() == expected.tolist()
    # validation and test targets are never counted
    assert model.counts[8] == 0 and model.counts[9] == 0
    assert model.counts.tolist() == [0, 2, 2, 3, 1, 1, 1, 0, 0, 0]
    assert model.counts.sum() == sum(len(s) for s in small_split.train)


def test_a_buffer_and_no_parameters(small_split):
    model = PopularityRecommender(small_split)
    assert list(model.parameters()) == []
    assert "counts" in dict(model.named_buffers())
    assert set(model.state_dict()) == {"counts"}
    clone = PopularityRecommender(small_split)
    clone.load_state_dict(model.state_dict())
    assert torch.equal(clone.counts, model.counts)


def test_list_of_sequences_needs_n_items(small_split):
    model = PopularityRecommender(small_split.train, n_items=N_ITEMS)
    assert torch.equal(model.counts, PopularityRecommender(small_split).counts)
    with pytest.raises(ValueError, match="n_items"):
        PopularityRecommender(small_split.train)
    with pytest.raises(ValueError, match="item ids"):
        PopularityRecommender([np.array([1, 12])], n_items=N_ITEMS)


def test_score_shape_and_padding(small_split):
    model = PopularityRecommender(small_split)
    inputs = torch.tensor([[0, 0, 1, 2], [3, 4, 5, 6], [0, 0, 0, 7]])
    before = inputs.clone()
    scores = model.score_next(inputs)
    assert scores.shape == (3, N_ITEMS + 1) and scores.dtype == torch.float32
    assert torch.isneginf(scores[:, 0]).all()
    assert torch.equal(scores[:, 1:], model.counts[1:].expand(3, -1))
    assert torch.equal(inputs, before)
    scores[:, 1] = 99.0                      # writable, and it does not alias the buffer
    assert model.counts[1] == 2
    assert torch.equal(model(inputs), model.score_next(inputs))
    assert model.top_items(3).tolist() == [3, 1, 2]    # ties broken by the smaller id


@pytest.mark.parametrize("protocol", ["full", "full-nohist", "sampled100"])
def test_evaluator_works_unchanged(small_split, protocol):
    model = PopularityRecommender(small_split)
    ev = Evaluator(small_split, max_len=4, protocol=EvalProtocol(protocol, n_negatives=3))
    for stage in ("valid", "test"):
        ranks = ev.ranks(model, stage)
        data = ev.stage_data(stage)
        counts = model.counts.numpy()
        for row, u in enumerate(data.users):
            target = int(small_split.targets(stage)[u])
            if protocol == "full":
                cands = range(1, N_ITEMS + 1)
            elif protocol == "full-nohist":
                cands = set(range(1, N_ITEMS + 1)) - set(small_split.history(u, stage).tolist())
            else:
                cands = data.candidates[row, 1:].tolist()
            # pessimistic ties: every other candidate with a count >= the target's ranks above it
            assert ranks[row] == sum(1 for j in cands if j != target and counts[j] >= counts[target])
        m = ev.evaluate(model, stage)
        assert m["users"] == 3
        assert m["mrr"] == pytest.approx(metrics_from_ranks(ranks)["mrr"])


def test_popularity_beats_random_on_skewed_data():
    split = leave_one_out(make_synthetic(n_users=150, n_items=200, n_clusters=2, zipf_exponent=1.2, seed=1))
    m = Evaluator(split, 20, EvalProtocol("full-nohist")).evaluate(PopularityRecommender(split), "test")
    assert m["hr@10"] > 2 * 10 / 200     # random ranking: K / n_items
