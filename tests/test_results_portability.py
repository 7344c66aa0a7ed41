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


class _FakeFunction:
    """A ctypes foreign function stand-in: records argtypes/restype, returns what ``impl`` returns."""

    def __init__(self, impl):
        self.impl, self.argtypes, self.restype = impl, None, None

    def __call__(self, *args):
        return self.impl(*args)


class _FakeKernel32:
    """The three kernel32 calls `_process_alive_windows` makes, for a process table {pid: exit code}."""

    def __init__(self, table, denied=()):
        import ctypes

        self.closed = []
        self.last_error = 0

        def open_process(access, inherit, pid):
            if pid in denied:
                self.last_error = 5          # ERROR_ACCESS_DENIED
                return None
            if pid not in table:
                self.last_error = 87         # ERROR_INVALID_PARAMETER: no such process
                return None
            return 2**40 + pid               # a handle above 32 bits

        def exit_code(handle, code_ref):
            ctypes.cast(code_ref, ctypes.POINTER(ctypes.c_ulong)).contents.value = table[handle - 2**40]
            return 1

        self.OpenProcess = _FakeFunction(open_process)
        self.GetExitCodeProcess = _FakeFunction(exit_code)
        self.CloseHandle = _FakeFunction(lambda handle: self.closed.append(handle) or 1)


def test_the_windows_liveness_check_reads_the_exit_code_and_closes_the_handle(monkeypatch):
    """Windows: a running process (STILL_ACTIVE = 259) is alive, an exited one or an unknown id is not, one we may
    not open exists; every handle is closed; handles are declared pointer-sized."""
    import ctypes

    from tutorial_lib.experiments.benchmark import _process_alive_windows

    fake = _FakeKernel32({10: 259, 11: 0}, denied={12})
    monkeypatch.setattr(ctypes, "WinDLL", lambda name, use_last_error=False: fake, raising=False)
    monkeypatch.setattr(ctypes, "get_last_error", lambda: fake.last_error, raising=False)
    assert _process_alive_windows(10) is True
    assert _process_alive_windows(11) is False
    assert _process_alive_windows(12) is True
    assert _process_alive_windows(13) is False
    assert fake.closed == [2**40 + 10, 2**40 + 11]
    assert fake.OpenProcess.restype is ctypes.c_void_p
    assert fake.CloseHandle.argtypes == [ctypes.c_void_p]
