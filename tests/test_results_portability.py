"""The results file and the benchmark's locks work on every platform: the experiment modules import where
``fcntl`` does not exist (Windows), and two processes appending under the lock lose no row."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tutorial_lib.experiments.results import read_runs


def test_the_experiment_modules_import_where_fcntl_does_not_exist():
    """Windows has no ``fcntl``: the results lock imports it (or ``msvcrt``) only where it is used."""
    code = ("import sys; sys.modules['fcntl'] = None\n"
            "import tutorial_lib.experiments.run, tutorial_lib.experiments.benchmark, tutorial_lib.cli\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_appends_under_the_lock_from_two_processes_keep_every_row(tmp_path):
    path = tmp_path / "runs.csv"
    code = ("import sys\nfrom tutorial_lib.experiments.results import append_run\n"
            "for i in range(20):\n"
            "    append_run({'model': 'sasrec', 'dataset': 'synthetic', 'seed': int(sys.argv[1]) * 100 + i}, sys.argv[2])\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k), str(path)], cwd=Path(__file__).resolve().parents[1])
             for k in (1, 2)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    seeds = sorted(int(r["seed"]) for r in read_runs(path))
    assert seeds == sorted([100 + i for i in range(20)] + [200 + i for i in range(20)])
