"""README's results section is generated from results/runs.csv and must match it."""
from __future__ import annotations

import re

import pytest

from tutorial_lib.experiments import report
from tutorial_lib.experiments.results import append_run, project_root


def test_readme_results_section_matches_runs_csv():
    assert report.main(["--check"]) == 0, "run: python -m tutorial_lib.experiments.report --write"


ROW = {"model": "sasrec", "dataset": "ml-1m", "protocol": "full", "loss": "ce", "seed": 1, "hr@10": 0.3,
       "ndcg@10": 0.15, "hr@20": 0.4, "ndcg@20": 0.18, "mrr": 0.12, "best_epoch": 3, "epochs": 5,
       "train_seconds": 10.0, "seconds_per_epoch": 2.0, "device": "cpu"}


def test_reruns_beside_the_results_file_replace_the_rows_of_their_runs(tmp_path):
    """A rerun (same run id, after an evaluator fix) in ablations/validation_negatives.csv takes its run's place in
    the reported rows; one of a run the file does not have is ignored, and so is a rerun file elsewhere."""
    path = tmp_path / "runs.csv"
    append_run({**ROW, "run_id": "a", "hr@10": 0.30}, path)
    append_run({**ROW, "run_id": "b", "seed": 2, "hr@10": 0.32}, path)
    append_run({**ROW, "dataset": "synthetic", "run_id": "s"}, path)                 # a demonstration: never
    reruns = tmp_path / report.RERUNS
    append_run({**ROW, "run_id": "a", "hr@10": 0.29}, reruns)
    append_run({**ROW, "run_id": "s", "dataset": "synthetic"}, reruns)              # its run is not reported
    append_run({**ROW, "run_id": "z", "seed": 9, "hr@10": 0.99}, reruns)           # no such run in runs.csv
    runs = {r["run_id"]: r["hr@10"] for r in report.latest_runs(report.reported_rows(path))}
    assert runs == {"a": 0.29, "b": 0.32}
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / "runs.csv"
    moved.write_text(path.read_text())
    assert {r["run_id"]: r["hr@10"] for r in report.latest_runs(report.reported_rows(moved))}["a"] == 0.30


def test_tables_average_seeds_mark_the_best_and_place_published_numbers(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "run_id": "a"}, path)
    append_run({**ROW, "seed": 2, "ndcg@10": 0.17, "run_id": "b"}, path)
    append_run({**ROW, "seed": 2, "ndcg@10": 0.19, "run_id": "b"}, path)          # a rerun replaces its row
    append_run({**ROW, "model": "fparec", "ndcg@10": 0.10, "run_id": "c"}, path)
    append_run({**ROW, "protocol": "sampled100", "loss": "bce", "hr@10": 0.8, "run_id": "d"}, path)
    runs = report.latest_runs(report.read_runs(path))
    table = report.main_table(runs)
    assert "| sasrec | **0.1700 ± 0.0283 [2]** |" in table                         # mean of 0.15 and 0.19
    assert "| fparec | 0.1000 [1] |" in table
    card = {(r["paper"], r["model"], r["dataset"], r["metric"]): r for r in report.scorecard_rows(runs)}
    fp = card[("FPARec", "sasrec", "ml-1m", "ndcg@10")]
    assert fp["published"] == 0.1186 and abs(fp["ours"] - 0.17) < 1e-9 and fp["seeds"] == 2
    sa = card[("SASRec", "sasrec", "ml-1m", "hr@10")]
    assert sa["published"] == 0.8245 and sa["ours"] == 0.8
    assert card[("RKSA", "rksa", "video", "hr@10")]["reason"].startswith("not run yet")
    full = report.render_results_readme(path)
    assert full.count("| sasrec | ml-1m | full | ce |") == 3 and "## Protocol `sampled100`" in full


def test_a_shorter_sequence_length_is_its_own_method_and_never_replaces_the_default(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "max_len": 200, "date": "2026-01-01", "run_id": "a"}, path)
    append_run({**ROW, "max_len": 50, "ndcg@10": 0.05, "date": "2026-02-01", "run_id": "b"}, path)  # newer
    append_run({**ROW, "model": "rksa", "max_len": 50, "ndcg@10": 0.06, "run_id": "c"}, path)       # rksa's preset
    runs = report.latest_runs(report.read_runs(path))
    assert [report.run_label(r) for r in runs] == ["sasrec", "sasrec (L=50)", "rksa"]
    table, others = report.main_table(runs), report.main_table(runs, variants=True)
    assert "| sasrec | **0.1500 [1]** |" in table and "L=50" not in table
    assert "| sasrec (L=50) | budget not recorded | **0.0500 [1]** |" in others and "| sasrec |" not in others
    card = {(r["paper"], r["model"], r["dataset"], r["metric"]): r for r in report.scorecard_rows(runs)}
    assert card[("FPARec", "sasrec", "ml-1m", "ndcg@10")]["ours"] == 0.15                  # the default-length run
    assert report.run_label({**ROW, "loss": "bce", "max_len": "50"}) == "sasrec (bce, L=50)"


def test_a_published_metric_we_do_not_record_is_explained_and_left_out_of_the_short_card(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "model": "rksa", "dataset": "video", "protocol": "sampled100", "loss": "bce", "max_len": 50,
                "hr@10": 0.75, "run_id": "a"}, path)
    runs = report.latest_runs(report.read_runs(path))
    card = {(r["paper"], r["model"], r["dataset"], r["metric"]): r for r in report.scorecard_rows(runs)}
    assert card[("RKSA", "rksa", "video", "hr@10")]["ours"] == 0.75
    assert "hr@5 is not recorded" in card[("RKSA", "rksa", "video", "hr@5")]["reason"]
    short = report.scorecard_table(runs, only_run=True)
    assert "| hr@10 | 0.7551 | 0.7500 |" in short and "| hr@5 |" not in short


def test_replace_section_requires_markers():
    with pytest.raises(ValueError, match="markers"):
        report.replace_section("no markers here", "x")
    text = f"a\n{report.START}\nold\n{report.END}\nb"
    assert report.replace_section(text, "NEW") == "a\nNEW\nb"


def test_project_root_has_readme():
    assert (project_root() / "README.md").exists()


