"""Smoke runs of the benchmark scripts that are cheap enough for CI (tiny settings, the real code paths)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tied_embeddings_reports_both_models(tmp_path, capsys):
    out = tmp_path / "tied.md"
    assert load_script("tied_embeddings").main(["--dataset", "synthetic", "--epochs", "1", "--max-len", "20",
                                                "--out", str(out)]) == 0
    table = out.read_text()
    assert "| sasrec | 1 |" in table and "| sasrec-untied | 1 |" in table and "commit:" in table
    header, rule = [line for line in table.splitlines() if line.startswith("|")][:2]
    assert "at training positions: median rank of the input item" in header
    for row in (line for line in table.splitlines() if line.startswith("| sasrec")):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == rule.count("|") - 1 == 12, row
        assert 1 <= float(cells[8]) <= 500 and cells[9].endswith("%") and "(" in cells[11]


def test_tied_embeddings_takes_variants_with_options(tmp_path):
    script = load_script("tied_embeddings")
    assert script.parse_variant("sasrec:layout=tf,embedding_scale=false") == (
        "sasrec", {"layout": "tf", "embedding_scale": False})
    assert script.parse_variant("sasrec-untied") == ("sasrec-untied", {})
    out = tmp_path / "tied.md"
    assert script.main(["--dataset", "synthetic", "--epochs", "1", "--max-len", "20", "--variant",
                        "sasrec:layout=tf,n_heads=1", "--out", str(out)]) == 0
    table = out.read_text()
    assert "| sasrec:layout=tf,n_heads=1 | 1 |" in table and "| sasrec-untied |" not in table


def test_tied_embeddings_diagnoses_models_kept_by_finished_runs(tmp_path, monkeypatch):
    from tutorial_lib.data import make_synthetic
    from tutorial_lib.experiments.run import ExperimentSpec, run_experiment

    data = make_synthetic(n_users=60, n_items=40, min_len=5, max_len=12, seed=0)
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", lambda seed=0: data)
    paths = [run_experiment(ExperimentSpec(model=m, epochs=1, max_len=10, eval_users=30, progress=False,
                                           model_options={"d_model": 8})).save_model(tmp_path / "models")
             for m in ("sasrec", "rksa")]
    out = tmp_path / "tied.md"
    script = load_script("tied_embeddings")
    assert script.main(["--trained", str(paths[0]), "--trained", str(paths[1]), "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| sasrec |") or
            line.startswith("| rksa |")]
    assert len(rows) == 2 and "d_model=8" in rows[0] and paths[1].stem.split("_")[-1] in rows[1]


def test_optimizer_step_times_every_implementation(tmp_path):
    out = tmp_path / "adam.md"
    assert load_script("optimizer_step").main(["--steps", "2", "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and "items)" in line]
    assert len(rows) == 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(float(c) > 0 for c in cells[2:5]), row


def test_order_sensitivity_jitters_only_the_training_items_and_reports_each_order(tmp_path):
    import numpy as np

    from tutorial_lib.data import make_synthetic

    script = load_script("order_sensitivity")
    data = make_synthetic(n_users=50, n_items=200, seed=0)
    copy, kept = script.jitter_order(data, 2.5, seed=1)
    for before, after in zip(data.sequences, copy.sequences):
        assert np.array_equal(before[-2:], after[-2:])                          # validation and test targets stay
        assert sorted(before[:-2].tolist()) == sorted(after[:-2].tolist())       # a permutation of the rest
        moved = [abs(i - before[:-2].tolist().index(x)) for i, x in enumerate(after[:-2].tolist())
                 if before[:-2].tolist().count(x) == 1]
        assert max(moved, default=0) <= 2
    assert 0.4 < kept < 0.85 and script.jitter_order(data, 1.0)[1] == 1.0      # s <= 1 leaves the order alone
    out = tmp_path / "order.md"
    assert script.main(["--dataset", "synthetic", "--epochs", "2", "--max-len", "20", "--jitter", "3",
                        "--batch-size", "16", "--eval-every", "1", "--out", str(out)]) == 0
    table = out.read_text()
    assert "| as it is | 100.0% |" in table and "| jitter 3 |" in table and "commit:" in table
    assert "batch 16" in table and "validated every 1 epochs" in table and ": sasrec trained 2 epochs" in table
    assert script.main(["--dataset", "synthetic", "--model", "pattern-average", "--epochs", "1", "--max-len", "20",
                        "--out", str(out)]) == 0
    assert ": pattern-average trained 1 epochs" in out.read_text()
    with pytest.raises(SystemExit):
        script.main(["--dataset", "synthetic", "--batch-size", "0"])
    with pytest.raises(SystemExit):
        script.main(["--dataset", "synthetic", "--model", "sasrex"])


def test_eval_negatives_compares_both_rules(tmp_path, monkeypatch):
    from tutorial_lib.data import make_synthetic
    from tutorial_lib.experiments.run import ExperimentSpec, run_experiment

    script = load_script("eval_negatives")
    out = tmp_path / "neg.md"
    assert script.main(["--dataset", "synthetic", "--epochs", "1", "--max-len", "20", "--draws", "2",
                        "--out", str(out)]) == 0
    row = next(line for line in out.read_text().splitlines() if line.startswith("| sasrec |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    ours, theirs = float(cells[3].split(" ± ")[0]), float(cells[5].split(" ± ")[0])
    assert 0 < ours <= 1 and 0 < theirs <= 1 and cells[-2].endswith("%") and "commit:" in out.read_text()
    # a model kept by a finished run, evaluated on its own dataset
    data = make_synthetic(n_users=60, n_items=150, min_len=5, max_len=12, seed=0)
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", lambda seed=0: data)
    path = run_experiment(ExperimentSpec(model="sasrec", loss="bce", epochs=1, max_len=10, progress=False,
                                         model_options={"d_model": 8})).save_model(tmp_path / "models")
    assert script.main(["--trained", str(path), "--draws", "1", "--out", str(out)]) == 0
    table = out.read_text()
    assert f"| {path.stem.split('_')[-1]} |" in table and "d_model=8" in table
    with pytest.raises(SystemExit):
        script.main(["--draws", "0"])


def test_compare_trained_gives_a_paired_interval_over_users(tmp_path, monkeypatch):
    import torch

    from tutorial_lib.data import make_synthetic
    from tutorial_lib.experiments.run import ExperimentSpec, run_experiment

    script = load_script("compare_trained")
    base, other = torch.tensor([0, 3, 20, 9, 50]), torch.tensor([0, 1, 20, 9, 2])
    c = script.user_level_change(other, base, "hr@10")
    assert c["base"] == 0.6 and c["value"] == 0.8 and c["users_differ"] == 0.2       # user 5 enters the top 10
    assert abs(c["change"] - 100 * (0.8 - 0.6) / 0.6) < 1e-9 and c["low"] < c["change"] < c["high"]
    nd = script.user_level_change(other, base, "ndcg@10")
    expected = sum(1 / math.log2(r + 2) for r in (0, 1, 9, 2)) / 5
    assert abs(nd["value"] - expected) < 1e-12 and nd["users_differ"] == 0.4        # users 2 and 5 move
    same = script.user_level_change(base, base, "ndcg@10")
    assert same["change"] == 0 and same["users_differ"] == 0
    with pytest.raises(ValueError, match="different users"):
        script.user_level_change(base[:3], base, "hr@10")

    data = make_synthetic(n_users=60, n_items=40, min_len=5, max_len=12, seed=0)
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", lambda seed=0: data)
    paths = [run_experiment(ExperimentSpec(model=m, epochs=1, max_len=10, progress=False,
                                           model_options={"d_model": 8})).save_model(tmp_path / "models")
             for m in ("sasrec", "fparec")]
    out = tmp_path / "compare.md"
    assert script.main(["--trained", str(paths[0]), "--trained", str(paths[1]), "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| fparec")]
    assert len(rows) == 8                                   # 2 protocols x 2 stages x 2 metrics
    assert {row.split(" | ")[1] for row in rows} == {"full", "full-nohist"} and "commit:" in out.read_text()
    assert all(row.split(" | ")[2] in ("valid (60)", "test (60)") for row in rows)
    with pytest.raises(SystemExit):
        script.main(["--trained", str(paths[0])])           # nothing to compare with


def test_train_speed_reports_the_first_epoch_apart_and_the_speed_up(tmp_path):
    out = tmp_path / "speed.md"
    variants = ["reference: plain loop", "ours + bf16 autocast", "ours (default)"]
    script = load_script("train_speed")
    assert script.main(["--dataset", "synthetic", "--epochs", "2", "--max-len", "20", "--d-model", "16",
                        "--variants", *variants, "--out", str(out)]) == 0
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in out.read_text().splitlines() if line.startswith("| ") and not line.startswith("| variant")}
    assert list(rows) == variants
    assert rows["reference: plain loop"][2] == "1.00x"
    for first, per_epoch, _, hr, ndcg in rows.values():
        assert float(first) > 0 and float(per_epoch) > 0 and 0 <= float(ndcg) <= float(hr) <= 1
    assert set(script.VARIANTS) >= {"reference + torch.compile", "ours + torch.compile"}


def test_train_speed_without_the_reference_has_no_speed_up(tmp_path):
    out = tmp_path / "speed.md"
    assert load_script("train_speed").main(["--dataset", "synthetic", "--epochs", "1", "--max-len", "20", "--d-model",
                                            "16", "--variants", "ours (default)", "--out", str(out)]) == 0
    row = next(line for line in out.read_text().splitlines() if line.startswith("| ours (default)"))
    assert row.split("|")[4].strip() == "—"


def test_notebook_times_runs_each_notebook_in_the_mode_asked(tmp_path):
    import nbformat

    folder = tmp_path / "lessons"
    folder.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# a lesson"),
        nbformat.v4.new_code_cell("import os\nmode = os.environ['COURSE_MODE']\nprint(mode)"),
        nbformat.v4.new_code_cell("import time\ntime.sleep(0.3)")])
    nbformat.write(nb, folder / "01_lesson.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), folder / "02_other.ipynb")
    script = load_script("notebook_times")
    out, keep = tmp_path / "times.md", tmp_path / "executed"
    assert script.main(["01_lesson", "--mode", "smoke", "--folder", str(folder), "--out", str(out),
                        "--keep", str(keep)]) == 0
    table = out.read_text()
    row = next(line for line in table.splitlines() if line.startswith("| 01_lesson"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "smoke" and float(cells[2]) >= 0.3 and cells[4] == "2" and cells[5].startswith("1: ")
    assert "02_other" not in table and "commit:" in table and "COURSE_MODE=smoke" in table
    executed = nbformat.read(keep / "01_lesson.ipynb", as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "smoke\n"        # the kernel saw the mode
    assert len(executed.cells) == 3                                 # the usage probe is not kept
    if sys.platform != "win32":                                     # the kernel's own usage (POSIX resource)
        cpu, peak = float(cells[6]), float(cells[7])
        assert 0 <= cpu < 600 and 10 < peak < 100_000 and cells[8] == "—"   # this notebook never imports torch
        assert "largest kernel peak memory" in table
    with pytest.raises(SystemExit, match="not in .*lessons: 03_missing.ipynb"):
        script.main(["03_missing", "--folder", str(folder)])


def test_cooccurrence_shift_reports_both_counts_for_every_input(tmp_path):
    script = load_script("cooccurrence_shift")
    out = tmp_path / "shift.md"
    assert script.main(["--dataset", "synthetic", "--max-len", "20", "--users", "60", "--out", str(out)]) == 0
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[3:-1]]
            for line in out.read_text().splitlines() if line.startswith("| ") and "%" in line}
    assert set(rows) == {(i, c) for i in script.INPUTS for c in ("plain", "leave_user_out")}
    for which in ("training window", "validation input"):                  # the user alone counts every pair once
        assert rows[(which, "plain")][1] == "0.0%" and rows[(which, "plain")][4] == "0.0%"
    assert rows[("test input", "plain")][4] == rows[("test input", "leave_user_out")][4]   # newest: never own
    with pytest.raises(SystemExit):
        script.main(["--dataset", "synthetic", "--max-len", "1"])


def test_lightsans_carry_ranks_one_trained_model_with_both_carries(tmp_path, monkeypatch):
    from tutorial_lib.attention import low_rank
    from tutorial_lib.data import make_synthetic

    data = make_synthetic(n_users=60, n_items=150, min_len=30, max_len=60, seed=0)  # windows of two blocks
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", lambda seed=0: data)
    script = load_script("lightsans_carry")
    out = tmp_path / "carry.md"
    assert script.main(["--dataset", "synthetic", "--loss", "ce", "--no-bucketing", "--epochs", "1", "--carry", "old",
                        "--out", str(out)]) == 0
    table = out.read_text()
    assert "trained with the **old** carry" in table and "| fixed carry |" in table and "| old carry |" in table
    assert "Largest difference" in table and "commit:" in table
    assert low_rank.exclusive_cumsum is script.FIXED                   # the library's carry is restored


def test_no_command_line_parser_accepts_abbreviated_flags():
    """argparse by default reads ``--out`` as ``--output`` (or ``--result`` as ``--results``): a typo silently writes
    to another file. Every parser of the scripts and of the library turns that off."""
    import ast

    files = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "tutorial_lib").rglob("*.py"))
    parsers = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("ArgumentParser", "add_parser"):
                flags = {k.arg: k.value for k in node.keywords}
                off = isinstance(flags.get("allow_abbrev"), ast.Constant) and flags["allow_abbrev"].value is False
                parsers.append((f"{path.relative_to(ROOT)}:{node.lineno}", off))
    assert len(parsers) >= 20
    assert [where for where, off in parsers if not off] == []


def test_a_benchmark_script_refuses_an_abbreviated_flag(capsys):
    with pytest.raises(SystemExit) as stopped:
        load_script("train_speed").main(["--epoch", "1"])
    assert stopped.value.code == 2 and "unrecognized arguments: --epoch" in capsys.readouterr().err
