"""Root pytest configuration: how `python -m pytest` runs the notebooks.

pyproject.toml collects tests/, solutions/ and notebooks/; nbval executes every notebook cell by cell in a
fresh kernel of this environment (lax mode: a cell fails only by raising, or, when it contains
`# NBVAL_CHECK_OUTPUT`, by printing something other than its stored output). The kernels inherit the
variables below, set only when the user has not set them (`COURSE_MODE=small python -m pytest notebooks`
runs the notebooks at their default size).
"""
from __future__ import annotations

import os

NOTEBOOK_ENV = {
    "COURSE_MODE": "smoke",  # notebooks pick their smallest sizes: seconds per notebook
    "TUTORIAL_LIB_QUIET": "1",  # no progress bars or per-epoch log lines
    "MPLBACKEND": "Agg",  # figures are drawn but not embedded as images
    # tiny models: extra OpenMP threads only add synchronisation cost, and on a busy CPU they make
    # training many times slower (see setup_notebook's busy-CPU warning)
    "OMP_NUM_THREADS": "1",
}
for _key, _value in NOTEBOOK_ENV.items():
    os.environ.setdefault(_key, _value)

# The notebook kernels import `tutorial_lib` from this checkout, not from wherever the package was installed
# (an editable install of another clone would otherwise be what the notebooks test).
_ROOT = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
