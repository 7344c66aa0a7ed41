"""Where does a model rank the item the user has just consumed? (the repeat diagnosis)

With tied input/output item tables, the hidden state at the last position carries the embedding of the
item just read, so that item tends to score high as its own successor. On data where nobody consumes an
item twice (MovieLens: one rating per film), that wastes a top slot. :func:`last_item_diagnosis` measures it
on the full-ranking protocol:

* ``last_item_median_rank``: median (the lower middle value for an even count) 1-based rank of the most
  recent input item among all items;
* ``last_item_in_top10``: share of users whose most recent input item is in their top 10;
* ``target_is_last_item``: share of users whose held-out item *is* their most recent input item (a
  true repeat; 0 on MovieLens);
* ``ndcg@10`` / ``hr@10``: the ordinary full-ranking metrics;
* ``ndcg@10_without_last`` / ``hr@10_without_last``: the same with only the most recent input item removed
  from the ranking (kept when it is the target).

:func:`input_item_diagnosis` asks the same question where the model is *trained*: at every position of
every training window, where does the item just read rank, how much softmax probability does it take, and
how much of the cross-entropy loss does that cost? A model can keep the item it has just read near the top
because the loss barely notices: that item takes a few per cent of the probability, a small share of the
loss, while it takes a whole slot of the top 10 (measured on ML-1M in docs/results.md).
"""
from __future__ import annotations

import torch
from torch import nn

from ..data.batching import TrainingWindows
from ..errors import ConfigError
from ..models.backbone import user_inputs
from .evaluator import Evaluator
from .metrics import metrics_from_ranks, rank_of_target


@torch.inference_mode()
def last_item_diagnosis(evaluator: Evaluator, model: nn.Module, stage: str = "test", k: int = 10
                        ) -> dict[str, float]:
    """The repeat diagnosis of ``model`` on ``stage`` (see the module docstring).

    Args:
        evaluator: a full-ranking evaluator (``full`` protocol; the sampled protocol has no full ranking).
        model: any registered model.
        stage: ``"valid"`` or ``"test"``.
        k: the cut-off of the top-k share and of the metrics.
    """
    if evaluator.protocol.sampled or evaluator.protocol.exclude_history:
        raise ConfigError("the repeat diagnosis needs an evaluator with the 'full' protocol (history kept), "
                          f"got {evaluator.protocol.name!r}")
    data = evaluator.stage_data(stage)
    last_ranks, full_ranks, without_ranks, repeats = [], [], [], []
    for rows, scores in evaluator.batch_scores(model, stage):
        dev = scores.device
        target = data.targets[rows].to(dev)
        last = data.inputs[rows, -1].to(dev)          # left padding: the last column is the most recent item
        has_last = last.ne(0)
        is_repeat = last.eq(target)
        excluded = torch.zeros_like(scores, dtype=torch.bool)
        drop = has_last & ~is_repeat
        excluded[drop.nonzero(as_tuple=True)[0], last[drop]] = True
        full_ranks.append(rank_of_target(scores, target).cpu())
        without_ranks.append(rank_of_target(scores, target, excluded).cpu())
        last_ranks.append(rank_of_target(scores, last.clamp_min(1))[has_last].cpu())
        repeats.append(is_repeat.cpu())
    full = metrics_from_ranks(torch.cat(full_ranks), (k,))
    without = metrics_from_ranks(torch.cat(without_ranks), (k,))
    last_rank = torch.cat(last_ranks).double() + 1.0
    return {
        "users": float(len(data.users)),
        "last_item_median_rank": last_rank.median().item() if len(last_rank) else float("nan"),
        f"last_item_in_top{k}": (last_rank <= k).double().mean().item() if len(last_rank) else float("nan"),
        "target_is_last_item": torch.cat(repeats).double().mean().item(),
        f"hr@{k}": full[f"hr@{k}"], f"ndcg@{k}": full[f"ndcg@{k}"],
        f"hr@{k}_without_last": without[f"hr@{k}"], f"ndcg@{k}_without_last": without[f"ndcg@{k}"],
    }


@torch.inference_mode()
def input_item_diagnosis(model: nn.Module, windows: TrainingWindows, k: int = 10, batch_size: int = 32
                         ) -> dict[str, float]:
    """Where ``model`` ranks the item it has just read, at the training positions of ``windows``.

    At each valid position ``t`` of each window (input ``s_t``, target ``s_{t+1}``) the model scores all
    items as it does in training (in evaluation mode: no dropout). Positions whose target *is* the input
    (a true repeat) are counted in ``input_is_target`` and left out of the other input-item numbers.

    Returns:
        ``positions``: number of valid positions; ``input_is_target``: share of true repeats;
        ``input_item_median_rank`` (lower median, 1-based, pessimistic ties) and ``input_item_in_top{k}``;
        ``input_item_probability``: mean softmax probability of the input item (over items ``1..n``, as the
        cross-entropy loss has it); ``input_item_loss``: mean ``-log(1 - p_input)``, by how much the
        cross-entropy would fall if the input item's probability went to the other items in proportion;
        ``loss``: mean cross-entropy of the targets.
    """
    if getattr(model, "objective", None) != "next":
        raise ConfigError("the input-item diagnosis needs a model trained on the next item at every position "
                          f"(objective 'next'), got objective {getattr(model, 'objective', None)!r}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ranks, probabilities, costs, losses, repeats = [], [], [], [], []
    try:
        for start in range(0, len(windows), batch_size):
            window = windows.windows[start:start + batch_size].to(device)
            inputs, targets = window[:, :-1], window[:, 1:]
            users = windows.users[start:start + batch_size].to(device)
            hidden = model(inputs, **user_inputs(model, users))             # (B, L, d)
            valid = targets.ne(0) & inputs.ne(0)
            seen, target = inputs[valid], targets[valid]                    # (N,)
            scores = model.score(hidden[valid])                             # (N, n + 1), column 0 is -inf
            log_p = torch.log_softmax(scores[:, 1:].float(), dim=1)         # the loss's softmax: items 1..n
            losses.append(-log_p.gather(1, (target - 1)[:, None])[:, 0].double().cpu())
            repeat = seen.eq(target)
            repeats.append(repeat.cpu())
            keep = ~repeat
            own = seen[keep]
            ranks.append(rank_of_target(scores[keep], own).cpu())
            log_p, column = log_p[keep], (own - 1)[:, None]
            probabilities.append(log_p.gather(1, column)[:, 0].double().exp().cpu())
            rest = log_p.scatter_(1, column, float("-inf"))              # log(1 - p) without cancellation
            costs.append(-torch.logsumexp(rest, dim=1).double().cpu())
    finally:
        model.train(was_training)
    rank = torch.cat(ranks).double() + 1.0 if ranks else torch.zeros(0, dtype=torch.float64)
    nan = float("nan")
    return {
        "positions": float(sum(len(r) for r in repeats)),
        "input_is_target": torch.cat(repeats).double().mean().item() if repeats else nan,
        "input_item_median_rank": rank.median().item() if len(rank) else nan,
        f"input_item_in_top{k}": (rank <= k).double().mean().item() if len(rank) else nan,
        "input_item_probability": torch.cat(probabilities).mean().item() if len(rank) else nan,
        "input_item_loss": torch.cat(costs).mean().item() if len(rank) else nan,
        "loss": torch.cat(losses).mean().item() if losses else nan,
    }


__all__ = ["input_item_diagnosis", "last_item_diagnosis"]
