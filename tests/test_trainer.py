"""The trainer on tiny synthetic data: learning, early stopping, checkpoint/resume, budgets, precisions, losses."""
from __future__ import annotations

import math
import os
import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from test_models import FAMILIES
from tutorial_lib.errors import ConfigError, NotEnoughMemoryError
from tutorial_lib.evaluation import Evaluator
from tutorial_lib.models import build_model
from tutorial_lib.data.batching import iterate_batches
from tutorial_lib.training import Trainer, TrainConfig, load_checkpoint
from tutorial_lib.utils.device import describe_machines

MAX_LEN = 10


def make_model(split, seed=0, **opts):
    torch.manual_seed(seed)
    return build_model("sasrec", split.n_items, MAX_LEN, **{"d_model": 16, "n_layers": 1, "dropout": 0.1, **opts})


def config(**kw):
    return TrainConfig(**{"epochs": 3, "batch_size": 32, "lr": 1e-2, "device": "cpu", **kw})


def fit_until_a_crash(trainer, epoch, monkeypatch):
    """``trainer.fit()`` with a simulated crash as ``epoch`` starts (the epochs before it are checkpointed)."""
    real_epoch = Trainer.train_epoch

    def crashing(self, e):
        if e == epoch:
            raise RuntimeError("simulated crash")
        return real_epoch(self, e)

    monkeypatch.setattr(Trainer, "train_epoch", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.fit()
    monkeypatch.setattr(Trainer, "train_epoch", real_epoch)


class Popularity(nn.Module):
    def __init__(self, split):
        super().__init__()
        counts = np.zeros(split.n_items + 1)
        for t in split.train:
            np.add.at(counts, t, 1)
        self.counts = nn.Parameter(torch.tensor(counts, dtype=torch.float32), requires_grad=False)

    def score_next(self, ids):
        return self.counts.expand(ids.shape[0], -1).clone()


def test_training_learns_and_beats_popularity(tiny_split):
    model = make_model(tiny_split)
    ev = Evaluator(tiny_split, MAX_LEN)
    before = ev.evaluate(model, "test")["ndcg@10"]
    result = Trainer(model, tiny_split, config(epochs=4), ev).fit()
    losses = [h["loss"] for h in result.history]
    assert len(losses) == 4 and result.epochs_run == 4
    assert losses[-1] < 0.85 * losses[0]
    assert all(np.isfinite(losses))
    after = ev.evaluate(model, "test")["ndcg@10"]
    pop = ev.evaluate(Popularity(tiny_split), "test")["ndcg@10"]
    assert after > before
    assert after > pop + 0.1, f"trained {after:.3f} vs popularity {pop:.3f}"
    assert {"valid_ndcg@10", "valid_hr@10", "valid_mrr", "seconds"} <= set(result.history[-1])


def written_out_ce(hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Mean of ``logsumexp_j(h·e_j) - h·e_target`` over the real targets, classes 1..n (no padding class)."""
    mask = targets > 0
    logits = hidden[mask] @ items[1:].T
    return (torch.logsumexp(logits, -1) - logits[torch.arange(len(logits)), targets[mask] - 1]).mean()


def test_compute_loss_is_valid_position_ce_scaled_by_the_batchs_share_of_targets(tiny_split):
    """``weighting="target"``: the batch's CE times its targets over the epoch's mean targets per batch (so a
    short last batch weighs less); ``"batch"``: the plain mean."""
    model = make_model(tiny_split).eval()                                   # no dropout: one forward to compare
    trainer = Trainer(model, tiny_split, config(batch_size=48))
    batches = list(iterate_batches(trainer.windows, 48, torch.Generator().manual_seed(0)))
    assert trainer.targets_per_batch == pytest.approx(np.mean([int(b.targets.ne(0).sum()) for b in batches]))
    batch = min(batches, key=lambda b: int(b.targets.ne(0).sum()))          # the short one: scale well below 1
    with torch.no_grad():
        ce = written_out_ce(model(batch.inputs), batch.targets, model.output_embedding)
        scale = int(batch.targets.ne(0).sum()) / trainer.targets_per_batch
        assert scale < 0.9
        torch.testing.assert_close(trainer.compute_loss(batch), ce * scale, atol=1e-5, rtol=1e-5)
        plain = Trainer(model, tiny_split, config(batch_size=48, weighting="batch"))
        torch.testing.assert_close(plain.compute_loss(batch), ce, atol=1e-5, rtol=1e-5)
        # a batch with padding columns (no bucketing): its share counts the real targets, not the columns
        padded = next(iterate_batches(trainer.windows, 48, torch.Generator().manual_seed(0), bucketing=False))
        assert padded.targets.eq(0).any()
        ce = written_out_ce(model(padded.inputs), padded.targets, model.output_embedding)
        torch.testing.assert_close(trainer.compute_loss(padded),
                                   ce * int(padded.targets.ne(0).sum()) / trainer.targets_per_batch,
                                   atol=1e-5, rtol=1e-5)


def test_compute_loss_adds_the_models_auxiliary_loss(tiny_split):
    """RKSA's listwise co-occurrence loss (summed over its layers) is added to the CE of the same forward pass."""
    torch.manual_seed(0)
    model = build_model("rksa", tiny_split.n_items, MAX_LEN, n_users=tiny_split.n_users, d_model=16, n_layers=2,
                        dropout=0.0, rank_weight=0.5)
    trainer = Trainer(model, tiny_split, config(weighting="batch"))
    batch = next(iterate_batches(trainer.windows, 32, torch.Generator().manual_seed(0)))
    model.train()
    torch.manual_seed(7)                                                    # the same skew-normal noise twice
    got = trainer.compute_loss(batch)
    torch.manual_seed(7)
    hidden = model(batch.inputs, users=batch.users)
    aux = model.auxiliary_loss()
    assert aux is not None and aux > 0
    torch.testing.assert_close(got, written_out_ce(hidden, batch.targets, model.output_embedding) + aux)


def test_training_passes_each_window_with_its_own_user(tiny_split):
    """Every training input is the tail of its user's training history (without the last item, the last
    target), and the user ids a user-aware model receives are those windows' users."""
    model = make_model(tiny_split)
    model.needs_users = True                                                # asks for users, as RKSA does
    seen = []
    forward = model.forward

    def recording_forward(ids, users):
        if model.training:                                                  # not the validation at the epoch's end
            seen.extend(zip(ids.tolist(), users.tolist()))
        return forward(ids, users=users)

    model.forward = recording_forward
    Trainer(model, tiny_split, config(epochs=1), Evaluator(tiny_split, MAX_LEN)).fit()
    windowed = {u for u, items in enumerate(tiny_split.train) if len(items) >= 2}
    assert sorted(u for _, u in seen) == sorted(windowed)                   # one window per user and epoch
    for row, u in seen:
        tail = tiny_split.train[u][:-1][-MAX_LEN:].tolist()
        assert row[len(row) - len(tail):] == tail and not any(row[:len(row) - len(tail)])



class ScriptedEvaluator(Evaluator):
    """Real metrics, except that the selection metric collapses after epoch ``peak`` (so early stopping must
    trigger); remembers the weights it saw at every validation."""

    def __init__(self, *args, peak=2, **kw):
        super().__init__(*args, **kw)
        self.peak, self.calls, self.seen = peak, 0, []

    def evaluate(self, model, stage="valid", device=None):
        m = super().evaluate(model, stage, device)
        self.calls += 1
        self.seen.append({k: v.clone() for k, v in model.state_dict().items()})
        if self.calls > self.peak:
            m["ndcg@10"] -= 1.0
        return m


def test_early_stopping_restores_best_weights(tiny_split):
    model = make_model(tiny_split)
    ev = ScriptedEvaluator(tiny_split, MAX_LEN, peak=2)
    result = Trainer(model, tiny_split, config(epochs=20, patience=3), ev).fit()
    assert result.stopped_early
    assert result.best_epoch == 2
    assert result.epochs_run == 2 + 3
    best_weights = ev.seen[1]
    final = model.state_dict()
    assert all(torch.equal(final[k], best_weights[k]) for k in final)
    assert not all(torch.equal(ev.seen[-1][k], best_weights[k]) for k in final)   # training did move on
    # the restored model reproduces the best validation metrics exactly
    again = Evaluator(tiny_split, MAX_LEN).evaluate(model, "valid")
    for k, v in result.best_valid.items():
        assert again[k] == pytest.approx(v, abs=1e-12), k


def test_early_stopping_with_a_real_evaluator(tiny_split):
    model = make_model(tiny_split)
    result = Trainer(model, tiny_split, config(epochs=4, lr=5e-2, patience=1)).fit()
    assert 1 <= result.best_epoch <= result.epochs_run
    assert result.best_valid["ndcg@10"] == max(h["valid_ndcg@10"] for h in result.history)
    again = Evaluator(tiny_split, MAX_LEN).evaluate(model, "valid")
    assert again == pytest.approx(result.best_valid, abs=1e-12)


def test_lr_decay_halves_after_plateaus_and_survives_resume(tiny_split, tmp_path):
    """Validation collapses after epoch 2: every 2nd validation without a gain halves the rate, until patience."""
    ckpt = tmp_path / "decay.pt"
    ev = ScriptedEvaluator(tiny_split, MAX_LEN, peak=2)
    trainer = Trainer(make_model(tiny_split), tiny_split,
                      config(epochs=6, patience=7, lr_decay=2, checkpoint=str(ckpt)), ev)
    first = trainer.fit()
    assert [h["lr"] for h in first.history] == [1e-2] * 4 + [5e-3] * 2
    assert trainer.current_lr == 2.5e-3   # cut after epoch 6 (4 bad validations), used from epoch 7 on

    ev = ScriptedEvaluator(tiny_split, MAX_LEN, peak=0)   # everything after the resume is worse
    resumed = Trainer(make_model(tiny_split, seed=5), tiny_split,
                      config(epochs=20, patience=7, lr_decay=2, checkpoint=str(ckpt)), ev)
    assert resumed.current_lr == 1e-2     # before fit() reads the checkpoint
    result = resumed.fit()
    lrs = [h["lr"] for h in result.history]
    assert lrs == [1e-2] * 4 + [5e-3] * 2 + [2.5e-3] * 2 + [1.25e-3]
    assert result.stop_reason == "patience" and result.best_epoch == 2
    assert resumed.optimizer.param_groups[0]["lr"] == 1.25e-3   # no cut on the stopping validation


def test_cosine_schedule_is_a_function_of_the_epoch_and_survives_a_pause(tiny_split, tmp_path):
    """Epoch e of E trains at lr (1 + cos(pi (e - 1) / E)) / 2; paused after epoch 1 and resumed, the run repeats
    the straight one exactly (rates, losses and weights)."""
    cfg = dict(epochs=4, patience=10, lr_schedule="cosine", lr=1e-2)
    straight_model = make_model(tiny_split)
    straight = Trainer(straight_model, tiny_split, config(**cfg)).fit()
    expected = [1e-2 * (1 + math.cos(math.pi * k / 4)) / 2 for k in range(4)]
    assert [h["lr"] for h in straight.history] == pytest.approx(expected, rel=1e-12)
    assert expected[0] == 1e-2 and all(a > b for a, b in zip(expected, expected[1:]))

    ckpt = tmp_path / "cosine.pt"
    paused = Trainer(make_model(tiny_split), tiny_split, config(**cfg, checkpoint=str(ckpt), deadline=0.0)).fit()
    assert paused.stop_reason == "deadline" and paused.epochs_run == 1
    resumed_model = make_model(tiny_split, seed=5)              # other weights: the checkpoint must replace them
    resumed = Trainer(resumed_model, tiny_split, config(**cfg, checkpoint=str(ckpt))).fit()
    assert [h["lr"] for h in resumed.history] == [h["lr"] for h in straight.history]
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]
    for (name, a), b in zip(straight_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_cosine_schedule_resumes_only_with_its_own_epochs(tiny_split, tmp_path):
    """The number of epochs sets a cosine run's rates, so a checkpoint refuses another; a constant-rate run may
    be given more epochs."""
    for schedule in ("cosine", "constant"):
        ckpt = tmp_path / f"{schedule}.pt"
        Trainer(make_model(tiny_split), tiny_split, config(epochs=2, lr_schedule=schedule, checkpoint=str(ckpt))).fit()
        longer = Trainer(make_model(tiny_split), tiny_split, config(epochs=3, lr_schedule=schedule,
                                                                    checkpoint=str(ckpt)))
        if schedule == "cosine":
            with pytest.raises(ConfigError, match="epochs 2 -> 3"):
                longer.fit()
        else:
            assert longer.fit().epochs_run == 3


def test_constant_lr_without_decay(tiny_split):
    ev = ScriptedEvaluator(tiny_split, MAX_LEN, peak=1)
    result = Trainer(make_model(tiny_split), tiny_split, config(epochs=6, patience=10), ev).fit()
    assert {h["lr"] for h in result.history} == {1e-2}


def test_checkpoint_resume_equals_straight_training(tiny_split, tmp_path, monkeypatch):
    cfg = dict(epochs=4, patience=10)
    straight_model = make_model(tiny_split, dropout=0.3)
    straight = Trainer(straight_model, tiny_split, config(**cfg)).fit()

    ckpt = tmp_path / "run.pt"
    crashing = Trainer(make_model(tiny_split, dropout=0.3), tiny_split, config(**cfg, checkpoint=str(ckpt)))
    fit_until_a_crash(crashing, 3, monkeypatch)

    state = torch.load(ckpt, weights_only=True)          # plain data only
    assert state["epoch"] == 2 and len(state["history"]) == 2
    assert load_checkpoint(ckpt)["epoch"] == 2

    torch.manual_seed(123)                               # scramble the global RNG: resume must restore it
    resumed_model = make_model(tiny_split, seed=99, dropout=0.3)   # different init: weights must come from the file
    resumed = Trainer(resumed_model, tiny_split, config(**cfg, checkpoint=str(ckpt))).fit()

    assert resumed.epochs_run == straight.epochs_run == 4
    assert resumed.best_epoch == straight.best_epoch
    strip = lambda h: [{k: v for k, v in row.items() if k != "seconds"} for row in h]
    assert strip(resumed.history) == strip(straight.history)
    a, b = straight_model.state_dict(), resumed_model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_checkpoint(ckpt)["epoch"] == 4


def test_resuming_a_run_whose_time_budget_is_spent_trains_no_further_epoch(tiny_split, tmp_path):
    """The budget counts over resumed sessions: rerunning a finished run changes nothing; a larger one continues."""
    ckpt = tmp_path / "budget.pt"
    first_model = make_model(tiny_split)
    first = Trainer(first_model, tiny_split, config(epochs=5, time_budget=0.0, checkpoint=str(ckpt))).fit()
    assert first.epochs_run == 1 and first.stop_reason == "time-budget"

    again_model = make_model(tiny_split, seed=7)          # other weights: they must come from the checkpoint
    again = Trainer(again_model, tiny_split, config(epochs=5, time_budget=0.0, checkpoint=str(ckpt))).fit()
    assert again.epochs_run == 1 and again.stop_reason == "time-budget" and again.best_epoch == 1
    a, b = first_model.state_dict(), again_model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_checkpoint(ckpt)["epoch"] == 1

    longer = Trainer(make_model(tiny_split), tiny_split, config(epochs=3, time_budget=1e9, checkpoint=str(ckpt))).fit()
    assert longer.epochs_run == 3 and longer.stop_reason == "epochs"


def test_any_damaged_checkpoint_is_one_clear_error_and_no_torch_warnings(tmp_path):
    """Whatever bytes sit where a checkpoint should be (random, cut short, a pickle of another protocol), loading
    raises ConfigError naming the file, and torch's warnings about the bytes are not passed on; a good checkpoint
    cut in half is refused the same way, and the good one still loads."""
    from tutorial_lib.training.checkpoint import save_checkpoint
    rng = random.Random(0)
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"epoch": 3, "weights": torch.arange(1000.0)})
    whole = path.read_bytes()
    assert load_checkpoint(path)["epoch"] == 3
    contents = [whole[: len(whole) // 2], whole[:-1], b"", b"\x80\x74" + bytes(50), b"\x80\x02M\x01"]
    contents += [(b"\x80" if i % 2 else b"") + rng.randbytes(rng.choice([1, 3, 40, 500])) for i in range(300)]
    for content in contents:
        path.write_bytes(content)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ConfigError, match="cannot be read as a checkpoint|not a checkpoint of this"):
                load_checkpoint(path)
        assert not caught, (content[:8], [str(w.message) for w in caught])


def test_a_checkpoint_that_cannot_be_read_is_named_with_what_failed(tmp_path):
    path = tmp_path / "c.pt"
    path.write_bytes(b"\x80\x02M\x01")                     # an opcode cut short: struct.error, once "(error)"
    with pytest.raises(ConfigError, match=r"c.pt cannot be read as a checkpoint \(struct.error\)"):
        load_checkpoint(path)
    with pytest.raises(ConfigError, match=r"is a folder; name the checkpoint file"):   # was IsADirectoryError
        load_checkpoint(tmp_path)


def test_a_checkpoint_of_other_settings_or_another_model_is_refused(tiny_split, tmp_path):
    """Resuming would continue another run under this run's name (Adam's state even keeps the old rate)."""
    ckpt = str(tmp_path / "run.pt")
    Trainer(make_model(tiny_split), tiny_split, config(epochs=1, checkpoint=ckpt)).fit()
    with pytest.raises(ConfigError, match=r"lr 0\.01 -> 0\.0005"):
        Trainer(make_model(tiny_split), tiny_split, config(epochs=2, lr=5e-4, checkpoint=ckpt)).fit()
    with pytest.raises(ConfigError, match="another model"):
        Trainer(make_model(tiny_split, d_model=8), tiny_split, config(epochs=2, checkpoint=ckpt)).fit()
    with pytest.raises(ConfigError, match=r"another model \(dropout 0\.1 -> 0\.3, n_heads 2 -> 4\)"):
        Trainer(make_model(tiny_split, dropout=0.3, n_heads=4), tiny_split, config(epochs=2, checkpoint=ckpt)).fit()
    with pytest.raises(ConfigError, match=r"another model \(model 'sasrec' -> 'fparec', "):   # named first
        Trainer(build_model("fparec", tiny_split.n_items, MAX_LEN, d_model=16, dropout=0.1), tiny_split,
                config(epochs=2, checkpoint=ckpt)).fit()
    longer = Trainer(make_model(tiny_split), tiny_split, config(epochs=2, patience=3, checkpoint=ckpt)).fit()
    assert longer.epochs_run == 2                        # training longer is a resume, not another run


def test_the_checkpoint_records_how_the_model_was_built(tiny_split, tmp_path):
    """Options that change no parameter's shape (dropout, heads) are refused on resume only thanks to this."""
    ckpt = tmp_path / "run.pt"
    Trainer(make_model(tiny_split, n_heads=4), tiny_split, config(epochs=1, checkpoint=str(ckpt))).fit()
    recipe = load_checkpoint(ckpt)["recipe"]
    assert recipe["model"] == "sasrec" and recipe["max_len"] == MAX_LEN and recipe["n_items"] == tiny_split.n_items
    assert recipe["options"]["n_heads"] == 4 and recipe["options"]["layout"] == "paper"    # defaults included


def test_a_run_resumed_on_another_machine_records_both(tiny_split, tmp_path, monkeypatch):
    """Paused after epoch 2 on one machine, finished on another: the result (and so the results row) names each
    machine with its epochs; a run that stays on one machine has one stretch, and a checkpoint written before
    machines were recorded marks its epochs "not recorded"."""
    import tutorial_lib.training.trainer as trainer_module

    ckpt = tmp_path / "run.pt"
    monkeypatch.setattr(trainer_module, "hardware_description", lambda device: "cuda: Big GPU")
    first = Trainer(make_model(tiny_split), tiny_split, config(epochs=2, patience=10, checkpoint=str(ckpt))).fit()
    assert first.machines == [["cuda: Big GPU", 1, 2]]
    monkeypatch.setattr(trainer_module, "hardware_description", lambda device: "cpu: Laptop x1 threads")
    resumed = Trainer(make_model(tiny_split), tiny_split, config(epochs=4, patience=10, checkpoint=str(ckpt))).fit()
    assert resumed.machines == [["cuda: Big GPU", 1, 2], ["cpu: Laptop x1 threads", 3, 4]]
    assert describe_machines(resumed.machines) == ("cuda: Big GPU (epochs 1-2); cpu: Laptop x1 threads "
                                                   "(epochs 3-4)")
    assert describe_machines(first.machines) == "cuda: Big GPU" and describe_machines([]) == ""

    state = load_checkpoint(ckpt)
    del state["machines"]                                     # as a checkpoint of 2026-11-29 was written
    torch.save(state, ckpt)
    older = Trainer(make_model(tiny_split), tiny_split, config(epochs=5, patience=10, checkpoint=str(ckpt))).fit()
    assert older.machines == [["not recorded", 1, 4], ["cpu: Laptop x1 threads", 5, 5]]


def test_checkpoint_keeps_the_loss_scale(tiny_split, tmp_path):
    """An fp16 run's loss scale survives a resume (a CPU GradScaler stands in for CUDA's here)."""
    def trainer(epochs):
        t = Trainer(make_model(tiny_split), tiny_split, config(epochs=epochs, checkpoint=str(tmp_path / "s.pt")))
        t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0, growth_interval=1)   # doubles after every step
        return t

    first = trainer(1)
    first.fit()
    steps = math.ceil(len(tiny_split.train) / 32)
    assert first.scaler.get_scale() == 2.0 * 2 ** steps
    state = load_checkpoint(tmp_path / "s.pt")
    assert state["scaler"]["scale"] == 2.0 * 2 ** steps and state["device_rng"] is None   # CPU: no device generator
    resumed = trainer(2)
    resumed.fit()
    assert resumed.scaler.get_scale() == 2.0 * 2 ** (2 * steps)


