"""Checks of notebook 07 (the complete benchmark): mean and sample standard deviation over seeds, and the
paired comparison of two methods (mean difference, standard error, t statistic).

The references are :func:`tutorial_lib.viz.benchmark.mean_std` and :func:`tutorial_lib.viz.benchmark.paired_t`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .base import Case, check_function, exercise_check

MEAN_STD_LIBRARY = "tutorial_lib.viz.benchmark.mean_std"
PAIRED_T_LIBRARY = "tutorial_lib.viz.benchmark.paired_t"


# ----------------------------------------------------------------------------- references
def reference_mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """The library's ``(mean, sample standard deviation, n)`` of the non-NaN values."""
    from ...viz.benchmark import mean_std

    return mean_std(values)


def reference_paired_t(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """The library's paired comparison of ``a`` and ``b``: ``(mean_diff, std_err, t)``."""
    from ...viz.benchmark import paired_t

    return paired_t(a, b)


def _scalars(result: Any) -> Any:
    """NumPy / torch scalars in a returned tuple as plain Python numbers (so ``np.float64`` or a 0-d tensor is fine)."""
    if not isinstance(result, (tuple, list)):
        return result
    out = []
    for v in result:
        if hasattr(v, "item") and np.ndim(v) == 0:
            v = v.item()
        out.append(v)
    return tuple(out)


def _mean_std_result(result: Any) -> Any:
    result = _scalars(result)
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[2], float) and result[2].is_integer():
        result = (result[0], result[1], int(result[2]))  # n returned as 3.0 is fine
    return result


# ----------------------------------------------------------------------------- exercise 1: mean ± std
def mean_std_cases() -> list[Case]:
    """Seed results as lists and arrays, with the edge cases: a NaN, a single seed, no value, only NaN."""
    rng = np.random.default_rng(7)
    return [
        Case(([0.10, 0.12, 0.14],), label="three seeds"),
        Case(([0.0899, 0.0920, 0.0881, 0.0905, 0.0912],), label="five seeds"),
        Case((np.array([0.25, 0.27]),), label="two seeds, as a NumPy array"),
        Case(([0.1190, float("nan"), 0.1210],), label="a seed without a result (NaN) must be left out"),
        Case(([0.0, 0.1, float("nan")],), label="a run that scored exactly 0 is a result, not a missing one"),
        Case(([0.0573],), label="a single seed: the spread is unknown, so std is NaN"),
        Case((rng.uniform(0.05, 0.25, size=12).tolist(),), label="random values"),
        Case(([],), label="no value at all: return (nan, nan, 0)"),
        Case(([float("nan"), float("nan")],), label="no seed has a result (all NaN): return (nan, nan, 0)"),
    ]


def _diagnose_mean_std(case: Case, yours: Any, expected: tuple[float, float, int]) -> str | None:
    values = np.asarray(case.args[0], dtype=float)
    finite = values[~np.isnan(values)]
    if not isinstance(yours, (tuple, list)) or len(yours) != 3:
        return "return three values: (mean, std, n)"
    try:
        mean, std, n = (float(x) for x in yours)
    except (TypeError, ValueError):
        return None
    if finite.size > 1 and math.isclose(std, float(finite.std(ddof=0)), rel_tol=1e-6, abs_tol=1e-12):
        return ("you divided by n (population standard deviation, np.std's default). Seeds are a sample of all "
                "the seeds you could have run: divide by n - 1 (np.std(x, ddof=1))")
    if math.isnan(mean) and finite.size and np.isnan(values).any():
        return "a NaN spoils the mean: drop the NaN values first (x = x[~np.isnan(x)])"
    if np.isnan(values).any() and n == values.size:
        return "n counts the seeds that have a result: do not count the NaN"
    if finite.size == 0 and not (math.isnan(mean) and math.isnan(std) and n == 0):
        return "with no value left, there is nothing to average: return (float('nan'), float('nan'), 0)"
    if finite.size > 1 and n == int((finite != 0).sum()) and (finite == 0).any():
        return ("a value of exactly 0 was left out: a run that scores 0 is a result; only NaN is missing (`if v` "
                "drops 0.0 too; test with np.isnan)")
    if finite.size > 1 and math.isclose(std, float(finite.std(ddof=1)) / math.sqrt(finite.size), rel_tol=1e-6):
        return ("you returned the standard error of the mean, std / sqrt(n): return the standard deviation of the "
                "values themselves (the spread of the seeds)")
    if finite.size > 1 and math.isclose(std, float(finite.var(ddof=1)), rel_tol=1e-6) and std != 0.0:
        return "you returned the variance: the standard deviation is its square root"
    if finite.size == 1 and std == 0.0:
        return ("with a single seed the spread is unknown, not zero: return float('nan') for std "
                "(np.std([x], ddof=1) would warn and give nan)")
    return None


@exercise_check
def check_mean_std(mean_std: Callable[..., Any]) -> None:
    """Check ``mean_std(values) -> (mean, std, n)`` against the library's version."""
    check_function(lambda values: _mean_std_result(mean_std(values)), reference_mean_std, mean_std_cases(),
                   name=getattr(mean_std, "__name__", "mean_std"), library=MEAN_STD_LIBRARY,
                   output_names=("mean", "std", "n"), diagnose=_diagnose_mean_std, atol=1e-9, rtol=1e-7,
                   hint="mean over the non-NaN values; std with ddof=1 (NaN for a single value); n = number of "
                        "non-NaN values")


