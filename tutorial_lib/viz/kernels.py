"""Plots and small analyses for notebook 06 (RKSA: kernelized stochastic attention).

* :func:`skew_normal_pdf` and :func:`plot_skew_normal_samples`: the 1-D skew-normal density next to
  histograms of samples, one panel per shape ``α``;
* :func:`plot_matrix`: a labelled square heatmap (co-occurrence counts, kernels, correlations), optionally
  with the numbers written in the cells;
* :func:`last_position_attention`: how the last position of each history distributes its attention, for
  any backbone model (a model with a user embedding gets its ``users=``);
* :func:`plot_case_study` and :func:`attention_on_cooccurring`: the paper's Figure 5 (attention of the
  last position against co-occurrence), for one user and averaged over many;
* :func:`rank_by_popularity` and :func:`plot_rank_by_popularity`: the paper's Figure 4b (rank of the
  test target by the target's training popularity);
* :func:`picker`: an ``ipywidgets`` dropdown that redraws a figure (raises ``ImportError`` without
  ipywidgets, so a notebook can fall back to a static figure).

Everything draws with matplotlib (imported when a function is called).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .attention import _as_numpy, _finish_heatmap, _square, shorten

if TYPE_CHECKING:
    from ipywidgets import VBox
    from matplotlib.axes import Axes
    from pandas import DataFrame
    from torch import nn


# ----------------------------------------------------------------------------- the skew-normal
def skew_normal_pdf(x: Any, alpha: float, xi: float = 0.0, omega: float = 1.0) -> np.ndarray:
    """Density of the 1-D skew-normal ``SN(ξ, ω, α)``: ``2/ω φ(z) Φ(α z)`` with ``z = (x - ξ)/ω``."""
    if omega <= 0:
        raise ValueError(f"omega must be > 0, got {omega}")
    z = (np.asarray(x, dtype=float) - xi) / omega
    phi = np.exp(-0.5 * z ** 2) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(alpha * z / math.sqrt(2.0)))
    return 2.0 / omega * phi * cdf


def plot_skew_normal_samples(samples: Mapping[float, Any], axes: Sequence[Axes] | np.ndarray | None = None,
                             bins: int = 60, xlim: tuple[float, float] = (-4, 4), panel_size: float = 3.0
                             ) -> Sequence[Axes] | np.ndarray:
    """One panel per shape: a histogram of ``samples[α]`` (a 1-D array) and the density ``SN(0, 1, α)``.

    Returns the array of axes.
    """
    import matplotlib.pyplot as plt

    if not samples:
        raise ValueError("samples is empty: pass {alpha: 1-D array of samples}")
    if axes is None:
        _, axes = plt.subplots(1, len(samples), figsize=(panel_size * len(samples), panel_size * 0.9),
                               sharey=True, layout="constrained", squeeze=False)
        axes = axes[0]
    grid = np.linspace(*xlim, 400)
    for ax, (alpha, values) in zip(axes, samples.items()):
        v = _as_numpy(values).ravel()
        delta = alpha / math.sqrt(1.0 + alpha ** 2)
        ax.hist(v, bins=bins, range=xlim, density=True, alpha=0.5, color="C0", label="samples (Eq. 13)")
        ax.plot(grid, skew_normal_pdf(grid, alpha), color="C3", label="density")
        ax.axvline(float(v.mean()), color="k", linestyle=":", linewidth=1, label="sample mean")
        ax.set_title(f"α = {alpha:g}  (δ = {delta:.2f})")
        ax.set_xlabel("z")
    axes[0].set_ylabel("density")
    axes[0].legend(fontsize="small", loc="upper left")
    return axes


# ----------------------------------------------------------------------------- heatmaps
def plot_matrix(matrix: Any, labels: Sequence[str] | None = None, ax: Axes | None = None, title: str | None = None,
                cmap: str = "magma", annotate: str | None = None, vmin: float | None = None,
                vmax: float | None = None, colorbar: bool = True, max_label_chars: int = 22) -> Axes:
    """A square heatmap with the same labels on both axes (rows = the first index).

    Args:
        matrix: ``(n, n)`` array or tensor.
        labels: ``n`` names (shortened to ``max_label_chars`` characters).
        annotate: a format such as ``"{:.0f}"`` or ``"{:.2f}"`` to write every value in its cell.
        vmin, vmax: colour range (default: the data's).
    Returns:
        The axis.
    """
    import matplotlib.pyplot as plt

    m = _square(matrix, "matrix")
    n = m.shape[0]
    if labels is not None and len(labels) != n:
        raise ValueError(f"got {len(labels)} labels for a {n} x {n} matrix")
    if ax is None:
        size = min(max(3.5, 0.45 * n + 2.0), 11.0)
        _, ax = plt.subplots(figsize=(size + (1.0 if colorbar else 0.0), size))
    lo = float(np.nanmin(m)) if vmin is None else vmin
    hi = float(np.nanmax(m)) if vmax is None else vmax
    image = ax.imshow(m, cmap=cmap, vmin=lo, vmax=hi if hi > lo else lo + 1e-12, interpolation="nearest")
    if labels is not None:
        names = [shorten(x, max_label_chars) for x in labels]
        ax.set_xticks(range(n), names, rotation=90, fontsize="small")
        ax.set_yticks(range(n), names, fontsize="small")
    if annotate:
        mid = (lo + hi) / 2
        for i in range(n):
            for j in range(n):
                ax.text(j, i, annotate.format(m[i, j]), ha="center", va="center", fontsize="x-small",
                        color="black" if m[i, j] > mid else "white")
    return _finish_heatmap(ax, image, title, colorbar)


# ----------------------------------------------------------------------------- attention of the last position
def last_position_attention(model: nn.Module, histories: Sequence[Any], users: Sequence[int] | None = None,
                            layer: int = -1, head: int | None = None, max_len: int | None = None
                            ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Attention of the last position over each history's window, in evaluation mode.

    Args:
        model: a backbone model (``encode(ids, need_weights=True, **extras)``).
        histories: item id arrays, oldest first, no padding.
        users: user indices (required when the model has a user embedding, e.g. RKSA).
        layer: which block (default the last).
        head: which head (default: the mean over heads).
        max_len: window (default ``model.max_len``).
    Returns:
        ``(weights, windows)``: per history, ``(n,)`` weights over its ``n`` most recent items (oldest first;
        they sum to 1) and the ``(n,)`` item ids of that window.
    """
    import torch

    from ..data.batching import left_pad
    from ..evaluation.evaluator import model_device

    has_users = getattr(model, "user_embedding", None) is not None
    if has_users and users is None:
        raise ValueError("this model has a user embedding: pass users=<the user index of every history>")
    if users is not None and len(users) != len(histories):
        raise ValueError(f"got {len(users)} users for {len(histories)} histories")
    width = int(max_len or model.max_len)
    hists = [np.asarray(h, dtype=np.int64).ravel() for h in histories]
    if any(h.size == 0 for h in hists):
        raise ValueError("every history needs at least one item")
    dev = model_device(model)
    ids = torch.from_numpy(left_pad(hists, width)).to(dev)
    n_real = int(ids.ne(0).sum(1).max())
    ids = ids[:, -n_real:]
    extras = {"users": torch.as_tensor(np.asarray(users, dtype=np.int64), device=dev)} if has_users else {}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, weights = model.encode(ids, need_weights=True, **extras)
    finally:
        model.train(was_training)
    w = weights[layer]
    if w is None:
        raise ValueError(f"layer {layer} returns no attention weights")
    w = w[:, :, -1, :].float().cpu()                       # (B, H, L): the last query row
    w = w.mean(1) if head is None else w[:, head]
    ids_np = ids.cpu().numpy()
    out_w, out_ids = [], []
    for row in range(len(hists)):
        n = min(len(hists[row]), ids.shape[1])
        out_w.append(w[row, -n:].numpy().astype(float))
        out_ids.append(ids_np[row, -n:])
    return out_w, out_ids


def attention_on_cooccurring(attention: Any, cooccurrence: Any) -> dict[str, float]:
    """How much attention goes to the items that co-occur more than average with a reference item.

    Args:
        attention: ``(n,)`` attention weights over ``n`` history positions (they need not sum to 1).
        cooccurrence: ``(n,)`` co-occurrence counts of the same positions with the reference item.
    Returns:
        ``mass``: the share of the attention on positions whose co-occurrence is above the mean;
        ``share``: the share of positions that are above the mean (what uniform attention would give);
        ``spearman``: the rank correlation of attention and co-occurrence (NaN when either is constant).
        All NaN when there are fewer than two positions or no attention.
    """
    a, c = _as_numpy(attention).ravel(), _as_numpy(cooccurrence).ravel()
    if a.shape != c.shape:
        raise ValueError(f"attention {a.shape} and cooccurrence {c.shape} must have the same shape")
    nan = {"mass": float("nan"), "share": float("nan"), "spearman": float("nan")}
    if a.size < 2 or a.sum() <= 0:
        return nan
    above = c > c.mean()
    out = {"mass": float(a[above].sum() / a.sum()), "share": float(above.mean()), "spearman": float("nan")}
    if np.ptp(a) > 0 and np.ptp(c) > 0:
        ra, rc = _average_ranks(a), _average_ranks(c)
        out["spearman"] = float(np.corrcoef(ra, rc)[0, 1])
    return out


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as Spearman's correlation needs)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.arange(1, len(x) + 1)
    values, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


def plot_case_study(rows: Mapping[str, Any], labels: Sequence[str] | None = None, ax: Axes | None = None,
                    title: str | None = None, annotate: bool = True, max_label_chars: int = 22) -> Axes:
    """The paper's Figure 5: one row per quantity (co-occurrence, each model's attention) over the positions.

    Every row is scaled to its own maximum (the colour shows where a row is large, not how it compares
    with another row); the cells show the raw values when ``annotate`` and there are at most 25 positions.
    Returns the axis.
    """
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("rows is empty: pass {name: (n,) values}")
    arrays = {k: _as_numpy(v).ravel() for k, v in rows.items()}
    n = {a.size for a in arrays.values()}
    if len(n) != 1:
        raise ValueError(f"all rows must have the same length, got {sorted(n)}")
    n = n.pop()
    if labels is not None and len(labels) != n:
        raise ValueError(f"got {len(labels)} labels for {n} positions")
    mat = np.stack([a / a.max() if a.max() > 0 else a for a in arrays.values()])
    if ax is None:
        _, ax = plt.subplots(figsize=(min(max(6.0, 0.55 * n + 2.5), 18.0), 0.7 * len(arrays) + 2.8))
    ax.imshow(mat, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(arrays)), list(arrays))
    if labels is not None:
        ax.set_xticks(range(n), [shorten(x, max_label_chars) for x in labels], rotation=90, fontsize="small")
    else:
        ax.set_xlabel("position in the window (oldest first)")
    if annotate and n <= 25:
        for i, a in enumerate(arrays.values()):
            for j in range(n):
                text = f"{a[j]:.0f}" if float(a[j]).is_integer() and a.max() > 1 else f"{a[j]:.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize="x-small",
                        color="white" if mat[i, j] > 0.55 else "black")
    ax.grid(False)
    if title:
        ax.set_title(title)
    return ax


