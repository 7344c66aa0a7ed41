"""Tables generated from ``results/runs.csv``: README's results section and ``results/README.md``.

    python -m tutorial_lib.experiments.report            # print README's section
    python -m tutorial_lib.experiments.report --write    # rewrite README's section and results/README.md
    python -m tutorial_lib.experiments.report --check    # exit 1 when either is stale (a test runs this)
    python -m tutorial_lib.experiments.report --results my_runs.csv   # the tables of another results file

* **Main table**: the headline protocol (full ranking, history kept, all users; CE unless the
  model name says otherwise), mean ± std over seeds of test NDCG@10 and HR@10 per method and dataset,
  the best mean of each dataset in bold, the number of seeds in brackets when it is not 3. Where a method
  was trained with several budgets, validation chooses which one a cell shows (:func:`configuration_preference`).
* **Scorecard**: every published table cell (:mod:`tutorial_lib.experiments.published`) whose dataset we
  have, beside our number under *that paper's* protocol, with the difference and the reason where they
  differ, and the configuration of the model that validation prefers where it is another one.
* **Every run**: every row of the results file and its reruns (:data:`RERUNS`), in the order they were written,
  with its provenance.

When a run was repeated with the same ``run_id`` only its latest row counts; rows of older versions
(without ``run_id``) count as their own runs.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError
from ..models.registry import get_model_entry
from ..utils.io import atomic_write_text
from .published import PUBLISHED, Published, published
from .run import ExperimentSpec, options_text
from .results import default_results_path, project_root, read_runs
from .stats import mean_std, paired_ci

START, END = "<!-- results:start -->", "<!-- results:end -->"
HEADLINE = "full"
METRICS = ("hr@5", "ndcg@5", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")
#: our losses in the order the scorecard prefers them for a published cell whose paper does not say
LOSS_PREFERENCE = ("ce", "sampled-ce", "bce")
LOCKER_ENCODERS = ("rnn", "conv", "win", "initial", "adapt")


# ----------------------------------------------------------------------------- loading
#: rows on this dataset are demonstrations (``python -m tutorial_lib train`` without ``--dataset``), not results
DEMO_DATASET = "synthetic"


#: reruns of runs of a results file, beside it (``<folder of the file>/RERUNS``): each row repeats a run of the
#: file with the same settings (its ``run_id``) after a fix to the evaluator (validation drew the test's
#: negatives until 2026-11-27), so it replaces that run's row of its protocol in every table; rows of run ids the
#: file does not have are ignored. (The runner never repeats a run whose row exists in the file it writes to,
#: so a rerun's rows go to a file of their own.)
RERUNS = Path("ablations") / "validation_negatives.csv"

#: rows whose ``hardware`` the runner could not write right: run id -> where the run's epochs ran. The tables read
#: this instead of the row's ``hardware``; the rows themselves stay as the runner wrote them.
HARDWARE_CORRECTIONS = {
    # FPARec at max length 500 on ML-1M moved from a GPU to this CPU before rows could name both (since 2026-11-30
    # the trainer records every machine); read off the curves' seconds per epoch (about 4 on the GPU, 95-135 on
    # the CPU; results/benchmarks/gpu_checks_h200.md)
    "6d0412384d82": "cuda: NVIDIA H200 (epochs 1-174); cpu: AMD EPYC x1 threads (epochs 175-180)",
    "74b89a979abc": "cuda: NVIDIA H200 (epochs 1-174); cpu: AMD EPYC x1 threads (epochs 175-180)",
    "2e877c435365": "cuda: NVIDIA H200 (epochs 1-175); cpu: AMD EPYC x1 threads (epochs 176-180)",
    # seed 44 on Sports, PARec and Win: started and resumed on this CPU (one thread) from checkpoints written before
    # checkpoints recorded their machine, so the rows call the first epochs "not recorded"
    "c7b4210d5ef7": "cpu: AMD EPYC x1 threads",
    "33400aa821c0": "cpu: AMD EPYC x1 threads",
}


def reported_rows(path: Path | None = None) -> list[dict[str, str]]:
    """The rows of the results file that the documents report: every row except those on the synthetic data, so
    that a learner's first ``train`` run leaves README and ``results/README.md`` as they are, followed by the
    :data:`RERUNS` of its runs (which :func:`latest_runs` then keeps in their place)."""
    path = Path(path or default_results_path())
    rows = [r for r in read_runs(path) if r.get("dataset") != DEMO_DATASET]
    ids = {r["run_id"] for r in rows if r.get("run_id")}
    return rows + [r for r in read_runs(path.parent / RERUNS) if r.get("run_id") in ids]


def latest_runs(rows: list[dict[str, str]]) -> list[dict]:
    """One row per run (the latest for a ``run_id``), with numbers parsed and the corrected ``hardware`` of a
    :data:`HARDWARE_CORRECTIONS` run."""
    keep: dict[tuple, dict] = {}
    for i, r in enumerate(rows):
        key = (r.get("run_id") or f"legacy-{i}", r.get("protocol"))  # one trained model may be ranked several ways
        keep[key] = r
    out = []
    for r in keep.values():
        parsed = dict(r)
        if r.get("run_id") in HARDWARE_CORRECTIONS:
            parsed["hardware"] = HARDWARE_CORRECTIONS[r["run_id"]]
        for k in (*METRICS, "seconds_per_epoch", "train_seconds", "valid_ndcg@10"):
            try:
                parsed[k] = float(r[k]) if r.get(k) not in (None, "") else math.nan
            except ValueError:
                parsed[k] = math.nan
        out.append(parsed)
    return out


def method_label(model: str, loss: str) -> str:
    """How a method is named in the tables: the model, with its loss when it is not cross-entropy."""
    return model if loss in ("ce", "") else f"{model} ({loss})"


def run_label(run: dict, base: ExperimentSpec | None = None) -> str:
    """:func:`method_label` of a results row, with what the run changed from the presets of the model on that
    dataset: ``L=<max_len>`` and each model option set otherwise (``"sasrec (bce, n_heads=1)"``). So a run in
    another paper's setting (SASRec at 50 on ML-1M for the RKSA comparison, one head) is its own method and
    never replaces the default configuration in the tables. A model registered as a preset of another is named
    as that model with its options (``rksa-c`` as ``"rksa (bce, kernels=c)"``).

    ``base``: label relative to these settings instead of the presets (a results file whose runs all share some
    overrides, such as a notebook's tiny live benchmark, then names its methods plainly)."""
    label = method_label(run["model"], run.get("loss") or "")
    try:
        model, implied = get_model_entry(run["model"]).preset_of()   # rksa-c: rksa with kernels=c
        spec = replace(base or ExperimentSpec(model=model), model=model, dataset=run["dataset"])
        default_len, preset = spec.resolved_max_len(), spec.resolved_model_options()
    except (KeyError, ValueError):  # a model or dataset this version no longer knows
        return label
    label = method_label(model, run.get("loss") or "")
    changes = []
    try:
        used = int(float(run.get("max_len") or ""))
        if used != default_len:
            changes.append(f"L={used}")
    except ValueError:
        pass
    ran = {**{k: str(v) for k, v in implied.items()},
           **key_values(run.get("options"))}
    # an option a row does not record, or records at the base model's default, is not a change
    preset_text = {k: str(v) for k, v in {**get_model_entry(model).options(), **preset}.items()}
    changes += [f"{k}={v}" for k, v in sorted(ran.items()) if v != preset_text.get(k)]
    decay = lr_decay_of(run)   # a training schedule that changes the method, unlike the budget (epochs, patience)
    if decay != spec.lr_decay:
        changes.append(f"lr_decay={decay}")
    schedule = lr_schedule_of(run)
    if schedule != spec.lr_schedule:
        changes.append(f"lr_schedule={schedule}")
    windows = windows_of(run)  # so does the data it trains on
    if windows != spec.window_sampling:
        changes.append(f"windows={windows}")
    if not changes:
        return label
    return f"{label[:-1]}, {', '.join(changes)})" if label.endswith(")") else f"{label} ({', '.join(changes)})"


def key_values(text: str | None) -> dict[str, str]:
    """``"k=40 dropout=0.2"`` (a row's ``options`` or ``training``) -> ``{"k": "40", "dropout": "0.2"}``."""
    return dict(kv.split("=", 1) for kv in (text or "").split() if "=" in kv)


def lr_decay_of(run: dict) -> int | None:
    """The ``lr_decay`` a row's run trained with (``None``: a constant learning rate)."""
    decay = key_values(run.get("training")).get("lr_decay")
    return int(decay) if decay is not None else None


def lr_schedule_of(run: dict) -> str:
    """The learning-rate schedule a row's run trained with (``"constant"`` unless ``training`` names one)."""
    return key_values(run.get("training")).get("lr_schedule", "constant")


def windows_of(run: dict) -> str:
    """The training windows a row's run drew (``"recent"`` unless ``training`` names others)."""
    return key_values(run.get("training")).get("windows", "recent")


def is_variant(label: str, run: dict) -> bool:
    """Whether ``label`` (of ``run``) names a configuration other than the presets (see :func:`run_label`)."""
    loss = run.get("loss") or ""
    return label not in (method_label(run["model"], loss), method_label(run["model"], "ce"))


def config_key(run: dict) -> str:
    """Everything that defines a run except its seed: runs with the same key are seeds of one configuration."""
    if run.get("training"):
        return " | ".join([run.get("max_len", ""), run.get("options", ""), run["training"]])
    command = re.sub(r"--seed\s+\S+", "", run.get("command", ""))          # rows written before run ids
    return " | ".join([run.get("max_len", ""), run.get("options", ""), command])


def selected_on(run: dict) -> str:
    """The protocol whose validation chose the run's weights: its own, unless the row is one of a run's
    ``--also-protocols`` rows (``select=<protocol>`` in ``training``)."""
    found = re.search(r"\bselect=(\S+)", run.get("training") or "")
    return found.group(1) if found else run.get("protocol", "")


def grouped(runs: list[dict], protocol: str, base: ExperimentSpec | None = None) -> dict[tuple[str, str], list[dict]]:
    """Runs of ``protocol`` grouped by (method label, dataset); when a method was run on a dataset with
    several configurations (budgets of one label), only the seeds of one are kept, chosen by
    :func:`configuration_preference`: validation decides, never the test numbers."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if r.get("protocol") == protocol:
            out.setdefault((run_label(r, base), r["dataset"]), []).append(r)
    for key, rs in out.items():
        configs: dict[str, list[dict]] = {}
        for r in rs:
            configs.setdefault(config_key(r), []).append(r)
        out[key] = max(configs.values(), key=lambda seeds: configuration_preference(seeds, protocol))
    return out


def configuration_preference(seeds: list[dict], protocol: str) -> tuple:
    """Sort key of one configuration's rows (its seeds) among the configurations of a method on a dataset, the
    preferred one largest.

    First the protocol whose validation chose the weights: this one, then the headline's, then any other (its
    name, so that validation numbers are only ever compared under one protocol). Then the mean validation
    NDCG@10 over the seeds (a configuration whose rows do not record it comes last), then the most recent run."""
    chosen_on = selected_on(seeds[0])
    return (chosen_on == protocol, chosen_on == HEADLINE, chosen_on, mean_validation(seeds),
            max(r.get("date", "") for r in seeds))


def mean_validation(seeds: list[dict]) -> float:
    """Mean best validation NDCG@10 of one configuration's rows; ``-inf`` when a row does not record it (rows
    written before the column existed), so that such a configuration is never preferred on validation."""
    valid = [r.get("valid_ndcg@10", math.nan) for r in seeds]
    return -math.inf if any(math.isnan(v) for v in valid) else sum(valid) / len(valid)


SAMPLED = "sampled-ce"
SAMPLED_MARK = "‡"
OTHER_SELECTION_MARK = "°"


def folded_label(run: dict, base: ExperimentSpec | None = None) -> str:
    """:func:`run_label`, with a sampled-softmax run named as its method's cross-entropy run."""
    return run_label({**run, "loss": "ce"} if run.get("loss") == SAMPLED else run, base)


