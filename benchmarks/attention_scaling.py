"""Efficiency lab: how each attention family's cost grows with the sequence length.

For every model (one per attention family and variant, or ``--models``) and every length ``L`` this
measures, for **one attention layer** (``y, w = attention(LN(x), ctx)`` on a ``(B, L, d)`` batch, the
module each method changes):

* forward + backward wall-clock time (median of ``--repeats`` runs after a warm-up),
* activation memory: bytes of the tensors autograd saves for the backward pass (deterministic,
  hardware independent; on CUDA the peak allocated memory is reported too),
* forward FLOPs counted by ``torch.utils.flop_counter`` (matrix products only; element-wise work such
  as LightSANs' prefix sums is not counted, which is why time and memory are measured as well),

plus the parameter count of the whole model. It prints a Markdown table, fits the growth exponent of
time and memory against ``L`` on the longest lengths (quadratic attention: about 2; linear: about 1),
checks the two claims of the LightSANs paper it must reproduce (Figure 2's quadratic versus linear
growth; Table 3: LightSANs-ape needs fewer FLOPs than SASRec), and saves a figure.

    python benchmarks/attention_scaling.py                               # CPU, every family, L = 50..2048
    python benchmarks/attention_scaling.py --device cuda --batch 64
    python benchmarks/attention_scaling.py --models sasrec lightsans --lengths 50 200 800 --out results/benchmarks/x
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from tutorial_lib.experiments.efficiency import growth_exponent, measure
from tutorial_lib.experiments.results import provenance_lines
from tutorial_lib.utils.device import hardware_description
from tutorial_lib.utils import atomic_write_text, resolve_device

#: ``name`` or ``name:option=value``; "sasrec:attn_dropout=0.2" is SASRec with dropout on the attention weights
#: (the TF code, RecBole), which forces PyTorch's explicit attention path that stores the L x L weights
DEFAULT_MODELS = ("sasrec", "sasrec:attn_dropout=0.2", "lightsans-ape", "lightsans", "parec", "fparec",
                  "pattern-exponential", "locker-conv", "locker-win", "locker-initial", "locker-adapt", "rksa")
DEFAULT_LENGTHS = (50, 100, 200, 400, 800, 1600, 2048)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--lengths", nargs="*", type=int, default=list(DEFAULT_LENGTHS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-items", type=int, default=3416)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--time-limit", type=float, default=20.0,
                        help="skip a model's longer lengths once one fwd+bwd takes longer than this (s)")
    parser.add_argument("--memory-limit", type=float, default=6.0,
                        help="skip a length whose activation memory, extrapolated quadratically, exceeds this (GiB)")
    parser.add_argument("--out", default=None, help="write <out>.md and <out>.png")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    torch.manual_seed(0)
    rows: list[dict] = []
    for name in args.models:
        previous = None
        for length in sorted(args.lengths):
            if previous is not None:
                grow = (length / previous["L"]) ** 2
                if previous["ms"] / 1000 * grow > args.time_limit * 4 or \
                        previous["activation_mib"] * grow / 1024 > args.memory_limit:
                    print(f"{name:22s} L={length:5d}  skipped (extrapolated beyond the time/memory limit)", flush=True)
                    rows.append({"model": name, "L": length, "skipped": True})
                    continue
            row = measure(name, length, args, device)
            rows.append(row)
            previous = row
            print(f"{name:22s} L={length:5d}  {row['ms']:9.1f} ms  {row['activation_mib']:9.1f} MiB saved  "
                  f"{row['gflops']:8.3f} GFLOPs  {row['params']:,} params", flush=True)
    table = render(rows, args, device)
    print("\n" + table)
    if args.out:
        out = Path(args.out)
        atomic_write_text(out.with_suffix(".md"), table + "\n")
        plot(rows, out.with_suffix(".png"), args, device)
        print(f"\nwrote {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return 0


def render(rows: list[dict], args: argparse.Namespace, device: torch.device) -> str:
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    lengths = sorted({r["L"] for r in rows})
    lines = [f"One attention layer, forward + backward, batch {args.batch}, d {args.d_model}, on "
             f"{hardware_description(device)}. Cells: milliseconds / MiB of activations saved for backward / forward "
             "GFLOPs (matrix products).", "",
             "| model | params (L=200) | " + " | ".join(f"L={n}" for n in lengths) + " | time growth | memory growth |",
             "|---|---:|" + "---:|" * len(lengths) + "---:|---:|"]
    for name, rs in by_model.items():
        done = [r for r in rs if not r.get("skipped")]
        p200 = next((r["params"] for r in done if r["L"] == 200), done[0]["params"] if done else 0)
        cells = []
        for n in lengths:
            r = next((r for r in rs if r["L"] == n), None)
            cells.append("—" if r is None or r.get("skipped") else
                         f"{r['ms']:.0f} / {r['activation_mib']:.0f} / {r['gflops']:.2f}")
        lines.append(f"| {name} | {p200:,} | " + " | ".join(cells) +
                     f" | L^{growth_exponent(done, 'ms'):.2f} | L^{growth_exponent(done, 'activation_mib'):.2f} |")
    lines += ["", *claims(by_model), "", *provenance_lines(device)]
    return "\n".join(lines)


def claims(by_model: dict[str, list[dict]]) -> list[str]:
    """The LightSANs paper's efficiency claims, checked on the measured rows."""
    out = []
    done = {name: [r for r in rs if not r.get("skipped")] for name, rs in by_model.items()}
    sas, ape = done.get("sasrec"), done.get("lightsans-ape")
    if sas and ape:
        pairs = [(a, b) for a in sas for b in ape if a["L"] == b["L"] and a["L"] >= 200]
        if pairs:
            fewer = all(b["gflops"] < a["gflops"] for a, b in pairs)
            ratio = ", ".join(f"L={a['L']}: {b['gflops'] / a['gflops']:.2f}x" for a, b in pairs)
            out.append(f"- Table 3 direction at the paper's ML-1M length and beyond (L >= 200; LightSANs-ape needs "
                       f"fewer FLOPs than SASRec): {'reproduced' if fewer else 'NOT reproduced'} ({ratio}).")
    explicit = done.get("sasrec:attn_dropout=0.2")
    for label, rows in (("SASRec with attention-weight dropout (explicit L x L weights)", explicit),
                        ("SASRec with PyTorch's fused attention", sas)):
        if rows and ape:
            e_s, e_a = growth_exponent(rows, "activation_mib"), growth_exponent(ape, "activation_mib")
            t_s, t_a = growth_exponent(rows, "ms"), growth_exponent(ape, "ms")
            out.append(f"- {label} vs LightSANs-ape: memory grows as L^{e_s:.2f} vs L^{e_a:.2f}, time as "
                       f"L^{t_s:.2f} vs L^{t_a:.2f}.")
    if explicit and ape:
        shape = growth_exponent(explicit, "activation_mib") > 1.5 and growth_exponent(ape, "activation_mib") < 1.3
        out.append(f"- Figure 2 shape (quadratic memory for SASRec as the paper ran it, linear for LightSANs): "
                   f"{'reproduced' if shape else 'NOT reproduced'}.")
    return out


def plot(rows: list[dict], path: Path, args: argparse.Namespace, device: torch.device) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    names = list(dict.fromkeys(r["model"] for r in rows))
    colours = plt.get_cmap("tab20").colors  # 20 distinct colours: no two models share one
    markers = "osD^vP*Xh<>p"
    for i, name in enumerate(names):
        rs = [r for r in rows if r["model"] == name and not r.get("skipped")]
        ls = [r["L"] for r in rs]
        style = "-" if name in ("sasrec", "lightsans", "lightsans-ape") else "--"
        for ax, key in zip(axes, ("ms", "activation_mib", "gflops")):
            ax.plot(ls, [r[key] for r in rs], style, color=colours[i % len(colours)], marker=markers[i % len(markers)],
                    markersize=4, label=name)
    for ax, title in zip(axes, ("forward + backward time (ms)", "activations saved for backward (MiB)",
                                 "forward GFLOPs (matrix products)")):
        ax.set(xscale="log", yscale="log", xlabel="sequence length L", title=title)
    axes[0].legend(fontsize=7, ncol=2, handlelength=3.5)  # long enough handles to show solid vs dashed
    fig.suptitle(f"One attention layer, batch {args.batch}, d {args.d_model}, {hardware_description(device)}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