# ----------------------------------------------------------------------------- rank by popularity
def popularity_bins(popularity: Any, n_bins: int = 5) -> tuple[np.ndarray, list[str]]:
    """Quantile bins of a popularity vector: ``(bin index per entry, bin labels)``, least popular first.

    The edges are observed values (lower quantiles); bin ``b`` holds the values in ``[e_b, e_{b+1})`` and the
    last bin also the maximum. Edges that coincide (many items share a small count) are merged, so there may
    be fewer than ``n_bins`` bins. A label gives the range of the values that fall in its bin (``"2–3"``).
    """
    p = _as_numpy(popularity).ravel()
    if p.size == 0:
        raise ValueError("popularity is empty")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    edges = np.unique(np.quantile(p, np.linspace(0, 1, n_bins + 1), method="lower"))  # observed values as edges
    if edges.size == 1:
        return np.zeros(p.size, dtype=np.int64), [f"{edges[0]:g}"]
    index = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, edges.size - 2)
    labels = []
    for b in range(edges.size - 1):
        lo, hi = edges[b], edges[b + 1]
        inside = p[index == b]
        lo_real = inside.min() if inside.size else lo
        hi_real = inside.max() if inside.size else hi
        labels.append(f"{lo_real:g}" if lo_real == hi_real else f"{lo_real:g}–{hi_real:g}")
    return index.astype(np.int64), labels


