"""Checks of notebook 05 (local attention, Locker): the local window mask (causal and bidirectional), the
convolutional local encoder (one-sided on the causal backbone), and the Gaussian-initialised distance bias
added to the attention logits.

Every check compares the learner's function with the library's :mod:`tutorial_lib.attention.local` on
small deterministic cases and, for the causal versions, **proves** that nothing leaks from the future
(the outputs before a cut do not move when the inputs after it change).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...utils.seeding import forked_torch_rng
from .base import Case, call_learner, check_function, exercise_check, expect, expect_gradients, fail, passed, to_numpy

WINDOW_LIBRARY = "tutorial_lib.attention.local.local_window"
CONV_LIBRARY = "tutorial_lib.attention.local.LocalAttention (encoder='conv')"
BIAS_LIBRARY = "tutorial_lib.attention.local.LocalAttention (encoder='initial')"


# ----------------------------------------------------------------------------- exercise 1: window mask
def reference_window_mask(L: int, s: int, causal: bool) -> torch.Tensor:
    """``(L, L)`` bool: key ``j`` within ``s`` of query ``i`` (causal: ``0 <= i - j <= s``; else ``|i - j| <= s``)."""
    from ...attention.local import local_window

    return local_window(L, s, causal).clone()


def window_cases() -> list[Case]:
    """``(L, s, causal)``: a single position first, then five sizes, each causal and bidirectional."""
    cases = []
    for L, s in ((4, 1), (6, 2), (8, 3), (5, 4), (9, 1)):
        for causal in (True, False):
            kind = "causal" if causal else "bidirectional"
            cases.append(Case((L, s, causal), label=f"L = {L}, window s = {s}, {kind}"))
    cases.insert(0, Case((1, 1, True), label="a single position"))
    return cases


def _window_variants(L: int, s: int, causal: bool) -> dict[str, torch.Tensor]:
    idx = torch.arange(L)
    d = idx[:, None] - idx[None, :]                 # i - j
    eye = torch.eye(L, dtype=torch.bool)
    two_sided = d.abs() <= s
    one_sided = (d >= 0) & (d <= s)
    exact = one_sided if causal else two_sided
    return {
        "two_sided": two_sided,
        "forward": (d <= 0) & (d >= -s),
        "narrow": ((d >= 0) & (d < s)) if causal else (d.abs() < s),
        "wide": ((d >= 0) & (d <= s + 1)) if causal else (d.abs() <= s + 1),
        "no_diagonal": exact & ~eye,
        "inverted": ~exact,
        "full_causal": d >= 0,
        "half_width": ((d >= 0) & (d <= s // 2)) if causal else (d.abs() <= s // 2),
    }


_WINDOW_HINTS = {
    "two_sided": ("for causal=True your window is two-sided: query i also sees i+1 .. i+s, the future. On the causal "
                  "backbone position i is trained to predict the item at i+1, which is the INPUT at i+1: a model "
                  "with this mask learns to copy it. Keep only 0 <= i - j <= s"),
    "forward": ("your window looks forward (j >= i) instead of back: the mask is the transpose of the right one. "
                "Row i (the query) may see the columns j = i - s .. i"),
    "narrow": "off by one: 'within s' includes distance s itself, |i - j| <= s (s = 1 sees the neighbour)",
    "wide": "off by one: the window reaches distance s + 1; it must stop at |i - j| <= s",
    "no_diagonal": "the diagonal is missing: every position may look at itself (distance 0 is within the window)",
    "inverted": "the mask is inverted: True means 'may attend' (inside the window), as everywhere in the course",
    "full_causal": "you returned the plain causal mask: the window must also hide the keys more than s steps back",
    "half_width": "the window is too narrow: s is the reach on each allowed side, not the total width",
}


def _diagnose_window(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    try:
        m = torch.as_tensor(to_numpy(yours))
    except Exception:  # noqa: BLE001
        return None
    L, s, causal = case.args
    if m.shape != expected.shape:
        return None
    if m.dtype != torch.bool:
        return "return a bool tensor (True = may attend), e.g. (d >= 0) & (d <= s) for the causal window"
    for key, variant in _window_variants(L, s, causal).items():
        if key == "two_sided" and not causal:
            continue
        if torch.equal(m, variant):
            return _WINDOW_HINTS[key]
    return None


@exercise_check
def check_window_mask(window_mask: Callable[..., Any]) -> None:
    """Check ``window_mask(L, s, causal) -> (L, L) bool`` against the library's ``local_window``; for the
    causal windows, first make sure that no query can see a future key."""
    name = getattr(window_mask, "__name__", "window_mask")
    for L, s in ((5, 1), (7, 2), (9, 3)):
        m = call_learner(window_mask, Case((L, s, True)), name, WINDOW_LIBRARY)
        if m is None:
            fail(f"`{name}({L}, {s}, True)` returned None; did you forget the `return` statement?")
        m = torch.as_tensor(to_numpy(m))
        expect(tuple(m.shape) == (L, L), f"`{name}({L}, {s}, True)` must have shape ({L}, {L}), yours is "
                                         f"{tuple(m.shape)}")
        if m.dtype.is_floating_point and bool(torch.isinf(m).any()):
            fail(f"`{name}({L}, {s}, True)` returned an additive float mask (0 where a key may be seen, -inf where "
                 "it is hidden): this function returns the bool mask, True = may attend; the attention turns it into "
                 "-inf logits itself (masked_fill(~mask, -inf))")
        future = torch.triu(m.bool(), diagonal=1)
        if bool(future.any()):
            i, j = (int(x) for x in future.nonzero()[0])
            variants = _window_variants(L, s, True)
            known = [key for key in ("two_sided", "forward", "inverted") if torch.equal(m.bool(), variants[key])]
            hint = _WINDOW_HINTS[known[0]] if known else "row i of a causal window must be False at every column j > i"
            fail(f"`{name}({L}, {s}, causal=True)` leaks the future: query {i} may attend to key {j} > {i}.\n"
                 f"Hint: {hint}")
    passed("causal windows: no query can see a future key (L = 5, 7, 9; s = 1, 2, 3).")
    check_function(window_mask, reference_window_mask, window_cases(), name=name, library=WINDOW_LIBRARY,
                   diagnose=_diagnose_window,
                   hint="with d = i - j (queries in rows, keys in columns): causal (d >= 0) & (d <= s), "
                        "bidirectional d.abs() <= s")


# ----------------------------------------------------------------------------- exercise 2: conv encoder
def _reach(taps: int, causal: bool) -> int:
    """The window ``s`` of a kernel with ``taps`` taps: ``s + 1`` taps ending at ``i`` (causal) or ``2 s + 1`` centred
    on ``i`` (bidirectional)."""
    return taps - 1 if causal else (taps - 1) // 2


def reference_conv_encoder(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, causal: bool) -> torch.Tensor:
    """The library's convolutional local head: ``(B, L, d_h)`` values -> ``(B, L, d_h)``.

    ``weight`` is a ``Conv1d`` weight ``(d_h, d_h, taps)``: ``taps = s + 1`` rows ending at ``i`` (causal) or
    ``taps = 2 s + 1`` rows centred on ``i`` (bidirectional).
    """
    from ...attention.local import LocalAttention

    taps, dh = weight.shape[-1], weight.shape[0]
    s = _reach(taps, causal)
    L = v.shape[1]
    with forked_torch_rng():
        layer = LocalAttention(2 * dh, 2, 1, "conv", max_len=max(L, s + 1) + 1, window=s, causal=causal)
    with torch.no_grad():
        layer.convs[0].weight.copy_(weight)
        layer.convs[0].bias.copy_(bias)
        return layer._conv(v[:, None], None)[:, 0]


def _conv_formula(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, causal: bool) -> torch.Tensor:
    """:func:`reference_conv_encoder` written out, differentiable in ``v, weight, bias`` (the reference copies them
    into a layer): the gradients the learner's function must give."""
    import torch.nn.functional as F

    taps = weight.shape[-1]
    s = _reach(taps, causal)
    x = F.pad(v.transpose(1, 2), (s, 0) if causal else (s, s))
    return torch.relu(F.conv1d(x, weight, bias)).transpose(1, 2)


