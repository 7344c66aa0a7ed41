"""Checks of notebook 03 (LightSANs, low-rank attention): the causal item-to-interest aggregation and the
decoupled position attention.

Each exercise has two checks:

* ``check_causal_interest_aggregation`` / ``check_position_attention``: properties first (the output shape,
  no NaN, a **proof that nothing leaks from the future**: changing the inputs after position ``t`` never
  changes the outputs at positions ``<= t``, and padding items are ignored), then the values against the
  library on small deterministic cases, with hints for typical mistakes;
* ``check_aggregation_in_layer`` / ``check_position_attention_in_layer``: the learner's function inside the
  library's :class:`~tutorial_lib.attention.low_rank.LowRankAttention` (whose chunked computation never builds
  the aggregated interests) and :class:`~tutorial_lib.attention.low_rank.DecoupledPositionAttention`.

Values are compared at the real (non-padding) positions only: what a padding position computes is never
read, as long as it is finite (a NaN there would spread through the next layer).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ...utils.seeding import forked_torch_rng
from .base import (Case, call_learner, check_function, exercise_check, expect, expect_gradients, explain_difference,
                   fail, is_stub_error, passed, to_numpy)

AGGREGATION_LIBRARY = "tutorial_lib.attention.low_rank.causal_interest_aggregation"
POSITION_LIBRARY = "tutorial_lib.attention.base.apply_shared_pattern, used by DecoupledPositionAttention"
_TOL = 1e-4  # a real leak changes outputs by O(0.1); float32 rounding by O(1e-7)
#: key of the in-layer comparisons: how many outputs are NaN or infinite, at any position
NON_FINITE = "non-finite outputs"


# ----------------------------------------------------------------------------- references
def reference_aggregation(x: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``(B, L, k, d)`` interests seen from every position (the library's prefix aggregation)."""
    from ...attention.low_rank import causal_interest_aggregation

    return causal_interest_aggregation(x, logits, valid)[0]


def position_logits(p: torch.Tensor, u_q: nn.Module, u_k: nn.Module, n_heads: int) -> torch.Tensor:
    """``(H, L, L)`` logits of Eq. 4 from the position rows ``p`` ``(L, d)`` alone:
    ``(p U_Q)_h (p U_K)_h^T / sqrt(d_h)``."""
    L, d = p.shape
    dh = d // n_heads
    q = u_q(p).view(L, n_heads, dh).transpose(0, 1)
    k = u_k(p).view(L, n_heads, dh).transpose(0, 1)
    return q @ k.transpose(-2, -1) / math.sqrt(dh)


def reference_position_attention(p: torch.Tensor, u_q: nn.Module, u_k: nn.Module, v: torch.Tensor,
                                 valid: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, d_h)``: the position pattern (causal, padding keys hidden) applied to every row's values.

    The library's :class:`DecoupledPositionAttention` also soft-caps the logits to ±30 (``30 tanh(x / 30)``),
    a numerical safety that changes nothing visible for logits of normal size; this reference leaves it out.
    """
    from ...attention.base import apply_shared_pattern

    return apply_shared_pattern(position_logits(p, u_q, u_k, v.shape[1]), v, valid, causal=True)


# ----------------------------------------------------------------------------- helpers
def _f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.from_numpy(rng.normal(0.0, scale, size=shape).astype(np.float32))


def _left_padded(rng: np.random.Generator, B: int, L: int, min_real: int = 1) -> torch.Tensor:
    """``(B, L)`` bool: each row has a random number (>= ``min_real``) of real items at the right end."""
    valid = torch.zeros(B, L, dtype=torch.bool)
    for b in range(B):
        valid[b, int(rng.integers(0, L - min_real + 1)):] = True
    return valid


def _tensor_result(out: Any, name: str, what: str) -> torch.Tensor:
    """The learner's result ``out`` as a tensor; a failure naming ``what`` was expected otherwise."""
    if out is None:
        fail(f"`{name}` returned None; did you forget the `return` statement?")
    if isinstance(out, (tuple, list)):
        fail(f"`{name}` returned a {type(out).__name__} of {len(out)} values; return only {what}")
    try:
        return torch.as_tensor(to_numpy(out))
    except Exception as exc:  # noqa: BLE001
        fail(f"`{name}` returned {type(out).__name__}, which is not a tensor ({exc}); return {what}")


def _zero_rows(out: Any, keep: torch.Tensor, expected_shape: tuple[int, ...]) -> Any:
    """``out`` with the rows where ``keep`` is False set to 0 (when it has the expected shape; else unchanged,
    so that the comparison reports the shape)."""
    try:
        t = torch.as_tensor(to_numpy(out))
    except Exception:  # noqa: BLE001
        return out
    if tuple(t.shape) != tuple(expected_shape):
        return out
    return torch.where(keep, t, torch.zeros((), dtype=t.dtype))


