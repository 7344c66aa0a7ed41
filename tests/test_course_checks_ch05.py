"""Checks of notebook 05: the references pass, stubs say 'not done', typical mistakes get their hint."""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch05


# ----------------------------------------------------------------------------- correct solutions
def window_mask(L, s, causal):
    idx = torch.arange(L)
    d = idx[:, None] - idx[None, :]
    return (d >= 0) & (d <= s) if causal else d.abs() <= s


def conv_encoder(v, weight, bias, causal):
    taps = weight.shape[-1]
    s = taps - 1 if causal else (taps - 1) // 2
    x = F.pad(v.transpose(1, 2), (s, 0) if causal else (s, s))
    return torch.relu(F.conv1d(x, weight, bias)).transpose(1, 2)


def gaussian_bias(L, a=1.0, b=0.5):
    idx = torch.arange(L, dtype=torch.float32)
    d = idx[:, None] - idx[None, :]
    return a * torch.exp(-d ** 2 / b)


def biased_attention(q, k, v, bias, allowed):
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
    w = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    return w @ v, w


def stub(*args, **kwargs):
    raise NotImplementedError()


def test_references_pass(capsys):
    ch05.check_window_mask(window_mask)
    ch05.check_conv_encoder(conv_encoder)
    ch05.check_distance_bias(gaussian_bias, biased_attention)
    out = capsys.readouterr().out
    assert out.count("✅") == 7
    assert "no query can see a future key" in out and "never reads the future" in out


def test_library_references_agree_with_the_written_out_formulas():
    for case in ch05.window_cases():
        assert torch.equal(ch05.reference_window_mask(*case.args), window_mask(*case.args))
    for case in ch05.conv_cases():
        assert torch.allclose(ch05.reference_conv_encoder(*case.args), conv_encoder(*case.args), atol=1e-6)
    for case in ch05.gaussian_cases():
        assert torch.allclose(ch05.reference_gaussian_bias(*case.args), gaussian_bias(*case.args), atol=1e-6)


@pytest.mark.parametrize("check", [ch05.check_window_mask, ch05.check_conv_encoder])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


def test_distance_bias_stubs_are_not_done(capsys):
    for functions in ((stub, biased_attention), (gaussian_bias, stub)):
        ch05.check_distance_bias(*functions)
        assert "NotImplementedError" in capsys.readouterr().out
        with pytest.raises(ExerciseNotDone):
            ch05.check_distance_bias.__wrapped__(*functions)


# ----------------------------------------------------------------------------- exercise 1 mistakes
def test_two_sided_causal_window_leaks():
    def two_sided(L, s, causal):
        return window_mask(L, s, False)

    with pytest.raises(CheckFailed, match="(?s)leaks the future.*two-sided"):
        ch05.check_window_mask(two_sided)


def test_forward_window_is_explained():
    with pytest.raises(CheckFailed, match="(?s)leaks the future.*looks forward"):
        ch05.check_window_mask(lambda L, s, causal: window_mask(L, s, causal).T)


def test_window_off_by_one():
    def narrow(L, s, causal):
        idx = torch.arange(L)
        d = idx[:, None] - idx[None, :]
        return (d >= 0) & (d < s) if causal else d.abs() < s

    with pytest.raises(CheckFailed, match="off by one"):
        ch05.check_window_mask(narrow)


def test_window_without_diagonal_and_plain_causal():
    with pytest.raises(CheckFailed, match="diagonal is missing"):
        ch05.check_window_mask(lambda L, s, causal: window_mask(L, s, causal) & ~torch.eye(L, dtype=torch.bool))
    with pytest.raises(CheckFailed, match="plain causal mask"):
        ch05.check_window_mask(lambda L, s, causal: torch.ones(L, L, dtype=torch.bool).tril() if causal
                               else window_mask(L, s, causal))


def test_inverted_causal_window_is_explained():
    with pytest.raises(CheckFailed, match="(?s)leaks the future.*inverted"):
        ch05.check_window_mask(lambda L, s, causal: ~window_mask(L, s, causal))


# ----------------------------------------------------------------------------- exercise 2 mistakes
def test_channels_mixed_by_a_reshape_are_mentioned():
    def reshaped(v, weight, bias, causal):
        B, L, dh = v.shape
        s = weight.shape[-1] - 1 if causal else (weight.shape[-1] - 1) // 2
        x = F.pad(v.reshape(B, dh, L), (s, 0) if causal else (s, s))
        return torch.relu(F.conv1d(x, weight, bias)).transpose(1, 2)

    with pytest.raises(CheckFailed, match=r"(?s)leaks the future.*v\.reshape\(B, d_h, L\)"):
        ch05.check_conv_encoder(reshaped)


