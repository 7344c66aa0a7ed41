"""Default settings per dataset and per method: the papers' values where they give them, documented
defaults otherwise. Everything a preset sets can be overridden on the command line.

Dataset defaults (SASRec paper and code): ``max_len`` 200 and dropout 0.2 on MovieLens; 50 and 0.5 on
the sparse Amazon/Yelp-style data.

Method presets, by dataset group (``"ml"`` = MovieLens, ``"sparse"`` = everything else):

* ``lightsans``/``lightsans-ape``: ``k_interests`` 20 on ML-1M (the paper's value at ``max_len`` 200);
  10 on the sparse data (the paper's Yelp value, at ``max_len`` 100; ours is 50).
* ``parec``/``fparec``: ``k`` 40 on ML-1M (the authors' script); 20 on the sparse data (``max_len`` 50).
* ``locker-*``: 2 heads of which 1 local, reach ``s = 1`` (the released code's default), as the SASRec
  backbone's 2 heads.
* ``rksa*``: 1 head and dropout 0.5 on every dataset (the RKSA paper), ``max_len`` 50 ("the latest 50
  actions for all datasets").
* ``bert4rec*``: mask probability 0.2 on ML-1M, 0.6 on the sparse data (BERT4Rec's and Locker's values).
"""
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


def dataset_group(name: str) -> str:
    """``"ml"`` for the MovieLens datasets (long, dense histories), ``"sparse"`` for the others."""
    return "ml" if name.startswith("ml-") or name == "synthetic" else "sparse"


#: model name prefix -> dataset group -> settings: ``max_len`` / ``mask_prob`` are run settings, the rest
#: are model options
METHOD_PRESETS: dict[str, dict[str, dict]] = {
    "lightsans": {"ml": {"k_interests": 20}, "sparse": {"k_interests": 10}},
    "fparec": {"ml": {"k": 40}, "sparse": {"k": 20}},
    "rksa": {"ml": {"n_heads": 1, "dropout": 0.5, "max_len": 50}, "sparse": {"n_heads": 1, "dropout": 0.5, "max_len": 50}},
    "bert4rec": {"ml": {"mask_prob": 0.2}, "sparse": {"mask_prob": 0.6}},
}
RUN_SETTINGS = ("max_len", "mask_prob")


def method_preset(model: str, dataset: str, max_len: int | None = None) -> tuple[dict, dict]:
    """``(model_options, run_settings)`` the presets give ``model`` on ``dataset``; with ``max_len``, a preset
    rank (FPARec's ``k``, LightSANs' ``k_interests``) larger than the window is reduced to it (an explicit one is
    the user's to choose)."""
    group = dataset_group(dataset)
    for prefix, by_group in METHOD_PRESETS.items():
        if model == prefix or model.startswith(prefix + "-"):
            chosen = dict(by_group.get(group, {}))
            run = {k: chosen.pop(k) for k in RUN_SETTINGS if k in chosen}
            for rank in ("k", "k_interests") if max_len is not None else ():
                if rank in chosen:
                    chosen[rank] = min(chosen[rank], max_len)
            return chosen, run
    return {}, {}


__all__ = ["DATASET_DEFAULTS", "SPARSE_DEFAULTS", "METHOD_PRESETS", "dataset_defaults", "dataset_group", "method_preset"]