def _conv_inputs(rng: np.random.Generator, B: int, L: int, dh: int, taps: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``v`` ``(B, L, dh)``, Conv1d ``weight`` ``(dh, dh, taps)`` and ``bias`` ``(dh,)``."""
    def t(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.from_numpy(rng.normal(0.0, scale, size=shape).astype(np.float32))
    return t(B, L, dh), t(dh, dh, taps, scale=0.5), t(dh, scale=0.3)


def conv_cases(seed: int = 0) -> list[Case]:
    """``(v, weight, bias, causal)``: one channel, causal, first; then more taps, bidirectional, random sizes."""
    rng = np.random.default_rng(seed)
    cases = [Case((*_conv_inputs(rng, 1, 4, 1, 2), True), label="1 sequence, d_h = 1, s = 1 (2 taps), causal")]
    cases.append(Case((*_conv_inputs(rng, 1, 5, 2, 3), True), label="s = 2 (3 taps), causal"))
    cases.append(Case((*_conv_inputs(rng, 2, 6, 4, 3), False), label="s = 1 (3 centred taps), bidirectional"))
    for _ in range(3):
        causal = bool(rng.integers(0, 2))
        s = int(rng.integers(1, 4))
        taps = s + 1 if causal else 2 * s + 1
        B, L, dh = int(rng.integers(1, 4)), int(rng.integers(taps, 12)), int(rng.integers(2, 9))
        kind = "causal" if causal else "bidirectional"
        cases.append(Case((*_conv_inputs(rng, B, L, dh, taps), causal), label=f"random sizes, s = {s}, {kind}"))
    return cases


def _conv_variants(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, causal: bool) -> dict[str, torch.Tensor]:
    """Typical mistakes, computed, so that a wrong result can be recognised: each ``(B, L, d_h)``."""
    taps = weight.shape[-1]
    x = v.transpose(1, 2)
    s = _reach(taps, causal)
    pad = (s, 0) if causal else (s, s)
    out = {
        "no_relu": F.conv1d(F.pad(x, pad), weight, bias).transpose(1, 2),
        "flipped": torch.relu(F.conv1d(F.pad(x, pad), weight.flip(-1), bias)).transpose(1, 2),
        "no_bias": torch.relu(F.conv1d(F.pad(x, pad), weight)).transpose(1, 2),
    }
    if causal:
        out["right_pad"] = torch.relu(F.conv1d(F.pad(x, (0, s)), weight, bias)).transpose(1, 2)
        out["centred"] = torch.relu(F.conv1d(F.pad(x, (s // 2, s - s // 2)), weight, bias)).transpose(1, 2)
    else:
        out["left_only"] = torch.relu(F.conv1d(F.pad(x, (2 * s, 0)), weight, bias)).transpose(1, 2)
    return out


_CONV_HINTS = {
    "no_relu": "the activation is missing: Eq. 4 applies act = ReLU to the convolution's output",
    "flipped": ("your kernel is flipped: F.conv1d (and nn.Conv1d) is a cross-correlation, kernel tap 0 multiplies "
                "the OLDEST row of the window (i - s) and the last tap the row i itself. Do not flip the weight"),
    "no_bias": "the bias is missing: pass `bias` to F.conv1d",
    "right_pad": ("you padded on the right: the output at i then reads the rows i .. i + s, the future. On the causal "
                  "backbone pad s zeros on the LEFT, F.pad(x, (s, 0)), so the output at i reads i - s .. i"),
    "centred": ("your causal convolution is centred ('same' padding on both sides): the output at i reads rows after "
                "i, the future. Pad all s zeros on the left, F.pad(x, (s, 0))"),
    "left_only": ("for causal=False pad s zeros on EACH side, F.pad(x, (s, s)) with taps = 2s + 1, so the output at i "
                  "reads i - s .. i + s: padded with 2s on the left, it reads i - 2s .. i"),
}


def _diagnose_conv(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    try:
        out = to_numpy(yours)
    except Exception:  # noqa: BLE001
        return None
    v, weight, bias, causal = case.args
    L, taps = v.shape[1], weight.shape[-1]
    if out.ndim == 3 and out.shape[0] == v.shape[0] and out.shape[2] == v.shape[2] and out.shape[1] != L:
        return (f"the output has {out.shape[1]} rows instead of L = {L}: a convolution without padding shrinks the "
                f"sequence by taps - 1 = {taps - 1}. Pad {'s zeros on the left' if causal else 's zeros on each side'}")
    if out.ndim == 3 and out.shape == (v.shape[0], v.shape[2], L) and v.shape[2] != L:
        return "transpose back: F.conv1d works on (B, channels, L); return (B, L, d_h)"
    for key, variant in _conv_variants(v, weight, bias, causal).items():
        if out.shape == tuple(variant.shape) and np.allclose(out, variant.numpy(), atol=1e-5):
            return _CONV_HINTS[key]
    return None


def conv_leak(conv_encoder: Callable[..., Any], L: int = 7, dh: int = 3, s: int = 2, seed: int = 0
              ) -> tuple[int, int] | None:
    """``None`` if the causal ``conv_encoder`` never lets the future in; else the first ``(t, j)`` such that
    the output at ``t`` changed when the values at positions ``>= j > t`` changed."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(1, L, dh, generator=gen, dtype=torch.float64)
    weight = torch.randn(dh, dh, s + 1, generator=gen, dtype=torch.float64)
    bias = torch.randn(dh, generator=gen, dtype=torch.float64) * 0.1 + 1.0  # mostly positive: ReLU rarely hides a leak
    base = torch.as_tensor(conv_encoder(v.clone(), weight, bias, True))
    if base.dim() != 3 or base.shape[1] != L:
        return None  # a wrong shape is explained by the comparison with the library
    for j in range(1, L):
        v2 = v.clone()
        v2[:, j:] = torch.randn(1, L - j, dh, generator=gen, dtype=torch.float64)
        out = torch.as_tensor(conv_encoder(v2, weight, bias, True))
        if out.shape != base.shape:
            return None  # the shape is explained by the comparison with the library
        changed = (out[0, :j] - base[0, :j]).abs().amax(dim=-1) > 1e-9
        if bool(changed.any()):
            return int(changed.nonzero()[0, 0]), j
    return None


@exercise_check
def check_conv_encoder(conv_encoder: Callable[..., Any]) -> None:
    """Prove that the learner's causal ``conv_encoder(v, weight, bias, causal=True)`` does not read the future,
    then compare it with the library's convolutional local head (causal and bidirectional)."""
    name = getattr(conv_encoder, "__name__", "conv_encoder")
    call_learner(conv_encoder, conv_cases()[0], name, CONV_LIBRARY)   # ExerciseNotDone / errors, explained
    try:
        leak = conv_leak(conv_encoder)
    except Exception:  # noqa: BLE001 - e.g. a dtype problem: the comparison below explains it
        leak = None
    if leak is not None:
        t, j = leak
        fail(f"your causal `{name}` leaks the future: when the values at positions >= {j} change, the output at "
             f"position {t} changes too, although {t} < {j}.\nOn the causal (SASRec) backbone position t predicts the "
             "item at t + 1, which is the input at t + 1: a convolution that reads it lets the model copy the answer. "
             "Hint: a one-sided convolution pads s = taps - 1 zeros on the LEFT only, F.pad(x, (s, 0)), so the output "
             "at i reads the rows i - s .. i (centred 'same' padding is for the bidirectional backbone). If you "
             "padded on the left already, check how you moved the channels first: v.reshape(B, d_h, L) mixes "
             "positions and channels, v.transpose(1, 2) does not")
    passed(f"your causal `{name}` never reads the future (the outputs before every cut stay the same when the "
           "values after it change).")
    check_function(conv_encoder, reference_conv_encoder, conv_cases(), name=name, library=CONV_LIBRARY,
                   diagnose=_diagnose_conv,
                   hint="x = v.transpose(1, 2); pad (s, 0) if causal (taps = s + 1) else (s, s) (taps = 2s + 1); "
                        "relu(F.conv1d(F.pad(x, pad), weight, bias)).transpose(1, 2)")
    expect_gradients(conv_encoder, _conv_formula, conv_cases()[1], wrt=(0, 1, 2), name=name)


# ----------------------------------------------------------------------------- exercise 3: distance bias
def reference_gaussian_bias(L: int, a: float = 1.0, b: float = 0.5) -> torch.Tensor:
    """``(L, L)`` float, entry ``[i, j] = p_{i-j} = a exp(-(i - j)^2 / b)``: the initial distance bias of the
    library's ``initial`` encoder, read from ``LocalAttention.distance_bias``."""
    from ...attention.local import LocalAttention

    n = max(L, 2)
    with forked_torch_rng():
        layer = LocalAttention(4, 2, 1, "initial", max_len=n, window=1, position_table=torch.nn.Embedding(n, 4),
                               gauss_a=a, gauss_b=b)
    with torch.no_grad():
        return layer.distance_bias[0, layer._distance_index(L, torch.device("cpu"))].clone()


def reference_biased_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                               allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d_h) + bias)`` over the allowed keys, times ``v``: Eq. 5 with ``ln σ_ij = p_{i-j}``."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
    w = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    return w @ v, w


