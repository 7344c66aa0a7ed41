"""README's results section is generated from results/runs.csv and must match it."""
from __future__ import annotations

import pytest

from tutorial_lib.experiments import report
from tutorial_lib.experiments.results import append_run, project_root


def test_readme_results_section_matches_runs_csv():
    assert report.main(["--check"]) == 0, "run: python -m tutorial_lib.experiments.report --write"


def test_table_lists_every_row_with_published_numbers(tmp_path):
    path = tmp_path / "runs.csv"
    row = {"model": "sasrec", "dataset": "ml-1m", "protocol": "full", "loss": "ce", "seed": 1, "hr@10": 0.3,
           "ndcg@10": 0.15, "hr@20": 0.4, "ndcg@20": 0.18, "mrr": 0.12, "best_epoch": 3, "epochs": 5,
           "train_seconds": 10.0, "seconds_per_epoch": 2.0, "device": "cpu"}
    append_run(row, path)
    append_run({**row, "protocol": "sampled100", "loss": "bce"}, path)
    section = report.render_section(path)
    assert section.count("\n| sasrec |") == 2
    assert "0.2346 / 0.1186" in section and "0.8245 / 0.5905" in section


def test_replace_section_requires_markers():
    with pytest.raises(ValueError, match="markers"):
        report.replace_section("no markers here", "x")
    text = f"a\n{report.START}\nold\n{report.END}\nb"
    assert report.replace_section(text, "NEW") == "a\nNEW\nb"


def test_project_root_has_readme():
    assert (project_root() / "README.md").exists()
