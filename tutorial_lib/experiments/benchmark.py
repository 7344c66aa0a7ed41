"""The benchmark runner: every method on every dataset, resumable, one results store.

    python -m tutorial_lib benchmark --models all --datasets all --seeds 42 43 44 [--protocol full]
                                     [--time-budget SECONDS] [--dry-run]

* **Plan**: the models x datasets x seeds, each an :class:`ExperimentSpec` with the presets of
  :mod:`tutorial_lib.experiments.presets`. ``--models all`` is :data:`BENCHMARK_MODELS` (SASRec with CE and
  with BCE, LightSANs and -ape, PARec, FPARec, the five causal Locker variants, RKSA); a model can carry its
  loss after an ``@`` (``sasrec@bce``).
* **Resumable**: a run whose ``run_id`` already has a row in ``results/runs.csv`` is finished and skipped;
  an interrupted one continues from its checkpoint in ``runs/benchmark/`` (saved after every epoch).
* **Parallel invocations** may share the results file and the checkpoints: a run is checked against the results
  just before it starts, and a run being trained holds an operating-system lock on ``<checkpoint>.lock``, which
  other invocations skip; the system drops the lock of a process that dies, so its run is taken over.
* **Time budget**: no run starts after the budget is spent, and the running one pauses at the end of its
  epoch (its checkpoint keeps everything; the next invocation resumes it). Only finished runs get a row.
* **Trained models kept**: a finished run's checkpoint is deleted, and the weights it selected are kept in
  ``runs/models/<tag>_<run_id>.pt`` (:func:`~tutorial_lib.experiments.artifacts.load_trained` rebuilds it).
* **One store**: the rows (with the command, commit, hardware and versions) and the per-epoch curves in
  ``results/curves/``, the same format on CPU and GPU (device ``auto``).
"""
from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError, DatasetUnavailableError, did_you_mean
from ..models.registry import get_model_entry
from ..training.checkpoint import load_checkpoint
from ..training.trainer import NEGATIVES_WITH_FULL_CE
from ..utils.locks import HeldLock, try_hold
from .results import append_runs, curve_path, default_results_path, project_root, read_runs, write_curve
from .run import SYNTHETIC, ExperimentSpec, dataset_choices, run_experiment

#: (model, loss) pairs of the complete benchmark (issue: SASRec with BCE and CE, LightSANs, LightSANs-ape,
#: PARec, FPARec, the five causal Locker variants, RKSA)
BENCHMARK_MODELS: tuple[tuple[str, str], ...] = (
    ("sasrec", "ce"), ("sasrec", "bce"), ("lightsans", "ce"), ("lightsans-ape", "ce"), ("parec", "ce"),
    ("fparec", "ce"), ("locker-rnn", "ce"), ("locker-conv", "ce"), ("locker-win", "ce"), ("locker-initial", "ce"),
    ("locker-adapt", "ce"), ("rksa", "ce"),
)
BENCHMARK_DATASETS: tuple[str, ...] = ("ml-1m", "beauty", "sports", "toys", "yelp", "video")


def parse_models(names: Sequence[str], default_loss: str) -> list[tuple[str, str]]:
    """``["all"]`` or ``["sasrec", "sasrec@bce", ...]`` -> ``[(model, loss), ...]`` (names checked).

    With ``"all"``, ``default_loss`` replaces the CE of :data:`BENCHMARK_MODELS` (``--loss sampled-ce`` trains
    every method with sampled softmax on the sparse datasets); SASRec with BCE keeps BCE.
    """
    if list(names) == ["all"]:
        chosen = [(m, default_loss if loss == "ce" else loss) for m, loss in BENCHMARK_MODELS]
        return list(dict.fromkeys(chosen))
    _all_alone(names, "models")
    out = []
    for name in names:
        model, at, loss = name.lower().partition("@")
        get_model_entry(model)  # unknown names raise, listing the valid ones
        if at and not loss:
            raise ConfigError(f"--models {name}: name the loss after the @ ({model}@bce, ...), or leave out the @ "
                              f"for --loss")
        out.append((model, loss or default_loss))
    _once([f"{model}@{loss}" for model, loss in out], "model")
    return out


