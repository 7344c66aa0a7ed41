"""The trainer: Adam, all-position autoregressive training, early stopping on validation NDCG@10,
best-weight restore, checkpoint/resume, progress bars, optional mixed precision."""
from __future__ import annotations

import math
import numbers
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from ..data.batching import (WINDOW_SAMPLINGS, Batch, PrefixSamples, TrainingWindows, iterate_batches,
                             iterate_cloze_batches, iterate_prefix_batches)
from ..data.split import LeaveOneOutSplit
from ..errors import ConfigError, NotEnoughMemoryError
from ..evaluation.evaluator import Evaluator
from ..models.backbone import user_inputs
from ..utils.device import hardware_description, resolve_device
from ..utils.seeding import deterministic_algorithms, device_rng_state, set_device_rng_state
from .checkpoint import load_checkpoint, save_checkpoint
from .losses import LOSSES, bce_loss, ce_chunk_rows, full_ce_loss, sampled_softmax_loss
from .memory import SAVED_TENSORS_PER_BLOCK, available_memory, explain_out_of_memory, training_step_floor
from .negatives import NegativeSampler
from .optimizer import make_adam

PRECISIONS = ("fp32", "bf16", "fp16")
WEIGHTINGS = ("target", "batch")
LR_SCHEDULES = ("constant", "cosine")
QUIET_ENV = "TUTORIAL_LIB_QUIET"
#: why negatives and the full cross-entropy do not go together (raised by TrainConfig and the benchmark's plan)
NEGATIVES_WITH_FULL_CE = ("n_negatives (--negatives) is for the sampled losses 'bce' and 'sampled-ce'; loss 'ce' "
                          "scores every item and samples nothing: leave the negatives out or choose a sampled loss "
                          "(--loss bce or --loss sampled-ce)")


