"""Shared fixtures: tiny synthetic data and a quiet library (no progress bars or log lines)."""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tutorial_lib.data import get_spec, leave_one_out, make_synthetic, paths

# The tests use tiny tensors: extra intra-op threads only add synchronisation cost, and on a shared 2-core
# machine (a background training run) oversubscribed OpenMP threads make them 10-20x slower.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TUTORIAL_LIB_QUIET", "1")


@pytest.fixture(autouse=True)
def _seeded_generators():
    """Every test starts from the same global generators (torch, NumPy, random), so a test that draws without
    seeding is still the same test on every run (torch seeds itself from the OS in each process); the state is
    restored afterwards, so tests that seed freely leak nothing into each other."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    yield
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


@pytest.fixture(scope="session")
def tiny_dataset():
    """200 users, 60 items, sequences of 5..15 items, strong Markov structure."""
    return make_synthetic(n_users=200, n_items=60, n_clusters=4, min_len=5, max_len=15, markov_prob=0.7, seed=3)


@pytest.fixture(scope="session")
def tiny_split(tiny_dataset):
    return leave_one_out(tiny_dataset)


@pytest.fixture(scope="session")
def require_dataset() -> Callable[[str], Path]:
    """``require_dataset(name)``: the folder of a registered dataset's real files, or skip the test when any file is
    absent (CI sets SEQREC_DATA_DIR to the shared data folder, so there they are present)."""
    def require(name: str) -> Path:
        spec = get_spec(name)
        folder = paths.dataset_folder(spec)
        missing = [f.filename for f in spec.required_files if not (folder / f.filename).is_file()]
        if missing:
            pytest.skip(f"dataset files absent: {', '.join(missing)} not in {folder} "
                        f"(set {paths.ENV_VAR} to the data folder to run this test)")
        return folder
    return require