def benchmark_groups(runs: list[dict], protocol: str,
                     base: ExperimentSpec | None = None) -> tuple[dict[tuple[str, str], list[dict]], set]:
    """:func:`grouped`, with sampled-softmax runs counted as their method's cross-entropy runs.

    The complete benchmark trains with sampled softmax where full CE is too slow (the sparse datasets), so a
    method has one row in the main table whatever the dataset. Where a method has both a CE and a
    sampled-softmax configuration on a dataset, the cell shows the loss that most methods on that dataset
    used (CE on a tie): the one its neighbours in the column are comparable with. Returns the groups and the
    ``(label, dataset)`` cells whose runs used sampled softmax.
    """
    groups = grouped(runs, protocol, base)
    folded: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (_, dataset), rs in groups.items():
        folded.setdefault((folded_label(rs[0], base), dataset), {})[rs[0].get("loss") or ""] = rs
    votes: dict[str, int] = {}  # per dataset: methods run with sampled softmax only minus those with CE only
    for (_, dataset), by_loss in folded.items():
        votes[dataset] = votes.get(dataset, 0) + (SAMPLED in by_loss) - ("ce" in by_loss)
    out, marked = {}, set()
    for key, by_loss in folded.items():  # one loss, or both CE and sampled softmax
        loss = next(iter(by_loss)) if len(by_loss) == 1 else SAMPLED if votes[key[1]] > 0 else "ce"
        out[key] = by_loss[loss]
        if loss == SAMPLED:
            marked.add(key)
    return out, marked


# ----------------------------------------------------------------------------- tables
def _method_order(labels: set[str]) -> list[str]:
    """The complete benchmark's order (SASRec first, then each chapter's methods), other labels after it."""
    from .benchmark import BENCHMARK_MODELS

    known = [method_label(m, loss) for m, loss in BENCHMARK_MODELS]
    rank = {label: i for i, label in enumerate(known)}
    return sorted(labels, key=lambda m: (rank.get(m, len(known)), m.split()[0] != "sasrec", m))


def main_table(runs: list[dict], protocol: str = HEADLINE, metrics: tuple[str, ...] = ("ndcg@10", "hr@10"),
               variants: bool = False, base: ExperimentSpec | None = None) -> str:
    """Methods x datasets, ``mean ± std`` of each metric over seeds, best mean per dataset in bold; cells
    trained with sampled softmax instead of full CE carry a double dagger (see :func:`benchmark_groups`).

    Only the presets' configurations, or with ``variants=True`` only the others (another sequence length or
    model options; see :func:`run_label`) with a column giving each row's training budget (a label says what a
    run changed in the method, not how long it trained; see :func:`row_budget`). Cells whose weights were
    selected on another protocol's validation (a run's ``--also-protocols`` rows, used only where no run was
    selected on this one) get a °.
    ``base``: the settings the labels are relative to instead of the presets (see :func:`run_label`)."""
    groups, sampled = benchmark_groups(runs, protocol, base)
    groups = {k: rs for k, rs in groups.items() if is_variant(k[0], rs[0]) == variants}
    if not groups:
        return f"_No {protocol} runs {'in other configurations ' if variants else ''}recorded yet._"
    methods = _method_order({m for m, _ in groups})
    datasets = sorted({d for _, d in groups})
    lines = []
    for metric in metrics:
        best = {d: max((mean_std([r[metric] for r in groups[(m, d)]])[0] for m in methods if (m, d) in groups),
                       default=math.nan) for d in datasets}
        lines += [f"**Test {metric.upper()}** ({protocol} ranking; mean ± std over seeds, [n] = number of seeds "
                  "when not 3)", "", "| method | " + ("budget | " if variants else "") + " | ".join(datasets) + " |",
                  "|---|" + ("---|" if variants else "") + "---:|" * len(datasets)]
        for m in methods:
            cells = []
            for d in datasets:
                rs = groups.get((m, d))
                if not rs:
                    cells.append("—")
                    continue
                mean, std, _ = mean_std([r[metric] for r in rs])
                text = f"{mean:.4f} ± {std:.4f}" if len(rs) > 1 else f"{mean:.4f}"
                if len(rs) != 3:
                    text += f" [{len(rs)}]"
                text += SAMPLED_MARK if (m, d) in sampled else ""
                text += OTHER_SELECTION_MARK if any(selected_on(r) != protocol for r in rs) else ""
                cells.append(f"**{text}**" if mean == best[d] else text)
            budget = [row_budget({d: groups[(m, d)] for d in datasets if (m, d) in groups})] if variants else []
            lines.append(f"| {m} | " + " | ".join(budget + cells) + " |")
        lines.append("")
    other = sorted({selected_on(r) for rs in groups.values() for r in rs} - {protocol})
    if other:
        lines.append(f"{OTHER_SELECTION_MARK} weights selected on the validation of another protocol "
                     f"({', '.join(f'`{p}`' for p in other)}: the run was made for that protocol's comparison) and "
                     "ranked under this one.")
    if sampled & set(groups):
        negatives = sorted({_negatives(r) for key in sampled & set(groups) for r in groups[key]} - {""})
        lines += [""] if other else []
        lines.append(f"{SAMPLED_MARK} trained with sampled softmax ({' / '.join(negatives) or 'N'} shared uniform "
                     "negatives per batch) instead of full cross-entropy.")
    mixed = {} if variants else mixed_budgets(groups)
    if mixed:
        lines += [""] if other or sampled & set(groups) else []
        lines.append("Training budgets (epoch cap at a batch size; early stopping may end a run sooner) differ "
                     "within a column, so its cells are not all comparable: " + "; ".join(
                         f"{dataset}: " + ", ".join(f"{budget} ({', '.join(methods)})"
                                                    for budget, methods in by_budget.items())
                         for dataset, by_budget in mixed.items()) + ". The \"Equal budget\" table of "
                     "results/README.md compares methods trained alike.")
    return "\n".join(lines).rstrip()


