"""Leave-one-out split and training batches: invariants and no leakage of held-out items."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tutorial_lib.data import SequenceDataset, TrainingWindows, iterate_batches, leave_one_out, left_pad
from tutorial_lib.data.batching import batch_order, eval_inputs
from tutorial_lib.errors import ConfigError


@pytest.fixture(scope="module")
def varied():
    """Users of every length from 1 to 25 (some shorter, some longer than the window)."""
    rng = np.random.default_rng(0)
    seqs = [rng.permutation(np.arange(1, 41))[:n] for n in list(range(1, 26)) * 4]
    return SequenceDataset("varied", seqs, 40)


def test_leave_one_out_invariants(varied):
    split = leave_one_out(varied)
    assert split.n_users == varied.n_users
    for u, seq in enumerate(varied.sequences):
        if len(seq) < 3:
            assert split.valid_target[u] == 0 and split.test_target[u] == 0
            np.testing.assert_array_equal(split.train[u], seq)
            assert u not in split.eval_users("valid") and u not in split.eval_users("test")
        else:
            rebuilt = np.concatenate([split.train[u], [split.valid_target[u], split.test_target[u]]])
            np.testing.assert_array_equal(rebuilt, seq)
            assert u in split.eval_users("valid") and u in split.eval_users("test")
            # validation input excludes the test item; the test input is train + valid
            np.testing.assert_array_equal(split.history(u, "valid"), seq[:-2])
            np.testing.assert_array_equal(split.history(u, "test"), seq[:-1])
    assert len(split.eval_users("test")) == sum(len(s) >= 3 for s in varied.sequences)
    with pytest.raises(ValueError):
        split.targets("train")


def test_left_pad():
    out = left_pad([np.array([1, 2, 3, 4]), np.array([5]), np.array([], dtype=np.int64)], 3)
    np.testing.assert_array_equal(out, [[2, 3, 4], [0, 0, 5], [0, 0, 0]])
    np.testing.assert_array_equal(eval_inputs([np.array([7, 8])], 4).numpy(), [[0, 0, 7, 8]])


def _epoch(windows, bucketing, seed=0, batch_size=7):
    return list(iterate_batches(windows, batch_size, torch.Generator().manual_seed(seed), bucketing=bucketing,
                                bucket_span=2))


@pytest.mark.parametrize("bucketing", [False, True])
@pytest.mark.parametrize("max_len", [4, 30])
def test_no_leakage_and_targets(varied, bucketing, max_len):
    split = leave_one_out(varied)
    windows = TrainingWindows.from_train(split.train, max_len)
    batches = _epoch(windows, bucketing)
    seen_users = []
    for b in batches:
        assert b.inputs.shape == b.targets.shape
        if not bucketing:
            assert b.inputs.shape[1] == max_len
        # targets are the inputs shifted by one, zero where the input is padding
        assert (b.targets[b.inputs.eq(0)] == 0).all()
        assert torch.equal(b.targets[:, :-1], b.inputs[:, 1:] * b.inputs[:, :-1].ne(0))
        assert (b.targets[b.inputs.ne(0)] > 0).all()
        for row, u in enumerate(b.users.tolist()):
            seen_users.append(u)
            seq = varied.sequences[u]
            inp = b.inputs[row][b.inputs[row] > 0].numpy()
            tgt = b.targets[row][b.targets[row] > 0].numpy()
            # everything this user sees is a contiguous, most recent stretch of its training items
            train = split.train[u]
            np.testing.assert_array_equal(inp, train[-len(inp) - 1:-1])
            np.testing.assert_array_equal(tgt, train[len(train) - len(tgt):])
            if len(seq) >= 3:
                held_out = set(seq[-2:].tolist())
                assert not held_out & set(inp.tolist()), f"user {u}: held-out item used as input"
                assert not held_out & set(tgt.tolist()), f"user {u}: held-out item used as target"
            assert len(inp) == min(len(train) - 1, max_len)
    # every window exactly once per epoch; users with < 2 training items have no window
    assert sorted(seen_users) == sorted(windows.users.tolist())
    assert len(seen_users) == len(set(seen_users))
    assert set(seen_users) == {u for u, s in enumerate(split.train) if len(s) >= 2}
    assert sum(int(b.targets.ne(0).sum()) for b in batches) == windows.n_targets()


def test_bucketing_trims_and_keeps_targets(varied):
    split = leave_one_out(varied)
    windows = TrainingWindows.from_train(split.train, 30)
    plain = {int(u): (i, t) for b in _epoch(windows, False) for u, i, t in zip(b.users, b.inputs, b.targets)}
    bucketed = _epoch(windows, True)
    widths = [b.inputs.shape[1] for b in bucketed]
    assert max(widths) <= 30 and min(widths) < 30       # some batches really are trimmed
    for b in bucketed:
        # trimmed to the longest window of the batch, no wasted column
        assert b.inputs[:, 0].ne(0).any()
        for u, i, t in zip(b.users.tolist(), b.inputs, b.targets):
            pi, pt = plain[u]
            w = i.shape[0]
            assert torch.equal(pi[-w:], i) and torch.equal(pt[-w:], t)
            assert (pi[:-w] == 0).all() and (pt[:-w] == 0).all()
    # bucketing groups similar lengths: the mean within-batch spread is smaller than without it
    spread = lambda bs: np.mean([float(b.inputs.ne(0).sum(1).max() - b.inputs.ne(0).sum(1).min()) for b in bs])
    assert spread(bucketed) < spread(_epoch(windows, False))


@pytest.mark.parametrize("bucketing", [False, True])
def test_shuffling_is_seeded(varied, bucketing):
    windows = TrainingWindows.from_train(leave_one_out(varied).train, 10)
    order = lambda seed: torch.cat([b.users for b in _epoch(windows, bucketing, seed)]).tolist()
    assert order(1) == order(1)
    assert order(1) != order(2)


def test_bucketing_sorts_spans_of_the_shuffled_order_and_shuffles_the_batches(varied):
    """Each batch comes from one span of ``batch_size x bucket_span`` windows of the epoch's permutation, sorted
    by length inside the span, and the batches are shuffled again (not served span after span, longest first)."""
    windows = TrainingWindows.from_train(leave_one_out(varied).train, 10)
    batches = batch_order(windows, 7, torch.Generator().manual_seed(5), bucketing=True, bucket_span=2)
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(5))   # the same first draw
    spans = [set(order[s:s + 14].tolist()) for s in range(0, len(order), 14)]
    span_of = [next(i for i, span in enumerate(spans) if set(b.tolist()) <= span) for b in batches]
    for i, span in enumerate(spans):
        mine = [b for b, s in zip(batches, span_of) if s == i]
        lengths = sorted((windows.lengths[b].tolist() for b in mine), key=sum, reverse=True)
        assert all(min(x) >= max(y) for x, y in zip(lengths, lengths[1:]))      # sorted inside the span
    assert span_of != sorted(span_of)


def test_bad_settings(varied):
    split = leave_one_out(varied)
    with pytest.raises(ConfigError):
        TrainingWindows.from_train(split.train, 1)
    windows = TrainingWindows.from_train(split.train, 5)
    with pytest.raises(ConfigError):
        next(iterate_batches(windows, 0, torch.Generator()))
    with pytest.raises(ConfigError, match="at least 2"):
        TrainingWindows.from_train([np.array([1]), np.array([2])], 5)


def test_random_windows_are_uniform_contiguous_training_windows(varied):
    """``resampled``: a long history gets one of its ``max_len + 1``-item windows, each about equally often;
    a history that fits keeps its window; no validation or test item ever enters; the draw follows the seed."""
    split = leave_one_out(varied)
    max_len = 4
    windows = TrainingWindows.from_train(split.train, max_len)
    assert windows.n_history_targets() == sum(len(t) - 1 for t in split.train if len(t) >= 2)
    assert windows.n_history_targets() > windows.n_targets()
    g = torch.Generator().manual_seed(0)
    draws = [windows.resampled(g) for _ in range(600)]
    for row, user in enumerate(windows.users.tolist()):
        history = split.train[user]
        if len(history) <= max_len + 1:
            assert all(torch.equal(d.windows[row], windows.windows[row]) for d in draws)
            continue
        seen = {}
        for d in draws:  # each draw is a contiguous slice of the training history (so no held-out item)
            w = d.windows[row].numpy()
            start = next(i for i in range(len(history) - max_len) if np.array_equal(history[i:i + max_len + 1], w))
            seen[start] = seen.get(start, 0) + 1
        n_windows = len(history) - max_len
        assert set(seen) == set(range(n_windows))                    # every window is drawn, the oldest too
        assert max(seen.values()) < 3 * 600 / n_windows               # and none dominates
    assert all(torch.equal(d.lengths, windows.lengths) for d in draws)   # every window is still full
    again = windows.resampled(torch.Generator().manual_seed(0))
    assert torch.equal(again.windows, draws[0].windows)


def test_random_windows_need_the_histories():
    bare = TrainingWindows(torch.tensor([0]), torch.tensor([[0, 1, 2]]), torch.tensor([1]), 2)
    with pytest.raises(ConfigError, match="from_train"):
        bare.resampled(torch.Generator())