def test_device_generator_state_is_saved_and_restored(monkeypatch):
    """CUDA's generator (dropout masks drawn on the GPU) goes through the checkpoint; simulated without a GPU."""
    from tutorial_lib.utils.seeding import device_rng_state, set_device_rng_state
    saved = {}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([7, 8], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: saved.update(state=state, device=device))
    cuda = torch.device("cuda")
    state = device_rng_state(cuda)
    assert state.tolist() == [7, 8] and device_rng_state(torch.device("cpu")) is None
    set_device_rng_state(cuda, state)
    assert saved["state"].tolist() == [7, 8] and saved["device"] == cuda
    saved.clear()
    set_device_rng_state(cuda, None)                  # a checkpoint written on the CPU
    set_device_rng_state(torch.device("cpu"), state)  # a GPU checkpoint resumed on the CPU
    assert saved == {}


def test_time_budget_stops(tiny_split):
    result = Trainer(make_model(tiny_split), tiny_split, config(epochs=50, time_budget=0.0)).fit()
    assert result.epochs_run == 1 and result.stopped_early


def test_time_budget_validates_the_epoch_it_stops_at(tiny_split):
    """Off the ``eval_every`` schedule, the last trained epoch is still validated and can be selected."""
    model = make_model(tiny_split)
    result = Trainer(model, tiny_split, config(epochs=50, eval_every=5, time_budget=0.0)).fit()
    assert result.epochs_run == 1 and result.stopped_early
    assert "valid_ndcg@10" in result.history[-1]
    assert result.best_epoch == 1