def test_centred_causal_conv_leaks_the_future():
    def centred(v, weight, bias, causal):
        s = weight.shape[-1] - 1
        x = F.pad(v.transpose(1, 2), (s // 2, s - s // 2))
        return torch.relu(F.conv1d(x, weight, bias)).transpose(1, 2)

    with pytest.raises(CheckFailed, match="(?s)leaks the future.*LEFT"):
        ch05.check_conv_encoder(centred)


def test_right_padded_conv_leaks_the_future():
    def right(v, weight, bias, causal):
        s = weight.shape[-1] - 1
        return torch.relu(F.conv1d(F.pad(v.transpose(1, 2), (0, s)), weight, bias)).transpose(1, 2)

    with pytest.raises(CheckFailed, match="leaks the future"):
        ch05.check_conv_encoder(right)


def test_conv_without_relu_or_padding_or_with_flipped_kernel():
    def no_relu(v, weight, bias, causal):
        return conv_encoder(v, weight, bias, causal) - torch.relu(-_raw(v, weight, bias, causal))

    def no_pad(v, weight, bias, causal):
        return torch.relu(F.conv1d(v.transpose(1, 2), weight, bias)).transpose(1, 2)

    def flipped(v, weight, bias, causal):
        return conv_encoder(v, weight.flip(-1), bias, causal)

    with pytest.raises(CheckFailed, match="ReLU") as failure:
        ch05.check_conv_encoder(no_relu)
    assert "masking" not in str(failure.value)      # the zeros ReLU makes are not a mask: no misleading guess
    with pytest.raises(CheckFailed, match="without padding"):
        ch05.check_conv_encoder(no_pad)
    with pytest.raises(CheckFailed, match="flipped"):
        ch05.check_conv_encoder(flipped)


def _raw(v, weight, bias, causal):
    taps = weight.shape[-1]
    s = taps - 1 if causal else (taps - 1) // 2
    return F.conv1d(F.pad(v.transpose(1, 2), (s, 0) if causal else (s, s)), weight, bias).transpose(1, 2)


def test_conv_leak_finds_the_first_leak():
    assert ch05.conv_leak(conv_encoder) is None

    def peek(v, weight, bias, causal):
        out = conv_encoder(v, weight, bias, causal).clone()
        out[:, 2] += v[:, 4]
        return out

    assert ch05.conv_leak(peek) == (2, 3)


# ----------------------------------------------------------------------------- exercise 3 mistakes
def test_multiplicative_bias_gets_the_hint():
    def multiplicative(q, k, v, bias, allowed):
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) * bias
        w = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match="(?s)multiplied the logits.*ADDS"):
        ch05.check_distance_bias(gaussian_bias, multiplicative)


def test_released_code_gate_gets_the_hint():
    def gate(q, k, v, bias, allowed):
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) * torch.sigmoid(bias / 0.1)
        w = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match="released code"):
        ch05.check_distance_bias(gaussian_bias, gate)


def test_bias_after_softmax_and_transposed_bias():
    def after(q, k, v, bias, allowed):
        w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf")), -1)
        w = (w + bias).masked_fill(~allowed, 0.0)
        return w @ v, w

    with pytest.raises(CheckFailed, match="INTO the softmax"):
        ch05.check_distance_bias(gaussian_bias, after)
    with pytest.raises(CheckFailed, match="transposed"):
        ch05.check_distance_bias(gaussian_bias, lambda q, k, v, bias, allowed:
                                 biased_attention(q, k, v, bias.transpose(-2, -1), allowed))


@pytest.mark.parametrize("fill, mask_of, match", [
    (0.0, lambda allowed: ~allowed, "instead of -inf"),
    (float("-inf"), lambda allowed: allowed, "inverted"),
])
def test_a_zero_fill_or_an_inverted_mask_in_biased_attention_gets_its_hint(fill, mask_of, match):
    def wrong(q, k, v, bias, allowed):
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
        w = torch.softmax(logits.masked_fill(mask_of(allowed), fill), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match=match):
        ch05.check_distance_bias(gaussian_bias, wrong)


def _diagonals_from_one(L, a=1.0, b=0.5):
    """A loop over the distances that starts at 1 and so leaves the diagonal at 0."""
    out = torch.zeros(L, L)
    for delta in range(1, L):
        value = a * math.exp(-delta ** 2 / b)
        out += torch.diag(torch.full((L - delta,), value), -delta) + torch.diag(torch.full((L - delta,), value), delta)
    return out


