"""The complete benchmark as tables, statistics and figures (notebook 07).

Everything starts from a results file written by the CLI or the benchmark runner (``results/runs.csv`` or a
temporary copy) and turns it into a pandas DataFrame, one row per run (:func:`runs_frame`):

* **Coverage**: which (method, dataset, seed) cells of a planned benchmark have a row, and which are
  missing (:func:`coverage_frame`, :func:`missing_runs`). Nothing is ever filled in for a missing cell.
* **Seeds**: mean, sample standard deviation and number of seeds per method and dataset
  (:func:`mean_std`, :func:`seed_summary`) and the main table with the best mean in bold
  (:func:`main_table_frame`, :func:`styled_main_table`). As in ``report.main_table``, seeds are only averaged
  within one configuration: when a method was run on a dataset with several configurations (say two learning
  rates), only the one validation prefers (``report.configuration_preference``: the best mean validation NDCG@10,
  never the test numbers) is ``current``; the others are kept in the frame but left out of the tables and
  figures, so that two runs of the *same* seed with different settings are never read as seed variance.
* **Paired comparisons**: :func:`paired_t` (mean difference, standard error, t statistic),
  :func:`paired_ci` (95 % confidence interval from Student's t; both, with :func:`mean_std`, live in
  :mod:`tutorial_lib.experiments.stats`, which the report uses too), and :func:`paired_seed_comparisons`
  (every method against a baseline, paired by seed).
* **Cost**: parameter counts of the exact model a row describes (:func:`parameter_count`), the efficiency
  lab's table (:func:`read_scaling_table`), accuracy against training time or memory
  (:func:`plot_accuracy_vs_cost`).
* **Curves**: the per-epoch training curve of a row (:func:`find_curve`, :func:`load_curve`), for
  :func:`tutorial_lib.viz.plot_training_curves`.
* **Scorecard**: published against ours, as a figure (:func:`plot_scorecard`; the rows come from
  :func:`tutorial_lib.experiments.report.scorecard_rows`).

The statistics use the sample standard deviation (``ddof=1``), as ``report.main_table`` and seaborn's
``errorbar="sd"`` do.
"""
from __future__ import annotations

import csv
import math
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..experiments.stats import mean_std, paired_ci, paired_t, t_critical, verdict  # re-exported for notebook 07
from ..options import parse_key_value

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from pandas import DataFrame
    from pandas.io.formats.style import Styler

    from ..experiments.run import ExperimentSpec

#: the metrics every results row has
ROW_METRICS = ("hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")
_NUMERIC = (*ROW_METRICS, "valid_ndcg@10", "train_seconds", "seconds_per_epoch")
_INTEGER = ("seed", "best_epoch", "epochs", "max_len")

# ----------------------------------------------------------------------------- loading
def method_label(model: str, loss: str | None) -> str:
    """``"sasrec"`` for cross-entropy runs, ``"sasrec (bce)"`` otherwise: the report's naming rule."""
    from ..experiments.report import method_label as label

    return label(model, loss or "")


def _order_methods(methods: Iterable[str]) -> list[str]:
    from ..experiments.benchmark import BENCHMARK_MODELS

    known = [method_label(m, loss) for m, loss in BENCHMARK_MODELS]
    methods = list(dict.fromkeys(methods))
    return [m for m in known if m in methods] + sorted(m for m in methods if m not in known)


def _order_datasets(datasets: Iterable[str]) -> list[str]:
    from ..experiments.benchmark import BENCHMARK_DATASETS

    datasets = list(dict.fromkeys(datasets))
    return [d for d in BENCHMARK_DATASETS if d in datasets] + sorted(d for d in datasets if d not in BENCHMARK_DATASETS)


