"""``python -m tutorial_lib.course check``: is this machine ready for the course? (one command, an exit status)

What notebook 00 checks interactively, as a command an instructor can run on every lab machine or in the
build of a shared Jupyter server's image (``check || exit 1``): Python and package versions, a Jupyter kernel,
the device and CPU threads, which real datasets the notebooks will find (and which notebooks fall back to
synthetic data without them), and one real training epoch of a tiny SASRec as proof that torch works.

Exit status 0 when everything the notebooks need is there, 1 otherwise. A missing dataset only warns (every
notebook runs on its synthetic fallback); a data folder that was named but does not exist, a dataset file that
is there but cannot be read, and a ``COURSE_MODE`` the notebooks refuse fail.
"""
from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ConfigError, DatasetUnavailableError, TutorialLibError
from .setup import COURSE_MODES, course_mode, environment_report

#: the lowest Python the project supports (``requires-python`` in pyproject.toml)
MIN_PYTHON = (3, 10)

#: which notebooks read each real dataset in the default (small) mode, plus notebook 07's live runs in full
#: mode; without it they use synthetic data there. tests/test_course_preflight.py keeps this in step with the
#: solution notebooks.
NOTEBOOK_DATASETS: dict[str, tuple[str, ...]] = {
    "ml-1m": ("01", "02", "03", "04", "05", "06", "07 (full mode)"),
    "beauty": ("01",),
    "video": ("06",),
}


@dataclass
class Finding:
    """One line of the report. ``ok=False`` with ``required=False`` is a warning, not a failure."""

    topic: str
    ok: bool
    detail: str
    required: bool = True

    @property
    def mark(self) -> str:
        """The report's status column: ``ok``, ``FAIL`` (required) or ``warn`` (optional)."""
        return "ok  " if self.ok else ("FAIL" if self.required else "warn")


def python_finding() -> Finding:
    """This Python's version, and whether it is at least :data:`MIN_PYTHON`."""
    found = sys.version_info[:2]
    ok = found >= MIN_PYTHON
    need = ".".join(map(str, MIN_PYTHON))
    return Finding("python", ok, f"{platform.python_version()}" + ("" if ok else f": the course needs {need} or newer"))


def package_findings() -> list[Finding]:
    """One finding per package of the environment report: found and recent enough, or how to install it."""
    findings = []
    for row in environment_report(quiet=True):
        if row["ok"]:
            findings.append(Finding(row["name"], True, f"{row['found']} ({row['required']})", not row["optional"]))
        elif row["found"] is None:
            where = (" (needed only where the Jupyter server runs)" if row["optional"] else "")
            findings.append(Finding(row["name"], False, f"not installed{where}: pip install '{row['name']}"
                                    f"{row['required']}'", not row["optional"]))
        else:
            findings.append(Finding(row["name"], False, f"{row['found']} is too old ({row['required']}): "
                                    f"pip install -U '{row['name']}{row['required']}'", not row["optional"]))
    return findings