def rank_by_popularity(ranks: Mapping[str, Any], popularity: Any, n_bins: int = 5, k: int = 10) -> DataFrame:
    """Per popularity bin of the target: users, and for every model its mean rank, median rank and HR@k.

    Args:
        ranks: ``{model name: (N,) 0-based ranks of the target}``, the same users in the same order.
        popularity: ``(N,)`` training popularity of each user's target.
    Returns:
        A pandas DataFrame indexed by the bin label (least popular first) with columns ``users``,
        ``mean popularity`` and ``(<model>, "mean rank" | "median rank" | "HR@k")``.
    """
    import pandas as pd

    pop = _as_numpy(popularity).ravel()
    arrays = {name: _as_numpy(r).ravel() for name, r in ranks.items()}
    for name, r in arrays.items():
        if r.shape != pop.shape:
            raise ValueError(f"ranks of {name!r} have shape {r.shape}, popularity {pop.shape}")
    index, labels = popularity_bins(pop, n_bins)
    rows = []
    for b, label in enumerate(labels):
        sel = index == b
        row = {("bin", "target popularity"): label, ("bin", "users"): int(sel.sum()),
               ("bin", "mean popularity"): float(pop[sel].mean()) if sel.any() else float("nan")}
        for name, r in arrays.items():
            row[(name, "mean rank")] = float(r[sel].mean()) if sel.any() else float("nan")
            row[(name, "median rank")] = float(np.median(r[sel])) if sel.any() else float("nan")
            row[(name, f"HR@{k}")] = float((r[sel] < k).mean()) if sel.any() else float("nan")
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    return frame.set_index(("bin", "target popularity")).rename_axis("target popularity")


