"""The command line, called in-process with tiny settings; results and checkpoints go to tmp_path."""
from __future__ import annotations

import argparse
import csv
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tutorial_lib.cli import build_parser, main
from tutorial_lib.data import dataset_names
from tutorial_lib.experiments import RUN_COLUMNS, append_run, read_runs
from tutorial_lib.experiments.artifacts import load_trained
from tutorial_lib.models import MODELS, model_names

PROJECT = Path(__file__).resolve().parents[1]
TINY = ["--epochs", "2", "--max-len", "10", "--d-model", "8", "--eval-users", "100", "--quiet"]


def train(tmp_path, *extra):
    return main(["train", *TINY, "--results", str(tmp_path / "runs.csv"),
                 "--checkpoint", str(tmp_path / "ckpt.pt"), *extra])


def test_synthetic_run_appends_one_complete_row(tmp_path, capsys):
    results = tmp_path / "runs.csv"
    append_run({"model": "earlier", "dataset": "x"}, results)      # an existing row must survive
    assert train(tmp_path) == 0
    out = capsys.readouterr().out
    assert "validation" in out and "test" in out and "ndcg@10" in out
    rows = read_runs(results)
    assert len(rows) == 2 and rows[0]["model"] == "earlier"
    row = rows[1]
    with open(results, newline="") as fh:
        assert tuple(next(csv.reader(fh))) == RUN_COLUMNS
    assert set(row) == set(RUN_COLUMNS)
    for col in ("commit", "command", "date", "model", "dataset", "protocol", "loss", "seed", "hr@10", "ndcg@10",
                "hr@20", "ndcg@20", "mrr", "best_epoch", "epochs", "device", "torch", "hardware", "max_len"):
        assert row[col] != "", col
    assert row["model"] == "sasrec" and row["dataset"] == "synthetic" and row["protocol"] == "full"
    assert row["epochs"] == "2" and row["max_len"] == "10" and "d_model=8" in row["options"]
    assert row["command"].startswith("python -m tutorial_lib train") and "--d-model 8" in row["command"]
    assert 0.0 <= float(row["hr@10"]) <= 1.0 and float(row["ndcg@10"]) <= float(row["hr@10"])
    assert len(row["run_id"]) == 12 and row["stopped"] in ("epochs", "patience") and "lr=0.001" in row["training"]
    curve = tmp_path / "curves" / f"sasrec_synthetic_ce_full_s42_{row['run_id']}.csv"
    with open(curve, newline="") as fh:
        lines = list(csv.DictReader(fh))
    assert [r["epoch"] for r in lines] == ["1", "2"] and "valid_ndcg@10" in lines[0]
    assert (tmp_path / "ckpt.pt").exists()
    saved = tmp_path / "models" / f"sasrec_synthetic_ce_full_s42_{row['run_id']}.pt"
    assert f"trained model in {saved}" in out
    model, meta = load_trained(saved)
    assert meta["run_id"] == row["run_id"] and meta["options"]["d_model"] == 8 and meta["max_len"] == 10


def test_no_results_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, "--no-results", "--epochs", "1") == 0
    assert not (tmp_path / "runs.csv").exists()


def _small_synthetic(seed=0):
    from tutorial_lib.data import make_synthetic
    return make_synthetic(n_users=100, n_items=60, min_len=5, max_len=15, seed=seed)


@pytest.mark.parametrize("flag, value, training, rates, refused, complaint", [
    ("--lr-decay", "3", "lr_decay=3", [0.002, 0.002], ["--lr-decay", "0"], "lr_decay"),
    ("--lr-schedule", "cosine", "lr_schedule=cosine", [0.002, 0.001], ["--lr-schedule", "cosine", "--lr-decay", "3"],
     "choose one"),
])
def test_learning_rate_flags_reach_the_row_and_the_curve(tmp_path, monkeypatch, capsys, flag, value, training,
                                                         rates, refused, complaint):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, flag, value, "--lr", "0.002") == 0
    row = read_runs(tmp_path / "runs.csv")[0]
    assert training in row["training"] and f"{flag} {value}" in row["command"]
    with open(tmp_path / "curves" / f"sasrec_synthetic_ce_full_s42_{row['run_id']}.csv", newline="") as fh:
        assert [float(r["lr"]) for r in csv.DictReader(fh)] == pytest.approx(rates)   # 2 epochs
    assert train(tmp_path, *refused) == 2
    assert complaint in capsys.readouterr().err


