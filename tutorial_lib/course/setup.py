"""The first code cell of every notebook: ``env = setup_notebook()``.

It prints the versions and the device, warns when there is no GPU, seeds every random number generator,
sets one plot style, reports which real datasets are on disk, and returns a :class:`NotebookEnv` whose
``sizes(smoke=..., small=..., full=...)`` picks the sizes of the current ``COURSE_MODE``.

``COURSE_MODE`` (environment variable, ``small`` by default):

* ``smoke``: seconds per notebook; what CI runs (``python -m pytest``);
* ``small``: minutes per notebook on a 2-core CPU; the default for learners;
* ``full``: the papers' settings; meant for a GPU (hours per notebook on a CPU).
"""
from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError

MODE_ENV = "COURSE_MODE"
DEFAULT_MODE = "small"
COURSE_MODES: dict[str, str] = {
    "smoke": "seconds per notebook; what CI runs",
    "small": "minutes per notebook on a laptop CPU; the default",
    "full": "the papers' settings; meant for a GPU",
}
#: minimum versions (the same as pyproject.toml); jupyterlab matters only where the Jupyter server runs
REQUIREMENTS: dict[str, str] = {"torch": "2.3", "numpy": "1.24", "pandas": "2.0", "tqdm": "4.65",
                                "matplotlib": "3.7", "seaborn": "0.13", "ipywidgets": "8.0"}
