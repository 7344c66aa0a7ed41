"""Command line: ``python -m tutorial_lib {datasets,models,train,benchmark} ...``."""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import TextIO

from .errors import ConfigError, TutorialLibError
from .options import parse_key_value

EPILOG = "Without --dataset, `train` runs on the embedded synthetic data (offline, about a minute on a CPU)."


def parse_option(text: str) -> tuple[str, object]:
    """``key=value`` with the value parsed as int, float, bool or None when it looks like one."""
    try:
        return parse_key_value(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--option expects key=value, got {text!r}") from None


DESCRIPTION = ("Train, evaluate and benchmark the course's self-attentive sequential recommenders (SASRec, "
               "LightSANs, PARec/FPARec, Locker, RKSA) on the registered datasets or on embedded synthetic data.")
DATA_DIR_HELP = "data directory (default: $SEQREC_DATA_DIR when it is set, otherwise data/cache/)"
RUNS_DIR_HELP = "folder of checkpoints and of the trained models kept in DIR/models/ (default: runs/ in the project)"
#: the library's evaluation.PROTOCOLS and training.losses.LOSSES, written out so that parsing (and --help) does not
#: import torch; a test keeps them equal
PROTOCOLS = ["full", "full-nohist", "sampled100"]
LOSSES = ["ce", "bce", "sampled-ce"]


def _add_training_options(g: argparse._ArgumentGroup, benchmark: bool) -> None:
    """Optimisation settings shared by ``train`` and ``benchmark`` (which gives them to every run)."""
    g.add_argument("--epochs", type=int, default=200 if benchmark else None,
                   help="maximum epochs (default 200" + ("" if benchmark else "; 30 on synthetic") + ")")
    g.add_argument("--batch-size", type=int, default=128, help="users per batch (default 128)")
    g.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 0.001)")
    g.add_argument("--lr-decay", type=int, default=None, metavar="N",
                   help="halve the learning rate after this many validations without improvement (default: constant)")
    g.add_argument("--lr-schedule", default="constant", type=str.lower, choices=["constant", "cosine"],
                   help="constant (default) or cosine: the rate falls from --lr at the first epoch towards 0 at "
                        "the last of --epochs (not with --lr-decay)")
    g.add_argument("--eval-every", type=int, default=1, help="validate every this many epochs (default 1)")
    g.add_argument("--patience", type=int, default=10,
                   help="validations (not epochs) without improvement before early stopping (default 10; "
                        "with --eval-every 5 that is 50 epochs)")
    g.add_argument("--windows", default="recent", type=str.lower, choices=["recent", "random"],
                   help="training window of a long history: its most recent items (default, as SASRec) or a "
                        "random window drawn anew every epoch (trains on the older items too)")
    g.add_argument("--device", default="auto",
                   help="auto (default: $SEQREC_DEVICE if set, else CUDA, then MPS, then CPU), cpu, cuda, mps")
    g.add_argument("--deterministic", action="store_true",
                   help="deterministic GPU kernels: two GPU runs with one seed give the same numbers (slower on a "
                        "GPU; a CPU run repeats exactly without it); not part of the run id, like --device")
    g.add_argument("--precision", default="fp32", type=str.lower, choices=["fp32", "bf16", "fp16"],
                   help="fp32 (default), or mixed precision: bf16 (autocast, CPU or GPU), fp16 (CUDA)")
    g.add_argument("--mask-prob", type=float, default=None,
                   help="share of items masked (cloze-trained models; default 0.2 on ML, 0.6 on sparse data)")


def _add_model_options(g: argparse._ArgumentGroup, benchmark: bool) -> None:
    """Model size and options shared by ``train`` and ``benchmark`` (which gives them to every model)."""
    g.add_argument("--d-model", type=int, default=None, help="embedding size (default 64)")
    g.add_argument("--layers", type=int, default=None, help="attention blocks (default 2)")
    g.add_argument("--heads", type=int, default=None, help="attention heads (default 2; RKSA 1)")
    g.add_argument("--dropout", type=float, default=None,
                   help="default: the presets (0.2 on ML, 0.5 on sparse data; RKSA 0.5)")
    g.add_argument("--option", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                   help="any other model option, e.g. --option layout=tf (repeatable)"
                        + ("; given to every model that has it" if benchmark else ""))


