"""Checks of notebook 03: the references pass, stubs say 'not done', typical mistakes get their hint."""
from __future__ import annotations

import math
import re

import pytest
import torch

from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch03


# ----------------------------------------------------------------------------- exercise 1
def aggregation(x, logits, valid):
    """Prefix softmax over the real items j <= t, written with a (B, t, j, k) mask."""
    L = x.shape[1]
    allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, :, :, None] & valid[:, None, :, None]
    weights = torch.softmax(logits[:, None].masked_fill(~allowed, float("-inf")), dim=2)
    return torch.einsum("btjk,bjd->btkd", torch.nan_to_num(weights), x)


def aggregation_prefix_sums(x, logits, valid):
    """The same with prefix sums (the library's formulation)."""
    e = torch.exp(logits) * valid[..., None]
    numerator = torch.cumsum(e[..., None] * x[:, :, None, :], dim=1)
    return numerator / torch.cumsum(e, dim=1)[..., None].clamp_min(1e-30)


def _masked_softmax_aggregation(x, logits, valid, diagonal=0, dim=2, nan_to_num=True):
    L = x.shape[1]
    allowed = torch.ones(L, L, dtype=torch.bool).tril(diagonal)[None, :, :, None] & valid[:, None, :, None]
    weights = torch.softmax(logits[:, None].masked_fill(~allowed, float("-inf")), dim=dim)
    return torch.einsum("btjk,bjd->btkd", torch.nan_to_num(weights) if nan_to_num else weights, x)


# ----------------------------------------------------------------------------- exercise 2
def position_attention(p, u_q, u_k, v, valid, scale=True, split="right", causal=True, padding=True, dim=-1,
                       eye=True):
    B, H, L, dh = v.shape
    if split == "right":
        q, k = (u(p).view(L, H, dh).transpose(0, 1) for u in (u_q, u_k))
    else:
        q, k = (u(p).view(H, L, dh) for u in (u_q, u_k))
    logits = q @ k.transpose(-2, -1) / (math.sqrt(dh) if scale else 1.0)
    allowed = torch.ones(B, 1, L, L, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(L, L, dtype=torch.bool).tril()
    if padding:
        allowed = allowed & valid[:, None, None, :]
    if eye:
        allowed = allowed | torch.eye(L, dtype=torch.bool)
    return torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=dim) @ v


def stub(*args):
    raise NotImplementedError()


# ----------------------------------------------------------------------------- tests
def test_references_pass(capsys):
    ch03.check_causal_interest_aggregation(aggregation)
    ch03.check_causal_interest_aggregation(aggregation_prefix_sums)
    ch03.check_aggregation_in_layer(aggregation)
    ch03.check_position_attention(position_attention)
    ch03.check_position_attention_in_layer(position_attention)
    out = capsys.readouterr().out
    assert out.count("✅") == 11 and "no future leakage" in out and "padding ignored" in out
    assert "calls the library's" not in out


def test_library_functions_pass_their_own_checks(capsys):
    from tutorial_lib.attention.low_rank import causal_interest_aggregation

    ch03.check_causal_interest_aggregation(lambda x, logits, valid: causal_interest_aggregation(x, logits, valid)[0])
    notice = "calls the library's tutorial_lib.attention.low_rank.causal_interest_aggregation itself"
    assert notice in capsys.readouterr().out
    ch03.check_position_attention(ch03.reference_position_attention)


library_aggregation = None   # set by the test below: a module-level name, as the notebook's import makes one


def test_an_answer_through_a_global_name_of_the_library_function_is_noticed(capsys, monkeypatch):
    from tutorial_lib.attention.low_rank import causal_interest_aggregation

    monkeypatch.setitem(globals(), "library_aggregation", causal_interest_aggregation)

    def answer(x, logits, valid):
        return library_aggregation(x, logits, valid)[0]

    ch03.check_causal_interest_aggregation(answer)
    assert "ℹ `answer` calls the library's" in capsys.readouterr().out


def test_nan_free_position_attention_without_the_diagonal_passes_when_the_weights_are_cleaned():
    """Zeros at padding queries (the library's choice) are as good as letting them see themselves, when the NaN
    weights are replaced before they multiply v; replaced only in the output, the NaN still reaches v's gradient."""
    def zero_weights(p, u_q, u_k, v, valid):
        L, H = valid.shape[1], v.shape[1]
        logits = ch03.position_logits(p, u_q, u_k, H)
        allowed = valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()
        return torch.nan_to_num(torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)) @ v

    def zeros_at_padding(p, u_q, u_k, v, valid):
        return torch.nan_to_num(position_attention(p, u_q, u_k, v, valid, eye=False))

    ch03.check_position_attention(zero_weights)
    with pytest.raises(CheckFailed, match="the gradient of `v` has NaN"):
        ch03.check_position_attention(zeros_at_padding)