#: a kernel command that starts with one of these names runs the interpreter of the process that launches it
#: (jupyter_client's ``KernelManager.format_kernel_cmd`` puts ``sys.executable`` in their place), not the first
#: ``python`` on PATH
LAUNCHER_PYTHON_NAMES = frozenset({"python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]})


def kernel_finding() -> Finding:
    """A Jupyter kernel named ``python3`` (what the notebooks and nbval ask for), and whether it runs this Python."""
    install = ("python -m ipykernel install --sys-prefix (for everyone using this environment, e.g. a server "
               "image) or --user (for you alone)")
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        return Finding("jupyter kernel", False, "jupyter_client is not installed: pip install -e '.[dev]' "
                       "(or ipykernel) where the notebooks run", required=False)
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        return Finding("jupyter kernel", False, f"no kernel named python3: {install}", required=False)
    if "ipykernel" in Path(spec.resource_dir).parts:  # no kernel file: Jupyter's built-in python3
        return Finding("jupyter kernel", True, "python3 is ipykernel's built-in kernel: it runs the Python that runs "
                       "Jupyter (this environment's when `jupyter lab` starts from it)", required=False)
    if spec.argv and spec.argv[0] in LAUNCHER_PYTHON_NAMES:  # jupyter_client starts these with its own interpreter
        return Finding("jupyter kernel", True, f"python3 runs {spec.argv[0]!r}, which Jupyter replaces by the Python "
                       "that runs it (this environment's when `jupyter lab` starts from it)", required=False)
    runs = (shutil.which(spec.argv[0]) or spec.argv[0]) if spec.argv else "?"
    if environment_of(runs) == sys.prefix:
        return Finding("jupyter kernel", True, f"python3 runs this environment's Python ({runs})", required=False)
    return Finding("jupyter kernel", False, f"python3 runs {runs}, not this environment's {sys.executable}: the "
                   "notebooks will import whatever that Python has installed; to make this environment the "
                   f"notebooks' kernel: {install}", required=False)


def environment_of(python: str) -> str | None:
    """``sys.prefix`` of the interpreter at ``python`` (the environment it runs in), or ``None`` if it does not run.

    Asked of the interpreter itself: a virtual environment's ``python`` is a link to the base interpreter, so
    the paths alone cannot tell two environments apart."""
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def device_finding() -> Finding:
    """The device the notebooks will use and torch's CPU threads: information with advice, always reported as ok."""
    from ..utils import resolve_device

    device = resolve_device("auto")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    threads = torch.get_num_threads()
    detail = f"{name}; torch uses {threads} CPU thread{'s' if threads != 1 else ''} of {os.cpu_count()} cores"
    if device.type == "cpu":
        detail += " (no GPU: fine for the smoke and small modes; COURSE_MODE=full takes hours per notebook)"
    if threads > 4 and "OMP_NUM_THREADS" not in os.environ:
        detail += (f"; on a server shared by several learners set OMP_NUM_THREADS=1, or every kernel takes all "
                   f"{threads} threads")
    return Finding("device", True, detail, required=False)


def mode_finding() -> Finding:
    """``COURSE_MODE`` holds a mode the notebooks accept (they stop at their first cell otherwise)."""
    try:
        mode = course_mode()
    except ConfigError as exc:
        return Finding("COURSE_MODE", False, str(exc))
    return Finding("COURSE_MODE", True, f"{mode} ({COURSE_MODES[mode]})", required=False)


def data_findings(root: str | os.PathLike | None = None) -> list[Finding]:
    """The data folder and every dataset the notebooks read, loaded (a file that is there but empty or broken
    fails here, not in the middle of a lesson)."""
    from ..data.loading import load_dataset
    from ..data.paths import ENV_VAR, data_dir

    folder, notebooks_folder = data_dir(root), data_dir()
    findings = []
    chosen = root is not None or os.environ.get(ENV_VAR, "").strip()
    if chosen and not folder.is_dir():
        findings.append(Finding("data folder", False, f"{folder} does not exist (a typo, or a share that is not "
                                "mounted?)"))
    if folder.resolve() != notebooks_folder.resolve():
        findings.append(Finding("data folder", False, f"checking {folder}, but the notebooks read {notebooks_folder}: "
                                f"set {ENV_VAR}={folder} in the environment that starts Jupyter", required=False))
    flag = f" --data-dir {folder}" if root is not None else ""
    for name, notebooks in NOTEBOOK_DATASETS.items():
        used = f"notebook{'s' if len(notebooks) > 1 else ''} {', '.join(notebooks)}"
        try:
            data = load_dataset(name, root)
        except DatasetUnavailableError:  # its files are not there
            verb = "use" if len(notebooks) > 1 else "uses"
            findings.append(Finding(f"data: {name}", False, f"not in {folder}: {used} {verb} synthetic data instead; "
                                    f"python -m tutorial_lib datasets{flag} --download {name}", required=False))
            continue
        except (TutorialLibError, OSError, ValueError) as exc:  # there, but empty, malformed or not readable
            findings.append(Finding(f"data: {name}", False, f"in {folder} but unreadable: {exc}"))
            continue
        findings.append(Finding(f"data: {name}", True, f"{data.n_users:,} users, {data.n_items:,} items, read from "
                                f"{folder} (by {used})", required=False))
    return findings


def training_finding() -> Finding:
    """One epoch of a tiny SASRec on synthetic data, evaluated: the whole training path, in seconds."""
    from ..data import make_synthetic
    from ..experiments.run import ExperimentSpec, run_experiment

    t0 = time.perf_counter()
    try:
        data = make_synthetic(n_users=300, n_items=200, seed=0)
        spec = ExperimentSpec(model="sasrec", seed=0, epochs=1, max_len=20, model_options={"d_model": 32},
                              progress=False, verbose=False)
        result = run_experiment(spec, dataset=data)
    except Exception as exc:  # the report names what broke instead of a traceback in the middle of it
        return Finding("training", False, f"a one-epoch SASRec failed: {type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - t0
    ndcg = result.test.get("ndcg@10", float("nan"))
    if math.isnan(ndcg):
        return Finding("training", False, "a one-epoch SASRec gave a NaN test NDCG@10")
    return Finding("training", True, f"one epoch of a tiny SASRec on {result.device.type}, trained and evaluated "
                   f"in {seconds:.1f} s (test NDCG@10 {ndcg:.3f})")


def run_checks(data_root: str | os.PathLike | None = None, train: bool = True) -> list[Finding]:
    """Every finding, in the order the report prints them."""
    findings = [python_finding(), *package_findings(), kernel_finding(), device_finding(), mode_finding(),
                *data_findings(data_root)]
    if train:
        findings.append(training_finding())
    return findings


def report(findings: list[Finding]) -> tuple[str, int]:
    """The printed report and the exit status (1 when a required check failed)."""
    width = max(len(f.topic) for f in findings)
    lines = [f"{f.mark}  {f.topic:{width}s}  {f.detail}" for f in findings]
    failed = [f.topic for f in findings if f.required and not f.ok]
    warned = [f.topic for f in findings if not f.required and not f.ok]
    if failed:
        lines.append(f"\nNOT READY: fix {', '.join(failed)} (the lines marked FAIL say how)")
    else:
        lines.append("\nready for the course" + (f" ({len(warned)} warning{'s' if len(warned) != 1 else ''}: "
                                                 f"{', '.join(warned)})" if warned else ""))
    return "\n".join(lines), 1 if failed else 0


__all__ = ["Finding", "MIN_PYTHON", "NOTEBOOK_DATASETS", "report", "run_checks"]