def test_locker_table_compares_each_encoder_with_its_own_backbone_and_the_paper(tmp_path):
    path = tmp_path / "runs.csv"
    base = {**ROW, "dataset": "beauty-locker", "protocol": "full-nohist", "loss": "sampled-ce"}
    append_run({**base, "hr@20": 0.05, "ndcg@20": 0.020, "run_id": "a"}, path)
    append_run({**base, "model": "locker-conv", "hr@20": 0.055, "ndcg@20": 0.025, "run_id": "b"}, path)
    append_run({**base, "model": "locker-conv", "loss": "ce", "hr@20": 0.9, "ndcg@20": 0.9, "run_id": "c"}, path)
    runs = report.latest_runs(report.read_runs(path))
    table = report.locker_table(runs)
    lines = {line.split(" | ")[2] + "/" + line.split(" | ")[1]: line for line in table.splitlines()[2:]}
    conv = "| +10.0% / +25.0% | bert4rec-locker-conv | 0.0661 | 0.0297 | +22.2% / +24.8% |"   # ours, then the paper's
    assert conv in lines["locker-conv/sampled-ce"]
    assert "| 0.0500 | 0.0200 | backbone | bert4rec | 0.0541 | 0.0238 | backbone |" in lines["sasrec/sampled-ce"]
    assert "| not run | — | — / — |" in lines["locker-adapt/sampled-ce"]
    assert "| not run | — | backbone |" in lines["sasrec/ce"]           # the CE block has no backbone run,
    assert "| 0.9000 | 0.9000 | — / — |" in lines["locker-conv/ce"]     # so no change is claimed
    card = {(r["paper"], r["model"], r["dataset"], r["metric"]): r for r in report.scorecard_rows(runs)}
    sasrec = card[("Locker", "sasrec", "beauty-locker", "hr@20")]   # the paper does not say how SASRec was trained
    assert sasrec["ours"] == 0.05 and "ours trained with sampled-ce" in sasrec["reason"]
    assert report.locker_table([]) == "" and "Locker's local encoders" in report.render_section(path)
    summary = {line.split(" | ")[0] + line.split(" | ")[1]: line for line in report.locker_summary(runs).splitlines()
               if line.count(" | ") > 2}
    assert ("| 1 | 0.0500 / 0.0200 | not run | +10.0% / +25.0% | not run | not run | not run |"
            in summary["| beauty-lockerour SASRec (sampled-ce)"])
    assert "| 0.0541 / 0.0238 | +5.0% / +8.4% | +22.2% / +24.8% |" in summary["| beauty-lockerpaper: BERT4Rec"]
    assert "| 1 | not run | not run | — / — |" in summary["| beauty-lockerour SASRec (ce)"]  # no backbone,
    # so no change is claimed
    assert "°" not in report.locker_summary(runs)
    append_run({**base, "model": "locker-win", "training": "epochs=5 select=full", "run_id": "d"}, path)
    assert "| beauty-locker° |" in report.locker_summary(report.latest_runs(report.read_runs(path)))


def test_locker_changes_compare_the_seeds_both_models_were_run_with(tmp_path):
    path = tmp_path / "runs.csv"
    base = {**ROW, "dataset": "ml-1m", "protocol": "full-nohist", "loss": "ce"}
    for seed, hr in ((42, 0.40), (43, 0.30), (44, 0.20)):  # backbone mean 0.30 over three seeds
        append_run({**base, "seed": seed, "hr@20": hr, "ndcg@20": hr / 2, "run_id": f"s{seed}"}, path)
    append_run({**base, "model": "locker-win", "seed": 42, "hr@20": 0.42, "ndcg@20": 0.21, "run_id": "w"}, path)
    append_run({**base, "model": "locker-rnn", "seed": 7, "hr@20": 0.5, "ndcg@20": 0.25, "run_id": "r"}, path)
    runs = report.latest_runs(report.read_runs(path))
    row = next(line for line in report.locker_summary(runs).splitlines() if "our SASRec" in line)
    assert "| 0.3000 / 0.1500 |" in row                      # the backbone's mean over all its seeds
    cells = row.split(" | ")
    assert cells[6] == "+5.0% / +5.0%"                       # Win's seed 42 against the backbone's seed 42
    assert cells[4] == "— / —"                               # RNN shares no seed with the backbone
    table = report.locker_table(runs)
    assert "| locker-win | 0.4200 | 0.2100 | +5.0% / +5.0% |" in table


def test_sampled_softmax_runs_share_their_methods_row_and_are_compared_with_full_ce(tmp_path):
    path = tmp_path / "runs.csv"
    sampled = {**ROW, "dataset": "beauty", "loss": "sampled-ce", "training": "epochs=200 n_negatives=1024"}
    append_run({**sampled, "ndcg@10": 0.030, "hr@10": 0.05, "seconds_per_epoch": 8.0, "run_id": "a"}, path)
    append_run({**sampled, "model": "fparec", "ndcg@10": 0.028, "run_id": "b"}, path)
    append_run({**ROW, "dataset": "beauty", "training": "epochs=200", "ndcg@10": 0.032, "hr@10": 0.055,
                "seconds_per_epoch": 40.0, "run_id": "c"}, path)                       # SASRec with full CE too
    append_run({**ROW, "ndcg@10": 0.1, "run_id": "d"}, path)                            # ML-1M: CE only
    runs = report.latest_runs(report.read_runs(path))
    groups, marked = report.benchmark_groups(runs, "full")
    assert set(groups) == {("sasrec", "beauty"), ("fparec", "beauty"), ("sasrec", "ml-1m")}
    assert groups[("sasrec", "beauty")][0]["loss"] == "sampled-ce"   # beauty's methods mostly used sampled softmax
    assert marked == {("sasrec", "beauty"), ("fparec", "beauty")}
    table = report.main_table(runs)
    assert "| sasrec | **0.0300 [1]‡** | **0.1000 [1]** |" in table and "1,024 shared uniform negatives" in table
    comparison = report.loss_comparison_table(runs)
    assert comparison.count("\n| sasrec | beauty | 1 | 1,024 |") == 1 and "0.0320 | 0.0300 | -6.2%" in comparison
    assert "40.0 / 8.0" in comparison and "fparec" not in comparison
    assert "Sampled softmax against full cross-entropy" in report.render_results_readme(path)
    append_run({**sampled, "seed": 2, "ndcg@10": 0.010, "run_id": "e"}, path)        # a seed CE does not have
    comparison = report.loss_comparison_table(report.latest_runs(report.read_runs(path)))
    assert "0.0320 | 0.0300 | -6.2%" in comparison                                  # paired by seed: unchanged


