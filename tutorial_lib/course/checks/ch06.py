"""Checks of notebook 06 (RKSA, kernelized stochastic attention): the counting kernel and the reparameterised
skew-normal sampler of Eq. 13.

* ``check_counting_kernel(counting_kernel)``: ``K_c[j, l] = P_jl^2 / (P_j P_l)`` with a unit diagonal, against
  ``tutorial_lib.attention.kernelized.counting_kernel`` on hand-made and on real (counted) co-occurrences.
* ``check_skew_normal_sampler(sample_z)``: ``sample_z(xi, omega, delta, chol, y0, eps)`` is given the noise.
  With ``y0`` and ``eps`` drawn from a seeded generator in the order the library draws them (first ``y0``, then
  ``eps``), it must return exactly what ``skew_normal_sample(xi, omega, delta, chol, generator=<same seed>)``
  returns. Then its mean and covariance over many draws are compared with the closed forms
  (:func:`moment_table`).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .base import (Case, CheckFailed, call_learner, check_function, exercise_check, expect, expect_gradients,
                  explain_difference, fail, passed, to_numpy)

COUNTING_LIBRARY = "tutorial_lib.attention.kernelized.counting_kernel"
SAMPLER_LIBRARY = "tutorial_lib.attention.kernelized.skew_normal_sample"


# ----------------------------------------------------------------------------- exercise 1: the counting kernel
def reference_counting_kernel(cooc: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The library's counting kernel: ``(B, L, L)`` co-occurrences, ``(B, L)`` counts -> ``(B, L, L)``."""
    from ...attention.kernelized import counting_kernel

    return counting_kernel(cooc, counts)


def counted_block(histories: list[list[int]], batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cooc, counts)`` of a left-padded ``batch`` of item ids, counted on the training ``histories``
    with the library's :class:`~tutorial_lib.data.cooccurrence.CooccurrenceTable`."""
    from ...data.cooccurrence import CooccurrenceTable

    n_items = max(max(h) for h in histories if h)
    table = CooccurrenceTable([np.asarray(h) for h in histories], n_items)
    ids = torch.tensor(batch)
    return table.block(ids), table.item_counts(ids)


def counting_cases(seed: int = 0) -> list[Case]:
    """A single pair, then a padded batch with a repeated item, then co-occurrences counted on random users."""
    rng = np.random.default_rng(seed)
    cases = []
    # three users: {1, 2}, {1, 2, 3}, {1, 3}: P_1 = 3, P_2 = 2, P_3 = 2, P_12 = 2, P_13 = 2, P_23 = 1
    users = [[1, 2], [1, 2, 3], [3, 1]]
    cooc, counts = counted_block(users, [[1, 2]])
    cases.append(Case((cooc, counts), label="one sequence of two items"))
    cooc, counts = counted_block(users, [[1, 2, 3]])
    cases.append(Case((cooc, counts), label="one sequence of three items"))
    cooc, counts = counted_block(users, [[0, 0, 2, 3], [1, 3, 1, 2]])
    cases.append(Case((cooc, counts), label="left padding (P = 0 there) and a repeated item"))
    for _ in range(3):
        n_items = int(rng.integers(8, 20))
        histories = [list(rng.choice(np.arange(1, n_items + 1), size=int(rng.integers(2, 7)), replace=False))
                     for _ in range(30)]
        B, L = int(rng.integers(1, 4)), int(rng.integers(3, 8))
        batch = rng.integers(1, n_items + 1, size=(B, L))
        for b in range(B):
            batch[b, : int(rng.integers(0, L - 1))] = 0
        cooc, counts = counted_block(histories, batch.tolist())
        cases.append(Case((cooc, counts), label="counted on 30 random users, random padding"))
    return cases