def _add_protocol_option(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--eval-users", type=int, default=None,
                   help="evaluate a random subset of this many users, the same for every run (default: all users)")
    g.add_argument("--protocol", default="full", type=str.lower, choices=PROTOCOLS,
                   help="ranking for validation and the test row: full (all items, history kept; default), "
                        "full-nohist (the user's history removed) or sampled100 (against 100 sampled negatives)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m tutorial_lib`` with its four commands: train, benchmark, datasets, models."""
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib", description=DESCRIPTION, epilog=EPILOG,
                                     allow_abbrev=False)   # --result must not silently mean --results
    sub = parser.add_subparsers(dest="command", required=True)

    ds = sub.add_parser("datasets", allow_abbrev=False,
                        help="list every dataset, whether it is available, and its statistics")
    ds.add_argument("--data-dir", help=DATA_DIR_HELP)
    ds.add_argument("--download", nargs="+", metavar="NAME", help="download these datasets (sha256-verified)")

    sub.add_parser("models", allow_abbrev=False, help="list the registered models and their options")

    tr = sub.add_parser("train", allow_abbrev=False, epilog=EPILOG,
                        help="train one model on one dataset and append a row to results/runs.csv")
    g = tr.add_argument_group("what to train")
    g.add_argument("--model", default="sasrec", help="registered model name (see `models`; default sasrec)")
    g.add_argument("--dataset", default="synthetic", help="registered dataset name or 'synthetic' (default)")
    g.add_argument("--loss", default="ce", type=str.lower, choices=LOSSES,
                   help="full cross-entropy (default), binary cross-entropy with sampled negatives, or sampled "
                        "softmax")
    g.add_argument("--negatives", type=int, default=None,
                   help="negatives per position (bce, default 1) or per batch (sampled-ce, default 256)")
    g.add_argument("--seed", type=int, default=42, help="seed of every random draw (default 42)")
    g = tr.add_argument_group("training")
    g.add_argument("--max-len", type=int, default=None, help="input window (default: 200 on ML, else 50)")
    _add_training_options(g, benchmark=False)
    g.add_argument("--bucketing", action="store_true",
                   help="batch users of similar length and trim padding (faster, learns slower per epoch on ML-1M)")
    g.add_argument("--weighting", default="target", type=str.lower, choices=["target", "batch"],
                   help="every target weighs the same (default), or every batch's mean loss")
    g.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop at the end of the epoch that reaches this many seconds of training (at least one "
                        "epoch; the run then counts as finished and gets its row)")
    _add_model_options(tr.add_argument_group("model"), benchmark=False)
    g = tr.add_argument_group("evaluation")
    _add_protocol_option(g)
    g.add_argument("--also-protocols", nargs="+", default=[], type=str.lower, choices=PROTOCOLS,
                   help="also rank the selected model's test users under these protocols (one more row each)")
    g = tr.add_argument_group("files and output")
    g.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    g.add_argument("--download", action="store_true", help="download the dataset if it is missing")
    g.add_argument("--runs-dir", default=None, metavar="DIR",
                   help=RUNS_DIR_HELP + "; the checkpoint is DIR/<tag>_<run id>.pt (other settings, another file)")
    g.add_argument("--checkpoint", default=None,
                   help="checkpoint file, saved after every epoch (default: in --runs-dir); the trained model goes "
                        "to models/ beside it")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint if it exists")
    g.add_argument("--results", default=None,
                   help="results CSV (default results/runs.csv); the training curves go to curves/ beside it")
    g.add_argument("--no-results", action="store_true", help="do not append to the results CSV")
    g.add_argument("--quiet", action="store_true",
                   help="no progress bars (they are off anyway when the output goes to a file or a pipe)")

    bm = sub.add_parser("benchmark", allow_abbrev=False,
                        help="run every method on every dataset (resumable), one row per finished run")
    g = bm.add_argument_group("the plan: every model x dataset x seed")
    g.add_argument("--models", nargs="+", default=["all"],
                   help="'all' (the complete benchmark; the default) or model names, optionally with a loss: "
                        "sasrec@bce")
    g.add_argument("--datasets", nargs="+", default=["all"], help="'all' (the default) or dataset names")
    g.add_argument("--seeds", nargs="+", type=int, default=[42], help="one run per seed (default 42)")
    g.add_argument("--loss", default="ce", type=str.lower, choices=LOSSES,
                   help="loss of the models given without @loss (default ce)")
    g.add_argument("--negatives", type=int, default=None,
                   help="negatives of the models trained with --loss (bce: per position, default 1; sampled-ce: "
                        "per batch, default 256); a model given with another @loss keeps its loss's default, "
                        "unless every listed model shares that other loss")
    g = bm.add_argument_group("training (every run)")
    g.add_argument("--max-len", type=int, default=None, help="default: the presets (200 ML-1M, 50 sparse, RKSA 50)")
    _add_training_options(g, benchmark=True)
    g.add_argument("--bucketing", action="store_true", help="batch users of similar length (faster)")
    _add_model_options(bm.add_argument_group("model (every model)"), benchmark=True)
    g = bm.add_argument_group("evaluation")
    _add_protocol_option(g)
    g.add_argument("--also-protocols", nargs="+", default=[], type=str.lower, choices=PROTOCOLS,
                   help="also rank each selected model's test users under these protocols (one more row each); "
                        "a run already finished without them is not repeated to add them (its kept model in "
                        "runs/models can be ranked with benchmarks/compare_trained.py)")
    g = bm.add_argument_group("running")
    g.add_argument("--time-budget", type=float, default=None,
                   help="seconds of wall-clock time for this invocation: the run in progress then pauses at the end "
                        "of an epoch, keeps its checkpoint and gets no row until the same command (with a new "
                        "budget) finishes it; `train --time-budget` instead ends a run early and writes its row")
    g.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    g.add_argument("--results", default=None,
                   help="results CSV (default results/runs.csv); the training curves go to curves/ beside it")
    g.add_argument("--runs-dir", default=None, metavar="DIR",
                   help=RUNS_DIR_HELP + "; checkpoints in DIR/benchmark/ (rerun with the same DIR to resume)")
    g.add_argument("--dry-run", action="store_true",
                   help="print the plan and each run's state (done: its test metrics; partial: its epoch, best "
                        "validation so far and whether a process is training it now), run nothing")
    g.add_argument("--quiet", action="store_true",
                   help="no progress bars (they are off anyway when the output goes to a file or a pipe)")
    return parser