def gaussian_cases() -> list[Case]:
    """``(L, a, b)`` of the distance bias: L = 1 first, then the defaults, then other heights and widths."""
    # L = 1 with a = 2: a missing diagonal (0) and a logarithm (ln 2) then give different wrong values
    return [Case((1, 2.0, 0.5), label="L = 1, a = 2"), Case((4,), label="L = 4, a = 1, b = 0.5 (the defaults)"),
            Case((6, 2.0, 0.5), label="a = 2"), Case((7, 1.0, 4.0), label="b = 4: a wider bump"),
            Case((9, 0.5, 2.0), label="a = 0.5, b = 2")]


def _gaussian_variants(L: int, a: float = 1.0, b: float = 0.5) -> dict[str, torch.Tensor]:
    idx = torch.arange(L, dtype=torch.float32)
    d = idx[:, None] - idx[None, :]
    return {
        "two_sigma": a * torch.exp(-d ** 2 / (2 * b)),
        "abs": a * torch.exp(-d.abs() / b),
        "times_b": a * torch.exp(-d ** 2 * b),
        "no_a": torch.exp(-d ** 2 / b),
        "positive": a * torch.exp(d ** 2 / b),
        "no_diagonal": a * torch.exp(-d ** 2 / b) * (1 - torch.eye(L)),
        "log": -(d ** 2) / b + math.log(a) if a > 0 else d,
        "off_by_one": a * torch.exp(-(d + 1) ** 2 / b),
        "off_by_one_minus": a * torch.exp(-(d - 1) ** 2 / b),
        "no_exp": a * (-(d ** 2) / b),
        "b_squared": a * torch.exp(-d ** 2 / b ** 2),
    }


