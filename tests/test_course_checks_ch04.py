"""Checks of notebook 04: the references pass, stubs say 'not done', typical mistakes get their hint, and the
check's reference is the library's positional attention."""
from __future__ import annotations

import math
import re

import pytest
import torch

from tutorial_lib.attention import SequenceContext
from tutorial_lib.attention.positional import PositionalAttention
from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch04


def positional_attention(logits, positions, v, valid):
    L = valid.shape[1]
    sub = logits[:, positions][:, :, positions]
    allowed = (valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()) | torch.eye(L, dtype=torch.bool)
    w = torch.softmax(sub[None].masked_fill(~allowed, float("-inf")), dim=-1)
    return w @ v, w


def factorized_logits(f1, f2, d_head):
    return f1 @ f2.transpose(-2, -1) / math.sqrt(d_head)


def attention_parameters(name, d, h, n, k):
    linear = d * d + d
    return {"sasrec": 4 * linear, "parec": linear + h * n * n, "fparec": linear + 2 * h * n * k, "pattern": linear}[name]


def stub(*args):
    raise NotImplementedError()


def _with_mask(mask_fn):
    def fn(logits, positions, v, valid):
        L = valid.shape[1]
        sub = logits[:, positions][:, :, positions]
        w = torch.softmax(sub[None].masked_fill(~mask_fn(valid, L), float("-inf")), dim=-1)
        return w @ v, w
    return fn


# ----------------------------------------------------------------------------- the reference is the library
def test_reference_matches_the_library_layer():
    torch.manual_seed(0)
    layer = PositionalAttention(d_model=8, n_heads=2, max_len=7, kind="full").eval()
    with torch.no_grad():
        layer.w_pos.normal_(0.0, 2.0)
    ids = torch.tensor([[0, 0, 3, 5, 1], [4, 2, 2, 9, 7]])
    x = torch.randn(2, 5, 8)
    ctx = SequenceContext.from_item_ids(ids, max_len=7, need_weights=True)
    with torch.no_grad():
        lib_out, lib_w = layer(x, ctx)
        fused, _ = layer(x, SequenceContext.from_item_ids(ids, max_len=7))
        v = layer.v_proj(x).view(2, 5, 2, 4).transpose(1, 2)
        out, w = ch04.reference_positional_attention(layer.pattern_logits(), ctx.positions, v, ctx.valid_mask)
    torch.testing.assert_close(w, lib_w)
    mine = out.transpose(1, 2).reshape(2, 5, 8)
    torch.testing.assert_close(mine, lib_out)
    valid = ids.ne(0)
    torch.testing.assert_close(mine[valid], fused[valid], rtol=1e-5, atol=1e-6)  # the batch-shared fast path


def test_reference_rejects_positions_counted_from_the_left():
    logits, _, v, valid = ch04._batch(__import__("numpy").random.default_rng(0), 1, 1, 6, 3, 2)
    with pytest.raises(ValueError, match="from the right"):
        ch04.reference_positional_attention(logits, torch.arange(3), v, valid)


def test_factorized_reference_is_the_plain_formula_on_the_cases():
    for case in ch04.factorized_cases():
        torch.testing.assert_close(ch04.reference_factorized_logits(*case.args), factorized_logits(*case.args),
                                   rtol=1e-4, atol=1e-5)  # the check's tolerances


# ----------------------------------------------------------------------------- reference passes, stubs are 'not done'
def test_references_pass(capsys):
    ch04.check_positional_attention(positional_attention)
    ch04.check_factorized_logits(factorized_logits)
    ch04.check_in_fparec(factorized_logits, positional_attention)
    ch04.check_attention_parameters(attention_parameters)
    out = capsys.readouterr().out
    assert out.count("✅") == 6 and "no leakage" in out and "rank" in out and "4 models x 4 settings" in out


def test_check_in_fparec_falls_back_on_the_library_for_exercise_1(capsys):
    ch04.check_in_fparec(factorized_logits, stub)
    ch04.check_in_fparec(factorized_logits)
    out = capsys.readouterr().out
    assert out.count("only `factorized_logits` is yours") == 2 and out.count("✅") == 2
    assert "built on your `factorized_logits` gives" in out


def test_check_in_fparec_tests_exercise_1_alone_when_exercise_2_is_not_done(capsys):
    ch04.check_in_fparec(stub, positional_attention)
    out = capsys.readouterr().out
    assert "only `positional_attention` is yours" in out and "built on your `positional_attention` gives" in out