def test_a_checkpoint_that_is_discarded_or_not_found_is_said(tmp_path, monkeypatch, capsys):
    """Forgetting --resume, or resuming with another --epochs (another default file), used to pass in silence."""
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    argv = ["train", *TINY, "--epochs", "1", "--no-results", "--checkpoint", str(tmp_path / "c.pt")]
    assert main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    assert "--resume: no checkpoint at" in out and "name its file with --checkpoint" in out
    assert main(argv) == 0
    assert "replacing the existing checkpoint" in capsys.readouterr().out
    assert main([*argv, "--resume"]) == 0                    # found: continued, nothing said about it
    out = capsys.readouterr().out
    assert "no checkpoint" not in out and "replacing" not in out


DAMAGED_CHECKPOINTS = {
    "random bytes": random.Random(0).randbytes(4000),
    "a pickle protocol torch warns about": b"\x80\x74" + bytes(200),   # torch's warning names weights_only
    "an opcode cut short": b"\x80\x02M\x01",                          # struct.error inside the unpickler
    "a zip that is not torch's": b"PK\x03\x04" + bytes(100),
}


@pytest.mark.parametrize("content", DAMAGED_CHECKPOINTS.values(), ids=DAMAGED_CHECKPOINTS.keys())
def test_a_damaged_checkpoint_is_named_without_torchs_unsafe_advice(tmp_path, capsys, content):
    """A truncated or foreign file where the checkpoint goes: a clear error naming it, not torch's traceback or
    warnings that suggest weights_only=False (which would run whatever code the file holds)."""
    ckpt = tmp_path / "c.pt"
    ckpt.write_bytes(content)
    assert main(["train", *TINY, "--no-results", "--checkpoint", str(ckpt), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"{ckpt} cannot be read as a checkpoint" in err and "Delete it" in err and "weights_only" not in err


@pytest.mark.parametrize("content", [b"a,b,c\n1,2,3\n", b"\xff\xfe\x00binary"])
def test_a_results_file_that_is_not_one_fails_before_training(tmp_path, capsys, content):
    """It used to fail with a KeyError or a UnicodeDecodeError after the whole training, when the row was appended."""
    (tmp_path / "runs.csv").write_bytes(content)
    assert train(tmp_path) == 2
    out, err = capsys.readouterr()
    assert "runs.csv" in err and "name another --results file" in err and "training" not in out
    assert (tmp_path / "runs.csv").read_bytes() == content and not (tmp_path / "ckpt.pt").exists()


def test_an_empty_results_file_is_one_with_no_rows(tmp_path, capsys):
    """`touch runs.csv` then train: it used to fail with 'I/O operation on closed file' (the header was read after
    the file was closed); now it is read as no rows and the run writes the header and its row."""
    (tmp_path / "runs.csv").write_bytes(b"")
    assert read_runs(tmp_path / "runs.csv") == []
    assert train(tmp_path) == 0
    assert [row["model"] for row in read_runs(tmp_path / "runs.csv")] == ["sasrec"]


def _video_folder(root: Path, lines: list[str]) -> Path:
    (root / "Video").mkdir(parents=True)
    (root / "Video" / "Video.txt").write_text("\n".join(lines) + "\n")
    return root


def test_a_malformed_data_file_fails_before_an_existing_checkpoint_is_replaced(tmp_path, capsys):
    data = _video_folder(tmp_path / "data", ["1 1", "1 2", "1 3", "2 abc"])
    ckpt = tmp_path / "c.pt"
    ckpt.write_bytes(b"an earlier run's checkpoint")
    assert main(["train", *TINY, "--dataset", "video", "--data-dir", str(data), "--no-results",
                 "--checkpoint", str(ckpt)]) == 2
    out, err = capsys.readouterr()
    assert "line 4" in err and "'abc'" in err and "replacing" not in out
    assert ckpt.read_bytes() == b"an earlier run's checkpoint"


def test_data_where_no_user_can_be_evaluated_is_refused_instead_of_nan_metrics(tmp_path, capsys):
    """Every user with two items: leave-one-out holds nothing out, and the run used to append a row of NaNs."""
    data = _video_folder(tmp_path / "data", [f"{u} {u + i}" for u in range(1, 40) for i in (0, 1)])
    assert train(tmp_path, "--dataset", "video", "--data-dir", str(data)) == 2
    assert "nothing can be evaluated" in capsys.readouterr().err
    assert not (tmp_path / "runs.csv").exists()


def test_resuming_a_finished_run_does_not_append_its_row_twice(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, "--epochs", "1") == 0
    first = read_runs(tmp_path / "runs.csv")
    assert len(first) == 1
    capsys.readouterr()
    assert train(tmp_path, "--epochs", "1", "--resume") == 0
    assert "nothing appended" in capsys.readouterr().out
    assert read_runs(tmp_path / "runs.csv") == first
    assert train(tmp_path, "--epochs", "1") == 0        # a fresh run (no --resume) is asked for: it gets its row
    assert len(read_runs(tmp_path / "runs.csv")) == 2


def test_a_run_warns_when_the_library_is_not_the_working_directorys_checkout(tmp_path, monkeypatch, capsys):
    import tutorial_lib.experiments.results as results

    monkeypatch.setattr(results, "library_elsewhere",
                        lambda: "tutorial_lib imported from /a, not from the working directory's checkout /b")
    assert train(tmp_path) == 0
    err = capsys.readouterr().err
    assert "warning: tutorial_lib imported from /a" in err and "records that checkout's commit" in err
    assert "set PYTHONPATH" in err
    monkeypatch.setattr(results, "library_elsewhere", lambda: None)
    assert train(tmp_path, "--no-results", "--checkpoint", str(tmp_path / "other.pt")) == 0
    assert not any(line.startswith("warning: ") for line in capsys.readouterr().err.splitlines())  # the library's


def test_windows_flag_reaches_the_row(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, "--windows", "random", "--max-len", "4", "--epochs", "1") == 0
    row = read_runs(tmp_path / "runs.csv")[0]
    assert "windows=random" in row["training"] and "--windows random" in row["command"]
    with pytest.raises(SystemExit):
        train(tmp_path, "--windows", "oldest")
    assert "invalid choice" in capsys.readouterr().err


def test_deterministic_flag_trains_in_deterministic_mode_under_the_same_run_id(tmp_path, monkeypatch):
    """``--deterministic`` reaches the trainer (train and benchmark); like the device, it is not part of the run id,
    and the row's command records it."""
    import torch

    from tutorial_lib.training import Trainer
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    seen = []
    real_epoch = Trainer.train_epoch

    def spy(self, epoch):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return real_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "train_epoch", spy)
    assert train(tmp_path, "--deterministic", "--epochs", "1") == 0
    assert train(tmp_path, "--epochs", "1", "--results", str(tmp_path / "plain.csv"),
                 "--checkpoint", str(tmp_path / "plain.pt")) == 0
    assert seen == [True, False] and not torch.are_deterministic_algorithms_enabled()
    row, plain = read_runs(tmp_path / "runs.csv")[0], read_runs(tmp_path / "plain.csv")[0]
    assert "--deterministic" in row["command"] and row["run_id"] == plain["run_id"]
    assert (row["hr@10"], row["ndcg@10"]) == (plain["hr@10"], plain["ndcg@10"])   # a CPU run repeats anyway

    seen.clear()
    assert main(["benchmark", "--models", "sasrec", "--datasets", "synthetic", "--seeds", "0", "--epochs", "1",
                 "--max-len", "10", "--d-model", "8", "--quiet", "--deterministic",
                 "--results", str(tmp_path / "b.csv"), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert seen == [True]


def test_unknown_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, "--model", "no-such-model") == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err
    for name in model_names():
        assert name in err
    assert not (tmp_path / "runs.csv").exists()


@pytest.mark.parametrize("name", ["no-such-data", "all"])            # "all" is the benchmark's word only
def test_unknown_dataset(tmp_path, capsys, name):
    assert train(tmp_path, "--dataset", name) == 2
    out, err = capsys.readouterr()
    assert f"unknown dataset '{name}'" in err
    assert "training" not in out                   # refused before the run is announced with its checkpoint
    for valid in [*dataset_names(), "synthetic"]:
        assert valid in err


@pytest.mark.parametrize("max_len", ["1", "0"])
def test_max_len_too_small(tmp_path, monkeypatch, capsys, max_len):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert main(["train", "--max-len", max_len, "--epochs", "1", "--quiet", "--no-results",
                 "--checkpoint", str(tmp_path / "c.pt")]) == 2
    err = capsys.readouterr().err
    assert "max_len must be >= 2" in err and f"got {max_len}" in err


@pytest.mark.parametrize("argv, message", [
    (["--lr", "-1"], "lr must be a finite number > 0"),                 # a training setting
    (["--lr", "nan"], "lr must be a finite number > 0"),                # used to end in Adam's traceback
    (["--option", "ffn_dim=-1"], "ffn_dim (the FFN's inner width) must be >= 1"),   # and in torch's
    (["--d-model", "63"], "must be divisible by n_heads=2"),             # a model setting
    (["--model", "fparec", "--option", "k=500"], "rank k must be in 1..max_len"),
    (["--max-len", "1"], "max_len must be >= 2"),
    (["--seed", "-1"], "seed must be an integer >= 0"),                 # used to end in NumPy's traceback
    (["--seed", str(2**64)], "below 2**64"),                            # and this in torch's, after the banner
])
def test_impossible_settings_fail_before_the_run_is_announced(tmp_path, capsys, argv, message):
    """Nothing is loaded, printed as started or written to a checkpoint for a run that cannot start."""
    assert main(["train", "--epochs", "1", "--quiet", "--no-results", "--checkpoint", str(tmp_path / "c.pt"),
                 *argv]) == 2
    out, err = capsys.readouterr()
    assert message in err and "training" not in out
    assert not (tmp_path / "c.pt").exists()


@pytest.mark.parametrize("argv, message", [
    (["--negatives", "100"], "loss 'ce' scores every item and samples nothing"),
    (["--mask-prob", "0.3"], "'sasrec' predicts the next item and masks nothing"),
])
def test_settings_the_run_would_ignore_are_refused(tmp_path, capsys, argv, message):
    """They used to be accepted and silently ignored, so the learner believed they had changed the run."""
    assert main(["train", "--epochs", "1", "--quiet", "--no-results", "--checkpoint", str(tmp_path / "c.pt"),
                 *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.pt").exists()


def test_bad_option_lists_valid_options(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, "--option", "bogus=1") == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "layout" in err


def test_datasets_command(tmp_path, capsys):
    assert main(["datasets", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "available" in out
    for name in dataset_names():
        assert name in out


def test_datasets_says_when_the_data_directory_is_not_a_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SEQREC_DATA_DIR", str(tmp_path / "typo"))
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert f"data directory: {tmp_path / 'typo'} (does not exist: is the path, or SEQREC_DATA_DIR" in out
    (tmp_path / "a_file").write_text("x")
    assert main(["datasets", "--data-dir", str(tmp_path / "a_file")]) == 0
    assert "(a file, not a folder" in capsys.readouterr().out
    assert main(["datasets", "--data-dir", str(tmp_path)]) == 0
    assert f"data directory: {tmp_path}\n" in capsys.readouterr().out


def test_models_command(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in model_names():
        assert name in out
    assert "layout" in out


def _subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    from tutorial_lib.cli import subcommand_parsers

    return subcommand_parsers(build_parser())


@pytest.mark.parametrize("command", ["datasets", "train", "benchmark"])
def test_every_option_says_what_it_does(command):
    actions = _subcommand_parsers()[command]._actions
    assert [a.option_strings[0] for a in actions if a.option_strings and not a.help] == []


@pytest.mark.parametrize("command", ["train", "benchmark"])
def test_the_defaults_the_help_states_are_the_parsers(command):
    stated = 0
    for action in _subcommand_parsers()[command]._actions:
        match = re.search(r"\(default ([0-9.]+)[;)]", action.help or "")
        default = action.default
        if isinstance(default, list):                    # --seeds [42], --also-protocols []
            default = default[0] if default else None
        if match and default is not None:
            assert float(match.group(1)) == float(default), action.option_strings
            stated += 1
    assert stated >= 5          # epochs (benchmark), batch size, lr, eval-every, patience, seed(s)


def test_the_choices_the_parser_offers_are_the_librarys():
    from tutorial_lib import cli
    from tutorial_lib.evaluation import PROTOCOLS
    from tutorial_lib.training.losses import LOSSES
    assert tuple(cli.PROTOCOLS) == tuple(PROTOCOLS) and tuple(cli.LOSSES) == tuple(LOSSES)


def test_the_model_defaults_the_help_states_are_the_models():
    help_text = " ".join(a.help for a in _subcommand_parsers()["train"]._actions if a.help)
    options = MODELS["sasrec"].options()
    assert f"embedding size (default {options['d_model']})" in help_text
    assert f"attention blocks (default {options['n_layers']})" in help_text
    assert f"attention heads (default {options['n_heads']};" in help_text


def test_output_closed_early_ends_quietly_with_sigpipes_status():
    """`python -m tutorial_lib models | head -1`: no traceback, the shell's status for SIGPIPE."""
    proc = subprocess.Popen([sys.executable, "-m", "tutorial_lib", "models"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    proc.stdout.close()                                   # the reader goes away before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "output closed early" in err


def test_argparse_rejects_unknown_loss(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--loss", "hinge"])
    assert exc.value.code == 2
    assert "hinge" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--option", "dropuot=0.3"], "dropuot"),                      # a typo must not run every model at its defaults
    (["--seeds", "1", "1"], "more than once"),
    (["--epochs", "-3"], "epochs must be >= 1"),
    (["--batch-size", "0"], "batch_size must be >= 1"),
    (["--models", "sasrec@foo"], "foo"),
    (["--heads", "0"], "n_heads must be >= 1"),
    (["--option", "k=500"], "rank k must be in 1..max_len"),          # FPARec's: found before SASRec trains
    (["--mask-prob", "0.3"], "none is in the plan"),
    (["--eval-users", "0"], "max_users is --eval-users"),
    (["--precision", "fp16", "--device", "cpu"], "fp16"),
    (["--time-budget", "-1"], "must be >= 0, got -1.0"),          # the real run refused it, --dry-run did not
    (["--time-budget", "nan"], "must be >= 0, got nan"),          # was taken as no budget at all
])
def test_benchmark_rejects_bad_plans_before_running_anything(tmp_path, capsys, argv, message):
    base = {"--models": ["sasrec", "fparec"], "--seeds": ["0"]}
    for flag, values in zip(argv[::2], argv[1::2]):
        base.pop(flag, None)
    args = ["benchmark", "--datasets", "synthetic", "--dry-run", "--results", str(tmp_path / "r.csv"), *argv]
    for flag, values in base.items():
        args += [flag, *values]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not (tmp_path / "r.csv").exists()


def test_benchmark_names_an_output_path_that_cannot_be_one(tmp_path, capsys):
    folder, file = tmp_path / "a_folder", tmp_path / "a_file"
    folder.mkdir()
    file.write_text("x")
    plan = ["benchmark", "--datasets", "synthetic", "--models", "sasrec", "--seeds", "0", "--dry-run"]
    assert main([*plan, "--results", str(folder)]) == 2
    assert f"{folder} is a folder; name the results CSV file" in capsys.readouterr().err
    assert main([*plan, "--results", str(tmp_path / "r.csv"), "--runs-dir", str(file)]) == 2
    assert f"--runs-dir {file}" in capsys.readouterr().err


def test_train_refuses_a_time_budget_that_is_not_a_number_of_seconds(tmp_path, capsys):
    assert train(tmp_path, "--time-budget", "nan") == 2
    assert "time_budget (seconds of training) must be >= 0, got nan" in capsys.readouterr().err


def test_an_interrupted_benchmark_is_told_how_to_continue(monkeypatch, capsys):
    def interrupted(args, argv):
        raise KeyboardInterrupt

    monkeypatch.setattr("tutorial_lib.cli.cmd_benchmark", interrupted)
    assert main(["benchmark", "--models", "sasrec", "--datasets", "synthetic"]) == 130
    err = capsys.readouterr().err
    assert "rerun the same command" in err and "--resume" not in err     # benchmark has no --resume flag


def test_runs_dir_holds_the_checkpoint_and_the_kept_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    runs = tmp_path / "my_runs"
    assert main(["train", *TINY, "--epochs", "1", "--no-results", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    (checkpoint,) = runs.glob("sasrec_synthetic_ce_full_s42_*.pt")
    (kept,) = (runs / "models").glob("*.pt")
    assert f"checkpoint {checkpoint}" in out and f"trained model in {kept}" in out


def test_benchmark_runs_dir_and_missing_data(tmp_path, monkeypatch, capsys):
    """--runs-dir takes the checkpoints and kept models; a dataset whose files are missing is shown as such by
    --dry-run and stops a real invocation before it trains anything."""
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    empty, runs, results = tmp_path / "no_data", tmp_path / "runs", tmp_path / "r.csv"
    plan = ["benchmark", "--models", "sasrec", "--seeds", "0", "--epochs", "1", "--max-len", "10", "--d-model", "8",
            "--quiet", "--results", str(results), "--runs-dir", str(runs), "--data-dir", str(empty)]
    assert main([*plan, "--datasets", "synthetic", "beauty", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"beauty +sasrec +ce +0 +no data", out) and re.search(r"synthetic +sasrec +ce +0 +pending", out)
    assert "1 pending, 1 without their data" in out
    assert f"datasets --download beauty --data-dir {empty}` fetches them (sha256-verified) into {empty}" in out

    assert main([*plan, "--datasets", "synthetic", "beauty"]) == 2
    err = capsys.readouterr().err
    assert "files are missing: beauty. Nothing was trained." in err and "--download beauty" in err
    assert not results.exists() and not (runs / "benchmark").exists()

    assert main([*plan, "--datasets", "synthetic"]) == 0
    assert len(read_runs(results)) == 1 and list((runs / "models").glob("sasrec_synthetic_*.pt"))
    assert (runs / "benchmark").is_dir() and not list((runs / "benchmark").glob("*.pt"))   # finished: removed


@pytest.mark.parametrize("argv, flag", [
    (["--eval-users", "0"], "max_users is --eval-users"),
    (["--heads", "3"], "n_heads is --heads"),
    (["--loss", "bce", "--negatives", "0"], "n_negatives is --negatives"),
    (["--layers", "0"], "n_layers is --layers"),
])
def test_errors_about_renamed_parameters_name_their_flag(tmp_path, capsys, argv, flag):
    assert main(["train", "--epochs", "1", "--quiet", "--no-results", "--checkpoint", str(tmp_path / "c.pt"),
                 *argv]) == 2
    assert f"(on the command line, {flag})" in capsys.readouterr().err


def test_the_renamed_parameters_are_real_flags():
    from tutorial_lib.cli import FLAG_OF_PARAMETER

    for command in ("train", "benchmark"):
        flags = {o for a in _subcommand_parsers()[command]._actions for o in a.option_strings}
        assert set(FLAG_OF_PARAMETER.values()) <= flags, command


def test_choices_are_case_insensitive_like_model_and_dataset_names():
    args = build_parser().parse_args(["train", "--loss", "CE", "--precision", "BF16", "--protocol", "Full",
                                      "--also-protocols", "SAMPLED100"])
    assert (args.loss, args.precision, args.protocol, args.also_protocols) == ("ce", "bf16", "full", ["sampled100"])


def test_no_command_prints_the_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and all(command in out for command in ("train", "benchmark", "datasets"))


@pytest.mark.parametrize("argv, hint", [
    (["--model", "sasrc"], "unknown model 'sasrc' (did you mean 'sasrec'?)"),
    (["--dataset", "ml1m"], "unknown dataset 'ml1m' (did you mean 'ml-1m'?)"),
    (["--dataset", "movielens"], "unknown dataset 'movielens' (did you mean 'ml-1m' or 'ml-100k'?)"),
    (["--dataset", "Video_Games"], "unknown dataset 'Video_Games' (did you mean 'video'?)"),
    (["--option", "dropot=0.1"], "no option(s): 'dropot' (did you mean 'dropout'?)"),
])
def test_a_misspelt_name_gets_a_suggestion(tmp_path, capsys, argv, hint):
    assert main(["train", "--epochs", "1", "--quiet", "--no-results", "--checkpoint", str(tmp_path / "c.pt"),
                 *argv]) == 2
    assert hint in capsys.readouterr().err


def test_the_librarys_warnings_are_one_line_each(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert train(tmp_path, "--no-results", "--epochs", "1", "--max-len", "64") == 0
    err = capsys.readouterr().err
    assert "warning: max_len=64, but the longest input here has" in err
    ours = [line for line in err.splitlines() if "tutorial_lib" in line or "max_len=64" in line]   # not torch's own
    assert not any("UserWarning" in line or ".py:" in line for line in ours)


@pytest.mark.parametrize("argv, message", [
    (["--results", "{afile}/x.csv"], "cannot use {afile} as a folder"),
    (["--results", "{tmp}"], "is a folder; name the CSV file"),
    (["--runs-dir", "{afile}"], "cannot use {afile} as a folder"),
    (["--checkpoint", "{afile}/c.pt"], "cannot use {afile} as a folder"),
    (["--checkpoint", "{tmp}"], "is a folder; name the checkpoint file"),
    (["--precision", "fp16", "--device", "cpu"], "fp16"),
    (["--model", "bert4rec", "--mask-prob", "1.5"], "between 0 and 1"),
    (["--dataset", "beauty", "--data-dir", "{tmp}/nowhere"], "the data directory {tmp}/nowhere does not exist"),
    (["--d-model", "32", "--option", "d_model=16"], "set the same option to two values"),
])
def test_paths_devices_and_data_are_checked_before_anything_trains(tmp_path, capsys, argv, message):
    """These used to fail after the announcement, some only after the whole training."""
    afile = tmp_path / "afile"
    afile.write_text("")
    fill = {"afile": str(afile), "tmp": str(tmp_path)}
    argv = [a.format(**fill) for a in argv]
    assert main(["train", "--epochs", "1", "--quiet", *argv]) == 2
    out, err = capsys.readouterr()
    assert message.format(**fill) in err and "training" not in out


def test_with_runs_dir_the_model_goes_there_even_beside_a_named_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    assert main(["train", *TINY, "--epochs", "1", "--no-results", "--checkpoint", str(tmp_path / "ck" / "c.pt"),
                 "--runs-dir", str(tmp_path / "runs")]) == 0
    assert list((tmp_path / "runs" / "models").glob("*.pt")) and not (tmp_path / "ck" / "models").exists()


def test_resuming_with_other_model_options_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", _small_synthetic)
    argv = ["train", *TINY, "--epochs", "1", "--no-results", "--checkpoint", str(tmp_path / "c.pt")]
    assert main(argv) == 0
    assert main([*argv, "--resume", "--dropout", "0.3"]) == 2
    assert "holds another model (dropout 0.2 -> 0.3)" in capsys.readouterr().err
    assert main([*argv, "--resume", "--heads", "2", "--epochs", "2"]) == 0       # the default, typed: the same model


@pytest.mark.parametrize("argv, hint", [
    (["train", "--models", "sasrec"], "did you mean --model? --models is an option of benchmark."),
    (["benchmark", "--resume"], "--resume is an option of train."),
    (["train", "--result", "x.csv"], "did you mean --results?"),      # no longer an abbreviation of --results
    (["train", "sasrec"], "`python -m tutorial_lib train --help` lists the options of train."),
])
def test_an_unknown_or_misplaced_flag_says_where_it_belongs(capsys, argv, hint):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"python -m tutorial_lib {argv[0]}: error: unrecognized arguments" in err
    assert hint in err


def test_report_refuses_an_abbreviation_and_a_readme_without_markers(tmp_path, capsys):
    from tutorial_lib.experiments import report

    results = tmp_path / "runs.csv"
    results.write_text("model,dataset\n")
    with pytest.raises(SystemExit):
        report.main(["--write", "--results", str(results)])    # used to mean --results-readme: overwrote the CSV
    assert results.read_text() == "model,dataset\n"
    plain = tmp_path / "README.md"
    plain.write_text("# no markers\n")
    for argv, message in ((["--check", "--readme", str(tmp_path / "none.md")], "no such file"),
                          (["--check", "--readme", str(plain)], "has no <!-- results:start -->")):
        with pytest.raises(SystemExit):
            report.main(argv)
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("quiet, terminal, bars", [(False, True, None), (True, True, False), (False, False, False)])
def test_progress_bars_only_on_a_terminal(monkeypatch, quiet, terminal, bars):
    from tutorial_lib.cli import _progress_bars

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal, raising=False)
    assert _progress_bars(argparse.Namespace(quiet=quiet)) is bars


def test_datasets_says_where_each_missing_file_comes_from(tmp_path, capsys):
    assert main(["datasets", "--data-dir", str(tmp_path)]) == 0
    notes = {line.split(":", 1)[0].strip(): line for line in capsys.readouterr().out.splitlines() if "by hand" in line}
    assert "ml-100k.zip (unzip ml-100k/u.data)" in notes["ml-100k"]
    assert all(f"{name} from https://" in notes["beauty-locker"] for name in ("train.json", "val.json", "test.json"))
    assert notes["beauty"].split(": ", 1)[1].startswith("run `python -m tutorial_lib datasets --download beauty`")
