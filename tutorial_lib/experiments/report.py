"""Render ``results/runs.csv`` as Markdown and keep README's results section in sync with it.

    python -m tutorial_lib.experiments.report            # print the table
    python -m tutorial_lib.experiments.report --write    # rewrite README's section between the markers
    python -m tutorial_lib.experiments.report --check    # exit 1 when README is stale (used by a test)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .results import default_results_path, project_root, read_runs

START, END = "<!-- results:start -->", "<!-- results:end -->"

#: published numbers we compare with: (model, dataset, protocol, loss) -> (source, hr@10, ndcg@10)
PUBLISHED = {
    ("sasrec", "ml-1m", "full", "ce"): ("FPARec paper, Table 3 (SASRec, full ranking)", 0.2346, 0.1186),
    ("sasrec", "ml-1m", "sampled100", "bce"): ("SASRec paper, Table III (100 sampled negatives)", 0.8245, 0.5905),
}


def results_table(rows: list[dict[str, str]]) -> str:
    """One Markdown line per run, with the published number beside ours where we have one."""
    lines = [
        "| model | dataset | protocol | loss | seed | HR@10 | NDCG@10 | HR@20 | NDCG@20 | MRR | published HR@10 / NDCG@10 "
        "| best epoch / epochs | s/epoch | device |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        pub = PUBLISHED.get((r["model"], r["dataset"], r["protocol"], r["loss"]))
        pub_txt = f"{pub[1]:.4f} / {pub[2]:.4f} ({pub[0]})" if pub else "—"
        lines.append(
            f"| {r['model']} | {r['dataset']} | {r['protocol']} | {r['loss']} | {r['seed']} | "
            f"{float(r['hr@10']):.4f} | {float(r['ndcg@10']):.4f} | {float(r['hr@20']):.4f} | "
            f"{float(r['ndcg@20']):.4f} | {float(r['mrr']):.4f} | {pub_txt} | {r['best_epoch']} / {r['epochs']} | "
            f"{float(r['seconds_per_epoch']):.1f} | {r.get('hardware') or r['device']} |")
    return "\n".join(lines)


def render_section(results: Path | None = None) -> str:
    rows = read_runs(results or default_results_path())
    body = results_table(rows) if rows else "_No runs recorded yet._"
    return f"{START}\n{body}\n{END}"


def replace_section(text: str, section: str) -> str:
    if START not in text or END not in text:
        raise ValueError(f"README has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + section + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--readme", default=str(project_root() / "README.md"))
    args = parser.parse_args(argv)
    section = render_section()
    readme = Path(args.readme)
    if args.check:
        current = readme.read_text()
        if replace_section(current, section) != current:
            print(f"{readme} is out of date: run python -m tutorial_lib.experiments.report --write", file=sys.stderr)
            return 1
        return 0
    if args.write:
        readme.write_text(replace_section(readme.read_text(), section))
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