def _counting_variants(cooc: torch.Tensor, counts: torch.Tensor) -> dict[str, torch.Tensor]:
    """Typical mistakes, computed, so that a wrong result can be recognised."""
    eye = torch.eye(cooc.shape[-1], dtype=torch.bool)
    outer = counts[:, :, None] * counts[:, None, :]
    same = counts[:, :, None] ** 2

    def safe(x: torch.Tensor, denom: torch.Tensor = outer) -> torch.Tensor:
        return torch.where(denom > 0, x, torch.zeros(()))

    return {
        "no_square": safe(cooc / outer.clamp_min(1e-30)).masked_fill(eye, 1.0),
        "cosine": safe(cooc / outer.clamp_min(1e-30).sqrt()).masked_fill(eye, 1.0),
        "same_side": safe(cooc ** 2 / same.clamp_min(1e-30), same).masked_fill(eye, 1.0),
        "no_diag": safe(cooc ** 2 / outer.clamp_min(1e-30)),
    }


_COUNTING_HINTS = {
    "no_square": "you computed P_jl / (P_j P_l): the numerator is SQUARED, P_jl^2 / (P_j P_l), which is the product "
                 "of the two conditional frequencies (P_jl / P_j) (P_jl / P_l) and lies in [0, 1]",
    "cosine": "you computed P_jl / sqrt(P_j P_l) (a cosine); the paper's kernel is P_jl^2 / (P_j P_l), the square of it",
    "same_side": "the denominator uses the same count twice (P_j P_j): build the outer product "
                 "counts[:, :, None] * counts[:, None, :] so that entry [j, l] is P_j P_l",
    "no_diag": "padding positions have P = 0, and their diagonal must still be 1 (a padding position correlates "
               "with itself only): set the diagonal to 1 at the end, e.g. k.masked_fill(torch.eye(L, dtype=torch.bool), 1.0)",
}