def _text(value: Any) -> str:
    """A cell as text: ``""`` for missing values (None, NaN, pandas NA)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value) in ("<NA>", "nan"):
        return ""
    return str(value).strip()


def runs_frame(source: str | Path | Sequence[Mapping[str, Any]], base: ExperimentSpec | None = None) -> DataFrame:
    """One row per run (the latest row of every ``run_id``) as a pandas DataFrame.

    ``source`` is a results CSV path or a list of rows (as :func:`~tutorial_lib.experiments.results.read_runs`
    returns them). Adds ``method`` (model, with the loss unless it is CE or sampled softmax, and what the run
    changed from the presets: ``report.run_label``), ``sampled`` (trained with sampled softmax, counted as its
    method's CE run as in the README), ``variant`` (another configuration than the presets: the README's
    "Other configurations"), ``config`` (everything that defines the run except its seed:
    ``report.config_key``) and ``current`` (the run is one the README's tables use: the configuration of its
    method, dataset and protocol that validation prefers, and, where a method has both, the loss most methods on
    that dataset used; only those are averaged as seeds). Metrics and times become floats, seeds and epochs
    integers. An empty or missing file gives an empty frame with the usual columns. ``base`` (an
    ``ExperimentSpec``): label the methods relative to its settings instead of the presets, for a file whose runs
    all share some overrides (a tiny live benchmark: ``"sasrec"``, not ``"sasrec (L=20, d_model=16)"``).
    """
    import pandas as pd

    from ..experiments.report import SAMPLED, benchmark_groups, config_key, folded_label, is_variant, latest_runs
    from ..experiments.results import RUN_COLUMNS, read_runs

    rows = read_runs(source) if isinstance(source, (str, Path)) else [dict(r) for r in source]
    runs = latest_runs([{k: _text(v) for k, v in r.items()} for r in rows])
    frame = pd.DataFrame(runs, columns=list(dict.fromkeys([*RUN_COLUMNS, *(k for r in runs for k in r)])))
    for col in ("model", "dataset", "protocol", "loss", "date"):
        frame[col] = frame[col].fillna("").astype(str)
    frame["config"] = [config_key({k: _text(v) for k, v in r.items()}) for r in runs]
    for col in _NUMERIC:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    for col in _INTEGER:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    sampled = [r.get("loss") == SAMPLED for r in runs]
    frame.insert(0, "method", [folded_label(r, base) for r in runs])
    frame["variant"] = pd.Series([is_variant(m, r) for m, r in zip(frame["method"], runs)], index=frame.index,
                                 dtype=bool)
    frame["sampled"] = pd.Series(sampled, index=frame.index, dtype=bool)
    chosen = set()  # the README's choice of runs for each cell: report.benchmark_groups
    for protocol in {r.get("protocol") for r in runs}:
        groups, _ = benchmark_groups(runs, protocol, base)
        chosen.update(id(r) for rs in groups.values() for r in rs)
    frame["current"] = pd.Series([id(r) in chosen for r in runs], index=frame.index, dtype=bool)
    return frame.reset_index(drop=True)


def set_aside(frame: DataFrame) -> DataFrame:
    """The runs of the configurations the tables do not use (``current`` is False): kept in the file, left out of
    tables and figures."""
    return frame.loc[~frame["current"].astype(bool)]


def _current(frame, protocol: str | None = None):
    sub = frame.loc[frame["current"].astype(bool)] if "current" in frame else frame
    return sub if protocol is None else sub[sub["protocol"] == protocol]


# ----------------------------------------------------------------------------- coverage
def coverage_frame(frame: DataFrame, models: Sequence[tuple[str, str]], datasets: Sequence[str],
                   seeds: Sequence[int], protocol: str = "full") -> DataFrame:
    """Methods x datasets: ``"k/n"`` = how many of the ``n`` planned seeds have a run (current configuration)."""
    import pandas as pd

    have = set()
    sub = _current(frame, protocol).dropna(subset=["seed"])
    for m, d, s in zip(sub["method"], sub["dataset"], sub["seed"]):
        have.add((m, d, int(s)))
    seeds = [int(s) for s in seeds]
    labels = [method_label(m, loss) for m, loss in models]
    table = {d: [f"{sum((lab, d, s) in have for s in seeds)}/{len(seeds)}" for lab in labels] for d in datasets}
    return pd.DataFrame(table, index=pd.Index(labels, name="method"))


def missing_runs(frame: DataFrame, models: Sequence[tuple[str, str]], datasets: Sequence[str], seeds: Sequence[int],
                 protocol: str = "full") -> list[dict]:
    """The planned (method, dataset, seed) cells without a current run, in plan order (datasets outermost)."""
    sub = _current(frame, protocol).dropna(subset=["seed"])
    have = {(m, d, int(s)) for m, d, s in zip(sub["method"], sub["dataset"], sub["seed"])}
    return [{"method": method_label(m, loss), "dataset": d, "seed": int(s)}
            for d in datasets for m, loss in models for s in seeds if (method_label(m, loss), d, int(s)) not in have]


# ----------------------------------------------------------------------------- seeds
def seed_summary(frame: DataFrame, metrics: Sequence[str] = ("ndcg@10", "hr@10"), protocol: str = "full"
                 ) -> DataFrame:
    """Long table: per method, dataset and metric the mean, sample std and number of runs (current
    configuration only). ``seeds`` lists the seeds; ``repeated_seed`` says whether a seed occurs twice (rows of
    older versions without run ids can do that), in which case the spread is not pure seed variance.
    """
    import pandas as pd

    out = []
    sub = _current(frame, protocol)
    for (method, dataset), g in sub.groupby(["method", "dataset"], sort=False):
        seeds = [int(s) for s in g["seed"].dropna()]
        for metric in metrics:
            mean, std, n = mean_std(g[metric].to_numpy(dtype=float))
            out.append({"method": method, "dataset": dataset, "protocol": protocol, "metric": metric, "mean": mean,
                        "std": std, "n": n, "seeds": tuple(sorted(seeds)), "repeated_seed": len(seeds) != len(set(seeds)),
                        "sampled": bool(g["sampled"].any()) if "sampled" in g else False})
    columns = ["method", "dataset", "protocol", "metric", "mean", "std", "n", "seeds", "repeated_seed", "sampled"]
    return pd.DataFrame(out, columns=columns)


def _cell_text(mean: float, std: float, n: int, expected_n: int, flag: bool, digits: int) -> str:
    if n == 0:
        return "—"
    text = f"{mean:.{digits}f}" if n == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"
    if n != expected_n:
        text += f" [{n}]"
    return text + (" †" if flag else "")


def main_table_frame(frame: DataFrame, metric: str = "ndcg@10", protocol: str = "full", expected_seeds: int = 3,
                     digits: int = 4) -> tuple[DataFrame, DataFrame]:
    """Methods x datasets of ``"mean ± std"`` strings (``[n]`` = runs when not ``expected_seeds``, ``†`` = a seed
    occurs twice, ``‡`` = trained with sampled softmax, ``—`` = no run; current configurations only). Returns
    ``(table, best)``: ``best`` is a boolean frame of the same shape marking the highest mean of each dataset."""
    import pandas as pd

    s = seed_summary(frame, (metric,), protocol)
    if s.empty:
        empty = pd.DataFrame(index=pd.Index([], name="method"))
        return empty, empty.astype(bool)
    methods, datasets = _order_methods(s["method"]), _order_datasets(s["dataset"])
    by = {(r.method, r.dataset): r for r in s.itertuples()}
    table = pd.DataFrame(index=pd.Index(methods, name="method"), columns=datasets, dtype=object)
    best = pd.DataFrame(False, index=table.index, columns=datasets)
    for d in datasets:
        means = {m: by[(m, d)].mean for m in methods if (m, d) in by and not math.isnan(by[(m, d)].mean)}
        top = max(means.values()) if means else math.nan
        for m in methods:
            r = by.get((m, d))
            table.loc[m, d] = "—" if r is None else _cell_text(r.mean, r.std, r.n, expected_seeds,
                                                               r.repeated_seed, digits) + (" ‡" if r.sampled else "")
            best.loc[m, d] = m in means and means[m] == top
    return table, best


def styled_main_table(frame: DataFrame, metric: str = "ndcg@10", protocol: str = "full", expected_seeds: int = 3,
                      caption: str | None = None) -> Styler:
    """:func:`main_table_frame` as a pandas ``Styler``: the best mean of each dataset in bold."""
    table, best = main_table_frame(frame, metric, protocol, expected_seeds)
    styler = table.style.apply(lambda _: np.where(best, "font-weight: bold", ""), axis=None)
    styler = styler.set_caption(caption or f"Test {metric.upper()} ({protocol} ranking): mean ± std over seeds")
    return styler


def paired_seed_comparisons(frame: DataFrame, baseline: str = "sasrec", metric: str = "ndcg@10",
                            protocol: str = "full") -> DataFrame:
    """Every method against ``baseline`` on each dataset, paired by seed (only seeds both have, one row per
    seed: the latest; current configurations only). Columns: dataset, method, n, baseline, mean, diff, low,
    high (95 % CI), verdict."""
    import pandas as pd

    sub = _current(frame, protocol).dropna(subset=[metric, "seed"])
    out = []
    for dataset in _order_datasets(sub["dataset"]):
        d = sub[sub["dataset"] == dataset]
        base = d[d["method"] == baseline].drop_duplicates("seed", keep="last").set_index("seed")[metric]
        for method in _order_methods(d["method"]):
            if method == baseline:
                continue
            other = d[d["method"] == method].drop_duplicates("seed", keep="last").set_index("seed")[metric]
            common = sorted(set(base.index) & set(other.index))
            row = {"dataset": dataset, "method": method, "n": len(common),
                   "baseline": float(base.loc[common].mean()) if common else math.nan,
                   "mean": float(other.loc[common].mean()) if common else math.nan}
            if len(common) >= 2:
                ci = paired_ci(other.loc[common].to_numpy(float), base.loc[common].to_numpy(float))
                row.update(diff=ci["diff"], low=ci["low"], high=ci["high"])
            else:
                row.update(diff=row["mean"] - row["baseline"], low=math.nan, high=math.nan)
            row["verdict"] = verdict(row["low"], row["high"])
            out.append(row)
    return pd.DataFrame(out, columns=["dataset", "method", "n", "baseline", "mean", "diff", "low", "high", "verdict"])


# ----------------------------------------------------------------------------- cost
def parse_options(text: str | None) -> dict[str, Any]:
    """``"dropout=0.2 k=40 layout=tf"`` (a row's ``options`` column) -> ``{"dropout": 0.2, "k": 40, "layout": "tf"}``."""
    return dict(parse_key_value(item) for item in str(text or "").split() if "=" in item)


def dataset_size(name: str) -> tuple[int, int]:
    """``(n_items, n_users)`` of a dataset without loading it: the registry's statistics of the published file,
    or the generated data for ``"synthetic"``."""
    if name == "synthetic":
        from ..data import make_synthetic

        data = make_synthetic(seed=0)  # what the runner trains on for "synthetic"
        return data.n_items, data.n_users
    from ..data.registry import get_spec

    stats = get_spec(name).file_stats
    return int(stats.items), int(stats.users)


def parameter_count(model: str, dataset: str, max_len: int, options: Mapping[str, Any] | str | None = None) -> int:
    """Trainable parameters of the model a results row describes (built on the CPU, never trained)."""
    from ..models import build_model

    opts = parse_options(options) if isinstance(options, str) or options is None else dict(options)
    n_items, n_users = dataset_size(dataset)
    net = build_model(model, n_items=n_items, max_len=int(max_len), n_users=n_users, **opts)
    return int(sum(p.numel() for p in net.parameters() if p.requires_grad))


_CELL = re.compile(r"^\s*([0-9.]+)\s*/\s*([0-9.]+)\s*/\s*([0-9.]+)\s*$")


def read_scaling_table(path: str | Path) -> DataFrame | None:
    """The efficiency lab's Markdown table (``results/benchmarks/attention_scaling.md``) as a long DataFrame
    (model, L, ms, activation_mib, gflops, params), or ``None`` when the file does not exist."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        return None
    rows, lengths = [], None
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "model":
            lengths = [int(c[2:]) if c.startswith("L=") else None for c in cells]
            continue
        if lengths is None or set(cells[0]) <= set("-: "):
            continue
        params = int(cells[1].replace(",", "")) if cells[1].replace(",", "").isdigit() else None
        for length, cell in zip(lengths, cells):
            m = _CELL.match(cell) if length else None
            if m:
                rows.append({"model": cells[0], "L": length, "ms": float(m[1]), "activation_mib": float(m[2]),
                             "gflops": float(m[3]), "params": params})
    return pd.DataFrame(rows, columns=["model", "L", "ms", "activation_mib", "gflops", "params"])


# ----------------------------------------------------------------------------- curves
def find_curve(results: str | Path, row: Mapping[str, Any]) -> Path | None:
    """The per-epoch curve file of a results row: ``curves/<tag>_<run_id>.csv`` beside the results file, or the
    older name ``curves/<tag>.csv`` for rows without a ``run_id``; ``None`` when there is none.

    An older name is shared by every run with the same tag (the last one to finish wrote it), so it is only
    returned when its number of epochs matches the row's."""
    from ..experiments.results import curve_path

    raw = f"{row['model']}_{row['dataset']}_{row['loss']}_{row['protocol']}_s{int(row['seed'])}"
    tag = re.sub(r"[^A-Za-z0-9_.@-]+", "-", raw)
    run_id = _text(row.get("run_id"))
    if run_id:
        path = curve_path(results, tag, run_id)
        return path if path.exists() else None
    path = Path(results).parent / "curves" / f"{tag}.csv"
    if not path.exists():
        return None
    epochs = _text(row.get("epochs"))
    if epochs and epochs.isdigit() and len(load_curve(path)) != int(epochs):
        return None  # the curve of another run with the same tag
    return path


def load_curve(path: str | Path) -> list[dict[str, float]]:
    """A curve CSV as a history (a list of per-epoch dicts); empty cells (epochs without validation) are left out."""
    out = []
    with open(path, newline="") as fh:
        for rec in csv.DictReader(fh):
            out.append({k: float(v) for k, v in rec.items() if v not in ("", None)})
    return out


# ----------------------------------------------------------------------------- figures
def _pretty(metric: str) -> str:
    return metric.replace("ndcg", "NDCG").replace("hr@", "HR@").replace("mrr", "MRR")


def _panel_grid(n: int, panel_size: tuple[float, float], ncols: int):
    """``n`` axes in rows of at most ``ncols`` (the unused ones of the last row hidden), as a flat array."""
    import matplotlib.pyplot as plt

    cols, rows = min(n, ncols), math.ceil(n / ncols)
    _, grid = plt.subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows), layout="constrained",
                           squeeze=False)
    for ax in grid.flat[n:]:
        ax.set_visible(False)
    return grid.flat[:n]


