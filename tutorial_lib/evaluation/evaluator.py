"""Batched, exact evaluation of next-item prediction on a leave-one-out split."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..data.batching import eval_inputs
from ..data.split import MIN_EVAL_LENGTH, LeaveOneOutSplit
from ..errors import ConfigError
from ..models.backbone import user_inputs
from ..utils.device import resolve_device
from .metrics import DEFAULT_KS, metrics_from_ranks, rank_of_target
from .protocol import EvalProtocol

#: upper bound on ``batch x candidates`` score entries held at once (keeps memory bounded for any catalogue)
SCORE_BUDGET = 2**22


@dataclass
class StageData:
    """Everything needed to evaluate one stage, built once per evaluator.

    Users are ordered by history length (so batches can be trimmed). ``users`` ``(N,)``, ``inputs`` ``(N, max_len)``, ``targets`` ``(N,)``; ``history_ptr``/``history_items``
    a CSR list of each user's full history (only for ``full-nohist``); ``candidates`` ``(N, 1 + n_neg)``
    with the target in column 0 (only for ``sampled100``).
    """

    users: np.ndarray
    inputs: torch.Tensor
    targets: torch.Tensor
    widths: np.ndarray | None = None
    history_ptr: np.ndarray | None = None
    history_items: np.ndarray | None = None
    candidates: torch.Tensor | None = None


def sample_negatives(rng: np.random.Generator, n_items: int, exclude: np.ndarray, n: int) -> np.ndarray:
    """``n`` distinct items from ``1..n_items`` that are not in ``exclude`` (uniform, without replacement)."""
    allowed = n_items - len(np.unique(exclude))
    if allowed < n:
        raise ValueError(f"cannot draw {n} negatives: only {allowed} items are not in the user's history")
    picked = np.empty(0, dtype=np.int64)
    while len(picked) < n:
        draw = rng.integers(1, n_items + 1, size=2 * n + 8)
        draw = draw[~np.isin(draw, exclude)]
        picked = np.concatenate([picked, draw])
        _, first = np.unique(picked, return_index=True)
        picked = picked[np.sort(first)]
    return picked[:n]


def model_device(model: nn.Module) -> torch.device:
    """Device of a model's first parameter or buffer (CPU for a model that has neither)."""
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