def training_budget(run: dict) -> str:
    """``"60 epochs at batch 32"``: a row's epoch cap and batch size from its ``training`` settings
    (``"budget not recorded"`` for a row written before they were)."""
    settings = key_values(run.get("training"))
    if "epochs" not in settings and "batch_size" not in settings:
        return "budget not recorded"
    return f"{settings.get('epochs', '?')} epochs at batch {settings.get('batch_size', '?')}"


def row_budget(cells: dict[str, list[dict]]) -> str:
    """The :func:`training_budget` of one table row (dataset -> its cell's runs): one budget, or each budget
    with the datasets (and, where the seeds of a cell differ, the seeds) trained with it."""
    where: dict[str, list[str]] = {}
    for dataset, rs in cells.items():
        budgets = {training_budget(r) for r in rs}
        for r in sorted(rs, key=lambda r: (len(str(r.get("seed"))), str(r.get("seed")))):   # 9 before 10
            name = dataset if len(budgets) == 1 else f"{dataset} seed {r.get('seed')}"
            names = where.setdefault(training_budget(r), [])
            if name not in names:
                names.append(name)
    if len(where) == 1:
        return next(iter(where))
    return "; ".join(f"{budget} ({', '.join(names)})" for budget, names in where.items())


def mixed_budgets(groups: dict[tuple[str, str], list[dict]]) -> dict[str, dict[str, list[str]]]:
    """For each dataset whose cells were trained with more than one :func:`training_budget`: budget -> the
    methods trained with it, in the table's order (datasets sorted, budgets by epochs, then batch size)."""
    order = {label: i for i, label in enumerate(_method_order({m for m, _ in groups}))}
    by_dataset: dict[str, dict[str, list[str]]] = {}
    sort_key: dict[str, tuple[float, ...]] = {}   # budget -> (epochs, batch size); unknown values last
    for (label, dataset), rs in sorted(groups.items(), key=lambda item: order[item[0][0]]):
        for r in rs:
            budget = training_budget(r)
            settings = key_values(r.get("training"))
            sort_key[budget] = tuple(float(settings[k]) if settings.get(k, "").isdigit() else math.inf
                                     for k in ("epochs", "batch_size"))
            methods = by_dataset.setdefault(dataset, {}).setdefault(budget, [])
            if label not in methods:
                methods.append(label)
    return {d: dict(sorted(b.items(), key=lambda item: sort_key[item[0]]))
            for d, b in sorted(by_dataset.items()) if len(b) > 1}


def _negatives(run: dict) -> str:
    found = re.search(r"n_negatives=(\d+)", run.get("training") or "")
    return f"{int(found.group(1)):,}" if found else ""


