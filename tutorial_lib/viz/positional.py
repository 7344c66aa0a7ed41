"""What positions do inside attention: the analyses and figures of the FPARec paper (Luo et al. 2024).

**Figure 1: the positional correlation of a trained SASRec.** In the first layer the logit between a
query at position ``i`` and a key at position ``j`` is a sum of four terms (item-item, item-position,
position-item, position-position). The last one only depends on the positions; it multiplies the
attention weight by

.. math:: C_{ij} = \\exp\\Big(\\frac{(p_i W_Q)(p_j W_K)^\\top}{\\sqrt{d_h}}\\Big), \\qquad j \\le i,

with ``p_i`` the position embedding of position ``i``. The paper zeroes the future (``j > i``) and divides
each row by its maximum, so the strongest key of every query has correlation 1
(:func:`positional_correlation`, :func:`plot_positional_correlation`).

Per head or averaged: each head ``h`` has its own ``W_Q^h, W_K^h`` (the columns ``h d_h .. (h+1) d_h`` of
the projections), hence its own matrix ``C^h`` (``heads="each"``). ``heads="mean"`` (default) averages the
heads' logits before the exponential, ``exp(mean_h s^h_ij)``: the geometric mean of the heads' factors.
With one head (the SASRec paper's setting on ML-1M) both are the paper's figure. Biases of the projections
are left out, as in the paper's decomposition (``bias=True`` adds them).

Caveat: with pre-LayerNorm blocks the first layer projects ``LN(sqrt(d) E_s + P)``, not ``P``; like the
paper, the analysis projects the raw position embeddings and reads them as a proxy.

**Figure 3: the learned positional attention.** For a PARec / FPARec / handcrafted-pattern model the
attention weights do not depend on the items: each layer and head has one pattern
``softmax(causal(logits))`` (:func:`learned_attention`, from ``PositionalAttention.pattern_logits()``).
:func:`plot_learned_attention` draws it as a grid of heatmaps (layers x heads) with, per layer, the last
row (the query that makes the recommendation) as weight against distance. Positions are counted from the
right (left padding): position ``n - 1`` is the most recent item, distance 0.

:func:`pattern_explorer` is an ``ipywidgets`` explorer over several models (e.g. one FPARec per ``k``), a
layer and the history length; :func:`pattern_explorer_static` draws the same without widgets.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from .attention import _as_numpy, _finish_heatmap, _square

if TYPE_CHECKING:
    from ipywidgets import VBox
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

HEADS = ("mean", "each")


# ----------------------------------------------------------------------------- helpers
def causal_row_normalise(logits: torch.Tensor) -> torch.Tensor:
    """``exp(logits)`` with the future (``j > i``) set to 0 and every row divided by its maximum.

    Computed stably as ``exp(s_ij - max_{j' <= i} s_ij')``. ``logits`` is ``(..., n, n)``; the result has
    the same shape, zeros above the diagonal and a maximum of exactly 1 in every row.
    """
    n = logits.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
    masked = logits.masked_fill(future, float("-inf"))
    return torch.exp(masked - masked.amax(dim=-1, keepdim=True))


def causal_softmax(logits: torch.Tensor) -> torch.Tensor:
    """``softmax`` over ``j <= i`` of ``(..., n, n)`` logits: zeros above the diagonal, rows sum to 1."""
    n = logits.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
    return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1)


def mean_by_distance(matrix: Any, max_distance: int | None = None) -> np.ndarray:
    """Average of ``M[..., i, i - delta]`` over the rows ``i >= delta``, for ``delta = 0, 1, ...``.

    Turns an ``(n, n)`` causal matrix (or a stack ``(..., n, n)``) into a profile against distance: how
    strongly, on average, a query relates to the key ``delta`` steps before it. Returns ``(..., D)`` with
    ``D = min(n, max_distance + 1)``.
    """
    m = _as_numpy(matrix)
    n = m.shape[-1]
    D = n if max_distance is None else min(n, max_distance + 1)
    return np.stack([np.diagonal(m, offset=-d, axis1=-2, axis2=-1).mean(axis=-1) for d in range(D)], axis=-1)


def last_row_by_distance(pattern: Any) -> np.ndarray:
    """The last row of ``(..., n, n)`` weights, reversed: entry ``delta`` = weight on the key ``delta``
    steps before the most recent item (0 = the most recent)."""
    return _as_numpy(pattern)[..., -1, ::-1].copy()


# ----------------------------------------------------------------------------- Figure 1
def position_projections(model: nn.Module, layer: int = 0, bias: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The position embeddings projected by the query and key projections of one layer.

    Args:
        model: a SASRec-style model with learned absolute positions (``model.position_embedding``) and
            dot-product attention (``model.blocks[layer].attention.in_proj`` holds ``W_Q, W_K, W_V`` stacked).
        layer: which block's projections (the paper: the first, ``0``).
        bias: add the projections' biases.
    Returns:
        ``(q, k)``, each ``(H, n, d_h)`` float64 on the CPU: ``q[h, i] = p_i W_Q^h`` and ``k[h, j] = p_j W_K^h``.
    """
    pos = getattr(model, "position_embedding", None)
    if pos is None:
        raise ConfigError("this model has no learned position embedding (model.position_embedding is None): the "
                          "positional correlation is defined for SASRec-style models; PARec/FPARec keep their "
                          "positions in the attention pattern (use learned_attention)")
    blocks = getattr(model, "blocks", None)
    if blocks is None or not -len(blocks) <= layer < len(blocks):
        raise ConfigError(f"layer must index one of the model's {0 if blocks is None else len(blocks)} blocks, "
                          f"got {layer}")
    attention = blocks[layer].attention
    in_proj = getattr(attention, "in_proj", None)
    if in_proj is None:
        raise ConfigError(f"block {layer} has {type(attention).__name__}, which has no query/key projections "
                          "(in_proj); the positional correlation needs dot-product attention (SASRec)")
    d, H = attention.d_model, attention.n_heads
    with torch.no_grad():
        p = pos.weight.detach().double().cpu()                         # (n, d)
        w = in_proj.weight.detach().double().cpu()                     # (3d, d): rows = outputs
        b = in_proj.bias.detach().double().cpu() if (bias and in_proj.bias is not None) else None
        q = p @ w[:d].T + (b[:d] if b is not None else 0.0)
        k = p @ w[d:2 * d].T + (b[d:2 * d] if b is not None else 0.0)
    n = p.shape[0]
    return q.view(n, H, d // H).transpose(0, 1).contiguous(), k.view(n, H, d // H).transpose(0, 1).contiguous()


def correlation_from_projections(q: torch.Tensor, k: torch.Tensor, heads: str | int = "mean") -> np.ndarray:
    """The paper's correlation from projected positions ``q, k`` of shape ``(H, n, d_h)``.

    ``s^h = q_h k_h^T / sqrt(d_h)``; ``heads="each"``: ``(H, n, n)``, one matrix per head; ``"mean"``:
    ``(n, n)`` from the heads' mean logits; an int: that head's ``(n, n)`` matrix. Then ``exp``, the
    future zeroed, each row divided by its maximum (:func:`causal_row_normalise`).
    """
    q, k = torch.as_tensor(q, dtype=torch.float64), torch.as_tensor(k, dtype=torch.float64)
    if q.dim() != 3 or q.shape != k.shape:
        raise ValueError(f"q and k must both be (H, n, d_h), got {tuple(q.shape)} and {tuple(k.shape)}")
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])       # (H, n, n)
    if heads == "mean":
        logits = logits.mean(dim=0)
    elif heads == "each":
        pass
    elif isinstance(heads, (int, np.integer)) and not isinstance(heads, bool):
        if not -q.shape[0] <= int(heads) < q.shape[0]:
            raise ValueError(f"head must be in 0..{q.shape[0] - 1}, got {heads}")
        logits = logits[int(heads)]
    else:
        raise ValueError(f"heads must be 'mean', 'each' or a head index, got {heads!r}")
    return causal_row_normalise(logits).numpy()


