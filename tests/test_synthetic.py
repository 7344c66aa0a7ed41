"""The synthetic generator: determinism, sizes, no repeats, and the planted structure."""
from __future__ import annotations

import numpy as np
import pytest

from tutorial_lib.data import make_synthetic
from tutorial_lib.errors import ConfigError

SMALL = dict(n_users=300, n_items=200, n_clusters=5, min_len=5, max_len=20)


def _markov_fraction(ds) -> float:
    nxt = ds.meta["next_item"]
    hits = total = 0
    for s in ds.sequences:
        hits += int((nxt[s[:-1]] == s[1:]).sum())
        total += len(s) - 1
    return hits / total


def test_deterministic_by_seed():
    a, b, c = make_synthetic(**SMALL, seed=1), make_synthetic(**SMALL, seed=1), make_synthetic(**SMALL, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a.sequences, b.sequences))
    np.testing.assert_array_equal(a.meta["next_item"], b.meta["next_item"])
    assert not all(np.array_equal(x, y) for x, y in zip(a.sequences, c.sequences))


def test_sizes_and_lengths():
    ds = make_synthetic(**SMALL, seed=0)
    assert ds.n_users == 300 and ds.n_items == 200
    lengths = ds.lengths()
    assert lengths.min() >= 5 and lengths.max() <= 20
    assert lengths.min() < 8 and lengths.max() > 17        # the range is used, not a constant
    items = np.concatenate(ds.sequences)
    assert items.min() >= 1 and items.max() <= 200
    assert len(ds.item_titles) == 201
    assert len(ds.meta["user_clusters"]) == 300


def test_no_repeated_items_per_user():
    ds = make_synthetic(**SMALL, markov_prob=0.9, seed=4)
    for s in ds.sequences:
        assert len(np.unique(s)) == len(s)


def test_successor_is_a_permutation():
    nxt = make_synthetic(**SMALL, seed=0).meta["next_item"]
    assert nxt[0] == 0
    assert sorted(nxt[1:].tolist()) == list(range(1, 201))


@pytest.mark.parametrize("p", [0.0, 0.5, 0.9])
def test_markov_structure_is_measurable(p):
    ds = make_synthetic(**SMALL, markov_prob=p, seed=0)
    frac = _markov_fraction(ds)
    # a successor that the user has already seen falls back to the cluster draw, hence a small shortfall
    assert frac == pytest.approx(p, abs=0.06)


def test_items_come_from_user_clusters():
    ds = make_synthetic(**SMALL, markov_prob=0.0, seed=0)
    cluster = ds.meta["item_cluster"]
    for s, cs in zip(ds.sequences, ds.meta["user_clusters"]):
        assert set(cluster[s].tolist()) <= set(np.asarray(cs).tolist())


@pytest.mark.parametrize("bad", [
    dict(n_clusters=0), dict(n_clusters=201), dict(min_len=2), dict(min_len=10, max_len=9),
    dict(max_len=101), dict(markov_prob=1.5), dict(markov_prob=-0.1), dict(n_users=0), dict(n_users=-5),
])
def test_bad_settings(bad):
    with pytest.raises(ConfigError):
        make_synthetic(**{**SMALL, **bad})


def test_tiny_catalogues_terminate():
    """Users whose interest clusters hold fewer items than their length still get a full sequence."""
    from tutorial_lib.data import make_synthetic

    d = make_synthetic(n_users=60, n_items=40, min_len=5, max_len=12, seed=0)
    assert all(len(set(s.tolist())) == len(s) for s in d.sequences)
    assert max(len(s) for s in d.sequences) <= 12 and min(len(s) for s in d.sequences) >= 5
