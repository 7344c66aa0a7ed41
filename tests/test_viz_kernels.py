"""Notebook 06's plots and analyses: densities integrate to 1, figures build, the analyses compute what they say."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from tutorial_lib.attention.kernelized import skew_normal_sample
from tutorial_lib.data import leave_one_out, make_synthetic
from tutorial_lib.models import build_model
from tutorial_lib.viz.kernels import (
    attention_on_cooccurring,
    last_position_attention,
    picker,
    plot_case_study,
    plot_matrix,
    plot_rank_by_popularity,
    plot_skew_normal_samples,
    popularity_bins,
    rank_by_popularity,
    skew_normal_pdf,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("alpha", [0.0, 1.0, -3.0, 10.0])
def test_skew_normal_pdf_is_a_density_with_the_right_mean(alpha):
    x = np.linspace(-12, 12, 24001)
    p = skew_normal_pdf(x, alpha, xi=0.5, omega=1.5)
    dx = x[1] - x[0]
    assert abs(p.sum() * dx - 1) < 1e-6
    delta = alpha / math.sqrt(1 + alpha ** 2)
    assert abs((x * p).sum() * dx - (0.5 + 1.5 * delta * math.sqrt(2 / math.pi))) < 1e-5
    if alpha == 0:
        assert np.allclose(p, np.exp(-0.5 * ((x - 0.5) / 1.5) ** 2) / (1.5 * math.sqrt(2 * math.pi)))
    with pytest.raises(ValueError):
        skew_normal_pdf(x, alpha, omega=0.0)


def test_samples_of_eq_13_follow_the_density():
    alpha = 3.0
    delta = torch.full((200_000, 1), alpha / math.sqrt(1 + alpha ** 2))
    z = skew_normal_sample(torch.zeros_like(delta), torch.ones_like(delta), delta, torch.ones(1, 1),
                           generator=torch.Generator().manual_seed(0)).numpy().ravel()
    hist, edges = np.histogram(z, bins=40, range=(-2, 3), density=True)
    centres = (edges[1:] + edges[:-1]) / 2
    assert np.abs(hist * ((z > -2) & (z < 3)).mean() - skew_normal_pdf(centres, alpha)).max() < 0.03
    axes = plot_skew_normal_samples({0.0: z[:1000], alpha: z})
    assert len(axes) == 2 and "δ = 0.95" in axes[1].get_title()


def test_plot_matrix_labels_annotations_and_errors():
    ax = plot_matrix(np.arange(9.0).reshape(3, 3), labels=["a", "b", "c"], annotate="{:.0f}", title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert len(ax.texts) == 9 and ax.get_title() == "t"
    with pytest.raises(ValueError, match="square"):
        plot_matrix(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="labels"):
        plot_matrix(np.zeros((2, 2)), labels=["a"])


@pytest.fixture(scope="module")
def trained_like():
    data = make_synthetic(n_users=40, n_items=60, min_len=5, max_len=12, seed=0)
    split = leave_one_out(data)
    torch.manual_seed(0)
    rksa = build_model("rksa", n_items=data.n_items, max_len=8, n_users=data.n_users, d_model=8)
    rksa.prepare(split)
    sasrec = build_model("sasrec", n_items=data.n_items, max_len=8, d_model=8, n_heads=2)
    return split, rksa, sasrec


def test_last_position_attention_matches_encode(trained_like):
    split, rksa, sasrec = trained_like
    users = [0, 1, 2]
    histories = [split.history(u, "test")[: 3 + u] for u in users]  # lengths 3, 4, 5: padding in the batch
    for model, extras in ((rksa, {"users": users}), (sasrec, {})):
        weights, windows = last_position_attention(model, histories, **extras)
        for h, w, win in zip(histories, weights, windows):
            assert w.shape == (len(h),) and np.isclose(w.sum(), 1.0, atol=1e-5)
            assert np.array_equal(win, h)
        # the same as one history alone (trimmed window, no padding): padding changes nothing
        alone, _ = last_position_attention(model, histories[:1], users=users[:1] if extras else None)
        assert np.allclose(alone[0], weights[0], atol=1e-5)
    with pytest.raises(ValueError, match="user embedding"):
        last_position_attention(rksa, histories)
    head0, _ = last_position_attention(sasrec, histories, head=0)
    assert not np.allclose(head0[2], last_position_attention(sasrec, histories, head=1)[0][2])


def test_attention_on_cooccurring():
    out = attention_on_cooccurring([0.1, 0.2, 0.7], [0, 1, 5])
    assert out["share"] == pytest.approx(1 / 3) and out["mass"] == pytest.approx(0.7)
    assert out["spearman"] == pytest.approx(1.0)
    assert attention_on_cooccurring([0.5, 0.5], [3, 1])["spearman"] != attention_on_cooccurring([0.5, 0.5], [3, 1])["spearman"]  # NaN
    assert attention_on_cooccurring([0.6, 0.3, 0.1], [2, 2, 0])["spearman"] == pytest.approx(np.corrcoef([3, 2, 1], [2.5, 2.5, 1])[0, 1])
    assert math.isnan(attention_on_cooccurring([1.0], [3])["mass"])
    with pytest.raises(ValueError):
        attention_on_cooccurring([1, 2], [1, 2, 3])


def test_plot_case_study():
    ax = plot_case_study({"co-occurrence": [3, 0, 10], "SASRec": [0.2, 0.3, 0.5], "RKSA": [0.1, 0.1, 0.8]},
                         labels=["x", "y", "z"], title="case")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["co-occurrence", "SASRec", "RKSA"]
    assert "10" in [t.get_text() for t in ax.texts] and "0.80" in [t.get_text() for t in ax.texts]
    with pytest.raises(ValueError, match="same length"):
        plot_case_study({"a": [1, 2], "b": [1]})


def test_popularity_bins_and_rank_by_popularity():
    pop = np.array([1, 1, 1, 1, 2, 3, 5, 8, 13, 100])
    index, labels = popularity_bins(pop, 4)
    assert index.min() == 0 and index.max() == len(labels) - 1
    assert all(np.all(pop[index == b] <= pop[index == b + 1].min()) for b in range(len(labels) - 1))
    assert labels == ["1", "2–3", "5–100"]  # edges are observed values; tied edges are merged (3 bins, not 4)
    ranks = {"A": np.arange(10), "B": np.zeros(10)}
    frame = rank_by_popularity(ranks, pop, n_bins=4, k=3)
    assert frame[("bin", "users")].sum() == 10
    assert frame[("B", "HR@3")].eq(1.0).all()
    assert frame[("A", "mean rank")].iloc[0] == pytest.approx(np.arange(10)[index == 0].mean())
    ax = plot_rank_by_popularity(frame, "mean rank")
    assert len(ax.patches) == 2 * len(frame)
    one, lab = popularity_bins(np.ones(5))
    assert one.tolist() == [0] * 5 and lab == ["1"]
    with pytest.raises(ValueError):
        rank_by_popularity({"A": np.zeros(3)}, pop)


def test_picker_renders_the_first_option():
    pytest.importorskip("ipywidgets")
    seen = []
    box = picker(lambda v: seen.append(v), [3, 5], description="user")
    assert seen == [3]
    box.children[0].value = 5
    assert seen == [3, 5]