def positional_correlation(model: nn.Module, layer: int = 0, heads: str | int = "mean",
                           bias: bool = False) -> np.ndarray:
    """Figure 1 of the FPARec paper for a SASRec-style model.

    ``C_ij = exp((p_i W_Q)(p_j W_K)^T / sqrt(d_h))`` for ``j <= i``, 0 for ``j > i``, each row divided by
    its maximum. Rows are query positions, columns key positions, ``0 .. n-1`` with ``n - 1`` the most
    recent item (positions are counted from the right).

    Args:
        model: a trained SASRec (``build_model("sasrec", ...)``).
        layer: block whose ``W_Q, W_K`` are used (the paper: the first).
        heads: ``"mean"`` (default: the heads' logits averaged, then exp), ``"each"`` or a head index.
        bias: include the projections' biases (the paper's decomposition has none).
    Returns:
        ``(n, n)`` (``(H, n, n)`` for ``heads="each"``) NumPy array.
    """
    q, k = position_projections(model, layer, bias)
    return correlation_from_projections(q, k, heads)


def plot_positional_correlation(correlation: Any, ax: Axes | None = None, title: str | None = None,
                                cmap: str = "viridis", colorbar: bool = True, tick_step: int | None = None,
                                vmin: float | None = 0.0) -> Axes:
    """Heatmap of an ``(n, n)`` positional correlation (rows: query position, columns: key position).

    The future (above the diagonal) is left blank. ``vmin=None`` stretches the colours over the values
    of the causal part (useful when every correlation is close to 1). Returns the axis.
    """
    import matplotlib.pyplot as plt

    c = _square(correlation, "correlation", hint="; pick one head of a heads='each' result")
    n = c.shape[0]
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 4.4))
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    low = float(c[~future].min()) if vmin is None else vmin
    image = ax.imshow(np.ma.masked_array(c, mask=future), cmap=cmap, vmin=low, vmax=1.0, interpolation="nearest",
                      aspect="equal")
    step = tick_step or max(1, int(np.ceil(n / 8)))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xlabel(f"key position j ({n - 1} = most recent)")
    ax.set_ylabel("query position i")
    return _finish_heatmap(ax, image, title, colorbar, label="correlation / row maximum")


