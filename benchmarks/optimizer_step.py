"""Milliseconds per Adam step for each implementation torch offers, on real model parameter shapes.

The trainer builds its optimizer with ``tutorial_lib.training.optimizer.make_adam`` (fused kernel first).
This benchmark shows why: for each catalogue size it builds the model, gives every parameter a random
gradient and times ``optimizer.step()`` with the plain per-tensor loop (PyTorch's CPU default), the
multi-tensor ``foreach`` path and the ``fused`` kernel.

    python benchmarks/optimizer_step.py                      # SASRec at ML-1M, Beauty and Video sizes
    python benchmarks/optimizer_step.py --model rksa --out results/benchmarks/optimizer_step.md

Prints a Markdown table (and writes it with its provenance when ``--out`` is given).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from tutorial_lib.experiments.results import publish_table
from tutorial_lib.models import build_model
from tutorial_lib.training.optimizer import make_adam

#: catalogue sizes of the registry's datasets (data/README.md): ML-1M, Beauty (S3-Rec), Video Games
CATALOGUES = {"ml-1m": 3416, "beauty": 12101, "video": 23715}
IMPLEMENTATIONS = ("loop", "foreach", "fused")


def time_steps(model: torch.nn.Module, implementation: str, steps: int, seed: int) -> float:
    """Median milliseconds of one ``optimizer.step()`` over ``steps`` timed steps (after 3 warm-up steps)."""
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    opt = make_adam(params, lr=1e-3, betas=(0.9, 0.98), implementation=implementation)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--model", default="sasrec", help="registered model (default sasrec)")
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    lines = [f"Adam step of {args.model} (d 64, 2 blocks, max_len {args.max_len}), median of {args.steps} steps; "
             f"{torch.get_num_threads()} torch threads.", "",
             "| catalogue | parameters | " + " | ".join(f"{i} (ms)" for i in IMPLEMENTATIONS) + " | fused speed-up |",
             "|---|---:|" + "---:|" * (len(IMPLEMENTATIONS) + 1)]
    for name, n_items in CATALOGUES.items():
        model = build_model(args.model, n_items=n_items, max_len=args.max_len)
        n_params = sum(p.numel() for p in model.parameters())
        ms = {impl: time_steps(model, impl, args.steps, args.seed) for impl in IMPLEMENTATIONS}
        lines.append(f"| {name} ({n_items:,} items) | {n_params:,} | "
                     + " | ".join(f"{ms[i]:.2f}" for i in IMPLEMENTATIONS) + f" | {ms['loop'] / ms['fused']:.1f}x |")
        print(lines[-1], flush=True)
    publish_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
