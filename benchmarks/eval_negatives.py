"""Sampled ranking with our negatives and with SASRec's: how much the choice moves HR@10 / NDCG@10.

The ``sampled100`` protocol ranks the test item against 100 sampled items. Ours never draws an item the
user is known to have consumed (the training items and both held-out items); SASRec's released code (and so
the SASRec and RKSA papers) avoids only the training items, so the validation item, which is the last item of
the test input, can be drawn as a negative (docs/methods.md A13). A model that ranks the item it has just read
near the top then loses those users. This script evaluates each model on the test users with both rules, over
several draws of the negatives (draw 0 uses the benchmark's seed, so it reproduces the run's ``sampled100``
row), and prints how often the validation item is drawn and how often it then outranks the target.

    python benchmarks/eval_negatives.py --trained runs/models/sasrec_ml-1m_bce_sampled100_s42_<run>.pt
    python benchmarks/eval_negatives.py --epochs 20          # trains SASRec (BCE) first, ML-1M or synthetic

Prints a Markdown table (and writes it with its provenance when ``--out`` is given).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from tutorial_lib.data import leave_one_out, load_or_synthetic
from tutorial_lib.evaluation import EvalProtocol, Evaluator
from tutorial_lib.evaluation.metrics import metrics_from_ranks
from tutorial_lib.experiments.results import git_commit, publish_table
from tutorial_lib.experiments.run import EVAL_SEED, load_kept_models, options_text
from tutorial_lib.models import build_model
from tutorial_lib.training import TrainConfig, Trainer
from tutorial_lib.utils import seed_everything

RULES = ("history", "train")


def compare_rules(model: torch.nn.Module, split, max_len: int, draws: int) -> dict[str, float]:
    """Test HR@10 / NDCG@10 under both rules (mean and std over ``draws`` seeds of the negatives), and for
    SASRec's rule the share of users whose validation item was drawn and, of those, the share where it
    scores above the target."""
    out: dict[str, float] = {}
    drawn_users = above = 0
    evaluated = 0
    for rule in RULES:
        hr, ndcg = [], []
        for draw in range(draws):
            ev = Evaluator(split, max_len, EvalProtocol("sampled100", seed=EVAL_SEED + draw, negatives_exclude=rule))
            data = ev.stage_data("test")
            ranks = ev.ranks(model, "test")
            m = metrics_from_ranks(ranks)
            hr.append(m["hr@10"])
            ndcg.append(m["ndcg@10"])
            if rule == "train":
                valid_item = torch.from_numpy(split.valid_target[data.users])
                is_drawn = (data.candidates[:, 1:] == valid_item.unsqueeze(1)).any(1)
                scores = torch.cat([s.gather(1, data.candidates[rows].to(s.device)) for rows, s in
                                    ev.batch_scores(model, "test")])
                cand = data.candidates
                valid_score = scores.masked_fill(cand != valid_item.unsqueeze(1), float("-inf")).amax(1)
                drawn_users += int(is_drawn.sum())
                above += int((is_drawn & (valid_score >= scores[:, 0])).sum())
                evaluated += len(data.users)
        for metric, values in (("hr@10", hr), ("ndcg@10", ndcg)):
            out[f"{rule}_{metric}"] = float(np.mean(values))
            out[f"{rule}_{metric}_std"] = float(np.std(values, ddof=1)) if draws > 1 else 0.0
    out["valid_item_drawn"] = drawn_users / max(evaluated, 1)
    out["valid_item_above_target"] = above / max(drawn_users, 1)
    return out


def table_lines(title: str, rows: list[tuple[str, str, dict[str, float]]], draws: int) -> list[str]:
    lines = [title, "",
             f"Test users, `sampled100`; mean ± std over {draws} draws of the negatives (draw 0 = the benchmark's). "
             "Ours: negatives avoid the whole history and both held-out items. SASRec's code: only the training "
             "items (and the target), so the validation item can be drawn.", "",
             "| model | options | run | ours HR@10 | ours NDCG@10 | SASRec's HR@10 | SASRec's NDCG@10 | "
             "change HR@10 / NDCG@10 | validation item drawn | ... and scored at or above the target |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, run, r in rows:
        change = (f"{(r['train_hr@10'] / r['history_hr@10'] - 1):+.2%} / "
                  f"{(r['train_ndcg@10'] / r['history_ndcg@10'] - 1):+.2%}")
        lines.append(f"| {name} | {run} | {r['history_hr@10']:.4f} ± {r['history_hr@10_std']:.4f} | "
                     f"{r['history_ndcg@10']:.4f} ± {r['history_ndcg@10_std']:.4f} | "
                     f"{r['train_hr@10']:.4f} ± {r['train_hr@10_std']:.4f} | "
                     f"{r['train_ndcg@10']:.4f} ± {r['train_ndcg@10_std']:.4f} | {change} | "
                     f"{r['valid_item_drawn']:.1%} | {r['valid_item_above_target']:.1%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--trained", action="append", default=None, metavar="PATH",
                        help="a model kept by a finished run (runs/models/*.pt); repeatable")
    parser.add_argument("--draws", type=int, default=5, help="draws of the negatives per rule (default 5)")
    parser.add_argument("--dataset", default="ml-1m", help="without --trained: dataset to train on "
                        "(falls back to synthetic)")
    parser.add_argument("--epochs", type=int, default=20, help="without --trained: epochs of SASRec (BCE)")
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws must be at least 1, got {args.draws}")
    commit = git_commit()
    rows: list[tuple[str, str, dict[str, float]]] = []
    if args.trained:
        loaded, data, split = load_kept_models(args.trained)
        for model, meta in loaded:
            rows.append((f"{meta['model']} | {options_text(meta['options'])}", meta["run_id"],
                         compare_rules(model, split, meta["max_len"], args.draws)))
            print(rows[-1], flush=True)
        title = f"Sampled negatives on {data.name}: models kept by finished runs (weights selected on validation)."
    else:
        data = load_or_synthetic(args.dataset, n_users=1000, n_items=500, max_len=100)
        split = leave_one_out(data)
        seed_everything(args.seed)
        model = build_model("sasrec", n_items=data.n_items, max_len=args.max_len, dropout=0.2)
        config = TrainConfig(epochs=args.epochs, seed=args.seed, loss="bce", eval_every=2, patience=args.epochs,
                             device="cpu", progress=False, verbose=False)
        evaluator = Evaluator(split, args.max_len, EvalProtocol("sampled100", seed=EVAL_SEED))
        result = Trainer(model, split, config, evaluator).fit()
        rows.append((f"sasrec | loss=bce max_len={args.max_len}", f"{args.epochs} epochs, best {result.best_epoch}",
                     compare_rules(model, split, args.max_len, args.draws)))
        title = (f"Sampled negatives on {data.name}: SASRec trained here with BCE (one negative, seed {args.seed}), "
                 "selected on validation `sampled100` NDCG@10.")
    publish_table(table_lines(title, rows, args.draws), args.out, commit=commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
