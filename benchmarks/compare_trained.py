"""Is the gap between two trained models larger than what the choice of users alone would produce?

A test metric is a mean over users, so two models ranked on the same users differ by the mean of their
per-user differences. Its paired 95 % interval (Student's t over the users, ``tutorial_lib.experiments.stats``)
says how far that gap could move on another draw of users from the same population, with the same weights.
It does not cover the other noise, the training seed: for that, compare several seeds (README's paired
intervals over seeds). Where a single pair of runs is all there is, this is the interval one can give.

Every model after the first is compared with the first (the baseline), on validation and test users, under
each ``--protocol``; the models must come from runs on one dataset (kept by the benchmark and ``train`` in
``runs/models/``):

    python benchmarks/compare_trained.py --trained runs/models/sasrec_ml-1m_ce_full_s44_<run>.pt \\
        --trained runs/models/fparec_ml-1m_ce_full_s44_<run>.pt --out results/benchmarks/compare_x.md

Prints a Markdown table (and writes it with its provenance when ``--out`` is given).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from tutorial_lib.evaluation import EvalProtocol, Evaluator
from tutorial_lib.evaluation.metrics import ndcg_at_k
from tutorial_lib.experiments.results import git_commit, publish_table
from tutorial_lib.experiments.run import load_kept_models, options_text
from tutorial_lib.experiments.stats import paired_ci

METRICS = ("hr@10", "ndcg@10")


def per_user(ranks: torch.Tensor, metric: str) -> np.ndarray:
    """``(N,)`` 0-based ranks -> ``(N,)`` per-user HR@K or NDCG@K (``metric`` ``"hr@10"`` / ``"ndcg@10"``)."""
    name, k = metric.split("@")
    values = ranks < int(k) if name == "hr" else ndcg_at_k(ranks, int(k))
    return values.double().numpy()


def user_level_change(ranks: torch.Tensor, base_ranks: torch.Tensor, metric: str) -> dict[str, float]:
    """Mean of ``metric`` for both rank vectors (the same users, in the same order), the relative change over
    the base, its paired 95 % interval over the users (in per cent of the base's mean), and the share of users
    whose value differs."""
    if ranks.shape != base_ranks.shape:
        raise ValueError(f"the two models were ranked on different users: {tuple(ranks.shape)} against "
                         f"{tuple(base_ranks.shape)}")
    a, b = per_user(ranks, metric), per_user(base_ranks, metric)
    base = float(b.mean())
    ci = paired_ci(a, b)
    scale = 100.0 / base if base else float("nan")
    return {"value": float(a.mean()), "base": base, "change": ci["diff"] * scale, "low": ci["low"] * scale,
            "high": ci["high"] * scale, "users_differ": float((a != b).mean()), "users": float(a.size)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--trained", action="append", required=True, metavar="PATH",
                        help="a model kept by a finished run (runs/models/*.pt); the first is the baseline; "
                             "repeat for each model")
    parser.add_argument("--protocol", nargs="+", default=["full", "full-nohist"],
                        choices=["full", "full-nohist", "sampled100"])
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    if len(args.trained) < 2:
        parser.error("give at least two --trained models: the baseline first, then each one to compare with it")
    commit = git_commit()
    loaded, data, split = load_kept_models(args.trained)

    def label(meta: dict) -> str:
        details = [options_text(meta["options"]), f"run {meta['run_id']}"]
        return f"{meta['model']} ({'; '.join(d for d in details if d)})"

    base_model, base_meta = loaded[0]
    lines = [f"Paired comparison over users on {data.name}: each model against {label(base_meta)}, ranked on "
             "the same users; the interval is the paired 95 % interval of the difference over the users (the "
             "draw of users, not the training seed), in per cent of the baseline's mean.", "",
             "| model | protocol | users | metric | baseline | model | change | 95 % interval over users | "
             "users whose value differs |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for protocol in args.protocol:
        evaluators = {m["max_len"]: Evaluator(split, m["max_len"], EvalProtocol(protocol)) for _, m in loaded}
        for stage in ("valid", "test"):
            base_ranks = evaluators[base_meta["max_len"]].ranks(base_model, stage)
            for model, meta in loaded[1:]:
                ranks = evaluators[meta["max_len"]].ranks(model, stage)
                for metric in METRICS:
                    c = user_level_change(ranks, base_ranks, metric)
                    lines.append(f"| {label(meta)} | {protocol} | {stage} ({c['users']:,.0f}) | {metric} | "
                                 f"{c['base']:.4f} | {c['value']:.4f} | {c['change']:+.1f}% | "
                                 f"[{c['low']:+.1f}, {c['high']:+.1f}]% | {c['users_differ']:.1%} |")
                    print(lines[-1], flush=True)
    publish_table(lines, args.out, commit=commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
