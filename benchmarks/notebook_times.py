"""How long each notebook of the course takes to run, cell by cell, in one COURSE_MODE.

The course map (notebooks/README.md) and every notebook's "Estimated time" quote these wall-clock times.
Each notebook runs top to bottom in a fresh kernel with nbclient (what ``jupyter nbconvert --execute``
uses), ``COURSE_MODE`` set for it, progress bars off and the Agg backend, exactly as a learner's "Run All"
would run it. The script prints a Markdown table (notebook, mode, seconds, minutes, the slowest cell, and
what the kernel used: CPU seconds, peak memory, torch threads) and, with ``--out``, writes it with the command,
commit, hardware and library versions that produced it. The kernel's figures come from one extra cell run after
the notebook's own (left out of ``--keep``'s copies); an instructor sizes a shared Jupyter server from them
(docs/instructors.md).
``--keep DIR`` also saves the executed notebooks, so that what the prose says about a run can be read
against a real one.

    python benchmarks/notebook_times.py                                  # every solution notebook, small mode
    python benchmarks/notebook_times.py --mode smoke --folder notebooks  # the student notebooks, CI's size
    python benchmarks/notebook_times.py 04_positional_attention --keep /tmp/executed

Run it on an otherwise idle machine: other jobs sharing the CPU make the notebooks two to three times slower.
Set ``SEQREC_DATA_DIR`` to the folder with the real datasets, or the notebooks fall back to synthetic data
(and the times no longer describe the course as it is meant to run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import nbformat
import torch

from tutorial_lib.course.build import execute_notebook
from tutorial_lib.experiments.results import git_commit, provenance_lines
from tutorial_lib.utils import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
MODES = ("smoke", "small", "full")


def find_notebooks(folder: Path, names: list[str]) -> list[Path]:
    """The ``*.ipynb`` of ``folder`` (sorted), or only those named (with or without ``.ipynb``)."""
    paths = sorted(folder.glob("*.ipynb"))
    if not paths:
        raise SystemExit(f"error: no notebooks in {folder}; pass --folder solutions or --folder notebooks")
    if not names:
        return paths
    wanted = {n if n.endswith(".ipynb") else f"{n}.ipynb" for n in (Path(n).name for n in names)}
    unknown = sorted(wanted - {p.name for p in paths})
    if unknown:
        raise SystemExit(f"error: not in {folder}: {', '.join(unknown)}; the notebooks there are: "
                         f"{', '.join(p.stem for p in paths)}")
    return [p for p in paths if p.name in wanted]


def run_notebook(path: Path, mode: str, timeout: int) -> tuple[float, list[float], nbformat.NotebookNode, dict]:
    """Execute ``path`` in a fresh kernel with ``COURSE_MODE=mode``, importing this checkout's library.

    Returns the wall-clock seconds of the whole run (kernel start included), the seconds of every code
    cell (in order), the executed notebook, and what the kernel used (:func:`kernel_usage`)."""
    cell_seconds: list[float] = []
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(KERNEL_PROBE))
    t0 = time.perf_counter()
    executed = execute_notebook(nb, cwd=path.parent, mode=mode, timeout=timeout,
                                extra_env={"PYTHONPATH": python_path}, cell_seconds=cell_seconds)
    seconds = time.perf_counter() - t0
    probe = executed.cells.pop()
    cell_seconds.pop()
    return seconds, cell_seconds, executed, kernel_usage(probe)


#: run in the kernel after the notebook's last cell: its CPU time, peak resident memory and torch's thread
#: count (the ``resource`` module is POSIX only: elsewhere the figures are left blank)
KERNEL_PROBE = '''import json as _json, sys as _sys
try:
    import resource as _resource
    _use = _resource.getrusage(_resource.RUSAGE_SELF)
    _usage = {"cpu_seconds": _use.ru_utime + _use.ru_stime,
              "peak_mib": _use.ru_maxrss / (2**20 if _sys.platform == "darwin" else 2**10)}
except ImportError:
    _usage = {}
if "torch" in _sys.modules:
    _usage["threads"] = _sys.modules["torch"].get_num_threads()
print("KERNEL_USAGE " + _json.dumps(_usage))'''


def kernel_usage(probe: nbformat.NotebookNode) -> dict:
    """The figures :data:`KERNEL_PROBE` printed (``cpu_seconds``, ``peak_mib``, ``threads``; any may be absent)."""
    for out in probe.get("outputs", []):
        for line in out.get("text", "").splitlines():
            if line.startswith("KERNEL_USAGE "):
                return json.loads(line.removeprefix("KERNEL_USAGE "))
    return {}


def render(rows: list[dict], mode: str, folder: Path, commit: str) -> str:
    data_dir = os.environ.get("SEQREC_DATA_DIR")
    lines = [f"Wall-clock time of running every cell of each notebook in `{folder.name}/` with nbclient "
             f"(`COURSE_MODE={mode}`, a fresh kernel each, kernel start included); datasets from "
             f"{'`SEQREC_DATA_DIR`' if data_dir else 'the project cache (synthetic data where a dataset is missing)'}.",
             "", "| notebook | mode | seconds | minutes | code cells | slowest cell (index: seconds) "
             "| kernel CPU s | kernel peak memory (MiB) | torch threads |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        slow = max(range(len(r["cells"])), key=r["cells"].__getitem__) if r["cells"] else None
        slowest = f"{slow}: {r['cells'][slow]:.1f}" if slow is not None else "—"
        use = r.get("usage", {})
        cpu, peak, threads = use.get("cpu_seconds"), use.get("peak_mib"), use.get("threads")
        lines.append(f"| {r['name']} | {mode} | {r['seconds']:.1f} | {r['seconds'] / 60:.1f} | {len(r['cells'])} "
                     f"| {slowest} | {'—' if cpu is None else f'{cpu:.0f}'} "
                     f"| {'—' if peak is None else f'{peak:.0f}'} | {'—' if threads is None else threads} |")
    total = sum(r["seconds"] for r in rows)
    peaks = [r["usage"]["peak_mib"] for r in rows if "peak_mib" in r.get("usage", {})]
    lines += ["", f"Total: {total:.0f} s ({total / 60:.1f} min). Cell indices count code cells only, from 0."
              + (f" The largest kernel peak memory: {max(peaks):.0f} MiB." if peaks else ""),
              "Kernel CPU s is user + system time of the kernel process (all its threads); peak memory is its "
              "largest resident set (RSS).", "", *provenance_lines(torch.device("cpu"), commit=commit)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("names", nargs="*", metavar="NOTEBOOK", help="only these notebooks (default: all)")
    parser.add_argument("--mode", choices=MODES, default="small", help="COURSE_MODE (default: small)")
    parser.add_argument("--folder", type=Path, default=ROOT / "solutions",
                        help="folder of the notebooks (default: solutions/, the reference solutions)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed for one cell (default: 1800)")
    parser.add_argument("--keep", type=Path, default=None, help="save the executed notebooks in this folder")
    parser.add_argument("--out", type=Path, default=None, help="write the table (Markdown) to this file")
    args = parser.parse_args(argv)
    folder = args.folder if args.folder.is_absolute() else Path.cwd() / args.folder
    commit = git_commit()
    rows = []
    for path in find_notebooks(folder, args.names):
        print(f"running {path.name} (COURSE_MODE={args.mode}) ...", flush=True)
        seconds, cells, executed, usage = run_notebook(path, args.mode, args.timeout)
        rows.append({"name": path.stem, "seconds": seconds, "cells": cells, "usage": usage})
        peak = f", peak {usage['peak_mib']:.0f} MiB" if "peak_mib" in usage else ""
        print(f"  {seconds:.1f} s{peak}", flush=True)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.keep / path.name, nbformat.writes(executed))
    table = render(rows, args.mode, folder, commit)
    print("\n" + table)
    if args.out is not None:
        atomic_write_text(args.out, table + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
