"""The results store: ``results/runs.csv`` (one row per finished run) and per-run training curves.

Rows are only ever written by code (the CLI and the benchmark runner), with their provenance: the
exact command, the git commit, the device and the library versions.
"""
from __future__ import annotations

import csv
import io
import os
import shlex
import subprocess
from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from pathlib import Path

import torch

from ..errors import ConfigError
from ..utils.device import hardware_description
from ..utils.io import atomic_write_text
from ..utils.locks import locked

RUN_COLUMNS = (
    "model", "dataset", "protocol", "loss", "seed", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr",
    "best_epoch", "epochs", "train_seconds", "seconds_per_epoch", "device", "torch", "commit", "command", "date",
    # provenance and context beyond the required columns
    "valid_ndcg@10", "max_len", "hardware", "options", "training", "stopped", "run_id",
)


def project_root() -> Path:
    """The source checkout that holds this package (falls back to the current directory)."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def default_results_path() -> Path:
    """The project's results file, ``results/runs.csv``."""
    return project_root() / "results" / "runs.csv"


#: paths whose uncommitted changes do not make a checkout "dirty": the results the runner itself appends
#: and the prose generated from them (a run started while another run's row is not yet committed still ran
#: committed code)
NOT_CODE = (":(exclude)results", ":(exclude)*.md")


def git_commit() -> str:
    """Short commit hash of the checkout, with ``-dirty`` when tracked files other than results and Markdown
    (:data:`NOT_CODE`) have uncommitted changes.

    A copy of the code without its git history (a container, a rented GPU machine) names the commit it was
    copied from in the environment variable ``SEQREC_COMMIT``; that value is used only where git cannot tell."""
    commit = _git_commit()
    if commit == "unknown" and os.environ.get("SEQREC_COMMIT"):
        return os.environ["SEQREC_COMMIT"]
    return commit


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=project_root(),
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0 or not head.stdout.strip():
            return "unknown"
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE],
                                 cwd=project_root(), capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


_PROCESS_COMMIT: str | None = None


def process_commit() -> str:
    """:func:`git_commit` as it was when this process first asked: the code a long-running process imported.

    A benchmark invocation imports the library once and then trains for hours; commits made meanwhile do
    not change the code it runs, so every row it writes records the commit of its start (the CLI pins it
    before the first run).
    """
    global _PROCESS_COMMIT
    if _PROCESS_COMMIT is None:
        _PROCESS_COMMIT = git_commit()
    return _PROCESS_COMMIT


def publish_table(lines: list[str], out: str | Path | None = None, commit: str | None = None,
                  device: torch.device | None = None) -> str:
    """A benchmark's Markdown table with its provenance footer: printed, and written atomically to ``out``."""
    table = "\n".join([*lines, "", *provenance_lines(device, commit)])
    print("\n" + table)
    if out:
        atomic_write_text(Path(out), table + "\n")
    return table


def append_run(row: dict, path: str | Path | None = None) -> Path:
    """Append one row to the results CSV (atomically, under a file lock); returns the path.

    Missing columns are left empty; unknown keys raise ``KeyError`` (a typo must not vanish).
    """
    return append_runs([row], path)


def append_runs(rows: Sequence[dict], path: str | Path | None = None) -> Path:
    """Append the rows of one run (one per protocol) in a single atomic write: a crash leaves all of them
    or none, so a run whose first row is in the file is never missing the others. Returns the path."""
    path = Path(path) if path is not None else default_results_path()
    unknown = set().union(*(set(row) for row in rows)) - set(RUN_COLUMNS)
    if unknown:
        raise KeyError(f"unknown results columns: {sorted(unknown)}")
    with locked(path):
        existing = path.read_text() if path.exists() else ""
        if existing and existing.splitlines()[0].split(",") != list(RUN_COLUMNS):
            existing = _migrate(existing, path)  # an older file: rewrite it under the current header
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=RUN_COLUMNS, lineterminator="\n")
        if not existing:
            writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row.get(k, "")) for k in RUN_COLUMNS})
        if existing and not existing.endswith("\n"):
            existing += "\n"
        atomic_write_text(path, existing + buf.getvalue())
    return path