def plot_metric_bars(frame: DataFrame, metric: str = "ndcg@10", protocol: str = "full",
                     datasets: Sequence[str] | None = None, axes: Axes | Sequence[Axes] | np.ndarray | None = None,
                     title: str | None = None, variants: bool = False, ncols: int = 2) -> Figure:
    """One panel per dataset (``ncols`` to a row): a bar per method at the mean over seeds, the sample standard
    deviation as an error bar, and every seed as a dot (current configurations only; the presets'
    configurations unless ``variants``). Returns the figure."""
    import seaborn as sns

    sub = _current(frame, protocol)
    sub = sub[sub[metric].notna()]
    if not variants and "variant" in sub:
        sub = sub[~sub["variant"].astype(bool)]
    datasets = list(datasets) if datasets is not None else _order_datasets(sub["dataset"])
    if not datasets:
        raise ValueError(f"no {protocol} runs with {metric} to plot")
    if axes is None:
        n_methods = max(1, sub["method"].nunique())
        width = max(4.0, 0.55 * n_methods + 1.5, 7.0 / min(len(datasets), ncols))
        axes = _panel_grid(len(datasets), (width, 4.2), ncols)
    axes = np.atleast_1d(axes)
    for ax, dataset in zip(axes, datasets):
        d = sub[sub["dataset"] == dataset]
        order = _order_methods(d["method"])
        sns.barplot(data=d, x="method", y=metric, order=order, errorbar="sd", capsize=0.25, ax=ax,
                    hue="method", hue_order=order, legend=False, alpha=0.8)
        sns.stripplot(data=d, x="method", y=metric, order=order, color="black", size=4, jitter=0.15, ax=ax)
        ax.set(title=dataset, xlabel="", ylabel=f"test {_pretty(metric)}")
        ax.set_xticks(range(len(order)), [textwrap.fill(m, 16) for m in order], rotation=60, ha="right")
    fig = axes[0].figure
    fig.suptitle(title or f"Test {_pretty(metric)} ({protocol} ranking)\nbars = mean over seeds, error bars = "
                          "sample std, dots = single runs")
    return fig