def test_benchmark_progress_counts_the_cells_run_and_estimates_the_rest_from_the_dataset_s_runs(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "train_seconds": 3600.0, "run_id": "a"}, path)
    append_run({**ROW, "seed": 2, "train_seconds": 7200.0, "run_id": "b"}, path)
    append_run({**ROW, "model": "fparec", "train_seconds": 1800.0, "run_id": "c"}, path)
    append_run({**ROW, "dataset": "beauty", "loss": "sampled-ce", "train_seconds": 360.0, "run_id": "d"}, path)
    table = report.benchmark_progress(report.latest_runs(report.read_runs(path)))
    # ML-1M: 2 of 12 methods, 3 runs, 3.5 h; the 10 others at the median run (1 h)
    assert "| ml-1m | 2 / 12 | 3 | 3.5 | 10.0 |" in table
    assert "| beauty | 1 / 12 | 1 | 0.1 | 1.1 |" in table        # sampled softmax counts as the method's CE run
    assert "| sports | 0 / 12 | 0 | 0.0 | 1.2 |" in table         # no run yet: the median of the sparse runs (0.1 h)
    assert "| **all** | 3 / 72 | 4 |" in table


def test_benchmark_hardware_names_the_machines_the_counted_runs_trained_on(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "hardware": "cpu: AMD EPYC x1 threads", "run_id": "a"}, path)
    append_run({**ROW, "seed": 2, "hardware": "cpu: AMD EPYC x1 threads", "run_id": "b"}, path)
    append_run({**ROW, "seed": 3, "hardware": "cpu: Intel Xeon x2 threads", "run_id": "c"}, path)
    append_run({**ROW, "model": "fparec", "run_id": "d"}, path)                          # no hardware recorded
    append_run({**ROW, "dataset": "synthetic", "hardware": "cpu: Laptop x1 threads", "run_id": "e"}, path)
    hardware = report.benchmark_hardware(report.latest_runs(report.read_runs(path)))
    assert hardware == "AMD EPYC, 1 thread: 2 runs; Intel Xeon, 2 threads: 1 run; not recorded: 1 run"


def test_rows_whose_hardware_the_runner_could_not_write_are_read_corrected(tmp_path):
    """HARDWARE_CORRECTIONS replaces the hardware of exactly those runs, and agrees with their committed curves:
    each stretch covers its epochs in order, and where a run moved from a GPU to the CPU, its GPU epochs took
    seconds and its CPU epochs over a minute."""
    path = tmp_path / "runs.csv"
    fixed = next(iter(report.HARDWARE_CORRECTIONS))
    append_run({**ROW, "hardware": "cpu: AMD EPYC x1 threads", "run_id": fixed}, path)
    append_run({**ROW, "seed": 2, "hardware": "cpu: AMD EPYC x1 threads", "run_id": "other"}, path)
    read = {r["run_id"]: r["hardware"] for r in report.latest_runs(report.read_runs(path))}
    assert read == {fixed: report.HARDWARE_CORRECTIONS[fixed], "other": "cpu: AMD EPYC x1 threads"}
    for run_id, machines in report.HARDWARE_CORRECTIONS.items():
        (curve,) = (project_root() / "results" / "curves").glob(f"*_{run_id}.csv")
        seconds = [float(line.split(",")[2]) for line in curve.read_text().splitlines()[1:]]
        stretches = re.findall(r"(\w+): [^;]*\(epochs (\d+)-(\d+)\)", machines)
        if not stretches:                                      # one machine for every epoch
            assert "(epoch" not in machines and "not recorded" not in machines and seconds, run_id
            continue
        assert [int(first) for _, first, _ in stretches] == [1] + [int(last) + 1 for _, _, last in stretches[:-1]]
        assert int(stretches[-1][2]) == len(seconds)
        for device, first, last in stretches:
            epoch_seconds = seconds[int(first) - 1:int(last)]
            assert max(epoch_seconds) < 10 if device == "cuda" else min(epoch_seconds) > 60, (run_id, device)


def test_model_options_other_than_the_presets_name_their_own_configuration_and_reach_the_paper_s_cells(tmp_path):
    one_head = {**ROW, "dataset": "video", "loss": "bce", "protocol": "sampled100", "max_len": 50}
    assert report.run_label({**one_head, "options": "dropout=0.5 n_heads=1"}) == "sasrec (bce, n_heads=1)"
    assert report.run_label({**one_head, "options": "dropout=0.5"}) == "sasrec (bce)"       # the presets
    assert report.run_label({**one_head, "options": ""}) == "sasrec (bce)"                  # not recorded
    assert report.run_label({**one_head, "model": "rksa", "options": "dropout=0.5 n_heads=1"}) == "rksa (bce)"
    path = tmp_path / "runs.csv"
    append_run({**one_head, "options": "dropout=0.5 n_heads=1", "hr@10": 0.72, "date": "2026-01-01", "run_id": "a"},
               path)
    append_run({**one_head, "options": "dropout=0.5", "hr@10": 0.70, "date": "2026-02-01", "run_id": "b"}, path)
    card = {(r["paper"], r["model"], r["dataset"], r["metric"]): r
            for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))}
    assert card[("RKSA", "sasrec", "video", "hr@10")]["ours"] == 0.72        # the paper's one head, not the newer run
    append_run({**ROW, "dataset": "beauty", "loss": "sampled-ce", "hr@10": 0.08, "options": "dropout=0.5",
                "run_id": "c"}, path)
    card = {(r["paper"], r["model"], r["dataset"], r["metric"]): r
            for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))}
    fp = card[("FPARec", "sasrec", "beauty", "hr@10")]
    assert fp["ours"] == 0.08 and "ours trained with sampled-ce" in fp["reason"]


