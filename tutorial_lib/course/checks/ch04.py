"""Checks of notebook 04 (positional attention: PARec and FPARec).

* Exercise 1, :func:`check_positional_attention`: ``positional_attention(logits, positions, v, valid)``, the
  masked softmax of a position-only logit matrix times the values, against the library's
  :class:`~tutorial_lib.attention.positional.PositionalAttention`, with a proof that nothing leaks from the
  future (or from padding).
* Exercise 2, :func:`check_factorized_logits`: ``factorized_logits(f1, f2, d_head)``, FPARec's
  ``F_1 F_2^T / sqrt(d_h)``, against ``PositionalAttention(kind="factorized").pattern_logits()``.
* Exercise 3, :func:`check_attention_parameters`: ``attention_parameters(name, d, h, n, k)``, the parameters of
  one attention layer as a formula, against the count of the library's modules (the paper's lost Table 1).
* :func:`check_in_fparec`: both functions inside every layer of a small FPARec model: the same hidden
  states as the library, no leakage from future items, and the same result for a trimmed window.

Conventions (those of the library): ``logits`` is ``(H, n, n)`` over all ``n = max_len`` positions, already
scaled; a batch of width ``L`` uses the positions ``n - L, ..., n - 1`` (counted from the right, left
padding); a query may see the keys ``j <= t`` that are real items, and always itself.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ...utils.seeding import forked_torch_rng
from .base import (Case, CheckFailed, ExerciseNotDone, call_learner, check_function, exercise_check, expect,
                   expect_gradients, fail, not_done_message, passed, to_numpy)

if TYPE_CHECKING:
    from ...attention import SequenceContext

PA_LIBRARY = "tutorial_lib.attention.positional.PositionalAttention"
FACTORIZED_LIBRARY = "tutorial_lib.attention.positional.PositionalAttention(kind='factorized').pattern_logits"


# ----------------------------------------------------------------------------- references
def _allowed(valid: torch.Tensor) -> torch.Tensor:
    """``(B, 1, L, L)``: causal, padding keys hidden, every position sees itself (the library's mask)."""
    from ...attention import SequenceContext

    return SequenceContext(item_ids=valid.long(), padding_mask=~valid).allowed()


def reference_positional_attention(logits: torch.Tensor, positions: torch.Tensor, v: torch.Tensor,
                                   valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's positional attention for given logits: ``(output (B, H, L, dh), weights (B, H, L, L))``.

    A :class:`PositionalAttention` whose pattern is ``logits`` computes the weights (``weights(ctx)``, the
    path used for plots and with attention dropout); ``positions`` must be those of the batch,
    ``n - L .. n - 1``.
    """
    from ...attention import SequenceContext
    from ...attention.positional import PositionalAttention

    H, n, _ = logits.shape
    B, L = valid.shape
    expected_positions = torch.arange(n - L, n)
    if not torch.equal(torch.as_tensor(positions).cpu(), expected_positions):
        raise ValueError(f"the library counts positions from the right: a batch of width {L} with n = {n} uses "
                         f"positions {expected_positions.tolist()}, got {torch.as_tensor(positions).tolist()}")
    layer = PositionalAttention(d_model=H * v.shape[-1], n_heads=H, max_len=n, kind="average")
    layer.pattern_logits = lambda: logits                     # the pattern of this case (instance attribute)
    ctx = SequenceContext(item_ids=valid.long(), padding_mask=~valid, max_len=n)
    with torch.no_grad():
        weights = layer.weights(ctx)
    return weights @ v, weights


def reference_factorized_logits(f1: torch.Tensor, f2: torch.Tensor, d_head: int) -> torch.Tensor:
    """``(H, n, n)`` FPARec logits ``F_1 F_2^T / sqrt(d_head)`` as the library computes them (its
    ``pattern_logits`` also soft-caps at ±30, which changes nothing for the small values of the checks)."""
    from ...attention.positional import PositionalAttention

    H, n, k = f1.shape
    layer = PositionalAttention(d_model=H * int(d_head), n_heads=H, max_len=n, kind="factorized", rank=k)
    with torch.no_grad():
        layer.f1.copy_(f1)
        layer.f2.copy_(f2)
        return layer.pattern_logits().detach().clone()


def _factorized_formula(f1: torch.Tensor, f2: torch.Tensor, d_head: int) -> torch.Tensor:
    """:func:`reference_factorized_logits` written out, differentiable in ``f1, f2`` (the reference copies them
    into a layer): the gradients the learner's function must give."""
    return f1 @ f2.transpose(-2, -1) / math.sqrt(d_head)


# ----------------------------------------------------------------------------- exercise 1: positional attention
def _batch(rng: np.random.Generator, B: int, H: int, n: int, L: int, dh: int, pad: list[int] | None = None,
           scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits (H, n, n), positions (L,), v (B, H, L, dh), valid (B, L))``, row ``b`` padded by ``pad[b]``."""
    logits = torch.from_numpy(rng.normal(0.0, scale, size=(H, n, n)).astype(np.float32))
    v = torch.from_numpy(rng.normal(0.0, 1.0, size=(B, H, L, dh)).astype(np.float32))
    valid = torch.ones(B, L, dtype=torch.bool)
    for b, p in enumerate(pad or []):
        valid[b, :p] = False
    return logits, torch.arange(n - L, n), v, valid


def positional_cases(seed: int = 0) -> list[Case]:
    """Hand-made cases first (uniform pattern, no padding, a narrower window, padding), then random ones."""
    rng = np.random.default_rng(seed)
    cases = []
    logits, pos, v, valid = _batch(rng, 1, 1, 3, 3, 2)
    cases.append(Case((torch.zeros_like(logits), pos, v, valid), label="1 sequence, 1 head, all logits 0: each "
                                                                       "query averages the values up to itself"))
    cases.append(Case(_batch(rng, 1, 1, 4, 4, 2), label="random pattern, window = max_len, no padding"))
    cases.append(Case(_batch(rng, 1, 2, 7, 4, 3), label="a window of 4 columns with max_len 7: positions 3..6"))
    cases.append(Case(_batch(rng, 2, 2, 6, 6, 3, pad=[2, 0]), label="left padding (2 columns) in the first row"))
    for _ in range(4):
        B, H = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        n = int(rng.integers(3, 11))
        L = int(rng.integers(2, n + 1))
        pad = [int(rng.integers(0, L)) for _ in range(B)]
        cases.append(Case(_batch(rng, B, H, n, L, int(rng.integers(1, 5)), pad, scale=float(rng.uniform(0.5, 3))),
                          label="random sizes and padding"))
    return cases


def _variants(logits: torch.Tensor, positions: torch.Tensor, v: torch.Tensor, valid: torch.Tensor
              ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Typical mistakes, computed, so that a wrong result can be recognised."""
    H, n, _ = logits.shape
    L = valid.shape[1]
    sub = logits[:, positions][:, :, positions][None]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    eye = torch.eye(L, dtype=torch.bool)
    allowed = _allowed(valid)

    def finish(lg: torch.Tensor, mask: torch.Tensor, fill: float = float("-inf"), dim: int = -1
               ) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.softmax(lg.masked_fill(~mask, fill), dim=dim)
        return w @ v, w

    out = {
        "left": finish(logits[:, :L, :L][None], allowed),
        "no_causal": finish(sub, valid[:, None, None, :] | eye),
        "one_ahead": finish(sub, (torch.ones(L, L, dtype=torch.bool).tril(1) & valid[:, None, None, :]) | eye),
        "no_padding": finish(sub, causal),
        "fill_zero": finish(sub, allowed, fill=0.0),
        "dim": finish(sub, allowed, dim=-2),
        "rescaled": finish(sub / math.sqrt(v.shape[-1]), allowed),
        "transposed": finish(sub.transpose(-2, -1), allowed),
        "query_mask": finish(sub, (causal & valid[:, None, :, None]) | eye),
        "triu": finish(sub, (torch.ones(L, L, dtype=torch.bool).triu() & valid[:, None, None, :]) | eye),
        "diagonal": finish(logits[:, positions, positions][None, :, None, :], allowed),
    }
    w = torch.softmax(sub.expand(valid.shape[0], -1, -1, -1), dim=-1) * allowed
    out["mask_after"] = (w @ v, w)
    return out


_PA_HINTS = {
    "left": "you took the first L rows and columns of the pattern (logits[:, :L, :L]): positions are counted from "
            "the RIGHT, the most recent item is always position n - 1. Use the `positions` of the batch: "
            "logits[:, positions][:, :, positions]",
    "no_causal": "the causal mask is missing: query t must not see keys j > t (the future)",
    "one_ahead": "query t also sees key t + 1, one step into the future: the causal mask is tril() (diagonal 0, "
                 "keys j <= t), not tril(1)",
    "no_padding": "padding keys are not hidden: key j is visible only if valid[b, j] is True (and j <= t)",
    "fill_zero": "hidden logits were set to 0 instead of -inf: exp(0) = 1, so hidden keys still get weight",
    "dim": "the softmax runs over the wrong dimension: each query (row) distributes its weight over the keys, "
           "dim=-1",
    "rescaled": "you divided the logits by sqrt(d_head): the pattern passed in is already scaled "
                "(W_pos / sqrt(d/h) is the layer's job, pattern_logits()); use the logits as they are",
    "transposed": "the pattern is transposed: row i of logits is the QUERY at position i, column j the key",
    "query_mask": "the padding mask hides QUERIES instead of keys: a padding position is a key no one may read, "
                  "valid[:, None, None, :] (B, 1, 1, L) over the key axis, not valid[:, None, :, None]",
    "triu": "the causal mask is triu(): query t then sees the keys j >= t, its future. The visible keys are "
            "j <= t, the lower triangle: torch.ones(L, L, dtype=torch.bool).tril()",
    "diagonal": "logits[:, positions, positions] picks the DIAGONAL, shape (H, L): one logit per position, the same "
                "for every query. You need the (H, L, L) block: logits[:, positions][:, :, positions]",
    "mask_after": "you masked after the softmax (multiplying by the mask): the visible weights then no longer "
                  "sum to 1. Mask the logits with -inf BEFORE the softmax",
}


def _matching_mistakes(case: Case, yours: Any) -> list[str]:
    """The keys of :func:`_variants` whose output and weights both equal the learner's ``yours``."""
    try:
        out, w = (to_numpy(x) for x in yours)
    except Exception:  # noqa: BLE001
        return []
    found = []
    for key, (v_out, v_w) in _variants(*case.args).items():
        if w.shape == tuple(v_w.shape) and np.allclose(w, v_w.numpy(), atol=1e-5) and \
                out.shape == tuple(v_out.shape) and np.allclose(out, v_out.numpy(), atol=1e-5):
            found.append(key)
    return found


def _diagnose_pa(case: Case, yours: Any, expected: tuple[torch.Tensor, torch.Tensor],
                 learner: Callable[..., Any] | None = None) -> str | None:
    if not isinstance(yours, (tuple, list)) or len(yours) != 2:
        return "return a pair (output, weights): output (B, H, L, d_head), weights (B, H, L, L)"
    try:
        out, w = (to_numpy(x) for x in yours)
    except Exception:  # noqa: BLE001
        return None
    exp_out, exp_w = expected
    if out.shape == tuple(exp_w.shape) and w.shape == tuple(exp_out.shape) and exp_w.shape != exp_out.shape:
        return "output and weights are swapped: return (output, weights)"
    valid = to_numpy(case.args[3])
    if np.isnan(w).any():
        if not valid.all():
            return ("some rows are NaN: a padding query sees no real key, so its row is all -inf. Let every "
                    "position always see itself (| torch.eye(L, dtype=torch.bool)), as in notebook 02")
        return ("some rows are NaN although this batch has no padding: a row whose logits are all -inf, or a -inf "
                "multiplied by 0 (-inf * mask gives NaN where the mask is 0: use masked_fill or torch.where). Check "
                "that the mask is not inverted (True = visible) and that every query sees itself (j <= t, the "
                "diagonal included)")
    if w.shape == tuple(exp_w.shape):
        wrong_rows = ~np.isclose(w, to_numpy(exp_w), atol=1e-5).all(-1)          # (B, H, L)
        if wrong_rows.any() and not (wrong_rows & valid[:, None, :]).any():
            fix = ("let every position always see itself (| torch.eye(L, dtype=torch.bool)) and hide the other keys "
                   "with -inf")
            if np.allclose(w[wrong_rows], 0.0):
                return ("only the rows of padding queries differ, and every real query is right. Here each row of "
                        f"the weights must sum to 1 (the docstring): {fix}, instead of replacing NaN rows by zeros. "
                        "Notebook 03's check accepted either; this one compares every row")
            return ("only the rows of padding queries differ, and every real query is right: a padding query that "
                    "sees no key spreads its weight over hidden keys when they are filled with a finite number "
                    f"(-1e9) rather than -inf. {fix}")
    found = _matching_mistakes(case, yours)
    if len(found) > 1 and learner is not None:
        # a simple case cannot tell some mistakes apart (all logits 0): try a case that separates them
        rich = positional_cases()[3]  # random pattern, padding
        try:
            again = _matching_mistakes(rich, call_learner(learner, rich, "learner"))
        except Exception:  # noqa: BLE001
            again = []
        found = [k for k in found if k in again] or found
    return " -- or: ".join(_PA_HINTS[k] for k in found) if found else None


def prove_no_leakage_positional(fn: Callable[..., Any], name: str = "positional_attention", n_trials: int = 3,
                                seed: int = 0) -> str | None:
    """``None`` if ``fn``'s outputs at real positions never depend on the future or on padding, else a sentence
    saying what leaked.

    For every cut ``j``: the values at positions ``>= j`` and every logit of a future key (above the diagonal)
    are replaced by new random numbers; the outputs at positions ``< j`` must not move. Then the values at
    padding positions are replaced; the outputs at real positions must not move.
    """
    gen = torch.Generator().manual_seed(seed)
    for trial in range(n_trials):
        H, n, L, dh = 2, 8, 6 + trial % 2, 3
        logits = torch.randn(H, n, n, generator=gen, dtype=torch.float64)
        v = torch.randn(2, H, L, dh, generator=gen, dtype=torch.float64)
        valid = torch.ones(2, L, dtype=torch.bool)
        valid[0, :2] = False
        positions = torch.arange(n - L, n)
        case = Case((logits, positions, v, valid))
        base = to_numpy(call_learner(fn, case, name, PA_LIBRARY)[0])
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        for j in range(1, L):
            v2 = v.clone()
            v2[:, :, j:] = torch.randn(2, H, L - j, dh, generator=gen, dtype=torch.float64)
            logits2 = torch.where(future, torch.randn(H, n, n, generator=gen, dtype=torch.float64), logits)
            out = to_numpy(call_learner(fn, Case((logits2, positions, v2, valid)), name, PA_LIBRARY)[0])
            diff = np.abs(out[:, :, :j] - base[:, :, :j]).max(axis=(1, 3))          # (B, j)
            diff = np.where(valid[:, :j].numpy(), diff, 0.0)                         # padding queries: unused
            if (diff > 1e-9).any() or np.isnan(diff).any():
                b, t = (int(x) for x in np.argwhere(~(diff <= 1e-9))[0])
                return (f"information leaks from the future: when the values at positions >= {j} and the logits of "
                        f"future keys change, the output at position {t} (row {b}) changes too, although {t} < {j}")
        v3 = v.clone()
        v3[0, :, :2] = torch.randn(H, 2, dh, generator=gen, dtype=torch.float64) * 100
        out = to_numpy(call_learner(fn, Case((logits, positions, v3, valid)), name, PA_LIBRARY)[0])
        if not np.allclose(out[0, :, 2:], base[0, :, 2:], atol=1e-9):
            return ("information leaks from the padding: changing the values at the two padding positions of row 0 "
                    "changed the outputs at its real positions. Hide padding keys (valid[b, j] is False)")
    return None


@exercise_check
def check_positional_attention(positional_attention: Callable[..., Any]) -> None:
    """Compare ``positional_attention(logits, positions, v, valid) -> (output, weights)`` with the library and
    prove that nothing leaks from the future or the padding."""
    name = getattr(positional_attention, "__name__", "positional_attention")
    check_function(positional_attention, reference_positional_attention, positional_cases(), name=name,
                   library=PA_LIBRARY, output_names=("output", "weights"),
                   diagnose=lambda case, yours, expected: _diagnose_pa(case, yours, expected, positional_attention),
                   hint="sub = logits[:, positions][:, :, positions]; hide future and padding keys with -inf "
                        "(every position sees itself); softmax over the keys; weights @ v")
    expect_gradients(positional_attention, reference_positional_attention, positional_cases()[3], wrt=(0, 2),
                     name=name, output=lambda result: result[0])
    leak = prove_no_leakage_positional(positional_attention, name)
    if leak is not None:
        fail(f"`{name}` {leak}.")
    passed("no leakage: changing the future (values and future logits) never changed an earlier output, and "
           "changing padding values never changed a real output (3 random batches, every cut).")


# ----------------------------------------------------------------------------- exercise 2: factorised logits
def factorized_cases(seed: int = 0) -> list[Case]:
    """``(f1, f2, d_head)`` with ``(H, n, k)`` factors: one head first, then two heads, then random sizes."""
    rng = np.random.default_rng(seed)

    def f(H: int, n: int, k: int, std: float = 0.2) -> torch.Tensor:
        return torch.from_numpy(rng.normal(0.0, std, size=(H, n, k)).astype(np.float32))

    cases = [Case((f(1, 3, 1), f(1, 3, 1), 4), label="1 head, n = 3, rank k = 1"),
             Case((f(1, 5, 2), f(1, 5, 2), 8), label="1 head, n = 5, k = 2"),
             Case((f(2, 6, 3), f(2, 6, 3), 4), label="2 heads, n = 6, k = 3, d_head = 4")]
    for _ in range(4):
        H, n = int(rng.integers(1, 4)), int(rng.integers(3, 12))
        k = int(rng.integers(1, n + 1))
        cases.append(Case((f(H, n, k), f(H, n, k), int(rng.choice([2, 4, 8, 25]))),
                          label="random sizes"))
    return cases


_FACT_HINTS = {
    "no_scale": "the scaling is missing: divide F1 F2^T by sqrt(d_head), the same 1/sqrt(d/h) as PARec's W_pos",
    "scale_d": "you divided by d_head; divide by its square root, math.sqrt(d_head)",
    "scale_k": "you scaled by sqrt(k) (the rank); the scale is sqrt(d_head), as for PARec's W_pos",
    "transposed": "the result is transposed: entry (i, j) is row i of F1 (the query position) times row j of F2 "
                  "(the key position): f1 @ f2.transpose(-2, -1)",
    "times_sqrt": "you multiplied by sqrt(d_head); DIVIDE by it, as for the logits of dot-product attention",
    "masked": "you masked the logits here: return the whole (H, n, n) matrix of logits. The causal and padding "
              "masks belong to positional_attention (exercise 1), which cuts each batch's window out of this "
              "matrix first",
    "softmax": "you applied a softmax: return the LOGITS F1 F2^T / sqrt(d_head); positional_attention (exercise 1) "
               "masks them and takes the softmax",
}


def _diagnose_fact(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    f1, f2, d_head = case.args
    try:
        y = to_numpy(yours)
    except Exception:  # noqa: BLE001
        return None
    H, n, k = f1.shape
    if y.shape == (H, k, k) and k != n:
        return "your result is (H, k, k): F1^T F2 multiplies the wrong dimensions. W_pos = F1 F2^T is (n, n)"
    raw = f1 @ f2.transpose(-2, -1)
    scaled = raw / math.sqrt(d_head)
    variants = {"no_scale": raw, "scale_d": raw / d_head, "scale_k": raw / math.sqrt(k),
                "transposed": scaled.transpose(-2, -1), "times_sqrt": raw * math.sqrt(d_head),
                "softmax": torch.softmax(scaled, dim=-1)}
    future = ~np.tri(n, dtype=bool)                     # key after the query: what a causal mask hides
    if y.shape == tuple(scaled.shape) and n > 1:
        hidden, seen = y[:, future], y[:, ~future]
        if (((hidden == 0) | (hidden < -1e8)).all()          # masked with 0, -inf or a huge negative number
                and np.allclose(seen, scaled.numpy()[:, ~future], atol=1e-5)):
            return _FACT_HINTS["masked"]
    for key, value in variants.items():
        if y.shape == tuple(value.shape) and np.allclose(y, value.numpy(), atol=1e-5):
            if key == "no_scale" and k == 1:   # sqrt(k) = 1: the two mistakes look the same here
                return ("your result is F1 F2^T unscaled, or scaled by sqrt(k), which is 1 in this case: the scale "
                        "is 1 / sqrt(d_head), the same 1/sqrt(d/h) as PARec's W_pos")
            return _FACT_HINTS[key]
    return None


@exercise_check
def check_factorized_logits(factorized_logits: Callable[..., Any]) -> None:
    """Compare ``factorized_logits(f1, f2, d_head) -> (H, n, n)`` with FPARec's pattern in the library."""
    name = getattr(factorized_logits, "__name__", "factorized_logits")
    check_function(factorized_logits, reference_factorized_logits, factorized_cases(), name=name,
                   library=FACTORIZED_LIBRARY, diagnose=_diagnose_fact,
                   hint="f1 @ f2.transpose(-2, -1) / math.sqrt(d_head), one (n, n) matrix per head")
    expect_gradients(factorized_logits, _factorized_formula, factorized_cases()[2], wrt=(0, 1), name=name)
    # Small factors (entries of F1 F2^T / 2 below ~0.1) and a relative tolerance: a soft cap such as the
    # library's 30 tanh(x / 30) bends such values by a few millionths of themselves, far below the 1e-4 tolerance.
    gen = torch.Generator().manual_seed(1)
    f1, f2 = 0.2 * torch.randn(1, 12, 2, generator=gen), 0.2 * torch.randn(1, 12, 2, generator=gen)
    pattern = torch.as_tensor(call_learner(factorized_logits, Case((f1, f2, 4)), name))[0].double()
    rank = int(torch.linalg.matrix_rank(pattern, rtol=1e-4))
    expect(rank <= 2, f"your (12 x 12) pattern from rank-2 factors has rank {rank}; F1 F2^T has rank at most k = 2")
    passed(f"and the rank is right: a 12 x 12 pattern built from k = 2 factors has rank {rank} <= k, so it "
           f"needs 2 n k = 48 numbers instead of n^2 = 144.")


# ----------------------------------------------------------------------------- both inside FPARec
class _LearnersPositionalAttention(nn.Module):
    """A library FPARec attention layer whose computation uses the learner's two functions."""

    def __init__(self, library_layer: nn.Module, factorized_logits: Callable[..., Any],
                 positional_attention: Callable[..., Any]):
        super().__init__()
        self.lib = library_layer
        self.factorized_logits, self.positional_attention = factorized_logits, positional_attention

    def forward(self, x: torch.Tensor, ctx: SequenceContext, memory: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, Any]:
        """``x`` ``(B, L, d)`` -> ``(B, L, d)`` and, with ``ctx.need_weights``, the learner's ``(B, H, L, L)``
        weights (else ``None``)."""
        from ...attention.base import merge_heads, split_heads

        lib = self.lib
        v = split_heads(lib.v_proj(x if memory is None else memory), lib.n_heads)
        logits = torch.as_tensor(self.factorized_logits(lib.f1, lib.f2, lib.d_model // lib.n_heads))
        out, weights = self.positional_attention(logits, ctx.positions, v, ctx.valid_mask)
        return lib.out_proj(merge_heads(torch.as_tensor(out))), (weights if ctx.need_weights else None)


def _tiny_fparec(seed: int = 0):
    from ...models import build_model

    with forked_torch_rng(seed), torch.no_grad():
        model = build_model("fparec", n_items=40, max_len=8, d_model=12, n_layers=2, n_heads=2, k=3,
                            dropout=0.0).eval()
        for block in model.blocks:  # a pattern far from uniform, so that mistakes show
            block.attention.f1.normal_(0.0, 0.4)
            block.attention.f2.normal_(0.0, 0.4)
    return model


def compare_in_fparec(factorized_logits: Callable[..., Any], positional_attention: Callable[..., Any]
                      ) -> dict[str, float]:
    """Run a 2-layer FPARec with the learner's functions in every layer; return the largest differences from the
    library (hidden states at real positions, attention weights) and the largest change of an earlier hidden
    state when later items change (must be 0), and between a full and a trimmed window."""
    model = _tiny_fparec()
    yours = copy.deepcopy(model)
    for block in yours.blocks:
        block.attention = _LearnersPositionalAttention(block.attention, factorized_logits, positional_attention)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 41, (3, 8), generator=gen)
    ids[0, :3] = 0
    ids[1, :5] = 0
    valid = ids.ne(0)
    with torch.no_grad():
        lib_h, lib_w = model.encode(ids, need_weights=True)
        my_h, my_w = yours.encode(ids, need_weights=True)
        leak = 0.0
        for j in range(1, 8):
            ids2 = ids.clone()
            ids2[:, j:] = torch.randint(1, 41, (3, 8 - j), generator=gen)
            h2 = yours(ids2)
            leak = max(leak, float((h2 - my_h)[:, :j][valid[:, :j]].abs().max()))
        trimmed = yours(ids[1:2, 5:])                                      # row 1 has 3 real items
    return {
        "hidden states vs library": float((my_h - lib_h)[valid].abs().max()),
        "weights vs library": max(float((torch.as_tensor(a) - b).transpose(1, 2)[valid].abs().max())  # real queries
                                  for a, b in zip(my_w, lib_w)),
        "earlier states when later items change": leak,
        "full window vs trimmed window": float((trimmed[0] - my_h[1, 5:]).abs().max()),
    }


def _expect_pattern_shape(factorized_logits: Callable[..., Any], name: str) -> None:
    """Fail, naming the shapes, when ``factorized_logits`` does not give one ``(n, n)`` pattern per head for the
    factors of the model :func:`compare_in_fparec` builds (a wrong shape would fail later with a misleading error)."""
    att = _tiny_fparec().blocks[0].attention
    f1, f2 = att.f1.detach(), att.f2.detach()
    H, n, k = f1.shape
    try:
        got = tuple(torch.as_tensor(factorized_logits(f1.clone(), f2.clone(), att.d_model // H)).shape)
    except Exception:  # noqa: BLE001 - the comparison below reports the error itself
        return
    if got != (H, n, n):
        fail(f"`{name}` returned shape {got} for F1 and F2 of shape ({H}, {n}, {k}) (H, n, k): expected ({H}, {n}, "
             f"{n}) = (H, n, n), one n x n pattern per head (F1 F2^T per head, not F1^T F2). Run "
             f"check_factorized_logits: it says what differs")


@exercise_check
def check_in_fparec(factorized_logits: Callable[..., Any], positional_attention: Callable[..., Any] | None = None,
                    tol: float = 1e-4) -> None:
    """Your ``factorized_logits`` and ``positional_attention`` in every layer of a small FPARec model: the same
    hidden states and weights as the library, nothing leaks from later items, trimming the padding changes nothing.

    ``positional_attention=None`` (or still the stub) uses the library's version for exercise 1. The tolerance
    allows for the library's soft cap of the logits (``30 tanh(x / 30)``, which the exercise leaves out).
    """
    name = getattr(factorized_logits, "__name__", "factorized_logits")
    yours = []
    try:
        call_learner(factorized_logits, factorized_cases()[0], name, FACTORIZED_LIBRARY)
        yours.append(f"`{name}`")
        _expect_pattern_shape(factorized_logits, name)
    except ExerciseNotDone:
        if positional_attention is None:
            raise
        factorized_logits = reference_factorized_logits
    if positional_attention is not None:
        try:
            call_learner(positional_attention, positional_cases()[0], "positional_attention", PA_LIBRARY)
            yours.append("`positional_attention`")
        except ExerciseNotDone:
            positional_attention = None
    if not yours:
        raise ExerciseNotDone(not_done_message(name, FACTORIZED_LIBRARY))
    if positional_attention is None:
        positional_attention = reference_positional_attention
    if len(yours) == 1:
        print(f"(only {yours[0]} is yours: the other exercise is not done yet, so the library's version stands in)")
    try:
        diffs = compare_in_fparec(factorized_logits, positional_attention)
    except Exception as exc:  # noqa: BLE001 - any error of the learner's code is reported, not raised
        fail(f"running your functions inside FPARec raised {type(exc).__name__}: {exc}. Run the checks of "
             "exercises 1 and 2 first: they explain the first difference")
    for key, value in diffs.items():
        print(f"  max |difference| {key:40s} {value:.2e}")
    bad = {k: v for k, v in diffs.items() if not v <= tol}
    if "earlier states when later items change" in bad:
        fail("information leaks from the future inside the model: changing later items changed the hidden states "
             "of earlier positions. Run check_positional_attention: it finds the leak")
    expect(not bad, f"your functions inside FPARec differ from the library by more than {tol:g}: {bad}. Run the "
                    "checks of exercises 1 and 2 first: they explain the first difference")
    passed(f"a 2-layer FPARec built on your {' and '.join(yours)} gives the library's hidden states and weights, lets "
           "nothing leak from later items, and gives the same result on a trimmed window (positions counted from the "
           "right).")


# ----------------------------------------------------------------------------- exercise 3: parameter counts
COUNT_LIBRARY = "sum(p.numel() for p in build_model(...).blocks[0].attention.parameters())"
COUNTED_MODELS = ("sasrec", "parec", "fparec", "pattern")


def reference_attention_parameters(name: str, d: int, h: int, n: int, k: int) -> int:
    """The parameters of one attention layer of ``name`` (``"pattern"``: a handcrafted pattern), counted in a
    module the library builds with width ``d``, ``h`` heads, window ``n`` and rank ``k`` (biases included)."""
    from ...models import build_model

    if name not in COUNTED_MODELS:
        raise ValueError(f"name must be one of {COUNTED_MODELS}, got {name!r}")
    opts: dict = {}
    if name != "pattern":
        opts["n_heads"] = h
    if name == "fparec":
        opts["k"] = k
    model = build_model("pattern-exponential" if name == "pattern" else name, n_items=10, max_len=n, d_model=d,
                        n_layers=1, **opts)
    return sum(p.numel() for p in model.blocks[0].attention.parameters())


def attention_parameter_cases() -> list[Case]:
    """Every model at small settings first (each of d, h, n, k different), then the paper's and the course's."""
    settings = [(12, 3, 10, 4), (50, 1, 200, 40), (64, 2, 50, 10), (16, 4, 30, 7)]
    return [Case((name, d, h, n, k), label=f"d={d}, h={h}, n={n}, k={k}")
            for d, h, n, k in settings for name in COUNTED_MODELS]


def _count_variants(name: str, d: int, h: int, n: int, k: int) -> dict[str, int]:
    """The counts that typical mistakes give, so that a wrong count can be recognised."""
    value = d * d + d
    out: dict[str, dict[str, int]] = {
        "sasrec": {"no_bias": 4 * d * d, "no_out_proj": 3 * d * d + 3 * d, "per_head": 4 * d * d // h + 4 * d},
        "parec": {"no_bias": d * d + h * n * n, "one_pattern": value + n * n, "triangle": value + h * n * (n + 1) // 2,
                  "qk_too": 3 * value + h * n * n, "out_proj_too": 2 * value + h * n * n},
        "fparec": {"no_bias": d * d + 2 * h * n * k, "one_pattern": value + 2 * n * k, "one_factor": value + h * n * k,
                   "qk_too": 3 * value + 2 * h * n * k, "out_proj_too": 2 * value + 2 * h * n * k},
        "pattern": {"no_bias": d * d, "qk_too": 3 * value, "out_proj_too": 2 * value, "fixed_counted": value + n * n},
    }
    out["sasrec"]["positions_in_layer"] = 4 * value + n * d
    out["pattern"]["nothing"] = 0
    blocks = h * (d // h) ** 2 + d                  # W_V as h separate (d/h x d/h) blocks
    if h > 1:
        out["parec"]["block_diagonal"] = blocks + h * n * n
        out["fparec"]["block_diagonal"] = blocks + 2 * h * n * k
        out["pattern"]["block_diagonal"] = blocks
    return out.get(name, {})


_COUNT_HINTS = {
    "no_bias": "count the biases too: every nn.Linear(d, d) holds d * d weights and d biases",
    "no_out_proj": "that is the SASRec paper's (and its TF code's) count, without W_O: the library's default layout adds "
                   "the output projection of multi-head attention, so 4 projections of d * d + d",
    "per_head": "the heads split the width, not the projections: Q, K, V and W_O are each d x d however many heads "
                "there are",
    "one_pattern": "each head has its own position pattern: multiply by h",
    "triangle": "the library stores the full n x n matrix per head; the causal mask hides its upper triangle when "
                "it runs, but those entries are still parameters",
    "one_factor": "FPARec has two factors per head, F1 and F2, each n x k",
    "qk_too": "positional attention has no query or key projection: the pattern replaces Q K^T, and only the "
              "value projection W_V (d * d + d) remains",
    "out_proj_too": "the positional layers have no output projection W_O (the heads are concatenated as they are): "
                    "their only projection is W_V",
    "positions_in_layer": "SASRec's position embeddings (n x d) are added once, at the input, outside the attention "
                          "layer: count the layer's projections only",
    "fixed_counted": "a handcrafted pattern is fixed, computed from the positions: it has no parameters, only W_V",
    "nothing": "a handcrafted pattern has no parameters of its own, but the layer still learns its value projection "
               "W_V: d * d + d",
    "block_diagonal": "W_V is one nn.Linear(d, d) over the full width (d * d + d): the heads split its OUTPUT into "
                      "h slices of d/h, they do not make it block-diagonal",
}


_COUNT_RECIPE = ("count each nn.Linear as d * d + d and each head's pattern as its matrix entries (n x n for PARec, "
                 "two n x k factors for FPARec); SASRec has W_Q, W_K, W_V and W_O, the positional models only W_V")


def _diagnose_count(case: Case, yours: Any, expected: int) -> str | None:
    """The specific mistake behind a wrong count, else the recipe."""
    try:
        arr = np.asarray(to_numpy(yours))
        value = arr.reshape(-1)[0].item() if arr.size == 1 else None
    except Exception:  # noqa: BLE001
        return _COUNT_RECIPE
    if isinstance(value, float) and value == int(expected):
        return ("the count is right but it is a float: math.pow and / give floats; use ** and // (or int()) so that "
                "the function returns an int")
    for key, wrong in _count_variants(*case.args).items():
        if value == wrong:
            return _COUNT_HINTS[key]
    return _COUNT_RECIPE


@exercise_check
def check_attention_parameters(attention_parameters: Callable[..., Any]) -> None:
    """Check ``attention_parameters(name, d, h, n, k) -> int`` against the parameters counted in the library's
    modules, for SASRec, PARec, FPARec and a handcrafted pattern at four settings."""
    try:
        n = check_function(attention_parameters, reference_attention_parameters, attention_parameter_cases(),
                           library=COUNT_LIBRARY, diagnose=_diagnose_count, quiet=True)
    except CheckFailed as exc:
        if "returned None" not in str(exc):
            raise
        fail(f"{exc}\nHint: the names are lower case, 'sasrec', 'parec', 'fparec' and 'pattern'; does every branch "
             "of your function return a number?")
    passed(f"your formulas give the parameters counted in the library's modules in all {n} cases (4 models x 4 "
           "settings).")


__all__ = ["check_positional_attention", "check_factorized_logits", "check_in_fparec", "compare_in_fparec",
           "prove_no_leakage_positional", "reference_positional_attention", "reference_factorized_logits",
           "positional_cases", "factorized_cases", "check_attention_parameters", "reference_attention_parameters",
           "attention_parameter_cases"]