def _all_alone(names: Sequence[str], flag: str) -> None:
    """'all' means every one, so it cannot be listed beside names (it used to be reported as an unknown name)."""
    if any(n.strip().lower() == "all" for n in names):
        raise ConfigError(f"--{flag} 'all' stands alone (it means every one of them): give either 'all' or names, "
                          f"got {' '.join(names)}")


def parse_datasets(names: Sequence[str]) -> list[str]:
    """``["all"]`` (the benchmark's datasets) or names of :func:`dataset_choices`, lower-cased; every unknown name is
    reported at once."""
    if list(names) == ["all"]:
        return list(BENCHMARK_DATASETS)
    _all_alone(names, "datasets")
    valid = dataset_choices()
    bad = [n for n in names if n.strip().lower() not in valid]
    if bad:
        from ..data.registry import dataset_titles

        named = ", ".join(f"{n!r}{did_you_mean(n, valid, dataset_titles())}" for n in bad)
        raise ConfigError(f"unknown dataset(s): {named}; valid datasets are: {', '.join(sorted(valid))}")
    return _once([n.strip().lower() for n in names], "dataset")


def _once(names: list, kind: str) -> list:
    """``names`` unchanged, or :class:`ConfigError` when one is listed twice (its runs would be listed twice)."""
    repeated = sorted({str(n) for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{kind}(s) {', '.join(repeated)} listed more than once; give each once")
    return names


def plan(models: Sequence[tuple[str, str]], datasets: Sequence[str], seeds: Sequence[int],
         base: ExperimentSpec | None = None) -> list[ExperimentSpec]:
    """One spec per (dataset, model, seed), datasets outermost (a dataset is loaded once per invocation).

    ``base.model_options`` go to every model that has the option (``d_model`` to all, ``k`` to FPARec only).
    ``base.n_negatives`` goes to the models trained with ``base.loss`` (or to all when they share one loss), never
    to full cross-entropy: ``--loss sampled-ce --negatives 1024`` must not give SASRec with BCE 1,024 negatives
    per position.
    """
    base = base or ExperimentSpec()
    one_loss = len({loss for _, loss in models}) == 1
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ConfigError(f"seed(s) {repeated} listed more than once; give each seed once")
    known = set().union(*(get_model_entry(m).options() for m, _ in models))
    unknown = sorted(set(base.model_options) - known)
    if unknown:
        raise ConfigError(f"option(s) {unknown} belong to none of the models {sorted({m for m, _ in models})}; "
                          f"their options are: {', '.join(sorted(known))} (`python -m tutorial_lib models` lists "
                          f"each model's)")

    def options(model: str) -> dict:
        valid = get_model_entry(model).options()
        return {k: v for k, v in base.model_options.items() if k in valid}

    if base.n_negatives is not None and all(loss == "ce" for _, loss in models):
        raise ConfigError(NEGATIVES_WITH_FULL_CE)
    if base.mask_prob is not None and not any(replace(base, model=m).cloze for m, _ in models):
        raise ConfigError("mask_prob (--mask-prob) is for the cloze-trained models (bert4rec, bert4rec-locker-*), "
                          "and none is in the plan: every model listed predicts the next item and masks nothing")

    def negatives(loss: str) -> int | None:
        if loss == "ce":
            return None           # the full cross-entropy samples nothing
        return base.n_negatives if one_loss or loss == base.loss else None

    specs = [replace(base, model=m, loss=loss, dataset=d, seed=s, model_options=options(m), n_negatives=negatives(loss))
             for d in datasets for m, loss in models for s in seeds]
    checked: set[str] = set()
    for spec in specs:        # impossible settings fail now, not hours later when their run comes up
        key = f"{spec.model} {spec.loss} {spec.resolved_max_len()} {spec.resolved_model_options()!r}"
        if key not in checked:  # each model once; missing data is the runner's check (a dry run lists it)
            spec.check(data=False)
            checked.add(key)
        else:
            spec.train_config()
    return specs


@dataclass
class RunProgress:
    """How far a partial run has got, read from its checkpoint."""
    epochs: int                    # epochs trained so far
    best_epoch: int                # the epoch with the best validation so far (0 before the first validation)
    best_valid: float | None       # the selection metric there (validation NDCG@10 unless the run selects otherwise)
    train_seconds: float
    training_pid: int | None       # the live process whose id its lock file holds: training it now; else None


@dataclass
class RunStatus:
    spec: ExperimentSpec
    state: str            # "done", "partial" (a checkpoint exists), "pending" or "no data" (its dataset is missing)
    checkpoint: Path
    row: dict | None = None
    progress: RunProgress | None = None   # for a partial run whose checkpoint could be read (``status(progress=True)``)
    unreadable: bool = False   # a partial run whose checkpoint is there but cannot be read (``status(progress=True)``)


def checkpoint_path(spec: ExperimentSpec, folder: Path) -> Path:
    """The run's checkpoint file in ``folder``: ``<tag>_<run_id>.pt``."""
    return folder / f"{spec.tag()}_{spec.run_id()}.pt"


def models_folder(checkpoints: Path) -> Path:
    """Where finished runs keep their selected model: ``runs/models`` beside ``runs/benchmark``."""
    return Path(checkpoints).parent / "models"


def status(specs: Sequence[ExperimentSpec], results: Path, checkpoints: Path,
           progress: bool = True) -> list[RunStatus]:
    """Which runs are finished (a row with their ``run_id``), partial (a checkpoint), pending, or cannot run
    because their dataset's files are missing ("no data", :func:`missing_data`); with ``progress``, how far each
    partial run has got (:func:`read_progress`)."""
    rows = {(r.get("run_id"), r.get("protocol")): r for r in read_runs(results) if r.get("run_id")}
    missing = missing_data(specs)
    out = []
    for spec in specs:
        ckpt = checkpoint_path(spec, checkpoints)
        row = rows.get((spec.run_id(), spec.protocol))
        state = ("done" if row else "no data" if spec.dataset in missing else "partial" if ckpt.exists()
                 else "pending")
        found = read_progress(ckpt) if progress and state == "partial" else None
        unreadable = progress and state == "partial" and found is None and ckpt.is_file()
        out.append(RunStatus(spec, state, ckpt, row, found, unreadable))
    return out


def missing_data(specs: Sequence[ExperimentSpec]) -> dict[str, tuple[str, ...]]:
    """The plan's datasets whose required files are not in their data directory: name -> the missing files."""
    from ..data.loading import missing_files

    out, seen = {}, set()
    for spec in specs:
        if spec.dataset != SYNTHETIC and (spec.dataset, spec.data_dir) not in seen:
            seen.add((spec.dataset, spec.data_dir))
            files = missing_files(spec.dataset, spec.data_dir)
            if files:
                out[spec.dataset] = files
    return out


def datasets_without_data(statuses: Sequence[RunStatus]) -> list[str]:
    """The datasets of the runs marked "no data", in plan order."""
    return list(dict.fromkeys(st.spec.dataset for st in statuses if st.state == "no data"))


def no_data_advice(datasets: Sequence[str], data_dir: str | None = None) -> str:
    """How to get the datasets a plan lacks into its data directory (``data_dir``: the specs' override)."""
    from ..data.paths import data_dir as resolve

    flag = f" --data-dir {shlex.quote(str(data_dir))}" if data_dir is not None else ""
    return (f"`python -m tutorial_lib datasets --download {' '.join(datasets)}{flag}` fetches them "
            f"(sha256-verified) into {resolve(data_dir)}, or leave them out of --datasets")


def read_progress(checkpoint: Path) -> RunProgress | None:
    """The epochs, best validation and training time a checkpoint holds, and whether a live process is training
    it (its lock file names one); ``None`` when the checkpoint cannot be read (it is never left half-written, but
    it may be removed by the run finishing meanwhile)."""
    try:
        state = load_checkpoint(checkpoint)
        best = state.get("best") or {}
        metric = float(best.get("metric", -math.inf))
        epochs, best_epoch = int(state["epoch"]), int(best.get("epoch", 0))
        train_seconds = float(state.get("train_seconds", 0.0))
    except Exception:   # noqa: BLE001 - a status display must not fail on one unreadable file
        return None
    return RunProgress(epochs=epochs, best_epoch=best_epoch, best_valid=metric if math.isfinite(metric) else None,
                       train_seconds=train_seconds, training_pid=live_lock_holder(lock_path(checkpoint)))


def live_lock_holder(lock: Path) -> int | None:
    """The process id written in a run's lock file when that process is alive, else ``None``.

    Read only: taking the lock to test it could make a starting runner skip the run. A runner removes its lock
    file when it finishes, so a file naming a dead process is a crash's leftover. On Windows, where a released
    lock file stays behind, this always returns ``None``.
    """
    if os.name == "nt":
        return None
    try:
        pid = int(Path(lock).read_text().strip())
        os.kill(pid, 0)
    except PermissionError:    # alive, owned by another user
        return pid
    except (OSError, ValueError):
        return None
    return pid


def summary(statuses: Sequence[RunStatus]) -> str:
    """A progress table: one line per run, then the counts and the training time spent so far."""
    lines = [f"{'dataset':14s} {'model':16s} {'loss':10s} {'seed':>4s}  {'state':8s} {'HR@10':>7s} {'NDCG@10':>8s}"
             f" {'s/epoch':>8s}"]
    spent = 0.0

    def num(row: dict, key: str, fmt: str) -> str:
        try:
            return format(float(row[key]), fmt)
        except (KeyError, TypeError, ValueError):
            return ""

    for st in statuses:
        s, r = st.spec, st.row or {}
        if r:
            spent += float(r.get("train_seconds") or 0.0)
        head = f"{s.dataset:14s} {s.model:16s} {s.loss:10s} {s.seed:4d}  {st.state:8s} "
        if st.progress is not None:
            lines.append(head + describe_progress(st.progress))
        elif st.unreadable:
            lines.append(head + f"its checkpoint cannot be read (damaged?): delete {st.checkpoint} and the run "
                                f"starts afresh")
        else:
            lines.append(head + f"{num(r, 'hr@10', '.4f'):>7s} {num(r, 'ndcg@10', '.4f'):>8s} "
                                f"{num(r, 'seconds_per_epoch', '.1f'):>8s}")
    counts = {k: sum(st.state == k for st in statuses) for k in ("done", "partial", "pending", "no data")}
    partial = sum(st.progress.train_seconds for st in statuses if st.progress is not None)
    lines.append(f"{len(statuses)} runs: {counts['done']} done, {counts['partial']} partial, {counts['pending']} pending"
                 + (f", {counts['no data']} without their data" if counts["no data"] else "")
                 + f"; {spent / 60:.1f} min of training in the finished runs"
                 + (f", {partial / 60:.1f} in the partial ones" if partial else ""))
    absent = datasets_without_data(statuses)
    if absent:
        lines.append(f"no data for {', '.join(absent)}: {no_data_advice(absent, statuses[0].spec.data_dir)}")
    return "\n".join(lines)


def describe_progress(p: RunProgress) -> str:
    """``epoch 33, best valid 0.0412 at 30, 3.7 min, training now (pid 1234)``: one partial run's line."""
    best = f"best valid {p.best_valid:.4f} at {p.best_epoch}" if p.best_valid is not None else "not validated yet"
    where = f"training now (pid {p.training_pid})" if p.training_pid is not None else "paused"
    return f"epoch {p.epochs}, {best}, {p.train_seconds / 60:.1f} min, {where}"


def lock_path(checkpoint: Path) -> Path:
    """``<checkpoint>.lock``: held by the process that trains the run."""
    return Path(checkpoint).with_suffix(".lock")


def claim_run(checkpoint: Path) -> HeldLock | None:
    """Hold ``<checkpoint>.lock`` (an operating-system lock; the file names this process id) and return it;
    ``None`` when another live process holds it (it is training this run). The system drops the lock of a
    process that dies, so a crashed invocation's run is simply taken over."""
    return try_hold(lock_path(checkpoint))


def check_time_budget(time_budget: float | None) -> None:
    """:class:`ConfigError` unless ``time_budget`` is None or a number of seconds >= 0 (NaN is not one)."""
    if time_budget is not None and not time_budget >= 0:
        raise ConfigError(f"time_budget (seconds of wall-clock time for the whole invocation) must be >= 0, "
                          f"got {time_budget}")


def run_benchmark(specs: Sequence[ExperimentSpec], command: str, time_budget: float | None = None,
                  results: Path | None = None, checkpoints: Path | None = None,
                  log: Callable[[str], None] = print) -> list[RunStatus]:
    """Run every unfinished spec in order, within ``time_budget`` seconds of wall-clock time.

    Returns the final status of every spec. Each finished run appends its row (with ``command``) and
    writes its curve; a run paused by the budget keeps its checkpoint for the next invocation. Whether a run is
    finished is read from ``results`` just before it would start, so two invocations whose plans overlap (one
    running the SASRec half of the other's plan, say) never train the same finished run twice.
    """
    check_time_budget(time_budget)
    results = Path(results) if results is not None else default_results_path()
    checkpoints = Path(checkpoints) if checkpoints is not None else project_root() / "runs" / "benchmark"
    absent = datasets_without_data(status(specs, results, checkpoints, progress=False))
    if absent:     # found now, not hours into the plan
        raise DatasetUnavailableError(f"the plan has unfinished runs on dataset(s) whose files are missing: "
                                      f"{', '.join(absent)}. Nothing was trained. "
                                      f"{no_data_advice(absent, specs[0].data_dir)}")
    checkpoints.mkdir(parents=True, exist_ok=True)
    deadline = None if time_budget is None else time.time() + time_budget
    data_cache: dict[str, object] = {}
    for planned in specs:
        # read afresh before each run: another invocation sharing the results file may have finished it meanwhile
        st = status([planned], results, checkpoints, progress=False)[0]
        if st.state == "done":
            continue
        if deadline is not None and time.time() >= deadline:
            log("time budget spent: stopping (rerun the same command to continue)")
            break
        spec = replace(st.spec, checkpoint=str(st.checkpoint), deadline=deadline)
        lock = claim_run(st.checkpoint)
        if lock is None:
            log(f"skipping {spec.model} ({spec.loss}) on {spec.dataset}, seed {spec.seed}: another process is "
                f"training it ({lock_path(st.checkpoint)})")
            continue
        try:
            log(f"{'resuming' if st.state == 'partial' else 'starting'} {spec.model} ({spec.loss}) on "
                f"{spec.dataset}, seed {spec.seed}, run {spec.run_id()}")
            data = data_cache.get(spec.dataset)
            if data is None:
                from .run import load_data

                data_cache.clear()  # keep one dataset in memory
                data = data_cache[spec.dataset] = load_data(spec)
            result = run_experiment(spec, dataset=data)
            if not result.train.finished:
                log(f"paused after epoch {result.train.epochs_run} (time budget); checkpoint {st.checkpoint}")
                break
            # the rows mark the run done, so they go last, all in one write: a crash before them resumes
            # from the checkpoint (already trained, so straight to evaluation) and rewrites curve and model
            write_curve(result.train.history, curve_path(results, spec.tag(), spec.run_id()))
            result.save_model(models_folder(checkpoints))
            append_runs(result.rows(command), results)
            Path(st.checkpoint).unlink(missing_ok=True)
        finally:
            lock.release()
        log(f"done: test HR@10 {result.test['hr@10']:.4f} NDCG@10 {result.test['ndcg@10']:.4f} "
            f"({result.train.epochs_run} epochs, {result.train.seconds_per_epoch:.1f} s/epoch, stopped: "
            f"{result.train.stop_reason})")
    return status(specs, results, checkpoints)


__all__ = ["BENCHMARK_MODELS", "BENCHMARK_DATASETS", "parse_models", "parse_datasets", "plan", "status", "summary",
           "run_benchmark", "claim_run", "read_progress", "missing_data", "RunStatus", "RunProgress"]
