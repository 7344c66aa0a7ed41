"""The benchmark runner: planning, resumability (finished runs are never repeated, paused ones resume),
the time budget, and the presets it applies."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tutorial_lib.data import make_synthetic
from tutorial_lib.errors import ConfigError, UnknownNameError
from tutorial_lib.experiments import benchmark as bm
from tutorial_lib.experiments.results import read_runs
from tutorial_lib.experiments.run import ExperimentSpec, run_experiment
from tutorial_lib.training import trainer as trainer_module
from tutorial_lib.utils.device import hardware_description

TINY = dict(epochs=3, max_len=10, patience=5, eval_users=50, progress=False,
            model_options={"d_model": 8, "n_layers": 1})


@pytest.fixture()
def small_synthetic(monkeypatch):
    data = make_synthetic(n_users=60, n_items=40, min_len=5, max_len=12, seed=0)
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", lambda seed=0: data)
    return data


def test_plan_covers_models_datasets_and_seeds():
    models = bm.parse_models(["all"], "ce")
    assert ("sasrec", "bce") in models and ("rksa", "ce") in models and len(models) == 12
    specs = bm.plan(models, bm.parse_datasets(["all"]), [1, 2])
    assert len(specs) == 12 * 6 * 2
    assert len({s.run_id() for s in specs}) == len(specs)
    assert bm.parse_models(["sasrec@bce", "fparec"], "ce") == [("sasrec", "bce"), ("fparec", "ce")]
    sampled = bm.parse_models(["all"], "sampled-ce")
    assert ("sasrec", "bce") in sampled and ("sasrec", "sampled-ce") in sampled and len(sampled) == 12
    assert len(bm.parse_models(["all"], "bce")) == 11  # SASRec with BCE once
    base = ExperimentSpec(loss="sampled-ce", n_negatives=1024)
    negatives = {(s.model, s.loss): s.n_negatives for s in bm.plan(sampled, ["beauty"], [42], base)}
    assert negatives[("sasrec", "sampled-ce")] == 1024 and negatives[("sasrec", "bce")] is None
    assert bm.plan([("sasrec", "bce")], ["beauty"], [42], ExperimentSpec(n_negatives=5))[0].n_negatives == 5
    mixed = bm.plan([("sasrec", "ce"), ("sasrec", "bce")], ["beauty"], [42], ExperimentSpec(n_negatives=5))
    assert [s.n_negatives for s in mixed] == [None, None]     # full CE samples nothing; BCE is not the base loss
    with pytest.raises(ConfigError, match="samples nothing"):
        bm.plan([("sasrec", "ce"), ("fparec", "ce")], ["beauty"], [42], ExperimentSpec(n_negatives=5))
    with pytest.raises(UnknownNameError, match="sasrec"):
        bm.parse_models(["sasrek"], "ce")


def test_planning_builds_no_model_into_the_callers_random_state():
    """The plan builds each model once to check its options; the caller's torch generator must not notice."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    bm.plan(bm.parse_models(["all"], "ce"), ["ml-1m"], [42])
    assert torch.equal(torch.rand(3), expected)


def test_presets_reach_the_specs():
    spec = ExperimentSpec(model="rksa", dataset="ml-1m")
    assert spec.resolved_max_len() == 50 and spec.resolved_model_options()["dropout"] == 0.5
    assert ExperimentSpec(model="lightsans", dataset="beauty").resolved_model_options()["k_interests"] == 10
    assert ExperimentSpec(model="bert4rec", dataset="beauty").resolved_mask_prob() == 0.6
    short = {"dataset": "synthetic", "max_len": 12}                 # the presets' ranks (20, 40) shrink to the window
    assert ExperimentSpec(model="lightsans", **short).resolved_model_options()["k_interests"] == 12
    assert ExperimentSpec(model="fparec", **short).resolved_model_options()["k"] == 12
    own = ExperimentSpec(model="lightsans", model_options={"k_interests": 30}, **short)
    assert own.resolved_model_options()["k_interests"] == 30          # a rank the user chose is theirs
    user = ExperimentSpec(model="rksa", dataset="ml-1m", max_len=100, model_options={"dropout": 0.1})
    assert user.resolved_max_len() == 100 and user.resolved_model_options()["dropout"] == 0.1