def test_a_run_selected_on_another_protocol_yields_to_one_selected_on_this_protocol_and_is_marked(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "ndcg@10": 0.09, "training": "epochs=100", "date": "2026-01-01", "run_id": "a"}, path)
    append_run({**ROW, "ndcg@10": 0.12, "training": "epochs=50 select=full-nohist", "date": "2026-02-01",
                "run_id": "b"}, path)                                                     # newer, but chosen on nohist
    append_run({**ROW, "model": "fparec", "ndcg@10": 0.10, "training": "epochs=50 select=full-nohist",
                "run_id": "c"}, path)
    runs = report.latest_runs(report.read_runs(path))
    assert [r["run_id"] for r in report.grouped(runs, "full")[("sasrec", "ml-1m")]] == ["a"]
    assert report.selected_on(runs[1]) == "full-nohist" and report.selected_on(runs[0]) == "full"
    table = report.main_table(runs)
    assert "| sasrec | 0.0900 [1] |" in table and "| fparec | **0.1000 [1]°** |" in table
    assert "° weights selected on the validation of another protocol (`full-nohist`" in table


def test_validation_chooses_among_budgets_of_one_method_never_the_date_or_the_test(tmp_path):
    """Two budgets of the same configuration: the one with the better mean validation NDCG@10 is shown, even when
    it is older and its test number lower; validation is compared only within one selection protocol, and a
    configuration whose rows do not record it yields to one whose rows do."""
    path = tmp_path / "runs.csv"
    append_run({**ROW, "ndcg@10": 0.10, "valid_ndcg@10": 0.12, "training": "epochs=100", "date": "2026-01-01",
                "run_id": "long"}, path)
    for seed, valid in ((1, 0.11), (2, 0.12)):   # newer and better on test, but a lower mean validation
        append_run({**ROW, "seed": seed, "ndcg@10": 0.14, "valid_ndcg@10": valid, "training": "epochs=200 patience=5",
                    "date": "2026-02-01", "run_id": f"short{seed}"}, path)
    append_run({**ROW, "ndcg@10": 0.20, "valid_ndcg@10": 0.30, "training": "epochs=50 select=full-nohist",
                "date": "2026-03-01", "run_id": "nohist"}, path)   # another protocol's (higher) validation
    runs = report.latest_runs(report.read_runs(path))
    assert [r["run_id"] for r in report.grouped(runs, "full")[("sasrec", "ml-1m")]] == ["long"]
    assert "| sasrec | **0.1000 [1]** |" in report.main_table(runs)
    append_run({**ROW, "ndcg@10": 0.15, "training": "epochs=300", "date": "2026-04-01", "run_id": "unvalidated"},
               path)
    runs = report.latest_runs(report.read_runs(path))
    assert [r["run_id"] for r in report.grouped(runs, "full")[("sasrec", "ml-1m")]] == ["long"]
    legacy = [r for r in runs if r["run_id"] in ("unvalidated", "nohist")]
    assert [r["run_id"] for r in report.grouped(legacy, "full")[("sasrec", "ml-1m")]] == ["unvalidated"]
    # ranked under a third protocol, neither run chose its weights there: the headline's validation comes first
    ranked = [{**r, "protocol": "sampled100",
               "training": r["training"] if "select=" in r["training"] else r["training"] + " select=full"}
              for r in runs if r["run_id"] in ("long", "nohist")]
    assert [r["run_id"] for r in report.grouped(ranked, "sampled100")[("sasrec", "ml-1m")]] == ["long"]


def test_a_scorecard_cell_names_a_configuration_that_validation_prefers_to_the_one_it_compares(tmp_path):
    """The cell compares the paper's setting (or our presets) and names beside it another configuration of the
    model whose validation is better, with its number; a worse-validated one, another loss or one selected on
    another protocol is not named."""
    path = tmp_path / "runs.csv"
    append_run({**ROW, "ndcg@10": 0.10, "valid_ndcg@10": 0.11, "training": "epochs=180", "run_id": "presets"}, path)

    def cell():
        card = {(r["model"], r["metric"]): r for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))
                if r["paper"] == "FPARec" and r["dataset"] == "ml-1m"}
        return card[("sasrec", "ndcg@10")]

    for run_id, extra in (("worse", {"options": "dropout=0.1", "valid_ndcg@10": 0.10, "ndcg@10": 0.13}),
                          ("bce", {"loss": "bce", "valid_ndcg@10": 0.20, "ndcg@10": 0.14}),
                          ("nohist", {"options": "n_layers=3", "valid_ndcg@10": 0.20, "ndcg@10": 0.15,
                                      "training": "epochs=180 select=full-nohist"})):
        append_run({**ROW, "training": "epochs=180", **extra, "run_id": run_id}, path)
    assert cell()["ours"] == 0.10 and "validation prefers" not in cell()["reason"]
    for seed, valid in ((1, 0.12), (2, 0.13)):
        append_run({**ROW, "seed": seed, "options": "n_layers=4", "valid_ndcg@10": valid, "ndcg@10": 0.12,
                    "training": "epochs=180", "run_id": f"four{seed}"}, path)
    assert cell()["ours"] == 0.10 and cell()["reason"] == "validation prefers sasrec (n_layers=4): 0.1200 [2]"


def test_rksa_kernel_subsets_are_variants_compared_on_the_seeds_they_share(tmp_path):
    path = tmp_path / "runs.csv"
    base = {**ROW, "dataset": "video", "loss": "bce", "max_len": 50, "options": "n_heads=1 dropout=0.5"}
    for model, seed, valid, hr in (("rksa", 42, 0.030, 0.050), ("rksa", 43, 0.020, 0.040),
                                   ("rksa-c", 42, 0.031, 0.052), ("rksa-iu", 42, 0.029, 0.048)):
        for protocol, scale in (("full", 1.0), ("sampled100", 10.0)):
            append_run({**base, "model": model, "seed": seed, "protocol": protocol, "hr@10": hr * scale,
                        "valid_ndcg@10": valid, "run_id": f"{model}{seed}"}, path)
    append_run({**base, "model": "rksa-u", "seed": 42, "valid_ndcg@10": 0.04, "training": "epochs=5",
                "run_id": "u"}, path)                                        # trained otherwise: not compared
    runs = report.latest_runs(report.read_runs(path))
    assert report.run_label(next(r for r in runs if r["model"] == "rksa-c")) == "rksa (bce, kernels=c)"
    main, others = report.main_table(runs), report.main_table(runs, variants=True)
    assert "kernels" not in main and "| rksa (bce) |" in main
    assert "| rksa (bce, kernels=c) |" in others and "| rksa (bce, kernels=iu) |" in others
    rows = {line.split(" | ")[1]: line for line in report.rksa_kernel_table(runs).splitlines()[2:]}
    assert list(rows) == ["C", "I+U", "C+I+U"]
    assert rows["C"].startswith("| video [1] | C | **0.03100** | 0.5200 |")      # best validation in bold
    assert "| 0.5000 |" in rows["C+I+U"] and "0.4500" not in rows["C+I+U"]       # seed 42 only, the shared seed
    assert rows["C"].endswith("| 0.5015 | 0.5911 |")                             # the paper's Table 3
    assert report.rksa_kernel_table([r for r in runs if r["model"] == "rksa"]) == ""