@pytest.mark.parametrize("check", [ch04.check_positional_attention, ch04.check_factorized_logits,
                                   ch04.check_in_fparec, ch04.check_attention_parameters])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


# ----------------------------------------------------------------------------- typical mistakes of exercise 1
def test_positions_counted_from_the_left_get_the_hint():
    def left(logits, positions, v, valid):
        L = valid.shape[1]
        return positional_attention(logits[:, :L, :L], torch.arange(L), v, valid)

    with pytest.raises(CheckFailed, match="RIGHT"):
        ch04.check_positional_attention(left)


def test_missing_causal_mask_gets_the_hint():
    L_eye = lambda L: torch.eye(L, dtype=torch.bool)  # noqa: E731
    with pytest.raises(CheckFailed, match="causal mask is missing"):
        ch04.check_positional_attention(_with_mask(lambda valid, L: valid[:, None, None, :] | L_eye(L)))


def test_missing_padding_mask_gets_the_hint():
    with pytest.raises(CheckFailed, match="padding keys are not hidden"):
        ch04.check_positional_attention(_with_mask(lambda valid, L: torch.ones(L, L, dtype=torch.bool).tril()))


def test_no_diagonal_gives_nan_hint():
    with pytest.raises(CheckFailed, match="itself"):
        ch04.check_positional_attention(
            _with_mask(lambda valid, L: valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()))


def _masked_attention(logits, positions, v, valid, diagonal=0, inverted=False, multiply=False):
    L = valid.shape[1]
    sub = logits[:, positions][:, :, positions][None]
    allowed = ((torch.ones(L, L, dtype=torch.bool).tril(diagonal) & valid[:, None, None, :])
               | torch.eye(L, dtype=torch.bool))
    if multiply:                                   # -inf * 0 is NaN at every visible key
        w = torch.softmax(sub + float("-inf") * (~allowed).float(), dim=-1)
    else:
        w = torch.softmax(sub.masked_fill(allowed if inverted else ~allowed, float("-inf")), dim=-1)
    return w @ v, w


@pytest.mark.parametrize("options, message", [
    (dict(diagonal=1), r"one step into the future(?s:.)*tril\(1\)"),
    (dict(inverted=True), "no padding(?s:.)*inverted"),
    (dict(multiply=True), r"no padding(?s:.)*-inf \* mask"),
])
def test_a_mask_one_step_ahead_inverted_or_multiplied_gets_its_hint(options, message):
    with pytest.raises(CheckFailed, match=message):
        ch04.check_positional_attention(lambda *args: _masked_attention(*args, **options))


def _diagonal_pattern(logits, positions, v, valid):
    L = valid.shape[1]
    allowed = (valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()) | torch.eye(L, dtype=torch.bool)
    diag = logits[:, positions, positions][None, :, None, :]            # (1, H, 1, L): the same row for every query
    w = torch.softmax(diag.masked_fill(~allowed, float("-inf")), dim=-1)
    return w @ v, w


@pytest.mark.parametrize("wrong, hint", [
    (_with_mask(lambda valid, L: (torch.ones(L, L, dtype=torch.bool).tril() & valid[:, None, :, None])
                | torch.eye(L, dtype=torch.bool)), "hides QUERIES instead of keys"),
    (_with_mask(lambda valid, L: (torch.ones(L, L, dtype=torch.bool).triu() & valid[:, None, None, :])
                | torch.eye(L, dtype=torch.bool)), "the causal mask is triu()"),
    (_diagonal_pattern, "picks the DIAGONAL"),
])
def test_a_query_mask_an_upper_triangle_and_the_diagonal_get_their_hints(wrong, hint):
    """Mistakes a learner made in a walkthrough that got only the generic reminder before."""
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch04.check_positional_attention(wrong)


def test_check_in_fparec_names_a_pattern_of_the_wrong_shape():
    """F1^T F2 gives (H, k, k): the comparison used to fail with a misleading message about positions."""
    with pytest.raises(CheckFailed, match=r"returned shape \(2, 3, 3\) .* expected \(2, 8, 8\) = \(H, n, n\)"):
        ch04.check_in_fparec(lambda f1, f2, d_head: f1.transpose(-2, -1) @ f2 / math.sqrt(d_head))


