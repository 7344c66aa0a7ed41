"""Seed statistics shared by the report and notebook 07: mean and sample spread, and the paired t-test
with its 95 % confidence interval.

The spread divides by ``n - 1`` (``ddof=1``), as seaborn's ``errorbar="sd"`` does. A paired comparison
takes two sequences over the same seeds (or the same users) in the same order.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

#: two-sided 95 % quantiles of Student's t distribution, t_{0.975}(df), df = 1..30
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
         2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
         2.0518, 2.0484, 2.0452, 2.0423)
_Z975 = 1.959964


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """``(mean, sample standard deviation, n)`` of the non-NaN values.

    The standard deviation divides by ``n - 1`` (``ddof=1``): with 3 seeds, dividing by ``n`` would make the
    spread look about 18 % smaller than the unbiased variance estimate says. With one value the spread is
    unknown (NaN); with none, the mean is NaN too and ``n`` is 0.
    """
    v = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float).ravel()
    v = v[~np.isnan(v)]
    n = int(v.size)
    if n == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if n > 1 else math.nan, n


def paired_t(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """Paired comparison of ``a`` and ``b`` (the same seeds, or the same users, in the same order).

    With the differences ``d_i = a_i - b_i``: ``(mean(d), std(d, ddof=1) / sqrt(n), mean(d) / se)``.
    Pairing removes what ``a_i`` and ``b_i`` share (an easy user, a lucky data order), so the standard error
    is usually far smaller than the one of two independent samples.
    """
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples need the same length, got {a.size} and {b.size}")
    if a.size < 2:
        raise ValueError("a paired comparison needs at least 2 pairs")
    d = a - b
    mean = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(d.size))
    t = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean else math.nan)
    return mean, se, t


def t_critical(df: int) -> float:
    """Two-sided 95 % quantile ``t_{0.975}(df)`` of Student's t (a table up to 30, a series beyond)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975  # Cornish-Fisher expansion of t around the normal quantile (error < 1e-4 for df > 30)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def paired_ci(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Mean difference ``a - b`` with its 95 % confidence interval (paired t)."""
    mean, se, t = paired_t(a, b)
    n = len(np.asarray(a).ravel())
    half = t_critical(n - 1) * se
    return {"n": n, "diff": mean, "se": se, "t": t, "low": mean - half, "high": mean + half}


def verdict(low: float, high: float) -> str:
    """``"better"`` / ``"worse"`` when the interval excludes 0, else ``"not distinguishable"``."""
    if math.isnan(low) or math.isnan(high):
        return "too few seeds"
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "not distinguishable"


__all__ = ["mean_std", "paired_t", "t_critical", "paired_ci", "verdict"]
