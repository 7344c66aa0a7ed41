"""Locker's short-term experiment (Section 2.3, Figure 2): the data transform, the runner and the mean map."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tutorial_lib.data import SequenceDataset, leave_one_out, make_synthetic
from tutorial_lib.errors import ConfigError
from tutorial_lib.experiments.short_term import (
    TABLE_COLUMNS,
    average_attention_map,
    kept_length,
    run_short_term,
    short_term_dataset,
)
from tutorial_lib.models import build_model


@pytest.fixture(scope="module")
def data():
    # lengths 10..40, 200 items: room for random items that the kept part does not contain
    return make_synthetic(n_users=40, n_items=200, n_clusters=5, min_len=10, max_len=40, seed=1)


def test_kept_length_follows_x_with_bounds():
    assert kept_length(100, 0.2) == 20
    assert kept_length(101, 0.2) == 21          # ceil
    assert kept_length(12, 0.2) == 5            # at least min_keep
    assert kept_length(4, 0.2) == 4             # never more than the sequence
    assert kept_length(100, 0.2, max_keep=15) == 15
    assert kept_length(100, 1.0) == 100


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 1.0])
def test_counts_and_the_kept_part_come_last(data, alpha):
    short = short_term_dataset(data, keep=0.3, alpha=alpha, seed=0)
    info = short.meta["short_term"]
    for u, (orig, new) in enumerate(zip(data.sequences, short.sequences)):
        k = kept_length(len(orig), 0.3)
        n_random = int(round(alpha * k))
        assert info["kept"][u] == k and info["inserted"][u] == n_random
        assert len(new) == k + n_random
        np.testing.assert_array_equal(new[n_random:], orig[-k:])     # the kept part, unchanged, at the end
    assert short.n_items == data.n_items and short.item_titles is data.item_titles


def test_validation_and_test_targets_are_the_real_last_two_items(data):
    orig = leave_one_out(data)
    split = leave_one_out(short_term_dataset(data, keep=0.2, alpha=0.8, seed=3))
    np.testing.assert_array_equal(split.valid_target, orig.valid_target)
    np.testing.assert_array_equal(split.test_target, orig.test_target)
    assert (split.test_target > 0).all()                              # every user is still evaluated


def test_random_items_are_inserted_before_the_kept_part_and_avoid_it(data):
    short = short_term_dataset(data, keep=0.25, alpha=1.0, seed=0)
    n_random = short.meta["short_term"]["inserted"]
    assert n_random.sum() > 0
    for new, r in zip(short.sequences, n_random):
        noise, kept = new[:r], new[r:]
        assert len(np.unique(noise)) == len(noise)                    # distinct
        assert not np.isin(noise, kept).any()                         # unrelated to the kept items
        assert ((noise >= 1) & (noise <= data.n_items)).all()


def test_uniform_over_the_catalogue_without_avoid_kept():
    data = SequenceDataset("toy", [np.arange(1, 31)] * 200, n_items=50)
    short = short_term_dataset(data, keep=0.2, alpha=1.0, avoid_kept=False, seed=0)
    noise = np.concatenate([s[: r] for s, r in zip(short.sequences, short.meta["short_term"]["inserted"])])
    counts = np.bincount(noise, minlength=51)[1:]
    assert len(noise) == 200 * 6 and (counts > 0).mean() > 0.95      # the whole catalogue is used


def test_deterministic_given_the_seed(data):
    a = short_term_dataset(data, keep=0.2, alpha=0.5, seed=7)
    b = short_term_dataset(data, keep=0.2, alpha=0.5, seed=7)
    c = short_term_dataset(data, keep=0.2, alpha=0.5, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a.sequences, b.sequences))
    assert not all(np.array_equal(x, y) for x, y in zip(a.sequences, c.sequences))


def test_alpha_zero_only_truncates(data):
    short = short_term_dataset(data, keep=0.5, alpha=0.0, seed=0)
    for orig, new in zip(data.sequences, short.sequences):
        np.testing.assert_array_equal(new, orig[-kept_length(len(orig), 0.5):])
    assert (short.meta["short_term"]["inserted"] == 0).all()
    full = short_term_dataset(data, keep=1.0, alpha=0.0)
    assert all(np.array_equal(x, y) for x, y in zip(full.sequences, data.sequences))


def test_max_keep_and_min_keep(data):
    short = short_term_dataset(data, keep=0.9, alpha=0.5, max_keep=6, seed=0)
    assert (short.meta["short_term"]["kept"] == 6).all() and (short.lengths() == 9).all()
    tiny = SequenceDataset("tiny", [np.array([1, 2, 3]), np.arange(1, 21)], n_items=30)
    kept = short_term_dataset(tiny, keep=0.1, min_keep=5).meta["short_term"]["kept"]
    assert kept.tolist() == [3, 5]


@pytest.mark.parametrize("kwargs, match", [(dict(keep=0.0), "keep"), (dict(keep=1.5), "keep"),
                                           (dict(alpha=-0.1), "alpha"), (dict(min_keep=2), "min_keep"),
                                           (dict(min_keep=5, max_keep=4), "max_keep")])
def test_bad_settings_are_explained(data, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        short_term_dataset(data, **kwargs)


def test_too_many_random_items_for_a_small_catalogue():
    data = SequenceDataset("small", [np.arange(1, 11)], n_items=12)
    with pytest.raises(ConfigError, match="avoid_kept"):
        short_term_dataset(data, keep=1.0, alpha=0.5)


def test_runner_returns_a_tidy_table(data):
    table, models = run_short_term(
        data, alphas=(0.0, 0.5), models=("sasrec", "locker-win"), keep=0.5, max_len=12, epochs=1, batch_size=32,
        model_options=dict(d_model=8, n_heads=2, n_layers=1), device="cpu", return_models=True, verbose=False)
    assert list(table.columns) == list(TABLE_COLUMNS)
    assert len(table) == 4
    assert table[["alpha", "model"]].values.tolist() == [[0.0, "sasrec"], [0.0, "locker-win"],
                                                         [0.5, "sasrec"], [0.5, "locker-win"]]
    assert table["ndcg@20"].between(0, 1).all() and table["hr@20"].between(0, 1).all()
    assert (table["protocol"] == "full-nohist").all() and (table["users"] == data.n_users).all()
    assert table.loc[table.alpha == 0.5, "avg_len"].iloc[0] > table.loc[table.alpha == 0.0, "avg_len"].iloc[0]
    assert set(models) == {(0.0, "sasrec"), (0.0, "locker-win"), (0.5, "sasrec"), (0.5, "locker-win")}


def test_runner_per_model_options_and_bert4rec(data):
    table = run_short_term(
        data, alphas=(0.2,), models=("bert4rec", "bert4rec-locker-conv"), keep=0.5, max_len=12, epochs=1,
        model_options=dict(d_model=8, n_heads=2, n_layers=1), options_by_model={"bert4rec-locker-conv": {"window": 2}},
        mask_prob=0.3, device="cpu", verbose=False, train_verbose=False)
    assert table["model"].tolist() == ["bert4rec", "bert4rec-locker-conv"]
    assert np.isfinite(table["ndcg@20"]).all()


def _model(name: str, max_len: int = 12):
    torch.manual_seed(0)
    return build_model(name, n_items=200, max_len=max_len, d_model=8, n_layers=2, n_heads=2).eval()


def test_average_attention_map_causal(data):
    histories = [s[:-1] for s in data.sequences]
    avg, count = average_attention_map(_model("sasrec"), histories, length=8, n_samples=15, return_count=True)
    assert avg.shape == (8, 8) and count == 15
    np.testing.assert_allclose(avg.sum(1), 1.0, atol=1e-5)            # rows are averages of distributions
    assert np.allclose(np.triu(avg, 1), 0.0)                           # causal: nothing above the diagonal


def test_average_attention_map_is_the_mean_of_the_windows(data):
    model = _model("locker-win")
    histories = [s for s in data.sequences[:5]]
    avg = average_attention_map(model, histories, length=6, layer=1, head=0)
    ids = torch.from_numpy(np.stack([h[-6:] for h in histories]))
    with torch.no_grad():
        _, w = model.encode(ids, need_weights=True)
    np.testing.assert_allclose(avg, w[1][:, 0].mean(0).numpy(), atol=1e-6)
    assert np.allclose(np.tril(avg, -2), 0.0)                         # the local head (window 1) sees i-1 and i


def test_average_attention_map_cloze_reads_the_mask(data):
    model = _model("bert4rec")
    avg = average_attention_map(model, data.sequences, length=6, n_samples=10)
    assert avg.shape == (6, 6) and np.triu(avg, 1).sum() > 0           # bidirectional


def test_average_attention_map_errors(data):
    with pytest.raises(ConfigError, match="no attention map"):
        average_attention_map(_model("locker-conv"), data.sequences, length=6)
    with pytest.raises(ConfigError, match="no history"):
        average_attention_map(_model("sasrec", max_len=60), data.sequences, length=50)
    with pytest.raises(ConfigError, match="max_len"):
        average_attention_map(_model("sasrec"), data.sequences, length=13)
