"""Locker's motivating experiment (He et al., CIKM 2021, Section 2.3 and Figure 2): does global
self-attention get distracted by unrelated items in front of a short-term context?

Three pieces:

* :func:`short_term_dataset` builds the "short-term" data of Figure 2a from any
  :class:`~tutorial_lib.data.SequenceDataset`: (1) keep only the latest ``x`` % of every user's items,
  (2) insert ``α`` % random, unrelated items (``α`` relative to the kept length) **before** the kept
  items. The last two items of every user, the leave-one-out validation and test targets, stay the
  user's real last two items.
* :func:`run_short_term` trains a global model (SASRec, BERT4Rec) and local ones (``locker-*``) with
  :func:`~tutorial_lib.experiments.run.run_experiment` for every ``α`` and returns a tidy table of test
  metrics (Figure 2b/2c). Locker ranks all items with the history removed, ``protocol="full-nohist"``.
* :func:`average_attention_map` averages the attention map of one layer and head over many users'
  windows of a fixed length (Figure 2d).

Nothing here writes ``results/runs.csv``.
"""
from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..data.dataset import SequenceDataset
from ..data.split import MIN_EVAL_LENGTH
from ..errors import ConfigError

if TYPE_CHECKING:
    from pandas import DataFrame

#: the columns of :func:`run_short_term`'s table, in order
TABLE_COLUMNS = ("alpha", "model", "ndcg@20", "hr@20", "ndcg@10", "hr@10", "mrr", "valid_ndcg@10", "best_epoch",
                 "epochs", "train_seconds", "users", "avg_len", "protocol")


def kept_length(n: int, keep: float, min_keep: int = 5, max_keep: int | None = None) -> int:
    """How many of a user's ``n`` latest items :func:`short_term_dataset` keeps:
    ``ceil(keep * n)``, at least ``min_keep`` and at most ``max_keep`` (and never more than ``n``)."""
    k = max(math.ceil(keep * n - 1e-9), min_keep)
    if max_keep is not None:
        k = min(k, max_keep)
    return int(min(k, n))


def short_term_dataset(data: SequenceDataset, keep: float = 0.2, alpha: float = 0.0, min_keep: int = 5,
                       max_keep: int | None = None, seed: int = 0, avoid_kept: bool = True,
                       name: str | None = None) -> SequenceDataset:
    """Locker's "short-term" data (Figure 2a): the latest ``keep`` share of each sequence, with
    ``round(alpha * kept)`` random items inserted **before** the kept items.

    Args:
        data: the original dataset.
        keep: the share ``x`` of each user's latest items to keep (``0 < keep <= 1``).
        alpha: the number of random items relative to the kept length (``α >= 0``; ``0.2`` = 20 %).
        min_keep: keep at least this many items (at least 3, so that leave-one-out still has a
            validation and a test target; users with fewer items keep all of them).
        max_keep: keep at most this many items (``None``: no limit). Use it so that the kept and the
            inserted items fit in the model's window (``max_keep * (1 + α) <= max_len``): random items
            that fall outside the window cannot disturb the model.
        seed: the random items are a deterministic function of ``seed`` and the user (the same
            ``seed`` gives the same dataset; each user has its own generator).
        avoid_kept: draw the random items from the items the user's kept part does not contain (and
            without repetition), so no item occurs twice in a sequence; ``False``: uniform over the
            whole catalogue, with replacement.
        name: the new dataset's name (default: derived from ``data.name``, ``keep`` and ``alpha``).

    Returns:
        A new :class:`SequenceDataset` with the same catalogue and titles. ``meta["short_term"]``
        records the settings and, per user, ``kept`` (the number of kept items) and ``inserted`` (the
        number of random items, which are the first ``inserted`` items of the new sequence).
    """
    if not 0.0 < keep <= 1.0:
        raise ConfigError(f"keep (the share x of the latest items to keep) must be in (0, 1], got {keep}")
    if alpha < 0:
        raise ConfigError(f"alpha (random items relative to the kept length) must be >= 0, got {alpha}")
    if min_keep < MIN_EVAL_LENGTH:
        raise ConfigError(f"min_keep must be >= {MIN_EVAL_LENGTH} (leave-one-out needs a training item, a "
                          f"validation and a test target), got {min_keep}")
    if max_keep is not None and max_keep < min_keep:
        raise ConfigError(f"max_keep={max_keep} must be >= min_keep={min_keep}")
    sequences, kept, inserted = [], [], []
    for u, seq in enumerate(data.sequences):
        k = kept_length(len(seq), keep, min_keep, max_keep)
        tail = seq[len(seq) - k:]
        n_random = int(round(alpha * k))
        rng = np.random.default_rng([seed, u])
        if n_random == 0:
            noise = np.empty(0, dtype=np.int64)
        elif avoid_kept:
            candidates = np.setdiff1d(np.arange(1, data.n_items + 1), tail)
            if len(candidates) < n_random:
                raise ConfigError(f"user {u + 1}: cannot insert {n_random} distinct random items, only "
                                  f"{len(candidates)} items are not in the kept part (use avoid_kept=False or a "
                                  "smaller alpha)")
            noise = rng.choice(candidates, size=n_random, replace=False)
        else:
            noise = rng.integers(1, data.n_items + 1, size=n_random)
        sequences.append(np.concatenate([noise.astype(np.int64), tail]))
        kept.append(k)
        inserted.append(n_random)
    meta = dict(data.meta)
    meta["short_term"] = dict(source=data.name, keep=keep, alpha=alpha, min_keep=min_keep, max_keep=max_keep,
                              seed=seed, avoid_kept=avoid_kept, kept=np.array(kept, dtype=np.int64),
                              inserted=np.array(inserted, dtype=np.int64))
    label = name or f"{data.name}-short(x={keep:g},alpha={alpha:g})"
    return SequenceDataset(label, sequences, data.n_items, item_titles=data.item_titles, meta=meta)