def test_rksa_kernel_subsets_get_one_group_per_learning_rate_schedule(tmp_path):
    path = tmp_path / "runs.csv"
    base = {**ROW, "dataset": "video", "loss": "bce", "max_len": 50, "options": "n_heads=1 dropout=0.5", "seed": 42}
    for model, decay, valid in (("rksa", None, 0.030), ("rksa-c", None, 0.031),
                                ("rksa", 3, 0.032), ("rksa-c", 3, 0.030), ("rksa-iu", 3, 0.033)):
        training = "epochs=200" + (f" lr_decay={decay}" if decay else "")
        for protocol in ("full", "sampled100"):
            append_run({**base, "model": model, "protocol": protocol, "valid_ndcg@10": valid, "training": training,
                        "run_id": f"{model}{decay}"}, path)
    runs = report.latest_runs(report.read_runs(path))
    lines = report.rksa_kernel_table(runs).splitlines()[2:]
    assert [line.split(" | ")[:2] for line in lines] == [
        ["| video [1]", "C"], ["| video [1]", "C+I+U"],
        ["| video, lr decay 3 [1]", "C"], ["| video, lr decay 3 [1]", "I+U"], ["| video, lr decay 3 [1]", "C+I+U"]]
    assert "**0.03100**" in lines[0] and "**0.03300**" in lines[3]            # each schedule picks its own best


def test_rksa_is_compared_with_the_sasrec_trained_like_it_over_shared_seeds(tmp_path):
    path = tmp_path / "runs.csv"
    like = {"dataset": "video", "loss": "bce", "max_len": 50, "options": "n_heads=1 dropout=0.5"}
    for model, seed, hr in (("sasrec", 42, 0.70), ("sasrec", 43, 0.72), ("rksa", 42, 0.77), ("rksa", 43, 0.79),
                            ("rksa", 44, 0.10)):
        for protocol, scale in (("full", 0.1), ("sampled100", 1.0)):
            append_run({**ROW, **like, "model": model, "seed": seed, "protocol": protocol, "hr@10": hr * scale,
                        "ndcg@10": hr * scale / 2, "run_id": f"{model}{seed}"}, path)
    append_run({**ROW, **like, "model": "sasrec", "options": "dropout=0.5", "hr@10": 0.9, "run_id": "2heads"}, path)
    runs = report.latest_runs(report.read_runs(path))
    rows = report.rksa_table(runs).splitlines()[2:]
    assert len(rows) == 2                                      # the two-head SASRec is not RKSA's comparison
    assert rows[0].startswith("| video | bce | full | 2 | 0.0710 ± 0.0014 / 0.0355 ± 0.0007 | 0.0780 ± 0.0014")
    # seed 44 has no SASRec run: left out; the same difference with both seeds: a zero-width interval
    assert "| +9.9% / +9.9% | [+9.9, +9.9]% / [+9.9, +9.9]% | — | — |" in rows[0]
    assert rows[1].endswith("| +9.9% / +9.9% | [+9.9, +9.9]% / [+9.9, +9.9]% | 0.7373 / 0.5385 | 0.7551 / 0.5495 |")
    assert report.rksa_table([r for r in runs if r["model"] == "rksa"]) == ""


def test_the_paired_interval_of_a_change_is_in_per_cent_of_the_base():
    # differences 0.02, 0.01, 0.01: mean 0.01333, se 0.00333, t(2) = 4.303 -> [-0.00101, +0.02768]; base mean 0.10667
    assert report._paired_interval([0.12, 0.13, 0.11], [0.10, 0.12, 0.10]) == "[-0.9, +25.9]%"
    assert report._paired_interval([0.12], [0.10]) == "—"                # one seed: no interval


def test_runs_with_a_learning_rate_decay_are_their_own_configuration_and_rksa_pair(tmp_path):
    path = tmp_path / "runs.csv"
    like = {"dataset": "video", "loss": "bce", "max_len": 50, "options": "n_heads=1 dropout=0.5"}
    for model, decay, hr in (("sasrec", None, 0.70), ("rksa", None, 0.69), ("sasrec", 3, 0.71), ("rksa", 3, 0.75)):
        training = "epochs=200 patience=10" + (f" lr_decay={decay}" if decay else "")
        for protocol in ("full", "sampled100"):
            append_run({**ROW, **like, "model": model, "seed": 42, "protocol": protocol, "hr@10": hr,
                        "training": training, "run_id": f"{model}{decay}"}, path)
    runs = report.latest_runs(report.read_runs(path))
    decayed = next(r for r in runs if r["model"] == "rksa" and "lr_decay" in r["training"])
    assert report.run_label(decayed) == "rksa (bce, lr_decay=3)" and report.lr_decay_of(decayed) == 3
    assert report.run_label({**decayed, "training": "epochs=200"}) == "rksa (bce)"
    cosine = {**decayed, "training": "epochs=200 lr_schedule=cosine"}
    assert report.run_label(cosine) == "rksa (bce, lr_schedule=cosine)" and report.lr_schedule_of(cosine) == "cosine"
    rows = report.rksa_table(runs).splitlines()[2:]
    assert [r.split(" | ")[1] for r in rows] == ["bce", "bce", "bce, lr decay 3", "bce, lr decay 3"]
    assert "| 0.7000 / 0.1500 | 0.6900 / 0.1500 | -1.4% /" in rows[0]
    assert "| 0.7100 / 0.1500 | 0.7500 / 0.1500 | +5.6% /" in rows[2]
    assert rows[3].endswith("| 0.7373 / 0.5385 | 0.7551 / 0.5495 |")   # the paper trained with a decay too
    assert "lr_decay" not in report.main_table(runs)                  # a variant, beside the presets' row


