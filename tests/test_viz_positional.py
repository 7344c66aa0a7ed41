"""tutorial_lib.viz.positional: Figure 1 (positional correlation) and Figure 3 (learned positional attention)
against naive loops, causality, normalisation, and the figures / explorer build."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from tutorial_lib.attention import SequenceContext
from tutorial_lib.errors import ConfigError
from tutorial_lib.models import build_model
from tutorial_lib.viz.positional import (
    attention_entropy,
    causal_row_normalise,
    causal_softmax,
    correlation_from_projections,
    last_row_by_distance,
    learned_attention,
    mean_by_distance,
    pattern_explorer,
    pattern_explorer_static,
    plot_by_distance,
    plot_learned_attention,
    plot_positional_correlation,
    position_projections,
    positional_correlation,
    positional_modules,
)

N_ITEMS, N = 30, 9


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def sasrec():
    torch.manual_seed(0)
    model = build_model("sasrec", n_items=N_ITEMS, max_len=N, d_model=8, n_layers=2, n_heads=2).eval()
    with torch.no_grad():  # larger position embeddings than the init, so that rows differ clearly
        model.position_embedding.weight.normal_(0.0, 1.5)
    return model


@pytest.fixture(scope="module", params=["parec", "fparec", "pattern-exponential"])
def positional_model(request):
    torch.manual_seed(1)
    opts = {"k": 3} if request.param == "fparec" else {}
    model = build_model(request.param, n_items=N_ITEMS, max_len=N, d_model=8, n_layers=2, **opts).eval()
    with torch.no_grad():  # a non-trivial pattern (the init is almost uniform)
        for p in model.parameters():
            if p.dim() == 3:
                p.normal_(0.0, 1.0)
    return model


def naive_correlation(model, layer=0, head=None):
    """The paper's recipe with explicit loops: exp((p_i W_Q)(p_j W_K)^T / sqrt(d_h)), j <= i, row / row max."""
    att = model.blocks[layer].attention
    d, H = att.d_model, att.n_heads
    dh = d // H
    P = model.position_embedding.weight.detach().double()
    W = att.in_proj.weight.detach().double()
    W_Q, W_K = W[:d].T, W[d:2 * d].T                                  # (d_in, d_out): x @ W_Q
    n = P.shape[0]
    heads = range(H) if head is None else [head]
    C = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = 0.0
            for h in heads:
                qi = P[i] @ W_Q[:, h * dh:(h + 1) * dh]
                kj = P[j] @ W_K[:, h * dh:(h + 1) * dh]
                s += float(qi @ kj) / math.sqrt(dh)
            C[i, j] = math.exp(s / len(heads))
    return C / C.max(axis=1, keepdims=True)


