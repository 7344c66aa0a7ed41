"""Checks of notebook 02 (SASRec from scratch): scaled dot-product attention, the causal mask (with a proof
that nothing leaks from the future), the mask combined with key padding, attention inside heads, splitting and
merging the heads, the pre-LN block, and the cross-entropy at the valid positions.

Convention of the course (and of ``F.scaled_dot_product_attention``'s boolean mask): a mask is **True where
a query may attend to a key**. ``nn.MultiheadAttention``'s ``attn_mask`` uses the opposite convention.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...utils.seeding import forked_torch_rng
from .base import (Case, CheckFailed, call_learner, check_function, exercise_check, expect, expect_gradients, fail,
                   is_stub_error, library_notice, passed, short_repr, to_numpy)

if TYPE_CHECKING:
    from ...attention import SequenceContext
    from ...models import Block

ATTENTION_LIBRARY = "tutorial_lib.attention.naive_attention"
MASK_LIBRARY = "tutorial_lib.attention.SequenceContext.allowed"


# ----------------------------------------------------------------------------- references
def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's attention (no dropout): ``(output, weights)``."""
    from ...attention import naive_attention

    return naive_attention(q, k, v, allowed)


def reference_causal_mask(L: int) -> torch.Tensor:
    """``(L, L)`` bool, ``True`` where query ``t`` may see key ``j`` (``j <= t``), as the library builds it."""
    from ...attention import SequenceContext

    return SequenceContext.from_item_ids(torch.ones(1, L, dtype=torch.long)).allowed()[0, 0].clone()


def reference_allowed_mask(item_ids: torch.Tensor) -> torch.Tensor:
    """``(B, 1, L, L)`` bool: causal, padding keys hidden, every position sees itself (the library's mask)."""
    from ...attention import SequenceContext

    return SequenceContext.from_item_ids(item_ids).allowed().clone()