def _model_options(args: argparse.Namespace) -> dict:
    """``--option k=v`` plus the shortcuts ``--d-model``, ``--layers``, ``--heads``, ``--dropout``."""
    options = dict(args.option)
    for flag, key in (("d_model", "d_model"), ("layers", "n_layers"), ("heads", "n_heads"), ("dropout", "dropout")):
        value = getattr(args, flag)
        if value is not None:
            if key in options and options[key] != value:
                raise ConfigError(f"--{flag.replace('_', '-')} {value} and --option {key}={options[key]} set the same "
                                  f"option to two values: give it once")
            options[key] = value
    return options


def check_output_paths(checkpoint: Path, models: Path, results: Path | None) -> None:
    """Create the folders a run writes to, or :class:`ConfigError` naming the path that cannot be one (a file where
    a folder must go, a folder where the results file must go), before anything trains."""
    from .experiments.results import curves_folder, read_runs

    if checkpoint.is_dir():
        raise ConfigError(f"--checkpoint {checkpoint} is a folder; name the checkpoint file (or use --runs-dir)")
    if results is not None and results.is_dir():
        raise ConfigError(f"--results {results} is a folder; name the CSV file the rows go to")
    folders = [checkpoint.parent, models]
    if results is not None:
        folders += [results.parent, curves_folder(results)]
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise ConfigError(f"cannot use {folder} as a folder: {exc.strerror.lower()} ({exc.filename}); "
                              f"choose another --runs-dir, --checkpoint or --results") from exc
    if results is not None:
        read_runs(results)   # a file that is not a results CSV fails now, not when the finished run appends its row


def _progress_bars(args: argparse.Namespace) -> bool | None:
    """``False`` with --quiet or when stderr is not a terminal (a log file would fill with redrawn bars), else
    ``None``: the library's default (on unless $TUTORIAL_LIB_QUIET). The per-epoch lines are printed either way."""
    return False if args.quiet or not sys.stderr.isatty() else None


def runs_dir(args: argparse.Namespace) -> Path:
    """``--runs-dir``, else ``runs/`` in the project."""
    from .experiments.results import project_root

    return Path(args.runs_dir) if args.runs_dir else project_root() / "runs"


