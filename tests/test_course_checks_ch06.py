"""Checks of notebook 06: the references pass, stubs say 'not done', typical mistakes get their hint."""
from __future__ import annotations

import re

import pytest
import torch

from tutorial_lib.attention.kernelized import skew_normal_sample
from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch06


def counting_kernel(cooc, counts):
    denom = counts[:, :, None] * counts[:, None, :]
    k = torch.where(denom > 0, cooc ** 2 / denom.clamp_min(1.0), torch.zeros(()))
    return k.masked_fill(torch.eye(cooc.shape[-1], dtype=torch.bool), 1.0)


def sample_z(xi, omega, delta, chol, y0, eps):
    y = eps @ chol.transpose(-2, -1)
    return xi + omega * (delta * y0.abs() + torch.sqrt(1 - delta ** 2) * y)


def stub(*args):
    raise NotImplementedError()


def test_references_pass(capsys):
    ch06.check_counting_kernel(counting_kernel)
    ch06.check_skew_normal_sampler(sample_z, n_samples=50_000)
    out = capsys.readouterr().out
    assert out.count("✅") == 3 and "closed forms" in out


@pytest.mark.parametrize("check", [ch06.check_counting_kernel, ch06.check_skew_normal_sampler])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


def test_library_noise_reproduces_the_library_draws():
    for case, seed in ch06.sampler_cases():
        xi, omega, delta, chol, y0, eps = case.args
        expected = skew_normal_sample(xi, omega, delta, chol, generator=torch.Generator().manual_seed(seed))
        assert torch.allclose(ch06.reference_sample_z(*case.args), expected, atol=1e-6)


def test_counted_block_matches_hand_counts():
    cooc, counts = ch06.counted_block([[1, 2], [1, 2, 3], [3, 1]], [[1, 2, 3]])
    assert counts.tolist() == [[3.0, 2.0, 2.0]]
    assert cooc[0].tolist() == [[3.0, 2.0, 2.0], [2.0, 2.0, 1.0], [2.0, 1.0, 2.0]]