@pytest.mark.parametrize("loss", ["bce", "sampled-ce"])
def test_as_many_negatives_as_items_is_warned_about(tiny_split, loss):
    """Sampling the whole catalogue (README's 1,024 copied onto small data) costs more than full CE."""
    with pytest.warns(UserWarning, match="full cross-entropy"):
        Trainer(make_model(tiny_split), tiny_split, config(epochs=1, loss=loss, n_negatives=tiny_split.n_items))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(make_model(tiny_split), tiny_split, config(epochs=1, loss=loss, n_negatives=tiny_split.n_items - 1))


def test_a_window_much_longer_than_every_history_is_warned_about(tiny_split):
    longest = max(len(h) for h in tiny_split.train) + 1            # the longest test input (history + validation)
    with pytest.warns(UserWarning, match=f"max_len={2 * longest}.*longest input here has {longest} items"):
        Trainer(build_model("sasrec", tiny_split.n_items, 2 * longest, d_model=16, n_layers=1), tiny_split,
                config(epochs=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(build_model("sasrec", tiny_split.n_items, 2 * longest - 1, d_model=16, n_layers=1), tiny_split,
                config(epochs=1))


def test_a_batch_whose_activations_cannot_fit_is_refused_before_anything_is_allocated(tiny_split, monkeypatch):
    """A kernel that overcommits would kill the process mid-epoch without a word: the floor is checked first."""
    import tutorial_lib.training.trainer as trainer_module

    floor = 4 * 1 * 32 * MAX_LEN * 16 * 4                      # 4 tensors of (32, 10, 16) float32 in 1 block
    monkeypatch.setattr(trainer_module, "available_memory", lambda device: floor - 1)
    monkeypatch.setattr(trainer_module.TrainingWindows, "from_train", None)   # never reached
    with pytest.raises(NotEnoughMemoryError) as info:
        Trainer(make_model(tiny_split), tiny_split, config())
    msg = str(info.value)
    assert f"32 windows {MAX_LEN} positions wide" in msg and "32 x 10 x 16" in msg and "--max-len" in msg
    monkeypatch.undo()
    monkeypatch.setattr(trainer_module, "available_memory", lambda device: floor)
    Trainer(make_model(tiny_split), tiny_split, config())          # exactly the floor: allowed


def test_the_memory_floor_uses_the_trimmed_width_with_bucketing_and_is_skipped_when_unknown(tiny_split, monkeypatch):
    import tutorial_lib.training.trainer as trainer_module

    longest = max(len(h) for h in tiny_split.train) + 1
    wide = build_model("sasrec", tiny_split.n_items, 4 * longest, d_model=16, n_layers=1)
    floor = 4 * 32 * (longest - 2) * 16 * 4                    # bucketed batches are at most longest - 2 wide
    monkeypatch.setattr(trainer_module, "available_memory", lambda device: floor)
    with pytest.raises(NotEnoughMemoryError, match=f"{4 * longest} positions wide"):
        Trainer(wide, tiny_split, config(bucketing=False))
    with pytest.warns(UserWarning, match="longest input"):
        Trainer(wide, tiny_split, config(bucketing=True))
    monkeypatch.setattr(trainer_module, "available_memory", lambda device: None)
    with pytest.warns(UserWarning, match="longest input"):
        Trainer(wide, tiny_split, config(bucketing=False))


def test_running_out_of_memory_names_the_settings_and_keeps_the_finished_epochs(tiny_split, tmp_path):
    ckpt = tmp_path / "run.pt"
    trainer = Trainer(make_model(tiny_split), tiny_split, config(epochs=3, checkpoint=str(ckpt)))
    train_epoch = trainer.train_epoch

    def second_epoch_runs_out(epoch):
        if epoch == 2:    # the allocator's message on a CPU, as a too-large max_len produces it
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                               "memory: you tried to allocate 3200000000 bytes. Error code 12")
        return train_epoch(epoch)

    trainer.train_epoch = second_epoch_runs_out
    with pytest.raises(NotEnoughMemoryError) as info:
        trainer.fit()
    msg = str(info.value)
    assert "3200000000 bytes" in msg and "32 windows of up to 10 items" in msg
    assert "--batch-size" in msg and "--max-len" in msg and isinstance(info.value, MemoryError)
    assert load_checkpoint(ckpt)["epoch"] == 1          # the finished epoch is kept


@pytest.mark.parametrize("loss, named", [("ce", None), ("bce", "BCE gathers 7 negative"),
                                          ("sampled-ce", "Sampled softmax scores 7 negatives")])
def test_running_out_of_memory_with_sampled_losses_names_the_negatives(tiny_split, loss, named):
    """With BCE or sampled softmax the negatives size a batch too (BCE: batch x max_len x negatives x d)."""
    sampled = {} if loss == "ce" else {"n_negatives": 7}
    trainer = Trainer(make_model(tiny_split), tiny_split, config(epochs=1, loss=loss, **sampled))

    def runs_out(epoch):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes")

    trainer.train_epoch = runs_out
    with pytest.raises(NotEnoughMemoryError) as info:
        trainer.fit()
    assert ("--negatives" in str(info.value)) == (named is not None)
    assert named is None or named in str(info.value)


def test_other_runtime_errors_pass_through_unchanged(tiny_split):
    trainer = Trainer(make_model(tiny_split), tiny_split, config(epochs=1))

    def broken(epoch):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    trainer.train_epoch = broken
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as info:
        trainer.fit()
    assert not isinstance(info.value, NotEnoughMemoryError)


def test_mask_prob_outside_zero_one_is_refused():
    with pytest.raises(ConfigError, match="mask_prob .* between 0 and 1, got 1.5"):
        config(mask_prob=1.5)


def test_bf16_on_cpu(tiny_split):
    model = make_model(tiny_split)
    result = Trainer(model, tiny_split, config(epochs=2, precision="bf16")).fit()
    losses = [h["loss"] for h in result.history]
    assert all(np.isfinite(losses)) and losses[1] < losses[0]
    assert next(model.parameters()).dtype == torch.float32


def test_fp16_off_cuda_is_refused_with_what_to_use(tiny_split):
    """fp16 autocast off CUDA has no loss scaler and was ~10x slower than fp32 on the CPU: refused, not run."""
    with pytest.raises(ConfigError, match="precision='bf16'"):
        Trainer(make_model(tiny_split), tiny_split, config(epochs=1, precision="fp16", device="cpu"))


@pytest.mark.parametrize("loss", ["ce", "bce", "sampled-ce"])
def test_every_loss_trains(tiny_split, loss):
    model = make_model(tiny_split)
    neg = None if loss == "ce" else 8
    result = Trainer(model, tiny_split, config(epochs=3, loss=loss, n_negatives=neg)).fit()
    losses = [h["loss"] for h in result.history]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert result.best_valid["ndcg@10"] > 0


def test_random_windows_train_deterministically_and_differ_from_recent(tiny_split):
    """``window_sampling="random"`` trains on other windows than the default (when histories are longer than
    the window) and gives the same result twice with one seed."""
    long_users = sum(len(t) > MAX_LEN + 1 for t in tiny_split.train)
    assert long_users > 0
    runs = []
    for sampling in ("random", "random", "recent"):
        model = make_model(tiny_split)
        runs.append((Trainer(model, tiny_split, config(epochs=2, window_sampling=sampling)).fit(), model))
    (a, ma), (b, mb), (c, mc) = runs
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    assert all(torch.equal(ma.state_dict()[k], mb.state_dict()[k]) for k in ma.state_dict())
    assert [h["loss"] for h in a.history] != [h["loss"] for h in c.history]


def test_random_windows_refused_for_prefix_training(tiny_split):
    torch.manual_seed(0)
    model = build_model("lightsans", tiny_split.n_items, MAX_LEN, d_model=16, n_layers=1, compat=True)
    with pytest.raises(ConfigError, match="every prefix"):
        Trainer(model, tiny_split, config(window_sampling="random"))


def test_bucketing_a_model_that_pads_to_full_width_warns_that_it_does_nothing(tiny_split):
    torch.manual_seed(0)
    model = build_model("lightsans", tiny_split.n_items, MAX_LEN, d_model=16, n_layers=1, compat=True)
    with pytest.warns(UserWarning, match="pads every input back to max_len"):
        Trainer(model, tiny_split, config(bucketing=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(make_model(tiny_split), tiny_split, config(bucketing=True))   # a model that uses the trimmed width


def test_bad_config():
    with pytest.raises(ConfigError, match="sampled-ce"):
        TrainConfig(loss="hinge")
    with pytest.raises(ConfigError):
        TrainConfig(precision="fp8")
    with pytest.raises(ConfigError):
        TrainConfig(epochs=0)
    with pytest.raises(ConfigError):
        TrainConfig(lr=0)
    with pytest.raises(ConfigError, match="lr_decay"):
        TrainConfig(lr_decay=0)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        TrainConfig(lr_decay=3, lr_decay_factor=1.0)
    with pytest.raises(ConfigError, match="lr_schedule must be one of"):
        TrainConfig(lr_schedule="linear")
    with pytest.raises(ConfigError, match="choose one"):
        TrainConfig(lr_schedule="cosine", lr_decay=3)
    with pytest.raises(ConfigError, match="window_sampling"):
        TrainConfig(window_sampling="oldest")
    with pytest.raises(ConfigError, match="time_budget"):
        TrainConfig(time_budget=-5)
    with pytest.raises(ConfigError, match="samples nothing"):       # negatives would be silently ignored
        TrainConfig(loss="ce", n_negatives=100)
    for seed in (-1, 1.5, True):                                     # -1 used to end in NumPy's traceback
        with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
            TrainConfig(seed=seed)
    assert TrainConfig(seed=np.int64(3)).seed == 3 and TrainConfig(seed=2**40).seed == 2**40
    assert TrainConfig(loss="sampled-ce").negatives == 256 and TrainConfig(loss="bce").negatives == 1


def _deterministic_state() -> tuple:
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark)


@pytest.fixture
def no_cublas_setting(monkeypatch):
    """CUBLAS_WORKSPACE_CONFIG unset for the test, and afterwards as it was before it."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "recorded")   # records the original value for the undo
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")


def test_deterministic_training_turns_the_kernels_on_only_while_it_trains(tiny_split, monkeypatch,
                                                                           no_cublas_setting):
    """``deterministic=True`` trains in torch's strict deterministic mode without cuDNN's autotuner, then restores
    the settings it found (CUBLAS_WORKSPACE_CONFIG stays set); on a CPU the numbers are the same as without it."""
    before = _deterministic_state()
    assert before[0] is False
    seen = []
    real_epoch = Trainer.train_epoch

    def spy(self, epoch):
        seen.append(_deterministic_state())
        return real_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "train_epoch", spy)
    model = make_model(tiny_split, dropout=0.3)
    on = Trainer(model, tiny_split, config(epochs=2, deterministic=True)).fit()
    assert seen == [(True, False, False)] * 2
    assert _deterministic_state() == before
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"

    seen.clear()
    plain_model = make_model(tiny_split, dropout=0.3)
    off = Trainer(plain_model, tiny_split, config(epochs=2)).fit()
    assert [s[0] for s in seen] == [False, False]
    assert [h["loss"] for h in on.history] == [h["loss"] for h in off.history]
    assert all(torch.equal(v, plain_model.state_dict()[k]) for k, v in model.state_dict().items())


def test_deterministic_mode_is_restored_after_a_crash_and_keeps_a_users_cublas_setting(tiny_split, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    before = _deterministic_state()

    def crash(self, epoch):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(Trainer, "train_epoch", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(make_model(tiny_split), tiny_split, config(deterministic=True)).fit()
    assert _deterministic_state() == before
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_an_operation_without_a_deterministic_version_is_named(tiny_split, monkeypatch):
    """torch's error for such an operation (``put_`` has none, on the CPU too) becomes a ConfigError that names it
    and says what to do."""
    def no_deterministic_kernel(self, epoch):
        torch.zeros(5).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))

    monkeypatch.setattr(Trainer, "train_epoch", no_deterministic_kernel)
    with pytest.raises(ConfigError, match=r"training uses put_, which has no deterministic version.*"
                                          r"leave out --deterministic"):
        Trainer(make_model(tiny_split), tiny_split, config(deterministic=True)).fit()
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_trains_in_strict_deterministic_mode_on_the_cpu(tiny_split, name):
    """No operation of any attention family lacks a deterministic CPU version (the GPU's: tests/test_cuda.py)."""
    torch.manual_seed(0)
    model = build_model(name, tiny_split.n_items, MAX_LEN, n_users=len(tiny_split.train),
                        d_model=16, n_layers=1, dropout=0.1)
    result = Trainer(model, tiny_split, config(epochs=1, deterministic=True)).fit()
    assert math.isfinite(result.history[0]["loss"])


class ListEvaluator(Evaluator):
    """Real metrics with the selection metric replaced by ``values[i]`` at the i-th validation; remembers the
    weights it saw at each one. (Tests of the selection rule, found missing by mutating the trainer.)"""

    def __init__(self, split, values):
        super().__init__(split, MAX_LEN)
        self.values, self.seen = list(values), []

    def evaluate(self, model, stage="valid", device=None):
        m = super().evaluate(model, stage, device)
        self.seen.append({k: v.clone() for k, v in model.state_dict().items()})
        m["ndcg@10"] = self.values[len(self.seen) - 1]
        return m


def _same_weights(model, weights):
    return all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("values, epochs, patience, best_epoch, epochs_run, reason", [
    ([0.1, 0.3, 0.2, 0.4, 0.35, 0.3, 0.2, 0.1], 8, 2, 4, 6, "patience"),  # a gain resets the count without one
    ([0.1, 0.3, 0.3, 0.3, 0.5, 0.6], 8, 2, 2, 4, "patience"),   # a tie is no gain: the earlier epoch stays best
    ([0.1, 0.5, 0.2, 0.3, 0.1], 5, 10, 2, 5, "epochs"),         # the run ends by its epoch cap, not by patience
])
def test_the_best_validation_selects_the_weights_and_patience_counts_validations_without_a_gain(
        tiny_split, values, epochs, patience, best_epoch, epochs_run, reason):
    model = make_model(tiny_split)
    ev = ListEvaluator(tiny_split, values)
    result = Trainer(model, tiny_split, config(epochs=epochs, patience=patience), ev).fit()
    assert (result.best_epoch, result.epochs_run) == (best_epoch, epochs_run)
    assert result.stop_reason == reason
    assert _same_weights(model, ev.seen[best_epoch - 1])            # restored however the run ended
    assert not _same_weights(model, ev.seen[-1])


def test_a_resumed_run_restores_the_best_epoch_from_before_the_crash(tiny_split, tmp_path, monkeypatch):
    """The checkpoint keeps the best epoch's weights and the training time so far: a run whose best epoch came
    before a crash ends, after resuming, with that epoch's weights and the time of both sessions."""
    ckpt = str(tmp_path / "run.pt")
    values = [0.1, 0.5, 0.2, 0.3, 0.1]
    first = ListEvaluator(tiny_split, values)
    fit_until_a_crash(Trainer(make_model(tiny_split), tiny_split, config(epochs=5, patience=10, checkpoint=ckpt),
                              first), 4, monkeypatch)
    seconds_before = load_checkpoint(ckpt)["train_seconds"]
    assert seconds_before > 0

    model = make_model(tiny_split, seed=99)                        # other weights: the file must replace them
    result = Trainer(model, tiny_split, config(epochs=5, patience=10, checkpoint=ckpt),
                     ListEvaluator(tiny_split, values[3:])).fit()
    assert (result.best_epoch, result.epochs_run) == (2, 5)
    assert _same_weights(model, first.seen[1])
    assert result.train_seconds > seconds_before


def test_rerunning_a_run_stopped_by_patience_trains_no_further_epoch(tiny_split, tmp_path):
    ckpt = str(tmp_path / "run.pt")
    values = [0.5, 0.1, 0.1, 0.9, 0.9]
    done = Trainer(make_model(tiny_split), tiny_split, config(epochs=5, patience=2, checkpoint=ckpt),
                   ListEvaluator(tiny_split, values)).fit()
    assert (done.stop_reason, done.epochs_run) == ("patience", 3)
    model = make_model(tiny_split, seed=99)
    again = Trainer(model, tiny_split, config(epochs=5, patience=2, checkpoint=ckpt),
                    ListEvaluator(tiny_split, values[3:])).fit()
    assert (again.stop_reason, again.epochs_run, again.best_epoch) == ("patience", 3, 1)
    assert load_checkpoint(ckpt)["epoch"] == 3


def test_the_last_epoch_is_validated_when_the_interval_does_not_divide_the_cap(tiny_split):
    result = Trainer(make_model(tiny_split), tiny_split, config(epochs=4, eval_every=3)).fit()
    assert ["valid_ndcg@10" in h for h in result.history] == [False, False, True, True]


def test_the_rate_is_not_decayed_at_the_validation_that_stops_the_run(tiny_split):
    """patience 4, decay every 2 validations without a gain: one halving (at the 2nd), none at the 4th."""
    trainer = Trainer(make_model(tiny_split), tiny_split, config(epochs=10, patience=4, lr_decay=2),
                      ListEvaluator(tiny_split, [0.5, 0.1, 0.1, 0.1, 0.1]))
    result = trainer.fit()
    assert result.epochs_run == 5
    assert trainer.current_lr == pytest.approx(1e-2 / 2)


def test_a_checkpoint_of_another_seed_is_refused(tiny_split, tmp_path):
    ckpt = str(tmp_path / "run.pt")
    Trainer(make_model(tiny_split), tiny_split, config(epochs=1, seed=1, checkpoint=ckpt)).fit()
    with pytest.raises(ConfigError, match=r"seed 1 -> 2"):
        Trainer(make_model(tiny_split), tiny_split, config(epochs=2, seed=2, checkpoint=ckpt)).fit()


def test_random_windows_are_drawn_again_every_epoch(tiny_split):
    model = make_model(tiny_split)
    rows, forward = [], model.forward

    def recording_forward(ids, **kw):
        if model.training:
            rows.extend(map(tuple, ids.tolist()))
        return forward(ids, **kw)

    model.forward = recording_forward
    Trainer(model, tiny_split, config(epochs=2, window_sampling="random", bucketing=False)).fit()
    half = len(rows) // 2                                          # every epoch passes each window once
    assert sorted(rows[:half]) != sorted(rows[half:])              # another window of some long history


@pytest.mark.parametrize("loss", ["bce", "sampled-ce"])
def test_the_sampled_losses_draw_their_negatives_from_the_catalogue_and_bce_outside_each_users_history(
        tiny_split, monkeypatch, loss):
    """Every item 1..n_items can be a negative (the last one too) and padding never; BCE draws k negatives
    per target, none in the history of the batch row's own user."""
    import tutorial_lib.training.trainer as trainer_module

    drawn = []
    name = "bce_loss" if loss == "bce" else "sampled_softmax_loss"
    real = getattr(trainer_module, name)

    def recording(hidden, targets, items, neg):
        drawn.append(neg.clone())
        return real(hidden, targets, items, neg)

    monkeypatch.setattr(trainer_module, name, recording)
    trainer = Trainer(make_model(tiny_split), tiny_split, config(loss=loss, n_negatives=7, bucketing=False))
    seen_users = []
    for batch in iterate_batches(trainer.windows, 32, torch.Generator().manual_seed(0), bucketing=False):
        trainer.compute_loss(batch)
        seen_users.append(batch.users)
    everything = torch.cat([d.reshape(-1) for d in drawn])
    assert int(everything.min()) == 1 and int(everything.max()) == tiny_split.n_items
    if loss == "bce":
        for neg, users in zip(drawn, seen_users):
            assert neg.shape[-1] == 7
            for row, u in zip(neg, users.tolist()):
                assert not set(row.reshape(-1).tolist()) & set(tiny_split.train[u].tolist())


@pytest.mark.parametrize("clip", [None, 1e-3])
def test_gradients_are_clipped_to_the_norm_before_each_step(tiny_split, clip):
    trainer = Trainer(make_model(tiny_split), tiny_split, config(epochs=1, grad_clip=clip))
    norms, step = [], trainer.optimizer.step

    def recording_step(*args, **kw):
        grads = [p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.cat(grads))))
        return step(*args, **kw)

    trainer.optimizer.step = recording_step
    trainer.train_epoch(1)
    assert norms
    if clip is None:
        assert min(norms) > 10 * 1e-3                              # so the clipped run below is really clipped
    else:
        assert max(norms) <= clip * (1 + 1e-4)


def test_an_epochs_loss_is_the_mean_of_its_batches_losses(tiny_split):
    trainer = Trainer(make_model(tiny_split), tiny_split, config(epochs=1, batch_size=16))
    losses, step = [], trainer.train_step

    def recording_step(batch):
        losses.append(step(batch))
        return losses[-1]

    trainer.train_step = recording_step
    mean = trainer.train_epoch(1)
    assert len(losses) == math.ceil(len(trainer.windows) / 16) > 1
    assert mean == pytest.approx(sum(losses) / len(losses), rel=1e-12)