class Evaluator:
    """Rank each user's held-out item with a model's ``score_next``.

    Args:
        split: the leave-one-out split.
        max_len: the model's input window.
        protocol: the :class:`EvalProtocol` switches.
        batch_size: users per forward pass (default: as many as fit :data:`SCORE_BUDGET`).
        ks: cut-offs for HR and NDCG.
    """

    def __init__(self, split: LeaveOneOutSplit, max_len: int, protocol: EvalProtocol | None = None,
                 batch_size: int | None = None, ks: tuple[int, ...] = DEFAULT_KS):
        self.split, self.max_len, self.ks = split, max_len, ks
        if not (split.valid_target > 0).any():
            raise ConfigError(f"no user of {split.dataset_name!r} has the {MIN_EVAL_LENGTH} items leave-one-out "
                              f"needs to hold out a validation and a test item, so nothing can be evaluated (the "
                              f"metrics would be NaN); use a dataset with longer histories")
        self.protocol = protocol or EvalProtocol()
        n_cand = (self.protocol.n_negatives + 1) if self.protocol.sampled else split.n_items + 1
        self.batch_size = batch_size or int(max(16, min(1024, SCORE_BUDGET // n_cand)))
        self._stages: dict[str, StageData] = {}

    # -------------------------------------------------------------- preparation
    def stage_data(self, stage: str) -> StageData:
        """Inputs, targets and candidates of ``stage`` (``"valid"`` or ``"test"``), built on first use, then cached."""
        if stage not in self._stages:
            self._stages[stage] = self._build_stage(stage)
        return self._stages[stage]

    def _build_stage(self, stage: str) -> StageData:
        split, proto = self.split, self.protocol
        users = split.eval_users(stage)
        rng = np.random.default_rng(proto.seed)
        if proto.max_users is not None and len(users) > proto.max_users:
            users = np.sort(rng.choice(users, size=proto.max_users, replace=False))
        # evaluate short histories together so each batch can be trimmed to its longest input
        lengths = np.array([len(split.history(u, stage)) for u in users], dtype=np.int64)
        users = users[np.argsort(lengths, kind="stable")]
        histories = [split.history(u, stage) for u in users]
        targets = split.targets(stage)[users]
        data = StageData(users, eval_inputs(histories, self.max_len), torch.from_numpy(targets),
                         widths=np.minimum([len(h) for h in histories], self.max_len))
        if proto.exclude_history:
            lengths = np.array([len(h) for h in histories], dtype=np.int64)
            data.history_ptr = np.concatenate([[0], np.cumsum(lengths)])
            data.history_items = np.concatenate(histories) if histories else np.empty(0, np.int64)
        if proto.sampled:
            # validation draws its own negatives: with the test's generator a user's 100 negatives would be the
            # same at both stages, and selecting on validation would pick the epoch on the test's candidates
            neg_rng = rng if stage == "test" else np.random.default_rng([proto.seed, 1])
            cands = np.empty((len(users), proto.n_negatives + 1), dtype=np.int64)
            for row, (u, t) in enumerate(zip(users, targets)):
                if proto.negatives_exclude == "history":
                    avoid = np.concatenate([split.history(u, "test"), [split.test_target[u]]])
                else:                                  # SASRec's code: the training items (and the target)
                    avoid = np.append(split.history(u, "valid"), t)
                cands[row, 0] = t
                cands[row, 1:] = sample_negatives(neg_rng, split.n_items, avoid, proto.n_negatives)
            data.candidates = torch.from_numpy(cands)
        return data

    # --------------------------------------------------------------- evaluation
    def batch_scores(self, model: nn.Module, stage: str = "valid", device: str | torch.device | None = None
                     ) -> Iterator[tuple[slice, torch.Tensor]]:
        """Yield ``(rows, scores)`` per batch of evaluated users: ``rows`` indexes ``stage_data(stage)``,
        ``scores`` ``(B, n_items + 1)`` are the model's next-item scores (float32, on ``device``; the padding
        column 0 set to ``-inf``) for the batch's inputs, computed in inference mode (so a caller that edits
        them in place must run in ``torch.inference_mode()`` too). The model is in evaluation mode until the
        generator is exhausted.
        """
        if not isinstance(model, nn.Module) or not callable(getattr(model, "score_next", None)):
            raise TypeError(f"the evaluator ranks with a torch.nn.Module that has a score_next(item_ids) method, got "
                            f"{type(model).__name__}: subclass torch.nn.Module (call super().__init__() first) and "
                            f"give it score_next(item_ids) -> (B, n_items + 1) scores, as PopularityRecommender does")
        data = self.stage_data(stage)
        dev = resolve_device(device) if device is not None else model_device(model)
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(data.users), self.batch_size):
                rows = slice(start, start + self.batch_size)
                width = max(int(data.widths[rows].max()), 1)
                with torch.inference_mode():  # never held across the yield: the caller's mode stays its own
                    users = user_inputs(model, torch.from_numpy(data.users[rows]).to(dev))
                    scores = model.score_next(data.inputs[rows, -width:].to(dev), **users).float()
                    scores[:, 0] = float("-inf")  # padding is never a candidate, whatever the model scores it
                yield rows, scores
        finally:
            model.train(was_training)

    @torch.inference_mode()
    def ranks(self, model: nn.Module, stage: str = "valid", device: str | torch.device | None = None
              ) -> torch.Tensor:
        """0-based rank of every evaluated user's target, ``(N,)`` on the CPU, in the order of
        ``stage_data(stage).users``."""
        data = self.stage_data(stage)
        out = []
        for rows, scores in self.batch_scores(model, stage, device):
            target = data.targets[rows].to(scores.device)
            if self.protocol.sampled:
                cand = data.candidates[rows].to(scores.device)
                r = rank_of_target(scores.gather(1, cand), torch.zeros_like(target))
            else:
                excluded = self._history_mask(data, rows.start, scores.shape, scores.device)
                r = rank_of_target(scores, target, excluded)
            out.append(r.cpu())
        return torch.cat(out) if out else torch.empty(0, dtype=torch.long)

    def _history_mask(self, data: StageData, start: int, shape: torch.Size, dev: torch.device
                      ) -> torch.Tensor | None:
        """``(B, n_items + 1)`` bool marking padding and history items for ``full-nohist``, else ``None``
        (the padding column is already ``-inf`` in :meth:`batch_scores`, in every protocol)."""
        if not self.protocol.exclude_history:
            return None
        B = shape[0]
        ptr = data.history_ptr[start:start + B + 1]
        items = torch.from_numpy(data.history_items[ptr[0]:ptr[-1]]).to(dev)
        rows = torch.repeat_interleave(torch.arange(B, device=dev), torch.from_numpy(np.diff(ptr)).to(dev))
        mask = torch.zeros(shape, dtype=torch.bool, device=dev)
        mask[rows, items] = True
        mask[:, 0] = True
        return mask

    def evaluate(self, model: nn.Module, stage: str = "valid", device: str | torch.device | None = None
                 ) -> dict[str, float]:
        """HR@K, NDCG@K (K in ``ks``) and MRR averaged over the evaluated users."""
        metrics = metrics_from_ranks(self.ranks(model, stage, device), self.ks)
        metrics["users"] = float(len(self.stage_data(stage).users))
        return metrics