def test_finished_runs_are_recorded_once_and_skipped(tmp_path, small_synthetic):
    specs = bm.plan([("sasrec", "ce"), ("fparec", "ce")], ["synthetic"], [0], ExperimentSpec(**TINY))
    results, ckpts = tmp_path / "runs.csv", tmp_path / "ckpt"
    final = bm.run_benchmark(specs, "test", results=results, checkpoints=ckpts, log=lambda m: None)
    assert [st.state for st in final] == ["done", "done"]
    rows = read_runs(results)
    assert [r["model"] for r in rows] == ["sasrec", "fparec"] and all(r["command"] == "test" for r in rows)
    assert {r["run_id"] for r in rows} == {s.run_id() for s in specs}
    for s in specs:
        assert (tmp_path / "curves" / f"{s.tag()}_{s.run_id()}.csv").exists()
    assert not list(ckpts.glob("*.pt"))                       # finished runs leave no checkpoint,
    for s in specs:                                            # but keep the model they selected
        assert (tmp_path / "models" / f"{s.tag()}_{s.run_id()}.pt").exists()
    bm.run_benchmark(specs, "again", results=results, checkpoints=ckpts, log=lambda m: None)
    assert len(read_runs(results)) == 2                       # nothing repeated
    assert "2 done" in bm.summary(final)


def test_a_paused_run_resumes_and_only_then_gets_a_row(tmp_path, small_synthetic, monkeypatch):
    """...and the row names both machines when the run was paused on one (a GPU here) and finished on another."""
    spec = replace(ExperimentSpec(**TINY), model="sasrec", dataset="synthetic")
    results, ckpts = tmp_path / "runs.csv", tmp_path / "ckpt"
    ckpts.mkdir()
    ckpt = bm.checkpoint_path(spec, ckpts)
    monkeypatch.setattr(trainer_module, "hardware_description", lambda device: "cuda: Big GPU")
    paused = run_experiment(replace(spec, checkpoint=str(ckpt), deadline=time.time() - 1))
    monkeypatch.setattr(trainer_module, "hardware_description", hardware_description)
    assert paused.train.stop_reason == "deadline" and not paused.train.finished and paused.train.epochs_run == 1
    assert ckpt.exists() and paused.test == {}
    (st,) = bm.status([spec], results, ckpts)
    assert st.state == "partial" and st.progress is not None
    assert (st.progress.epochs, st.progress.best_epoch, st.progress.training_pid) == (1, 1, None)
    assert st.progress.best_valid == pytest.approx(paused.train.best_valid["ndcg@10"])
    assert "epoch 1, best valid" in bm.summary([st]) and "paused" in bm.summary([st])
    final = bm.run_benchmark([spec], "resume", results=results, checkpoints=ckpts, log=lambda m: None)
    assert final[0].state == "done"
    (row,) = read_runs(results)
    assert row["epochs"] == "3" and row["stopped"] in ("epochs", "patience")
    assert row["hardware"] == f"cuda: Big GPU (epoch 1); {hardware_description(torch.device('cpu'))} (epochs 2-3)"


@pytest.mark.skipif(os.name == "nt", reason="a released lock file stays behind on Windows, so it names no live process")
def test_the_status_of_a_partial_run_says_whether_a_live_process_trains_it(tmp_path, small_synthetic):
    """The lock file of a run being trained names its process: alive means training now; a crashed runner's
    leftover names a dead one. A checkpoint that cannot be read leaves the run partial without its progress, and the
    table says to delete it."""
    spec = replace(ExperimentSpec(**TINY), model="sasrec", dataset="synthetic")
    ckpts = tmp_path / "ckpt"
    ckpts.mkdir()
    ckpt = bm.checkpoint_path(spec, ckpts)
    run_experiment(replace(spec, checkpoint=str(ckpt), deadline=time.time() - 1))
    bm.lock_path(ckpt).write_text(str(os.getpid()))
    (st,) = bm.status([spec], tmp_path / "runs.csv", ckpts)
    assert st.progress.training_pid == os.getpid() and f"training now (pid {os.getpid()})" in bm.summary([st])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    bm.lock_path(ckpt).write_text(str(dead.pid))
    assert bm.status([spec], tmp_path / "runs.csv", ckpts)[0].progress.training_pid is None
    assert bm.status([spec], tmp_path / "runs.csv", ckpts, progress=False)[0].progress is None
    ckpt.write_bytes(b"not a checkpoint")
    (st,) = bm.status([spec], tmp_path / "runs.csv", ckpts)
    assert st.state == "partial" and st.progress is None and "1 partial" in bm.summary([st])
    assert st.unreadable and f"checkpoint cannot be read (damaged?): delete {ckpt}" in bm.summary([st])
    assert not bm.status([spec], tmp_path / "runs.csv", ckpts, progress=False)[0].unreadable   # not looked at


def test_an_exhausted_budget_starts_nothing(tmp_path, small_synthetic):
    specs = bm.plan([("sasrec", "ce")], ["synthetic"], [0], ExperimentSpec(**TINY))
    messages = []
    final = bm.run_benchmark(specs, "x", time_budget=0, results=tmp_path / "r.csv", checkpoints=tmp_path / "c",
                             log=messages.append)
    assert final[0].state == "pending" and "time budget" in messages[0]
    with pytest.raises(ConfigError, match="must be >= 0, got -1"):
        bm.run_benchmark(specs, "x", time_budget=-1, results=tmp_path / "r.csv", checkpoints=tmp_path / "c")
    assert not (tmp_path / "r.csv").exists()