def test_rescaling_and_zero_fill_get_their_hints():
    def rescaled(logits, positions, v, valid):
        return positional_attention(logits / math.sqrt(v.shape[-1]), positions, v, valid)

    def zero_fill(logits, positions, v, valid):
        L = valid.shape[1]
        sub = logits[:, positions][:, :, positions]
        allowed = (valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()) | torch.eye(L, dtype=torch.bool)
        w = torch.softmax(sub[None].masked_fill(~allowed, 0.0), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match="already scaled"):
        ch04.check_positional_attention(rescaled)
    with pytest.raises(CheckFailed, match="instead of -inf"):
        ch04.check_positional_attention(zero_fill)


def test_leakage_proof_finds_leaks():
    assert ch04.prove_no_leakage_positional(positional_attention) is None
    leaky = _with_mask(lambda valid, L: (valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril(1))
                       | torch.eye(L, dtype=torch.bool))
    assert "from the future" in ch04.prove_no_leakage_positional(leaky)
    no_pad = _with_mask(lambda valid, L: torch.ones(L, L, dtype=torch.bool).tril())
    assert "from the padding" in ch04.prove_no_leakage_positional(no_pad)


# ----------------------------------------------------------------------------- typical mistakes of exercise 2
def test_factorized_mistakes():
    with pytest.raises(CheckFailed, match="unscaled, or scaled by sqrt"):
        ch04.check_factorized_logits(lambda f1, f2, d: f1 @ f2.transpose(-2, -1))
    with pytest.raises(CheckFailed, match="unscaled, or scaled by sqrt"):     # the first case has k = 1
        ch04.check_factorized_logits(lambda f1, f2, d: f1 @ f2.transpose(-2, -1) / math.sqrt(f1.shape[-1]))
    with pytest.raises(CheckFailed, match="square root"):
        ch04.check_factorized_logits(lambda f1, f2, d: f1 @ f2.transpose(-2, -1) / d)
    with pytest.raises(CheckFailed, match="transposed"):
        ch04.check_factorized_logits(lambda f1, f2, d: f2 @ f1.transpose(-2, -1) / math.sqrt(d))
    with pytest.raises(CheckFailed, match=r"\(H, k, k\)"):
        ch04.check_factorized_logits(lambda f1, f2, d: f1.transpose(-2, -1) @ f2 / math.sqrt(d))
    with pytest.raises(CheckFailed, match="DIVIDE"):
        ch04.check_factorized_logits(lambda f1, f2, d: f1 @ f2.transpose(-2, -1) * math.sqrt(d))
    with pytest.raises(CheckFailed, match="LOGITS"):
        ch04.check_factorized_logits(lambda f1, f2, d: torch.softmax(factorized_logits(f1, f2, d), dim=-1))
    with pytest.raises(CheckFailed, match="masks belong to positional_attention"):
        ch04.check_factorized_logits(lambda f1, f2, d: factorized_logits(f1, f2, d).masked_fill(
            ~torch.ones(f1.shape[1], f1.shape[1], dtype=torch.bool).tril(), float("-inf")))


def test_factorized_rank_probe_accepts_the_librarys_soft_cap_and_rejects_full_rank():
    """The library soft-caps the logits (30 tanh(x / 30)); a learner who copies that is right, not 'rank 6 > k'.
    A pattern with a full-rank part (an added diagonal) is still caught by the rank probe."""
    ch04.check_factorized_logits(lambda f1, f2, d: 30 * torch.tanh(f1 @ f2.transpose(-2, -1) / math.sqrt(d) / 30))

    def plus_tiny_diagonal(f1, f2, d):
        out = f1 @ f2.transpose(-2, -1) / math.sqrt(d)
        return out + 1e-7 * torch.eye(f1.shape[1]) if f1.shape[1] == 12 else out   # only on the rank probe

    def plus_diagonal(f1, f2, d):
        out = f1 @ f2.transpose(-2, -1) / math.sqrt(d)
        return out + 0.01 * torch.eye(f1.shape[1]) if f1.shape[1] == 12 else out

    ch04.check_factorized_logits(plus_tiny_diagonal)          # float noise is not rank
    with pytest.raises(CheckFailed, match=r"has rank 1[0-2]; F1 F2\^T has rank at most k = 2"):
        ch04.check_factorized_logits(plus_diagonal)


def test_check_in_fparec_catches_a_leaky_layer():
    leaky = _with_mask(lambda valid, L: valid[:, None, None, :] | torch.eye(L, dtype=torch.bool))
    with pytest.raises(CheckFailed, match="leaks from the future inside the model"):
        ch04.check_in_fparec(factorized_logits, leaky)