def _first_change(before: torch.Tensor, after: torch.Tensor, rows: torch.Tensor) -> int | None:
    """First position (axis ``pos`` of ``rows``) where ``after`` differs from ``before``, among ``rows``."""
    diff = (after.double() - before.double()).abs()
    changed = (diff > _TOL) | (torch.isnan(after) & ~torch.isnan(before))
    changed = changed & rows
    if not bool(changed.any()):
        return None
    return int(changed.nonzero()[0, 1])


# ============================================================================= exercise 1: aggregation
def aggregation_cases(seed: int = 0) -> list[Case]:
    """Hand-made cases first (one interest, no padding; padding; one real item), then seeded random ones."""
    rng = np.random.default_rng(seed)
    cases = [
        Case((torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]), torch.tensor([[[0.0], [1.0], [2.0]]]),
              torch.ones(1, 3, dtype=torch.bool)), label="1 sequence of 3 items, 1 interest, no padding"),
        Case((_f32(rng, 1, 5, 3), _f32(rng, 1, 5, 2), torch.tensor([[False, False, True, True, True]])),
             label="2 padding positions on the left, 2 interests"),
        Case((_f32(rng, 2, 4, 2), _f32(rng, 2, 4, 3, scale=2.0), torch.tensor([[False, False, False, True],
                                                                             [True, True, True, True]])),
             label="a sequence with a single real item and a full one"),
    ]
    for _ in range(4):
        B, L, k, d = (int(v) for v in rng.integers([1, 2, 1, 2], [4, 11, 7, 9]))
        cases.append(Case((_f32(rng, B, L, d), _f32(rng, B, L, k, scale=float(rng.uniform(0.5, 3.0))),
                           _left_padded(rng, B, L)), label="random sizes and left padding"))
    return cases