def _migrate(text: str, path: Path) -> str:
    """Rows of a results file with an older header, rewritten with :data:`RUN_COLUMNS` (new columns empty)."""
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    _check_known_columns(path, reader.fieldnames or [])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RUN_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: r.get(k, "") for k in RUN_COLUMNS})
    return buf.getvalue()


def curves_folder(results: str | Path) -> Path:
    """``<results dir>/curves``: the per-epoch curves of a results file's runs."""
    return Path(results).parent / "curves"


def curve_path(results: str | Path, tag: str, run_id: str) -> Path:
    """Where the per-epoch curve of a run is stored: ``<results dir>/curves/<tag>_<run_id>.csv``."""
    return curves_folder(results) / f"{tag}_{run_id}.csv"


def read_runs(path: str | Path | None = None) -> list[dict[str, str]]:
    """The rows of a results CSV (``[]`` when the file does not exist yet).

    A file that is not one, not UTF-8 text or with columns this version does not know, raises
    :class:`ConfigError` naming it, so that a run pointed at the wrong ``--results`` fails before it trains.
    """
    path = Path(path) if path is not None else default_results_path()
    if not path.exists():
        return []
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; name the results CSV file (--results FILE)")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = reader.fieldnames or []   # read while the file is open: an empty file has none
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not a results file: not UTF-8 text (byte {exc.start}); name another "
                          f"--results file, or delete this one") from None
    _check_known_columns(path, columns)
    for line, row in enumerate(rows, start=2):
        if None in row or None in row.values():   # DictReader's marks of a row longer or shorter than the header
            raise ConfigError(f"{path}, line {line}: {len(columns)} columns in the header but another number in "
                              f"this row (edited by hand?); only the CLI and the benchmark runner write this file: "
                              f"mend or delete the row, or name another --results file")
    return rows


def _check_known_columns(path: Path, columns: Collection[str]) -> None:
    unknown = set(columns) - set(RUN_COLUMNS)
    if unknown:
        raise ConfigError(f"{path} has columns this version does not know ({', '.join(sorted(unknown))}): it is not "
                          f"a results file of this library, or one of a newer version; name another --results file")


def write_curve(history: list[dict], path: str | Path) -> None:
    """Per-epoch training curve (loss, seconds, validation metrics) as CSV."""
    keys: list[str] = []
    for row in history:
        keys += [k for k in row if k not in keys]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: _fmt(v) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def now_iso() -> str:
    """The current UTC time to the second, ``2024-05-01T12:00:00Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def library_elsewhere() -> str | None:
    """A note when the working directory is a git checkout other than the one ``tutorial_lib`` was imported
    from (a script run as ``python benchmarks/x.py`` in a second worktree imports the editable install's code,
    not the worktree's: set ``PYTHONPATH`` to the worktree); ``None`` otherwise."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    here = Path(top.stdout.strip()).resolve() if top.returncode == 0 and top.stdout.strip() else None
    if here is None or here == project_root().resolve():
        return None
    return f"tutorial_lib imported from {project_root()}, not from the working directory's checkout {here}"


def provenance_lines(device: torch.device | None = None, commit: str | None = None) -> list[str]:
    """Markdown footer of a benchmark table: the exact command, commit, hardware, library versions and date
    (and, when they differ, where the library came from: :func:`library_elsewhere`).

    A script that runs for long should pass the ``commit`` it read when it started (the code that ran)."""
    import platform
    import sys

    import numpy as np

    elsewhere = library_elsewhere()
    return [f"command: `python {shlex.join(sys.argv)}`  ", f"commit: {commit or git_commit()}  ",
            *([f"library: {elsewhere}  "] if elsewhere else []),
            f"hardware: {hardware_description(device or torch.device('cpu'))}  ",
            f"torch {torch.__version__}, numpy {np.__version__}, Python {platform.python_version()}  ",
            f"date: {now_iso()}"]


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) >= 1 else f"{v:.6f}"
    return str(v)


__all__ = ["RUN_COLUMNS", "append_run", "read_runs", "write_curve", "curve_path", "curves_folder", "git_commit", "process_commit",
           "hardware_description",
           "provenance_lines", "publish_table", "library_elsewhere",
           "default_results_path", "now_iso", "project_root"]