def plot_by_distance(profiles: Mapping[str, Any], ax: Axes | None = None, max_distance: int | None = None,
                     ylabel: str = "mean over query positions", title: str | None = None, logy: bool = False,
                     **plot_kwargs: Any) -> Axes:
    """Lines of several ``(n, n)`` matrices (or ready profiles) against the distance ``i - j``.

    ``profiles`` maps a label to an ``(n, n)`` matrix (averaged with :func:`mean_by_distance`) or to a 1-D
    profile already indexed by distance. Returns the axis.
    """
    import matplotlib.pyplot as plt

    if not profiles:
        raise ValueError("profiles is empty: pass {label: (n, n) matrix or 1-D profile}")
    if ax is None:
        _, ax = plt.subplots()
    for label, value in profiles.items():
        a = _as_numpy(value)
        if a.ndim not in (1, 2):
            raise ValueError(f"{label!r}: expected an (n, n) matrix or a 1-D profile, got shape {a.shape}")
        end = None if max_distance is None else max_distance + 1
        y = mean_by_distance(a, max_distance) if a.ndim == 2 else a[:end]
        kwargs = {"marker": "o", "markersize": 2.5, **plot_kwargs}
        ax.plot(np.arange(len(y)), y, label=str(label), **kwargs)
    ax.set_xlabel("distance i - j (0 = the query itself)")
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


# ----------------------------------------------------------------------------- Figure 3
def positional_modules(model: nn.Module) -> list[nn.Module | None]:
    """Per block, its attention module when it has a position-only pattern (``pattern_logits``), else None."""
    if hasattr(model, "pattern_logits"):
        return [model]
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ConfigError(f"expected a backbone model (with .blocks) or a PositionalAttention, got "
                          f"{type(model).__name__}")
    return [b.attention if hasattr(b.attention, "pattern_logits") else None for b in blocks]


def learned_attention(model: nn.Module, window: int | None = None) -> list[np.ndarray | None]:
    """The positional attention weights of every layer: ``softmax(causal(pattern_logits))``.

    Args:
        model: a PARec / FPARec / ``pattern-*`` model (or one ``PositionalAttention`` module).
        window: the number ``w`` of most recent positions to show (default: all ``n``). A history of ``w``
            items (left-padded) reads exactly these rows and columns, renormalised: this is the attention
            every user with ``w`` items gets, whatever the items.
    Returns:
        One entry per block: ``(H, w, w)`` weights (zeros above the diagonal, rows sum to 1), ``None`` for a
        block whose attention is not positional.
    """
    out: list[np.ndarray | None] = []
    for module in positional_modules(model):
        if module is None:
            out.append(None)
            continue
        with torch.no_grad():
            logits = module.pattern_logits().detach().double().cpu()   # (H, n, n)
        n = logits.shape[-1]
        w = n if window is None else int(window)
        if not 1 <= w <= n:
            raise ValueError(f"window must be in 1..{n}, got {window}")
        out.append(causal_softmax(logits[:, n - w:, n - w:]).numpy())
    return out