def pin_commit() -> str:
    """Pin the commit every row of this process records (the code it imported), and warn on stderr when that
    code is not the working directory's checkout (a second git worktree beside an editable install)."""
    from .experiments.results import library_elsewhere, process_commit

    commit = process_commit()
    elsewhere = library_elsewhere()
    if elsewhere:
        print(f"warning: {elsewhere}. This run records that checkout's commit ({commit}), keeps its checkpoints "
              "under that checkout's runs/ (without --runs-dir) and, without --results, appends its rows to that "
              "checkout's results/runs.csv; to run the working directory's code, set PYTHONPATH to its checkout",
              file=sys.stderr)
    return commit


def cmd_benchmark(args: argparse.Namespace, argv: list[str]) -> int:
    """``benchmark``: run (or, with ``--dry-run``, show) the plan of models x datasets x seeds; the exit status."""
    from .experiments.benchmark import (check_time_budget, parse_datasets, parse_models, plan, run_benchmark, status,
                                        summary)
    from .experiments.results import default_results_path
    from .experiments.run import ExperimentSpec

    pin_commit()  # every row of this invocation records the code it imported

    base = ExperimentSpec(loss=args.loss, protocol=args.protocol, also_protocols=tuple(args.also_protocols),
                          epochs=args.epochs, patience=args.patience, lr_decay=args.lr_decay,
                          lr_schedule=args.lr_schedule, eval_every=args.eval_every, batch_size=args.batch_size,
                          lr=args.lr, max_len=args.max_len,
                          n_negatives=args.negatives, bucketing=args.bucketing, window_sampling=args.windows,
                          device=args.device, deterministic=args.deterministic, precision=args.precision,
                          mask_prob=args.mask_prob,
                          eval_users=args.eval_users, data_dir=args.data_dir,
                          progress=_progress_bars(args), model_options=_model_options(args))
    specs = plan(parse_models(args.models, args.loss), parse_datasets(args.datasets), args.seeds, base)
    results = Path(args.results) if args.results else default_results_path()
    runs = runs_dir(args)
    checkpoints = runs / "benchmark"
    check_time_budget(args.time_budget)      # what the real run would refuse, --dry-run refuses too
    if runs.is_file() or checkpoints.exists() and not checkpoints.is_dir():
        raise ConfigError(f"--runs-dir {runs}: {checkpoints} must be a folder (the runs' checkpoints go there); "
                          f"choose another --runs-dir")
    if args.dry_run:
        print(summary(status(specs, results, checkpoints)))
        return 0
    command = "python -m tutorial_lib " + shlex.join(argv)
    final = run_benchmark(specs, command, args.time_budget, results, checkpoints)
    print("\n" + summary(final))
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    """``datasets``: list every registered dataset with its state and statistics, downloading the named ones."""
    from .data.download import ensure_dataset
    from .data.loading import dataset_status, format_dataset_table
    from .data.paths import ENV_VAR, data_dir, default_cache_dir
    from .data.registry import get_spec
    from .errors import ChecksumError, DatasetUnavailableError

    names = [get_spec(name).name for name in args.download or []]   # every name checked before any download
    failed = []
    for name in names:
        try:
            folder = ensure_dataset(name, args.data_dir, download=True)
        except (DatasetUnavailableError, ChecksumError) as exc:    # the next dataset may still come
            print(f"error: {exc}\n", file=sys.stderr)
            failed.append(name)
            continue
        print(f"{name}: ready in {folder}")
    root = data_dir(args.data_dir)
    note = ""
    if root.is_file():
        note = " (a file, not a folder: name the folder that holds the datasets)"
    elif not root.exists() and root != default_cache_dir():     # a folder the user named, not the default cache
        note = f" (does not exist: is the path, or {ENV_VAR}, spelt right?)"
    print(f"data directory: {root}{note}")
    print(format_dataset_table(dataset_status(args.data_dir)))
    if failed:
        raise DatasetUnavailableError(f"not downloaded: {', '.join(failed)} (each one's message is above); the others "
                                      f"of --download are ready")
    return 0


def cmd_models(_: argparse.Namespace) -> int:
    """``models``: print every registered model with its description and options."""
    from .models import MODELS

    width = max(len(name) for name in MODELS)
    for name in sorted(MODELS):
        entry = MODELS[name]
        opts = ", ".join(f"{k}={v!r}" for k, v in entry.options().items())
        print(f"{name:{width}s}  {entry.description}\n{'':{width}s}  options: {opts}")
    return 0