def plot_accuracy_vs_cost(frame: DataFrame, cost: str = "train_seconds", metric: str = "ndcg@10",
                          protocol: str = "full", datasets: Sequence[str] | None = None,
                          axes: Axes | Sequence[Axes] | np.ndarray | None = None, logx: bool | str = "auto",
                          xlabel: str | None = None, title: str | None = None, ncols: int = 3) -> Figure:
    """One panel per dataset (``ncols`` to a row): each method at (mean cost, mean metric) with sample-std error
    bars in both directions, and its runs as faint dots. ``cost`` is any numeric column (``train_seconds``,
    ``seconds_per_epoch``, or one you add, such as ``params``). ``logx="auto"`` uses a logarithmic cost axis
    when a panel's costs span more than a factor of 10. Returns the figure."""
    sub = _current(frame, protocol)
    sub = sub[sub[metric].notna() & sub[cost].notna()]
    datasets = list(datasets) if datasets is not None else _order_datasets(sub["dataset"])
    if not datasets:
        raise ValueError(f"no {protocol} runs with both {metric} and {cost} to plot")
    empty = [name for name in datasets if not (sub["dataset"] == name).any()]
    if empty:
        raise ValueError(f"no {protocol} runs with both {metric} and {cost} on {', '.join(map(repr, empty))}; the "
                         f"runs cover {', '.join(map(repr, _order_datasets(sub['dataset'])))}")
    if axes is None:
        axes = _panel_grid(len(datasets), (5.2, 4.2), ncols)
    axes = np.atleast_1d(axes)
    methods = _order_methods(sub["method"])
    colours = dict(zip(methods, _palette(len(methods))))
    for ax, dataset in zip(axes, datasets):
        d = sub[sub["dataset"] == dataset]
        for method in _order_methods(d["method"]):
            g = d[d["method"] == method]
            x, y = g[cost].to_numpy(float), g[metric].to_numpy(float)
            mx, sx, _ = mean_std(x)
            my, sy, _ = mean_std(y)
            ax.scatter(x, y, color=colours[method], alpha=0.35, s=18)
            ax.errorbar(mx, my, xerr=None if math.isnan(sx) else sx, yerr=None if math.isnan(sy) else sy,
                        fmt="o", color=colours[method], markersize=7, capsize=3, label=method)
            ax.annotate(method, (mx, my), textcoords="offset points", xytext=(5, 4), fontsize=8)
        costs = d[cost].to_numpy(float)
        if logx is True or (logx == "auto" and costs.min() > 0 and costs.max() / costs.min() > 10):
            ax.set_xscale("log")
        ax.set(title=dataset, xlabel=xlabel or cost.replace("_", " "), ylabel=f"test {_pretty(metric)}")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig = axes[0].figure
    if title:
        fig.suptitle(title)
    return fig