def _masked_item_logits(logits: torch.Tensor, valid: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    """``(B, t, j, k)`` logits of item ``j`` seen from position ``t``; ``-inf`` where ``j > t`` or padding."""
    L = logits.shape[1]
    allowed = torch.ones(L, L, dtype=torch.bool).tril(diagonal)[None, :, :, None] & valid[:, None, :, None]
    return logits[:, None, :, :].masked_fill(~allowed, float("-inf"))


def _aggregation_variants(x: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
    """Typical mistakes, computed, so that a wrong result can be recognised: each ``(B, L, k, d)``."""
    def aggregate(w: torch.Tensor) -> torch.Tensor:
        return torch.einsum("btjk,bjd->btkd", torch.nan_to_num(w), x)

    masked = _masked_item_logits(logits, valid)
    e = torch.exp(logits) * valid[..., None]                                       # (B, L, k)
    wrong_sums = (e[..., None] * x[:, :, None, :]).cumsum(dim=2) / e.cumsum(dim=2)[..., None]
    return {
        "cumsum_axis": torch.nan_to_num(wrong_sums),
        "interest_axis": aggregate(torch.softmax(masked, dim=-1)),
        "strict": aggregate(torch.softmax(_masked_item_logits(logits, valid, diagonal=-1), dim=2)),
        "unnormalised": aggregate(torch.exp(masked)),
    }


def _as_double(yours: Any) -> torch.Tensor | None:
    """The learner's result as a float64 tensor, or ``None`` when it is not array-like (no diagnosis then)."""
    try:
        return torch.as_tensor(to_numpy(yours)).double()
    except Exception:  # noqa: BLE001
        return None


_AGGREGATION_HINTS = {
    "cumsum_axis": "the prefix sums run over the interest axis: they must run over the ITEM axis (dim=1 of the "
                   "(B, L, k) weights and of the (B, L, k, d) products), so that position t sums the items j <= t",
    "interest_axis": "the softmax runs over the interests (dim=-1). Eq. 1 normalises over the ITEMS: for each "
                     "interest, the weights of the items 1..t sum to 1 (softmax over the item axis j)",
    "strict": "position t aggregates the items j < t only; it must include itself: j <= t (tril with the "
              "diagonal, as the causal mask of notebook 02)",
    "unnormalised": "the weights are exp(logits) without the normalisation: divide by their sum over the items "
                    "j <= t (or use a softmax over the item axis)",
}


def _diagnose_aggregation(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    mine = _as_double(yours)
    if mine is None:
        return None
    if tuple(mine.shape) != tuple(expected.shape):
        return None
    x, logits, valid = case.args
    keep = valid[:, :, None, None]
    for key, variant in _aggregation_variants(x.double(), logits.double(), valid).items():
        if torch.allclose(torch.where(keep, mine, 0.0), torch.where(keep, variant, 0.0), atol=1e-5, rtol=1e-4):
            return _AGGREGATION_HINTS[key]
    return None


def _aggregation_leak(fn: Callable[..., Any], name: str, seed: int = 1) -> tuple[int, int, str] | None:
    """Perturb the future: ``(t, j, label)`` when the interests at a real position ``t`` changed after the inputs
    at ``>= j > t`` changed, else ``None``."""
    rng = np.random.default_rng(seed)
    runs = [(torch.ones(2, 7, dtype=torch.bool), "2 sequences of 7 items"),
            (torch.tensor([[False, False, True, True, True, True, True, True]]), "a left-padded sequence")]
    for valid, label in runs:
        B, L = valid.shape
        x, logits = _f32(rng, B, L, 4), _f32(rng, B, L, 3, scale=2.0)
        base = _tensor_result(call_learner(fn, Case((x, logits, valid)), name, AGGREGATION_LIBRARY), name,
                              "the (B, L, k, d) interests")
        rows = valid.clone()          # real positions only: what a padding position computes is never read
        for j in range(1, L):
            x2, logits2 = x.clone(), logits.clone()
            x2[:, j:], logits2[:, j:] = _f32(rng, B, L - j, 4), _f32(rng, B, L - j, 3, scale=2.0)
            out = _tensor_result(call_learner(fn, Case((x2, logits2, valid)), name, AGGREGATION_LIBRARY), name,
                                 "the (B, L, k, d) interests")
            before_j = rows.clone()
            before_j[:, j:] = False
            t = _first_change(base.flatten(2), out.flatten(2), before_j[..., None])
            if t is not None:
                return t, j, label
    return None


def _padding_changes_output(fn: Callable[..., Any], name: str,
                            args_of: Callable[[np.random.Generator, torch.Tensor], tuple[tuple, tuple]],
                            shape_note: str, position_axis: int, seed: int = 2) -> bool:
    """Whether changing the inputs at padding positions changes the outputs at real positions
    (``position_axis``: the output's sequence axis, 1 for ``(B, L, ...)``, 2 for ``(B, H, L, ...)``)."""
    rng = np.random.default_rng(seed)
    valid = torch.tensor([[False, False, False, True, True, True], [False, True, True, True, True, True]])
    first, second = args_of(rng, valid)
    a = _tensor_result(call_learner(fn, Case(first), name), name, shape_note)
    b = _tensor_result(call_learner(fn, Case(second), name), name, shape_note)
    shape = [valid.shape[0]] + [1] * (a.dim() - 1)
    shape[position_axis] = valid.shape[1]
    real = valid.view(shape)
    diff = torch.where(real, (a.double() - b.double()).abs(), torch.zeros((), dtype=torch.float64))
    return bool((diff > _TOL).any() | (torch.isnan(b) & real).any())


@exercise_check
def check_causal_interest_aggregation(causal_interest_aggregation: Callable[..., Any]) -> None:
    """Check ``causal_interest_aggregation(x, logits, valid) -> (B, L, k, d)``: shape, no NaN, no leak from the
    future, padding ignored, then the values against the library."""
    fn = causal_interest_aggregation
    name = getattr(fn, "__name__", "causal_interest_aggregation")
    what = "the (B, L, k, d) tensor of interests"
    cases = aggregation_cases()
    for case in cases:
        x, logits, valid = case.args
        (B, L, d), k = x.shape, logits.shape[-1]
        out = _tensor_result(call_learner(fn, case, name, AGGREGATION_LIBRARY), name, what)
        if tuple(out.shape) == (B, k, d) and L != k:
            fail(f"`{name}` returned shape {tuple(out.shape)} = (B, k, d) for {case.call_text(name)}: one set of k "
                 "interests for the whole sequence, as in the paper's Eq. 2. Then every position would use "
                 "interests built from later items too. Return the interests seen from EACH position t, built "
                 f"from the items 1..t only: shape (B, L, k, d) = {(B, L, k, d)}")
        if tuple(out.shape) != (B, L, k, d):
            broadcast = (out.dim() == 4 and tuple(out.shape[:2]) == (B, L) and out.shape[2] != k)
            fail(explain_difference(out, torch.zeros(B, L, k, d), f"{name}(...)") +
                 f"\nfor {case.call_text(name)} ({case.label}). Expected (B, L, k, d): one (k, d) set of interests "
                 "per position" + ("; the interest axis has the wrong size. A (B, L) mask such as `valid` "
                                   "multiplies the (B, L, k) logits only as valid[..., None]: without it, torch "
                                   "lines it up with the last axes" if broadcast else ""))
        expect(out.dtype == x.dtype, f"`{name}` returned {out.dtype} for {x.dtype} inputs ({case.call_text(name)}): "
                                     "return the dtype of x; the layer multiplies the interests with its float32 "
                                     "queries (a NumPy or float64 step on the way changes it)")
        if not bool(torch.isfinite(out).all()):
            bad = (~torch.isfinite(out)).flatten(2).any(-1).nonzero()[0].tolist()
            where = "a padding position" if not bool(valid[bad[0], bad[1]]) else "a real position"
            fail(f"`{name}` returned NaN or inf at batch {bad[0]}, position {bad[1]} ({where}) for "
                 f"{case.call_text(name)} ({case.label}).\nA position before the first real item has no item to "
                 "aggregate: a softmax over a row that is entirely -inf gives NaN, and so does 0 / 0. Return zeros "
                 "there (e.g. torch.nan_to_num(weights), or divide by denominator.clamp_min(1e-30)); the library "
                 "does the latter. Those positions are never read, but a NaN would spread through the next layer")
    leak = _aggregation_leak(fn, name)
    if leak is not None:
        t, j, label = leak
        fail(f"information leaks from the future with `{name}` ({label}): when the items at positions >= {j} "
             f"change, the interests seen from position {t} change too, although {t} < {j}.\n"
             "This is exactly the problem of the paper's aggregation when every position is trained at once: "
             "position t predicts item t + 1, which is also the input at t + 1; interests that include it let the "
             "model copy the answer.\nHint: the weight of item j at position t is "
             "exp(a_jk) / sum_{i <= t} exp(a_ik) for j <= t and 0 for j > t: mask the logits with the causal mask "
             "(j <= t) before a softmax over the items, or use prefix sums (torch.cumsum over the item axis) of "
             "exp(a) * x and of exp(a)")
    passed("no future leakage: changing the items after position t never changed the interests seen from "
           "positions <= t (every cut t, with and without padding).")

    def two_inputs(rng: np.random.Generator, valid: torch.Tensor) -> tuple[tuple, tuple]:
        B, L = valid.shape
        x, logits = _f32(rng, B, L, 4), _f32(rng, B, L, 3, scale=2.0)
        x2, logits2 = x.clone(), logits.clone()
        x2[~valid], logits2[~valid] = 5.0, 3.0   # what a padding position holds must not matter
        return (x, logits, valid), (x2, logits2, valid)

    if _padding_changes_output(fn, name, two_inputs, what, position_axis=1):
        fail(f"padding is not ignored by `{name}`: changing the vectors and logits at padding positions (valid is "
             "False there) changed the interests at real positions.\nHint: padding items must get weight 0: "
             "mask their logits with -inf (together with the causal mask) before the softmax, or multiply "
             "exp(logits) by valid before the prefix sums")
    passed("padding ignored: what the padding positions hold never changed the interests at real positions.")
    check_function(lambda x, logits, valid: _zero_rows(fn(x, logits, valid), valid[:, :, None, None],
                                                       (*x.shape[:2], logits.shape[-1], x.shape[-1])),
                   lambda x, logits, valid: reference_aggregation(x, logits, valid) * valid[:, :, None, None],
                   cases, name=name, library=AGGREGATION_LIBRARY, diagnose=_diagnose_aggregation,
                   hint="interests[b, t, k] = sum_{j <= t, valid} softmax_j(logits[b, :t+1, k]) * x[b, j] "
                        "(the softmax runs over the real items 0..t, separately for each interest)")
    x, _, valid = cases[1].args
    expect_gradients(fn, reference_aggregation, cases[1], wrt=(0, 1), name=name, keep=valid[:, :, None, None])


def compare_aggregation_in_layer(aggregation: Callable[..., Any], d_model: int = 16, n_heads: int = 2,
                                 k_interests: int = 4, seed: int = 0) -> dict[str, float]:
    """Eq. 3 with ``aggregation`` building the interests of K and V, against the library's chunked layer.

    Returns the largest absolute difference of the layer outputs at real positions, for chunk lengths 32
    (one block: the sequence is short) and 3 (several blocks), and under :data:`NON_FINITE` the number of NaN or
    infinite outputs at any position (padding included: a NaN there spreads through the next layer).
    """
    from ...attention import SequenceContext, merge_heads, split_heads
    from ...attention.low_rank import LowRankAttention, soft_cap

    gen = torch.Generator().manual_seed(seed)
    with forked_torch_rng(seed):
        layers = {c: LowRankAttention(d_model, n_heads, k_interests, chunk=c).eval() for c in (32, 3)}
    layers[3].load_state_dict(layers[32].state_dict())
    att = layers[32]
    ids = torch.tensor([[0, 0, 0, 5, 2, 8, 1, 4], [4, 9, 3, 6, 2, 7, 5, 1], [0, 3, 3, 1, 9, 2, 6, 8]])
    x = torch.randn(3, 8, d_model, generator=gen)
    valid = ids.ne(0)
    H, dh = n_heads, d_model // n_heads
    with torch.no_grad():
        q, k, v = att.in_proj(x).chunk(3, dim=-1)
        k_t = torch.as_tensor(aggregation(k, soft_cap(k @ att.theta_k.t()), valid))   # (B, L, k, d)
        v_t = torch.as_tensor(aggregation(v, soft_cap(v @ att.theta_v.t()), valid))
        qh = split_heads(q, H)                                                           # (B, H, L, dh)
        kh = k_t.view(*k_t.shape[:3], H, dh).permute(0, 3, 1, 2, 4)                     # (B, H, L, k, dh)
        vh = v_t.view(*v_t.shape[:3], H, dh).permute(0, 3, 1, 2, 4)
        weights = torch.softmax(torch.einsum("bhtd,bhtkd->bhtk", qh, kh) / math.sqrt(dh), dim=-1)
        mine = att.out_proj(merge_heads(torch.einsum("bhtk,bhtkd->bhtd", weights, vh)))
        out = {}
        for c, layer in layers.items():
            lib, _ = layer(x, SequenceContext.from_item_ids(ids, max_len=8))
            out[f"chunk = {c}"] = float((mine - lib)[valid].abs().max())
    out[NON_FINITE] = float((~torch.isfinite(mine)).sum())
    return out


def _fail_on_non_finite(diffs: dict[str, float], name: str, what: str) -> None:
    """Fail when an in-layer comparison found NaN or infinite outputs (removing the count from ``diffs``): the
    differences are measured at real positions only, where such outputs at padding positions would go unseen."""
    count = diffs.pop(NON_FINITE)
    if count:
        fail(f"{what} your `{name}` gives {int(count)} NaN or infinite outputs. If they sit at padding "
             "positions: a position before the first real item has nothing to attend to, so return zeros there "
             "(torch.nan_to_num, or clamp the denominator); those outputs are never read, but a NaN would spread "
             "through the next layer")


@exercise_check
def check_aggregation_in_layer(causal_interest_aggregation: Callable[..., Any], tol: float = 1e-4) -> None:
    """Build Eq. 3 with the learner's aggregation and compare it with the library's chunked LowRankAttention."""
    name = getattr(causal_interest_aggregation, "__name__", "causal_interest_aggregation")
    try:
        diffs = compare_aggregation_in_layer(causal_interest_aggregation)
    except Exception as exc:  # noqa: BLE001 - the learner's errors are reported, not raised
        if is_stub_error(exc):
            call_learner(causal_interest_aggregation, aggregation_cases()[0], name, AGGREGATION_LIBRARY)
            raise
        fail(f"running your `{name}` inside LowRankAttention raised {type(exc).__name__}: {exc}. Run "
             "check_causal_interest_aggregation first: it explains what differs from the library")
    _fail_on_non_finite(diffs, name, "Eq. 3 built with")
    for key, value in diffs.items():
        print(f"  max |your Eq. 3 - library's chunked layer| ({key:10s}) {value:.2e}")
    bad = {k: v for k, v in diffs.items() if not v <= tol}
    expect(not bad, f"Eq. 3 built with your `{name}` differs from the library's layer by more than {tol:g}: {bad}. "
                    "Run check_causal_interest_aggregation first: it explains the first difference")
    passed(f"Eq. 3 with your `{name}` gives the outputs of the library's LowRankAttention, which never builds "
           f"the (B, L, k, d) interests (within {tol:g}, real positions).")


# ============================================================================= exercise 2: positions
def _linear_pair(d: int, seed: int) -> tuple[nn.Linear, nn.Linear]:
    with forked_torch_rng(seed):
        u_q, u_k = nn.Linear(d, d), nn.Linear(d, d)
        for layer in (u_q, u_k):
            nn.init.normal_(layer.weight, std=1.5 / math.sqrt(d))   # logits of order 1-3: the scaling shows
            layer.weight.requires_grad_(False)
            layer.bias.requires_grad_(False)
    return u_q, u_k


def position_cases(seed: int = 0) -> list[Case]:
    """``(p, u_q, u_k, v, valid)``: one head without padding first, then heads and padding, then random."""
    rng = np.random.default_rng(seed)
    cases = []
    for i, (B, H, L, dh, label) in enumerate([(1, 1, 4, 4, "1 sequence, 1 head, no padding"),
                                              (2, 2, 5, 3, "2 heads, 2 sequences without padding")]):
        u_q, u_k = _linear_pair(H * dh, seed + i)
        cases.append(Case((_f32(rng, L, H * dh), u_q, u_k, _f32(rng, B, H, L, dh), torch.ones(B, L, dtype=torch.bool)),
                          label=label))
    u_q, u_k = _linear_pair(8, seed + 5)
    valid = torch.tensor([[False, False, True, True, True, True], [False, False, False, False, False, True]])
    cases.append(Case((_f32(rng, 6, 8), u_q, u_k, _f32(rng, 2, 2, 6, 4), valid),
                      label="left padding; the second sequence has a single real item"))
    for i in range(4):
        B, H, L, dh = (int(v) for v in rng.integers([1, 1, 2, 2], [4, 4, 10, 6]))
        u_q, u_k = _linear_pair(H * dh, seed + 10 + i)
        cases.append(Case((_f32(rng, L, H * dh), u_q, u_k, _f32(rng, B, H, L, dh), _left_padded(rng, B, L)),
                          label="random sizes and left padding"))
    return cases


def _position_variants(p: torch.Tensor, u_q: nn.Module, u_k: nn.Module, v: torch.Tensor, valid: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
    """Typical mistakes, computed, so that a wrong result can be recognised: each ``(B, H, L, d_h)``."""
    H = v.shape[1]
    L, d = p.shape
    dh = d // H
    allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, None] & valid[:, None, None, :]

    def finish(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
        w = torch.nan_to_num(torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=dim))
        return w @ v

    good = position_logits(p, u_q, u_k, H)
    q_wrong = u_q(p).reshape(H, L, dh)
    k_wrong = u_k(p).reshape(H, L, dh)
    strict = torch.ones(L, L, dtype=torch.bool).tril(-1)[None, None] & valid[:, None, None, :]
    unmasked = torch.softmax(good, dim=-1)[None] * allowed
    return {
        "strict": torch.nan_to_num(torch.softmax(good.masked_fill(~strict, float("-inf")), dim=-1)) @ v,
        "scale_whole_d": finish(good * math.sqrt(dh) / math.sqrt(d)),
        "mask_after": unmasked @ v,
        "no_scale": finish(good * math.sqrt(dh)),
        "scale_d": finish(good / math.sqrt(dh)),
        "heads": finish(q_wrong @ k_wrong.transpose(-2, -1) / math.sqrt(dh)),
        "dim": finish(good, dim=-2),
    }


_POSITION_HINTS = {
    "strict": "query t sees the keys j < t only; it must see itself too: j <= t (tril() with the diagonal, as the "
              "causal mask of notebook 02)",
    "scale_whole_d": "you divided by sqrt(d); each head's logits are divided by sqrt(d_h), d_h = d / H",
    "mask_after": "you masked after the softmax (multiplying the weights by the mask): the visible weights then no "
                  "longer sum to 1. Mask the logits with -inf BEFORE the softmax",
    "no_scale": "the logits are not scaled: divide P_Q P_K^T by sqrt(d_h), d_h = d / H (Eq. 4)",
    "scale_d": "you divided the logits by d_h; divide by its square root, sqrt(d_h)",
    "heads": "the heads are split in the wrong layout: (p @ U_Q) has shape (L, d); view it as (L, H, d_h) and "
             "move the head axis first, .view(L, H, d_h).transpose(0, 1), as split_heads does (a plain "
             ".view(H, L, d_h) mixes positions and features)",
    "dim": "the softmax runs over the queries (dim=-2), as in the released code; Eq. 4 (and this course) lets "
           "each query position distribute its attention over the key positions: softmax over dim=-1",
}


def _diagnose_position(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    mine = _as_double(yours)
    if mine is None:
        return None
    if tuple(mine.shape) != tuple(expected.shape):
        if mine.dim() == 3 and tuple(mine.shape) == tuple(expected.shape[1:]):
            return "the batch dimension is missing: the pattern is shared, but every sequence has its own values"
        return None
    valid = case.args[-1]
    keep = valid[:, None, :, None]
    with torch.no_grad():
        variants = _position_variants(*case.args)
    for key, variant in variants.items():
        if torch.allclose(torch.where(keep, mine, 0.0), torch.where(keep, variant.double(), 0.0), atol=1e-5,
                          rtol=1e-4):
            return _POSITION_HINTS[key]
    return None


def _position_leak(fn: Callable[..., Any], name: str, seed: int = 3) -> tuple[int, int, str] | None:
    """Perturb the future values: ``(t, j, label)`` when the output at a real position ``t`` changed after the
    values at ``>= j > t`` changed, else ``None``."""
    rng = np.random.default_rng(seed)
    u_q, u_k = _linear_pair(6, seed)
    runs = [(torch.ones(2, 7, dtype=torch.bool), "2 sequences of 7 items"),
            (torch.tensor([[False, False, True, True, True, True, True, True]]), "a left-padded sequence")]
    for valid, label in runs:
        B, L = valid.shape
        p, v = _f32(rng, L, 6), _f32(rng, B, 2, L, 3)
        base = _tensor_result(call_learner(fn, Case((p, u_q, u_k, v, valid)), name, POSITION_LIBRARY), name,
                              "the (B, H, L, d_h) outputs")
        for j in range(1, L):
            v2 = v.clone()
            v2[:, :, j:] = _f32(rng, B, 2, L - j, 3)
            out = _tensor_result(call_learner(fn, Case((p, u_q, u_k, v2, valid)), name, POSITION_LIBRARY), name,
                                 "the (B, H, L, d_h) outputs")
            rows = valid.clone()      # real positions only: what a padding position computes is never read
            rows[:, j:] = False
            t = _first_change(base.transpose(1, 2).flatten(2), out.transpose(1, 2).flatten(2), rows[..., None])
            if t is not None:
                return t, j, label
    return None


@exercise_check
def check_position_attention(position_attention: Callable[..., Any]) -> None:
    """Check ``position_attention(p, u_q, u_k, v, valid) -> (B, H, L, d_h)``: shape, no NaN, no leak from the
    future, padding keys ignored, then the values against the library."""
    fn = position_attention
    name = getattr(fn, "__name__", "position_attention")
    what = "the (B, H, L, d_h) outputs"
    cases = position_cases()
    for case in cases:
        p, u_q, u_k, v, valid = case.args
        out = _tensor_result(call_learner(fn, case, name, POSITION_LIBRARY), name, what)
        if tuple(out.shape) != tuple(v.shape):
            hint = ""
            if out.dim() == 4 and out.shape[-1] == out.shape[-2] == v.shape[2]:
                hint = " (these look like the (B, H, L, L) weights: return weights @ v)"
            elif out.dim() == 3 and tuple(out.shape) == tuple(v.shape[1:]):
                hint = " (the batch dimension is missing: every sequence has its own values v)"
            fail(f"`{name}` returned shape {tuple(out.shape)} for {case.call_text(name)} ({case.label}); expected "
                 f"{tuple(v.shape)}, the shape of v{hint}")
        if not bool(torch.isfinite(out).all()):
            b, h, t = (~torch.isfinite(out)).any(-1).nonzero()[0].tolist()
            where = "a padding position" if not bool(valid[b, t]) else "a real position"
            fail(f"`{name}` returned NaN or inf at batch {b}, head {h}, position {t} ({where}) for "
                 f"{case.call_text(name)} ({case.label}).\nWith left padding, a padding query has no visible key "
                 "(every key before it is padding too), so its softmax runs over a row of -inf. Let every position "
                 "see itself (`| torch.eye(L, dtype=torch.bool)`, as in notebook 02) or replace the NaN WEIGHTS by 0 "
                 "(torch.nan_to_num(weights)) before they multiply v; those outputs are never read, but a NaN would "
                 "spread (replacing it in the output at the end still leaves NaN in the gradient of v)")
    leak = _position_leak(fn, name)
    if leak is not None:
        t, j, label = leak
        fail(f"information leaks from the future with `{name}` ({label}): when the values at positions >= {j} "
             f"change, the output at position {t} changes too, although {t} < {j}.\nHint: the position pattern "
             "must be causal: hide the keys j > t of every query t (torch.ones(L, L, dtype=torch.bool).tril()) "
             "before the softmax, with masked_fill(~allowed, -inf): multiplying the logits by a 0/1 mask does not "
             "hide a key, since exp(0) = 1. The released code has no mask at all; that is one reason it can only "
             "be trained on prefix samples")
    passed("no future leakage: changing the values after position t never changed the outputs at positions <= t.")

    def two_inputs(rng: np.random.Generator, valid: torch.Tensor) -> tuple[tuple, tuple]:
        B, L = valid.shape
        u_q, u_k = _linear_pair(6, 7)
        p, v = _f32(rng, L, 6), _f32(rng, B, 2, L, 3)
        v2 = v.clone()
        v2.transpose(1, 2)[~valid] = 5.0     # what a padding position holds must not matter
        return (p, u_q, u_k, v, valid), (p, u_q, u_k, v2, valid)

    if _padding_changes_output(fn, name, two_inputs, what, position_axis=2):
        fail(f"padding is not ignored by `{name}`: changing the values at padding positions changed the outputs at "
             "real positions.\nHint: padding KEYS must be hidden from every query: combine the causal mask with "
             "valid[:, None, None, :] (shape (B, 1, 1, L), broadcast over heads and queries) before the softmax. "
             "The pattern is shared by the batch, but its normalisation is not: each sequence has its own padding")
    passed("padding ignored: what the padding positions hold never changed the outputs at real positions.")
    with torch.no_grad():
        check_function(lambda p, u_q, u_k, v, valid: _zero_rows(fn(p, u_q, u_k, v, valid), valid[:, None, :, None],
                                                                tuple(v.shape)),
                       lambda p, u_q, u_k, v, valid: reference_position_attention(p, u_q, u_k, v, valid)
                       * valid[:, None, :, None],
                       cases, name=name, library=POSITION_LIBRARY, diagnose=_diagnose_position,
                       hint="logits[h] = (p U_Q)_h (p U_K)_h^T / sqrt(d_h) from the positions only; hide future "
                            "and padding keys with -inf; softmax over the keys (dim=-1); multiply by v")
    padded = next(c for c in cases if not bool(c.args[4].all()))
    expect_gradients(fn, reference_position_attention, padded, wrt=(0, 3), name=name,
                     keep=padded.args[4][:, None, :, None])


def compare_position_attention_in_layer(position_attention: Callable[..., Any], d_model: int = 16, n_heads: int = 2,
                                        seed: int = 0) -> dict[str, float]:
    """Feed the learner's function with a :class:`DecoupledPositionAttention`'s ``LN(P)`` (the rows of this
    batch's columns, counted from the right), ``U_Q`` and ``U_K``, initialised as in a model (Glorot).

    Returns the largest differences at real positions: ``"yours vs the module"``; ``"yours vs Eq. 4"``
    (the same attention without the module's soft cap of the logits); and ``"soft cap"`` (Eq. 4 vs the
    module: what the cap ``30 tanh(x / 30)`` changes); and under :data:`NON_FINITE` the number of NaN or infinite
    outputs at any position.
    """
    from ...attention import SequenceContext
    from ...attention.low_rank import DecoupledPositionAttention

    gen = torch.Generator().manual_seed(seed)
    with forked_torch_rng(seed):
        table = nn.Embedding(12, d_model)
        module = DecoupledPositionAttention(table, d_model, n_heads).eval()
        for layer in (module.u_q, module.u_k):
            nn.init.xavier_uniform_(layer.weight)                # as SequentialRecommender.reset_parameters
    ids = torch.tensor([[0, 0, 0, 5, 2, 8, 1, 4], [4, 9, 3, 6, 2, 7, 5, 1], [0, 3, 3, 1, 9, 2, 6, 8]])
    ctx = SequenceContext.from_item_ids(ids, max_len=12)          # 8 columns: positions 4..11 of the table
    v = torch.randn(3, n_heads, 8, d_model // n_heads, generator=gen)
    with torch.no_grad():
        p = module.norm(table(ctx.positions))                       # LN(P) of this batch's columns, (L, d)
        mine = torch.as_tensor(position_attention(p, module.u_q, module.u_k, v, ctx.valid_mask))
        lib = module(v, ctx)
        eq4 = reference_position_attention(p, module.u_q, module.u_k, v, ctx.valid_mask)
    keep = ctx.valid_mask[:, None, :, None].expand_as(lib)
    return {"yours vs the module": float((mine - lib)[keep].abs().max()),
            "yours vs Eq. 4": float((mine - eq4)[keep].abs().max()),
            "soft cap": float((eq4 - lib)[keep].abs().max()),
            NON_FINITE: float((~torch.isfinite(mine)).sum())}


@exercise_check
def check_position_attention_in_layer(position_attention: Callable[..., Any], tol: float = 1e-5) -> None:
    """The learner's function on a real :class:`DecoupledPositionAttention` (table rows counted from the right)."""
    name = getattr(position_attention, "__name__", "position_attention")
    try:
        diffs = compare_position_attention_in_layer(position_attention)
    except Exception as exc:  # noqa: BLE001
        if is_stub_error(exc):
            call_learner(position_attention, position_cases()[0], name, POSITION_LIBRARY)
            raise
        fail(f"running your `{name}` on DecoupledPositionAttention's parameters raised {type(exc).__name__}: "
             f"{exc}. Run check_position_attention first: it explains what differs from the library")
    _fail_on_non_finite(diffs, name, "Fed with DecoupledPositionAttention's parameters,")
    print(f"  max |yours - DecoupledPositionAttention|           {diffs['yours vs the module']:.2e}")
    print(f"  max |yours - Eq. 4 without the module's soft cap|  {diffs['yours vs Eq. 4']:.2e}")
    print(f"  what the soft cap 30 tanh(x/30) changes            {diffs['soft cap']:.2e}")
    expect(diffs["yours vs Eq. 4"] <= tol,
           f"your `{name}` differs from Eq. 4 computed on DecoupledPositionAttention's parameters by "
           f"{diffs['yours vs Eq. 4']:.3g} > {tol:g}. Run check_position_attention first: it explains the first "
           "difference")
    passed(f"your `{name}`, fed with the module's LN(P), U_Q and U_K, gives DecoupledPositionAttention's outputs up "
           f"to the module's soft cap of the logits (a numerical safety; real positions).")


__all__ = ["check_causal_interest_aggregation", "check_aggregation_in_layer", "check_position_attention",
           "check_position_attention_in_layer", "reference_aggregation", "reference_position_attention",
           "position_logits", "aggregation_cases", "position_cases", "compare_aggregation_in_layer",
           "compare_position_attention_in_layer"]