def cmd_train(args: argparse.Namespace, argv: list[str]) -> int:
    """``train``: one model on one dataset, resumable from its checkpoint; appends its rows to the results."""
    from .experiments.results import append_runs, curve_path, default_results_path, read_runs, write_curve
    from .experiments.run import SYNTHETIC, ExperimentSpec, dataset_name, load_data, run_experiment

    pin_commit()  # before training starts

    options = _model_options(args)
    dataset = dataset_name(args.dataset)       # an unknown name fails before the run is announced
    epochs = args.epochs if args.epochs is not None else (30 if dataset == SYNTHETIC else 200)
    spec = ExperimentSpec(
        model=args.model.lower(), dataset=dataset, loss=args.loss, protocol=args.protocol,
        also_protocols=tuple(args.also_protocols),
        seed=args.seed, epochs=epochs, max_len=args.max_len, batch_size=args.batch_size, lr=args.lr,
        patience=args.patience, lr_decay=args.lr_decay, lr_schedule=args.lr_schedule, eval_every=args.eval_every,
        eval_users=args.eval_users, n_negatives=args.negatives, device=args.device, deterministic=args.deterministic,
        precision=args.precision,
        bucketing=args.bucketing, weighting=args.weighting, window_sampling=args.windows, mask_prob=args.mask_prob,
        time_budget=args.time_budget, model_options=options,
        data_dir=args.data_dir, download=args.download, progress=_progress_bars(args),
    )
    if args.mask_prob is not None and not spec.cloze:   # the library ignores it there (a list of models shares it)
        raise ConfigError(f"--mask-prob is for the cloze-trained models (bert4rec, bert4rec-locker-*); "
                          f"{spec.model!r} predicts the next item and masks nothing")
    spec.check()            # impossible settings, an unavailable device, missing data: before the run is announced
    checkpoint = Path(args.checkpoint) if args.checkpoint else runs_dir(args) / f"{spec.tag()}_{spec.run_id()}.pt"
    models = runs_dir(args) / "models" if args.runs_dir or not args.checkpoint else checkpoint.parent / "models"
    results = None if args.no_results else Path(args.results or default_results_path())
    check_output_paths(checkpoint, models, results)   # a bad path fails now, not after the training
    data = load_data(spec)   # a malformed data file fails before an existing checkpoint is replaced
    if checkpoint.exists() and not args.resume:
        print(f"replacing the existing checkpoint {checkpoint}: this run starts at epoch 0 (with --resume, a "
              f"checkpoint written with the same settings is continued)", flush=True)
        checkpoint.unlink()  # a fresh run; --resume keeps it
    elif args.resume and not checkpoint.exists():
        print(f"--resume: no checkpoint at {checkpoint}, so training starts at epoch 0. The default file name "
              f"follows every setting of the run, --epochs, --patience, --eval-every and --time-budget included: "
              f"to continue a checkpoint written with other values of those, name its file with --checkpoint",
              flush=True)
    spec.checkpoint = str(checkpoint)
    print(f"training {spec.model} on {spec.dataset} (loss {spec.loss}, protocol {spec.protocol}, "
          f"max_len {spec.resolved_max_len()}, seed {spec.seed}); checkpoint {checkpoint}", flush=True)
    result = run_experiment(spec, data)
    tr = result.train
    print(f"\nbest epoch {tr.best_epoch} of {tr.epochs_run}; {tr.train_seconds:.1f} s training "
          f"({tr.seconds_per_epoch:.2f} s/epoch) on {result.device}")
    keys = ["hr@5", "ndcg@5", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr"]
    print("           " + "  ".join(f"{k:>8s}" for k in keys))
    for stage, m in (("validation", result.valid), ("test", result.test)):
        print(f"{stage:10s} " + "  ".join(f"{m[k]:8.4f}" for k in keys))
    for protocol, m in result.also.items():
        print(f"test, {protocol}:\n{'':10s} " + "  ".join(f"{m[k]:8.4f}" for k in keys))
    print(f"trained model in {result.save_model(models)}")
    if results is not None:
        command = "python -m tutorial_lib " + shlex.join(argv)
        rows = result.rows(command)
        path = results
        if args.resume:   # a run that had already finished has its rows there: a second copy would count it twice
            recorded = {(r.get("run_id"), r.get("protocol")) for r in read_runs(path)}
            if all((row["run_id"], row["protocol"]) in recorded for row in rows):
                print(f"run {spec.run_id()} already has its row(s) in {path}; nothing appended")
                return 0
        curve = curve_path(path, spec.tag(), spec.run_id())
        write_curve(tr.history, curve)
        append_runs(rows, path)   # last and in one write, as the benchmark runner does
        print(f"appended {len(rows)} row(s) to {path}; training curve in {curve}")
    return 0


#: what to do after Ctrl-C, per command (only ``train`` has a --resume flag)
RESUME_HINTS = {
    "train": "rerun the same command with --resume to continue from the last epoch",
    "benchmark": "rerun the same command to continue: finished runs are kept, the interrupted one resumes from "
                 "its checkpoint",
    "datasets": "rerun the same command: a partial download resumes where it stopped",
    "models": "nothing was changed",
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tutorial_lib``: runs the command and returns its exit status; the library's
    warnings are shown as one ``warning:`` line each."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:          # `python -m tutorial_lib` alone: what it can do, not "the following arguments are required"
        parser.print_help()
        return 0
    args, extras = parser.parse_known_args(argv)
    if extras:
        commands = subcommand_parsers(parser)
        commands[args.command].error(f"unrecognized arguments: {' '.join(extras)}"
                                     f"{misplaced_hint(extras, args.command, commands)}")
    if getattr(args, "deterministic", False):   # cuBLAS reads it at its first use: before any CUDA work
        from .utils.seeding import CUBLAS_DETERMINISTIC_WORKSPACE
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    with warnings.catch_warnings():      # restores the standard display when the command returns
        warnings.showwarning = _show_warning
        return _run(args, argv)


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{"train": <its parser>, ...}``."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def misplaced_hint(extras: list[str], command: str, commands: dict[str, argparse.ArgumentParser]) -> str:
    """Where the unrecognised flags belong (``--models`` is an option of ``benchmark``), and where to look."""
    hints = []
    for flag in dict.fromkeys(e.split("=", 1)[0] for e in extras if e.startswith("--")):
        owners = [name for name, p in commands.items() if name != command
                  and any(flag in a.option_strings for a in p._actions)]
        own = [o for a in commands[command]._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(flag, own, n=1, cutoff=0.75)
        if close:
            hints.append(f"did you mean {close[0]}?")
        if owners:
            hints.append(f"{flag} is an option of {' and '.join(owners)}.")
    where = f"`python -m tutorial_lib {command} --help` lists the options of {command}."
    return "\n" + " ".join(hints + [where])


LIBRARY = Path(__file__).resolve().parent


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """The library's warnings as one ``warning: ...`` line (they say what to do; the line of library code that
    raised them would not help); every other warning as Python shows it."""
    if Path(filename).resolve().is_relative_to(LIBRARY):
        print(f"warning: {message}", file=file or sys.stderr, flush=True)
    else:
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        if args.command == "datasets":
            return cmd_datasets(args)
        if args.command == "models":
            return cmd_models(args)
        if args.command == "benchmark":
            return cmd_benchmark(args, argv)
        return cmd_train(args, argv)
    except TutorialLibError as exc:
        print(f"error: {name_the_flags(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted; {_resume_hint(args)}", file=sys.stderr)
        return 130
    except BrokenPipeError:       # the reader of our output (`| head`, a closed pager) went away
        _silence_stdout()
        print(f"output closed early; {_resume_hint(args)}", file=sys.stderr)
        return 141                # what a shell reports for a process ended by SIGPIPE


#: the library's parameters whose command-line flag has another name (the others are the flag with - for _)
FLAG_OF_PARAMETER = {"max_users": "--eval-users", "n_negatives": "--negatives", "n_heads": "--heads",
                     "n_layers": "--layers", "window_sampling": "--windows"}


def name_the_flags(message: str) -> str:
    """A library error message, followed by the command-line flag of each parameter it names whose flag has
    another name (``max_users`` is ``--eval-users``)."""
    named = [f"{param} is {flag}" for param, flag in FLAG_OF_PARAMETER.items()
             if re.search(rf"\b{param}\b", message)]
    return message + (f" (on the command line, {', '.join(named)})" if named else "")


def _resume_hint(args: argparse.Namespace) -> str:
    """What to do after an interruption: nothing to resume for a command that only reads and prints."""
    read_only = (args.command == "models" or (args.command == "datasets" and not args.download)
                 or (args.command == "benchmark" and args.dry_run))
    return RESUME_HINTS["models"] if read_only else RESUME_HINTS[args.command]


def _silence_stdout() -> None:
    """Point stdout at the null device, so that flushing it at exit raises no second BrokenPipeError."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):       # an in-process capture without a descriptor
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