@pytest.mark.parametrize("mistake, hint", [
    (lambda c, n: torch.where(n[:, :, None] * n[:, None, :] > 0, c / (n[:, :, None] * n[:, None, :]).clamp_min(1.0), torch.zeros(()))
     .masked_fill(torch.eye(c.shape[-1], dtype=torch.bool), 1.0), "SQUARED"),
    (lambda c, n: c ** 2 / (n[:, :, None] * n[:, None, :]), "NaN"),
    (lambda c, n: torch.where(n[:, :, None] * n[:, None, :] > 0, c ** 2 / (n[:, :, None] * n[:, None, :]).clamp_min(1.0),
                              torch.zeros(())), "diagonal must still be 1"),
    (lambda c, n: torch.where(n[:, :, None] > 0, c ** 2 / (n[:, :, None] ** 2).clamp_min(1.0), torch.zeros(()))
     .masked_fill(torch.eye(c.shape[-1], dtype=torch.bool), 1.0), "same count twice"),
    (lambda c, n: torch.where(n[:, :, None] * n[:, None, :] > 0, c ** 2 / (n[:, :, None] * n[:, None, :]).clamp_min(1.0),
                              torch.zeros(())) + torch.eye(c.shape[-1]), "do not add to it"),
    (lambda c, n: torch.where(n[:, :, None] * n[:, None, :] > 0, c ** 2 / (n[:, :, None] * n[:, None, :]).clamp_min(1.0),
                              torch.zeros(())).tril().masked_fill(torch.eye(c.shape[-1], dtype=torch.bool), 1.0),
     "not symmetric"),
])
def test_counting_kernel_mistakes(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        ch06.check_counting_kernel(mistake)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")     # the `.T` mistake below is what torch warns about
@pytest.mark.parametrize("mistake, hint", [
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0 + torch.sqrt(1 - de ** 2) * (eps @ ch.transpose(-2, -1))), r"\|y0\|"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (-de * y0.abs() + torch.sqrt(1 - de ** 2) * (eps @ ch.transpose(-2, -1))),
     "PLUS sign"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de / torch.sqrt(1 + de ** 2) * y0.abs()
                                                 + torch.sqrt(1 - de ** 2 / (1 + de ** 2)) * (eps @ ch.transpose(-2, -1))),
     "a second time"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de ** 2) * (eps @ ch)), "transpose"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + (1 - de ** 2) * (eps @ ch.transpose(-2, -1))), "SQUARE ROOT"),
    (lambda xi, om, de, ch, y0, eps: xi + de * y0.abs() + om * torch.sqrt(1 - de ** 2) * (eps @ ch.transpose(-2, -1)),
     "whole standardised sample"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de ** 2) * eps), "correlated"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs()
                                                 + torch.sqrt(1 - de ** 2) * (ch @ eps[..., None]).squeeze(-1)),
     "as if B were the heads"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de) * (eps @ ch.transpose(-2, -1))),
     "δ SQUARED under the root"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de ** 2) * eps @ ch.transpose(-2, -1)),
     "bind equally"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de ** 2) * (eps @ ch.T)),
     r"\.transpose\(-2, -1\)` \(or `\.mT`\)"),
])
def test_sampler_mistakes(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        ch06.check_skew_normal_sampler(mistake, n_samples=10_000)


def _y(ch, eps):
    return eps @ ch.transpose(-2, -1)


@pytest.mark.parametrize("mistake, hint", [
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.clamp_min(0) + torch.sqrt(1 - de ** 2) * _y(ch, eps)),
     "not max(y0, 0)"),
    (lambda xi, om, de, ch, y0, eps: xi + om.sqrt() * (de * y0.abs() + torch.sqrt(1 - de ** 2) * _y(ch, eps)),
     "not a variance"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de ** 2)
                                                 * (eps @ (ch @ ch.transpose(-2, -1)))), "covariance ψ²"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * 0.7978845608 + torch.sqrt(1 - de ** 2) * _y(ch, eps)),
     "the MEAN of |y0|"),
    (lambda xi, om, de, ch, y0, eps: sample_z(xi, om, de, ch, torch.randn_like(y0), eps), "do not draw your own noise"),
    (lambda xi, om, de, ch, y0, eps: xi + om * (de * y0.abs() + torch.sqrt(1 - de ** 2) * (ch @ eps)),
     "chol @ eps multiplies the wrong axes"),
    (lambda xi, om, de, ch, y0, eps: sample_z(xi, om, de, ch, y0.squeeze(-1), eps), "do not squeeze it"),
])
def test_more_sampler_mistakes_get_their_hints(mistake, hint):
    """Mistakes a learner tried in a walkthrough that got only the generic reminder."""
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch06.check_skew_normal_sampler(mistake, n_samples=10_000)


@pytest.mark.parametrize("detach", ["no_grad", "numpy"])
def test_a_sample_without_gradients_is_caught(detach):
    """The right numbers without a gradient miss the point of the reparameterisation."""
    def without_grad(xi, omega, delta, chol, y0, eps):
        if detach == "numpy":
            args = [a.detach().numpy() for a in (xi, omega, delta, chol, y0, eps)]
            xi, omega, delta, chol, y0, eps = args
            y = eps @ chol.swapaxes(-2, -1)
            return torch.from_numpy(xi + omega * (delta * abs(y0) + (1 - delta ** 2) ** 0.5 * y))
        with torch.no_grad():
            return sample_z(xi, omega, delta, chol, y0, eps)

    with pytest.raises(CheckFailed, match="no gradient flows"):
        ch06.check_skew_normal_sampler(without_grad, n_samples=10_000)


def test_a_missing_square_root_is_caught_on_the_strongly_skewed_one_dimensional_case():
    case = ch06.sampler_cases()[0][0]
    assert float(case.args[2].min()) >= 0.5          # δ: far from 0, where sqrt(1 - δ²) and 1 - δ² differ clearly


def test_sampler_that_modifies_its_input_is_caught():
    def in_place(xi, omega, delta, chol, y0, eps):
        y0.abs_()
        return sample_z(xi, omega, delta, chol, y0, eps)

    with pytest.raises(CheckFailed, match="in place"):
        ch06.check_skew_normal_sampler(in_place, n_samples=10_000)


def test_moment_table_separates_the_true_covariance_from_omega_psi_omega():
    m = ch06.moment_table(sample_z, n_samples=100_000)
    assert torch.allclose(m["mean"], m["mean_closed"], atol=6 * m["mean_se"].max())
    assert torch.allclose(m["cov"], m["cov_closed"], atol=6 * m["cov_se"].max())
    assert (m["cov"] - m["cov_naive"]).abs().max() > 0.1  # the naive ω ψ ω is visibly wrong for skewed keys
