"""Seconds per epoch of SASRec on ML-1M: our trainer against a plain reference loop, at equal metrics.

The plain loop is what most SASRec code does: every batch padded to ``max_len``, dropout on the
attention weights (which turns off PyTorch's fused attention kernel), scores for every position and
cross-entropy over all of them (padding ignored by ``ignore_index``). Our trainer removes one cost at a
time; each variant below adds or removes one shortcut, so the table shows what each one buys and what it
costs in validation quality after the same number of epochs from the same initialisation.

The bf16 variant runs the forward pass under ``torch.autocast`` with bfloat16 (``--precision bf16``), on
whichever device is measured.

The two ``torch.compile`` variants compile the model's forward pass (the trainer accepts the compiled module
like any other). Compiling happens during the first epoch, so the table gives the first epoch apart and
averages the seconds per epoch over the later ones.

    python benchmarks/train_speed.py                     # ML-1M (SEQREC_DATA_DIR) or synthetic, 3 epochs
    python benchmarks/train_speed.py --epochs 10 --out results/benchmarks/train_speed.md
    python benchmarks/train_speed.py --device cuda --out results/benchmarks/train_speed_h100.md

Prints a Markdown table (and writes it with its provenance when ``--out`` is given).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from tutorial_lib.data import leave_one_out, left_pad, load_or_synthetic
from tutorial_lib.data.split import LeaveOneOutSplit
from tutorial_lib.evaluation import Evaluator
from tutorial_lib.experiments.results import git_commit, publish_table
from tutorial_lib.models import build_model
from tutorial_lib.training import TrainConfig, Trainer
from tutorial_lib.utils import resolve_device, seed_everything, synchronize


def plain_epoch(model: torch.nn.Module, split: LeaveOneOutSplit, opt: torch.optim.Optimizer, batch_size: int,
                generator: torch.Generator, device: torch.device) -> float:
    """The reference: padded full batches, logits at every position, CE with ignore_index=0."""
    model.train()
    users = [u for u, s in enumerate(split.train) if len(s) >= 2]
    windows = torch.from_numpy(left_pad([split.train[u] for u in users], model.max_len + 1)).to(device)
    total, n = 0.0, 0
    for idx in torch.randperm(len(users), generator=generator).split(batch_size):
        w = windows[idx.to(device)]
        inputs, targets = w[:, :-1], w[:, 1:] * w[:, :-1].ne(0)
        logits = model(inputs) @ model.output_embedding.t()  # (B, L, n_items + 1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total, n = total + loss.item(), n + 1
    return total / n


VARIANTS = {
    # name: (trainer or plain loop, model options, trainer options)
    "reference: plain loop": ("plain", {"attn_dropout": 0.2}, {}),
    "reference + torch.compile": ("plain-compiled", {"attn_dropout": 0.2}, {}),
    "ours + attention-weight dropout 0.2": ("ours", {"attn_dropout": 0.2}, {}),
    "ours with nn.Dropout": ("ours-torch-dropout", {}, {}),
    "ours with F.cross_entropy on valid positions": ("ours", {}, {"ce_chunk": None}),
    "ours + length bucketing": ("ours", {}, {"bucketing": True}),
    "ours + torch.compile": ("ours-compiled", {}, {}),
    "ours + bf16 autocast": ("ours", {}, {"precision": "bf16"}),
    "ours (default)": ("ours", {}, {}),
}


def use_torch_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Swap the backbone's dropout modules for ``torch.nn.Dropout`` (what plain PyTorch code uses)."""
    from tutorial_lib.models.backbone import Dropout

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Dropout):
                setattr(parent, name, torch.nn.Dropout(child.p))
    return model


def run_variant(name: str, split: LeaveOneOutSplit, n_items: int, args: argparse.Namespace,
                device: torch.device) -> dict:
    kind, model_opts, trainer_opts = VARIANTS[name]
    seed_everything(args.seed)
    model = build_model("sasrec", n_items=n_items, max_len=args.max_len, d_model=args.d_model, n_heads=2,
                        n_layers=2, dropout=0.2, **model_opts)
    if kind.startswith("plain") or kind == "ours-torch-dropout":
        model = use_torch_dropout(model)
    model = model.to(device)
    trained = torch.compile(model) if kind.endswith("-compiled") else model  # same parameters
    evaluator = Evaluator(split, args.max_len)
    seconds = []
    if kind.startswith("plain"):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
        gen = torch.Generator().manual_seed(args.seed)
        for _ in range(args.epochs):
            t0 = time.perf_counter()
            plain_epoch(trained, split, opt, args.batch_size, gen, device)
            synchronize(device)
            seconds.append(time.perf_counter() - t0)
    else:
        cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, device=str(device),
                          progress=False, verbose=False, **trainer_opts)
        trainer = Trainer(trained, split, cfg, evaluator)
        for epoch in range(1, args.epochs + 1):
            t0 = time.perf_counter()
            trainer.train_epoch(epoch)
            synchronize(device)
            seconds.append(time.perf_counter() - t0)
    metrics = evaluator.evaluate(model, "valid")
    later = seconds[1:] or seconds  # the first epoch pays torch.compile's compilation
    return {"variant": name, "first_epoch": seconds[0], "s_per_epoch": float(np.mean(later)),
            "hr@10": metrics["hr@10"], "ndcg@10": metrics["ndcg@10"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--dataset", default="ml-1m", help="registered dataset (falls back to synthetic)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    commit = git_commit()  # the code that runs, even if the checkout changes while it trains
    data = load_or_synthetic(args.dataset, n_users=2000, n_items=1000, max_len=200)
    split = leave_one_out(data)
    rows = []
    for name in args.variants:
        row = run_variant(name, split, data.n_items, args, device)
        rows.append(row)
        print(f"{name:45s} {row['s_per_epoch']:7.1f} s/epoch (first {row['first_epoch']:.1f})  "
              f"valid NDCG@10 {row['ndcg@10']:.4f}", flush=True)
    ref = next((r["s_per_epoch"] for r in rows if r["variant"].startswith("reference")), math.nan)
    lines = [
        f"SASRec on {data.name} (max_len {args.max_len}, batch {args.batch_size}, d {args.d_model}, 2 heads, "
        f"2 blocks, full CE), {args.epochs} epochs per variant from the same initialisation; validation = "
        f"full ranking, all users. s/epoch: mean over the epochs after the first (which includes "
        f"torch.compile's compilation where it applies).",
        "",
        "| variant | first epoch (s) | s/epoch | speed-up vs reference | valid HR@10 | valid NDCG@10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        speed_up = "—" if math.isnan(ref) else f"{ref / r['s_per_epoch']:.2f}x"  # no reference variant was run
        lines.append(f"| {r['variant']} | {r['first_epoch']:.1f} | {r['s_per_epoch']:.2f} | "
                     f"{speed_up} | {r['hr@10']:.4f} | {r['ndcg@10']:.4f} |")
    publish_table(lines, args.out, commit=commit, device=device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
