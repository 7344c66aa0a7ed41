"""Notebook 07's tables, statistics and figures: the numbers are the ones the rows say, nothing is invented for a
missing run, settings mixed into a seed group are flagged, and every figure builds."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest

from tutorial_lib.experiments.report import latest_runs, main_table, scorecard_rows
from tutorial_lib.experiments.results import append_run, curve_path, read_runs, write_curve
from tutorial_lib.viz import benchmark as vb


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _row(model="sasrec", dataset="ml-1m", seed=42, ndcg=0.10, loss="ce", protocol="full", seconds=100.0, epochs=10,
         training="epochs=200 lr=0.001", run_id=None, **extra):
    row = {"model": model, "dataset": dataset, "protocol": protocol, "loss": loss, "seed": seed, "hr@10": 2 * ndcg,
           "ndcg@10": ndcg, "hr@20": 3 * ndcg, "ndcg@20": 1.2 * ndcg, "mrr": 0.8 * ndcg, "best_epoch": epochs - 2,
           "epochs": epochs, "train_seconds": seconds, "seconds_per_epoch": seconds / epochs, "device": "cpu",
           "command": "python -m tutorial_lib benchmark", "max_len": 200 if dataset.startswith("ml") else 50,
           "options": f"dropout={0.2 if dataset.startswith('ml') else 0.5}",
           "training": training, "run_id": run_id or f"{model}{dataset}{loss}{protocol}{seed}{training}"[:40]}
    row.update(extra)
    return row


@pytest.fixture()
def results(tmp_path):
    path = tmp_path / "runs.csv"
    for seed, (a, b, c) in zip((42, 43, 44), ((0.100, 0.110, 0.090), (0.104, 0.112, 0.095), (0.098, 0.111, 0.093))):
        append_run(_row("sasrec", seed=seed, ndcg=a, seconds=100 + seed), path)
        append_run(_row("fparec", seed=seed, ndcg=b, seconds=120 + seed), path)
        append_run(_row("sasrec", seed=seed, ndcg=c / 4, loss="bce", seconds=50.0), path)
    append_run(_row("sasrec", dataset="beauty", seed=42, ndcg=0.03), path)
    append_run(_row("sasrec", protocol="sampled100", loss="bce", ndcg=0.58), path)
    return path


# ----------------------------------------------------------------------------- statistics
def test_mean_std_is_the_sample_std_and_ignores_nan():
    assert vb.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)
    mean, std, n = vb.mean_std([0.1, float("nan"), 0.3])
    assert math.isclose(mean, 0.2) and math.isclose(std, math.sqrt(0.02)) and n == 2
    assert math.isnan(vb.mean_std([0.5])[1]) and vb.mean_std([0.5])[0] == 0.5
    assert vb.mean_std([])[2] == 0 and math.isnan(vb.mean_std([float("nan")])[0])


def test_paired_t_uses_the_differences():
    a, b = [0.12, 0.13, 0.11], [0.10, 0.12, 0.10]
    mean, se, t = vb.paired_t(a, b)
    d = np.subtract(a, b)
    assert math.isclose(mean, d.mean()) and math.isclose(se, d.std(ddof=1) / math.sqrt(3)) and math.isclose(t, mean / se)
    # a shared offset per pair (an easy user) does not change anything
    offset = np.array([0.5, -0.3, 0.2])
    assert np.allclose(vb.paired_t(np.add(a, offset), np.add(b, offset)), (mean, se, t))
    with pytest.raises(ValueError, match="same length"):
        vb.paired_t([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="at least 2"):
        vb.paired_t([1.0], [0.0])
    assert vb.paired_t([1.0, 2.0], [0.0, 1.0])[2] == math.inf


def test_t_critical_matches_the_t_distribution():
    assert vb.t_critical(1) == pytest.approx(12.706, abs=1e-3) and vb.t_critical(2) == pytest.approx(4.303, abs=1e-3)
    assert vb.t_critical(10_000) == pytest.approx(1.96, abs=1e-3)
    values = [vb.t_critical(df) for df in range(1, 200)]
    assert all(x > y for x, y in zip(values, values[1:]))  # decreasing towards the normal quantile
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 29, 30, 31, 40, 100, 1000):
        assert vb.t_critical(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=2e-4)
    with pytest.raises(ValueError):
        vb.t_critical(0)


def test_paired_ci_and_verdict():
    ci = vb.paired_ci([0.12, 0.13, 0.11], [0.10, 0.12, 0.10])
    assert ci["n"] == 3 and ci["low"] < ci["diff"] < ci["high"]
    assert math.isclose(ci["high"] - ci["diff"], 4.3027 * ci["se"], rel_tol=1e-4)
    assert vb.verdict(0.01, 0.02) == "better" and vb.verdict(-0.02, -0.01) == "worse"
    assert vb.verdict(-0.01, 0.02) == "not distinguishable" and vb.verdict(math.nan, math.nan) == "too few seeds"


# ----------------------------------------------------------------------------- tables
def test_runs_frame_parses_rows_and_labels_methods(results):
    f = vb.runs_frame(results)
    assert len(f) == 11 and set(f["method"]) == {"sasrec", "fparec", "sasrec (bce)"}
    assert f["ndcg@10"].dtype == float and int(f["seed"].iloc[0]) == 42
    empty = vb.runs_frame(results.parent / "missing.csv")
    assert empty.empty and vb.set_aside(empty).empty and vb.seed_summary(empty).empty
    assert vb.missing_runs(empty, [("sasrec", "ce")], ["ml-1m"], [42]) == [{"method": "sasrec", "dataset": "ml-1m",
                                                                            "seed": 42}]
    assert vb.coverage_frame(empty, [("sasrec", "ce")], ["ml-1m"], [42]).loc["sasrec", "ml-1m"] == "0/1"
    assert vb.paired_seed_comparisons(empty).empty and vb.main_table_frame(empty)[0].empty
    # the same run_id twice: only the latest row counts
    append_run(_row("fparec", seed=42, ndcg=0.5), results)
    f2 = vb.runs_frame(results)
    assert len(f2) == 11 and f2.loc[(f2["method"] == "fparec") & (f2["seed"] == 42), "ndcg@10"].item() == 0.5


def test_main_table_agrees_with_the_report_and_marks_the_best(results):
    f = vb.runs_frame(results)
    table, best = vb.main_table_frame(f, "ndcg@10")
    assert list(table.index) == ["sasrec", "sasrec (bce)", "fparec"] and list(table.columns) == ["ml-1m", "beauty"]
    mean, std, _ = vb.mean_std([0.110, 0.112, 0.111])
    assert table.loc["fparec", "ml-1m"] == f"{mean:.4f} ± {std:.4f}"
    assert table.loc["sasrec", "beauty"] == "0.0300 [1]" and table.loc["fparec", "beauty"] == "—"
    assert best.loc["fparec", "ml-1m"] and not best.loc["sasrec", "ml-1m"] and best.loc["sasrec", "beauty"]
    # the same cells as report.main_table (the README's version)
    text = main_table(latest_runs(read_runs(results)))
    assert f"**{mean:.4f} ± {std:.4f}**" in text
    html = vb.styled_main_table(f).to_html()
    assert "font-weight: bold" in html and "mean ± std" in html
    empty, empty_best = vb.main_table_frame(f.iloc[:0])
    assert empty.empty and empty_best.empty


def test_only_the_configuration_validation_prefers_is_averaged_as_in_the_report(results):
    append_run(_row("sasrec", dataset="toys", seed=42, ndcg=0.05, training="lr=0.001", date="2026-01-01T00:00:00Z",
                    **{"valid_ndcg@10": 0.06}), results)
    append_run(_row("sasrec", dataset="toys", seed=43, ndcg=0.07, training="lr=0.001", date="2026-01-01T00:00:01Z",
                    **{"valid_ndcg@10": 0.07}), results)
    append_run(_row("sasrec", dataset="toys", seed=42, ndcg=0.06, training="lr=0.002", date="2026-01-02T00:00:00Z",
                    **{"valid_ndcg@10": 0.066}), results)     # newer, and a better validation than lr=0.001's mean
    f = vb.runs_frame(results)
    toys = f[f["dataset"] == "toys"]
    assert list(toys["current"]) == [False, False, True] and len(vb.set_aside(f)) == 2
    append_run(_row("sasrec", dataset="toys", seed=42, ndcg=0.04, training="lr=0.003", date="2026-01-03T00:00:00Z",
                    **{"valid_ndcg@10": 0.064}), results)     # the newest, but validation prefers lr=0.002
    f = vb.runs_frame(results)
    assert list(f[f["dataset"] == "toys"]["current"]) == [False, False, True, False]
    s = vb.seed_summary(f, ("ndcg@10",))
    row = s[s["dataset"] == "toys"].iloc[0]
    assert row["n"] == 1 and row["mean"] == 0.06 and not row["repeated_seed"]
    table, _ = vb.main_table_frame(f)
    assert table.loc["sasrec", "toys"] == "0.0600 [1]"
    assert f"0.0600 [1]" in main_table(latest_runs(read_runs(results)))  # the README's table agrees
    assert vb.coverage_frame(f, [("sasrec", "ce")], ["toys"], [42, 43]).loc["sasrec", "toys"] == "1/2"
    # rows of older versions (no training column) are told apart by their command; a repeated seed is flagged
    legacy = [{"model": "sasrec", "dataset": "ml-1m", "protocol": "full", "loss": "ce", "seed": "42", "ndcg@10": "0.1",
               "hr@10": "0.2", "command": f"train --lr {lr} --seed 42", "date": date}
              for lr, date in (("1e-3", "2026-01-01"), ("2e-3", "2026-01-02"), ("2e-3", "2026-01-03"))]
    f = vb.runs_frame(legacy)
    assert list(f["current"]) == [False, True, True]
    assert vb.seed_summary(f)["repeated_seed"].iloc[0]
    assert vb.main_table_frame(f)[0].loc["sasrec", "ml-1m"].endswith("†")


def test_coverage_and_missing_runs_never_invent_anything(results):
    f = vb.runs_frame(results)
    models, datasets = [("sasrec", "ce"), ("sasrec", "bce"), ("rksa", "ce")], ["ml-1m", "beauty"]
    cov = vb.coverage_frame(f, models, datasets, [42, 43, 44])
    assert cov.loc["sasrec", "ml-1m"] == "3/3" and cov.loc["sasrec", "beauty"] == "1/3"
    assert cov.loc["rksa", "ml-1m"] == "0/3" and cov.loc["sasrec (bce)", "ml-1m"] == "3/3"
    missing = vb.missing_runs(f, models, datasets, [42, 43, 44])
    assert {"method": "sasrec", "dataset": "beauty", "seed": 43} in missing
    assert len(missing) == 3 + 2 + 3 + 3  # rksa on ml-1m, sasrec on beauty, sasrec (bce) and rksa on beauty


def test_paired_seed_comparisons(results):
    f = vb.runs_frame(results)
    cmp = vb.paired_seed_comparisons(f, "sasrec", "ndcg@10")
    row = cmp[(cmp["dataset"] == "ml-1m") & (cmp["method"] == "fparec")].iloc[0]
    ci = vb.paired_ci([0.110, 0.112, 0.111], [0.100, 0.104, 0.098])
    assert row["n"] == 3 and math.isclose(row["diff"], ci["diff"]) and math.isclose(row["low"], ci["low"])
    assert row["verdict"] == "better"
    bce = cmp[(cmp["dataset"] == "ml-1m") & (cmp["method"] == "sasrec (bce)")].iloc[0]
    assert bce["verdict"] == "worse"
    assert cmp[cmp["dataset"] == "beauty"].empty  # no other method on beauty


# ----------------------------------------------------------------------------- cost
def test_parse_options_and_parameter_count():
    assert vb.parse_options("dropout=0.2 k=40 layout=tf flag=True") == {"dropout": 0.2, "k": 40, "layout": "tf",
                                                                         "flag": True}
    assert vb.parse_options(None) == {} and vb.parse_options("") == {}
    from tutorial_lib.models import build_model

    expected = sum(p.numel() for p in build_model("fparec", n_items=3416, max_len=200, n_users=6040, k=40).parameters())
    assert vb.parameter_count("fparec", "ml-1m", 200, "dropout=0.2 k=40") == expected
    assert vb.dataset_size("ml-1m") == (3416, 6040)
    n_items, n_users = vb.dataset_size("synthetic")
    assert vb.parameter_count("sasrec", "synthetic", 50, {}) > n_items * 64


def test_read_scaling_table(tmp_path):
    assert vb.read_scaling_table(tmp_path / "none.md") is None
    md = tmp_path / "attention_scaling.md"
    md.write_text("One attention layer ...\n\n| model | params (L=200) | L=50 | L=200 | time growth | memory growth |\n"
                  "|---|---:|---:|---:|---:|---:|\n| sasrec | 282,048 | 3 / 1 / 0.01 | 12 / 6 / 0.10 | L^1.00 | L^1.00 |\n"
                  "| rksa | 700,870 | 9 / 4 / 0.02 | — | L^nan | L^nan |\n\n- a claim\n")
    table = vb.read_scaling_table(md)
    assert len(table) == 3 and set(table["model"]) == {"sasrec", "rksa"}
    s200 = table[(table["model"] == "sasrec") & (table["L"] == 200)].iloc[0]
    assert (s200["ms"], s200["activation_mib"], s200["gflops"], s200["params"]) == (12.0, 6.0, 0.10, 282048)


def test_curves_are_found_by_run_id_and_by_the_older_name(tmp_path):
    results = tmp_path / "runs.csv"
    row = _row(run_id="abc123")
    history = [{"epoch": 1, "loss": 2.0, "seconds": 1.0}, {"epoch": 2, "loss": 1.5, "seconds": 1.0, "valid_ndcg@10": 0.1}]
    assert vb.find_curve(results, row) is None
    write_curve(history, curve_path(results, "sasrec_ml-1m_ce_full_s42", "abc123"))
    path = vb.find_curve(results, row)
    assert path is not None and path.name == "sasrec_ml-1m_ce_full_s42_abc123.csv"
    loaded = vb.load_curve(path)
    assert loaded[0] == {"epoch": 1.0, "loss": 2.0, "seconds": 1.0} and loaded[1]["valid_ndcg@10"] == 0.1
    legacy = dict(row, run_id=float("nan"), seed=43, epochs=2)
    write_curve(history, tmp_path / "curves" / "sasrec_ml-1m_ce_full_s43.csv")
    assert vb.find_curve(results, legacy).name == "sasrec_ml-1m_ce_full_s43.csv"
    # an older name holds the curve of the last run with that tag: not this row's when the epochs differ
    assert vb.find_curve(results, dict(legacy, epochs=5)) is None


# ----------------------------------------------------------------------------- figures
def test_figures_build(results):
    f = vb.runs_frame(results)
    fig = vb.plot_metric_bars(f, "ndcg@10")
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "ml-1m"
    f["params"] = [1e4 * 2.0**i for i in range(len(f))]
    fig = vb.plot_accuracy_vs_cost(f, "params", datasets=["ml-1m"])
    assert fig.axes[0].get_xscale() == "log"  # the costs span more than a factor of 10
    assert vb.plot_accuracy_vs_cost(f, "seconds_per_epoch", datasets=["ml-1m"]).axes[0].get_xscale() == "linear"
    fig = vb.plot_accuracy_vs_cost(f, "train_seconds", logx=False)
    assert len(fig.axes) == 2
    # many datasets wrap into rows of ncols panels; the unused ones of the last row are hidden
    fig = vb.plot_accuracy_vs_cost(f, "train_seconds", datasets=["ml-1m", "beauty"], ncols=1)
    assert [ax.get_subplotspec().rowspan.start for ax in fig.axes] == [0, 1]
    fig = vb.plot_metric_bars(f, "ndcg@10", datasets=["ml-1m", "beauty", "ml-1m"], ncols=2)
    assert len(fig.axes) == 4 and [ax.get_visible() for ax in fig.axes] == [True, True, True, False]
    with pytest.raises(ValueError, match="no full runs"):
        vb.plot_metric_bars(f.iloc[:0])
    with pytest.raises(ValueError, match="no full runs .* on 'yelp'; the runs cover 'ml-1m', 'beauty'"):
        vb.plot_accuracy_vs_cost(f, "train_seconds", datasets=["ml-1m", "yelp"])     # was numpy's zero-size error
    rows = scorecard_rows(latest_runs(read_runs(results)))
    ax = vb.plot_scorecard(rows)
    assert any("FPARec" in t.get_text() for t in ax.get_yticklabels())
    ax = vb.plot_scorecard([r for r in rows if not r["seeds"]])
    assert not ax.axison


def test_sampled_softmax_runs_are_their_method_s_cells_as_in_the_readme(tmp_path):
    path = tmp_path / "runs.csv"
    append_run(_row("sasrec", dataset="beauty", ndcg=0.03, loss="sampled-ce"), path)
    append_run(_row("fparec", dataset="beauty", ndcg=0.02, loss="sampled-ce"), path)
    append_run(_row("sasrec", dataset="beauty", ndcg=0.04, loss="ce", date="2030-01-01T00:00:00Z"), path)  # newer
    f = vb.runs_frame(path)
    assert set(f["method"]) == {"sasrec", "fparec"}
    chosen = f[f["current"]]
    assert list(chosen["loss"]) == ["sampled-ce", "sampled-ce"]   # beauty's methods mostly used sampled softmax
    table, _ = vb.main_table_frame(f, expected_seeds=1)
    assert table.loc["sasrec", "beauty"] == "0.0300 ‡"
    assert vb.missing_runs(f, [("sasrec", "ce")], ["beauty"], [42]) == []


def test_a_live_slice_with_shared_overrides_is_labelled_relative_to_its_own_settings(tmp_path):
    from tutorial_lib.experiments.run import ExperimentSpec

    path = tmp_path / "runs.csv"
    tiny = {"dataset": "synthetic", "max_len": 20, "options": "d_model=16 n_layers=1 dropout=0.2"}
    for seed in (42, 43):
        append_run(_row("sasrec", seed=seed, **tiny), path)
        append_run(_row("sasrec", seed=seed, loss="bce", ndcg=0.05, **tiny), path)
    base = ExperimentSpec(max_len=20, model_options={"d_model": 16, "n_layers": 1})
    plain, own = vb.runs_frame(path), vb.runs_frame(path, base=base)
    assert set(plain["method"]) == {"sasrec (L=20, d_model=16, n_layers=1)", "sasrec (bce, L=20, d_model=16, n_layers=1)"}
    assert plain["variant"].all() and set(own["method"]) == {"sasrec", "sasrec (bce)"} and not own["variant"].any()
    assert vb.coverage_frame(own, [("sasrec", "ce"), ("sasrec", "bce")], ["synthetic"], [42, 43]).values.tolist() == [
        ["2/2"], ["2/2"]]
    runs = latest_runs(read_runs(path))
    assert "| sasrec (bce) |" in main_table(runs, base=base) and "_No full runs" in main_table(runs)
    with pytest.raises(ValueError, match="no full runs"):            # the bars show the presets' methods only
        vb.plot_metric_bars(plain)
    fig = vb.plot_metric_bars(plain, variants=True)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()][0] == "sasrec (L=20,\nd_model=16,\nn_layers=1)"