@pytest.mark.parametrize("wrong, match", [
    (lambda L, a=1.0, b=0.5: gaussian_bias(L, a, 2 * b), "exp\\(-Δ²/\\(2b\\)\\)"),
    (lambda L, a=1.0, b=0.5: torch.exp(-(torch.arange(L.__int__())[:, None] - torch.arange(L)[None]).float() ** 2 / b),
     "height a"),
    (lambda L, a=1.0, b=0.5: a * torch.exp(-((torch.arange(L)[:, None] - torch.arange(L)[None]).float() + 1) ** 2 / b),
     "one step off"),
    (lambda L, a=1.0, b=0.5: torch.log(gaussian_bias(L, a, b)), "logarithm of the bump"),
    (lambda L, a=1.0, b=0.5: _diagonals_from_one(L, a, b), "diagonal .* is 0"),
])
def test_gaussian_mistakes(wrong, match):
    with pytest.raises(CheckFailed, match=match):
        ch05.check_distance_bias(wrong, biased_attention)


def test_local_head_difference_is_zero_for_the_reference():
    diffs = ch05.local_head_difference(gaussian_bias, biased_attention)
    assert max(diffs.values()) < 1e-5


def test_library_references_leave_the_rng_alone():
    state = torch.get_rng_state()
    v = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(0))
    weight, bias = torch.ones(4, 4, 3), torch.zeros(4)
    ch05.reference_conv_encoder(v, weight, bias, causal=True)
    ch05.reference_gaussian_bias(5)
    first = ch05.local_head_difference(gaussian_bias, biased_attention)
    assert torch.equal(state, torch.get_rng_state())
    assert ch05.local_head_difference(gaussian_bias, biased_attention) == first


def test_functions_without_gradients_are_caught():
    """A NumPy or no_grad version gives the right numbers but its kernels and attention would never train."""
    def conv_no_grad(v, weight, bias, causal):
        with torch.no_grad():
            return conv_encoder(v, weight, bias, causal)

    def attention_detached(q, k, v, bias, allowed):
        out, w = ch05.reference_biased_attention(q, k, v, bias, allowed)
        return out.detach(), w.detach()

    with pytest.raises(CheckFailed, match="no gradient flows"):
        ch05.check_conv_encoder(conv_no_grad)
    with pytest.raises(CheckFailed, match="no gradient flows"):
        ch05.check_distance_bias(gaussian_bias, attention_detached)


@pytest.mark.parametrize("which, wrong, hint", [
    ("conv", lambda v, w, b, causal: torch.relu(F.conv1d(F.pad(v.transpose(1, 2), (w.shape[-1] - 1, 0)), w, b))
     .transpose(1, 2), "pad s zeros on EACH side"),
    ("gaussian", lambda L, a=1.0, b=0.5: a * torch.exp(-(torch.arange(L)[:, None] - torch.arange(L)[None, :]) ** 2
                                                        / b ** 2), "not a·exp(-Δ²/b²)"),
    ("attention", lambda q, k, v, bias, allowed: _weights_and_output(
        torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias).masked_fill(~allowed, float("-inf")),
                      dim=-2), v), "runs over the queries"),
    ("attention", lambda q, k, v, bias, allowed: _weights_and_output(
        torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias).masked_fill(~allowed, 0.0), v),
     "without the normalisation"),
    ("attention", lambda q, k, v, bias, allowed: ch05.reference_biased_attention(q, k, v, bias.tril(), allowed),
     "add the whole bias"),
])
def test_more_locker_mistakes_get_their_hints(which, wrong, hint):
    """Mistakes a learner tried in a walkthrough that got only the generic reminder."""
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        if which == "conv":
            ch05.check_conv_encoder(wrong)
        elif which == "gaussian":
            ch05.check_distance_bias(wrong, ch05.reference_biased_attention)
        else:
            ch05.check_distance_bias(gaussian_bias, wrong)


def _weights_and_output(w, v):
    w = torch.nan_to_num(w)
    return w @ v, w


def test_an_additive_float_window_mask_is_named_as_such():
    """A 0 / -inf mask used to be reported as an inverted bool mask."""
    def additive(L, s, causal):
        d = torch.arange(L)[:, None] - torch.arange(L)[None, :]
        keep = ((d >= 0) & (d <= s)) if causal else (d.abs() <= s)
        return torch.zeros(L, L).masked_fill(~keep, float("-inf"))

    with pytest.raises(CheckFailed, match="additive float mask"):
        ch05.check_window_mask(additive)