def plot_rank_by_popularity(frame: DataFrame, metric: str = "mean rank", ax: Axes | None = None,
                            title: str | None = None) -> Axes:
    """Grouped bars of ``metric`` per popularity bin and model, from :func:`rank_by_popularity`."""
    import matplotlib.pyplot as plt

    models = [m for m in frame.columns.get_level_values(0).unique() if m != "bin"]
    if not models:
        raise ValueError("the frame has no model columns")
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(frame))
    width = 0.8 / len(models)
    for i, m in enumerate(models):
        ax.bar(x + (i - (len(models) - 1) / 2) * width, frame[(m, metric)].to_numpy(), width, label=m)
    ax.set_xticks(x, [f"{label}\n({n} users)" for label, n in zip(frame.index, frame[("bin", "users")])],
                  fontsize="small")
    ax.set_xlabel("training popularity of the test target (users who have it), least popular first")
    ax.set_ylabel(metric)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


# ----------------------------------------------------------------------------- widget
def picker(render: Callable[[Any], None], options: Sequence[Any], description: str = "user",
           labels: Sequence[str] | None = None) -> VBox:
    """A dropdown that calls ``render(value)`` in an output area whenever the choice changes.

    Raises ``ImportError`` (with an explanation) when ipywidgets is not installed; draw a static figure
    with ``render(options[0])`` instead.
    """
    try:
        import ipywidgets as widgets
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the interactive picker needs ipywidgets (pip install ipywidgets); the static figure "
                          "above shows the same for one choice") from exc
    options = list(options)
    if not options:
        raise ValueError("options is empty")
    names = list(labels) if labels is not None else [f"{description} {o}" for o in options]
    dropdown = widgets.Dropdown(options=list(zip(names, options)), value=options[0], description=description)
    out = widgets.Output()

    def redraw(change: Any = None) -> None:
        import matplotlib.pyplot as plt

        with out:
            out.clear_output(wait=True)
            render(dropdown.value)
            plt.show()

    dropdown.observe(redraw, names="value")
    redraw()
    return widgets.VBox([dropdown, out])


__all__ = ["skew_normal_pdf", "plot_skew_normal_samples", "plot_matrix", "last_position_attention",
           "attention_on_cooccurring", "plot_case_study", "popularity_bins", "rank_by_popularity",
           "plot_rank_by_popularity", "picker"]
