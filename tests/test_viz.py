"""Plots and explorers: figures build with the Agg backend, shapes are right, recommendations are valid."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from tutorial_lib.data import leave_one_out, make_synthetic
from tutorial_lib.models import build_model
from tutorial_lib.viz import (
    attention_explorer,
    explorer_static,
    plot_attention_grid,
    plot_attention_map,
    plot_training_curves,
    recommend_top_k,
    user_attention,
    user_view,
)

N_ITEMS, MAX_LEN = 30, 8


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model("sasrec", n_items=N_ITEMS, max_len=MAX_LEN, d_model=8, n_layers=2, n_heads=2).eval()


@pytest.fixture(scope="module")
def small_split():
    data = make_synthetic(n_users=12, n_items=N_ITEMS, n_clusters=3, min_len=4, max_len=12, seed=1)
    return data, leave_one_out(data)


def test_plot_attention_map_with_and_without_labels():
    w = torch.softmax(torch.randn(5, 5), dim=-1)
    ax = plot_attention_map(w, labels=[f"a rather long movie title number {i}" for i in range(5)], title="t")
    assert ax.images[0].get_array().shape == (5, 5)
    assert ax.get_xticklabels()[0].get_text().endswith("…")  # shortened
    ax = plot_attention_map(np.eye(40), labels=[str(i) for i in range(40)], colorbar=False)
    assert len(ax.get_xticks()) < 40  # too many positions: indices instead of labels
    with pytest.raises(ValueError, match="square"):
        plot_attention_map(np.ones((3, 4)))
    with pytest.raises(ValueError, match="labels"):
        plot_attention_map(np.ones((3, 3)), labels=["a", "b"])


def test_plot_attention_grid_layers_by_heads(model):
    ids = torch.tensor([[0, 0, 3, 5, 7, 1, 2, 9]])
    _, weights = model.encode(ids, need_weights=True)
    assert [tuple(w.shape) for w in weights] == [(1, 2, MAX_LEN, MAX_LEN)] * 2
    fig = plot_attention_grid(weights, labels=[f"i{i}" for i in ids[0].tolist()], suptitle="grid")
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 4  # 2 layers x 2 heads (+ the colour bar axis)
    assert panels[0].images[0].get_array().shape == (MAX_LEN, MAX_LEN)
    fig = plot_attention_grid([weights[0][0], None])  # (H, L, L) and a layer without weights
    assert len([ax for ax in fig.axes if ax.images]) == 2
    with pytest.raises(ValueError):
        plot_attention_grid([])


def test_plot_training_curves_skips_unvalidated_epochs():
    histories = {
        "ce": [{"epoch": 1, "loss": 5.0, "seconds": 1.0, "valid_ndcg@10": 0.1},
               {"epoch": 2, "loss": 4.0, "seconds": 1.0},
               {"epoch": 3, "loss": 3.5, "seconds": 1.0, "valid_ndcg@10": 0.2}],
        "bce": [{"epoch": 1, "loss": 1.0, "seconds": 0.5, "valid_ndcg@10": 0.05}],
    }
    ax = plot_training_curves(histories)
    assert list(ax.lines[0].get_xdata()) == [1.0, 3.0]
    assert ax.get_legend() is not None
    ax = plot_training_curves(histories, metric="loss", x="seconds")
    assert list(ax.lines[0].get_xdata()) == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="no history"):
        plot_training_curves(histories, metric="valid_hr@99")


def test_recommend_top_k_excludes_padding_and_optionally_history(model):
    history = [3, 5, 7, 1, 2, 9, 4, 6, 8, 11, 12]  # longer than max_len: only the last 8 are read
    items, scores = recommend_top_k(model, history, k=10)
    assert items.shape == (10,) and scores.shape == (10,)
    assert items.dtype == np.int64 and (items >= 1).all() and (items <= N_ITEMS).all()
    assert np.all(np.diff(scores) <= 0)
    everything, _ = recommend_top_k(model, history, k=100)
    assert len(everything) == N_ITEMS and 0 not in everything  # padding is never a candidate
    fresh, _ = recommend_top_k(model, history, k=100, exclude_history=True)
    assert len(fresh) == N_ITEMS - len(set(history)) and not set(fresh) & set(history)
    # the same scores as the left-padded full window (positions are counted from the right)
    padded = torch.tensor([[0, 0, 0, 0, 0, 3, 5, 7]])
    with torch.no_grad():
        ref = model.score_next(padded)[0]
    ref[0] = float("-inf")
    assert recommend_top_k(model, [3, 5, 7], k=5)[0].tolist() == ref.topk(5).indices.tolist()
    with pytest.raises(ValueError):
        recommend_top_k(model, [0, 3], k=5)


def test_user_attention_and_view_shapes(model):
    maps, window = user_attention(model, [4, 2, 9])
    assert window.tolist() == [4, 2, 9]
    assert [m.shape for m in maps] == [(2, 3, 3)] * 2
    np.testing.assert_allclose(maps[0].sum(-1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(maps[1][0], k=1), 0.0)  # causal
    view = user_view(model, list(range(1, 13)), target=20, layer=1, head=1, k=5)
    assert view.attention.shape == (MAX_LEN,) and view.items.shape == (5,)
    assert view.target_rank is not None and 0 <= view.target_rank < N_ITEMS
    with pytest.raises(ValueError, match="layer"):
        user_view(model, [1, 2], layer=5)


def test_explorer_static_figure(model, small_split):
    data, split = small_split
    user = int(split.eval_users("test")[0])
    history, target = split.history(user, "test"), int(split.test_target[user])
    fig = explorer_static(model, history, target=target, titles=data.title, layer=1, head=0, k=10, n_recent=5,
                          user=user)
    att, rec = fig.axes[:2]
    assert len(att.patches) == min(5, len(history)) and len(rec.patches) == 10
    assert "held-out" in rec.get_title()
    fig = explorer_static(model, history, titles=list(data.item_titles), exclude_history=True)
    assert fig.axes[1].get_title().startswith("top 10")


def test_attention_explorer_widget_builds_and_updates(model, small_split):
    widgets = pytest.importorskip("ipywidgets")
    data, split = small_split
    box = attention_explorer(model, split, titles=data.title, users=split.eval_users("test")[:3])
    assert isinstance(box, widgets.VBox)
    controls, out = box.children
    user_w, layer_w, head_w, hide_w = controls.children
    assert layer_w.max == 2 and head_w.max == 2 and len(user_w.options) == 3
    layer_w.value = 2  # triggers a re-render through the observer
    hide_w.value = True
    assert isinstance(out, widgets.Output)