def test_extra_protocols_rank_the_same_model_and_count_as_done(tmp_path, small_synthetic):
    base = ExperimentSpec(**TINY, also_protocols=("full-nohist",))
    specs = bm.plan([("sasrec", "ce")], ["synthetic"], [0], base)
    results = tmp_path / "runs.csv"
    bm.run_benchmark(specs, "x", results=results, checkpoints=tmp_path / "c", log=lambda m: None)
    rows = read_runs(results)
    assert [r["protocol"] for r in rows] == ["full", "full-nohist"]
    assert len({r["run_id"] for r in rows}) == 1 and "select=full" in rows[1]["training"]
    assert float(rows[1]["hr@10"]) >= float(rows[0]["hr@10"])       # removing the history only helps the target
    nohist = replace(specs[0], protocol="full-nohist")
    assert nohist.run_id() != specs[0].run_id()                       # a run selected on nohist is another run


def test_a_crash_while_recording_a_run_leaves_it_unfinished_and_the_rerun_records_it_whole(tmp_path, small_synthetic,
                                                                                          monkeypatch):
    """The rows mark a run done, so they are written last and together: a crash while writing them must not
    leave one protocol's row (which would count as done) without the others, the curve or the model."""
    specs = bm.plan([("sasrec", "ce")], ["synthetic"], [0], ExperimentSpec(**TINY, also_protocols=("full-nohist",)))
    results, ckpts = tmp_path / "runs.csv", tmp_path / "ckpt"

    def crash(rows, path):
        raise KeyboardInterrupt("interrupted while writing the rows")

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(bm, "append_runs", crash)
        bm.run_benchmark(specs, "x", results=results, checkpoints=ckpts, log=lambda m: None)
    assert read_runs(results) == [] and [st.state for st in bm.status(specs, results, ckpts)] == ["partial"]
    final = bm.run_benchmark(specs, "x", results=results, checkpoints=ckpts, log=lambda m: None)
    assert final[0].state == "done"
    assert [r["protocol"] for r in read_runs(results)] == ["full", "full-nohist"]
    assert not list(ckpts.glob("*.pt")) and (tmp_path / "models" / f"{specs[0].tag()}_{specs[0].run_id()}.pt").exists()


def test_new_training_options_keep_the_ids_of_earlier_runs():
    """Options added later (``lr_decay``) enter the run id only when set: the rows and checkpoints of runs made
    before them (this id is a long ML-1M SASRec run's) stay finished or resumable."""
    spec = ExperimentSpec(model="sasrec", dataset="ml-1m", epochs=800, eval_every=5, patience=30, seed=42)
    assert spec.run_id() == "c98e650fa409"
    decayed = replace(spec, lr_decay=3)
    assert decayed.run_id() != spec.run_id() and decayed.training_options()["lr_decay"] == 3
    cosine = replace(spec, lr_schedule="cosine")
    assert cosine.run_id() != spec.run_id() and cosine.training_options()["lr_schedule"] == "cosine"
    assert "lr_schedule" not in spec.training_options()
    random_windows = replace(spec, window_sampling="random")
    assert random_windows.run_id() != spec.run_id() and random_windows.training_options()["windows"] == "random"
    assert replace(spec, n_negatives=5).run_id() == spec.run_id()      # full CE samples no negatives
    assert replace(spec, loss="bce", n_negatives=5).run_id() != replace(spec, loss="bce").run_id()


def test_an_option_given_with_its_default_is_the_same_run():
    """``--d-model 64`` (the default) used to make another run id: its finished run looked pending again."""
    spec = ExperimentSpec(model="sasrec", dataset="ml-1m", epochs=800, eval_every=5, patience=30, seed=42)
    for same in ({"d_model": 64}, {"n_heads": 2, "n_layers": 2}, {"dropout": 0.2}, {"tie_embeddings": True}):
        assert replace(spec, model_options=same).run_id() == spec.run_id() == "c98e650fa409", same
    for other in ({"d_model": 32}, {"dropout": 0.5}, {"tie_embeddings": False}, {"d_model": "64"}):
        assert replace(spec, model_options=other).run_id() != spec.run_id(), other
    rksa = ExperimentSpec(model="rksa", dataset="video")          # its preset sets n_heads=1: 2 is not its default
    assert replace(rksa, model_options={"n_heads": 2}).run_id() != rksa.run_id()


