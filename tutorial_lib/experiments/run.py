"""One experiment end to end: data -> split -> model -> training -> test metrics -> a results row."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..data.dataset import SequenceDataset
from ..data.split import LeaveOneOutSplit, leave_one_out
from ..data.synthetic import make_synthetic
from ..errors import ConfigError, UnknownNameError
from ..evaluation import EvalProtocol, Evaluator
from ..models import build_model
from ..training import TrainConfig, Trainer, TrainResult
from ..training.trainer import training_device
from ..utils.device import describe_machines, hardware_description
from ..utils.seeding import forked_torch_rng, seed_everything
from ..models.registry import get_model_entry
from .artifacts import load_trained, save_trained, trained_model_path
from .presets import dataset_defaults, method_preset
from .results import now_iso, process_commit

SYNTHETIC = "synthetic"
EVAL_SEED = 0


@dataclass
class ExperimentSpec:
    """Everything that defines a run. ``None`` means "the dataset's default" (see presets)."""

    model: str = "sasrec"
    dataset: str = SYNTHETIC
    loss: str = "ce"
    protocol: str = "full"
    seed: int = 42
    epochs: int = 200
    max_len: int | None = None
    batch_size: int = 128
    lr: float = 1e-3
    patience: int = 10
    lr_decay: int | None = None
    lr_schedule: str = "constant"
    eval_every: int = 1
    eval_users: int | None = None
    n_negatives: int | None = None
    device: str = "auto"
    deterministic: bool = False   # like the device, not part of the run id (the row's command records it)
    precision: str = "fp32"
    bucketing: bool = False
    weighting: str = "target"
    window_sampling: str = "recent"
    mask_prob: float | None = None
    time_budget: float | None = None
    deadline: float | None = None
    also_protocols: tuple[str, ...] = ()
    model_options: dict = field(default_factory=dict)
    checkpoint: str | None = None
    data_dir: str | None = None
    download: bool = False
    progress: bool | None = None
    verbose: bool | None = None

    def resolved_max_len(self) -> int:
        """``max_len`` given, else the method's preset (RKSA: 50), else the dataset's default."""
        if self.max_len is not None:
            return int(self.max_len)
        _, run = method_preset(self.model, self.dataset)
        return int(run.get("max_len", dataset_defaults(self.dataset)["max_len"]))

    def resolved_model_options(self) -> dict:
        """The dataset's dropout, overridden by the method's preset, overridden by ``model_options``.

        An option given with the model's own default (``d_model=64``), where no preset sets it, is left out: the
        run is the same as without it, so it has the same options column and ``run_id``."""
        preset, _ = method_preset(self.model, self.dataset, self.resolved_max_len())
        base = {"dropout": dataset_defaults(self.dataset)["dropout"], **preset}
        defaults = get_model_entry(self.model).options()
        given = {k: v for k, v in self.model_options.items()
                 if k in base or k not in defaults or not _same_value(v, defaults[k])}
        opts = {**base, **given}
        return {k: v for k, v in opts.items() if k in defaults or k in given}

    def tag(self) -> str:
        """A file-name-safe identifier of the run (model, dataset, loss, protocol, seed)."""
        raw = f"{self.model}_{self.dataset}_{self.loss}_{self.protocol}_s{self.seed}"
        return re.sub(r"[^A-Za-z0-9_.@-]+", "-", raw)

    @property
    def cloze(self) -> bool:
        """Whether the model trains by recovering masked items (BERT4Rec and its Locker variants)."""
        return self.model.startswith("bert4rec")

    def resolved_mask_prob(self) -> float:
        """Share of masked items for cloze-trained models: given, else the preset (0.2 ML, 0.6 sparse)."""
        if self.mask_prob is not None:
            return float(self.mask_prob)
        return float(method_preset(self.model, self.dataset)[1].get("mask_prob", 0.2))

    def training_options(self) -> dict:
        """The settings of the training run that can change its result (besides model, data, loss, seed)."""
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr, "patience": self.patience,
                "eval_every": self.eval_every, "eval_users": self.eval_users,
                "n_negatives": self.n_negatives if self.loss != "ce" else None,   # full CE samples nothing
                "precision": self.precision, "bucketing": self.bucketing, "weighting": self.weighting,
                **({"mask_prob": self.resolved_mask_prob()} if self.cloze else {}),
                **({"time_budget": self.time_budget} if self.time_budget is not None else {}),
                **({"lr_decay": self.lr_decay} if self.lr_decay is not None else {}),
                **({"lr_schedule": self.lr_schedule} if self.lr_schedule != "constant" else {}),
                **({"windows": self.window_sampling} if self.window_sampling != "recent" else {})}

    def train_config(self) -> TrainConfig:
        """The trainer's settings for this run (validated: impossible values raise :class:`ConfigError`)."""
        return TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, loss=self.loss,
                           n_negatives=self.n_negatives, eval_every=self.eval_every, patience=self.patience,
                           lr_decay=self.lr_decay, lr_schedule=self.lr_schedule,
                           seed=self.seed, device=self.device, deterministic=self.deterministic,
                           precision=self.precision, bucketing=self.bucketing,
                           weighting=self.weighting, window_sampling=self.window_sampling,
                           mask_prob=self.resolved_mask_prob(),
                           checkpoint=self.checkpoint, time_budget=self.time_budget, deadline=self.deadline,
                           progress=self.progress, verbose=self.verbose)

    def check(self, data: bool = True) -> None:
        """Everything about the run that can be checked before its data is read: the training settings, the
        device and its precision, the evaluation protocols, the model's options, and (``data``, unless
        ``download``) whether the dataset's files are there; each problem raises with what to do about it."""
        training_device(self.train_config())
        for protocol in dict.fromkeys((self.protocol, *self.also_protocols)):
            EvalProtocol(protocol, max_users=self.eval_users, seed=EVAL_SEED)
        self.check_model()
        if data and self.dataset != SYNTHETIC and not self.download:
            from ..data.download import ensure_dataset

            ensure_dataset(self.dataset, self.data_dir, download=False)   # a missing file raises with the remedies

    def check_model(self) -> None:
        """Build the model once on a 2-item catalogue, so that impossible model options (a rank above
        ``max_len``, heads that do not divide ``d_model``, ...) raise :class:`ConfigError` before any data is
        loaded or training starts; the caller's torch random state is left as it was."""
        with forked_torch_rng():
            build_model(self.model, n_items=2, max_len=self.resolved_max_len(), n_users=1,
                        **self.resolved_model_options())

    def run_id(self) -> str:
        """12 hex digits identifying everything that determines the result (not the device or file paths):
        a run with the same id and a row in ``results/runs.csv`` is finished and never repeated."""
        key = {"model": self.model, "dataset": self.dataset, "loss": self.loss, "protocol": self.protocol,
               "seed": self.seed, "max_len": self.resolved_max_len(), "model_options": self.resolved_model_options(),
               "training": self.training_options()}
        return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _same_value(given: object, default: object) -> bool:
    """``64 == 64``, ``0.2 == 0.2``, ``False == False``; but not ``1 == True`` or ``"64" == 64``."""
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (given, default))
    return (type(given) is type(default) or numbers) and given == default


