"""Training curves: a validation metric per epoch for several runs on one plot."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def plot_training_curves(histories: Mapping[str, Sequence[Mapping[str, float]]], metric: str = "valid_ndcg@10",
                         ax: Axes | None = None, x: str = "epoch", title: str | None = None, mark_best: bool = True,
                         ylabel: str | None = None) -> Axes:
    """One line per run: ``metric`` against ``x`` (epochs by default).

    Args:
        histories: ``{run name: history}`` where a history is a list of per-epoch dicts, e.g.
            ``TrainResult.history`` (``{"epoch": 1, "loss": ..., "valid_ndcg@10": ...}``). Rows without
            ``metric`` (epochs that were not validated) are skipped.
        metric: the key to plot (``"valid_ndcg@10"``, ``"loss"``, ...).
        ax: a matplotlib axis (default: a new figure).
        x: the key on the horizontal axis (``"epoch"``; ``"seconds"`` is cumulated into wall time).
        title: axis title.
        mark_best: mark each run's maximum (its minimum for a metric named ``loss``) with a star.
        ylabel: vertical axis label (default: a readable version of ``metric``).
    Returns:
        The axis.
    """
    import matplotlib.pyplot as plt

    if not histories:
        raise ValueError("histories is empty: pass {run name: TrainResult.history}")
    if ax is None:
        _, ax = plt.subplots()
    lower_is_better = "loss" in metric
    plotted = 0
    for name, history in histories.items():
        xs, ys, elapsed = [], [], 0.0
        for i, row in enumerate(history):
            elapsed += float(row.get("seconds", 0.0))
            if metric not in row or row[metric] is None:
                continue
            xs.append(elapsed if x == "seconds" else float(row.get(x, i + 1)))
            ys.append(float(row[metric]))
        if not xs:
            continue
        (line,) = ax.plot(xs, ys, marker="o", markersize=3.5, label=name)
        plotted += 1
        if mark_best:
            best = min(range(len(ys)), key=ys.__getitem__) if lower_is_better else max(range(len(ys)), key=ys.__getitem__)
            ax.plot([xs[best]], [ys[best]], marker="*", markersize=13, color=line.get_color(),
                    markeredgecolor="black", linestyle="none")
    if plotted == 0:
        raise ValueError(f"no history has the key {metric!r}; available keys: "
                         f"{sorted({k for h in histories.values() for row in h for k in row})}")
    pretty = metric.replace("valid_", "validation ").replace("ndcg", "NDCG").replace("hr@", "HR@").replace("mrr", "MRR")
    ax.set_xlabel("training time (s)" if x == "seconds" else x)
    ax.set_ylabel(ylabel or pretty)
    if title:
        ax.set_title(title)
    if mark_best:
        ax.plot([], [], marker="*", color="grey", markeredgecolor="black", linestyle="none", markersize=10,
                label="best epoch" if not lower_is_better else "lowest")
    ax.legend()
    return ax


__all__ = ["plot_training_curves"]