@pytest.mark.parametrize("exercise", ["aggregation", "position"])
def test_a_function_without_gradients_is_caught(exercise):
    """The right numbers through NumPy or torch.no_grad() pass every value check but would not train."""
    if exercise == "aggregation":
        def no_grad(x, logits, valid):
            with torch.no_grad():
                return ch03.reference_aggregation(x, logits, valid)
        check = ch03.check_causal_interest_aggregation
    else:
        def no_grad(p, u_q, u_k, v, valid):
            with torch.no_grad():
                return ch03.reference_position_attention(p, u_q, u_k, v, valid)
        check = ch03.check_position_attention
    with pytest.raises(CheckFailed, match="no gradient flows"):
        check(no_grad)


def test_a_finite_fill_is_not_a_leak_at_padding_positions(capsys):
    """With -1e9 instead of -inf and no diagonal, a padding query sees every key uniformly, the future ones
    included; that row is never read, so the leak test must not blame it (it did, at position 0)."""
    def position_big_negative(p, u_q, u_k, v, valid):
        B, H, L, dh = v.shape
        q, k = (u(p).view(L, H, dh).transpose(0, 1) for u in (u_q, u_k))
        allowed = torch.ones(L, L, dtype=torch.bool).tril() & valid[:, None, None, :]
        logits = (q @ k.transpose(-2, -1) / math.sqrt(dh)).masked_fill(~allowed, -1e9)
        return torch.softmax(logits, dim=-1) @ v

    def aggregation_big_negative(x, logits, valid):
        L = x.shape[1]
        allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, :, :, None] & valid[:, None, :, None]
        weights = torch.softmax(logits[:, None].masked_fill(~allowed, -1e9), dim=2)
        return torch.einsum("btjk,bjd->btkd", weights, x)

    ch03.check_position_attention(position_big_negative)
    ch03.check_causal_interest_aggregation(aggregation_big_negative)
    assert "leaks" not in capsys.readouterr().out


@pytest.mark.parametrize("check", [ch03.check_causal_interest_aggregation, ch03.check_aggregation_in_layer,
                                   ch03.check_position_attention, ch03.check_position_attention_in_layer])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


def test_the_papers_aggregation_is_explained():
    def paper(x, logits, valid):          # one (k, d) set of interests for the whole sequence
        weights = torch.softmax(logits.masked_fill(~valid[..., None], float("-inf")), dim=1)
        return torch.einsum("bjk,bjd->bkd", weights, x)

    with pytest.raises(CheckFailed, match=r"\(B, k, d\).*Eq\. 2"):
        ch03.check_causal_interest_aggregation(paper)
    with pytest.raises(CheckFailed, match="(?s)leaks from the future.*copy the answer"):
        ch03.check_causal_interest_aggregation(
            lambda x, logits, valid: paper(x, logits, valid)[:, None].expand(-1, x.shape[1], -1, -1))