# ----------------------------------------------------------------------------- exercise 2: paired comparison
def paired_t_cases() -> list[Case]:
    """Pairs of equal-length samples: a few seeds, 200 users, a worse method, then zero standard errors."""
    rng = np.random.default_rng(11)
    users = rng.uniform(0.0, 1.0, size=200)
    a_users = np.clip(users + rng.normal(0.03, 0.1, size=200), 0.0, 1.0)
    return [
        Case(([0.12, 0.13, 0.11], [0.10, 0.12, 0.10]), label="three seeds"),
        Case(([0.25, 0.27, 0.22, 0.30], [0.26, 0.25, 0.20, 0.28]), label="four seeds"),
        Case(([0.05, 0.07], [0.06, 0.05]), label="two seeds: a from the first method, b from the baseline"),
        Case((a_users, users), label="200 users: per-user NDCG of two models"),
        Case((np.array([0.40, 0.10, 0.70, 0.25, 0.55]), np.array([0.38, 0.05, 0.69, 0.20, 0.52])),
             label="pairs that differ a lot between each other but little within a pair"),
        Case(([0.10, 0.11, 0.09], [0.12, 0.12, 0.12]), label="the first method is WORSE: mean_diff and t are negative"),
        Case(([0.5, 0.75, 0.25], [0.25, 0.5, 0.0]), label="every difference is 0.25: std_err = 0, so t = inf"),
        Case(([0.25, 0.5, 0.0], [0.5, 0.75, 0.25]), label="every difference is -0.25: std_err = 0, so t = -inf"),
        Case(([0.5, 0.75], [0.5, 0.75]), label="no difference at all: std_err = 0 and mean 0, so t = nan"),
    ]


def _t(mean: float, se: float) -> float:
    return mean / se if se > 0 else (math.copysign(math.inf, mean) if mean else math.nan)


def _paired_variants(a, b) -> dict[str, tuple[float, float, float]]:
    a, b = np.asarray(a, float), np.asarray(b, float)
    n, d = a.size, a - b
    m = float(d.mean())
    out = {}
    for key, se in (("unpaired", math.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / n)),
                    ("ddof0", d.std(ddof=0) / math.sqrt(n)), ("no_sqrt_n", d.std(ddof=1)),
                    ("over_n", d.std(ddof=1) / n),
                    ("sqrt_n_minus_1", d.std(ddof=1) / math.sqrt(n - 1) if n > 1 else float("nan"))):
        out[key] = (m, float(se), _t(m, float(se)))
    se = float(d.std(ddof=1) / math.sqrt(n))
    out["swapped"] = (-m, se, _t(-m, se))
    return out


_PAIRED_HINTS = {
    "unpaired": "you computed the standard error of two independent samples (sqrt(var(a)/n + var(b)/n)). The samples "
                "are paired (same seeds, same users): take the differences d = a - b first and use std(d)",
    "ddof0": "the standard deviation of the differences divides by n; use n - 1 (np.std(d, ddof=1))",
    "no_sqrt_n": "that is the standard deviation of the differences; the standard error of their mean is "
                 "std(d) / sqrt(n)",
    "over_n": "the standard error is std(d) / sqrt(n), not std(d) / n",
    "sqrt_n_minus_1": "the standard error is std(d) / sqrt(n), not / sqrt(n - 1): the n - 1 belongs inside std "
                      "(ddof=1) only",
    "swapped": "the sign is reversed: the differences are a - b (positive when a is better)",
}


def _diagnose_paired_t(case: Case, yours: Any, expected: tuple[float, float, float]) -> str | None:
    if not isinstance(yours, (tuple, list)) or len(yours) != 3:
        return "return three values: (mean_diff, std_err, t)"
    try:
        got = np.array([float(x) for x in yours])
    except (TypeError, ValueError):
        return None
    variants = _paired_variants(*case.args)
    for key, values in variants.items():
        if np.allclose(got, values, rtol=1e-6, atol=1e-12):
            return _PAIRED_HINTS[key]
    for key, values in variants.items():      # the standard error alone (t may be right, e.g. from scipy)
        if key != "swapped" and np.isclose(got[1], values[1], rtol=1e-6, atol=1e-12) and \
                not np.isclose(got[1], float(expected[1]), rtol=1e-6, atol=1e-12):
            return _PAIRED_HINTS[key]
    if np.allclose(got[:2], np.asarray(expected[:2], float), rtol=1e-6, atol=1e-12):
        if float(expected[1]) == 0.0:
            return ("mean and standard error are right; with std_err = 0, t is inf with the sign of mean_diff, or "
                    "nan when mean_diff is 0 too")
        return "mean and standard error are right; t = mean_diff / std_err"
    return None


@exercise_check
def check_paired_t(paired_t: Callable[..., Any]) -> None:
    """Check ``paired_t(a, b) -> (mean_diff, std_err, t)`` against the library's version."""
    check_function(lambda a, b: _scalars(paired_t(a, b)), reference_paired_t, paired_t_cases(),
                   name=getattr(paired_t, "__name__", "paired_t"), library=PAIRED_T_LIBRARY,
                   output_names=("mean_diff", "std_err", "t"), diagnose=_diagnose_paired_t, atol=1e-9, rtol=1e-6,
                   hint="d = a - b; mean_diff = mean(d); std_err = std(d, ddof=1) / sqrt(n); t = mean_diff / std_err")


__all__ = ["check_mean_std", "check_paired_t", "reference_mean_std", "reference_paired_t", "mean_std_cases",
           "paired_t_cases"]