OPTIONAL_REQUIREMENTS: dict[str, str] = {"jupyterlab": "4.0"}
PLOT_RC = {
    "figure.figsize": (7.0, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": "medium",
    "legend.frameon": False,
    "image.cmap": "viridis",
}


def course_mode(value: str | None = None) -> str:
    """The course mode: ``value`` if given, else ``$COURSE_MODE``, else ``"small"``; validated."""
    raw = os.environ.get(MODE_ENV, DEFAULT_MODE) if value is None else value
    mode = str(raw).strip().lower() or DEFAULT_MODE
    if mode not in COURSE_MODES:
        valid = "; ".join(f"{k} ({v})" for k, v in COURSE_MODES.items())
        raise ConfigError(f"COURSE_MODE={raw!r} is not a course mode. Valid values: {valid}. "
                          f"Set it with e.g. `export {MODE_ENV}=small` before starting Jupyter, or edit the "
                          "parameters cell")
    return mode


def select_sizes(sizes: dict[str, Any], mode: str | None = None) -> Any:
    """``sizes[mode]`` for a dict keyed by course mode, with clear errors (unknown or missing mode)."""
    mode = course_mode(mode)
    unknown = sorted(set(sizes) - set(COURSE_MODES))
    if unknown:
        raise ConfigError(f"sizes has keys {unknown} that are not course modes ({', '.join(COURSE_MODES)})")
    if mode not in sizes or sizes[mode] is None:
        raise ConfigError(f"no sizes given for COURSE_MODE={mode!r}; this notebook defines: "
                          f"{', '.join(k for k in COURSE_MODES if sizes.get(k) is not None)}")
    return sizes[mode]


def data_availability(root: str | os.PathLike | None = None) -> dict[str, bool]:
    """Whether each registered dataset's files are on disk (a quick file check: nothing is read).

    :func:`tutorial_lib.data.dataset_status` additionally loads every file and verifies it (seconds).
    """
    from ..data.paths import dataset_folder
    from ..data.registry import DATASETS

    return {name: all((dataset_folder(spec, root) / f.filename).is_file() for f in spec.required_files)
            for name, spec in DATASETS.items()}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def environment_report(quiet: bool = False) -> list[dict[str, Any]]:
    """Installed versions of the course's dependencies against their minimum versions.

    Prints a table (unless ``quiet``) and returns one dict per package: ``name``, ``required``, ``found``
    (``None`` when not installed), ``ok`` and ``optional``.
    """
    from importlib import metadata

    rows = []
    for optional, reqs in ((False, REQUIREMENTS), (True, OPTIONAL_REQUIREMENTS)):
        for name, minimum in reqs.items():
            try:
                found: str | None = metadata.version(name)
            except metadata.PackageNotFoundError:
                found = None
            ok = found is not None and _version_tuple(found) >= _version_tuple(minimum)
            rows.append({"name": name, "required": f">={minimum}", "found": found, "ok": ok, "optional": optional})
    if not quiet:
        print(f"{'package':12s} {'required':9s} {'installed':14s}")
        for r in rows:
            if r["ok"]:
                mark = "✅"
            elif r["optional"] and r["found"] is None:
                mark = "·  not in this kernel's environment (fine: it is only needed where Jupyter itself runs)"
            else:
                mark = "❌ upgrade: pip install -U " + r["name"]
            print(f"{r['name']:12s} {r['required']:9s} {str(r['found'] or '-'):14s} {mark}")
        bad = [r["name"] for r in rows if not r["ok"] and not (r["optional"] and r["found"] is None)]
        print("\nenvironment OK" if not bad else f"\nto fix: pip install -U {' '.join(bad)}")
    return rows


def set_plot_style() -> None:
    """One plot style for the whole course: seaborn's whitegrid theme, colour-blind palette, 7x4 in figures."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    mpl.rcParams.update(PLOT_RC)


@dataclass
class NotebookEnv:
    """What :func:`setup_notebook` found and chose.

    Attributes:
        mode: the course mode (``smoke``, ``small`` or ``full``).
        device: the device :func:`tutorial_lib.utils.resolve_device` picked (``auto``).
        seed: the seed every generator was seeded with.
        data_available: ``{dataset name: files present}`` for every registered dataset.
        data_dir: where the datasets are looked up.
        cpu_threads: threads torch uses on the CPU.
        versions: Python, torch, numpy and tutorial_lib versions.
        rng: a NumPy generator seeded with ``seed``.
    """

    mode: str
    device: torch.device
    seed: int
    data_available: dict[str, bool]
    data_dir: Path
    cpu_threads: int
    versions: dict[str, str] = field(default_factory=dict)
    rng: np.random.Generator = field(default_factory=np.random.default_rng, repr=False, compare=False)

    @property
    def has_gpu(self) -> bool:
        """Whether the device is a GPU (CUDA or Apple's MPS)."""
        return self.device.type in ("cuda", "mps")

    @property
    def real_data(self) -> bool:
        """Whether at least one real dataset is on disk."""
        return any(self.data_available.values())

    def sizes(self, smoke: Any = None, small: Any = None, full: Any = None) -> Any:
        """The argument named after the current mode, e.g. ``env.sizes(smoke=200, small=2000, full=None)``."""
        return select_sizes({"smoke": smoke, "small": small, "full": full}, self.mode)


def _device_line(device: torch.device) -> str:
    if device.type == "cuda":
        return f"device: cuda ({torch.cuda.get_device_name(device)})"
    return f"device: {device.type}"


def no_gpu_warning(mode: str) -> str:
    """The notice printed when no GPU is found, stronger for ``mode="full"``."""
    text = ("⚠ No GPU found: everything runs on the CPU. The smoke and small modes are sized for that "
            "(seconds / minutes per notebook).")
    if mode == "full":
        text += ("\n⚠ COURSE_MODE=full reproduces the papers' settings: on a CPU expect HOURS per notebook instead "
                 "of minutes on a GPU. Use small to learn, and run full on a machine with a CUDA GPU.")
    else:
        text += (" COURSE_MODE=full reproduces the papers' settings and would take hours per notebook here "
                 "instead of minutes on a GPU.")
    return text


def _data_lines(available: dict[str, bool], folder: Path) -> list[str]:
    have = [k for k, v in available.items() if v]
    if len(have) == len(available):
        return [f"data: all {len(have)} real datasets found in {folder}"]
    if have:
        lines = [f"data: {len(have)} of {len(available)} real datasets found in {folder} ({', '.join(have)})"]
    else:
        lines = [f"data: no real dataset found in {folder}; the notebooks use the built-in synthetic data"]
    if not available.get("ml-1m", True):
        lines.append("      to add MovieLens-1M: `python -m tutorial_lib datasets --download ml-1m`, or point "
                     "SEQREC_DATA_DIR at a folder that has it (notebook 00 explains)")
    return lines


def busy_cpu() -> tuple[float, int] | None:
    """``(load average, cores)`` when more processes want the CPU than there are cores, else ``None``."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on Windows
        return None
    cores = os.cpu_count() or 1
    return (load, cores) if load > cores + 0.5 else None


def setup_notebook(seed: int = 0, mode: str | None = None, threads: int | None = None,
                   quiet: bool = False) -> NotebookEnv:
    """Prepare a notebook: versions, device, seeds, plot style, data availability, course mode.

    Args:
        seed: seeds Python, NumPy and torch (:func:`tutorial_lib.utils.seed_everything`).
        mode: the course mode; default ``$COURSE_MODE`` or ``small``. An invalid value raises
            :class:`~tutorial_lib.errors.ConfigError` listing the valid ones.
        threads: CPU threads for torch. Default: torch's choice (or ``$OMP_NUM_THREADS``), except on a CPU
            that is busy right now (load average above the number of cores + 0.5), where 1 thread is used: the
            course's small models then train many times faster than with threads fighting other processes.
        quiet: print nothing.
    """
    from .. import __version__
    from ..data.paths import data_dir
    from ..utils import resolve_device, seed_everything

    mode = course_mode(mode)
    busy = None
    if threads is not None:
        if threads < 1:
            raise ConfigError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    elif "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() > 1:
        busy = busy_cpu()
        if busy is not None:
            torch.set_num_threads(1)
    device = resolve_device("auto")
    rng = seed_everything(seed)
    set_plot_style()
    folder = data_dir()
    available = data_availability()
    versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                "tutorial_lib": __version__}
    env = NotebookEnv(mode=mode, device=device, seed=seed, data_available=available, data_dir=folder,
                      cpu_threads=torch.get_num_threads(), versions=versions, rng=rng)
    if not quiet:
        lines = [
            " · ".join(f"{k} {v}" for k, v in versions.items()),
            f"{_device_line(device)} · {env.cpu_threads} CPU thread{'s' if env.cpu_threads != 1 else ''} "
            f"(of {os.cpu_count()} cores) · seed {seed}",
            f"COURSE_MODE={mode} ({COURSE_MODES[mode]})",
        ]
        if not env.has_gpu:
            lines.append(no_gpu_warning(mode))
        if busy is not None:
            lines.append(f"⚠ The CPU is busy (load average {busy[0]:.1f} on {busy[1]} cores), so torch uses 1 thread: "
                         "several threads fighting other processes can make training many times slower. "
                         "`setup_notebook(threads=N)` chooses another number.")
        lines += _data_lines(available, folder)
        print("\n".join(lines))
        sys.stdout.flush()
    return env