def test_compare_in_fparec_is_exact_for_the_reference():
    diffs = ch04.compare_in_fparec(factorized_logits, positional_attention)
    assert all(v < 1e-4 for v in diffs.values()), diffs


def test_zeros_for_the_padding_rows_are_explained():
    """Notebook 03 accepted replacing the NaN rows of padding queries by zeros; this check wants rows that sum to 1."""
    def nan_to_zero(logits, positions, v, valid):
        L = valid.shape[1]
        sub = logits[:, positions][:, :, positions]
        allowed = valid[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()
        w = torch.softmax(sub[None].masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
        return w @ v, w

    with pytest.raises(CheckFailed, match="only the rows of padding queries differ") as failure:
        ch04.check_positional_attention(nan_to_zero)
    assert "masking looks wrong" not in str(failure.value)


# ----------------------------------------------------------------------------- typical mistakes of exercise 3
def _counts(**changed):
    """attention_parameters with some of its four formulas replaced by ``changed[name](d, h, n, k)``."""
    def count(name, d, h, n, k):
        return changed[name](d, h, n, k) if name in changed else attention_parameters(name, d, h, n, k)
    return count


@pytest.mark.parametrize("wrong, hint", [
    (_counts(sasrec=lambda d, h, n, k: 4 * d * d), "count the biases too"),
    (_counts(sasrec=lambda d, h, n, k: 3 * (d * d + d)), "SASRec paper's (and its TF code's) count, without W_O"),
    (_counts(sasrec=lambda d, h, n, k: 4 * (d * d // h + d)), "the heads split the width"),
    (_counts(parec=lambda d, h, n, k: d * d + d + n * n), "its own position pattern: multiply by h"),
    (_counts(parec=lambda d, h, n, k: d * d + d + h * n * (n + 1) // 2), "stores the full n x n matrix"),
    (_counts(parec=lambda d, h, n, k: 3 * (d * d + d) + h * n * n), "no query or key projection"),
    (_counts(fparec=lambda d, h, n, k: d * d + d + h * n * k), "two factors per head"),
    (_counts(pattern=lambda d, h, n, k: 3 * (d * d + d)), "no query or key projection"),
    (_counts(parec=lambda d, h, n, k: 2 * (d * d + d) + h * n * n), "no output projection W_O"),
    (_counts(sasrec=lambda d, h, n, k: 4 * (d * d + d) + n * d), "outside the attention layer"),
    (_counts(pattern=lambda d, h, n, k: d * d + d + n * n), "a handcrafted pattern is fixed"),
    (_counts(pattern=lambda d, h, n, k: math.pow(d, 2) + d), "the count is right but it is a float"),
    (_counts(pattern=lambda d, h, n, k: 0), "still learns its value projection"),
    (_counts(parec=lambda d, h, n, k: h * (d // h) ** 2 + d + h * n * n), "they do not make it block-diagonal"),
    (lambda name, d, h, n, k: {"SASRec": 1}.get(name), "the names are lower case"),
])
def test_parameter_count_mistakes_get_their_hint(wrong, hint):
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch04.check_attention_parameters.__wrapped__(wrong)


def test_the_count_reference_counts_real_modules():
    assert ch04.reference_attention_parameters("parec", 8, 2, 10, 3) == 8 * 8 + 8 + 2 * 10 * 10
    with pytest.raises(ValueError, match="one of"):
        ch04.reference_attention_parameters("lightsans", 8, 2, 10, 3)


def test_fparec_comparison_is_deterministic_and_leaves_the_rng_alone():
    state = torch.get_rng_state()
    first = ch04.compare_in_fparec(factorized_logits, positional_attention)
    assert torch.equal(state, torch.get_rng_state())
    assert ch04.compare_in_fparec(factorized_logits, positional_attention) == first


def test_functions_without_gradients_are_caught():
    """The right numbers computed without a gradient would leave FPARec's pattern and values untrained."""
    def pa_no_grad(logits, positions, v, valid):
        with torch.no_grad():
            return positional_attention(logits, positions, v, valid)

    with pytest.raises(CheckFailed, match="no gradient flows"):
        ch04.check_positional_attention(pa_no_grad)
    with pytest.raises(CheckFailed, match="no gradient flows"):
        ch04.check_factorized_logits(lambda f1, f2, d_head: factorized_logits(f1, f2, d_head).detach())