def test_correlation_matches_a_naive_loop(sasrec):
    np.testing.assert_allclose(positional_correlation(sasrec), naive_correlation(sasrec), rtol=1e-9, atol=1e-12)
    each = positional_correlation(sasrec, heads="each")
    assert each.shape == (2, N, N)
    for h in range(2):
        np.testing.assert_allclose(each[h], naive_correlation(sasrec, head=h), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(positional_correlation(sasrec, heads=h), each[h])
    np.testing.assert_allclose(positional_correlation(sasrec, layer=1), naive_correlation(sasrec, layer=1),
                               rtol=1e-9, atol=1e-12)


def test_correlation_is_causal_and_row_normalised(sasrec):
    for heads in ("mean", "each", 1):
        c = positional_correlation(sasrec, heads=heads)
        assert c.shape[-2:] == (N, N)
        assert np.all(np.triu(c, 1) == 0), "future positions must be zero"
        np.testing.assert_allclose(c.max(axis=-1), 1.0)
        assert np.all(c >= 0) and np.all(np.diagonal(c, axis1=-2, axis2=-1) > 0)


def test_correlation_with_bias_uses_the_bias(sasrec):
    torch.manual_seed(3)
    model = build_model("sasrec", n_items=N_ITEMS, max_len=N, d_model=8, n_layers=1, n_heads=1)
    with torch.no_grad():
        model.blocks[0].attention.in_proj.bias.normal_()
    q, k = position_projections(model, bias=True)
    q0, k0 = position_projections(model)
    d = 8
    np.testing.assert_allclose((q - q0)[0, 0].numpy(), model.blocks[0].attention.in_proj.bias[:d].detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((k - k0)[0, 3].numpy(),
                               model.blocks[0].attention.in_proj.bias[d:2 * d].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_correlation_is_stable_for_large_logits():
    q = torch.full((1, 4, 2), 40.0)
    c = correlation_from_projections(q, q)  # exp(1600 / sqrt 2) overflows without the row shift
    assert np.isfinite(c).all()
    np.testing.assert_allclose(c, np.tril(np.ones((4, 4))))


def test_correlation_errors(sasrec, positional_model):
    with pytest.raises(ConfigError, match="position embedding"):
        positional_correlation(positional_model)
    with pytest.raises(ConfigError, match="layer"):
        positional_correlation(sasrec, layer=5)
    with pytest.raises(ValueError, match="heads"):
        positional_correlation(sasrec, heads="max")
    with pytest.raises(ValueError, match="head must be"):
        positional_correlation(sasrec, heads=2)
    compat = build_model("fparec", N_ITEMS, N, d_model=8, compat=True)  # positions added, but no in_proj
    with pytest.raises(ConfigError, match="in_proj"):
        positional_correlation(compat)


def test_causal_helpers():
    logits = torch.randn(2, 5, 5, dtype=torch.float64)
    s = causal_softmax(logits)
    assert torch.all(s.triu(1) == 0)
    torch.testing.assert_close(s.sum(-1), torch.ones(2, 5, dtype=torch.float64))
    r = causal_row_normalise(logits)
    torch.testing.assert_close(r.amax(-1), torch.ones(2, 5, dtype=torch.float64))
    torch.testing.assert_close(s, r / r.sum(-1, keepdim=True))


def test_mean_by_distance_and_last_row():
    m = np.arange(16, dtype=float).reshape(4, 4)
    prof = mean_by_distance(m)
    assert prof.shape == (4,)
    assert prof[0] == pytest.approx(np.mean([0, 5, 10, 15]))
    assert prof[1] == pytest.approx(np.mean([4, 9, 14]))
    assert prof[3] == pytest.approx(12.0)
    assert mean_by_distance(np.stack([m, 2 * m]), max_distance=1).shape == (2, 2)
    np.testing.assert_array_equal(last_row_by_distance(m), [15, 14, 13, 12])


def naive_learned_attention(module, window=None):
    """softmax over j <= i of the pattern logits, by explicit loops, for the last `window` positions."""
    logits = module.pattern_logits().detach().double()
    H, n, _ = logits.shape
    w = n if window is None else window
    out = np.zeros((H, w, w))
    for h in range(H):
        for a in range(w):
            i = n - w + a
            row = [math.exp(float(logits[h, i, n - w + b])) for b in range(a + 1)]
            total = sum(row)
            for b in range(a + 1):
                out[h, a, b] = row[b] / total
    return out


def test_learned_attention_matches_a_naive_loop(positional_model):
    patterns = learned_attention(positional_model)
    assert len(patterns) == 2
    for block, p in zip(positional_model.blocks, patterns):
        H = block.attention.n_heads
        assert p.shape == (H, N, N)
        assert np.all(np.triu(p, 1) == 0), "future positions must get no weight"
        np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(p, naive_learned_attention(block.attention), rtol=1e-9, atol=1e-12)
        short = learned_attention(block.attention, window=4)[0]
        assert short.shape == (H, 4, 4)
        np.testing.assert_allclose(short, naive_learned_attention(block.attention, window=4), rtol=1e-9, atol=1e-12)


def test_learned_attention_is_what_any_user_gets(positional_model):
    """Position-only attention: a user with w items (left-padded) gets the window-w pattern, whatever the items."""
    w = 5
    ids = torch.zeros(2, N, dtype=torch.long)
    ids[0, N - w:] = torch.tensor([3, 7, 1, 9, 4])
    ids[1, N - w:] = torch.tensor([12, 2, 2, 25, 8])
    with torch.no_grad():
        _, weights = positional_model.encode(ids, need_weights=True)
    for p, wt in zip(learned_attention(positional_model, window=w), weights):
        for b in range(2):
            np.testing.assert_allclose(wt[b, :, N - w:, N - w:].double().numpy(), p, rtol=1e-5, atol=1e-6)


def test_learned_attention_of_library_layer_weights(positional_model):
    att = positional_model.blocks[0].attention
    ids = torch.ones(1, N, dtype=torch.long)
    lib = att.weights(SequenceContext.from_item_ids(ids, max_len=N))[0].detach().double().numpy()
    np.testing.assert_allclose(learned_attention(att)[0], lib, rtol=1e-5, atol=1e-6)


def test_learned_attention_errors_and_mixed_models(sasrec, positional_model):
    assert learned_attention(sasrec) == [None, None]
    assert positional_modules(sasrec) == [None, None]
    with pytest.raises(ValueError, match="window"):
        learned_attention(positional_model, window=N + 1)
    with pytest.raises(ConfigError, match="backbone"):
        learned_attention(torch.nn.Linear(2, 2))


def test_entropy():
    uniform = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    assert attention_entropy(uniform) == pytest.approx(math.log(4))
    assert attention_entropy(np.eye(4)) == pytest.approx(0.0)


def test_plots_build(sasrec, positional_model):
    ax = plot_positional_correlation(positional_correlation(sasrec), title="t")
    assert ax.images[0].get_array().shape == (N, N)
    assert ax.images[0].get_array().mask[0, 1]  # the future is blank
    ax = plot_positional_correlation(positional_correlation(sasrec), vmin=None, colorbar=False)
    assert ax.images[0].get_clim()[0] == pytest.approx(positional_correlation(sasrec)[np.tril_indices(N)].min())
    with pytest.raises(ValueError, match="square"):
        plot_positional_correlation(positional_correlation(sasrec, heads="each"))
    ax = plot_by_distance({"a": positional_correlation(sasrec), "b": np.linspace(1, 0, N)}, max_distance=4)
    assert len(ax.lines) == 2 and len(ax.lines[0].get_xdata()) == 5
    with pytest.raises(ValueError, match="empty"):
        plot_by_distance({})
    patterns = learned_attention(positional_model)
    fig = plot_learned_attention(patterns, suptitle="s", max_distance=5, logy=True)
    H = patterns[0].shape[0]
    assert len([a for a in fig.axes if a.images]) == 2 * H
    fig = plot_learned_attention([None, patterns[1]])
    fig = plot_learned_attention(patterns, normalise="row-max")
    image = [a for a in fig.axes if a.images][0].images[0]
    assert image.get_clim()[1] == 1.0 and image.get_clim()[0] > 0 and image.get_array().mask[0, 1]
    with pytest.raises(ValueError, match="normalise"):
        plot_learned_attention(patterns, normalise="max")
    with pytest.raises(ValueError, match="no layer"):
        plot_learned_attention([None])
    fig = pattern_explorer_static({"a": positional_model, "sasrec": sasrec}, window=6, max_distance=3)
    assert fig.axes[0].images[0].get_array().shape == (6, 6)


def test_pattern_explorer_widget(positional_model):
    pytest.importorskip("ipywidgets")
    other = build_model("pattern-linear", N_ITEMS, N, d_model=8)
    box = pattern_explorer({"learned": positional_model, "linear": other})
    model_w, layer_w, window_w = box.children[0].children
    assert layer_w.max == 2 and window_w.max == N
    model_w.value = "linear"
    window_w.value = 3
    layer_w.value = 1
    box.render()
