"""The results file and the benchmark's locks work on every platform: the experiment modules import where
``fcntl`` does not exist (Windows), and two processes appending under the lock lose no row."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


class _FakeMsvcrt:
    """``msvcrt.locking`` for one byte: ``held`` says whether another process has it."""
    LK_UNLCK, LK_LOCK, LK_NBLCK = 0, 1, 2

    def __init__(self, held):
        self.held, self.calls = held, []

    def locking(self, fd, mode, nbytes):
        self.calls.append(mode)
        if mode != self.LK_UNLCK and self.held:
            raise OSError(36, "Resource deadlock avoided")   # what Windows raises for a region locked elsewhere


def test_the_windows_lock_refuses_without_waiting_and_raises_when_a_wait_times_out(tmp_path, monkeypatch):
    """Windows: a non-blocking lock on a byte held elsewhere answers False; a blocking one that gives up after its
    10 s raises (the results file must not be written unlocked); the lock always covers the first byte."""
    from tutorial_lib.utils import locks

    monkeypatch.setattr(locks.os, "name", "nt")
    with open(tmp_path / "f.lock", "a+") as fh:
        fh.write("123")
        monkeypatch.setitem(sys.modules, "msvcrt", _FakeMsvcrt(held=True))
        assert locks.lock_file(fh, blocking=False) is False and fh.tell() == 0
        with pytest.raises(OSError):
            locks.lock_file(fh, blocking=True)
        free = _FakeMsvcrt(held=False)
        monkeypatch.setitem(sys.modules, "msvcrt", free)
        assert locks.lock_file(fh, blocking=False) is True
        fh.seek(2)
        locks.unlock_file(fh)
        assert fh.tell() == 0 and free.calls == [free.LK_NBLCK, free.LK_UNLCK]
