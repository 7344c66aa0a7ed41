"""Look inside a trained model for one user: recent history, where the last position attends, top-K.

* :func:`recommend_top_k`: the ``k`` best items after a history (padding never, history optionally excluded).
* :func:`user_attention`: the attention maps of every layer for one history, cropped to its real items.
* :func:`explorer_static`: one matplotlib figure with both (the fallback without widgets, and what a saved
  notebook shows).
* :func:`attention_explorer`: the same, interactive (``ipywidgets``: pick a user, a layer and a head).

The model is any backbone model of :mod:`tutorial_lib.models` (``max_len``, ``score_next`` and
``encode(ids, need_weights=True)``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..evaluation.evaluator import model_device
from ..models.backbone import user_inputs
from .attention import shorten

if TYPE_CHECKING:
    from ipywidgets import VBox
    from matplotlib.figure import Figure

Titles = Sequence[str] | Callable[[int], str] | None


def title_function(titles: Titles) -> Callable[[int], str]:
    """Turn a list of titles indexed by item id, a callable such as ``dataset.title``, or ``None`` into
    a function ``item id -> printable name``."""
    if titles is None:
        return lambda i: f"item {int(i)}"
    if callable(titles):
        return lambda i: str(titles(int(i)))
    names = list(titles)
    return lambda i: names[int(i)] if 0 < int(i) < len(names) else f"item {int(i)}"


def _window(model: nn.Module, history: Sequence[int], max_len: int | None) -> torch.Tensor:
    """``(1, n)`` ids of the most recent ``n = min(len(history), max_len)`` items, on the model's device.

    No padding is needed: positions are counted from the right, so a window trimmed to its real items gets
    the same result as the left-padded full window.
    """
    hist = np.asarray(history, dtype=np.int64).ravel()
    if hist.size == 0:
        raise ValueError("the history is empty: a model needs at least one item to recommend from")
    if (hist < 1).any():
        raise ValueError("history item ids must be >= 1 (0 is padding); pass the user's items without padding")
    width = min(hist.size, int(max_len or model.max_len))
    return torch.from_numpy(hist[-width:].copy())[None, :].to(model_device(model))


def _user(model: nn.Module, user_index: int | None) -> dict[str, torch.Tensor]:
    """``users=`` for models with a user embedding (RKSA); nothing for the others."""
    if getattr(model, "user_embedding", None) is None:
        return {}
    if user_index is None:
        raise ValueError("this model has a user embedding: pass the user's index (user_index=... or user=<int>)")
    return user_inputs(model, torch.tensor([int(user_index)], device=model_device(model)))


def _scores(model: nn.Module, history: Sequence[int], max_len: int | None, user_index: int | None = None
            ) -> torch.Tensor:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            scores = model.score_next(_window(model, history, max_len), **_user(model, user_index))[0].float().cpu()
    finally:
        model.train(was_training)
    scores[0] = float("-inf")
    return scores


def recommend_top_k(model: nn.Module, history: Sequence[int], k: int = 10, exclude_history: bool = False,
                    max_len: int | None = None, user_index: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest-scoring next items after ``history``.

    Args:
        model: a trained backbone model.
        history: the user's item ids, oldest first (no padding). Only the last ``max_len`` are read.
        k: how many items; at most the number of candidates (fewer are returned if fewer exist).
        exclude_history: drop every item of ``history`` from the candidates (Locker's protocol; by default
            the course's evaluation keeps them).
        max_len: input window (default ``model.max_len``).
        user_index: the user's index, for models with a user embedding (RKSA).
    Returns:
        ``(items, scores)``: ``(k,)`` int64 item ids, best first (never the padding id 0), and their scores.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scores = _scores(model, history, max_len, user_index)
    if exclude_history:
        scores[torch.as_tensor(np.asarray(history, dtype=np.int64).ravel())] = float("-inf")
    n_candidates = int(torch.isfinite(scores).sum())
    top = scores.topk(min(k, n_candidates))
    return top.indices.numpy().astype(np.int64), top.values.numpy()


def user_attention(model: nn.Module, history: Sequence[int], max_len: int | None = None,
                   user_index: int | None = None) -> tuple[list[np.ndarray | None], np.ndarray]:
    """Attention maps of every layer for one history.

    Returns:
        ``(weights, ids)``: ``weights[l]`` is ``(H, n, n)`` (``None`` for a layer without weights) over the
        ``n = min(len(history), max_len)`` most recent items ``ids`` (oldest first).
    """
    ids = _window(model, history, max_len)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, weights = model.encode(ids, need_weights=True, **_user(model, user_index))
    finally:
        model.train(was_training)
    maps = [None if w is None else w[0].float().cpu().numpy() for w in weights]
    return maps, ids[0].cpu().numpy()


@dataclass
class UserView:
    """Everything :func:`explorer_static` draws for one user (also handy to print)."""

    window: np.ndarray                 # (n,) ids the model reads, oldest first
    attention: np.ndarray | None       # (n,) attention of the last position (layer, head) over the window
    items: np.ndarray                  # (k,) recommended ids, best first
    probs: np.ndarray                  # (k,) their softmax probabilities over all candidates
    target: int | None                 # held-out item
    target_rank: int | None            # its 0-based rank among the candidates (None without target)
    n_layers: int
    n_heads: int


def user_view(model: nn.Module, history: Sequence[int], target: int | None = None, layer: int = 0, head: int = 0,
              k: int = 10, exclude_history: bool = False, max_len: int | None = None,
              user_index: int | None = None) -> UserView:
    """Compute what the explorer shows for one user (``layer`` and ``head`` are 0-based; ``user_index`` for
    models with a user embedding)."""
    maps, window = user_attention(model, history, max_len, user_index)
    n_layers = len(maps)
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in 0..{n_layers - 1}, got {layer}")
    layer_map = maps[layer]
    n_heads = 0 if layer_map is None else layer_map.shape[0]
    if layer_map is not None and not 0 <= head < n_heads:
        raise ValueError(f"head must be in 0..{n_heads - 1}, got {head}")
    attention = None if layer_map is None else layer_map[head, -1]
    scores = _scores(model, history, max_len, user_index)
    if exclude_history:
        scores[torch.as_tensor(np.asarray(history, dtype=np.int64).ravel())] = float("-inf")
    probs = torch.softmax(scores, dim=0)
    top = scores.topk(min(k, int(torch.isfinite(scores).sum())))
    rank = None
    if target is not None and target > 0:
        t = scores[int(target)]
        rank = int((scores >= t).sum()) - 1 if torch.isfinite(t) else None
    return UserView(window=window, attention=attention, items=top.indices.numpy(), probs=probs[top.indices].numpy(),
                    target=int(target) if target else None, target_rank=rank, n_layers=n_layers, n_heads=n_heads)


def explorer_static(model: nn.Module, history: Sequence[int], target: int | None = None, titles: Titles = None,
                    layer: int = 0, head: int = 0, k: int = 10, n_recent: int = 10, exclude_history: bool = False,
                    user: int | str | None = None, max_len: int | None = None, max_label_chars: int = 38
                    ) -> Figure:
    """One figure for one user: where the last position attends (left), the top-``k`` items (right).

    Args:
        model: a trained backbone model.
        history: the user's items, oldest first (e.g. ``split.history(u, "test")``).
        target: the held-out next item; marked with ★ when it is recommended, and its rank is given.
        titles: item names (list indexed by id, or a function such as ``dataset.title``).
        layer, head: 0-based layer and head whose attention is shown.
        k: number of recommendations.
        n_recent: number of most recent history items drawn (the weight on older ones is summed).
        exclude_history: drop history items from the recommendations.
        user: a label for the title; an ``int`` is also the user's index for models with a user embedding.
    Returns:
        The matplotlib figure (two axes).
    """
    import matplotlib.pyplot as plt

    name = title_function(titles)
    index = user if isinstance(user, (int, np.integer)) else None
    view = user_view(model, history, target, layer, head, k, exclude_history, max_len, user_index=index)
    seen = set(np.asarray(history, dtype=np.int64).ravel().tolist())
    n_show = min(n_recent, len(view.window))
    rows = max(n_show, len(view.items))
    fig, (ax_att, ax_rec) = plt.subplots(1, 2, figsize=(14, 0.36 * rows + 1.9), layout="constrained")
    # ---- left: attention of the last position over the most recent items (most recent at the top)
    recent = view.window[-n_show:][::-1]
    labels = [f"{shorten(name(i), max_label_chars)}  [t-{j}]" for j, i in enumerate(recent)]
    if view.attention is not None:
        weights = view.attention[-n_show:][::-1]
        ax_att.barh(range(n_show), weights, color="tab:blue")
        older = float(view.attention[:-n_show].sum()) if len(view.window) > n_show else 0.0
        note = f"\n+ {older:.2f} on {len(view.window) - n_show} older items" if older > 0 else ""
        ax_att.set_xlabel("attention weight of the last position")
        ax_att.set_title(f"layer {layer + 1} · head {head + 1}: where the last position looks{note}")
        ax_att.set_xlim(0, max(float(weights.max()) * 1.15, 1e-6))
    else:
        ax_att.set_title("this layer has no attention weights")
    ax_att.set_yticks(range(n_show), labels, fontsize="small")
    ax_att.invert_yaxis()
    ax_att.set_ylabel("recent history (t-0 = most recent)")
    # ---- right: top-k recommendations
    colors, rec_labels = [], []
    for r, i in enumerate(view.items):
        hit = view.target is not None and int(i) == view.target
        mark = " ★ held-out" if hit else (" (seen)" if int(i) in seen else "")
        rec_labels.append(f"{r + 1}. {shorten(name(i), max_label_chars)}{mark}")
        colors.append("tab:red" if hit else "tab:grey")
    ax_rec.barh(range(len(view.items)), view.probs, color=colors)
    ax_rec.set_yticks(range(len(view.items)), rec_labels, fontsize="small")
    ax_rec.invert_yaxis()
    ax_rec.set_xlabel("predicted probability (softmax over all items)")
    if view.target is not None:
        where = (f"rank {view.target_rank + 1}" if view.target_rank is not None else "excluded (in the history)")
        ax_rec.set_title(f"top {len(view.items)}{' (history excluded)' if exclude_history else ''}\n"
                         f"held-out: {shorten(name(view.target), max_label_chars)} · {where}")
    else:
        ax_rec.set_title(f"top {len(view.items)} recommendations")
    for ax in (ax_att, ax_rec):
        ax.grid(axis="y", visible=False)
    who = f"user {user}" if user is not None else "one user"
    fig.suptitle(f"{who}: {len(history)} items in the history, the model reads the last {len(view.window)}")
    return fig


def _import_widgets():
    try:
        import ipywidgets
    except ImportError as exc:  # pragma: no cover - ipywidgets is a dependency of the course
        raise ImportError("the interactive explorer needs ipywidgets (pip install 'ipywidgets>=8'); "
                          "explorer_static(...) draws the same figure without it") from exc
    return ipywidgets


def attention_explorer(model: nn.Module, split: Any, titles: Titles = None, stage: str = "test",
                       users: Sequence[int] | None = None, k: int = 10, n_recent: int = 10,
                       exclude_history: bool = False, max_users: int = 300) -> VBox:
    """An ``ipywidgets`` explorer: pick a user, a layer and a head; see :func:`explorer_static`'s figure.

    Args:
        model: a trained backbone model.
        split: a :class:`~tutorial_lib.data.LeaveOneOutSplit` (histories and held-out items).
        titles: item names (list indexed by id, or a function such as ``dataset.title``).
        stage: ``"test"`` (history = train + validation item, target = test item) or ``"valid"``.
        users: user indices offered in the menu (default: the first ``max_users`` evaluated users).
        k, n_recent, exclude_history: as in :func:`explorer_static`.
    Returns:
        An ``ipywidgets.VBox``; display it (it is the last expression of a cell, or ``display(widget)``).
    """
    import matplotlib.pyplot as plt

    widgets = _import_widgets()
    from IPython.display import display

    if users is None:
        users = split.eval_users(stage)[:max_users]
    users = [int(u) for u in users]
    if not users:
        raise ValueError(f"no user has a {stage} target to explore")
    probe, _ = user_attention(model, split.history(users[0], stage), user_index=users[0])
    n_layers = len(probe)
    n_heads = max((w.shape[0] for w in probe if w is not None), default=1)
    user_w = widgets.Dropdown(options=[(f"user {u}", u) for u in users], value=users[0], description="user")
    layer_w = widgets.IntSlider(value=1, min=1, max=n_layers, description="layer", disabled=n_layers == 1)
    head_w = widgets.IntSlider(value=1, min=1, max=n_heads, description="head", disabled=n_heads == 1)
    hide_w = widgets.Checkbox(value=exclude_history, description="hide items already seen", indent=False)
    out = widgets.Output()

    def render(change: Any = None) -> None:
        u = int(user_w.value)
        with out:
            out.clear_output(wait=True)
            fig = explorer_static(model, split.history(u, stage), target=int(split.targets(stage)[u]), titles=titles,
                                  layer=layer_w.value - 1, head=head_w.value - 1, k=k, n_recent=n_recent,
                                  exclude_history=hide_w.value, user=u)
            display(fig)
            plt.close(fig)

    for w in (user_w, layer_w, head_w, hide_w):
        w.observe(render, names="value")
    render()
    box = widgets.VBox([widgets.HBox([user_w, layer_w, head_w, hide_w]), out])
    box.render = render  # lets tests and notebooks refresh it explicitly
    return box


__all__ = ["recommend_top_k", "user_attention", "user_view", "UserView", "explorer_static", "attention_explorer",
           "title_function"]