@contextlib.contextmanager
def _quiet(enabled: bool):
    """Set ``TUTORIAL_LIB_QUIET=1`` for the duration of the block (the trainer then prints nothing)."""
    if not enabled:
        yield
        return
    from ..training.trainer import QUIET_ENV

    old = os.environ.get(QUIET_ENV)
    os.environ[QUIET_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(QUIET_ENV, None)
        else:
            os.environ[QUIET_ENV] = old


def _options_for(model: str, model_options: Mapping[str, Any] | None,
                 options_by_model: Mapping[str, Mapping[str, Any]] | None) -> dict:
    opts = dict(model_options or {})
    opts.update((options_by_model or {}).get(model, {}))
    return opts


def run_short_term(data: SequenceDataset, alphas: Sequence[float] = (0.0, 0.2, 0.4),
                   models: Sequence[str] = ("sasrec", "locker-win"), keep: float = 0.2, min_keep: int = 5,
                   max_keep: int | None = None, max_len: int = 50, epochs: int = 20, lr: float = 1e-3,
                   batch_size: int = 128, patience: int = 5, eval_every: int = 1, protocol: str = "full-nohist",
                   model_options: Mapping[str, Any] | None = None,
                   options_by_model: Mapping[str, Mapping[str, Any]] | None = None, mask_prob: float = 0.2,
                   seed: int = 0, data_seed: int = 0, device: str = "auto", eval_users: int | None = None,
                   time_budget: float | None = None, return_models: bool = False, verbose: bool = True,
                   train_verbose: bool | None = None
                   ) -> DataFrame | tuple[DataFrame, dict[tuple[float, str], nn.Module]]:
    """Figure 2b/2c: for every ``α``, build :func:`short_term_dataset` and train every model on it.

    Every model sees the same data for a given ``α`` (``data_seed``) and starts from the same seed.
    ``max_keep`` defaults to ``max_len // (1 + max(alphas))``, so that every inserted item lies in the
    window the model reads.

    Args:
        data: the original dataset (e.g. a subset of MovieLens-1M users).
        alphas: the ratios of random items to try.
        models: registered model names (a global one, e.g. ``"sasrec"`` or ``"bert4rec"``, and local ones,
            e.g. ``"locker-win"``, ``"locker-conv"``).
        keep, min_keep, max_keep: see :func:`short_term_dataset`.
        max_len, epochs, lr, batch_size, patience, eval_every, mask_prob, seed, device, eval_users,
            time_budget: as in :class:`~tutorial_lib.experiments.run.ExperimentSpec` (``time_budget``: seconds
            of training per run).
        protocol: the evaluation protocol (Locker: ``"full-nohist"``, all items ranked, history removed).
        model_options: options for every model (``d_model``, ``n_heads``, ``dropout``, ...; ``dropout``
            defaults to 0.2).
        options_by_model: extra options per model name (``{"locker-win": {"n_local": 1, "window": 2}}``).
        return_models: also return the trained models.
        verbose: print one line per run.
        train_verbose: ``False`` silences the trainer's line per validation (``None``: it follows the
            ``TUTORIAL_LIB_QUIET`` environment variable, as everywhere in the library).

    Returns:
        A pandas DataFrame with one row per ``(α, model)`` and the columns :data:`TABLE_COLUMNS`
        (test metrics; ``avg_len`` is the mean sequence length of the short-term data). With
        ``return_models``, ``(table, models)`` where ``models[(alpha, model)]`` is the trained model.
    """
    import pandas as pd

    from .run import ExperimentSpec, run_experiment

    if not alphas:
        raise ConfigError("alphas must contain at least one ratio")
    if not models:
        raise ConfigError("models must contain at least one model name")
    if max_keep is None:
        max_keep = max(min_keep, int(max_len // (1 + max(alphas))))
    rows, trained = [], {}
    for alpha in alphas:
        short = short_term_dataset(data, keep=keep, alpha=alpha, min_keep=min_keep, max_keep=max_keep,
                                   seed=data_seed)
        avg_len = float(short.lengths().mean())
        for model in models:
            opts = _options_for(model, model_options, options_by_model)
            opts.setdefault("dropout", 0.2)
            spec = ExperimentSpec(model=model, dataset=short.name, loss="ce", protocol=protocol, seed=seed,
                                  epochs=epochs, max_len=max_len, batch_size=batch_size, lr=lr, patience=patience,
                                  eval_every=eval_every, eval_users=eval_users, device=device, mask_prob=mask_prob,
                                  time_budget=time_budget, model_options=opts, progress=False)
            with _quiet(train_verbose is False):
                result = run_experiment(spec, dataset=short)
            t = result.test
            rows.append({"alpha": float(alpha), "model": model, "ndcg@20": t["ndcg@20"], "hr@20": t["hr@20"],
                         "ndcg@10": t["ndcg@10"], "hr@10": t["hr@10"], "mrr": t["mrr"],
                         "valid_ndcg@10": result.valid.get("ndcg@10", float("nan")),
                         "best_epoch": result.train.best_epoch, "epochs": result.train.epochs_run,
                         "train_seconds": round(result.train.train_seconds, 1), "users": int(t.get("users", 0)),
                         "avg_len": round(avg_len, 2), "protocol": protocol})
            if verbose:
                print(f"alpha={alpha:g} {model:>20s}: test N@20 {t['ndcg@20']:.4f}  HR@20 {t['hr@20']:.4f}  "
                      f"({result.train.epochs_run} epochs, {result.train.train_seconds:.0f} s)")
            if return_models:
                trained[(float(alpha), model)] = result.model
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    return (table, trained) if return_models else table


def average_attention_map(model: nn.Module, histories: Sequence[np.ndarray], length: int = 20,
                          n_samples: int = 200, layer: int = 0, head: int = 0, seed: int = 0,
                          return_count: bool = False) -> np.ndarray | tuple[np.ndarray, int]:
    """Figure 2d: the mean ``(length, length)`` attention map of ``layer`` and ``head`` over users' windows.

    Every history with at least ``length`` items contributes its window of the last ``length`` items
    as the model reads it to predict the next item (a cloze model: the last ``length - 1`` items and
    ``[MASK]``), so no window has padding and the maps of different users line up position by position.
    At most ``n_samples`` histories are used, drawn at random (``seed``) when there are more.

    Args:
        model: a trained :class:`~tutorial_lib.models.SequentialRecommender` whose attention returns
            weights (the RNN and convolutional Locker encoders have none).
        histories: per user, the chronological item ids (e.g. ``split.history(u, "test")``).
        length: the window length (Figure 2d: 20).
        n_samples: the number of windows to average (Figure 2d: 200).
        layer, head: which map (Figure 2d does not say which; ``0, 0`` is the first layer's first head).
            With Locker's models the local heads come first (heads ``0 .. n_local - 1``), then the global ones.
        seed: the random choice of histories.
        return_count: also return how many windows were averaged.
    Returns:
        A NumPy array ``(length, length)``: row ``i`` is how position ``i`` (``length - 1`` = the most
        recent) spreads its attention, on average; with ``return_count``, ``(map, count)``.
    """
    if length < 2:
        raise ConfigError(f"length must be >= 2, got {length}")
    max_len = getattr(model, "max_len", None)
    if max_len is not None and length > max_len:
        raise ConfigError(f"length={length} is longer than the model's window max_len={max_len}")
    n_layers = len(getattr(model, "blocks", ()))
    if n_layers and not 0 <= layer < n_layers:
        raise ConfigError(f"layer must be in 0..{n_layers - 1}, got {layer}")
    eligible = [np.asarray(h, dtype=np.int64) for h in histories if len(h) >= length]
    if not eligible:
        raise ConfigError(f"no history has at least length={length} items; choose a smaller length")
    if len(eligible) > n_samples:
        pick = np.sort(np.random.default_rng(seed).choice(len(eligible), size=n_samples, replace=False))
        eligible = [eligible[i] for i in pick]
    ids = torch.from_numpy(np.stack([h[-length:] for h in eligible]))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            inputs = model.next_item_input(ids.to(device))[:, -length:] if hasattr(model, "next_item_input") \
                else ids.to(device)
            _, weights = model.encode(inputs, need_weights=True)
    finally:
        model.train(was_training)
    w = weights[layer]
    if w is None:
        raise ConfigError("this model's attention returns no weights (Locker's RNN and convolutional encoders have "
                          "no attention map); use a model with dot-product heads, e.g. sasrec, bert4rec or locker-win")
    if not 0 <= head < w.shape[1]:
        raise ConfigError(f"head must be in 0..{w.shape[1] - 1}, got {head}")
    avg = w[:, head].float().mean(0).cpu().numpy()
    return (avg, len(eligible)) if return_count else avg


__all__ = ["TABLE_COLUMNS", "kept_length", "short_term_dataset", "run_short_term", "average_attention_map"]