# ----------------------------------------------------------------------------- exercise 1: attention
def _qkv(rng: np.random.Generator, B: int, H: int, L: int, dh: int, scale: float = 1.0
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``q, k, v``, each ``(B, H, L, dh)`` float32."""
    def t() -> torch.Tensor:
        return torch.from_numpy(rng.normal(0.0, scale, size=(B, H, L, dh)).astype(np.float32))
    return t(), t(), t()


def attention_cases(seed: int = 0) -> list[Case]:
    """Small, hand-made cases first (no mask, causal, padding), then seeded random ones."""
    rng = np.random.default_rng(seed)
    cases = []
    q, k, v = _qkv(rng, 1, 1, 3, 2)
    cases.append(Case((q, k, v, torch.ones(3, 3, dtype=torch.bool)), label="1 sequence, 1 head, no mask"))
    q, k, v = _qkv(rng, 1, 1, 4, 4)
    cases.append(Case((q, k, v, reference_causal_mask(4)), label="a causal (4, 4) mask"))
    q, k, v = _qkv(rng, 2, 2, 5, 8, scale=2.0)
    cases.append(Case((q, k, v, reference_causal_mask(5)), label="2 sequences, 2 heads, large logits: is the "
                                                                  "scaling by sqrt(d_head) there?"))
    ids = torch.tensor([[0, 0, 3, 7, 2, 9], [4, 1, 8, 6, 5, 2]])
    q, k, v = _qkv(rng, 2, 3, 6, 4)
    cases.append(Case((q, k, v, reference_allowed_mask(ids)), label="left padding + causal mask of shape (B, 1, L, L)"))
    q, k, v = _qkv(rng, 1, 2, 5, 4)
    q = -8.0 * k.abs().sum(-2, keepdim=True).expand_as(q)      # every scaled logit far below 0 (about -80 to -180):
    k = k.abs() + 1.0                                           # a finite fill (-20, -100) then beats the visible keys
    cases.append(Case((q, k, v, reference_causal_mask(5)), label="every logit strongly negative (about -80 to -180): "
                                                                  "is a hidden key really at -inf?"))
    q = torch.ones(1, 1, 5, 4)
    k = torch.arange(5, dtype=torch.float32).mul(25.0)[None, None, :, None].expand(1, 1, 5, 4).contiguous()
    v = _qkv(rng, 1, 1, 5, 4)[2]                               # logit of key j: 50 j, so every hidden (future) key
    cases.append(Case((q, k, v, reference_causal_mask(5)),     # is 50 to 200 above the visible ones
                      label="the hidden (future) keys' logits 50 to 200 above the visible ones: is the mask applied "
                            "before the softmax?"))
    for _ in range(4):
        B, H, L, dh = (int(x) for x in rng.integers([1, 1, 2, 2], [4, 5, 10, 17]))
        q, k, v = _qkv(rng, B, H, L, dh, scale=float(rng.uniform(0.5, 2.0)))
        ids = torch.from_numpy(rng.integers(1, 50, size=(B, L)))
        for b in range(B):
            ids[b, : int(rng.integers(0, L))] = 0
        cases.append(Case((q, k, v, reference_allowed_mask(ids)), label="random sizes, padding and causal mask"))
    return cases


def _attention_variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
                        ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Typical mistakes, computed, so that a wrong result can be recognised."""
    dh = q.shape[-1]
    raw = q @ k.transpose(-2, -1)

    def finish(logits: torch.Tensor, dim: int = -1, fill: float = float("-inf")) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.softmax(logits.masked_fill(~allowed, fill), dim=dim)
        return w @ v, w

    return {
        "no_scale": finish(raw),
        "scale_d": finish(raw / dh),
        "scale_sqrt_L": finish(raw / math.sqrt(q.shape[-2])),
        "dim": finish(raw / math.sqrt(dh), dim=-2),
        "fill_zero": finish(raw / math.sqrt(dh), fill=0.0),
        "inverted": _inverted(raw, v, allowed, dh),
        "no_mask": _no_mask(raw, v, dh),
        "mask_after_softmax": _mask_after_softmax(raw, v, allowed, dh),
        "transposed_logits": finish(k @ q.transpose(-2, -1) / math.sqrt(dh)),
        "times_sqrt_d": finish(raw * math.sqrt(dh)),
        "scale_after_softmax": _scaled_after_softmax(raw, v, allowed, dh),
        "logits_as_weights": _logits_as_weights(raw, v, allowed, dh),
    }


def _scaled_after_softmax(raw: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, dh: int
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, weights)`` when the division by ``sqrt(d_head)`` comes after the softmax."""
    w = torch.softmax(raw.masked_fill(~allowed, float("-inf")), dim=-1) / math.sqrt(dh)
    return w @ v, w


def _logits_as_weights(raw: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, dh: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The right output, but the masked logits returned in place of the weights."""
    logits = (raw / math.sqrt(dh)).masked_fill(~allowed, float("-inf"))
    return torch.softmax(logits, dim=-1) @ v, logits


def _mask_after_softmax(raw: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, dh: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, weights)`` when the mask multiplies the weights after the softmax."""
    w = torch.softmax(raw / math.sqrt(dh), dim=-1) * allowed
    return w @ v, w


def _inverted(raw: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, dh: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, weights)`` with the mask inverted (the allowed keys hidden)."""
    w = torch.softmax((raw / math.sqrt(dh)).masked_fill(allowed, float("-inf")), dim=-1)
    return w @ v, w


def _no_mask(raw: torch.Tensor, v: torch.Tensor, dh: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, weights)`` without any mask."""
    w = torch.softmax(raw / math.sqrt(dh), dim=-1)
    return w @ v, w


_ATTENTION_HINTS = {
    "no_scale": "your result equals softmax(Q K^T) V without the scaling: divide the logits by sqrt(d_head), "
                "with d_head = q.shape[-1]",
    "scale_d": "you divided the logits by d_head; divide by its square root, sqrt(d_head) = math.sqrt(q.shape[-1])",
    "scale_sqrt_L": "you scaled by the square root of the sequence length; the scale is sqrt(d_head), the size "
                    "of the LAST dimension of q",
    "dim": "the softmax runs over the wrong dimension: each QUERY (row) distributes its attention over the keys, "
           "so normalise over the last dimension (dim=-1)",
    "fill_zero": "hidden keys still get weight: their logits were set to 0 (exp(0) = 1), or to a finite number that "
                 "is not small next to strongly negative logits (such as -20), instead of -inf. Use "
                 "logits.masked_fill(~allowed, float('-inf'))",
    "inverted": "the mask is inverted: `allowed` is True where a query MAY look, so hide the positions where it is "
                "False (masked_fill(~allowed, -inf))",
    "no_mask": "the mask is not applied: hide the keys where `allowed` is False before the softmax",
    "mask_after_softmax": "you masked AFTER the softmax: the hidden keys' weight is then simply dropped, and each "
                          "row no longer sums to 1. Mask the logits with -inf BEFORE the softmax, which then "
                          "spreads the whole weight over the allowed keys",
    "transposed_logits": "the logits are K Q^T, the transpose of the attention map: row t must hold query t's scores "
                         "against every key, q @ k.transpose(-2, -1)",
    "times_sqrt_d": "you multiplied the logits by sqrt(d_head); divide them by it",
    "scale_after_softmax": "the scaling comes after the softmax: divide the LOGITS by sqrt(d_head), then take the "
                           "softmax (the weights of a row must sum to 1)",
    "logits_as_weights": "the output is right, but the second value is the logits: return the weights, the softmax "
                         "of the masked logits (each row sums to 1)",
}


def _diagnose_attention(case: Case, yours: Any, expected: tuple[torch.Tensor, torch.Tensor]) -> str | None:
    if not isinstance(yours, (tuple, list)) or len(yours) != 2:
        return "return a pair (output, weights): output (B, H, L, d_head), weights (B, H, L, L)"
    out, w = yours
    exp_out, exp_w = expected
    try:
        out_np, w_np = to_numpy(out), to_numpy(w)
    except Exception:  # noqa: BLE001
        return None
    if out_np.shape == tuple(exp_w.shape) and w_np.shape == tuple(exp_out.shape) and exp_w.shape != exp_out.shape:
        return "output and weights are swapped: return (output, weights)"
    for key, (v_out, v_w) in _attention_variants(*case.args).items():
        same_w = w_np.shape == tuple(v_w.shape) and np.allclose(np.nan_to_num(w_np), np.nan_to_num(v_w.numpy()),
                                                                atol=1e-5)
        if same_w and out_np.shape == tuple(v_out.shape) and np.allclose(
                np.nan_to_num(out_np), np.nan_to_num(v_out.numpy()), atol=1e-5):
            return _ATTENTION_HINTS[key]
    if w_np.shape == tuple(exp_w.shape) and np.allclose(w_np, exp_w.numpy(), atol=1e-5):
        return "the weights are right but the output is not: the output is weights @ v"
    if w_np.shape == tuple(exp_w.shape) and np.isnan(w_np).any() and not np.isnan(exp_w.numpy()).any():
        return ("some weights are NaN: when hidden keys have the largest logits, a softmax over every key gives the "
                "visible keys weights that round to 0, and renormalising them divides 0 by 0. Mask the logits with "
                "-inf BEFORE the softmax, so that the hidden keys never take part in it. (If you wrote the softmax by "
                "hand, subtract each row's maximum before exp: exp of a large logit overflows to inf, and inf/inf is "
                "NaN too)")
    allowed = case.args[3]
    hidden = np.broadcast_to(~to_numpy(allowed), w_np.shape) if w_np.shape == tuple(exp_w.shape) else None
    if hidden is not None and hidden.any() and (w_np[hidden] > 1e-3).any():
        return ("hidden keys get weight when every logit is strongly negative: a finite fill value (e.g. -20 or "
                "-100) is only 'small' next to logits near 0. Fill with float('-inf') (or torch.finfo(dtype).min), "
                "which no logit can be below")
    return None


@exercise_check
def check_attention(attention: Callable[..., Any]) -> None:
    """Check ``attention(q, k, v, allowed) -> (output, weights)`` against the library's ``naive_attention``."""
    cases = attention_cases()
    check_function(attention, reference_attention, cases, library=ATTENTION_LIBRARY,
                   output_names=("output", "weights"), diagnose=_diagnose_attention,
                   hint="weights = softmax(q @ k^T / sqrt(d_head)) with the logits of hidden keys set to -inf "
                        "(softmax over the last dimension), output = weights @ v")
    expect_gradients(attention, reference_attention, cases[2], wrt=(0, 1, 2),
                     name=getattr(attention, "__name__", "attention"), output=lambda result: result[0])


# ----------------------------------------------------------------------------- exercise 2: the causal mask
def _as_bool_mask(mask: Any, L: int, name: str) -> torch.Tensor:
    if mask is None:
        fail(f"`{name}({L})` returned None; did you forget the `return` statement?")
    expect(isinstance(mask, torch.Tensor), f"`{name}({L})` returned a value of type {type(mask).__name__}; "
                                            "return a torch tensor "
                                            "(the attention code combines it with tensors: `&`, masked_fill), e.g. "
                                            "torch.ones(L, L, dtype=torch.bool).tril()")
    m = mask
    expect(tuple(m.shape) == (L, L), f"`{name}({L})` must have shape ({L}, {L}), yours is {tuple(m.shape)}")
    expect(m.dtype == torch.bool, f"`{name}({L})` must be a bool tensor (True = may attend), yours has dtype "
                                  f"{m.dtype}; e.g. torch.ones(L, L, dtype=torch.bool).tril()")
    return m


def prove_no_leakage(mask: torch.Tensor, n_sequences: int = 3, d: int = 8, seed: int = 0) -> tuple[int, int] | None:
    """Run attention with ``mask`` and perturb the future: ``None`` if no output ever changes before the
    perturbed position, else the first ``(t, j)`` such that the output at ``t`` changed when the inputs at
    positions ``>= j > t`` changed.

    Queries, keys and values are random projections of random token states ``x`` (the library's
    ``naive_attention`` is used, so only the mask is tested). For every cut ``j`` the states at positions
    ``>= j`` are replaced by new random ones; the outputs at positions ``< j`` must stay exactly the same.
    """
    from ...attention import naive_attention

    L = mask.shape[-1]
    gen = torch.Generator().manual_seed(seed)
    w_q, w_k, w_v = (torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(3))

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = ((x @ w)[:, None] for w in (w_q, w_k, w_v))  # (B, 1, L, d)
        return naive_attention(q, k, v, mask)[0][:, 0]            # (B, L, d)

    for _ in range(n_sequences):
        x = torch.randn(1, L, d, generator=gen, dtype=torch.float64)
        base = run(x)
        for j in range(1, L):
            x2 = x.clone()
            x2[:, j:] = torch.randn(1, L - j, d, generator=gen, dtype=torch.float64)
            changed = (run(x2)[:, :j] - base[:, :j]).abs().amax(dim=-1)[0] > 1e-9
            changed |= torch.isnan(base[0, :j]).any(-1)
            if bool(changed.any()):
                return int(changed.nonzero()[0, 0]), j
    return None


@exercise_check
def check_causal_mask(causal_mask: Callable[..., Any]) -> None:
    """Prove that the learner's ``causal_mask(L)`` lets nothing leak from the future, then compare it with the
    library's mask (which also catches masks that hide too much)."""
    name = getattr(causal_mask, "__name__", "causal_mask")
    for L in (1, 2, 5, 8):
        mask = _as_bool_mask(call_learner(causal_mask, Case((L,)), name, MASK_LIBRARY), L, name)
        if L == 1:
            continue
        if torch.equal(mask, ~reference_causal_mask(L)):
            fail(f"`{name}({L})` is inverted: it is True exactly where the causal mask is False. In this course "
                 "True means 'query t MAY attend to key j' (as in F.scaled_dot_product_attention's boolean mask; "
                 "nn.MultiheadAttention's attn_mask uses the opposite convention). Return the lower triangle, "
                 "diagonal included")
        if not bool(mask.diagonal().all()):
            t = int((~mask.diagonal()).nonzero()[0, 0])
            fail(f"`{name}({L})` hides position {t} from itself (mask[{t}, {t}] is False). Position t may look at "
                 "every j <= t, itself included (the diagonal is True); without the diagonal, position 0 would see "
                 "no key at all, and its softmax over a row of -inf returns NaN")
        leak = prove_no_leakage(mask)
        if leak is not None:
            t, j = leak
            row = mask[t].int().tolist()
            future = [i for i in range(t + 1, L) if bool(mask[t, i])]
            hint = ("your mask is the transpose of the causal one: use the LOWER triangle (torch.tril), where row t "
                    "(the query) allows the columns j <= t (the keys)" if torch.equal(mask, reference_causal_mask(L).T)
                    else "row t of the mask (query t) must be False at every column j > t")
            fail(f"information leaks from the future with `{name}({L})`: when the items at positions >= {j} change, "
                 f"the output at position {t} changes too, although {t} < {j}.\n"
                 f"Row {t} of your mask is {row}: it lets query {t} read the future key(s) {future}.\n"
                 "Why it matters: position t is trained to predict the item at t + 1, which is the INPUT at position "
                 "t + 1. If t can read it, the model learns to copy it: the training loss becomes tiny, and at test "
                 f"time, where the next item is unknown, the model has learned nothing useful.\nHint: {hint}")
    passed("no future leakage: with your mask, changing the items after position t never changed the outputs "
           "at positions <= t (L = 2, 5, 8; every cut t; 3 random sequences each).")

    def _diagnose(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
        m = torch.as_tensor(yours)
        if m.shape == expected.shape and torch.equal(m, ~expected):
            return ("your mask is inverted: in this course True means 'may attend' (as in "
                    "F.scaled_dot_product_attention); nn.MultiheadAttention uses the opposite convention")
        if m.shape == expected.shape and bool((expected & ~m).any()):
            return "your mask hides keys that are allowed: query t may look at EVERY key j <= t, not only some"
        return None

    check_function(causal_mask, reference_causal_mask, [Case((L,), label=f"L = {L}") for L in (1, 2, 3, 5, 8, 13)],
                   name=name, library=MASK_LIBRARY, diagnose=_diagnose,
                   hint="mask[t, j] is True exactly when j <= t: torch.ones(L, L, dtype=torch.bool).tril()")


# ----------------------------------------------------------------------------- exercise 3: mask + padding
def allowed_cases(seed: int = 0) -> list[Case]:
    """``(B, L)`` item ids: without padding, left-padded, a padded and a full row, then random left-padded batches."""
    rng = np.random.default_rng(seed)
    cases = [
        Case((torch.tensor([[3, 7, 2]]),), label="one sequence without padding"),
        # two padding positions of five: a mask that assumes right padding (the first `length` keys) differs
        # from an inverted one, and one that hides padding queries from the causal mask alone
        Case((torch.tensor([[0, 0, 6, 5, 1]]),), label="one sequence with 2 padding positions on the left"),
        Case((torch.tensor([[0, 0, 0, 4, 9], [6, 2, 8, 1, 3]]),), label="a padded and a full sequence"),
    ]
    for _ in range(4):
        B, L = int(rng.integers(1, 5)), int(rng.integers(2, 12))
        ids = torch.from_numpy(rng.integers(1, 100, size=(B, L)))
        for b in range(B):
            ids[b, : int(rng.integers(0, L))] = 0
        cases.append(Case((ids,), label="random left-padded batch"))
    return cases


def _diagnose_allowed(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    try:
        m = torch.as_tensor(to_numpy(yours))
    except Exception:  # noqa: BLE001
        return None
    ids = case.args[0]
    B, L = ids.shape
    if m.dim() == 3 and tuple(m.shape) == (B, L, L):
        return "add the head dimension: the mask has shape (B, 1, L, L), e.g. mask[:, None]"
    if m.dtype != torch.bool:
        return None
    eye = torch.eye(L, dtype=torch.bool)
    valid = ids.ne(0)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    try:  # the causal mask alone, as (L, L) or broadcast to (B, 1, L, L), is the likely mistake
        if torch.equal(m.broadcast_to(expected.shape), causal.expand_as(expected)):
            return "the padding is not hidden: keys whose item id is 0 must be False in every row"
    except RuntimeError:  # not broadcastable: the shape message says enough
        return None
    if m.shape != expected.shape:
        return None
    if torch.equal(m, expected & ~eye | (expected & eye & valid[:, None, :, None])) or torch.equal(
            m, (valid[:, None, None, :] & causal)):
        return ("padding positions see no key at all, so their softmax is over a row of -inf and gives NaN. Let "
                "every position always see itself: `| torch.eye(L, dtype=torch.bool)`. (Their outputs are never "
                "used, but NaNs would spread through the next layers.)")
    first_keys = torch.arange(L)[None, :] < valid.sum(dim=1, keepdim=True)   # (B, L): padding assumed on the right
    right_padded = first_keys[:, None, None, :] & causal
    if torch.equal(m, right_padded) or torch.equal(m, right_padded | eye):
        return ("you allowed the first `length` keys of each row, as if the padding came at the end. Our batches "
                "are left-padded (padding first, the most recent item last), so take the real keys from the ids "
                "themselves: item_ids.ne(0)")
    if torch.equal(m, ((~valid[:, None, None, :] & causal) | eye).expand_as(m)):
        return ("the padding test is inverted: a key is hidden when its item id IS 0, so the allowed keys are "
                "item_ids != 0 (item_ids.ne(0))")
    if torch.equal(m, (valid[:, None, None, :] | eye).expand_as(m)):
        return "the causal part is missing: combine the padding mask with causal_mask(L) using &"
    if torch.equal(m, (valid[:, None, :, None] & causal) | eye):
        return ("you hid padding QUERIES (rows) instead of padding KEYS (columns): the padding mask of the keys "
                "is item_ids.ne(0)[:, None, None, :], which varies along the LAST dimension")
    if (m & ~causal).any():
        t, j = (int(i) for i in (m & ~causal).nonzero()[0, 2:])
        return (f"position {t} may attend to the later position {j}, its future: every key j > t must be False "
                f"(the causal part is causal_mask(L), i.e. .tril() with diagonal=0)")
    return None


@exercise_check
def check_allowed_mask(allowed_mask: Callable[..., Any]) -> None:
    """Check ``allowed_mask(item_ids) -> (B, 1, L, L)`` against ``SequenceContext.allowed()``."""
    check_function(allowed_mask, reference_allowed_mask, allowed_cases(), library=MASK_LIBRARY,
                   diagnose=_diagnose_allowed,
                   hint="allowed[β, 0, t, j] = (j <= t and item_ids[β, j] != 0) or j == t, for row β of the batch")


# ----------------------------------------------------------------------------- attention inside heads
def compare_in_heads(attention: Callable[..., Any], d_model: int = 16, n_heads: int = 4, seed: int = 0
                     ) -> dict[str, float]:
    """Run ``attention`` inside the heads of a library :class:`DotProductAttention` and compare.

    Returns the largest absolute differences of the layer output and of the weights against the library's
    explicit path (``need_weights=True``), and of the output against its fused path (PyTorch's
    ``scaled_dot_product_attention``).
    """
    from ...attention import DotProductAttention, SequenceContext, merge_heads

    gen = torch.Generator().manual_seed(seed)
    with forked_torch_rng(seed):
        layer = DotProductAttention(d_model, n_heads).eval()
    x = torch.randn(3, 7, d_model, generator=gen)
    ids = torch.tensor([[0, 0, 0, 5, 2, 8, 1], [4, 9, 3, 6, 2, 7, 5], [0, 3, 3, 1, 9, 2, 6]])
    with torch.no_grad():
        q, k, v = layer.project(x, None)                               # (B, H, L, d_head) each
        ctx = SequenceContext.from_item_ids(ids)
        out, weights = attention(q, k, v, ctx.allowed())
        mine = layer.out_proj(merge_heads(torch.as_tensor(out)))       # (B, L, d)
        lib, lib_w = layer(x, SequenceContext.from_item_ids(ids, need_weights=True))
        fused, _ = layer(x, SequenceContext.from_item_ids(ids))
    valid = ids.ne(0)
    return {
        "output vs library (explicit)": float((mine - lib)[valid].abs().max()),
        "weights vs library": float((torch.as_tensor(weights) - lib_w).abs().max()),
        "output vs library (fused kernel)": float((mine - fused)[valid].abs().max()),
    }


@exercise_check
def check_attention_in_heads(attention: Callable[..., Any], tol: float = 1e-5) -> None:
    """Use the learner's ``attention`` inside a 4-head :class:`DotProductAttention` and print the differences."""
    name = getattr(attention, "__name__", "attention")
    try:
        diffs = compare_in_heads(attention)
    except Exception as exc:  # noqa: BLE001 - any error of the learner's code is reported, not raised
        if is_stub_error(exc):
            call_learner(attention, attention_cases()[0], name, ATTENTION_LIBRARY)  # raises ExerciseNotDone
            raise
        fail(f"running your `{name}` inside the heads raised {type(exc).__name__}: {exc}. Run check_attention "
             "first: it explains what differs from the library")
    for key, value in diffs.items():
        print(f"  max |difference| {key:34s} {value:.2e}")
    bad = {k: v for k, v in diffs.items() if not v <= tol}
    worst = ", ".join(f"{k} {v:.2e}" for k, v in bad.items())
    expect(not bad, f"your `{name}` inside the heads differs from the library by more than {tol:g}: {worst}. "
                    "Run check_attention first: it explains the first difference")
    passed(f"your `{name}`, run inside 4 heads of DotProductAttention, gives the library's outputs and weights "
           f"(within {tol:g}, real positions).")


# ----------------------------------------------------------------------------- exercise 4: the heads
HEADS_LIBRARY = "tutorial_lib.attention.split_heads / merge_heads"


def reference_split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, L, d)`` -> ``(B, H, L, d/H)``: head ``h`` owns the channels ``h*d_h ... (h+1)*d_h - 1``."""
    from ...attention import split_heads

    return split_heads(x, n_heads).clone()


def reference_merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, d_h)`` -> ``(B, L, H*d_h)``, the inverse of :func:`reference_split_heads`."""
    from ...attention import merge_heads

    return merge_heads(x).clone()


def _numbered(*shape: int) -> torch.Tensor:
    """A float tensor whose entries are 0, 1, 2, ... in memory order: every rearrangement shows."""
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)


def split_cases() -> list[Case]:
    """L different from H (a swapped axis changes the shape) and L equal to H (it does not), then a larger case."""
    return [Case((_numbered(1, 3, 4), 2), label="B=1, L=3, d=4, H=2"),
            Case((_numbered(2, 2, 6), 2), label="B=2, L=2, d=6, H=2: L equals H"),
            Case((_numbered(2, 5, 12), 4), label="B=2, L=5, d=12, H=4")]


def merge_cases() -> list[Case]:
    """``(B, H, L, d_h)`` inputs: L different from H, L equal to H, then a larger case."""
    return [Case((_numbered(1, 2, 3, 2),), label="B=1, H=2, L=3, d_h=2"),
            Case((_numbered(2, 2, 2, 3),), label="B=2, H=2, L=2, d_h=3: L equals H"),
            Case((_numbered(2, 4, 5, 3),), label="B=2, H=4, L=5, d_h=3")]


def _split_variants(x: torch.Tensor, n_heads: int) -> dict[str, torch.Tensor]:
    B, L, d = x.shape
    dh = d // n_heads
    return {"view_mixes": x.reshape(B, n_heads, L, dh),
            "interleaved": x.reshape(B, L, dh, n_heads).permute(0, 3, 1, 2),
            "no_transpose": x.reshape(B, L, n_heads, dh)}


def _merge_variants(x: torch.Tensor) -> dict[str, torch.Tensor]:
    B, H, L, dh = x.shape
    return {"view_mixes": x.reshape(B, L, H * dh),
            "interleaved": x.permute(0, 2, 3, 1).reshape(B, L, H * dh)}


_HEADS_HINTS = {
    "view_mixes": "reshaping straight to the target shape re-reads the memory in another order and mixes "
                  "positions with channels: split the last axis first, (B, L, H, d_h), then swap the L and H axes "
                  "with transpose(1, 2) (for merging: transpose back first, then reshape)",
    "interleaved": "head h (counted from 0) owns a contiguous block of channels, h*d_h ... (h+1)*d_h - 1, not every "
                   "H-th channel: split the last axis as (H, d_h), in that order",
    "no_transpose": "the axes are (B, L, H, d_h): swap L and H with transpose(1, 2) to get (B, H, L, d_h)",
}


def _diagnose_heads(variants: Callable[..., dict[str, torch.Tensor]]) -> Callable[..., str | None]:
    """A ``diagnose(case, yours, expected)`` for check_function that names the variant ``yours`` equals."""
    def diagnose(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
        try:
            mine = torch.as_tensor(to_numpy(yours))
        except Exception:  # noqa: BLE001
            return None
        for key, wrong in variants(*case.args).items():
            if tuple(mine.shape) == tuple(wrong.shape) and torch.equal(mine.float(), wrong.float()):
                return _HEADS_HINTS[key]
        return None
    return diagnose


def _expect_tensor_result(fn: Callable[..., Any], case: Case, shape: str) -> None:
    """Fail unless ``fn`` returns a tensor (or ``None``, which the value check reports) on ``case``."""
    name = getattr(fn, "__name__", "your function")
    result = call_learner(fn, case, name, HEADS_LIBRARY)
    expect(result is None or isinstance(result, torch.Tensor),
           f"`{name}` returned a {type(result).__name__}: return a torch tensor of shape {shape} (the attention "
           "code goes on with tensor operations on it: @, transpose, a Linear layer). Build it with reshape and "
           "transpose, without .tolist(), .numpy() or a list")


@exercise_check
def check_heads(split_heads: Callable[..., Any], merge_heads: Callable[..., Any]) -> None:
    """Check ``split_heads(x, n_heads)`` and ``merge_heads(x)`` against the library's, then that merging undoes
    splitting."""
    _expect_tensor_result(split_heads, split_cases()[0], "(B, H, L, d_h)")
    n = check_function(split_heads, reference_split_heads, split_cases(), library=HEADS_LIBRARY,
                       diagnose=_diagnose_heads(_split_variants), quiet=True,
                       hint="x.reshape(B, L, H, d // H).transpose(1, 2)")
    _expect_tensor_result(merge_heads, merge_cases()[0], "(B, L, H*d_h)")
    n += check_function(merge_heads, reference_merge_heads, merge_cases(), library=HEADS_LIBRARY,
                        diagnose=_diagnose_heads(_merge_variants), quiet=True,
                        hint="x.transpose(1, 2).reshape(B, L, H * d_h)")
    x = _numbered(2, 5, 12)
    expect(torch.equal(torch.as_tensor(merge_heads(split_heads(x, 3))), x),
           "merge_heads(split_heads(x, 3)) is not x: merging must undo splitting for every number of heads")
    passed(f"your split_heads and merge_heads match the library's on {n} test cases, and merging undoes splitting.")


# ----------------------------------------------------------------------------- exercise 5: the block
BLOCK_LIBRARY = "tutorial_lib.models.Block.forward"
BLOCK_TOL = 1e-4   # every mistake below moves the output by 0.1 or more; float rounding by ~1e-6


def make_check_block(d_model: int = 16, n_heads: int = 4, dropout: float = 0.3, seed: int = 0) -> Block:
    """A paper-layout :class:`~tutorial_lib.models.Block` whose LayerNorms have random scales and shifts (with the
    default ones, 1 and 0, two LayerNorms could not be told apart)."""
    from ...attention import DotProductAttention
    from ...models import Block

    with forked_torch_rng(seed):
        block = Block(DotProductAttention(d_model, n_heads), d_model, ffn_dim=2 * d_model, dropout=dropout)
        with torch.no_grad():
            for norm in (block.ln_attn, block.ln_ffn):
                norm.weight.normal_(1.0, 0.5)
                norm.bias.normal_(0.0, 0.5)
    return block


def _block_inputs(seed: int = 0) -> tuple[torch.Tensor, SequenceContext]:
    """A random ``(2, 6, 16)`` batch of states and the context of its ids (the first row left-padded)."""
    from ...attention import SequenceContext

    gen = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[0, 0, 3, 7, 2, 5], [4, 9, 1, 6, 8, 2]])
    return torch.randn(2, 6, 16, generator=gen), SequenceContext.from_item_ids(ids)


