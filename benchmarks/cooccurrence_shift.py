"""Do RKSA's co-occurrence statistics look the same in training and at test time?

RKSA's counts ``P_jl`` (users whose training items contain both ``j`` and ``l``) come from the training split,
which holds the user's own history. So in a training window every pair of items co-occurs at least once, by
the user alone, and so does every pair of the validation input (the training items). The test input ends with
the validation item, which was never counted with the user's history: its pairs carry the other users' counts
only. This script measures how far apart the two regimes are, with the plain counts (the default) and with the
user's own contribution left out (``leave_user_out=True``, RKSA's option), using the model's own lookup
(:class:`~tutorial_lib.attention.kernelized.CooccurrenceProvider`).

For each input (the most recent training window's inputs, the validation input, the test input; the latest
``max_len`` items) it reports, over the pairs of real items, the share with count 0 and with count 1, and, over
the query rows with at least one earlier item, the share that co-occur with none of the earlier items (for
such a row the shape bonus is 0 and the listwise target is skipped), for every row and for the newest item's
row (the one that predicts at evaluation).

    python benchmarks/cooccurrence_shift.py --dataset video --max-len 50 --out results/benchmarks/cooccurrence_shift.md

Prints a Markdown table (and writes it with its provenance when ``--out`` is given).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from tutorial_lib.attention import SequenceContext
from tutorial_lib.attention.kernelized import CooccurrenceProvider
from tutorial_lib.data import left_pad, leave_one_out, load_or_synthetic
from tutorial_lib.data.split import LeaveOneOutSplit
from tutorial_lib.experiments.results import git_commit, publish_table

INPUTS = ("training window", "validation input", "test input")


def model_input(split: LeaveOneOutSplit, user: int, which: str, max_len: int) -> np.ndarray:
    """The latest ``max_len`` items a model reads for ``user``: the most recent training window's inputs
    (the training items but the last, which is a target), or the validation or test input."""
    if which == "training window":
        return split.train[user][:-1][-max_len:]
    return split.history(user, "valid" if which == "validation input" else "test")[-max_len:]


def shift_statistics(split: LeaveOneOutSplit, provider: CooccurrenceProvider, which: str, max_len: int,
                     users: np.ndarray, batch_size: int = 256) -> dict[str, float]:
    """Shares of zero / one counts over the real pairs, and of rows that co-occur with no earlier item."""
    totals = dict.fromkeys(("pairs", "zero", "one", "rows", "rows_none", "newest", "newest_none"), 0)
    earlier = torch.ones(max_len, max_len, dtype=torch.bool).tril(-1)                   # [t, j]: j < t
    for start in range(0, len(users), batch_size):
        chunk = users[start:start + batch_size]
        ids = torch.from_numpy(left_pad([model_input(split, int(u), which, max_len) for u in chunk], max_len))
        ctx = SequenceContext.from_item_ids(ids, users=torch.from_numpy(chunk.astype(np.int64)))
        cooc = provider.batch(ctx)["cooc"]                                               # (B, L, L)
        valid = ctx.valid_mask
        pairs = valid[:, :, None] & valid[:, None, :] & earlier                         # real pairs j < t
        totals["pairs"] += int(pairs.sum())
        totals["zero"] += int((pairs & cooc.eq(0)).sum())
        totals["one"] += int((pairs & cooc.eq(1)).sum())
        has_earlier = pairs.any(-1)                                                     # (B, L) rows with keys
        none = has_earlier & ~(pairs & cooc.gt(0)).any(-1)
        totals["rows"] += int(has_earlier.sum())
        totals["rows_none"] += int(none.sum())
        totals["newest"] += int(has_earlier[:, -1].sum())
        totals["newest_none"] += int(none[:, -1].sum())
    def share(part: str, whole: str) -> float:
        return totals[part] / max(totals[whole], 1)

    return {"pairs": totals["pairs"], "zero": share("zero", "pairs"), "one": share("one", "pairs"),
            "rows_none": share("rows_none", "rows"), "newest_none": share("newest_none", "newest")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--dataset", default="video", help="registered dataset (falls back to synthetic)")
    parser.add_argument("--max-len", type=int, default=50, help="input window (RKSA: the latest 50 items)")
    parser.add_argument("--users", type=int, default=None, help="a random subset of this many users (default all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of that subset")
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    if args.max_len < 2 or (args.users is not None and args.users < 1):
        parser.error("--max-len must be at least 2 and --users at least 1")
    commit = git_commit()
    data = load_or_synthetic(args.dataset, n_users=1000, n_items=500, max_len=100)
    split = leave_one_out(data)
    users = np.flatnonzero(split.targets("test") > 0)
    if args.users is not None and args.users < len(users):
        users = np.sort(np.random.default_rng(args.seed).choice(users, args.users, replace=False))
    providers = {}
    for leave_out in (False, True):
        providers[leave_out] = CooccurrenceProvider(leave_user_out=leave_out)
        providers[leave_out].prepare(split)
    lines = [f"Co-occurrence counts RKSA reads on {data.name} ({len(users):,} users, the latest {args.max_len} items "
             "of each input): the training split's counts as they are (`plain`, the default) and with the user's own "
             "history left out (`leave_user_out=True`).", "",
             "| input | counts | real pairs | pairs with P = 0 | pairs with P = 1 | rows that co-occur with no "
             "earlier item | the newest item's row |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for which in INPUTS:
        for leave_out, provider in providers.items():
            s = shift_statistics(split, provider, which, args.max_len, users)
            lines.append(f"| {which} | {'leave_user_out' if leave_out else 'plain'} | {s['pairs']:,} | "
                         f"{s['zero']:.1%} | {s['one']:.1%} | {s['rows_none']:.1%} | {s['newest_none']:.1%} |")
            print(lines[-1], flush=True)
    publish_table(lines, args.out, commit=commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
