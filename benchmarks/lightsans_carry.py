"""How much the chunked LightSANs attention's old block carry changed results.

Until commit "LightSANs: exact chunked carry", ``chunked_low_rank_attention`` formed the sums of the blocks before
each block as ``cumsum(block sums) - own block``. When a block's own interest weights dwarf the earlier ones'
(weights span up to e^60), that subtraction cancels the earlier sums in float32, and the block's later positions
move its earlier ones' outputs. The fix carries ``exclusive_cumsum`` instead (exact, and exactly causal).

This script trains LightSANs once with the carry given by ``--carry`` (``fixed`` or ``old``), then ranks the test
users with the trained weights under both carries, so the table shows (a) what the old carry did to the ranking of a
trained model and (b), across two invocations that differ only in ``--carry``, what it did to training.

    python benchmarks/lightsans_carry.py --dataset beauty --carry fixed --out results/benchmarks/lightsans_carry_fixed.md
    python benchmarks/lightsans_carry.py --dataset beauty --carry old --out results/benchmarks/lightsans_carry_old.md

The training settings default to the complete benchmark's for the sparse datasets (sampled softmax with 1,024
negatives, length bucketing, validation every 2 epochs, patience 5; README "Reproduce the complete benchmark").
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager

import numpy as np
import torch

from tutorial_lib.attention import low_rank
from tutorial_lib.data.batching import eval_inputs
from tutorial_lib.data import leave_one_out
from tutorial_lib.evaluation import EvalProtocol, Evaluator
from tutorial_lib.experiments.results import publish_table
from tutorial_lib.experiments.run import EVAL_SEED, ExperimentSpec, load_data, run_experiment

FIXED = low_rank.exclusive_cumsum


def old_carry(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """The carry before the fix: cumulative sum minus the block's own sum (cancels in float32)."""
    return torch.cumsum(x, dim) - x


@contextmanager
def carry(kind: str):
    """Run the block inside with the ``fixed`` or the ``old`` carry."""
    low_rank.exclusive_cumsum = FIXED if kind == "fixed" else old_carry
    try:
        yield
    finally:
        low_rank.exclusive_cumsum = FIXED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--dataset", default="beauty", help="registered dataset (default beauty)")
    parser.add_argument("--model", default="lightsans", choices=["lightsans", "lightsans-ape"])
    parser.add_argument("--carry", default="fixed", choices=["fixed", "old"], help="the carry used in training")
    parser.add_argument("--loss", default="sampled-ce", help="default sampled-ce (the sparse datasets' benchmark)")
    parser.add_argument("--negatives", type=int, default=1024)
    parser.add_argument("--bucketing", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    spec = ExperimentSpec(model=args.model, dataset=args.dataset, loss=args.loss,
                          n_negatives=args.negatives if args.loss != "ce" else None, bucketing=args.bucketing,
                          epochs=args.epochs, eval_every=args.eval_every, patience=args.patience, seed=args.seed,
                          progress=False, verbose=False)
    data = load_data(spec)
    with carry(args.carry):
        result = run_experiment(spec, dataset=data)
    split = leave_one_out(data)
    evaluator = Evaluator(split, spec.resolved_max_len(), EvalProtocol("full", seed=EVAL_SEED))
    ranked = {}
    for kind in ("fixed", "old"):
        with carry(kind):
            ranked[kind] = evaluator.evaluate(result.model, "test")
    # the trained model's outputs under both carries, on the test inputs (history + validation item) of 512 users
    users = split.eval_users("test")[:512]
    histories = [np.append(split.train[u], split.valid_target[u]) for u in users]
    inputs = eval_inputs(histories, spec.resolved_max_len()).to(result.device)
    with torch.no_grad():
        outs = {}
        for kind in ("fixed", "old"):
            with carry(kind):
                outs[kind] = result.model.eval()(inputs)
    valid = inputs.ne(0)
    gap = float((outs["fixed"] - outs["old"])[valid].abs().max())
    tr = result.train
    lines = [f"{args.model} on {args.dataset}, trained with the **{args.carry}** carry ({args.loss}"
             f"{f', {args.negatives} negatives' if args.loss != 'ce' else ''}, bucketing {args.bucketing}, seed "
             f"{args.seed}): best epoch {tr.best_epoch} of {tr.epochs_run}, best validation NDCG@10 "
             f"{result.valid['ndcg@10']:.4f}, {tr.seconds_per_epoch:.1f} s/epoch on {torch.get_num_threads()} "
             f"thread(s). Its test users ranked with each carry (full ranking):", "",
             "| ranked with | HR@10 | NDCG@10 | HR@20 | NDCG@20 | MRR |", "|---|---:|---:|---:|---:|---:|"]
    for kind, m in ranked.items():
        lines.append(f"| {kind} carry | {m['hr@10']:.4f} | {m['ndcg@10']:.4f} | {m['hr@20']:.4f} | "
                     f"{m['ndcg@20']:.4f} | {m['mrr']:.4f} |")
    lines += ["", f"Largest difference of the last block's outputs at real items between the carries (first 512 test inputs): "
              f"{gap:.2e}."]
    publish_table(lines, args.out, device=result.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
