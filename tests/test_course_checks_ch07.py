"""Checks of notebook 07: the references pass, stubs say 'not done', typical mistakes get their hint."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch07


def mean_std(values):
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return float("nan"), float("nan"), 0
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else float("nan"), len(x)


def paired_t(a, b):
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    mean = d.mean()
    se = d.std(ddof=1) / math.sqrt(len(d))
    if se == 0:
        return mean, se, math.copysign(math.inf, mean) if mean else math.nan
    return mean, se, mean / se


def stub(*args):
    raise NotImplementedError()


def test_references_pass(capsys):
    ch07.check_mean_std(mean_std)
    ch07.check_paired_t(paired_t)
    ch07.check_mean_std(ch07.reference_mean_std)
    ch07.check_paired_t(ch07.reference_paired_t)
    assert capsys.readouterr().out.count("✅") == 4


def test_numpy_and_torch_scalars_and_a_float_n_are_accepted(capsys):
    ch07.check_mean_std(lambda v: (np.float64(mean_std(v)[0]), np.float32(mean_std(v)[1]), float(mean_std(v)[2])))
    ch07.check_paired_t(lambda a, b: tuple(torch.tensor(x, dtype=torch.float64) for x in paired_t(a, b)))
    assert capsys.readouterr().out.count("✅") == 2


@pytest.mark.parametrize("check", [ch07.check_mean_std, ch07.check_paired_t])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


def test_population_std_gets_the_ddof_hint():
    def population(values):
        x = np.asarray(values, dtype=float)
        x = x[~np.isnan(x)]
        return float(x.mean()), float(x.std()) if len(x) > 1 else float("nan"), len(x)

    with pytest.raises(CheckFailed, match="ddof=1"):
        ch07.check_mean_std(population)


def test_nan_not_dropped_gets_its_hint():
    def keeps_nan(values):
        x = np.asarray(values, dtype=float)
        return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else float("nan"), len(x)

    with pytest.raises(CheckFailed, match="NaN"):
        ch07.check_mean_std(keeps_nan)


def test_zero_std_for_one_seed_gets_its_hint():
    def zero_for_one(values):
        m, s, n = mean_std(values)
        return m, 0.0 if n == 1 else s, n

    with pytest.raises(CheckFailed, match="single seed"):
        ch07.check_mean_std(zero_for_one)


def test_unpaired_standard_error_gets_the_pairing_hint():
    def unpaired(a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        m = (a - b).mean()
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        return m, se, m / se

    with pytest.raises(CheckFailed, match="independent samples"):
        ch07.check_paired_t(unpaired)


@pytest.mark.parametrize("mistake, hint", [
    (lambda a, b: paired_t(b, a), "sign is reversed"),
    (lambda a, b: (lambda d: (d.mean(), d.std(ddof=1), d.mean() / d.std(ddof=1)))(np.subtract(a, b)), "sqrt\\(n\\)"),
    (lambda a, b: (lambda d: (d.mean(), d.std() / math.sqrt(len(d)), d.mean() / (d.std() / math.sqrt(len(d)))))(
        np.subtract(a, b)), "n - 1"),
    (lambda a, b: (*paired_t(a, b)[:2], 1.0), "t = mean_diff / std_err"),
    (lambda a, b: (*paired_t(a, b)[:2], abs(paired_t(a, b)[2])), "WORSE"),          # the sign of t dropped
])
def test_paired_t_mistakes_get_their_hint(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        ch07.check_paired_t(mistake)


def test_a_function_that_mutates_its_input_is_caught():
    def mutating(values):
        if isinstance(values, np.ndarray):
            values[:] = values[::-1].copy()  # same mean and std, but the input is changed
        return mean_std(values)

    with pytest.raises(CheckFailed, match="in place"):
        ch07.check_mean_std(mutating)


def test_no_value_at_all_is_a_case_of_mean_std():
    def fails_when_empty(values):
        x = [v for v in values if v == v]
        return sum(x) / len(x), mean_std(values)[1], len(x)          # ZeroDivisionError without values

    with pytest.raises(CheckFailed, match="no value at all"):
        ch07.check_mean_std(fails_when_empty)


def test_zero_spread_of_the_differences_is_a_case_of_paired_t():
    def zero_std_err(a, b):
        mean, se, t = paired_t(a, b)
        return mean, se, 0.0 if se == 0 else t

    with pytest.raises(CheckFailed, match="std_err = 0, t is inf"):
        ch07.check_paired_t(zero_std_err)


@pytest.mark.parametrize("wrong, hint", [
    (lambda values: (lambda v: (float(np.mean(v)) if v else float("nan"),
                                float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"), len(v)))(
        [x for x in values if x and x == x]), "a value of exactly 0 was left out"),
    (lambda values: (lambda v: (float(np.mean(v)) if v.size else float("nan"),
                                float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"), v.size))(
        np.asarray(values, float)[~np.isnan(np.asarray(values, float))]), "standard error of the mean"),
    (lambda values: (lambda v: (float(np.mean(v)) if v.size else float("nan"),
                                float(np.var(v, ddof=1)) if v.size > 1 else float("nan"), v.size))(
        np.asarray(values, float)[~np.isnan(np.asarray(values, float))]), "you returned the variance"),
])
def test_more_mean_std_mistakes_get_their_hints(wrong, hint):
    """Mistakes a learner tried in a walkthrough: dropping a 0.0 result passed, the others got the reminder."""
    with pytest.raises(CheckFailed, match=hint):
        ch07.check_mean_std(wrong)


def test_a_paired_standard_error_with_the_wrong_divisor_is_named_even_when_t_is_right():
    def se_ddof0_t_right(a, b):
        d = np.asarray(a, float) - np.asarray(b, float)
        mean, se = float(d.mean()), float(d.std(ddof=0) / np.sqrt(d.size))
        right_se = float(d.std(ddof=1) / np.sqrt(d.size))
        return mean, se, (mean / right_se if right_se else math.copysign(math.inf, mean) if mean else math.nan)

    def sqrt_n_minus_1(a, b):
        d = np.asarray(a, float) - np.asarray(b, float)
        mean, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size - 1))
        return mean, se, (mean / se if se else math.copysign(math.inf, mean) if mean else math.nan)

    with pytest.raises(CheckFailed, match=re.escape("use n - 1 (np.std(d, ddof=1))")):
        ch07.check_paired_t(se_ddof0_t_right)
    with pytest.raises(CheckFailed, match=re.escape("not / sqrt(n - 1)")):
        ch07.check_paired_t(sqrt_n_minus_1)