_GAUSSIAN_HINTS = {
    "two_sigma": "you used the normal density's exp(-Δ²/(2b)); the paper's bump is a·exp(-Δ²/b), no factor 2",
    "abs": "you used |Δ| instead of Δ²: p_Δ = a·exp(-Δ²/b)",
    "times_b": "b divides: p_Δ = a·exp(-Δ² / b), not a·exp(-Δ²·b)",
    "no_a": "the height a is missing: p_Δ = a·exp(-Δ²/b)",
    "positive": "the sign in the exponent is missing: exp(-Δ²/b) decays with the distance",
    "no_diagonal": ("the diagonal (Δ = 0: each position and itself) is 0: p_0 = a·exp(0) = a is the peak of "
                    "the bump; does a loop over the distances start at 1?"),
    "log": "you returned the logarithm of the bump: p_Δ itself is a·exp(-Δ²/b) (it is already the ln σ of Eq. 5)",
    "off_by_one": ("the peak is one step off (at j = i + 1): the released code does this (docs/methods.md §5.1), the "
                   "paper centres the bump at distance 0, Δ = i - j"),
    "off_by_one_minus": "the peak is one step off (at j = i - 1): centre the bump at distance 0, Δ = i - j",
    "no_exp": "the exponential is missing: p_Δ = a·exp(-Δ²/b)",
    "b_squared": "b divides Δ² once: p_Δ = a·exp(-Δ²/b), not a·exp(-Δ²/b²) (b is a width squared already)",
}