def dataset_choices() -> list[str]:
    """Every name a run accepts as its dataset: the registry's and the embedded ``synthetic`` data."""
    from ..data.registry import dataset_names

    return [*dataset_names(), SYNTHETIC]


def dataset_name(name: str) -> str:
    """``name`` as the registry spells it (lower case), or :class:`UnknownNameError` listing
    :func:`dataset_choices`."""
    key, valid = name.strip().lower(), dataset_choices()
    if key not in valid:
        from ..data.registry import dataset_titles

        raise UnknownNameError("dataset", name, valid, dataset_titles())   # titles: 'movielens' finds ml-1m
    return key


def load_data(spec: ExperimentSpec) -> SequenceDataset:
    """The run's dataset: the generated one for ``"synthetic"``, else loaded from ``spec.data_dir`` (downloaded
    first when ``spec.download`` allows it)."""
    if dataset_name(spec.dataset) == SYNTHETIC:
        return make_synthetic(seed=0)
    from ..data.loading import load_dataset
    return load_dataset(spec.dataset, root=spec.data_dir, download=spec.download)


def load_kept_models(paths: list[str | Path]
                     ) -> tuple[list[tuple[torch.nn.Module, dict]], SequenceDataset, LeaveOneOutSplit]:
    """Models kept by finished runs (``runs/models/*.pt``, :func:`~tutorial_lib.experiments.artifacts.load_trained`:
    ``(model, meta)`` pairs in eval mode), the dataset they were trained on and its leave-one-out split; a model
    that needs statistics of the training split (RKSA's co-occurrence counts) is prepared on it. The models must
    come from runs on one dataset."""
    loaded = [load_trained(path) for path in paths]
    datasets = sorted({meta["dataset"] for _, meta in loaded})
    if len(datasets) != 1:
        raise ConfigError(f"the kept models must come from runs on one dataset, got {datasets or 'no model'}")
    data = load_data(ExperimentSpec(dataset=datasets[0]))
    split = leave_one_out(data)
    for model, _ in loaded:
        if hasattr(model, "prepare"):
            model.prepare(split)
    return loaded, data, split


