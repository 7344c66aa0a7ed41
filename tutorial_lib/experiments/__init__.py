"""Presets, the results store (and, later, the benchmark runner and the papers' published numbers)."""
from .presets import dataset_defaults
from .results import RUN_COLUMNS, append_run, append_runs, read_runs, write_curve

__all__ = ["dataset_defaults", "RUN_COLUMNS", "append_run", "append_runs", "read_runs", "write_curve"]