def test_runs_with_random_windows_are_their_own_configuration(tmp_path):
    path = tmp_path / "runs.csv"
    like = {"dataset": "ml-1m", "loss": "ce", "max_len": 200, "seed": 42, "protocol": "full"}
    append_run({**ROW, **like, "model": "sasrec", "hr@10": 0.21, "training": "epochs=180 batch_size=32",
                "run_id": "recent"}, path)
    append_run({**ROW, **like, "model": "sasrec", "hr@10": 0.24, "training": "epochs=180 batch_size=32 windows=random",
                "run_id": "random", "date": "2099-01-01"}, path)
    runs = report.latest_runs(report.read_runs(path))
    random_run = next(r for r in runs if r["run_id"] == "random")
    assert report.windows_of(random_run) == "random" and report.windows_of(runs[0]) == "recent"
    assert report.run_label(random_run) == "sasrec (windows=random)"
    assert "0.2100" in report.main_table(runs) and "0.2400" not in report.main_table(runs)   # the presets' row stays
    assert "0.2400" in report.main_table(runs, variants=True)


def test_rksa_variants_are_their_own_pairs_against_the_same_sasrec(tmp_path):
    path = tmp_path / "runs.csv"
    like = {"dataset": "video", "loss": "bce", "max_len": 50, "training": "epochs=200 lr_decay=3"}
    for model, options, hr in (("sasrec", "n_heads=1 dropout=0.5", 0.70), ("rksa", "n_heads=1 dropout=0.5", 0.69),
                               ("rksa", "n_heads=1 dropout=0.5 stochastic_rows=last", 0.72),
                               ("rksa", "dropout=0.5 leave_user_out=True n_heads=1", 0.73),
                               ("rksa", "construction=exact dropout=0.5 n_heads=1", 0.74),
                               ("rksa", "dropout=0.5 n_heads=1 shape_counts=normalized", 0.75)):
        for protocol in ("full", "sampled100"):
            append_run({**ROW, **like, "model": model, "options": options, "seed": 42, "protocol": protocol,
                        "hr@10": hr, "run_id": f"{model}{len(options)}"}, path)
    runs = report.latest_runs(report.read_runs(path))
    last = next(r for r in runs if "stochastic_rows" in r["options"])
    assert report.run_label(last) == "rksa (bce, stochastic_rows=last, lr_decay=3)"
    rows = report.rksa_table(runs).splitlines()[2:]
    assert [r.split(" | ")[1] for r in rows] == (["bce, lr decay 3"] * 2 + ["bce, lr decay 3, last row only"] * 2
                                                 + ["bce, lr decay 3, user's own counts left out"] * 2
                                                 + ["bce, lr decay 3, exact skew-normal"] * 2
                                                 + ["bce, lr decay 3, normalized shape counts"] * 2)
    assert "| 0.7000 / 0.1500 | 0.6900 / 0.1500 | -1.4% /" in rows[0]
    assert "| 0.7000 / 0.1500 | 0.7200 / 0.1500 | +2.9% /" in rows[2]
    assert "| 0.7000 / 0.1500 | 0.7300 / 0.1500 | +4.3% /" in rows[4]
    assert "| 0.7000 / 0.1500 | 0.7500 / 0.1500 | +7.1% /" in rows[8]


def test_the_scorecard_prefers_a_run_trained_with_the_paper_s_learning_rate_decay(tmp_path):
    path = tmp_path / "runs.csv"
    like = {**ROW, "dataset": "video", "loss": "bce", "protocol": "sampled100", "max_len": 50,
            "options": "n_heads=1 dropout=0.5"}
    append_run({**like, "hr@10": 0.72, "training": "epochs=200", "date": "2026-02-01", "run_id": "constant"}, path)

    def cell():
        card = {(r["model"], r["metric"]): r for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))
                if r["paper"] == "RKSA" and r["dataset"] == "video"}
        return card[("sasrec", "hr@10")]

    assert cell()["ours"] == 0.72 and "without the paper's lr_decay=3" in cell()["reason"]
    append_run({**like, "hr@10": 0.73, "training": "epochs=200 lr_decay=3", "date": "2026-01-01", "run_id": "d"},
               path)
    assert cell()["ours"] == 0.73 and "without the paper's" not in cell()["reason"]  # the paper's setting, though older
    assert cell()["reason"].startswith("ours: the run in the paper's setting, sasrec (bce, n_heads=1, lr_decay=3)")


def test_a_ce_cell_says_when_it_uses_the_full_ce_run_the_main_table_does_not_show(tmp_path):
    """On the sparse datasets the main table shows the benchmark's sampled-softmax runs; a paper that trained
    with cross-entropy is compared with our full cross-entropy run, and the notes say so."""
    path = tmp_path / "runs.csv"
    like = {**ROW, "model": "sasrec", "dataset": "beauty", "protocol": "full", "max_len": 50}

    def cell():
        card = {(r["model"], r["metric"]): r for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))
                if r["paper"] == "FPARec" and r["dataset"] == "beauty"}
        return card[("sasrec", "hr@10")]

    append_run({**like, "loss": "ce", "hr@10": 0.042, "run_id": "full-ce"}, path)
    assert cell()["ours"] == 0.042 and "sampled-softmax" not in cell()["reason"]
    append_run({**like, "loss": "sampled-ce", "hr@10": 0.038, "run_id": "sampled"}, path)
    assert cell()["ours"] == 0.042 and "the full cross-entropy run, as in the paper" in cell()["reason"]


