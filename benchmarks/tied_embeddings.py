"""The repeat diagnosis of SASRec with tied and with separate (untied) input/output item tables.

Trains ``sasrec`` (tied, the paper's model) and ``sasrec-untied`` (the course's variant) from the same seed
for the same number of epochs, restores each one's best validation weights, and prints where each ranks
the item the user has just consumed (see ``tutorial_lib.evaluation.diagnostics``) together with test NDCG@10
with and without that one item in the ranking. The last four columns ask the same at the positions the
model is trained on (every position of every training window): where the input item ranks there, the
softmax probability it takes, and the share of the cross-entropy loss that this costs.

    python benchmarks/tied_embeddings.py                           # ML-1M (SEQREC_DATA_DIR) or synthetic
    python benchmarks/tied_embeddings.py --epochs 40 --out results/benchmarks/tied_embeddings.md
    python benchmarks/tied_embeddings.py --variant sasrec --variant sasrec:layout=tf,embedding_scale=false

``--variant NAME[:KEY=VALUE,...]`` (repeatable) diagnoses other registered models or options instead of the
default pair. ``--trained PATH`` (repeatable) diagnoses models that finished runs kept in ``runs/models/``
(the benchmark and ``train`` write them) instead of training any:

    python benchmarks/tied_embeddings.py --trained runs/models/sasrec_ml-1m_ce_full_s42_c98e650fa409.pt

Prints a Markdown table (and writes it with its provenance when ``--out`` is given).
"""
from __future__ import annotations

import argparse
import sys
import time


from tutorial_lib.options import parse_key_value
from tutorial_lib.data import leave_one_out, load_or_synthetic
from tutorial_lib.data.batching import TrainingWindows
from tutorial_lib.evaluation import Evaluator
from tutorial_lib.evaluation.diagnostics import input_item_diagnosis, last_item_diagnosis
from tutorial_lib.experiments.run import load_kept_models, options_text
from tutorial_lib.experiments.results import git_commit, publish_table
from tutorial_lib.models import build_model
from tutorial_lib.training import TrainConfig, Trainer
from tutorial_lib.utils import seed_everything

DEFAULT_VARIANTS = ("sasrec", "sasrec-untied")
TRAINING_HEADER = ("at training positions: median rank of the input item | input item in top 10 | "
                   "its probability | loss it costs (share of the loss)")


def training_cells(model, split, max_len: int) -> str:
    """The four training-position cells of a row (:func:`input_item_diagnosis` on every training window)."""
    t = input_item_diagnosis(model, TrainingWindows.from_train(split.train, max_len))
    return (f"{t['input_item_median_rank']:.0f} | {t['input_item_in_top10']:.1%} | "
            f"{t['input_item_probability']:.2%} | {t['input_item_loss']:.4f} ({t['input_item_loss'] / t['loss']:.1%})")


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """``"sasrec:layout=tf,embedding_scale=false"`` -> ``("sasrec", {"layout": "tf", "embedding_scale": False})``."""
    name, _, options = text.partition(":")
    return name, dict(parse_key_value(item) for item in options.split(",") if item)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--dataset", default="ml-1m", help="registered dataset (falls back to synthetic)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--variant", action="append", default=None, metavar="NAME[:KEY=VALUE,...]",
                        help="a model and its options (repeatable; default: sasrec and sasrec-untied)")
    parser.add_argument("--trained", action="append", default=None, metavar="PATH",
                        help="diagnose this kept model (runs/models/*.pt) instead of training (repeatable)")
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    commit = git_commit()  # the code that runs, even if the checkout changes while it trains
    if args.trained:
        return diagnose_trained(args.trained, args.out, commit)
    data = load_or_synthetic(args.dataset, n_users=1000, n_items=500, max_len=100)
    split = leave_one_out(data)
    evaluator = Evaluator(split, args.max_len)
    lines = [f"Repeat diagnosis on {data.name}, test users, full ranking with the history kept; each model trained "
             f"{args.epochs} epochs (CE, max_len {args.max_len}, dropout 0.2, seed {args.seed}), best validation "
             "NDCG@10 weights restored.", "",
             "| model | best epoch | median rank of the last input item | last input item in top 10 | "
             f"target = last input item | test NDCG@10 | NDCG@10 without the last input item | s/epoch | {TRAINING_HEADER} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for variant in args.variant or DEFAULT_VARIANTS:
        name, options = parse_variant(variant)
        seed_everything(args.seed)
        model = build_model(name, n_items=data.n_items, max_len=args.max_len, **{"dropout": 0.2, **options})
        config = TrainConfig(epochs=args.epochs, seed=args.seed, eval_every=2, patience=args.epochs, device="cpu",
                             progress=False, verbose=False)
        start = time.perf_counter()
        result = Trainer(model, split, config, evaluator).fit()
        seconds = (time.perf_counter() - start) / args.epochs
        d = last_item_diagnosis(evaluator, model, "test")
        lines.append(f"| {variant} | {result.best_epoch} | {d['last_item_median_rank']:.0f} | "
                     f"{d['last_item_in_top10']:.1%} | {d['target_is_last_item']:.1%} | {d['ndcg@10']:.4f} | "
                     f"{d['ndcg@10_without_last']:.4f} | {seconds:.1f} | {training_cells(model, split, args.max_len)} |")
        print(lines[-1], flush=True)
    publish_table(lines, args.out, commit=commit)
    return 0


def diagnose_trained(paths: list[str], out: str | None, commit: str) -> int:
    """The same table for models that finished runs kept (their own dataset, max_len and options)."""
    loaded, data, split = load_kept_models(paths)
    lines = [f"Repeat diagnosis on {data.name}, test users, full ranking with the history kept; models kept by "
             "finished runs (the weights each run selected on validation).", "",
             "| model | options | run | median rank of the last input item | last input item in top 10 | "
             f"target = last input item | test NDCG@10 | NDCG@10 without the last input item | {TRAINING_HEADER} |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model, meta in loaded:
        d = last_item_diagnosis(Evaluator(split, meta["max_len"]), model, "test")
        lines.append(f"| {meta['model']} | {options_text(meta['options'])} | {meta['run_id']} | {d['last_item_median_rank']:.0f} | "
                     f"{d['last_item_in_top10']:.1%} | {d['target_is_last_item']:.1%} | {d['ndcg@10']:.4f} | "
                     f"{d['ndcg@10_without_last']:.4f} | {training_cells(model, split, meta['max_len'])} |")
        print(lines[-1], flush=True)
    publish_table(lines, out, commit=commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
