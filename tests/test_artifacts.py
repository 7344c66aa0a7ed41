"""Trained-model files: what a finished run keeps, rebuilt exactly (weights, options, sizes) from plain values."""
from __future__ import annotations

import pytest
import torch

from tutorial_lib.data import leave_one_out, make_synthetic
from tutorial_lib.errors import ConfigError
from tutorial_lib.experiments.artifacts import load_trained, save_trained, trained_model_path
from tutorial_lib.experiments.run import ExperimentSpec, run_experiment
from tutorial_lib.training.checkpoint import save_checkpoint


@pytest.fixture()
def data(monkeypatch):
    data = make_synthetic(n_users=50, n_items=30, min_len=5, max_len=12, seed=0)
    monkeypatch.setattr("tutorial_lib.experiments.run.make_synthetic", lambda seed=0: data)
    return data


@pytest.mark.parametrize("model_name", ["sasrec", "fparec", "rksa"])
def test_a_finished_run_s_model_is_rebuilt_with_identical_scores(tmp_path, data, model_name):
    spec = ExperimentSpec(model=model_name, epochs=2, max_len=8, eval_users=30, progress=False,
                          model_options={"d_model": 8, "n_layers": 1})
    result = run_experiment(spec)
    path = result.save_model(tmp_path)
    assert path == trained_model_path(tmp_path, spec.tag(), spec.run_id())
    model, meta = load_trained(path)
    assert meta == {"model": model_name, "options": spec.resolved_model_options(), "n_items": data.n_items,
                    "n_users": data.n_users, "max_len": 8, "dataset": "synthetic", "run_id": spec.run_id()}
    assert not model.training
    split = leave_one_out(data)
    if model_name == "rksa":
        with pytest.raises(ConfigError, match="prepare"):
            model.score_next(torch.tensor([[0, 0, 1, 2, 3, 4, 5, 6]]), users=torch.tensor([1]))
        model.prepare(split)
    items = torch.tensor([[0, 0, 1, 2, 3, 4, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6]])
    extras = {"users": torch.tensor([1, 2])} if model_name == "rksa" else {}
    original = result.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.score_next(items, **extras), original.score_next(items, **extras),
                                   rtol=0, atol=0)


def test_bad_files_get_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no trained model at .*missing.pt"):
        load_trained(tmp_path / "missing.pt")
    save_checkpoint(tmp_path / "ckpt.pt", {"epoch": 3, "model": {}, "optimizer": {}})   # a training checkpoint
    with pytest.raises(ConfigError, match="not a trained-model file"):
        load_trained(tmp_path / "ckpt.pt")


def test_saved_weights_are_on_the_cpu_and_the_file_is_plain(tmp_path, data):
    from tutorial_lib.models import build_model

    model = build_model("sasrec", n_items=data.n_items, max_len=8, d_model=8, n_layers=1)
    path = save_trained(tmp_path / "sub" / "m.pt", model, model_name="sasrec", options={"d_model": 8, "n_layers": 1},
                        n_items=data.n_items, n_users=None, max_len=8)
    blob = torch.load(path, weights_only=True)                      # no pickled objects
    assert all(t.device.type == "cpu" for t in blob["state"].values()) and blob["n_users"] is None
    loaded, _ = load_trained(path)
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k


def test_kept_models_come_back_with_their_data_prepared_and_from_one_dataset(tmp_path, data):
    from tutorial_lib.experiments.run import load_kept_models, options_text

    paths = [run_experiment(ExperimentSpec(model=m, epochs=1, max_len=8, eval_users=30, progress=False,
                                           model_options={"d_model": 8, "n_layers": 1})).save_model(tmp_path)
             for m in ("sasrec", "rksa")]
    loaded, got, split = load_kept_models(paths)
    assert [meta["model"] for _, meta in loaded] == ["sasrec", "rksa"] and got.n_items == data.n_items
    assert split.n_users == data.n_users
    rksa = loaded[1][0]
    rksa.score_next(torch.tensor([[0, 0, 1, 2, 3, 4, 5, 6]]), users=torch.tensor([1]))  # prepared: no ConfigError
    assert options_text({"n_heads": 1, "d_model": 50}) == "d_model=50 n_heads=1" and options_text({}) == ""
    other = save_trained(tmp_path / "other.pt", loaded[0][0], model_name="sasrec", options={"d_model": 8, "n_layers": 1},
                         n_items=data.n_items, n_users=None, max_len=8, dataset="ml-1m", run_id="x")
    with pytest.raises(ConfigError, match="one dataset"):
        load_kept_models([paths[0], other])