def options_text(options: dict) -> str:
    """``{"n_heads": 1, "d_model": 50}`` -> ``"d_model=50 n_heads=1"``: model options as a results row's ``options``
    column and the tables write them."""
    return " ".join(f"{k}={v}" for k, v in sorted(options.items()))


@dataclass
class ExperimentResult:
    spec: ExperimentSpec
    train: TrainResult
    valid: dict[str, float]
    test: dict[str, float]
    device: torch.device
    model: torch.nn.Module
    commit: str = ""
    also: dict[str, dict[str, float]] = field(default_factory=dict)
    n_items: int = 0
    n_users: int | None = None

    def save_model(self, folder: str | Path) -> Path:
        """Write the selected model to ``<folder>/<tag>_<run_id>.pt`` (see :mod:`.artifacts`); return the path."""
        s = self.spec
        return save_trained(trained_model_path(folder, s.tag(), s.run_id()), self.model, model_name=s.model,
                            options=s.resolved_model_options(), n_items=self.n_items, n_users=self.n_users,
                            max_len=s.resolved_max_len(), dataset=s.dataset, run_id=s.run_id())

    def rows(self, command: str) -> list[dict]:
        """The ``results/runs.csv`` rows of this run: its protocol, then each of ``spec.also_protocols``
        (the same selected model ranked under another protocol; ``select=<protocol>`` in ``training`` says
        which validation chose it)."""
        return [self.row(command)] + [self.row(command, p) for p in self.also]

    def row(self, command: str, protocol: str | None = None) -> dict:
        """The ``results/runs.csv`` row of this run (under ``protocol``, default the run's own)."""
        s = self.spec
        t = self.test if protocol in (None, s.protocol) else self.also[protocol]
        training = " ".join(f"{k}={v}" for k, v in s.training_options().items() if v is not None)
        if protocol not in (None, s.protocol):
            training += f" select={s.protocol}"
        return {
            "model": s.model, "dataset": s.dataset, "protocol": protocol or s.protocol, "loss": s.loss, "seed": s.seed,
            "hr@10": t["hr@10"], "ndcg@10": t["ndcg@10"], "hr@20": t["hr@20"], "ndcg@20": t["ndcg@20"],
            "mrr": t["mrr"], "best_epoch": self.train.best_epoch, "epochs": self.train.epochs_run,
            "train_seconds": round(self.train.train_seconds, 1),
            "seconds_per_epoch": round(self.train.seconds_per_epoch, 2),
            "device": self.device.type, "torch": torch.__version__, "commit": self.commit or process_commit(), "command": command,
            "date": now_iso(), "valid_ndcg@10": self.valid.get("ndcg@10", float("nan")),
            "max_len": s.resolved_max_len(),
            "hardware": describe_machines(self.train.machines) or hardware_description(self.device),
            "options": options_text(s.resolved_model_options()),
            "training": training, "stopped": self.train.stop_reason, "run_id": s.run_id(),
        }


def run_experiment(spec: ExperimentSpec, dataset: SequenceDataset | None = None) -> ExperimentResult:
    """Train ``spec.model`` on ``spec.dataset`` with early stopping on validation; evaluate on test."""
    commit = process_commit()  # the code that runs is the code this process imported
    config = spec.train_config()  # impossible settings fail before the data is read
    data = dataset if dataset is not None else load_data(spec)
    split = leave_one_out(data)
    max_len = spec.resolved_max_len()
    seed_everything(spec.seed)
    model = build_model(spec.model, n_items=data.n_items, max_len=max_len, n_users=data.n_users,
                        **spec.resolved_model_options())
    # the evaluation sample (sampled negatives, user subsample) does not depend on the training seed: every
    # run, whatever its seed, is ranked against the same candidates, so seeds measure training noise only
    protocol = EvalProtocol(spec.protocol, max_users=spec.eval_users, seed=EVAL_SEED)
    evaluator = Evaluator(split, max_len, protocol)
    trainer = Trainer(model, split, config, evaluator)
    result = trainer.fit()
    valid = result.best_valid or evaluator.evaluate(trainer.model, "valid")
    test = evaluator.evaluate(trainer.model, "test") if result.finished else {}
    also = {}
    if result.finished:
        for other in dict.fromkeys(spec.also_protocols):
            if other != spec.protocol:
                ev = Evaluator(split, max_len, EvalProtocol(other, max_users=spec.eval_users, seed=EVAL_SEED))
                also[other] = ev.evaluate(trainer.model, "test")
    return ExperimentResult(spec, result, valid, test, trainer.device, trainer.model, commit, also,
                            n_items=data.n_items, n_users=data.n_users)


__all__ = ["ExperimentSpec", "ExperimentResult", "run_experiment", "load_data", "load_kept_models", "options_text",
           "SYNTHETIC"]