@pytest.mark.parametrize("mistake, message", [
    (lambda x, logits, valid: aggregation(x, logits, torch.ones_like(valid)), "padding is not ignored"),
    (lambda x, logits, valid: _masked_softmax_aggregation(x, logits, valid, dim=-1), "over the interests"),
    (lambda x, logits, valid: _masked_softmax_aggregation(x, logits, valid, diagonal=-1), "include itself"),
    (lambda x, logits, valid: _masked_softmax_aggregation(x, logits, valid, nan_to_num=False), "NaN"),
    (lambda x, logits, valid: torch.cumsum((torch.exp(logits) * valid[..., None])[..., None] * x[:, :, None], dim=1),
     "without the normalisation"),
])
def test_aggregation_mistakes_get_their_hint(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        ch03.check_causal_interest_aggregation(mistake)


def test_a_wrong_aggregation_fails_inside_the_layer():
    with pytest.raises(CheckFailed, match="differs from the library's layer"):
        ch03.check_aggregation_in_layer(lambda x, logits, valid: _masked_softmax_aggregation(x, logits, valid,
                                                                                              diagonal=-1))


def test_nan_at_padding_positions_fails_inside_the_layer_too():
    """The in-layer checks compare real positions only; NaN at a padding position still fails them."""
    with pytest.raises(CheckFailed, match="NaN or infinite outputs"):
        ch03.check_aggregation_in_layer(lambda x, logits, valid: _masked_softmax_aggregation(x, logits, valid,
                                                                                              nan_to_num=False))
    with pytest.raises(CheckFailed, match="NaN or infinite outputs"):
        ch03.check_position_attention_in_layer(lambda *args: position_attention(*args, eye=False))


def test_a_mask_broadcast_against_the_wrong_axes_is_explained():
    def unbroadcast_mask(x, logits, valid):      # valid (B, L) times logits (B, L, k): lined up with (L, k)
        e = torch.exp(logits) * valid
        return torch.cumsum(e[..., None] * x[:, :, None, :], dim=1) / torch.cumsum(e, dim=1)[..., None]

    with pytest.raises(CheckFailed, match=r"valid\[\.\.\., None\]"):
        ch03.check_causal_interest_aggregation(unbroadcast_mask)


@pytest.mark.parametrize("options, message", [
    (dict(scale=False), "not scaled"),
    (dict(split="wrong"), "wrong layout"),
    (dict(causal=False), "leaks from the future"),
    (dict(padding=False), "padding KEYS"),
    (dict(dim=-2), "over the queries"),
    (dict(eye=False), "NaN"),
])
def test_position_attention_mistakes_get_their_hint(options, message):
    with pytest.raises(CheckFailed, match=message):
        ch03.check_position_attention(lambda *args: position_attention(*args, **options))


def test_position_attention_returning_weights_is_explained():
    def weights_only(p, u_q, u_k, v, valid):
        B, H, L, dh = v.shape
        return torch.zeros(B, H, L, L)

    with pytest.raises(CheckFailed, match="weights @ v"):
        ch03.check_position_attention(weights_only)


def test_in_layer_comparison_reports_the_soft_cap():
    diffs = ch03.compare_position_attention_in_layer(position_attention)
    assert diffs["yours vs Eq. 4"] < 1e-5
    assert diffs["soft cap"] == pytest.approx(diffs["yours vs the module"], abs=1e-5)
    wrong = ch03.compare_position_attention_in_layer(lambda *a: position_attention(*a, scale=False))
    assert wrong["yours vs Eq. 4"] > 1e-3
    with pytest.raises(CheckFailed, match="differs from Eq. 4"):
        ch03.check_position_attention_in_layer(lambda *a: position_attention(*a, scale=False))


def test_checks_are_deterministic_and_leave_the_rng_alone():
    state = torch.get_rng_state()
    first = ch03.compare_aggregation_in_layer(aggregation)
    assert torch.equal(state, torch.get_rng_state())
    assert ch03.compare_aggregation_in_layer(aggregation) == first


def test_position_checks_are_deterministic_and_leave_the_rng_alone():
    state = torch.get_rng_state()
    first = ch03.compare_position_attention_in_layer(position_attention)
    ch03.check_position_attention(position_attention)
    assert torch.equal(state, torch.get_rng_state())
    assert ch03.compare_position_attention_in_layer(position_attention) == first


def _position_weights(p, u_q, u_k, v, valid, diagonal=0, scale=None, mask="before", multiply=False):
    B, H, L, dh = v.shape
    q, k = (u(p).view(L, H, dh).transpose(0, 1) for u in (u_q, u_k))
    logits = q @ k.transpose(-2, -1) / math.sqrt(scale or dh)
    allowed = (torch.ones(L, L, dtype=torch.bool).tril(diagonal) & valid[:, None, None, :])
    if multiply:
        return torch.softmax(logits * (allowed | torch.eye(L, dtype=torch.bool)), dim=-1) @ v
    if mask == "after":
        return (torch.softmax(logits, dim=-1) * allowed) @ v
    return torch.nan_to_num(torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)) @ v


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, u_q, u_k, v, valid: _position_weights(p, u_q, u_k, v, valid, diagonal=-1), "it must see itself too"),
    (lambda p, u_q, u_k, v, valid: _position_weights(p, u_q, u_k, v, valid, scale=p.shape[1]),
     "you divided by sqrt(d)"),
    (lambda p, u_q, u_k, v, valid: _position_weights(p, u_q, u_k, v, valid, mask="after"),
     "masked after the softmax"),
    (lambda p, u_q, u_k, v, valid: _position_weights(p, u_q, u_k, v, valid, multiply=True), "since exp(0) = 1"),
])
def test_more_position_attention_mistakes_get_their_hints(wrong, hint):
    """Mistakes a learner tried in a walkthrough that got only the generic reminder (or a misleading one)."""
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch03.check_position_attention(wrong)


def test_prefix_sums_over_the_interest_axis_and_a_float64_result_get_their_hints():
    def interest_axis(x, logits, valid):
        e = torch.exp(logits) * valid[..., None]
        sums = torch.cumsum(e[..., None] * x[:, :, None, :], dim=2)
        return torch.nan_to_num(sums / torch.cumsum(e, dim=2)[..., None])

    with pytest.raises(CheckFailed, match="over the ITEM axis"):
        ch03.check_causal_interest_aggregation(interest_axis)
    with pytest.raises(CheckFailed, match="returned torch.float64 for torch.float32 inputs"):
        ch03.check_causal_interest_aggregation(lambda x, logits, valid: aggregation(x, logits, valid).double())