def test_the_fparec_ml1m_cell_prefers_a_run_of_the_authors_script_and_says_when_it_has_none(tmp_path):
    """FPARec's Table 3 on ML-1M ran the released code at max_len 500, hidden size 50, one head."""
    path = tmp_path / "runs.csv"
    like = {**ROW, "model": "fparec", "dataset": "ml-1m", "protocol": "full", "loss": "ce"}
    append_run({**like, "hr@10": 0.21, "max_len": 200, "options": "dropout=0.2 k=40", "date": "2026-02-01",
                "run_id": "presets"}, path)

    def cell():
        card = {(r["model"], r["metric"]): r for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))
                if r["paper"] == "FPARec" and r["table"] == "3" and r["dataset"] == "ml-1m"}
        return card[("fparec", "hr@10")]

    assert cell()["ours"] == 0.21 and "the paper's setting: max_len 500, compat=True" in cell()["reason"]
    script = {**like, "max_len": 500, "options": "compat=True d_model=50 dropout=0.2 k=40 n_heads=1"}
    assert report.run_label(script) == "fparec (L=500, compat=True, d_model=50, n_heads=1)"
    append_run({**script, "hr@10": 0.20, "date": "2026-01-01", "run_id": "script"}, path)
    assert cell()["ours"] == 0.20 and "our presets" not in cell()["reason"]   # the paper's setting, even if lower
    assert "the run in the paper's setting, fparec (L=500, compat=True, d_model=50, n_heads=1)" in cell()["reason"]


def test_an_ablation_cell_counts_only_our_run_of_exactly_its_setting(tmp_path):
    """FPARec's Table 6 varies the blocks of the authors' script: the presets' run or a three-block run in another
    setting must not stand beside it; the script's own two-block run fills the 2-block cell, and the README's short
    card shows that comparison once (it repeats Table 3's cell)."""
    path = tmp_path / "runs.csv"
    like = {**ROW, "model": "fparec", "dataset": "ml-1m", "protocol": "full", "loss": "ce"}
    append_run({**like, "hr@10": 0.21, "max_len": 200, "options": "dropout=0.2 k=40", "run_id": "presets"}, path)
    append_run({**like, "hr@10": 0.23, "max_len": 200, "options": "dropout=0.1 k=40 n_layers=3", "run_id": "three"},
               path)

    def cells():
        return {(r["table"], r["model"]): r for r in report.scorecard_rows(report.latest_runs(report.read_runs(path)))
                if r["paper"] == "FPARec" and r["metric"] == "hr@10" and r["dataset"] == "ml-1m"}

    three = cells()[("6", "fparec (3 blocks)")]
    assert three["seeds"] == 0 and three["reason"].startswith(
        "not run yet in the paper's setting, fparec (L=500, compat=True, d_model=50, n_heads=1, n_layers=3)")
    assert cells()[("5", "fparec (k=10)")]["seeds"] == 0 and cells()[("6", "fparec (2 blocks)")]["seeds"] == 0
    assert cells()[("3", "fparec")]["ours"] == 0.21                     # Table 3 falls back to the presets' run
    append_run({**like, "hr@10": 0.20, "max_len": 500, "options": "compat=True d_model=50 dropout=0.2 k=40 n_heads=1",
                "run_id": "script"}, path)
    assert [cells()[key]["ours"] for key in (("3", "fparec"), ("5", "fparec (k=40)"), ("6", "fparec (2 blocks)"))] \
        == [0.20] * 3
    assert cells()[("6", "fparec (3 blocks)")]["seeds"] == 0
    short = report.scorecard_table(report.latest_runs(report.read_runs(path)), only_run=True)
    assert short.count("| ml-1m | full | hr@10 | 0.2419 | 0.2000 |") == 1


def test_equal_budget_table_compares_every_method_with_the_baseline_and_the_paper(tmp_path):
    path = tmp_path / "equal.csv"
    training = "epochs=60 batch_size=32 lr=0.001"
    for model, hr, nd, valid in (("sasrec", 0.20, 0.10, 0.11), ("fparec", 0.21, 0.09, 0.10),
                                 ("pattern-exponential", 0.18, 0.08, 0.09)):
        for protocol, shift in (("full", 0.0), ("full-nohist", 0.05), ("sampled100", 0.6)):
            append_run({**ROW, "model": model, "protocol": protocol, "seed": 43, "hr@10": hr + shift,
                        "ndcg@10": nd + shift, "valid_ndcg@10": valid, "training": training, "run_id": model},
                       path)
    table = report.equal_budget_table(report.latest_runs(report.read_runs(path)))
    rows = {line.split(" | ")[1]: line for line in table.splitlines()[2:]}
    assert list(rows) == ["sasrec", "fparec", "pattern-exponential"]
    sasrec, fparec, pattern = rows["sasrec"], rows["fparec"], rows["pattern-exponential"]
    assert "| seed 43: 60 epochs at batch 32 | 0.1100 | 0.2000 / 0.1000 | — | 0.2500 / 0.1500 | 0.8000 / 0.7000 |" in sasrec
    assert "| 0.2346 / 0.1186 | — |" in sasrec                                  # the FPARec paper's SASRec
    assert "| 0.2100 / 0.0900 | +5.0% / -10.0% |" in fparec
    assert "| 0.2419 / 0.1232 | +3.1% / +3.9% |" in fparec                       # Table 3 over its SASRec
    assert "| 0.2386 / 0.1283 | +1.7% / +8.2% |" in pattern                      # Table 4
    assert report.equal_budget_table([]) == "_No equal-budget runs recorded yet._"
    # a second seed of the baseline: each method is still compared with the baseline's runs of its own seeds
    append_run({**ROW, "seed": 44, "hr@10": 0.30, "ndcg@10": 0.20, "valid_ndcg@10": 0.12, "training": training,
                "run_id": "sasrec44"}, path)
    rows = {line.split(" | ")[1]: line for line in
            report.equal_budget_table(report.latest_runs(report.read_runs(path))).splitlines()[2:]}
    assert "| sasrec [2] | seeds 43, 44: 60 epochs at batch 32 | 0.1150 | 0.2500 / 0.1500 |" in rows["sasrec [2]"]
    assert "| 0.2100 / 0.0900 | +5.0% / -10.0% |" in rows["fparec"]                # against seed 43 alone


def test_a_published_cell_run_only_at_the_equal_budget_says_where(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "run_id": "a"}, path)
    runs = report.latest_runs(report.read_runs(path))
    card = {(r["model"], r["metric"]): r for r in report.scorecard_rows(runs, elsewhere={("pattern-linear", "ml-1m")})
            if r["paper"] == "FPARec" and r["dataset"] == "ml-1m"}
    assert card[("pattern-linear", "hr@10")]["reason"].startswith("not in results/runs.csv; run in the equal-budget")
    assert card[("pattern-average", "hr@10")]["reason"].startswith("not run yet")
    assert "equal-budget" not in report.scorecard_table(runs, only_run=True, elsewhere={("pattern-linear", "ml-1m")})


