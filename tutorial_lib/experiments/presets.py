"""Default hyper-parameters per dataset (SASRec's settings; the chapters add per-method presets)."""
from __future__ import annotations

#: SASRec paper / code: max_len 200 and dropout 0.2 for ML-1M; 50 and 0.5 for the sparse Amazon-style data
DATASET_DEFAULTS: dict[str, dict[str, float | int]] = {
    "ml-1m": {"max_len": 200, "dropout": 0.2},
    "ml-100k": {"max_len": 200, "dropout": 0.2},
    "synthetic": {"max_len": 50, "dropout": 0.2},
}
SPARSE_DEFAULTS: dict[str, float | int] = {"max_len": 50, "dropout": 0.5}


def dataset_defaults(name: str) -> dict[str, float | int]:
    """``max_len`` and ``dropout`` to use on ``name`` unless the user says otherwise."""
    return dict(DATASET_DEFAULTS.get(name, SPARSE_DEFAULTS))
