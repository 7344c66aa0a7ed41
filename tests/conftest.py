"""Shared fixtures: tiny synthetic data and a quiet library (no progress bars or log lines)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
def _restore_torch_rng():
    """Tests seed torch freely; keep them from leaking RNG state into each other."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


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