def test_a_model_or_dataset_listed_twice_is_refused():
    with pytest.raises(ConfigError, match="sasrec@ce listed more than once"):
        bm.parse_models(["sasrec", "SASRec@ce"], "ce")
    with pytest.raises(ConfigError, match="beauty listed more than once"):
        bm.parse_datasets(["beauty", "Beauty"])
    with pytest.raises(ConfigError, match="did you mean 'beauty'"):
        bm.parse_datasets(["beuaty"])
    with pytest.raises(ConfigError, match="--models 'all' stands alone"):   # not "unknown model 'all'"
        bm.parse_models(["all", "sasrec"], "ce")
    with pytest.raises(ConfigError, match="--datasets 'all' stands alone"):
        bm.parse_datasets(["ml-1m", "all"])


def test_each_unknown_name_carries_its_own_hint_and_an_empty_loss_is_refused():
    with pytest.raises(ConfigError, match=r"unknown dataset\(s\): 'ml1m' \(did you mean 'ml-1m'\?\), 'beuty' "
                                          r"\(did you mean 'beauty'\?\);"):
        bm.parse_datasets(["ml1m", "beuty"])
    with pytest.raises(ConfigError, match="--models sasrec@: name the loss after the @"):   # was the default loss
        bm.parse_models(["sasrec@"], "ce")


def test_the_plan_checks_the_device_and_precision():
    with pytest.raises(ConfigError, match="fp16"):
        bm.plan([("sasrec", "ce")], ["synthetic"], [0], ExperimentSpec(precision="fp16", device="cpu"))


def test_a_run_finished_by_another_invocation_meanwhile_is_not_repeated(tmp_path, small_synthetic):
    specs = bm.plan([("sasrec", "ce"), ("fparec", "ce")], ["synthetic"], [0], ExperimentSpec(**TINY))
    results, ckpts = tmp_path / "runs.csv", tmp_path / "ckpt"
    messages = []

    def log(message):
        messages.append(message)
        if message.startswith("starting sasrec"):   # meanwhile, another invocation finishes the FPARec run
            bm.run_benchmark(specs[1:], "other", results=results, checkpoints=ckpts, log=lambda m: None)

    final = bm.run_benchmark(specs, "first", results=results, checkpoints=ckpts, log=log)
    assert [st.state for st in final] == ["done", "done"]
    assert [(r["model"], r["command"]) for r in read_runs(results)] == [("fparec", "other"), ("sasrec", "first")]
    assert not any(m.startswith("starting fparec") for m in messages)


def test_a_run_another_live_process_trains_is_skipped_and_a_dead_one_s_lock_is_taken_over(tmp_path, small_synthetic):
    specs = bm.plan([("sasrec", "ce")], ["synthetic"], [0], ExperimentSpec(**TINY))
    results, ckpts = tmp_path / "runs.csv", tmp_path / "ckpt"
    ckpts.mkdir()
    lock = bm.checkpoint_path(specs[0], ckpts).with_suffix(".lock")
    holder = ("import sys, time\nfrom pathlib import Path\nfrom tutorial_lib.experiments.benchmark import claim_run\n"
              "held = claim_run(Path(sys.argv[1]))\nprint('held' if held else 'refused', flush=True)\ntime.sleep(60)\n")
    trainer = subprocess.Popen([sys.executable, "-c", holder, str(bm.checkpoint_path(specs[0], ckpts))],
                               stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert trainer.stdout.readline().strip() == "held"          # "another invocation" trains the run
        assert lock.read_text() == str(trainer.pid)
        messages = []
        final = bm.run_benchmark(specs, "x", results=results, checkpoints=ckpts, log=messages.append)
        assert final[0].state == "pending" and "another process is training it" in messages[0]
        assert lock.read_text() == str(trainer.pid)                  # its lock is left alone
    finally:
        trainer.kill()
        trainer.wait()
        trainer.stdout.close()
    assert lock.exists()                                             # it died holding the lock: the file stays
    final = bm.run_benchmark(specs, "x", results=results, checkpoints=ckpts, log=lambda m: None)
    assert final[0].state == "done" and not lock.exists()            # the dead process's run was taken over


def test_a_claim_writes_our_pid_refuses_a_second_claim_and_is_free_again_after_release(tmp_path):
    held = bm.claim_run(tmp_path / "run.pt")
    assert held is not None and held.path == tmp_path / "run.lock"
    assert held.path.read_text() == str(os.getpid())
    assert bm.claim_run(tmp_path / "run.pt") is None                 # flock: a second open file is refused too
    held.release()
    held.release()                                                   # twice is harmless
    assert not held.path.exists()
    again = bm.claim_run(tmp_path / "run.pt")
    assert again is not None
    again.release()


def test_a_lock_file_left_without_a_holder_is_taken_whatever_it_says(tmp_path):
    for text in ("", "not a pid", str(os.getpid()), "1"):           # empty, garbage, a live pid, init's pid
        (tmp_path / "run.lock").write_text(text)
        held = bm.claim_run(tmp_path / "run.pt")
        assert held is not None and held.path.read_text() == str(os.getpid())
        held.release()