def _diagnose_counting(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    try:
        mine = to_numpy(yours).astype(float)
    except Exception:  # noqa: BLE001
        return None
    if mine.shape != tuple(expected.shape):
        return None
    if np.isnan(mine).any():
        return ("NaN where the counts are 0 (padding): 0 / 0. Divide only where P_j P_l > 0 (torch.where, or "
                "clamp the denominator to at least 1) and put 0 elsewhere; then set the diagonal to 1")
    for key, variant in _counting_variants(*case.args).items():
        if np.allclose(mine, variant.numpy(), atol=1e-5, rtol=1e-4):
            return _COUNTING_HINTS[key]
    if not np.allclose(np.diagonal(mine, axis1=-2, axis2=-1), 1.0):
        return ("the diagonal is not 1 everywhere: every position of every sequence in the batch, padding included, "
                "correlates with itself with 1. Replace the diagonal (do not add to it), e.g. "
                "k.masked_fill(torch.eye(L, dtype=torch.bool), 1.0), which broadcasts over the batch")
    if not np.allclose(mine, np.swapaxes(mine, -1, -2), atol=1e-6):
        return ("the result is not symmetric: P_jl^2 / (P_j P_l) does not change when j and l swap, so K[b, j, l] "
                "= K[b, l, j]. Compute it for every pair (j, l), both triangles, with the outer product "
                "counts[:, :, None] * counts[:, None, :]")
    return None


@exercise_check
def check_counting_kernel(counting_kernel: Callable[..., Any]) -> None:
    """Check ``counting_kernel(cooc, counts) -> (B, L, L)`` against the library's."""
    check_function(counting_kernel, reference_counting_kernel, counting_cases(), library=COUNTING_LIBRARY,
                   diagnose=_diagnose_counting,
                   hint="K[b, j, l] = cooc[b, j, l]^2 / (counts[b, j] * counts[b, l]) where that product is > 0, "
                        "0 where it is 0 (padding), and 1 on the whole diagonal")


# ----------------------------------------------------------------------------- exercise 2: the sampler
def library_noise(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y0, eps)`` exactly as ``skew_normal_sample`` draws them from ``torch.Generator().manual_seed(seed)``:
    ``y0`` of shape ``(*shape[:-1], 1)`` first (not yet made positive), then ``eps`` of ``shape``."""
    gen = torch.Generator().manual_seed(seed)
    y0 = torch.randn((*shape[:-1], 1), generator=gen, dtype=dtype)
    eps = torch.randn(shape, generator=gen, dtype=dtype)
    return y0, eps


def reference_sample_z(xi: torch.Tensor, omega: torch.Tensor, delta: torch.Tensor, chol: torch.Tensor,
                       y0: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Eq. 13 given the noise: ``ξ + ω (δ |y0| + sqrt(1 - δ²) (eps Lᵀ))``. ``xi, omega, delta, eps`` ``(..., R, N)``,
    ``chol`` ``(..., N, N)``, ``y0`` ``(..., R, 1)`` -> ``(..., R, N)``."""
    y = eps @ chol.transpose(-2, -1)
    return xi + omega * (delta * y0.abs() + torch.sqrt(1.0 - delta ** 2) * y)


def random_correlation(n: int, rng: np.random.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A random ``(n, n)`` correlation matrix (unit diagonal, positive definite)."""
    a = rng.normal(size=(n, n + 2))
    cov = a @ a.T + 0.1 * np.eye(n)
    d = np.sqrt(np.diag(cov))
    return torch.tensor(cov / d[:, None] / d[None, :], dtype=dtype)


def sampler_cases(seed: int = 0) -> list[tuple[Case, int]]:
    """``(case, noise seed)`` pairs: one coordinate, three correlated keys, a batch of heads and rows, δ = 0."""
    rng = np.random.default_rng(seed)

    def params(shape: tuple[int, ...], delta_min: float = 0.0, delta_max: float = 0.95
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        xi = torch.tensor(rng.normal(size=shape), dtype=torch.float32)
        omega = torch.tensor(rng.uniform(0.3, 2.0, size=shape), dtype=torch.float32)
        delta = torch.tensor(rng.uniform(delta_min, delta_max, size=shape), dtype=torch.float32)
        return xi, omega, delta

    out = []
    specs = [((1, 1), (1, 1), "one row, one key (the 1-D skew-normal)"),
             ((1, 3), (3, 3), "one row of 3 correlated keys"),
             ((4, 3), (3, 3), "4 rows sharing one correlation matrix"),
             ((2, 2, 5, 5), (2, 1, 5, 5), "(B, H, rows, keys) with a per-sequence Cholesky factor (B, 1, L, L), "
                                           "as in the layer"),
             ((3, 4), (4, 4), "δ = 0: no skewness, the noise is just ω · (correlated normal)")]
    for i, (shape, chol_shape, label) in enumerate(specs):
        xi, omega, delta = params(shape, delta_min=0.5 if i == 0 else 0.0)   # the 1-D case: clearly skewed
        if "δ = 0" in label:
            delta = torch.zeros(shape)
        n = chol_shape[-1]
        lead = chol_shape[:-2]
        psi = torch.stack([random_correlation(n, rng) for _ in range(int(np.prod(lead)) or 1)]).reshape(*lead, n, n)
        chol = torch.linalg.cholesky(psi)
        noise_seed = 100 + i
        y0, eps = library_noise(tuple(xi.shape), noise_seed)
        out.append((Case((xi, omega, delta, chol, y0, eps), label=label), noise_seed))
    return out


def _sampler_variants(xi: torch.Tensor, omega: torch.Tensor, delta: torch.Tensor, chol: torch.Tensor,
                      y0: torch.Tensor, eps: torch.Tensor) -> dict[str, torch.Tensor]:
    """Typical mistakes, computed, so that a wrong result can be recognised: each of ``xi``'s shape."""
    s = torch.sqrt(1.0 - delta ** 2)
    y = eps @ chol.transpose(-2, -1)
    variants = {}
    try:  # L e as a matrix-vector product: the factor's batch dimensions then line up with the wrong ones of eps
        y_matvec = (chol @ eps[..., None]).squeeze(-1)
        if y_matvec.shape == y.shape and not torch.allclose(y_matvec, y):
            variants["matvec_batch"] = xi + omega * (delta * y0.abs() + s * y_matvec)
    except RuntimeError:
        pass
    return variants | {
        "no_abs": xi + omega * (delta * y0 + s * y),
        "no_transpose": xi + omega * (delta * y0.abs() + s * (eps @ chol)),
        "no_sqrt": xi + omega * (delta * y0.abs() + (1.0 - delta ** 2) * y),
        "sqrt_of_delta": xi + omega * (delta * y0.abs() + torch.sqrt(1.0 - delta) * y),
        "precedence": xi + omega * (delta * y0.abs() + (s * eps) @ chol.transpose(-2, -1)),
        "omega_outside": xi + delta * y0.abs() + omega * s * y,
        "uncorrelated": xi + omega * (delta * y0.abs() + s * eps),
        "no_xi": omega * (delta * y0.abs() + s * y),
        "minus_skew": xi + omega * (-delta * y0.abs() + s * y),
        "delta_as_alpha": xi + omega * (delta / torch.sqrt(1 + delta ** 2) * y0.abs()
                                        + torch.sqrt(1 - delta ** 2 / (1 + delta ** 2)) * y),
        "clamped": xi + omega * (delta * y0.clamp_min(0) + s * y),
        "omega_as_variance": xi + omega.sqrt() * (delta * y0.abs() + s * y),
        "psi_not_factor": xi + omega * (delta * y0.abs() + s * (eps @ (chol @ chol.transpose(-2, -1)))),
        "mean_not_sample": xi + omega * (delta * math.sqrt(2 / math.pi) + s * y),
    }


_SAMPLER_HINTS = {
    "matvec_batch": "chol @ eps[..., None] lines the factor's batch dimensions up with the LAST batch dimensions of "
                    "eps: a per-sequence factor (B, 1, L, L) then meets eps (B, H, rows, L) as if B were the heads. "
                    "Use the row-vector form y = eps @ chol.transpose(-2, -1), which broadcasts (B, 1, L, L) over "
                    "the heads and rows correctly",
    "no_abs": "the skew comes from the HALF-normal |y0|: use y0.abs() (with y0 itself the term is symmetric and the "
              "distribution is not skewed at all)",
    "no_transpose": "y = eps @ chol gives rows with covariance Lᵀ L, not ψ = L Lᵀ: multiply by the transpose, "
                    "eps @ chol.transpose(-2, -1) (each row of eps is a vector e, and y = L e is that row times Lᵀ)",
    "no_sqrt": "the normal part is multiplied by (1 - δ²)^(1/2), the SQUARE ROOT of 1 - δ² (Eq. 13); then "
               "E[ẑ²] = δ² E[y0²] + (1 - δ²) E[y²] = 1 for every δ",
    "sqrt_of_delta": "the normal part is multiplied by sqrt(1 - δ²), δ SQUARED under the root (Eq. 13); sqrt(1 - δ) "
                     "gives E[ẑ²] ≠ 1",
    "precedence": "`*` and `@` bind equally and run left to right, so `sqrt(1 - δ²) * eps @ chol.transpose(-2, -1)` "
                  "scales eps BEFORE it is mixed across the keys: each key then gets the other keys' factors. "
                  "Form y = eps @ chol.transpose(-2, -1) first (or add parentheses), then multiply by sqrt(1 - δ²)",
    "omega_outside": "ω multiplies the whole standardised sample ẑ = δ|y0| + sqrt(1 - δ²) y, the skewed part "
                     "included: z = ξ + ω ⊙ ẑ",
    "uncorrelated": "the normal part must be correlated with correlation ψ: y = eps @ chol.transpose(-2, -1), not "
                    "eps itself",
    "no_xi": "add the location ξ: z = ξ + ω ⊙ ẑ",
    "minus_skew": "the skewed part enters with a PLUS sign, ẑ = δ|y0| + sqrt(1 - δ²) y (Eq. 13): a positive α (δ > "
                  "0) skews the logits to the right; with a minus sign the skew points the wrong way",
    "clamped": "|y0| is the absolute value, not max(y0, 0): the half-normal keeps the size of the negative draws "
               "(y0.abs(), not clamp_min(0) or relu)",
    "omega_as_variance": "ω is a scale (a standard deviation), not a variance: multiply by ω itself, not its square "
                         "root",
    "psi_not_factor": "`chol` is already the factor L of ψ: y = eps @ chol.transpose(-2, -1). Multiplying by "
                      "ψ = L Lᵀ instead gives the covariance ψ², not ψ",
    "mean_not_sample": "you used the MEAN of |y0|, sqrt(2/π), instead of the draw |y0| itself: every sample then has "
                       "the same skewed part and the distribution is a shifted normal",
    "fresh_noise": "your function gives a different result each time it is called with the same arguments: use "
                   "the `y0` and `eps` passed in, do not draw your own noise (torch.randn) inside",
    "delta_as_alpha": "`delta` is already δ = α / sqrt(1 + α²) (the layer converts α before calling the sampler): "
                      "use it as it is, do not apply the conversion a second time",
}


def _diagnose_sampler(case: Case, yours: Any, learner: Callable[..., Any] | None = None) -> str | None:
    try:
        mine = to_numpy(yours).astype(float)
    except Exception:  # noqa: BLE001
        return None
    if learner is not None:
        try:
            again = to_numpy(call_learner(learner, case, "learner")).astype(float)
        except Exception:  # noqa: BLE001
            again = mine
        if again.shape == mine.shape and not np.allclose(again, mine):
            return _SAMPLER_HINTS["fresh_noise"]
    for key, variant in _sampler_variants(*case.args).items():
        v = variant.numpy()
        if mine.shape == v.shape and np.allclose(mine, v, atol=1e-5, rtol=1e-4):
            return _SAMPLER_HINTS[key]
    return None


SAMPLER_SHAPES = ("xi, omega, delta and eps are (..., R, N): R query rows, each over N keys; y0 is (..., R, 1), "
                  "one value per row, and keeps its last dimension so that it broadcasts over the keys (do not "
                  "squeeze it); chol is (..., N, N). Each ROW of eps is one vector e, and y = L e for every row at "
                  "once is eps @ chol.transpose(-2, -1) (chol @ eps multiplies the wrong axes)")


def moment_table(sample_z: Callable[..., Any], n_samples: int = 200_000, seed: int = 0) -> dict[str, torch.Tensor]:
    """Draw ``n_samples`` rows of 3 correlated keys with ``sample_z`` and return the empirical and closed-form
    moments: ``mean``, ``mean_closed``, ``cov``, ``cov_closed`` (Azzalini–Dalla Valle),
    ``cov_naive`` (``ω ψ ω``, what Eq. 4 would suggest), the parameters and their standard errors."""
    from ...attention.kernelized import skew_normal_covariance, skew_normal_mean

    xi = torch.tensor([0.5, -1.0, 0.0], dtype=torch.float64)
    omega = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    alpha = torch.tensor([4.0, 0.0, 1.0], dtype=torch.float64)
    delta = alpha / torch.sqrt(1.0 + alpha ** 2)
    psi = torch.tensor([[1.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 1.0]], dtype=torch.float64)
    chol = torch.linalg.cholesky(psi)
    shape = (n_samples, 3)
    y0, eps = library_noise(shape, seed, dtype=torch.float64)
    z = torch.as_tensor(sample_z(xi.expand(shape), omega.expand(shape), delta.expand(shape), chol, y0, eps),
                        dtype=torch.float64)
    if tuple(z.shape) != shape:
        fail(f"`sample_z` returned shape {tuple(z.shape)} for inputs of shape {shape}; the output has the shape of xi")
    centred = z - z.mean(0)
    cov = centred.T @ centred / (n_samples - 1)
    return {"xi": xi, "omega": omega, "alpha": alpha, "delta": delta, "psi": psi,
            "mean": z.mean(0), "mean_closed": skew_normal_mean(xi, omega, delta),
            "cov": cov, "cov_closed": skew_normal_covariance(omega, delta, psi),
            "cov_naive": torch.outer(omega, omega) * psi,
            "mean_se": z.std(0) / math.sqrt(n_samples),
            "cov_se": torch.sqrt((centred[:, :, None] * centred[:, None, :]).var(0) / n_samples)}


@exercise_check
def check_skew_normal_sampler(sample_z: Callable[..., Any], n_samples: int = 200_000) -> None:
    """Check ``sample_z(xi, omega, delta, chol, y0, eps)``: the library's sample for the same noise, then the
    mean and covariance of many samples against the closed forms."""
    name = getattr(sample_z, "__name__", "sample_z")
    if not callable(sample_z):
        fail(f"expected a function, got {type(sample_z).__name__}")
    from ...attention.kernelized import skew_normal_sample

    cases = sampler_cases()
    for case, noise_seed in cases:
        xi, omega, delta, chol, _, _ = case.args
        try:
            result = call_learner(sample_z, case, name, SAMPLER_LIBRARY)   # `.T` on the batched factor: base's hint
        except CheckFailed as exc:
            if isinstance(exc.__cause__, RuntimeError) and "Hint:" not in str(exc):   # a shape error, no hint yet
                fail(f"{exc}\nHint: {SAMPLER_SHAPES}")
            raise
        expected = skew_normal_sample(xi, omega, delta, chol, generator=torch.Generator().manual_seed(noise_seed))
        msg = explain_difference(result, expected, "the result")
        if msg:
            text = [f"`{name}` differs from the library's sample for the same noise, for\n    "
                    f"{case.call_text(name, limit=3)} ({case.label})", msg]
            extra = _diagnose_sampler(case, result, sample_z)
            if extra:
                text.append(f"Hint: {extra}")
            text.append("Reminder: z = xi + omega * (delta * |y0| + sqrt(1 - delta^2) * y) with y = eps @ chol^T "
                        "(y0 has one value per row and broadcasts over the keys)")
            fail("\n".join(text))
    expect_gradients(sample_z, reference_sample_z, cases[2][0], wrt=(0, 1, 2, 3), name=name)
    passed(f"`{name}` gives exactly the library's sample ({SAMPLER_LIBRARY}) for the same noise on {len(cases)} "
           "test cases, and the same gradients.")
    m = moment_table(sample_z, n_samples)
    mean_z = ((m["mean"] - m["mean_closed"]).abs() / m["mean_se"]).max().item()
    cov_z = ((m["cov"] - m["cov_closed"]).abs() / m["cov_se"]).max().item()
    expect(mean_z < 6.0, f"over {n_samples:,} draws, the mean of your samples {m['mean'].numpy().round(3)} is far from "
                         f"the closed form ξ + ω δ sqrt(2/π) = {m['mean_closed'].numpy().round(3)}")
    expect(cov_z < 6.0, f"over {n_samples:,} draws, the covariance of your samples is far from the closed form:\n"
                        f"{m['cov'].numpy().round(3)}\nexpected\n{m['cov_closed'].numpy().round(3)}")
    passed(f"over {n_samples:,} draws of 3 correlated, skewed keys, the mean and the covariance of your samples "
           f"match the closed forms (largest deviation {max(mean_z, cov_z):.1f} standard errors).")


__all__ = ["check_counting_kernel", "check_skew_normal_sampler", "reference_counting_kernel", "reference_sample_z",
           "library_noise", "counting_cases", "sampler_cases", "moment_table", "counted_block", "random_correlation"]