def loss_comparison_table(runs: list[dict], protocol: str = HEADLINE) -> str:
    """Each method and dataset run with both full CE and sampled softmax: the quality and time the shortcut
    costs (mean over the seeds both losses have). ``""`` when no such pair exists."""
    groups = grouped(runs, protocol)
    lines = []
    for (label, dataset), sampled in sorted(groups.items()):
        if (sampled[0].get("loss") or "") != SAMPLED:
            continue
        method = folded_label(sampled[0])
        full = groups.get((method, dataset), [])
        seeds = {r.get("seed") for r in full} & {r.get("seed") for r in sampled}   # paired: the same seeds only
        if not seeds:
            continue
        full, sampled = ([r for r in rs if r.get("seed") in seeds] for rs in (full, sampled))
        cells = []
        for metric in ("hr@10", "ndcg@10"):
            ce, sm = (mean_std([r[metric] for r in rs])[0] for rs in (full, sampled))
            cells.append(f"{ce:.4f} | {sm:.4f} | {_relative(sm, ce)}")
        speed = [mean_std([r["seconds_per_epoch"] for r in rs])[0] for rs in (full, sampled)]
        total = [mean_std([r["train_seconds"] for r in rs])[0] / 60 for rs in (full, sampled)]
        epochs = [" / ".join(sorted({f"{r.get('best_epoch')}/{r.get('epochs')}" for r in rs}))
                  for rs in (full, sampled)]
        lines.append(f"| {method} | {dataset} | {', '.join(sorted(seeds))} | {_negatives(sampled[0])} | "
                     f"{' | '.join(cells)} | {speed[0]:.1f} / {speed[1]:.1f} | {total[0]:.0f} / {total[1]:.0f} | "
                     f"{epochs[0]} / {epochs[1]} |")
    if not lines:
        return ""
    head = ["| method | dataset | seeds | negatives | HR@10 CE | HR@10 sampled | change | NDCG@10 CE | NDCG@10 sampled "
            "| change | s/epoch CE / sampled | training min CE / sampled | best epoch / epochs CE / sampled |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    return "\n".join(head + lines)


def scorecard_rows(runs: list[dict], records: list[Published] | None = None,
                   elsewhere: Collection[tuple[str, str]] = ()) -> list[dict]:
    """Each published cell with a dataset here, beside ours under the paper's protocol. ``elsewhere``: the
    ``(model, dataset)`` pairs run only in the equal-budget comparison, which a cell without a run names."""
    records = PUBLISHED if records is None else records
    by_protocol = {p: grouped(runs, p) for p in {rec.protocol for rec in records}}
    out = []
    for rec in records:
        if rec.dataset is None:
            continue
        # a paper that does not say how its model was trained ("") is matched by our run under any loss; a CE
        # cell also by sampled softmax (the benchmark's loss on the sparse data), noted below
        losses = {"ce": ("ce", SAMPLED), "bce": ("bce",), "": LOSS_PREFERENCE}.get(rec.loss, ("ce",))
        labels = [(loss, label) for loss in losses
                  for label in (_paper_label(rec, loss, rec.training), _paper_label(rec, loss),
                                *(() if rec.base_model else (method_label(rec.model, loss),)))]
        found = [(loss, label, rs) for loss, label in dict.fromkeys(labels)
                 if (rs := by_protocol[rec.protocol].get((label, rec.dataset)))]
        loss, label, ours = found[0] if found else (losses[0], "", [])
        mean = mean_std([r[rec.metric] for r in ours])[0]
        reasons = []
        if not ours and (rec.model, rec.dataset) in elsewhere:
            reasons.append(f"not in results/runs.csv; run in the equal-budget comparison ({EQUAL_BUDGET.as_posix()})")
        elif not ours:   # an ablation cell waits for one setting only: name it
            reasons.append(f"not run yet in the paper's setting, {labels[0][1]}" if rec.base_model else "not run yet")
        elif math.isnan(mean):
            reasons.append(f"{rec.metric} is not recorded (results/runs.csv keeps HR/NDCG@10 and @20 and MRR)")
        if ours and loss != (rec.loss or "ce"):
            reasons.append(f"ours trained with {loss}")
        elif ours and loss == "ce" and by_protocol[rec.protocol].get((method_label(rec.model, SAMPLED), rec.dataset)):
            # the benchmark trains the sparse datasets with sampled softmax: the main table shows that run
            reasons.append("ours: the full cross-entropy run, as in the paper (the main table shows the "
                           "sampled-softmax one)")
        if ours and rec.training and label != _paper_label(rec, loss, rec.training):
            reasons.append("ours trained without the paper's " + ", ".join(f"{k}={v}" for k, v in rec.training))
        if ours and (rec.options or rec.max_len) and label == method_label(rec.model, loss):
            setting = ([f"max_len {rec.max_len}"] if rec.max_len else []) + [f"{k}={v}" for k, v in rec.options]
            reasons.append("ours at our presets (the paper's setting: " + ", ".join(setting) + ")")
        elif ours and label != method_label(rec.model, loss):
            reasons.append(f"ours: the run in the paper's setting, {label}")
        if ours and not rec.base_model:
            preferred = _preferred_elsewhere(by_protocol[rec.protocol], rec, ours)
            if preferred:
                other, rs = preferred
                n = f" [{len(rs)}]" if len(rs) != 1 else ""
                reasons.append(f"validation prefers {other}: {mean_std([r[rec.metric] for r in rs])[0]:.4f}{n}")
        if not rec.same_data:
            reasons.append("different dataset version")
        if rec.note:
            reasons.append(rec.note)
        out.append({"paper": rec.paper, "table": rec.table, "model": rec.model, "dataset": rec.dataset,
                    "protocol": rec.protocol, "metric": rec.metric, "published": rec.value, "ours": mean,
                    "seeds": len(ours), "diff": mean - rec.value, "reason": "; ".join(reasons)})
    return out


def _preferred_elsewhere(groups: dict[tuple[str, str], list[dict]], rec: Published,
                         ours: list[dict]) -> tuple[str, list[dict]] | None:
    """Another configuration of the cell's model (same loss, same dataset; a label of :func:`run_label`) whose mean
    validation NDCG@10 beats that of ``ours`` (the runs the cell compares: the paper's setting or our presets),
    both selected on the cell's protocol; the best such ``(label, runs)``, else ``None``. A scorecard cell keeps
    comparing like with like and names this one beside it, so that it agrees with the configuration docs/results.md
    reports as validation's pick."""
    if selected_on(ours[0]) != rec.protocol:
        return None
    others = [(label, rs) for (label, dataset), rs in groups.items()
              if dataset == rec.dataset and rs is not ours and rs[0]["model"] == rec.model
              and rs[0].get("loss") == ours[0].get("loss") and selected_on(rs[0]) == rec.protocol]
    best = max(others, key=lambda other: mean_validation(other[1]), default=None)
    return best if best and mean_validation(best[1]) > mean_validation(ours) else None


def _paper_label(rec: Published, loss: str, training: tuple[tuple[str, object], ...] = ()) -> str:
    """The label our run in the paper's setting (``rec.options`` over the presets, trained with ``training``)
    has; see :func:`run_label`."""
    model = rec.base_model or rec.model
    if rec.dataset is None or not (rec.options or training or rec.max_len):
        return method_label(model, loss)
    spec = ExperimentSpec(model=model, dataset=rec.dataset)
    try:
        options = {**spec.resolved_model_options(), **dict(rec.options)}
    except (KeyError, ValueError):
        return method_label(model, loss)
    return run_label({"model": model, "dataset": rec.dataset, "loss": loss, "max_len": rec.max_len or "",
                      "options": options_text(options),
                      "training": " ".join(f"{k}={v}" for k, v in training)})


def scorecard_table(runs: list[dict], only_run: bool = False, elsewhere: Collection[tuple[str, str]] = ()) -> str:
    """:func:`scorecard_rows` as a Markdown table; ``only_run`` keeps the cells that have a run, each comparison
    once."""
    rows = scorecard_rows(runs, elsewhere=elsewhere)
    if only_run:   # the cells with a run, each comparison once (an ablation's default cell repeats the main table's)
        rows = [r for r in rows if r["seeds"] and not math.isnan(r["ours"])]
        first = {}
        for r in rows:
            first.setdefault((r["paper"], r["dataset"], r["protocol"], r["metric"], r["published"], r["ours"]), r)
        rows = list(first.values())
    if not rows:
        return "_No published cell has a matching run yet._"
    lines = ["| paper (table) | model | dataset | protocol | metric | published | ours | difference | notes |",
             "|---|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        ours = "—" if math.isnan(r["ours"]) else f"{r['ours']:.4f}" + (f" [{r['seeds']}]" if r["seeds"] != 1 else "")
        diff = "—" if math.isnan(r["diff"]) else f"{r['diff']:+.4f} ({r['diff'] / r['published']:+.1%})"
        lines.append(f"| {r['paper']} ({r['table']}) | {r['model']} | {r['dataset']} | {r['protocol']} | {r['metric']} "
                     f"| {r['published']:.4f} | {ours} | {diff} | {r['reason']} |")
    return "\n".join(lines)


def _relative(value: float, base: float) -> str:
    return "—" if math.isnan(value) or math.isnan(base) or base == 0 else f"{value / base - 1:+.1%}"


def _paired_interval(values: list, base: list) -> str:
    """The paired 95% interval (Student's t over the seeds) of ``values - base``, in per cent of ``base``'s
    mean: ``"[-2.1, +0.4]%"``; ``"—"`` with fewer than two pairs (no interval from one seed)."""
    a, b = [float(v) for v in values], [float(v) for v in base]
    mean = mean_std(b)[0]
    if len(a) < 2 or math.isnan(mean) or mean == 0:
        return "—"
    ci = paired_ci(a, b)
    return f"[{100 * ci['low'] / mean:+.1f}, {100 * ci['high'] / mean:+.1f}]%"


LOCKER_PAIRS = [("sasrec", "bert4rec"), *((f"locker-{e}", f"bert4rec-locker-{e}") for e in LOCKER_ENCODERS)]


@dataclass
class _LockerData:
    """What both Locker tables read: our blocks (dataset, loss), our means, Locker's Table 1, the marks."""

    groups: dict[tuple[str, str], list[dict]]
    blocks: list[tuple[str, str]]
    paper: dict[tuple[str, str, str], float]
    marks: dict[tuple[str, str], str]   # (dataset, loss) -> "°" when a run shown was selected on another protocol

    def ours(self, model: str, dataset: str, loss: str) -> tuple[float, float, int]:
        """Mean HR@20 and NDCG@20 over the seeds of ``model``, and the number of seeds."""
        rs = self.runs(model, dataset, loss)
        return (*(mean_std([r[m] for r in rs])[0] for m in ("hr@20", "ndcg@20")), len(rs))

    def runs(self, model: str, dataset: str, loss: str) -> list[dict]:
        """Our runs (one per seed) of ``model`` trained with ``loss`` on ``dataset``."""
        return self.groups.get((method_label(model, loss), dataset), [])

    def change(self, model: str, dataset: str, loss: str) -> str:
        """``model``'s HR@20 / NDCG@20 change over the backbone, both averaged over the seeds both were run
        with (a seed-42 run is compared with the backbone's seed 42, not with its mean over more seeds)."""
        base = {r.get("seed"): r for r in self.runs("sasrec", dataset, loss)}
        mine = [r for r in self.runs(model, dataset, loss) if r.get("seed") in base]
        if not mine:
            return "— / —"
        theirs = [base[r.get("seed")] for r in mine]
        return " / ".join(_relative(mean_std([r[m] for r in mine])[0], mean_std([r[m] for r in theirs])[0])
                          for m in ("hr@20", "ndcg@20"))

    def theirs(self, dataset: str, model: str) -> tuple[float, float]:
        """Locker's Table 1 HR@20 and NDCG@20 of ``model`` on ``dataset`` (NaN where the paper has none)."""
        return tuple(self.paper.get((dataset, model, m), math.nan) for m in ("hr@20", "ndcg@20"))

    def note(self) -> list[str]:
        """Lines explaining the mark of runs selected on another protocol (none when no block has it)."""
        if not any(self.marks.values()):
            return []
        return ["", f"{OTHER_SELECTION_MARK} runs of the complete benchmark: weights selected on the validation of "
                "the headline protocol (`full`) and ranked here with the history removed."]


def _locker_data(runs: list[dict], protocol: str) -> _LockerData:
    groups = grouped(runs, protocol)
    paper = {(r.dataset, r.model, r.metric): r.value for r in published(paper="Locker", table="1")}
    blocks = set()
    for (label, dataset), rs in groups.items():
        model, loss = rs[0]["model"], rs[0].get("loss") or ""
        if model.startswith("locker-") and label == method_label(model, loss):   # the presets' configuration only
            blocks.add((dataset, loss))
    marks = {(d, loss): OTHER_SELECTION_MARK if any(selected_on(r) != protocol for m, _ in LOCKER_PAIRS
                                                    for r in groups.get((method_label(m, loss), d), [])) else ""
             for d, loss in blocks}
    return _LockerData(groups, sorted(blocks), paper, marks)


def locker_table(runs: list[dict], protocol: str = "full-nohist") -> str:
    """Each Locker encoder beside its own causal backbone (SASRec trained with the same loss), next to Locker's
    Table 1 (whose encoders sit on BERT4Rec): HR@20 / NDCG@20, and each model's change over its backbone.

    One block per dataset and loss with at least one ``locker-*`` run; mean over seeds, ``[n]`` seeds when
    not 1. Returns ``""`` when no Locker variant has been run.
    """
    data = _locker_data(runs, protocol)
    if not data.blocks:
        return ""
    lines = ["| dataset | loss | model | HR@20 | NDCG@20 | change over our SASRec | Locker: model | HR@20 | NDCG@20 "
             "| change over BERT4Rec |", "|---|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for dataset, loss in data.blocks:
        ref_hr, ref_nd = data.theirs(dataset, "bert4rec")
        for model, theirs in LOCKER_PAIRS:
            hr, nd, n = data.ours(model, dataset, loss)
            p_hr, p_nd = data.theirs(dataset, theirs)
            seeds = f" [{n}]" if n > 1 else ""
            mine = ("not run", "—") if n == 0 else (f"{hr:.4f}{seeds}", f"{nd:.4f}{seeds}")
            change = "backbone" if model == "sasrec" else data.change(model, dataset, loss)
            p_change = "backbone" if model == "sasrec" else f"{_relative(p_hr, ref_hr)} / {_relative(p_nd, ref_nd)}"
            p_cells = ["—", "—"] if math.isnan(p_hr) else [f"{p_hr:.4f}", f"{p_nd:.4f}"]
            lines.append(f"| {dataset}{data.marks[(dataset, loss)]} | {loss} | {model} | {mine[0]} | {mine[1]} | "
                         f"{change} | {theirs} | {' | '.join(p_cells)} | {p_change} |")
    return "\n".join(lines + data.note())


def locker_summary(runs: list[dict], protocol: str = "full-nohist") -> str:
    """:func:`locker_table` in one line per dataset: the backbone's HR@20 / NDCG@20 (mean over its seeds) and
    each encoder's change over it (over the seeds both were run with), with Locker's Table 1 (BERT4Rec
    backbone) below ours where it has the dataset."""
    data = _locker_data(runs, protocol)
    if not data.blocks:
        return ""
    head = " | ".join(e.capitalize() if e != "rnn" else "RNN" for e in LOCKER_ENCODERS)
    lines = [f"| dataset | backbone (loss) | seeds | backbone HR@20 / NDCG@20 | {head} |",
             "|---|---|---:|---:|" + "---:|" * len(LOCKER_ENCODERS)]
    for dataset, loss in data.blocks:
        base = data.ours("sasrec", dataset, loss)
        cells, seeds = [], {base[2]}
        for model, _ in LOCKER_PAIRS[1:]:
            n = data.ours(model, dataset, loss)[2]
            seeds.add(n)
            cells.append("not run" if n == 0 else data.change(model, dataset, loss))
        counts = sorted(seeds - {0})
        lines.append(f"| {dataset}{data.marks[(dataset, loss)]} | our SASRec ({loss}) | "
                     f"{'-'.join(map(str, dict.fromkeys([counts[0], counts[-1]]))) if counts else 0} | "
                     f"{'not run' if base[2] == 0 else f'{base[0]:.4f} / {base[1]:.4f}'} | {' | '.join(cells)} |")
        ref = data.theirs(dataset, "bert4rec")
        if not math.isnan(ref[0]):
            paper = [f"{_relative(hr, ref[0])} / {_relative(nd, ref[1])}"
                     for hr, nd in (data.theirs(dataset, theirs) for _, theirs in LOCKER_PAIRS[1:])]
            lines.append(f"| {dataset} | paper: BERT4Rec | — | {ref[0]:.4f} / {ref[1]:.4f} | {' | '.join(paper)} |")
    return "\n".join(lines + data.note())


#: RKSA configurations compared with SASRec besides the presets: ``(options, how the table names them)``
RKSA_VARIANTS = (("", ""), ("stochastic_rows=last", "last row only"),
                 ("leave_user_out=True", "user's own counts left out"), ("construction=exact", "exact skew-normal"),
                 ("shape_counts=normalized", "normalized shape counts"))


def rksa_pairs(runs: list[dict]) -> list[tuple[str, str, list[dict], list[dict]]]:
    """RKSA and the SASRec trained like it, per dataset and loss: ``(dataset, loss, sasrec_runs, rksa_runs)``
    (headline-protocol rows, one per seed). SASRec's configuration is RKSA's presets (one head, dropout 0.5,
    the latest 50 items) with BCE, the RKSA paper's shared setting, and the presets of each model with the
    other losses (the complete benchmark's comparison). Runs with a learning-rate decay are a pair of their own
    (loss ``"bce, lr decay 3"``), beside those with a constant rate, and so is each RKSA variant of
    :data:`RKSA_VARIANTS` against the same SASRec (``"bce, lr decay 3, last row only"``)."""
    groups = grouped(runs, HEADLINE)
    decays = sorted({lr_decay_of(r) for r in runs if r.get("model") == "rksa"}, key=lambda d: (d is not None, d))
    out = []
    for dataset in sorted({d for _, d in groups}):
        for loss in ("bce", SAMPLED, "ce"):
            like = {}
            if loss == "bce":   # SASRec with RKSA's presets
                spec = ExperimentSpec(model="rksa", dataset=dataset)
                like = {"max_len": spec.resolved_max_len(),
                        "options": " ".join(f"{k}={v}" for k, v in spec.resolved_model_options().items())}
            for decay in decays:
                schedule = {"training": f"lr_decay={decay}"} if decay is not None else {}
                base = groups.get((run_label({"model": "sasrec", "dataset": dataset, "loss": loss, **like,
                                              **schedule}), dataset), [])
                for options, named in RKSA_VARIANTS:
                    mine = groups.get((run_label({"model": "rksa", "dataset": dataset, "loss": loss, "options": options,
                                                  **schedule}), dataset), [])
                    if base and mine:
                        out.append((dataset, ", ".join([loss, *([f"lr decay {decay}"] if decay is not None else []),
                                                        *([named] if named else [])]), base, mine))
    return out


def rksa_table(runs: list[dict]) -> str:
    """RKSA beside its SASRec (:func:`rksa_pairs`) under ``full`` and ``sampled100`` ranking: HR@10 / NDCG@10,
    mean ± std over the seeds both were run with, RKSA's change over SASRec, and the RKSA paper's Table 2
    (``sampled100``, mean of 5 runs) where it has the dataset. ``""`` when no pair has been run."""
    by_run = {(r["run_id"], r["protocol"]): r for r in runs if r.get("run_id")}  # legacy rows: no link
    paper = {(rec.dataset, rec.model, rec.metric): rec.value for rec in published(paper="RKSA", table="2")}
    lines = ["| dataset | loss | protocol | seeds | SASRec HR@10 / NDCG@10 | RKSA HR@10 / NDCG@10 | change | "
             "paired 95% interval of the change | paper: SASRec | paper: RKSA |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for dataset, loss, base, mine in rksa_pairs(runs):
        seeds = sorted({r.get("seed") for r in base} & {r.get("seed") for r in mine})
        if not seeds:
            continue
        for protocol in ("full", "sampled100"):
            pair = [[next((r if protocol == HEADLINE else by_run.get((r.get("run_id"), protocol))
                           for r in rs if r.get("seed") == seed), None) for seed in seeds] for rs in (base, mine)]
            if any(r is None for rs in pair for r in rs):
                continue
            cells = []
            for rs in pair:
                stats = [mean_std([r[m] for r in rs]) for m in ("hr@10", "ndcg@10")]
                cells.append(" / ".join(f"{mean:.4f}" + (f" ± {std:.4f}" if len(rs) > 1 else "") for mean, std, _ in stats))
            per_metric = [([r[m] for r in pair[1]], [r[m] for r in pair[0]]) for m in ("hr@10", "ndcg@10")]
            change = " / ".join(_relative(mean_std(a)[0], mean_std(b)[0]) for a, b in per_metric)
            interval = " / ".join(_paired_interval(a, b) for a, b in per_metric)
            theirs = [" / ".join(f"{v:.4f}" for v in vals) if not any(map(math.isnan, vals)) else "—"
                      for vals in ([paper.get((dataset, m, k), math.nan) for k in ("hr@10", "ndcg@10")]
                                   for m in ("sasrec", "rksa"))]
            theirs = theirs if protocol == "sampled100" and loss.startswith("bce") else ["—", "—"]
            lengths = [str(rs[0].get("max_len") or "") for rs in (base, mine)]
            trained = loss if lengths[0] == lengths[1] else f"{loss} (SASRec L={lengths[0]}, RKSA L={lengths[1]})"
            lines.append(f"| {dataset} | {trained} | {protocol} | {len(seeds)} | {cells[0]} | {cells[1]} | {change} | "
                         f"{interval} | {theirs[0]} | {theirs[1]} |")
    return "\n".join(lines) if len(lines) > 2 else ""


RKSA_KERNELS = ("c", "i", "u", "ci", "cu", "iu", "ciu")


def rksa_kernel_table(runs: list[dict], loss: str = "bce") -> str:
    """RKSA's kernel subsets side by side (the paper's Table 3) on each dataset where two or more were trained
    the same way: validation NDCG@10 (what chooses a subset, docs/methods.md A11; best in bold), test HR@10 /
    NDCG@10 under ``sampled100`` (the paper's protocol) and ``full``, means over the seeds every subset shown
    was run with; the paper's Table 3 (HR@10, ``sampled100``, on data we do not have) beside. One group per
    dataset and learning-rate schedule (a constant rate, then each ``lr_decay`` the subsets were trained with:
    the schedule changes which subset validation picks). ``""`` when no dataset has two subsets."""
    groups = grouped(runs, HEADLINE)
    by_run = {(r["run_id"], r["protocol"]): r for r in runs if r.get("run_id")}  # legacy rows: no link
    table3 = published(paper="RKSA", table="3")
    paper_sets = list(dict.fromkeys(rec.paper_dataset for rec in table3))
    paper = {(rec.model, rec.paper_dataset): rec.value for rec in table3}

    def mean(rows: list[dict | None], metric: str) -> float:
        return mean_std([r[metric] if r else math.nan for r in rows])[0]

    lines = [f"| dataset [seeds] | kernels | valid NDCG@10 | sampled100 HR@10 | NDCG@10 | full HR@10 | NDCG@10 | "
             + " | ".join(f"paper: {name} HR@10" for name in paper_sets) + " |",
             "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(paper_sets)]
    decays = sorted({lr_decay_of(r) for r in runs if r.get("model", "").startswith("rksa")}, key=lambda d: d or 0)
    for dataset, decay in ((d, decay) for d in sorted({d for _, d in groups}) for decay in decays):
        schedule = {"training": f"lr_decay={decay}"} if decay is not None else {}
        found: dict[str, tuple[str, list[dict]]] = {}
        for k in RKSA_KERNELS:
            model = "rksa" if k == "ciu" else f"rksa-{k}"
            rs = groups.get((run_label({"model": model, "dataset": dataset, "loss": loss, **schedule}), dataset), [])
            first = next(iter(found.values()), (None, rs))[1][0] if rs else None
            if rs and rs[0].get("training") == first.get("training"):          # trained as the first one shown
                found[k] = (model, rs)
        seeds = set.intersection(*({r.get("seed") for r in rs} for _, rs in found.values())) if found else set()
        if len(found) < 2 or not seeds:
            continue
        rows = {}
        for k, (model, rs) in found.items():
            full = [r for r in rs if r.get("seed") in seeds]
            sampled = [by_run.get((r.get("run_id"), "sampled100")) for r in full]
            rows[k] = (model, mean(full, "valid_ndcg@10"), mean(sampled, "hr@10"), mean(sampled, "ndcg@10"),
                       mean(full, "hr@10"), mean(full, "ndcg@10"))
        best = max(v[1] for v in rows.values())
        for k, (model, valid, *tests) in rows.items():
            cells = [f"**{valid:.5f}**" if valid == best else f"{valid:.5f}", *(f"{v:.4f}" for v in tests),
                     *(f"{paper.get((model, name), math.nan):.4f}" for name in paper_sets)]
            name = dataset if decay is None else f"{dataset}, lr decay {decay}"
            lines.append(f"| {name} [{len(seeds)}] | {'+'.join(k.upper())} | " + " | ".join(cells) + " |")
    if len(lines) == 2:
        return ""
    return "\n".join(lines)


def _rksa_section(runs: list[dict]) -> list[str]:
    table = rksa_table(runs)
    return ["**RKSA against SASRec trained the same way** (BCE: the RKSA paper's shared setting, one head, dropout "
            "0.5, the latest 50 items, for both; sampled-ce: the complete benchmark, each model at its presets; "
            "mean ± std over the seeds both were run with; change = RKSA over SASRec, HR@10 / NDCG@10, with its "
            "paired 95% interval over those seeds (Student's t; an interval that contains 0 shows no difference "
            "beyond the seed noise)):",
            table] if table else []


def _kernel_section(runs: list[dict]) -> list[str]:
    table = rksa_kernel_table(runs)
    if not table:
        return []
    return ["**RKSA's kernel subsets** (BCE with one negative, the RKSA paper's setting; [n] = seeds every subset "
            "was run with; the subset is chosen on validation NDCG@10 (bold), the paper's Table 3 is on Beauty and "
            "MovieLens, data we do not have):", table]


def benchmark_cells(runs: list[dict], protocol: str = HEADLINE) -> dict[str, list[list[dict]]]:
    """The complete benchmark's cells: for each dataset of ``BENCHMARK_DATASETS``, the rows of each method of
    ``BENCHMARK_MODELS`` in that order (an empty list where the method has not run there)."""
    from .benchmark import BENCHMARK_DATASETS, BENCHMARK_MODELS

    groups, _ = benchmark_groups(runs, protocol)
    return {dataset: [groups.get((method_label(model, loss), dataset), []) for model, loss in BENCHMARK_MODELS]
            for dataset in BENCHMARK_DATASETS}


def benchmark_hardware(runs: list[dict], protocol: str = HEADLINE) -> str:
    """The machines the complete benchmark's runs trained on, as their rows record them, most runs first:
    ``AMD EPYC, 1 thread: 84 runs; Intel(R) Xeon(R) Processor @ 2.50GHz, 1 thread: 30 runs``."""
    def machine(row: dict) -> str:
        name = str(row.get("hardware") or "not recorded").removeprefix("cpu: ")
        return re.sub(r" x(\d+) threads?$", lambda m: f", {m[1]} thread{'s' if m[1] != '1' else ''}", name)

    counts = Counter(machine(r) for cells in benchmark_cells(runs, protocol).values() for rs in cells for r in rs)
    return "; ".join(f"{name}: {n} run{'s' if n != 1 else ''}"
                     for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def benchmark_progress(runs: list[dict], protocol: str = HEADLINE) -> str:
    """How much of the complete benchmark (every method of ``BENCHMARK_MODELS`` on every dataset of
    ``BENCHMARK_DATASETS``, at least one seed) has run, the training time it took, and an estimate of the rest
    from the finished runs of each dataset (their median; where a dataset has none, the median of its group,
    MovieLens or sparse, else of all runs)."""
    from .benchmark import BENCHMARK_DATASETS, BENCHMARK_MODELS
    from .presets import dataset_group

    lines = ["| dataset | methods run | runs (seeds) | training hours so far | estimated hours for the rest (1 seed) |",
             "|---|---:|---:|---:|---:|"]
    per_dataset: dict[str, tuple[list[float], int]] = {}
    for dataset, cells in benchmark_cells(runs, protocol).items():
        times = [r["train_seconds"] for rs in cells for r in rs if not math.isnan(r["train_seconds"])]
        per_dataset[dataset] = (times, sum(not rs for rs in cells))
    everything = [t for times, _ in per_dataset.values() for t in times]
    by_group: dict[str, list[float]] = {}
    for dataset, (times, _) in per_dataset.items():
        by_group.setdefault(dataset_group(dataset), []).extend(times)
    total_done = total_left = 0.0
    done_cells = 0
    for dataset, (times, missing) in per_dataset.items():
        typical = _median(times or by_group[dataset_group(dataset)] or everything)
        left = missing * typical / 3600
        done = len(BENCHMARK_MODELS) - missing
        done_cells += done
        total_done += sum(times) / 3600
        total_left += left
        lines.append(f"| {dataset} | {done} / {len(BENCHMARK_MODELS)} | {len(times)} | {sum(times) / 3600:.1f} | "
                     f"{'—' if math.isnan(left) else f'{left:.1f}'} |")
    cells = len(BENCHMARK_MODELS) * len(BENCHMARK_DATASETS)
    lines.append(f"| **all** | {done_cells} / {cells} | {len(everything)} | {total_done:.1f} | "
                 f"{'—' if math.isnan(total_left) else f'{total_left:.1f}'} |")
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    vals = sorted(values)
    if not vals:
        return math.nan
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def runs_table(rows: list[dict[str, str]]) -> str:
    """Every row of the results file, with its provenance."""
    if not rows:
        return "_No runs recorded yet._"
    lines = ["| model | dataset | protocol | loss | seed | HR@10 | NDCG@10 | HR@20 | NDCG@20 | MRR | best epoch / epochs "
             "| s/epoch | hardware | commit | run |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['dataset']} | {r['protocol']} | {r['loss']} | {r['seed']} | "
            f"{float(r['hr@10']):.4f} | {float(r['ndcg@10']):.4f} | {float(r['hr@20']):.4f} | "
            f"{float(r['ndcg@20']):.4f} | {float(r['mrr']):.4f} | {r['best_epoch']} / {r['epochs']} | "
            f"{float(r['seconds_per_epoch']):.1f} | {r.get('hardware') or r['device']} | {r.get('commit', '')} | "
            f"{r.get('run_id') or '—'} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- equal budget
EQUAL_BUDGET = Path("results") / "ablations" / "equal_budget.csv"


def equal_budget_table(runs: list[dict], baseline: str = "sasrec") -> str:
    """Every configuration of an equal-budget results file on one line per dataset: best validation NDCG@10,
    test HR@10 / NDCG@10 under full ranking with the change over ``baseline`` trained the same way (its runs
    with the same seeds: a method run with seed 43 only is compared with the baseline's seed-43 run), the same
    with the history removed and under ``sampled100``, seconds per epoch, and the FPARec paper's number for the
    model where its Table 3 or 4 has one (with that paper's change over its own SASRec)."""
    cells: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in runs:
        cells.setdefault((run_label(r), r["dataset"]), {}).setdefault(r["protocol"], []).append(r)
    full = {key: rows[HEADLINE] for key, rows in cells.items() if HEADLINE in rows}
    if not full:
        return "_No equal-budget runs recorded yet._"
    paper = {(rec.model, rec.dataset, rec.metric): rec.value for rec in PUBLISHED
             if rec.paper == "FPARec" and rec.table in ("3", "4") and rec.protocol == HEADLINE}

    def mean(rows: list[dict], metric: str) -> float:
        return mean_std([r[metric] for r in rows])[0]

    def pair(rows: list[dict] | None) -> str:
        return " / ".join(f"{mean(rows, m):.4f}" for m in ("hr@10", "ndcg@10")) if rows else "—"

    lines = ["| dataset | method | budget | valid NDCG@10 | full HR@10 / NDCG@10 | change over "
             f"{baseline} | full-nohist | sampled100 | s/epoch | FPARec paper | paper's change over its SASRec |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for dataset in sorted({d for _, d in full}):
        base = full.get((baseline, dataset))
        for label in _method_order({m for m, d in full if d == dataset}):
            rows = full[(label, dataset)]
            seeds = sorted({str(r.get("seed", "?")) for r in rows})
            budget = (f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}: "
                      + "; ".join(sorted({training_budget(r) for r in rows})))
            same_seeds = [r for r in base or [] if str(r.get("seed", "?")) in seeds]   # paired: the same seeds
            change = "—" if not same_seeds or label == baseline else " / ".join(
                _relative(mean(rows, m), mean(same_seeds, m)) for m in ("hr@10", "ndcg@10"))
            model = rows[0]["model"]
            theirs = [paper.get((model, dataset, m)) for m in ("hr@10", "ndcg@10")]
            base_theirs = [paper.get((baseline, dataset, m)) for m in ("hr@10", "ndcg@10")]
            published = "—" if None in theirs or label != model else " / ".join(f"{v:.4f}" for v in theirs)
            paper_change = "—" if published == "—" or None in base_theirs or model == baseline else " / ".join(
                _relative(v, b) for v, b in zip(theirs, base_theirs))
            other = cells[(label, dataset)]
            lines.append(f"| {dataset} | {label}{f' [{len(rows)}]' if len(rows) > 1 else ''} | {budget} | "
                         f"{mean(rows, 'valid_ndcg@10'):.4f} | {pair(rows)} | {change} | "
                         f"{pair(other.get('full-nohist'))} | {pair(other.get('sampled100'))} | "
                         f"{mean(rows, 'seconds_per_epoch'):.1f} | {published} | {paper_change} |")
    return "\n".join(lines)


def _equal_budget_runs() -> list[dict]:
    return latest_runs(read_runs(project_root() / EQUAL_BUDGET))


def _equal_budget_section(runs: list[dict]) -> list[str]:
    if not runs:
        return []
    return ["## Equal budget", "",
            f"Generated from `{EQUAL_BUDGET.as_posix()}`: each method trained with one budget, seed and setting (the "
            "rows' commands), so that the methods can be compared with each other, unlike the main table, whose "
            "cells keep their own budgets. The labels name what a run changed from the presets. The FPARec "
            "paper's numbers (Table 3, and Table 4 for the handcrafted patterns, whose formulas were lost: ours are "
            "documented choices) come from its authors' own budget (801 epochs) and, for FPARec on ML-1M, from "
            "max_len 500.", "",
            equal_budget_table(runs)]


# ----------------------------------------------------------------------------- documents
def render_section(results: Path | None = None) -> str:
    """README's generated section: the main table and the scorecard cells we have run."""
    runs = latest_runs(reported_rows(results))
    body = "\n\n".join([
        main_table(runs),
        *_loss_section(runs),
        *_progress_section(runs),
        "**Reproduction scorecard** (published cells we have run, under each paper's protocol; the full "
        "scorecard, other protocols and every run with its command are in [results/README.md](results/README.md)):",
        scorecard_table(runs, only_run=True),
        *_locker_section(runs),
        *_rksa_section(runs),
        *_kernel_section(runs),
    ])
    return f"{START}\n{body}\n{END}"


def _progress_section(runs: list[dict]) -> list[str]:
    return ["**How far the complete benchmark is** (every method of the main table's list on every dataset, "
            f"trained on the hardware its rows record ({benchmark_hardware(runs)}); epoch time only, the validation "
            "passes come on top; the estimate is the median finished run of the dataset, or of the sparse datasets "
            "where it has none):",
            benchmark_progress(runs)]


def _loss_section(runs: list[dict]) -> list[str]:
    table = loss_comparison_table(runs)
    if not table:
        return []
    return ["**Sampled softmax against full cross-entropy** (the same method, data, settings and seed trained both "
            "ways; the cost of the shortcut the sparse datasets use; full ranking):", table]


def _locker_section(runs: list[dict], table: str | None = None) -> list[str]:
    table = locker_summary(runs) if table is None else table
    if not table:
        return []
    return ["**Locker's local encoders against their backbone** (`full-nohist`: full ranking with the user's "
            "history removed, Locker's protocol; ours are causal SASRec-backbone models, the paper's sit on "
            "BERT4Rec; changes are HR@20 / NDCG@20 relative to each side's own backbone, ours over the seeds both "
            "were run with):", table]


def render_results_readme(results: Path | None = None) -> str:
    """The whole of ``results/README.md``, built from ``results`` (default ``results/runs.csv``; synthetic runs left
    out, the reruns in ``ablations/validation_negatives.csv`` beside it applied), except the equal-budget section,
    which always reads the project's ``results/ablations/equal_budget.csv``."""
    path = results or default_results_path()
    rows = reported_rows(path)
    runs = latest_runs(rows)
    equal_runs = _equal_budget_runs()
    protocols = sorted({r["protocol"] for r in runs} - {HEADLINE})
    locker = _locker_section(runs, locker_table(runs))
    parts = [
        "# Results",
        "",
        "Generated by `python -m tutorial_lib.experiments.report --write` from `results/runs.csv`, which only the "
        "CLI (`python -m tutorial_lib train`) and the benchmark runner (`python -m tutorial_lib benchmark`) write. "
        "Each row carries the exact command, the commit, the hardware and the library versions that produced it; "
        "per-epoch training curves are in `results/curves/<model>_<dataset>_<loss>_<protocol>_s<seed>_<run_id>.csv`. "
        "Speed and efficiency tables are in `results/benchmarks/`. Rows on the synthetic data (`train` without "
        "`--dataset`, a demonstration) are not reported. The rows of "
        f"`{(Path('results') / RERUNS).as_posix()}` rerun runs of `results/runs.csv` (same `run_id`) after a fix "
        "to the evaluator and replace their rows here.",
        "",
        "## Main table (headline protocol)",
        "",
        "Chronological leave-one-out, full ranking over all items with the user's history kept, all users, model "
        "selected by validation NDCG@10 with early stopping.",
        "",
        main_table(runs),
        "",
        "## Other configurations",
        "",
        "Runs whose sequence length or model options differ from the presets (another paper's setting, or an "
        "ablation), labelled with what they changed, beside the training budget each was run with (epoch cap at a "
        "batch size; early stopping may end a run sooner); the headline protocol.",
        "",
        main_table(runs, variants=True),
        *(["", "\n\n".join(loss)] if (loss := _loss_section(runs)) else []),
        "", "\n\n".join(_progress_section(runs)),
    ]
    for protocol in protocols:
        parts += ["", f"## Protocol `{protocol}`", "", main_table(runs, protocol)]
    parts += ["", "## Reproduction scorecard", "",
              "Every published table cell whose dataset we have, beside our number under that paper's protocol "
              "(mean over the seeds run, [n] = seeds). Cells of datasets we do not have (SASRec's Beauty, "
              "RecBole's Yelp and Books, RKSA's MovieLens, CiteULike and Steam) are listed in "
              "`tutorial_lib/experiments/published.py`.", "",
              scorecard_table(runs, elsewhere={(r["model"], r["dataset"]) for r in equal_runs}),
              *(["", "## Locker's encoders against their backbone", "", "\n\n".join(locker)] if locker else []),
              *(["", "## RKSA against SASRec", "", "\n\n".join(rksa)] if (rksa := _rksa_section(runs)) else []),
              *(["", "## RKSA's kernel subsets", "", "\n\n".join(kernels)] if (kernels := _kernel_section(runs))
                else []),
              *([""] + equal if (equal := _equal_budget_section(equal_runs)) else []),
              "", "## Every run", "", "In the order they were written; the reruns come last.", "",
              runs_table(rows), ""]
    return "\n".join(parts)


def replace_section(text: str, section: str) -> str:
    """``text`` with everything from its start marker to its end marker replaced by ``section`` (which carries
    the markers itself); ValueError when ``text`` lacks a marker."""
    if START not in text or END not in text:
        raise ValueError(f"README has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + section + tail


#: the columns every table reads
REPORTED_COLUMNS = ("model", "dataset", "protocol", "loss", "seed", "ndcg@10", "hr@10")


def _check_reportable(path: Path) -> None:
    """Raise :class:`ConfigError` when the results file's rows lack a column the tables read."""
    rows = read_runs(path)
    missing = [c for c in REPORTED_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise ConfigError(f"{path} has no {', '.join(missing)} column: the tables need it; name the results file "
                          f"that `python -m tutorial_lib train` or `benchmark` wrote")


def main(argv: list[str] | None = None) -> int:
    """Command line: print the README's results section, or ``--write`` / ``--check`` both generated files."""
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.experiments.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)   # --results must not silently mean --results-readme
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true",
                      help="rewrite README's results section (between its markers) and the results README")
    mode.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 when either file differs from what --write would write")
    parser.add_argument("--readme", default=str(project_root() / "README.md"),
                        help="the README whose results section is generated (default: the project's README.md)")
    parser.add_argument("--results-readme", default=str(project_root() / "results" / "README.md"),
                        help="the generated file of every table (default: results/README.md)")
    parser.add_argument("--results", help="print the tables of this results CSV (e.g. the file of `train --results "
                                          "my_runs.csv`) instead of the project's results/runs.csv; not with "
                                          "--write or --check, which always build from the project's file")
    args = parser.parse_args(argv)
    if args.results is not None and (args.write or args.check):
        parser.error("--results only prints another file's tables: the project's README and results/README.md "
                     "are always built from results/runs.csv (drop --results, or --write/--check)")
    readme, results_readme = Path(args.readme), Path(args.results_readme)
    results = Path(args.results) if args.results is not None else default_results_path()
    if not results.is_file():
        what = "is a folder" if results.is_dir() else "does not exist"
        parser.error(f"--results {results} {what}: the tables are built from a results CSV, which `python -m "
                     f"tutorial_lib train` and `benchmark` write (nothing was written, so no table was emptied)")
    if not readme.is_file():
        parser.error(f"--readme {readme}: no such file (the README whose results section this command writes)")
    if START not in readme.read_text() or END not in readme.read_text():
        parser.error(f"--readme {readme} has no {START} ... {END} markers: the results section goes between them")
    if results_readme.is_dir():
        parser.error(f"--results-readme {results_readme} is a folder; name the Markdown file to write")
    try:
        _check_reportable(results)
        section = render_section(results)
        full = render_results_readme(results)
    except ConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if args.check:
        stale = []
        if replace_section(readme.read_text(), section) != readme.read_text():
            stale.append(str(readme))
        if not results_readme.exists() or results_readme.read_text() != full:
            stale.append(str(results_readme))
        if stale:
            print(f"out of date: {', '.join(stale)}; run python -m tutorial_lib.experiments.report --write",
                  file=sys.stderr)
            return 1
        return 0
    if args.write:
        atomic_write_text(readme, replace_section(readme.read_text(), section))   # README is hand-written too:
        atomic_write_text(results_readme, full)                                   # never leave it half-written
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