def attention_entropy(pattern: Any) -> np.ndarray:
    """Entropy (nats) of the last row of ``(..., n, n)`` weights: low = concentrated on a few positions,
    ``log n`` = uniform over the window."""
    row = _as_numpy(pattern)[..., -1, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(row > 0, -row * np.log(row), 0.0)
    return terms.sum(axis=-1)


def plot_learned_attention(patterns: Sequence[Any], suptitle: str | None = None, max_distance: int | None = None,
                           panel_size: float = 2.9, cmap: str = "viridis", logy: bool = False,
                           layer_names: Sequence[str] | None = None, normalise: str = "none") -> Figure:
    """Figure 3: one row per layer, one heatmap per head and, on the right, the last row of each head
    (the query that makes the recommendation) as weight against distance.

    Args:
        patterns: as returned by :func:`learned_attention` (one ``(H, w, w)`` per layer; ``None`` entries
            are drawn as empty rows).
        suptitle: figure title.
        max_distance: cut the line plots after this distance (default: the whole window).
        logy: logarithmic weights in the line plots (shows the tail).
        layer_names: row names (default ``layer 1``, ...).
        normalise: ``"none"`` (the softmax weights, colours 0..1) or ``"row-max"`` (each heatmap row divided by
            its maximum, as Figure 1, colours from the smallest value to 1): shows the shape of patterns that
            are close to uniform. The line plots always show the weights.
    Returns:
        The figure; per layer the axes are its heads' heatmaps then the line plot. The future (above the
        diagonal) is blank.
    """
    import matplotlib.pyplot as plt

    maps = [None if p is None else _as_numpy(p) for p in patterns]
    if not any(m is not None for m in maps):
        raise ValueError("no layer has a positional pattern to draw")
    for m in maps:
        if m is not None and (m.ndim != 3 or m.shape[1] != m.shape[2]):
            raise ValueError(f"each layer's pattern must be (H, w, w), got shape {m.shape}")
    if normalise not in ("none", "row-max"):
        raise ValueError(f"normalise must be 'none' or 'row-max', got {normalise!r}")
    shown = [None if m is None else (m / m.max(axis=-1, keepdims=True) if normalise == "row-max" else m) for m in maps]
    vmin = 0.0
    if normalise == "row-max":  # the smallest value of the causal part of any map
        vmin = min(float(m[:, rows, cols].min()) for m in shown if m is not None
                   for rows, cols in [np.tril_indices(m.shape[-1])])
    n_heads = max(m.shape[0] for m in maps if m is not None)
    n_layers = len(maps)
    fig, axes = plt.subplots(n_layers, n_heads + 1, squeeze=False, layout="constrained",
                             figsize=((n_heads + 1.3) * panel_size + 0.8, n_layers * panel_size + 0.6),
                             gridspec_kw={"width_ratios": [1] * n_heads + [1.3]})
    image = None
    for i, m in enumerate(maps):
        name = layer_names[i] if layer_names is not None else f"layer {i + 1}"
        line_ax = axes[i, n_heads]
        if m is None:
            for ax in axes[i]:
                ax.axis("off")
            axes[i, 0].text(0.5, 0.5, f"{name}: not positional", ha="center", va="center")
            continue
        w = m.shape[-1]
        for h in range(n_heads):
            ax = axes[i, h]
            if h >= m.shape[0]:
                ax.axis("off")
                continue
            future = np.triu(np.ones((w, w), dtype=bool), 1)
            image = ax.imshow(np.ma.masked_array(shown[i][h], mask=future), cmap=cmap, vmin=vmin, vmax=1.0,
                              interpolation="nearest", aspect="equal")
            step = max(1, int(np.ceil(w / 5)))
            ax.set_xticks(range(0, w, step))
            ax.set_yticks(range(0, w, step))
            ax.grid(False)
            ax.set_title(f"{name} · head {h + 1}")
            if i == n_layers - 1:
                ax.set_xlabel("key position")
            if h == 0:
                ax.set_ylabel("query position")
        rows = last_row_by_distance(m)                                   # (H, w)
        D = w if max_distance is None else min(w, max_distance + 1)
        for h in range(m.shape[0]):
            line_ax.plot(np.arange(D), rows[h, :D], marker="o", markersize=2.5, label=f"head {h + 1}")
        line_ax.axhline(1.0 / w, color="grey", linestyle="--", linewidth=1, label="uniform")
        if logy:
            line_ax.set_yscale("log")
        line_ax.set_title(f"{name}: last row (the recommending query)")
        line_ax.set_xlabel("distance from the most recent item")
        line_ax.set_ylabel("attention weight")
        line_ax.legend(fontsize="x-small")
    if image is not None:
        fig.colorbar(image, ax=axes[:, :n_heads].ravel().tolist(), shrink=0.8,
                     label="attention weight" + (" / row maximum" if normalise == "row-max" else ""))
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# ----------------------------------------------------------------------------- explorer
def pattern_explorer_static(models: Mapping[str, nn.Module], layer: int = -1, window: int | None = None,
                            max_distance: int | None = None, panel_size: float = 2.8, suptitle: str | None = None
                            ) -> Figure:
    """Without widgets: one column per model (e.g. one FPARec per ``k``), head 1 of ``layer`` as a heatmap
    (top) and every head's last row against distance (bottom), titled with its mean KL divergence from a
    uniform row (``log w - entropy``: 0 = uniform). Returns the figure."""
    import matplotlib.pyplot as plt

    if not models:
        raise ValueError("models is empty: pass {label: PARec/FPARec/pattern model}")
    fig, axes = plt.subplots(2, len(models), squeeze=False, layout="constrained",
                             figsize=(len(models) * panel_size + 0.6, 2 * panel_size + 0.8))
    for c, (label, model) in enumerate(models.items()):
        patterns = learned_attention(model, window)
        m = patterns[layer]
        if m is None:
            axes[0, c].axis("off")
            axes[1, c].axis("off")
            axes[0, c].set_title(f"{label}: not positional")
            continue
        w = m.shape[-1]
        future = np.triu(np.ones((w, w), dtype=bool), 1)
        axes[0, c].imshow(np.ma.masked_array(m[0], mask=future), cmap="viridis", vmin=0.0, vmax=1.0,
                          interpolation="nearest")
        axes[0, c].grid(False)
        axes[0, c].set_title(f"{label}\nlayer {layer % len(patterns) + 1} · head 1")
        rows = last_row_by_distance(m)
        D = w if max_distance is None else min(w, max_distance + 1)
        for h in range(m.shape[0]):
            axes[1, c].plot(np.arange(D), rows[h, :D], marker="o", markersize=2, label=f"head {h + 1}")
        axes[1, c].axhline(1.0 / w, color="grey", linestyle="--", linewidth=1, label="uniform")
        axes[1, c].set_xlabel("distance")
        kl = math.log(w) - float(attention_entropy(m).mean())      # KL(last row || uniform), mean over heads
        axes[1, c].set_title(f"KL from uniform {kl:.3f}")
        if c == 0:
            axes[1, c].set_ylabel("weight of the last row")
            axes[1, c].legend(fontsize="x-small")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def pattern_explorer(models: Mapping[str, nn.Module], max_distance: int | None = None) -> VBox:
    """An ``ipywidgets`` explorer: a slider over the models (e.g. ``{"k=2": m2, "k=10": m10, ...}``), a
    layer slider and a history-length slider; redraws :func:`plot_learned_attention`.

    Returns an ``ipywidgets.VBox`` (display it). Raises ``ImportError`` without ipywidgets:
    :func:`pattern_explorer_static` draws the same information as a plain figure.
    """
    import matplotlib.pyplot as plt

    from .explorer import _import_widgets

    widgets = _import_widgets()
    from IPython.display import display

    if not models:
        raise ValueError("models is empty: pass {label: PARec/FPARec/pattern model}")
    labels = list(models)
    probe = learned_attention(models[labels[0]])
    n_layers = len(probe)
    n = max(p.shape[-1] for p in probe if p is not None)
    model_w = widgets.SelectionSlider(options=labels, value=labels[0], description="model",
                                      continuous_update=False)
    layer_w = widgets.IntSlider(value=n_layers, min=1, max=n_layers, description="layer", disabled=n_layers == 1,
                                continuous_update=False)
    window_w = widgets.IntSlider(value=n, min=2, max=n, description="history length", continuous_update=False,
                                 style={"description_width": "initial"})
    out = widgets.Output()

    def render(change: Any = None) -> None:
        model = models[model_w.value]
        patterns = learned_attention(model, min(window_w.value, model.max_len if hasattr(model, "max_len") else n))
        layer = layer_w.value - 1
        with out:
            out.clear_output(wait=True)
            fig = plot_learned_attention([patterns[layer]], layer_names=[f"layer {layer + 1}"],
                                         max_distance=max_distance,
                                         suptitle=f"{model_w.value}: what every user with {window_w.value} items "
                                                  "gets (whatever the items)")
            display(fig)
            plt.close(fig)

    for w in (model_w, layer_w, window_w):
        w.observe(render, names="value")
    render()
    box = widgets.VBox([widgets.HBox([model_w, layer_w, window_w]), out])
    box.render = render
    return box


__all__ = ["causal_row_normalise", "causal_softmax", "mean_by_distance", "last_row_by_distance",
           "position_projections", "correlation_from_projections", "positional_correlation",
           "plot_positional_correlation", "plot_by_distance", "positional_modules", "learned_attention",
           "attention_entropy", "plot_learned_attention", "pattern_explorer_static", "pattern_explorer", "HEADS"]