def _run_block(fn: Callable[..., Any], block: Block, x: torch.Tensor, ctx: SequenceContext, training: bool,
               seed: int = 1) -> Any:
    """``fn(block, x, ctx)`` in training or evaluation mode, with dropout's random numbers seeded (whatever the
    learner's function returns; the caller checks that it is a tensor)."""
    block.train(training)
    try:
        with forked_torch_rng(seed):
            return fn(block, x, ctx)
    finally:
        block.eval()


def reference_block(block: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
    """The library's paper-layout block: ``(B, L, d)``."""
    return block(x, ctx)[0]


def _block_variants() -> dict[str, object]:
    """Typical mistakes, as functions of ``(block, x, ctx)``."""
    import torch.nn.functional as F

    def attn(b: Block, h: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        return b.attention(h, ctx)[0]

    def ffn_part(b: Block, x: torch.Tensor) -> torch.Tensor:   # the correct second half
        return x + b.dropout(b.ffn(b.ln_ffn(x)))

    def post_ln(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = b.ln_attn(x + b.dropout(attn(b, x, ctx)))
        return b.ln_ffn(x + b.dropout(b.ffn(x)))

    def residual_from_norm(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        h = b.ln_attn(x)
        x = h + b.dropout(attn(b, h, ctx))
        f = b.ln_ffn(x)
        return f + b.dropout(b.ffn(f))

    def attention_residual_from_norm(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        h = b.ln_attn(x)
        return ffn_part(b, h + b.dropout(attn(b, h, ctx)))

    def no_residual(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = b.dropout(attn(b, b.ln_attn(x), ctx))
        return b.dropout(b.ffn(b.ln_ffn(x)))

    def no_ffn_residual(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = x + b.dropout(attn(b, b.ln_attn(x), ctx))
        return b.dropout(b.ffn(b.ln_ffn(x)))

    def one_norm(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = x + b.dropout(attn(b, b.ln_attn(x), ctx))
        return x + b.dropout(b.ffn(b.ln_attn(x)))

    def stale_norm(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        h = b.ln_attn(x)
        x = x + b.dropout(attn(b, h, ctx))
        return x + b.dropout(b.ffn(b.ln_ffn(h)))

    def ffn_unnormalised(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = x + b.dropout(attn(b, b.ln_attn(x), ctx))
        return x + b.dropout(b.ffn(x))

    def attention_unnormalised(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        return ffn_part(b, x + b.dropout(attn(b, x, ctx)))

    def fresh_norms(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        d = x.shape[-1]
        x = x + b.dropout(attn(b, F.layer_norm(x, (d,), eps=b.ln_attn.eps), ctx))
        return x + b.dropout(b.ffn(F.layer_norm(x, (d,), eps=b.ln_ffn.eps)))

    def no_dropout(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = x + attn(b, b.ln_attn(x), ctx)
        return x + b.ffn(b.ln_ffn(x))

    def dropout_after_sum(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = b.dropout(x + attn(b, b.ln_attn(x), ctx))
        return b.dropout(x + b.ffn(b.ln_ffn(x)))

    def functional_dropout(b: Block, x: torch.Tensor, ctx: SequenceContext
                           ) -> torch.Tensor:   # F.dropout's training flag defaults to True
        x = x + F.dropout(attn(b, b.ln_attn(x), ctx), b.dropout.p)
        return x + F.dropout(b.ffn(b.ln_ffn(x)), b.dropout.p)

    def functional_dropout_in_training(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = x + F.dropout(attn(b, b.ln_attn(x), ctx), b.dropout.p, training=b.training)
        return x + F.dropout(b.ffn(b.ln_ffn(x)), b.dropout.p, training=b.training)

    def ffn_first(b: Block, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        x = x + b.dropout(b.ffn(b.ln_ffn(x)))
        return x + b.dropout(attn(b, b.ln_attn(x), ctx))

    return {"post_ln": post_ln, "residual_from_norm": residual_from_norm,
            "attention_residual_from_norm": attention_residual_from_norm, "no_residual": no_residual,
            "no_ffn_residual": no_ffn_residual, "one_norm": one_norm, "stale_norm": stale_norm,
            "ffn_unnormalised": ffn_unnormalised, "attention_unnormalised": attention_unnormalised,
            "fresh_norms": fresh_norms, "no_dropout": no_dropout, "dropout_after_sum": dropout_after_sum,
            # in training mode the two F.dropout variants agree; the one that names training mode goes first
            "functional_dropout_in_training": functional_dropout_in_training, "functional_dropout": functional_dropout,
            "ffn_first": ffn_first}


_BLOCK_HINTS = {
    "post_ln": "that is the original Transformer's post-LN block, LN(x + sublayer(x)): SASRec normalises the input "
               "of each sub-layer instead and adds the sub-layer's output to the un-normalised x",
    "residual_from_norm": "the residual is taken from LN(x): that is the released TF code's layout (layout='tf'). "
                          "In the paper's block the skip connection carries x itself: x + Dropout(MHA(LN(x)))",
    "attention_residual_from_norm": "the attention's residual is taken from LN(x): the skip connection carries x "
                                    "itself, x + Dropout(MHA(LN(x)))",
    "no_residual": "the residual connections are missing: each sub-layer's output is ADDED to x",
    "no_ffn_residual": "the FFN's residual connection is missing: x = x + Dropout(FFN(LN_2(x)))",
    "one_norm": "the FFN's input went through block.ln_attn: each sub-layer has its own LayerNorm, block.ln_ffn "
                "for the feed-forward network",
    "stale_norm": "the FFN read the first LayerNorm's output: it reads block.ln_ffn of the UPDATED x (after the "
                  "attention's residual)",
    "ffn_unnormalised": "the FFN reads the un-normalised x: its input is block.ln_ffn(x)",
    "attention_unnormalised": "the attention reads the un-normalised x: its input is block.ln_attn(x)",
    "fresh_norms": "use the block's own block.ln_attn and block.ln_ffn: their learned scale and shift are part of "
                   "the block (a new LayerNorm starts at scale 1 and shift 0)",
    "no_dropout": "right in evaluation mode but not in training: apply block.dropout to each sub-layer's output "
                  "before adding it to x",
    "dropout_after_sum": "dropout is applied after the residual sum, which also drops parts of x: apply it to the "
                         "sub-layer's output only, x + block.dropout(...)",
    "functional_dropout": "F.dropout drops even in evaluation mode (its training flag defaults to True). Use "
                          "block.dropout: it follows block.train() / block.eval()",
    "functional_dropout_in_training": "use block.dropout rather than F.dropout or a new nn.Dropout: they draw "
                                      "other random numbers than the block's Dropout, so no seed can make them agree",
    "ffn_first": "the sub-layers are in the wrong order: attention first (it mixes the positions), then the FFN",
}
_BLOCK_RECIPE = ("x = x + Dropout(MHA(LN_1(x))), then x = x + Dropout(FFN(LN_2(x))), with block.ln_attn, "
                 "block.attention (its output is [0] of the pair), block.dropout, block.ln_ffn and block.ffn")
_DROPOUT_RECIPE = ("right without dropout, wrong with it: apply block.dropout exactly once to each sub-layer's output "
                   "(the attention's and the FFN's) and nowhere else, and call block.ffn whole (it has its own inner "
                   "dropout)")


def _diagnose_block(block: Block, x: torch.Tensor, ctx: SequenceContext, yours: torch.Tensor, training: bool) -> str:
    for key, variant in _block_variants().items():
        with torch.no_grad():
            wrong = _run_block(variant, block, x.clone(), ctx, training)
        if wrong.shape == yours.shape and torch.allclose(yours, wrong, atol=BLOCK_TOL):
            return _BLOCK_HINTS[key]
    return _DROPOUT_RECIPE if training else _BLOCK_RECIPE


def _input_gradient(fn: Callable[..., Any], block: Block, x: torch.Tensor, ctx: SequenceContext
                    ) -> torch.Tensor:
    """``d sum(fn(block, x, ctx)) / dx`` in training mode (seeded dropout)."""
    leaf = x.clone().requires_grad_()
    out = _run_block(fn, block, leaf * 1.0, ctx, training=True)
    out.sum().backward()
    return leaf.grad


@exercise_check
def check_block(block_forward: Callable[..., Any]) -> None:
    """Check ``block_forward(block, x, ctx) -> x`` against the paper layout of the library's ``Block.forward``:
    in evaluation mode, then in training mode with dropout's random numbers seeded alike, then its gradient."""
    name = getattr(block_forward, "__name__", "block_forward")
    if not callable(block_forward):
        fail(f"expected a function, got {type(block_forward).__name__}: pass the function itself, "
             f"e.g. check_block({name}) not check_block({name}(...))")
    block = make_check_block()
    x, ctx = _block_inputs()
    used_library = []
    library_forward = block.forward
    block.forward = lambda *a, **k: used_library.append(True) or library_forward(*a, **k)
    for training in (False, True):
        mode = "training mode (dropout on, seeded)" if training else "evaluation mode (dropout off)"
        given = x.clone()
        switched = []

        def watched(b: Block, h: torch.Tensor, c: SequenceContext, training: bool = training) -> Any:
            out = block_forward(b, h, c)
            if b.training != training:
                switched.append(b.training)
            return out

        watched.__name__ = name
        try:
            with torch.no_grad():
                yours = _run_block(watched, block, given, ctx, training)
        except NotImplementedError as exc:
            if is_stub_error(exc):
                call_learner(block_forward, Case((block, x, ctx)), name, BLOCK_LIBRARY)   # raises ExerciseNotDone
            raise
        except Exception as exc:  # noqa: BLE001 - the learner's error, reported with the case
            fail(f"`{name}` raised {type(exc).__name__}: {exc}\nin {mode} on a (2, 6, 16) batch; the traceback "
                 "above shows the line. block.attention(h, ctx) returns a pair (output, weights)")
        to_train = bool(switched and switched[0])
        expect(not switched, f"`{name}` switched the block to {'training' if to_train else 'evaluation'} "
                             f"mode (block.{'train' if to_train else 'eval'}() inside the function). "
                             "The caller chooses the mode, and block.dropout follows it: leave block.train() / "
                             "block.eval() out of block_forward")
        expect(torch.equal(given, x), f"`{name}` changed its input x in place (x += ... or x.add_(...)): write "
                                      "x = x + ..., which makes a new tensor. In training the in-place add would "
                                      "overwrite the input that the LayerNorm keeps for backward(), and the caller's "
                                      "states with it")
        if isinstance(yours, (tuple, list)):
            fail(f"`{name}` returned a {type(yours).__name__}: return the new x only, a (B, L, d) tensor")
        with torch.no_grad():
            expected = _run_block(_as_block_function(library_forward), block, x.clone(), ctx, training)
        if not isinstance(yours, torch.Tensor) or yours.shape != expected.shape:
            fail(f"`{name}` returned {short_repr(yours)}: expected a tensor of shape {tuple(expected.shape)}")
        gap = float((yours - expected)[ctx.valid_mask].abs().max())
        if not gap <= BLOCK_TOL:
            fail(f"`{name}` differs from the library's block in {mode} by up to {gap:.2e} at real positions."
                 f"\nHint: {_diagnose_block(block, x, ctx, yours, training)}")
    try:
        grad = _input_gradient(block_forward, block, x, ctx)
    except RuntimeError as exc:
        fail(f"backward() through `{name}` failed: {str(exc).splitlines()[0]}\nHint: build the output with "
             "out-of-place operations (x = x + ..., not x += ...) and without .detach() or torch.no_grad()")
    expected_grad = _input_gradient(_as_block_function(library_forward), block, x, ctx)
    expect(grad is not None and torch.allclose(grad, expected_grad, atol=BLOCK_TOL),
           f"`{name}` has the library's output but not its gradient with respect to x: is part of it detached "
           "(.detach(), torch.no_grad(), .data)?")
    passed(f"`{name}` gives the library's block output in evaluation mode and, with the same random numbers, in "
           "training mode (dropout in the right places), and the same gradient.")
    if used_library:
        library_notice(name, "Block", "try writing it from the block's parts")


def _as_block_function(forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
                       ) -> Callable[[Block, torch.Tensor, SequenceContext], torch.Tensor]:
    """``(block, x, ctx) -> x`` that runs the library's ``forward`` (saved before the check watched it)."""
    return lambda block, x, ctx: forward(x, ctx)[0]


# ----------------------------------------------------------------------------- exercise 6: the loss
CE_LIBRARY = "tutorial_lib.training.full_ce_loss"


def reference_valid_ce(hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """The library's full cross-entropy at valid positions (plain ``F.cross_entropy``, no chunks): a scalar."""
    from ...training import full_ce_loss

    return full_ce_loss(hidden, targets, items, chunk=None)


def _loss_case(rng: np.random.Generator, targets: list[list[int]], n_items: int, d: int, scale: float, label: str
               ) -> Case:
    t = torch.tensor(targets)
    hidden = torch.from_numpy(rng.normal(0.0, scale, size=(*t.shape, d)).astype(np.float32))
    items = torch.from_numpy(rng.normal(0.0, 1.0, size=(n_items + 1, d)).astype(np.float32))
    return Case((hidden, t, items), label=label)


def valid_ce_cases(seed: int = 0) -> list[Case]:
    """Hand-made left-padded targets first, then a row of padding only, then logits too large for a naive softmax."""
    rng = np.random.default_rng(seed)
    return [
        _loss_case(rng, [[0, 3, 1, 2]], 5, 3, 1.0, "1 sequence, 1 padding position, 5 items"),
        _loss_case(rng, [[0, 0, 4, 2, 6], [1, 5, 3, 6, 2]], 6, 4, 1.0,
                   "2 sequences; the largest item id (6) is a target"),
        _loss_case(rng, [[0, 0, 0, 0], [0, 0, 7, 1], [0, 2, 9, 4]], 9, 8, 1.0,
                   "a sequence with no target at all"),
        _loss_case(rng, [[0, 0, 12, 3, 8, 20], [4, 17, 9, 1, 6, 11]], 20, 8, 30.0,
                   "logits in the hundreds: exp() of them overflows float32"),
    ]


def _valid_ce_variants(hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor) -> dict[str, float]:
    """The values of typical mistakes, so that a wrong result can be recognised."""
    import torch.nn.functional as F

    valid = targets.ne(0)
    h, t = hidden[valid], targets[valid]
    all_logits = hidden.reshape(-1, hidden.shape[-1]) @ items.t()          # every position, padding item too
    out = {
        "padding_positions": F.cross_entropy(all_logits, targets.reshape(-1)),
        "padding_class": F.cross_entropy(h @ items.t(), t),
        "over_all_positions": F.cross_entropy(h @ items[1:].t(), t - 1, reduction="sum") / targets.numel(),
        "sum": F.cross_entropy(h @ items[1:].t(), t - 1, reduction="sum"),
    }
    per_position = torch.zeros(targets.shape)
    per_position[valid] = F.cross_entropy(h @ items[1:].t(), t - 1, reduction="none")
    counts = valid.sum(dim=1)
    if bool((counts > 0).all()):                                           # else it divides 0 by 0
        out["per_sequence_mean"] = (per_position.sum(dim=1) / counts).mean()
    if int(t.max()) < len(items) - 1:                                      # else it raises IndexError
        out["unshifted"] = F.cross_entropy(h @ items[1:].t(), t)
    return {k: float(v) for k, v in out.items()}


_VALID_CE_HINTS = {
    "padding_positions": "padding positions are in the mean, as if 'padding' (item 0) were the next item. Keep "
                         "only the positions with a target: mask = targets != 0, then hidden[mask], targets[mask]",
    "padding_class": "row 0 of items is the padding item, which is never a class: score items[1:] only, "
                     "which puts item t in column t - 1, so pass targets - 1 as the classes",
    "over_all_positions": "you divided by all B*L positions: the mean is over the positions that have a target "
                          "(reduction='mean' over the gathered rows does it)",
    "sum": "you summed the losses: the library (and the learning rate it is used with) takes the mean over the "
           "positions that have a target",
    "unshifted": "items[1:] puts item t in column t - 1, so the classes are targets - 1 (with targets as "
                 "they are, every position is scored against the next item's column)",
    "per_sequence_mean": "you averaged each sequence's mean: a sequence with more targets must weigh more. Take one "
                         "mean over all the valid positions of the batch",
}
_VALID_CE_RECIPE = ("keep the positions with targets != 0, score them against items[1:] (logits = h @ items[1:].T) and "
                    "take F.cross_entropy(logits, t - 1)")


def _diagnose_valid_ce(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    """The specific mistake behind a wrong loss, else the recipe."""
    try:
        arr = np.asarray(to_numpy(yours))
    except Exception:  # noqa: BLE001
        return _VALID_CE_RECIPE
    if arr.size != 1:
        return "return one number: the mean over the valid positions (a 0-dimensional tensor)"
    value = float(arr.reshape(-1)[0])
    if arr.ndim and math.isclose(value, float(expected), rel_tol=1e-4, abs_tol=1e-5):
        return "the value is right: return it as a 0-dimensional tensor (no keepdim; .squeeze() removes the axis)"
    if not math.isfinite(value) and math.isfinite(float(expected)):
        hidden, targets, items = case.args
        if float((hidden[targets.ne(0)] @ items[1:].t()).abs().max()) > 80:
            return ("your loss is not finite where the logits are large: exp() of a logit above ~88 is inf in "
                    "float32. Use F.cross_entropy (or torch.log_softmax), which subtracts each row's maximum first")
        return ("your loss is not finite although the logits are small: a padding position's loss of inf or NaN "
                "stays NaN when multiplied by 0 (inf * 0), and a sequence without targets divides 0 by 0. Select the "
                "valid positions first (hidden[mask]) instead of zeroing the others afterwards")
    for key, wrong in _valid_ce_variants(*case.args).items():
        if math.isclose(value, wrong, rel_tol=1e-4, abs_tol=1e-5):
            return _VALID_CE_HINTS[key]
    return _VALID_CE_RECIPE


def _gradient_gap(valid_ce: Callable[..., Any], case: Case) -> str | None:
    """``None`` when the learner's loss has the library's gradients for ``hidden`` and ``items``, else what is
    wrong."""
    mine = [a.clone().requires_grad_(a.is_floating_point()) for a in case.args]
    ref = [a.clone().requires_grad_(a.is_floating_point()) for a in case.args]
    try:
        loss = valid_ce(*mine)
    except RuntimeError as exc:     # .numpy() or an in-place change of a tensor that requires a gradient
        return (f"it raised RuntimeError when hidden and items require gradients ({str(exc).splitlines()[0]}). Build "
                "the loss from torch operations on hidden and items (no .numpy(), no in-place changes of them), or "
                "backward() cannot reach the model")
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        return ("your loss is not connected to the model: it must stay a tensor computed from hidden and items "
                "(no .item(), float(), .detach() or torch.no_grad()), or backward() cannot train anything")
    loss.backward()
    reference_valid_ce(*ref).backward()
    for name, a, b in (("hidden", mine[0], ref[0]), ("items", mine[2], ref[2])):
        if a.grad is None or not torch.allclose(a.grad, b.grad, atol=1e-5, rtol=1e-4):
            return f"your loss has the right value but not the library's gradient with respect to {name}"
    return None


@exercise_check
def check_valid_ce(valid_ce: Callable[..., Any]) -> None:
    """Check ``valid_ce(hidden, targets, items) -> loss`` against the library's ``full_ce_loss``: the value on
    every case, then the gradients."""
    cases = valid_ce_cases()
    try:
        n = check_function(valid_ce, reference_valid_ce, cases, library=CE_LIBRARY, output_names=None,
                           diagnose=_diagnose_valid_ce, quiet=True)
    except CheckFailed as exc:
        if "out of bounds" not in str(exc) or "-1" not in str(exc):
            raise
        fail(f"{exc}\nHint: targets - 1 turns the padding positions' target 0 into the class -1: keep only the "
             "positions with a target before shifting (hidden[mask], targets[mask] - 1), or pass ignore_index=-1")
    name = getattr(valid_ce, "__name__", "valid_ce")
    for case in cases:
        gap = _gradient_gap(valid_ce, case)
        expect(gap is None, f"`{name}` for {case.call_text(name)} ({case.label}): {gap}")
    passed(f"`{name}` matches the library's version ({CE_LIBRARY}) on {n} test cases, value and gradients "
           "(padding positions get no gradient).")


__all__ = ["check_attention", "check_causal_mask", "check_allowed_mask", "check_attention_in_heads",
           "prove_no_leakage", "compare_in_heads", "reference_attention", "reference_causal_mask",
           "reference_allowed_mask", "attention_cases", "allowed_cases", "check_valid_ce", "reference_valid_ce",
           "valid_ce_cases", "check_block", "make_check_block", "reference_block", "check_heads",
           "reference_split_heads", "reference_merge_heads", "split_cases", "merge_cases"]