def test_a_column_trained_at_several_budgets_says_which_method_had_which(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "training": "epochs=180 batch_size=32", "run_id": "a"}, path)
    append_run({**ROW, "model": "fparec", "training": "epochs=180 batch_size=32", "run_id": "b"}, path)
    append_run({**ROW, "model": "locker-conv", "training": "epochs=50 batch_size=128", "run_id": "c"}, path)
    append_run({**ROW, "model": "rksa", "run_id": "d"}, path)                        # an old row: no settings
    append_run({**ROW, "dataset": "beauty", "training": "epochs=200 batch_size=128", "run_id": "e"}, path)
    append_run({**ROW, "dataset": "beauty", "model": "fparec", "training": "epochs=200 batch_size=128",
                "run_id": "f"}, path)
    runs = report.latest_runs(report.read_runs(path))
    note = report.main_table(runs).splitlines()[-1]
    assert note.startswith("Training budgets")
    assert ("ml-1m: 50 epochs at batch 128 (locker-conv), 180 epochs at batch 32 (sasrec, fparec), "
            "budget not recorded (rksa).") in note                        # numeric order, unknown last
    assert "beauty" not in note                                           # one budget: nothing to say
    one = [r for r in runs if r["dataset"] == "beauty"]
    assert "Training budgets" not in report.main_table(one)


def test_a_demonstration_row_on_the_synthetic_data_changes_no_document(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "run_id": "a"}, path)
    readme, results_readme = report.render_section(path), report.render_results_readme(path)
    append_run({**ROW, "dataset": "synthetic", "run_id": "demo"}, path)   # python -m tutorial_lib train
    assert report.render_section(path) == readme
    assert report.render_results_readme(path) == results_readme
    append_run({**ROW, "dataset": "beauty", "run_id": "real"}, path)       # a real dataset is a result
    assert report.render_section(path) != readme


def test_the_variant_table_says_how_long_each_row_trained(tmp_path):
    path = tmp_path / "runs.csv"
    like = {"dataset": "ml-1m", "loss": "ce", "max_len": 200, "protocol": "full", "options": "dropout=0.1"}
    for model, seed, training in (("sasrec", 42, "epochs=300 batch_size=32"), ("fparec", 42, "epochs=180 batch_size=32"),
                                  ("fparec", 43, "epochs=180 batch_size=32")):
        append_run({**ROW, **like, "model": model, "seed": seed, "training": training, "run_id": f"{model}{seed}"}, path)
    append_run({**ROW, **like, "dataset": "video", "model": "sasrec", "max_len": 50, "seed": 42,
                "training": "epochs=200 batch_size=128", "run_id": "video"}, path)
    runs = report.latest_runs(report.read_runs(path))
    others = report.main_table(runs, variants=True).splitlines()
    assert others[2] == "| method | budget | ml-1m | video |" and others[3] == "|---|---|---:|---:|"
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in others[4:] if line.startswith("| ")}
    assert rows["fparec (dropout=0.1)"] == "180 epochs at batch 32"
    assert rows["sasrec (dropout=0.1)"] == "300 epochs at batch 32 (ml-1m); 200 epochs at batch 128 (video)"
    assert "budget" not in report.main_table(runs)   # the presets' table keeps its own note on budgets
    assert report.row_budget({"ml-1m": [{"seed": 43, "training": "epochs=180 batch_size=32"},
                                        {"seed": 42, "training": "epochs=300 batch_size=32"}]}) == \
        "300 epochs at batch 32 (ml-1m seed 42); 180 epochs at batch 32 (ml-1m seed 43)"
    assert report.row_budget({"ml-1m": [{"seed": 42, "training": ""}]}) == "budget not recorded"


def _readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# mine\n\n{report.START}\nold tables\n{report.END}\n")
    return readme


def test_report_prints_the_tables_of_a_results_file_it_is_given(tmp_path, capsys):
    path = tmp_path / "my_runs.csv"
    append_run({**ROW, "run_id": "a", "ndcg@10": 0.1234}, path)
    assert report.main(["--results", str(path)]) == 0
    assert "0.1234" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing", "folder"])
def test_report_refuses_a_results_file_that_is_not_there_and_empties_no_table(tmp_path, capsys, monkeypatch, case):
    """`--write` without the project's results file used to exit 0 and replace README's tables with 'No full runs
    recorded yet'."""
    readme, path = _readme(tmp_path), tmp_path / "results" / "runs.csv"
    if case == "folder":
        path.mkdir(parents=True)
    monkeypatch.setattr(report, "default_results_path", lambda: path)
    before = readme.read_text()
    with pytest.raises(SystemExit) as stop:
        report.main(["--write", "--readme", str(readme), "--results-readme", str(tmp_path / "results.md")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert str(path) in err and ("does not exist" if case == "missing" else "is a folder") in err
    assert readme.read_text() == before and not (tmp_path / "results.md").exists()


@pytest.mark.parametrize("mode", ["--write", "--check"])
def test_report_builds_the_projects_documents_only_from_the_projects_results(tmp_path, capsys, mode):
    readme, path = _readme(tmp_path), tmp_path / "my_runs.csv"
    append_run({**ROW, "run_id": "a"}, path)
    before = readme.read_text()
    with pytest.raises(SystemExit) as stop:
        report.main([mode, "--results", str(path), "--readme", str(readme)])
    assert stop.value.code == 2 and "--results only prints" in capsys.readouterr().err
    assert readme.read_text() == before


@pytest.mark.parametrize("content, message", [
    ("model,dataset\nsasrec,ml-1m\n", "has no protocol, loss, seed, ndcg@10, hr@10 column"),
    ("hello world\n", "columns this version does not know"),
])
def test_report_names_what_is_wrong_with_a_results_file_in_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "runs.csv"
    path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        report.main(["--results", str(path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_row_with_too_few_or_too_many_fields_is_named_by_its_line(tmp_path):
    path = tmp_path / "runs.csv"
    append_run({**ROW, "run_id": "a"}, path)
    good = path.read_text()
    for bad in ("sasrec,ml-1m,full,ce,1\n", good.splitlines()[1] + ",extra\n"):
        path.write_text(good + bad)
        with pytest.raises(report.ConfigError, match=r"runs.csv, line 3: .* columns in the header"):
            report.read_runs(path)