@dataclass
class TrainConfig:
    """Settings of one training run.

    Attributes:
        epochs: maximum number of epochs (one window per user per epoch).
        batch_size, lr, betas, weight_decay: Adam settings (SASRec: 128, 1e-3, (0.9, 0.98), 0).
        loss: ``"ce"`` (full softmax), ``"bce"`` (sampled negatives) or ``"sampled-ce"``.
        n_negatives: negatives per position for ``bce`` (default 1) or per batch for ``sampled-ce``
            (default 256).
        eval_every: validate every this many epochs.
        patience: stop after this many validations without improvement of ``select_metric``.
        lr_decay: multiply the learning rate by ``lr_decay_factor`` after every ``lr_decay`` validations in a
            row without improvement (``None``: a constant rate). The RKSA paper trains every method "with
            learning rate decay and early stopping"; docs/methods.md A12 reads it as halving after 3.
        lr_decay_factor: the factor of each decay (0 < factor < 1).
        lr_schedule: ``"constant"`` (default; with ``lr_decay``, cut on plateaus) or ``"cosine"``: epoch ``e`` of
            ``epochs`` trains at ``lr * (1 + cos(pi * (e - 1) / epochs)) / 2``, from ``lr`` at the first epoch
            down towards 0 at the last, a function of the epoch alone (so a resumed run continues it exactly).
            ``epochs`` is then part of the schedule: a run resumes only with the ``epochs`` it started with.
        select_metric: validation metric for early stopping and model selection.
        seed: seeds batching and negative sampling (seed model initialisation before building it).
        device: ``"auto"`` (CUDA, then MPS, then CPU) or an explicit device.
        deterministic: train with PyTorch's deterministic kernels
            (:func:`~tutorial_lib.utils.seeding.deterministic_algorithms`), so that two GPU runs with one seed
            give the same numbers; slower on a GPU. A CPU run repeats exactly without it and gives the same numbers
            with it.
        precision: ``"fp32"``, ``"bf16"`` (autocast, CPU or GPU) or ``"fp16"`` (CUDA AMP).
        bucketing: batch users of similar length and trim padding (faster: 1.4x on Beauty, but on ML-1M
            the homogeneous batches learned measurably slower per epoch than random ones, so it is off by
            default; see docs/speed.md).
        weighting: ``"target"`` (default): every target of the epoch weighs the same, whatever the
            batch it falls in (a batch's mean loss is scaled by its number of targets over the
            epoch's average); ``"batch"``: every batch's mean loss weighs the same, so with bucketing
            the targets of short-history batches count several times more than those of long ones.
        window_sampling: ``"recent"`` (default, as SASRec): each user's window is its most recent
            ``max_len + 1`` training items, every epoch; ``"random"``: a user with a longer history gets a
            window drawn uniformly from all of its windows, anew every epoch (so its older items are
            trained on too; see :meth:`~tutorial_lib.data.batching.TrainingWindows.resampled`). Evaluation
            always reads the most recent items.
        grad_clip: clip the gradient norm to this value (``None``: no clipping).
        ce_chunk: rows per chunk of the full cross-entropy (:class:`~tutorial_lib.training.losses.ChunkedSoftmaxCE`);
            ``None`` computes it with ``F.cross_entropy`` on the whole logit matrix (same value, slower on a
            CPU); ``"auto"`` (default) takes 128 rows on a CPU and chunks of up to 2**26 logits on a GPU
            (:func:`~tutorial_lib.training.losses.ce_chunk_rows`).
        mask_prob: share of items replaced by ``[MASK]`` per sequence for cloze-trained
            (bidirectional) models; ignored by autoregressive ones.
        checkpoint: file to save the training state to after every epoch; an existing file is resumed.
        time_budget: stop (as if early-stopped) after this many seconds of training (counted over
            resumed sessions too); the run counts as finished. The epoch that reaches it is validated even
            off the ``eval_every`` schedule, so no trained epoch is thrown away unseen.
        deadline: wall-clock time (``time.time()``) after which training pauses at the end of the epoch;
            the checkpoint holds everything and the run is *not* finished (``stop_reason="deadline"``):
            the benchmark runner uses it to stop within its time budget and resume later.
        progress: show tqdm bars (``None``: yes unless ``TUTORIAL_LIB_QUIET=1``).
        verbose: print one line per validation (``None``: yes unless ``TUTORIAL_LIB_QUIET=1``).
    """

    epochs: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    loss: str = "ce"
    n_negatives: int | None = None
    eval_every: int = 1
    patience: int = 10
    lr_decay: int | None = None
    lr_decay_factor: float = 0.5
    lr_schedule: str = "constant"
    select_metric: str = "ndcg@10"
    seed: int = 42
    device: str = "auto"
    deterministic: bool = False
    precision: str = "fp32"
    bucketing: bool = False
    weighting: str = "target"
    window_sampling: str = "recent"
    grad_clip: float | None = None
    mask_prob: float = 0.2
    ce_chunk: int | str | None = "auto"
    checkpoint: str | None = None
    time_budget: float | None = None
    deadline: float | None = None
    progress: bool | None = None
    verbose: bool | None = None

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"unknown loss {self.loss!r}; valid losses are: {', '.join(LOSSES)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not isinstance(self.seed, numbers.Integral) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**64:
            raise ConfigError(f"seed must be an integer >= 0 (NumPy's generators take no negative seed) and below "
                              f"2**64 (torch's generator holds 64 bits), got {self.seed!r}")
        for name in ("epochs", "batch_size", "eval_every", "patience"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr_decay is not None and self.lr_decay < 1:
            raise ConfigError(f"lr_decay (validations without improvement before the learning rate is cut) must "
                              f"be >= 1 or None for a constant rate, got {self.lr_decay}")
        if not 0 < self.lr_decay_factor < 1:
            raise ConfigError(f"lr_decay_factor must be between 0 and 1 (0.5 halves the rate), "
                              f"got {self.lr_decay_factor}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.lr_schedule != "constant" and self.lr_decay is not None:
            raise ConfigError(f"lr_decay (cut the rate on a plateau) and lr_schedule={self.lr_schedule!r} (a rate "
                              f"fixed by the epoch) both set the learning rate: choose one (--lr-decay or "
                              f"--lr-schedule)")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a finite number > 0, got {self.lr}")
        if self.weighting not in WEIGHTINGS:
            raise ConfigError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        if self.window_sampling not in WINDOW_SAMPLINGS:
            raise ConfigError(f"window_sampling must be one of {WINDOW_SAMPLINGS}, got {self.window_sampling!r}")
        if self.time_budget is not None and not self.time_budget >= 0:    # NaN too: it would never stop the run
            raise ConfigError(f"time_budget (seconds of training) must be >= 0, got {self.time_budget}")
        if self.n_negatives is not None and self.n_negatives < 1:
            raise ConfigError(f"n_negatives must be >= 1, got {self.n_negatives}")
        if not 0 < self.mask_prob < 1:
            raise ConfigError(f"mask_prob (the share of items a cloze-trained model learns to recover) must be "
                              f"between 0 and 1, got {self.mask_prob}")
        if self.n_negatives is not None and self.loss == "ce":
            raise ConfigError(NEGATIVES_WITH_FULL_CE)
        if isinstance(self.ce_chunk, numbers.Integral) and not isinstance(self.ce_chunk, bool):
            self.ce_chunk = int(self.ce_chunk)               # numpy integers too; a plain int in checkpoints
        rows_ok = type(self.ce_chunk) is int and self.ce_chunk >= 1
        if not (self.ce_chunk is None or self.ce_chunk == "auto" or rows_ok):
            raise ConfigError(f"ce_chunk must be 'auto', None (no chunks) or rows per chunk >= 1, "
                              f"got {self.ce_chunk!r}")
        self.betas = tuple(self.betas)

    @property
    def negatives(self) -> int:
        """Negatives per target: ``n_negatives``, or the loss's default (256 for sampled softmax, 1 for BCE)."""
        if self.n_negatives is not None:
            return self.n_negatives
        return 256 if self.loss == "sampled-ce" else 1

    @property
    def show_progress(self) -> bool:
        """Whether to draw progress bars: ``progress``, or unless ``TUTORIAL_LIB_QUIET`` is set."""
        return self.progress if self.progress is not None else not quiet_env()

    @property
    def show_log(self) -> bool:
        """Whether to print a line per evaluation: ``verbose``, or unless ``TUTORIAL_LIB_QUIET`` is set."""
        return self.verbose if self.verbose is not None else not quiet_env()


def scheduled_lr(config: TrainConfig, epoch: int) -> float | None:
    """The learning rate epoch ``epoch`` (1-based) trains at under ``config.lr_schedule``; ``None`` for the
    constant schedule, whose rate only ``lr_decay`` changes."""
    if config.lr_schedule == "constant":
        return None
    return config.lr * (1 + math.cos(math.pi * (epoch - 1) / config.epochs)) / 2


def quiet_env() -> bool:
    """``True`` when ``TUTORIAL_LIB_QUIET`` asks for silence (tests, CI)."""
    return os.environ.get(QUIET_ENV, "0") not in ("", "0", "false", "False")


@dataclass
class TrainResult:
    """Outcome of :meth:`Trainer.fit`; ``history`` has one dict per epoch (loss, seconds, validation metrics)."""

    best_epoch: int
    best_valid: dict[str, float]
    epochs_run: int
    train_seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    stopped_early: bool = False
    stop_reason: str = "epochs"  # "epochs", "patience", "time-budget" or "deadline" (paused, not finished)
    #: where the epochs ran: ``[hardware description, first epoch, last epoch]`` per stretch on one machine (a run
    #: resumed elsewhere has several; epochs of a checkpoint written before 2026-11-30 are "not recorded")
    machines: list[list] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """Whether training ended (epochs, patience or time budget) rather than pausing at a deadline."""
        return self.stop_reason != "deadline"

    @property
    def seconds_per_epoch(self) -> float:
        """Training seconds per epoch run (evaluation not counted)."""
        return self.train_seconds / max(self.epochs_run, 1)


def training_device(config: TrainConfig) -> torch.device:
    """The device ``config`` trains on (:func:`~tutorial_lib.utils.device.resolve_device`), or
    :class:`ConfigError` when it is not available or its precision cannot run there."""
    device = resolve_device(config.device)
    if config.precision == "fp16" and device.type != "cuda":
        raise ConfigError(f"precision='fp16' is CUDA's mixed precision (autocast with a loss scaler), but training "
                          f"runs on {device.type}: there fp16 has no loss scaler, so small gradients "
                          f"underflow to zero, and on a CPU an epoch took about 10x as long as at fp32. Use "
                          f"precision='bf16' (autocast on CPU or GPU) or 'fp32' (on the command line, --precision bf16 or "
                          f"--precision fp32)")
    return device


def recipe_changes(old: dict, new: dict) -> list[str]:
    """``["dropout 0.2 -> 0.3", ...]``: how two models' :func:`~tutorial_lib.models.build_model` recipes differ, the
    model itself first (another model's options differ in many ways; its name says why)."""
    flat = [{**{k: v for k, v in r.items() if k != "options"}, **r.get("options", {})} for r in (old, new)]
    keys = sorted(flat[0].keys() | flat[1].keys(), key=lambda k: (k != "model", k))
    return [f"{k} {flat[0].get(k)!r} -> {flat[1].get(k)!r}" for k in keys if flat[0].get(k) != flat[1].get(k)]


class Trainer:
    """Train a backbone model on a leave-one-out split, selecting the epoch on validation.

    Args:
        model: a model with ``forward(item_ids) -> (B, L, d)`` and ``output_embedding`` (the backbone).
        split: the leave-one-out split (only ``split.train`` is used for training).
        config: :class:`TrainConfig`.
        evaluator: validation evaluator (default: full ranking over all users).
    """

    def __init__(self, model: nn.Module, split: LeaveOneOutSplit, config: TrainConfig | None = None,
                 evaluator: Evaluator | None = None):
        self.config = config or TrainConfig()
        self.device = training_device(self.config)
        self.model = model.to(self.device)
        self.split = split
        if hasattr(model, "prepare"):
            model.prepare(split)  # statistics of the training split some families need (RKSA)
        self.evaluator = evaluator or Evaluator(split, model.max_len)
        self.objective = getattr(model, "objective", "next")
        #: items in the longest input a user can have: training history plus the validation item (test input)
        self.longest_input = max((len(h) for h in split.train), default=0) + 1
        self._check_memory_floor()
        self.windows = TrainingWindows.from_train(split.train, model.max_len)
        self.prefixes = PrefixSamples.from_train(split.train, model.max_len) if self.objective == "last" else None
        if self.prefixes is not None and self.config.window_sampling != "recent":
            raise ConfigError(f"window_sampling={self.config.window_sampling!r} needs a model trained on windows; "
                              f"this one is trained on every prefix (objective 'last'), which already covers "
                              f"the whole history: leave window_sampling at 'recent'")
        if self.config.bucketing and getattr(model, "full_width", False):
            warnings.warn("bucketing trims batches to their longest window, but this model pads every input back "
                          "to max_len (the released LightSANs attention, compat=True): it costs nothing and saves "
                          "nothing here; leave bucketing off", stacklevel=2)
        longest = self.longest_input
        if model.max_len >= max(2 * longest, 16):     # more padding than items, for every user
            warnings.warn(f"max_len={model.max_len}, but the longest input here has {longest} items: every "
                          f"training window is stored {model.max_len} positions wide, and every training batch "
                          f"without bucketing is padded to that width. max_len={longest} sees every item at a "
                          f"fraction of the cost", stacklevel=2)
        if self.config.loss != "ce" and self.config.negatives >= split.n_items:
            warnings.warn(f"{self.config.negatives} negatives on a catalogue of {split.n_items} items: drawing at "
                          f"least as many negatives as there are items costs more than full cross-entropy "
                          f"(loss='ce'), which scores every item once and exactly; use it, or fewer negatives",
                          stacklevel=2)
        self.targets_per_batch = self._mean_targets_per_batch()
        self.sampler = NegativeSampler(split.train, split.n_items) if self.config.loss == "bce" else None
        self.ce_chunk = ce_chunk_rows(self.config.ce_chunk, self.device, split.n_items)
        self.optimizer = make_adam(model.parameters(), lr=self.config.lr, betas=self.config.betas,
                                   weight_decay=self.config.weight_decay)
        self.generator = torch.Generator().manual_seed(self.config.seed)
        use_scaler = self.config.precision == "fp16" and self.device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if use_scaler else None

    # ------------------------------------------------------------------ one step
    def autocast(self) -> torch.autocast:
        """The autocast context of ``config.precision`` (disabled at fp32)."""
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.config.precision)
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        """Loss of one batch (already on the device), plus the model's auxiliary loss if it has one."""
        cfg = self.config
        with self.autocast():
            hidden = self.model(batch.inputs, **user_inputs(self.model, batch.users))
        items = self.model.output_embedding
        if cfg.loss == "ce":
            loss = full_ce_loss(hidden, batch.targets, items, chunk=self.ce_chunk)
        elif cfg.loss == "bce":
            shape = (*batch.targets.shape, cfg.negatives)
            neg = self.sampler.sample(batch.users.cpu(), shape, self.generator).to(self.device)
            loss = bce_loss(hidden, batch.targets, items, neg)
        else:
            neg = torch.randint(1, self.split.n_items + 1, (cfg.negatives,), generator=self.generator)
            loss = sampled_softmax_loss(hidden, batch.targets, items, neg.to(self.device))
        if cfg.weighting == "target":
            loss = loss * (batch.targets.ne(0).sum() / self.targets_per_batch)
        aux = self.model.auxiliary_loss() if hasattr(self.model, "auxiliary_loss") else None
        return loss if aux is None else loss + aux.float()

    def _mean_targets_per_batch(self) -> float:
        """Average number of targets per batch over an epoch (the scale of ``weighting="target"``)."""
        if self.prefixes is not None:
            return float(min(self.config.batch_size, len(self.prefixes)))
        n = len(self.windows)
        if self.objective == "cloze":  # expected masks per window (at least one)
            items = torch.clamp(self.windows.lengths + 1, max=self.windows.max_len).double()
            targets = torch.clamp(items * self.config.mask_prob, min=1.0).sum().item()
        else:
            targets = float(self.windows.n_targets())
        return targets / math.ceil(n / self.config.batch_size)

    def train_step(self, batch: Batch) -> float:
        """One optimiser step on ``batch`` (moved to the device); returns its loss. A non-finite loss raises
        :class:`FloatingPointError` before any weight changes."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.compute_loss(batch.to(self.device))
        if not torch.isfinite(loss):
            raise FloatingPointError(
                "training loss became non-finite; lower the learning rate or use precision='fp32'")
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        if self.config.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return loss.item()

    def train_epoch(self, epoch: int) -> float:
        """One pass over every training sample (window, cloze window or prefix); returns the mean loss per batch."""
        self.model.train()
        cfg = self.config
        windows = self.windows.resampled(self.generator) if cfg.window_sampling == "random" else self.windows
        if self.objective == "cloze":
            batches = iterate_cloze_batches(windows, cfg.batch_size, self.generator, cfg.mask_prob,
                                            self.model.mask_id, cfg.bucketing)
        elif self.objective == "last":
            batches = iterate_prefix_batches(self.prefixes, cfg.batch_size, self.generator)
        else:
            batches = iterate_batches(windows, cfg.batch_size, self.generator, cfg.bucketing)
        n_samples = len(self.prefixes) if self.prefixes is not None else len(self.windows)
        n_batches = math.ceil(n_samples / cfg.batch_size)
        bar = tqdm(batches, total=n_batches, desc=f"epoch {epoch}", leave=False,
                   disable=not self.config.show_progress)
        total = 0.0
        for i, batch in enumerate(bar, 1):
            total += self.train_step(batch)
            if i % 10 == 0:
                bar.set_postfix(loss=f"{total / i:.4f}")
        return total / max(n_batches, 1)

    # ------------------------------------------------------------------- the loop
    @property
    def current_lr(self) -> float:
        """The learning rate of the next step (the optimizer's, so it survives a resume)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        """Give every parameter group the learning rate ``lr``."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def decay_lr(self) -> None:
        """Multiply the learning rate by ``lr_decay_factor`` (the optimizer has one parameter group)."""
        self.set_lr(self.current_lr * self.config.lr_decay_factor)
        if self.config.show_log:
            tqdm.write(f"learning rate cut to {self.current_lr:.3g}")

    def _state(self, epoch: int, best: dict, history: list, train_seconds: float, machines: list) -> dict:
        return {
            "epoch": epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(), "torch_rng": torch.get_rng_state(),
            "device_rng": device_rng_state(self.device),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "best": best, "history": history, "train_seconds": train_seconds,
            "config": self._config_values(), "recipe": getattr(self.model, "recipe", None), "machines": machines,
        }

    def _config_values(self) -> dict:
        """The settings as plain values, as checkpoints store them (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.config).items()}

    def _resume(self) -> tuple[int, dict, list, float, list]:
        ckpt = Path(self.config.checkpoint) if self.config.checkpoint else None
        fresh = {"metric": -math.inf, "epoch": 0, "valid": {}, "state": None, "bad": 0}
        if ckpt is None or not ckpt.exists():
            return 1, fresh, [], 0.0, []
        state = load_checkpoint(ckpt)
        self._check_resumable(ckpt, state)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        set_device_rng_state(self.device, state.get("device_rng"))   # absent from checkpoints before 2026-11-26
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])   # the fp16 loss scale, or it restarts at 2**16
        if self.config.show_log:
            tqdm.write(f"resuming from {ckpt} after epoch {state['epoch']}")
        machines = state.get("machines") or [["not recorded", 1, state["epoch"]]]   # older checkpoints
        return state["epoch"] + 1, state["best"], state["history"], state["train_seconds"], machines

    #: settings a resumed run may change: how long it trains and how it reports, not what one step does
    #: (``epochs`` only under a constant rate: a cosine schedule's rate depends on it)
    RESUMABLE_CHANGES = ("epochs", "patience", "eval_every", "time_budget", "deadline", "checkpoint", "device",
                         "deterministic", "progress", "verbose", "ce_chunk")

    def _check_resumable(self, path: Path, state: dict) -> None:
        """Refuse a checkpoint written with other training settings or for another model: resuming it would
        continue a different run (an Adam state carries its own learning rate) under this run's name."""
        saved = state.get("config", {})
        now = self._config_values()
        free = set(self.RESUMABLE_CHANGES) - ({"epochs"} if now["lr_schedule"] != "constant" else set())
        changed = {k: (saved[k], now[k]) for k in saved.keys() & now.keys()
                   if k not in free and saved[k] != now[k]}
        if changed:
            listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in sorted(changed.items()))
            raise ConfigError(f"checkpoint {path} was written with other training settings ({listed}); resume "
                              f"with the same settings, or start afresh (another checkpoint file, or no --resume)")
        saved_recipe, recipe = state.get("recipe"), getattr(self.model, "recipe", None)
        if saved_recipe is not None and recipe is not None and saved_recipe != recipe:   # both built by build_model
            diffs = recipe_changes(saved_recipe, recipe)
            raise ConfigError(f"checkpoint {path} holds another model ({', '.join(diffs)}); resume with the model "
                              f"and options it was trained with, or start afresh (another checkpoint file, or no "
                              f"--resume)")
        mine = self.model.state_dict()
        theirs = state["model"]
        if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape for k in mine):
            raise ConfigError(f"checkpoint {path} holds another model (its parameters differ in name or shape from "
                              f"this {type(self.model).__name__}'s); resume with the model options it was "
                              f"trained with, or start afresh")

    def fit(self) -> TrainResult:
        """Train until ``epochs``, early stopping or the time budget; restore the best weights.

        Running out of memory raises :class:`~tutorial_lib.errors.NotEnoughMemoryError`, which names the settings
        that size a batch; the checkpoint keeps every epoch finished before."""
        with explain_out_of_memory(f"while training on {self.device.type}", self._memory_advice()), \
                deterministic_algorithms(self.config.deterministic):
            return self._fit()

    def _check_memory_floor(self) -> None:
        """Refuse, before anything large is allocated, a batch whose activations alone cannot fit: a kernel that
        overcommits would otherwise kill the process mid-epoch with no message (docs in ``training/memory.py``)."""
        model, cfg = self.model, self.config
        d_model, blocks = getattr(model, "d_model", None), getattr(model, "blocks", None)
        free = available_memory(self.device)
        if not isinstance(d_model, int) or blocks is None or free is None:
            return
        padded = getattr(model, "full_width", False) or (not cfg.bucketing and self.objective != "last")
        width = model.max_len if padded else max(1, min(model.max_len, self.longest_input - 2))
        floor = training_step_floor(cfg.batch_size, width, d_model, len(blocks))
        if floor > free:
            gib = 2 ** 30
            raise NotEnoughMemoryError(
                f"not enough memory to train on {self.device.type}: a training batch of {cfg.batch_size} windows "
                f"{width} positions wide keeps at least {floor / gib:.1f} GiB for the backward pass "
                f"({SAVED_TENSORS_PER_BLOCK} tensors of batch_size x width x d_model = {cfg.batch_size} x {width} "
                f"x {d_model} float32 values in each of {len(blocks)} blocks), but {free / gib:.1f} GiB is "
                f"available. {self._memory_advice()}")

    def _memory_advice(self) -> str:
        cfg = self.config
        negatives = {"bce": f" BCE gathers {cfg.negatives} negative item vectors at every target position "
                            f"(batch_size x max_len x negatives x d values): lower --negatives too.",
                     "sampled-ce": f" Sampled softmax scores {cfg.negatives} negatives at every target position "
                                   f"(batch_size x max_len x negatives scores): lower --negatives too."}
        return (f"A training batch holds {cfg.batch_size} windows of up to {self.model.max_len} items, and the "
                f"attention of each block keeps batch_size x heads x max_len^2 scores; validation ranks all "
                f"{self.split.n_items} items for each user of a batch. Lower batch_size or max_len (the command "
                f"line's --batch-size, --max-len): the longest input here has {self.longest_input} items"
                + ("" if cfg.bucketing else ", and bucketing trims each batch to its longest window") + "."
                + negatives.get(cfg.loss, ""))

    def _fit(self) -> TrainResult:
        cfg = self.config
        start, best, history, train_seconds, machines = self._resume()
        here = hardware_description(self.device)
        reason = "patience" if best["bad"] >= cfg.patience else "epochs"
        if reason == "epochs" and history and cfg.time_budget is not None and train_seconds >= cfg.time_budget:
            reason = "time-budget"   # resumed after the budget was spent: finished, train no further epoch
        stopped_early = reason != "epochs"
        for epoch in range(start, cfg.epochs + 1):
            if stopped_early:
                break
            lr = scheduled_lr(cfg, epoch)
            if lr is not None:
                self.set_lr(lr)
            t0 = time.perf_counter()
            loss = self.train_epoch(epoch)
            seconds = time.perf_counter() - t0
            train_seconds += seconds
            row = {"epoch": epoch, "loss": loss, "seconds": seconds, "lr": self.current_lr}
            out_of_time = cfg.time_budget is not None and train_seconds >= cfg.time_budget
            # the last epoch before the time budget ends the run is validated too, so its training counts
            if epoch % cfg.eval_every == 0 or epoch == cfg.epochs or out_of_time:
                valid = self.evaluator.evaluate(self.model, "valid")
                row.update({f"valid_{k}": v for k, v in valid.items() if k != "users"})
                if valid[cfg.select_metric] > best["metric"]:
                    best = {"metric": valid[cfg.select_metric], "epoch": epoch, "valid": valid, "bad": 0,
                            "state": {k: v.detach().clone().cpu() for k, v in self.model.state_dict().items()}}
                else:
                    best["bad"] += 1
                    if cfg.lr_decay is not None and best["bad"] % cfg.lr_decay == 0 and best["bad"] < cfg.patience:
                        self.decay_lr()
                if cfg.show_log:
                    tqdm.write(f"epoch {epoch:3d}  loss {loss:.4f}  {seconds:5.1f}s  "
                               f"valid {cfg.select_metric} {valid[cfg.select_metric]:.4f}  "
                               f"(best {best['metric']:.4f} @ {best['epoch']})")
                if best["bad"] >= cfg.patience:
                    stopped_early, reason = True, "patience"
            history.append(row)
            if machines and machines[-1][0] == here:
                machines[-1][2] = epoch
            else:
                machines.append([here, epoch, epoch])
            if not stopped_early and out_of_time:
                stopped_early, reason = True, "time-budget"
            if not stopped_early and epoch < cfg.epochs and cfg.deadline is not None and time.time() >= cfg.deadline:
                stopped_early, reason = True, "deadline"
            if cfg.checkpoint:
                save_checkpoint(cfg.checkpoint, self._state(epoch, best, history, train_seconds, machines))
            if stopped_early:
                break
        if best["state"] is not None:
            self.model.load_state_dict(best["state"])
        epochs_run = len(history)
        return TrainResult(best_epoch=best["epoch"], best_valid=best["valid"], epochs_run=epochs_run,
                           train_seconds=train_seconds, history=history, stopped_early=stopped_early,
                           stop_reason=reason, machines=machines)