def _palette(n: int) -> list:
    import seaborn as sns

    return list(sns.color_palette("colorblind", n_colors=max(n, 1)))


def plot_scorecard(rows: Sequence[Mapping[str, Any]], ax: Axes | None = None, title: str | None = None) -> Axes:
    """Published (hollow) against ours (filled) for every scorecard row that has a run, one line per cell,
    labelled with the relative difference. ``rows`` come from ``report.scorecard_rows``. Returns the axis."""
    import matplotlib.pyplot as plt

    have = [r for r in rows if r.get("seeds") and not math.isnan(float(r.get("ours", math.nan)))]
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.45 * max(len(have), 2) + 1.2), layout="constrained")
    if not have:
        ax.text(0.5, 0.5, "no published cell has a matching run yet", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return ax
    protocols = sorted({r["protocol"] for r in have})
    colours = dict(zip(protocols, _palette(len(protocols))))
    labels = []
    for i, r in enumerate(have):
        c = colours[r["protocol"]]
        ax.plot([r["published"], r["ours"]], [i, i], color=c, linewidth=1.5, alpha=0.6)
        ax.plot(r["published"], i, "o", markerfacecolor="white", markeredgecolor=c, markersize=8)
        ax.plot(r["ours"], i, "o", color=c, markersize=7)
        rel = (r["ours"] - r["published"]) / r["published"]
        ax.annotate(f"{rel:+.0%}", (max(r["published"], r["ours"]), i), textcoords="offset points", xytext=(6, -3),
                    fontsize=8)
        seeds = f" [{r['seeds']}]" if r["seeds"] != 1 else ""
        labels.append(f"{r['paper']} T{r['table']} · {r['model']} · {r['dataset']} · {_pretty(r['metric'])}{seeds}")
    ax.set_yticks(range(len(have)), labels, fontsize=8)
    ax.invert_yaxis()
    for p in protocols:
        ax.plot([], [], "o", color=colours[p], label=f"ours ({p})")
    ax.plot([], [], "o", markerfacecolor="white", markeredgecolor="grey", label="published")
    ax.legend(fontsize=8, loc="lower right")
    ax.set(xlabel="metric value", title=title or "Reproduction scorecard: published (hollow) vs ours (filled)")
    return ax


__all__ = ["ROW_METRICS", "mean_std", "paired_t", "t_critical", "paired_ci", "verdict", "method_label", "runs_frame",
           "set_aside", "coverage_frame", "missing_runs", "seed_summary", "main_table_frame", "styled_main_table",
           "paired_seed_comparisons", "parse_options", "dataset_size", "parameter_count", "read_scaling_table",
           "find_curve", "load_curve", "plot_metric_bars", "plot_accuracy_vs_cost", "plot_scorecard"]
