"""Heatmaps of attention weights: one map, or a grid of layers x heads.

Rows are queries (the position that is being computed), columns are keys (the positions it reads).
With a causal model everything above the diagonal is zero.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: tick labels are drawn only when a map has at most this many positions (else indices every few steps)
MAX_LABELLED = 30


def _as_numpy(x: Any) -> np.ndarray:
    """A tensor or array-like as a float64 NumPy array (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def _square(x: Any, what: str, hint: str = "") -> np.ndarray:
    """``x`` as an ``(n, n)`` float array; a ValueError naming ``what`` (plus ``hint``) otherwise."""
    m = _as_numpy(x)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{what} must be a square (n, n) matrix, got shape {m.shape}{hint}")
    return m


def _finish_heatmap(ax, image, title: str | None, colorbar: bool, label: str | None = None):
    """Common end of the one-panel heatmaps: no grid, the title, an optional colour bar; returns ``ax``."""
    ax.grid(False)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=label)
    return ax


_YEAR = re.compile(r"^(.*\S)\s*(\(\d{4}\))$")


def shorten(label: str, max_chars: int = 24) -> str:
    """``label`` cut to ``max_chars`` characters with an ellipsis (titles on a crowded axis).

    A trailing year such as ``(1999)`` (MovieLens titles) is kept: ``"Star Wars: Episode IV - A New Hope (1977)"``
    becomes ``"Star Wars: Episode… (1977)"``.
    """
    label = str(label)
    if len(label) <= max_chars:
        return label
    match = _YEAR.match(label)
    if match and max_chars >= 14:
        name, year = match.groups()
        return name[: max_chars - len(year) - 2].rstrip() + "… " + year
    return label[: max_chars - 1].rstrip() + "…"


def plot_attention_map(weights: Any, labels: Sequence[str] | None = None, ax: Axes | None = None,
                       title: str | None = None, cmap: str = "viridis", vmax: float | None = None,
                       colorbar: bool = True, max_label_chars: int = 24, max_labelled: int = MAX_LABELLED) -> Axes:
    """Draw one ``(L, L)`` attention matrix (queries in rows, keys in columns).

    Args:
        weights: ``(L, L)`` array or tensor, row ``t`` = how position ``t`` distributes its attention.
        labels: optional names of the ``L`` positions (e.g. movie titles, oldest first). They are drawn
            on both axes when ``L <= max_labelled``, shortened to ``max_label_chars`` characters;
            otherwise the axes show position indices.
        ax: a matplotlib axis (default: a new figure).
        title: axis title.
        cmap, vmax: colour map and upper end of the colour scale (default: the largest weight).
        colorbar: draw a colour bar next to the map.
    Returns:
        The axis.
    """
    import matplotlib.pyplot as plt

    w = _square(weights, "weights")
    L = w.shape[0]
    if labels is not None and len(labels) != L:
        raise ValueError(f"got {len(labels)} labels for a {L} x {L} attention map")
    if ax is None:
        size = min(max(4.0, 0.32 * L + 2.5), 12.0)
        _, ax = plt.subplots(figsize=(size + (1.0 if colorbar else 0.0), size))
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax if vmax is not None else max(float(w.max()), 1e-12),
                      aspect="equal", interpolation="nearest")
    if labels is not None and L <= max_labelled:
        names = [shorten(x, max_label_chars) for x in labels]
        ax.set_xticks(range(L), names, rotation=90, fontsize="small")
        ax.set_yticks(range(L), names, fontsize="small")
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query")
    else:
        step = max(1, int(np.ceil(L / 10)))
        ticks = list(range(0, L, step))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("key position (attended to)")
        ax.set_ylabel("query position")
    return _finish_heatmap(ax, image, title, colorbar)


def plot_attention_grid(weights: Sequence[Any], labels: Sequence[str] | None = None, batch_index: int = 0,
                        layer_names: Sequence[str] | None = None, panel_size: float = 3.2, cmap: str = "viridis",
                        max_label_chars: int = 18, max_labelled: int = 16, suptitle: str | None = None) -> Figure:
    """Draw the attention maps of every layer (rows) and head (columns) in one figure.

    Args:
        weights: one entry per layer, each ``(H, L, L)`` or ``(B, H, L, L)`` (then ``batch_index``
            picks the sequence), as returned by ``model.encode(ids, need_weights=True)[1]``. An entry
            may be ``None`` (a layer without attention weights): its row says so.
        labels: optional names of the ``L`` positions, drawn when ``L <= max_labelled``.
        layer_names: row titles (default ``layer 1``, ``layer 2``, ...).
        panel_size: size of one panel in inches.
        suptitle: title of the whole figure.
    Returns:
        The figure; ``fig.axes[:n_layers * n_heads]`` are the panels in row-major order.
    """
    import matplotlib.pyplot as plt

    if len(weights) == 0:
        raise ValueError("weights is empty: pass one (H, L, L) array per layer")
    maps: list[np.ndarray | None] = []
    for w in weights:
        if w is None:
            maps.append(None)
            continue
        a = _as_numpy(w)
        if a.ndim == 4:
            a = a[batch_index]
        if a.ndim != 3 or a.shape[1] != a.shape[2]:
            raise ValueError(f"each layer's weights must be (H, L, L) or (B, H, L, L), got shape {a.shape}")
        maps.append(a)
    shapes = {m.shape for m in maps if m is not None}
    if not shapes:
        raise ValueError("no layer has attention weights to draw")
    n_heads = max(s[0] for s in shapes)
    n_layers = len(maps)
    labelled = labels is not None and max(s[1] for s in shapes) <= max_labelled
    extra = 1.2 if labelled else 0.0
    fig, axes = plt.subplots(n_layers, n_heads, squeeze=False, layout="constrained",
                             figsize=(n_heads * (panel_size + extra) + 0.8, n_layers * (panel_size + extra) + 0.6))
    vmax = max(float(m.max()) for m in maps if m is not None)
    image = None
    for i, m in enumerate(maps):
        name = layer_names[i] if layer_names is not None else f"layer {i + 1}"
        for h in range(n_heads):
            ax = axes[i, h]
            if m is None or h >= m.shape[0]:
                ax.axis("off")
                ax.text(0.5, 0.5, f"{name}: no attention weights" if m is None else "", ha="center", va="center")
                continue
            plot_attention_map(m[h], labels=labels, ax=ax, cmap=cmap, vmax=vmax, colorbar=False,
                               max_label_chars=max_label_chars, max_labelled=max_labelled)
            image = ax.images[-1]
            ax.set_title(f"{name} · head {h + 1}")
            if labelled and h > 0:
                ax.set_yticklabels([])
            if not labelled:
                if i < n_layers - 1:
                    ax.set_xlabel("")
                if h > 0:
                    ax.set_ylabel("")
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


__all__ = ["plot_attention_map", "plot_attention_grid", "shorten"]
