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
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
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


__all__ = ["last_item_diagnosis"]