def _diagnose_gaussian(case: Case, yours: Any, expected: torch.Tensor) -> str | None:
    try:
        m = torch.as_tensor(to_numpy(yours)).float()
    except Exception:  # noqa: BLE001
        return None
    if m.shape != expected.shape:
        return None
    for key, variant in _gaussian_variants(*case.args).items():
        if torch.allclose(m, variant, atol=1e-5):
            return _GAUSSIAN_HINTS[key]
    return None


def _qkv_bias(rng: np.random.Generator, B: int, H: int, L: int, dh: int, scale: float = 1.0
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``q, k, v`` ``(B, H, L, dh)`` and a random ``(L, L)`` bias."""
    def t(*shape: int, s: float = scale) -> torch.Tensor:
        return torch.from_numpy(rng.normal(0.0, s, size=shape).astype(np.float32))
    return t(B, H, L, dh), t(B, H, L, dh), t(B, H, L, dh), t(L, L, s=1.5)


def _allowed(L: int, ids: torch.Tensor | None = None, causal: bool = True) -> torch.Tensor:
    """``(B, 1, L, L)`` the library's mask for ``ids`` (default: one row of ``L`` real items)."""
    from ...attention import SequenceContext

    ids = torch.ones(1, L, dtype=torch.long) if ids is None else ids
    return SequenceContext.from_item_ids(ids, causal=causal).allowed().clone()


def biased_attention_cases(seed: int = 0) -> list[Case]:
    """A Gaussian bias first, then random (non-symmetric) biases, causal and bidirectional masks with padding."""
    rng = np.random.default_rng(seed)
    q, k, v, _ = _qkv_bias(rng, 1, 1, 4, 2)
    cases = [Case((q, k, v, reference_gaussian_bias(4), _allowed(4)), label="the Gaussian bias, causal mask")]
    q, k, v, bias = _qkv_bias(rng, 1, 1, 5, 4)
    cases.append(Case((q, k, v, bias, _allowed(5)), label="a random bias (p_{i-j} after training), causal"))
    q, k, v, bias = _qkv_bias(rng, 2, 2, 6, 4, scale=2.0)
    ids = torch.tensor([[0, 0, 3, 7, 2, 9], [4, 1, 8, 6, 5, 2]])
    cases.append(Case((q, k, v, bias, _allowed(6, ids)), label="2 sequences with padding, 2 heads, large logits"))
    q, k, v, bias = _qkv_bias(rng, 2, 1, 5, 8)
    cases.append(Case((q, k, v, bias, _allowed(5, causal=False)), label="bidirectional mask"))
    return cases


def _weights_times_v(w: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w @ v, w)`` with NaN weights (a column with no visible query) set to 0."""
    w = torch.nan_to_num(w)
    return w @ v, w


def _biased_variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, allowed: torch.Tensor
                     ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Typical mistakes, computed, so that a wrong result can be recognised: ``(output, weights)`` each."""
    raw = q @ k.transpose(-2, -1)
    logits = raw / math.sqrt(q.shape[-1])

    def finish(x: torch.Tensor, mask: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.softmax(x.masked_fill(~allowed, float("-inf")) if mask else x, dim=-1)
        return w @ v, w

    after = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1) + bias
    after = after.masked_fill(~allowed, 0.0)
    return {
        "multiplicative": finish(logits * bias),
        "compat_gate": finish(logits * torch.sigmoid(bias / 0.1)),
        "log_bias": finish(logits + torch.log(bias.clamp_min(1e-30))),
        "times_exp": finish(logits * torch.exp(bias)),
        "no_bias": finish(logits),
        "no_scale": finish(raw + bias),
        "scale_all": finish((raw + bias) / math.sqrt(q.shape[-1])),
        "transposed": finish(logits + bias.transpose(-2, -1)),
        "no_mask": finish(logits + bias, mask=False),
        "fill_zero": finish((logits + bias).masked_fill(~allowed, 0.0), mask=False),
        "inverted": finish((logits + bias).masked_fill(allowed, float("-inf")), mask=False),
        "after_softmax": (after @ v, after),
        "query_axis": _weights_times_v(torch.softmax((logits + bias).masked_fill(~allowed, float("-inf")), dim=-2), v),
        "unnormalised": _weights_times_v(torch.exp(logits + bias).masked_fill(~allowed, 0.0), v),
        "bias_lower_only": finish(logits + bias.tril()),
    }


_BIASED_HINTS = {
    "multiplicative": ("you multiplied the logits by the bias. Eq. 5 multiplies exp(w_ij) by σ_ij, i.e. ADDS "
                       "p_{i-j} = ln σ_ij to the logit: softmax(w + p). Multiplying a negative logit by a "
                       "small factor RAISES it, so a multiplicative gate is no locality prior"),
    "compat_gate": ("this is the released code's multiplicative gate logits·sigmoid(p/0.1) (docs/methods.md "
                    "§5.1), not the paper's Eq. 5: add the bias to the logits, softmax(q k^T / sqrt(d_h) + p)"),
    "log_bias": ("you added ln(bias), or multiplied exp(logits) by the bias, which is the same: the bias IS already "
                 "the log-mask p_{i-j} = ln σ_ij of Eq. 5, add it to the logits as it is (and a bias can be negative "
                 "after training)"),
    "times_exp": "exp(w)·σ = exp(w + p): add p to the logits (before the softmax), do not multiply",
    "no_bias": "the bias is not used: add it to the scaled logits before masking and the softmax",
    "no_scale": "the dot products are not scaled: logits = q k^T / sqrt(d_h), then add the bias",
    "scale_all": "only q k^T is divided by sqrt(d_h); the bias is added after the scaling, unscaled",
    "transposed": "the bias is transposed: bias[i, j] belongs to query i (row) and key j (column); add it as given",
    "no_mask": "the mask is not applied: hide the keys where `allowed` is False (set to -inf) before the softmax",
    "fill_zero": "hidden keys were set to 0 instead of -inf: exp(0) = 1, so they still get weight. Fill them with "
                 "-inf before the softmax",
    "inverted": "the mask is inverted: `allowed` is True where a key may be SEEN; hide the others, "
                "masked_fill(~allowed, -inf)",
    "after_softmax": "the bias goes INTO the softmax (added to the logits), not onto the weights after it",
    "query_axis": "the softmax runs over the queries (dim=-2): each query (row) distributes its weight over the "
                  "keys, so every row of the weights sums to 1: softmax(..., dim=-1)",
    "unnormalised": "the weights are exp(logits) without the normalisation: each row (one query) must sum to 1 "
                    "over its visible keys, softmax(..., dim=-1)",
    "bias_lower_only": "add the whole bias: the MASK hides the future (and the keys outside `allowed`), the bias "
                       "only shapes the weights of the visible keys (it is symmetric in the distance)",
}


def _diagnose_biased(case: Case, yours: Any, expected: tuple[torch.Tensor, torch.Tensor]) -> str | None:
    if not isinstance(yours, (tuple, list)) or len(yours) != 2:
        return "return a pair (output, weights): output (B, H, L, d_h), weights (B, H, L, L)"
    try:
        out, w = to_numpy(yours[0]), to_numpy(yours[1])
    except Exception:  # noqa: BLE001
        return None
    for key, (v_out, v_w) in _biased_variants(*case.args).items():
        if w.shape == tuple(v_w.shape) and np.allclose(np.nan_to_num(w), np.nan_to_num(v_w.numpy()), atol=1e-5) \
                and out.shape == tuple(v_out.shape) and np.allclose(np.nan_to_num(out), np.nan_to_num(v_out.numpy()),
                                                                    atol=1e-5):
            return _BIASED_HINTS[key]
    return None


def local_head_difference(gaussian_bias: Callable[..., Any], biased_attention: Callable[..., Any], L: int = 7,
                          seed: int = 0) -> dict[str, float]:
    """Run the learner's two functions as the local head of a library ``LocalAttention(encoder='initial')`` at
    initialisation (causal, with padding) and return the largest differences from the library's local head."""
    from ...attention import SequenceContext, split_heads
    from ...attention.local import LocalAttention

    with forked_torch_rng(seed):
        layer = LocalAttention(16, 2, 1, "initial", max_len=L, window=1,
                               position_table=torch.nn.Embedding(L, 16)).eval()
    x = torch.randn(2, L, 16, generator=torch.Generator().manual_seed(seed))
    ids = torch.tensor([[0, 0, 5, 2, 8, 1, 3], [4, 9, 3, 6, 2, 7, 5]])[:, -L:]
    ctx = SequenceContext.from_item_ids(ids, causal=True, max_len=L, need_weights=True)
    with torch.no_grad():
        q, k, v = (split_heads(t, 2) for t in layer.in_proj(x).chunk(3, dim=-1))
        q, k = layer._add_positions(q, k, ctx)
        v = v * ctx.valid_mask[:, None, :, None]
        lib_out, lib_w = layer._local(q[:, :1], k[:, :1], v[:, :1], ctx)
        bias = torch.as_tensor(gaussian_bias(L)).float()
        out, w = biased_attention(q[:, :1], k[:, :1], v[:, :1], bias, ctx.allowed())
    valid = ctx.valid_mask
    return {"output": float((torch.as_tensor(out) - lib_out)[:, 0][valid].abs().max()),
            "weights": float((torch.as_tensor(w) - lib_w)[:, 0][valid].abs().max())}


@exercise_check
def check_distance_bias(gaussian_bias: Callable[..., Any], biased_attention: Callable[..., Any],
                        tol: float = 1e-5) -> None:
    """Check ``gaussian_bias(L, a=1.0, b=0.5) -> (L, L)`` and ``biased_attention(q, k, v, bias, allowed) ->
    (output, weights)``, then run both as the local head of the library's ``initial`` encoder."""
    g_name = getattr(gaussian_bias, "__name__", "gaussian_bias")
    a_name = getattr(biased_attention, "__name__", "biased_attention")
    check_function(gaussian_bias, reference_gaussian_bias, gaussian_cases(), name=g_name, library=BIAS_LIBRARY,
                   diagnose=_diagnose_gaussian,
                   hint="d = i - j for rows i and columns j (e.g. idx[:, None] - idx[None, :]); a * exp(-d**2 / b)")
    check_function(biased_attention, reference_biased_attention, biased_attention_cases(), name=a_name,
                   library=BIAS_LIBRARY, output_names=("output", "weights"), diagnose=_diagnose_biased,
                   hint="weights = softmax(q @ k^T / sqrt(d_h) + bias) with the logits of hidden keys set to -inf; "
                        "output = weights @ v")
    expect_gradients(biased_attention, reference_biased_attention, biased_attention_cases()[2], wrt=(0, 1, 2, 3),
                     name=a_name, output=lambda result: result[0])
    try:
        diffs = local_head_difference(gaussian_bias, biased_attention)
    except Exception as exc:  # noqa: BLE001
        fail(f"running your functions as the local head of Locker+Initial raised {type(exc).__name__}: {exc}")
    bad = {key: val for key, val in diffs.items() if not val <= tol}
    expect(not bad, f"as the local head of Locker+Initial, your functions differ from the library by more than "
                    f"{tol:g}: {bad}")
    passed(f"your `{g_name}` + `{a_name}`, run as the local head of LocalAttention(encoder='initial') at its Gaussian "
           f"initialisation, give the library's outputs and weights (max differences {diffs['output']:.1e}, "
           f"{diffs['weights']:.1e}).")


__all__ = ["check_window_mask", "check_conv_encoder", "check_distance_bias", "reference_window_mask",
           "reference_conv_encoder", "reference_gaussian_bias", "reference_biased_attention", "conv_leak",
           "local_head_difference", "window_cases", "conv_cases", "gaussian_cases", "biased_attention_cases"]
