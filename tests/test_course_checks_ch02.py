"""Checks of notebook 02: the references pass, stubs say 'not done', typical mistakes get their hint."""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.course.checks import CheckFailed, ExerciseNotDone, ch02


def attention(q, k, v, allowed):
    logits = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    w = torch.softmax(logits, dim=-1)
    return w @ v, w


def causal_mask(L):
    return torch.ones(L, L, dtype=torch.bool).tril()


def allowed_mask(item_ids):
    L = item_ids.shape[1]
    return (item_ids.ne(0)[:, None, None, :] & causal_mask(L)) | torch.eye(L, dtype=torch.bool)


def valid_ce(hidden, targets, items):
    mask = targets.ne(0)
    return F.cross_entropy(hidden[mask] @ items[1:].T, targets[mask] - 1)


def block_forward(block, x, ctx):
    x = x + block.dropout(block.attention(block.ln_attn(x), ctx)[0])
    return x + block.dropout(block.ffn(block.ln_ffn(x)))


def split_heads(x, n_heads):
    B, L, d = x.shape
    return x.reshape(B, L, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    B, H, L, dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * dh)


def stub(*args):
    raise NotImplementedError()


def test_references_pass(capsys):
    ch02.check_attention(attention)
    ch02.check_causal_mask(causal_mask)
    ch02.check_allowed_mask(allowed_mask)
    ch02.check_attention_in_heads(attention)
    ch02.check_valid_ce(valid_ce)
    ch02.check_block(block_forward)
    ch02.check_heads(split_heads, merge_heads)
    out = capsys.readouterr().out
    assert out.count("✅") == 8 and "no future leakage" in out and "value and gradients" in out
    assert "dropout in the right places" in out


@pytest.mark.parametrize("check", [ch02.check_attention, ch02.check_causal_mask, ch02.check_allowed_mask,
                                   ch02.check_attention_in_heads, ch02.check_valid_ce, ch02.check_block])
def test_stub_is_reported_without_raising(check, capsys):
    check(stub)  # prints instead of raising, so Jupyter's Run All goes on with the library's version
    assert "library's version" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="library's version"):
        check.__wrapped__(stub)


def test_a_float_mask_mixed_with_a_bool_one_is_a_failure_not_an_exercise_left_undone(capsys):
    def allowed_float_tril(item_ids):
        L = item_ids.shape[1]
        return (item_ids.ne(0)[:, None, None, :] & torch.ones(L, L).tril()) | torch.eye(L, dtype=torch.bool)

    with pytest.raises(CheckFailed, match="check the dtypes"):
        ch02.check_allowed_mask.__wrapped__(allowed_float_tril)

    def attention_float_tril(q, k, v, allowed):                # re-applies causality with a float triangle
        L = allowed.shape[-1]
        return attention(q, k, v, allowed & torch.ones(L, L).tril())

    with pytest.raises(CheckFailed, match="NotImplementedError"):   # inside the heads: not "not done" either
        ch02.check_attention_in_heads.__wrapped__(attention_float_tril)


def test_attention_without_its_weights_is_told_to_return_them():
    with pytest.raises(CheckFailed, match="`weights` is None: return a value for it too"):
        ch02.check_attention(lambda q, k, v, allowed: (attention(q, k, v, allowed)[0], None))


def test_attention_without_scaling_gets_the_hint():
    def no_scale(q, k, v, allowed):
        w = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf")), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match="sqrt"):
        ch02.check_attention(no_scale)


def test_attention_masked_with_zero_gets_the_hint():
    def zero_fill(q, k, v, allowed):
        w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, 0.0), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match="instead of -inf"):
        ch02.check_attention(zero_fill)


@pytest.mark.parametrize("fill", [-20.0, -100.0])
def test_attention_masked_with_a_finite_fill_is_caught(fill):
    """A finite fill is 'small' only next to logits near 0: the case with strongly negative logits catches it."""
    def finite(q, k, v, allowed):
        w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, fill), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match="(?s)strongly negative.*-inf"):
        ch02.check_attention(finite)


def test_attention_masked_with_a_huge_negative_number_passes(capsys):
    """-1e9 or the TF code's -2^32 + 1 lose to every logit, like -inf."""
    def huge(q, k, v, allowed):
        w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, -2.0 ** 32 + 1),
                          dim=-1)
        return w @ v, w

    ch02.check_attention(huge)
    assert "matches the library" in capsys.readouterr().out


def test_leaky_masks_are_caught_with_an_explanation():
    with pytest.raises(CheckFailed, match="(?s)leaks from the future.*transpose"):
        ch02.check_causal_mask(lambda L: torch.ones(L, L, dtype=torch.bool).triu())
    with pytest.raises(CheckFailed, match="leaks from the future"):
        ch02.check_causal_mask(lambda L: torch.ones(L, L, dtype=torch.bool).tril(1))
    with pytest.raises(CheckFailed, match="inverted"):
        ch02.check_causal_mask(lambda L: ~torch.ones(L, L, dtype=torch.bool).tril())
    with pytest.raises(CheckFailed, match="itself"):
        ch02.check_causal_mask(lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1))
    # a mask that hides too much does not leak, but differs from the library's
    with pytest.raises(CheckFailed, match="hides keys that are allowed"):
        ch02.check_causal_mask(lambda L: torch.eye(L, dtype=torch.bool))


def test_prove_no_leakage_finds_the_first_leak():
    assert ch02.prove_no_leakage(causal_mask(6)) is None
    mask = causal_mask(6)
    mask[2, 4] = True
    assert ch02.prove_no_leakage(mask) == (2, 3)


def test_allowed_mask_mistakes():
    def no_eye(ids):
        return ids.ne(0)[:, None, None, :] & causal_mask(ids.shape[1])

    def rows(ids):
        L = ids.shape[1]
        return (ids.ne(0)[:, None, :, None] & causal_mask(L)) | torch.eye(L, dtype=torch.bool)

    with pytest.raises(CheckFailed, match="NaN"):
        ch02.check_allowed_mask(no_eye)
    with pytest.raises(CheckFailed, match="QUERIES"):
        ch02.check_allowed_mask(rows)
    with pytest.raises(CheckFailed, match="head dimension"):
        ch02.check_allowed_mask(lambda ids: allowed_mask(ids)[:, 0])
    for causal_only in (lambda ids: causal_mask(ids.shape[1]),
                        lambda ids: causal_mask(ids.shape[1]).expand(ids.shape[0], 1, -1, -1)):
        with pytest.raises(CheckFailed, match="padding is not hidden"):
            ch02.check_allowed_mask(causal_only)

    def one_step_ahead(ids):
        L = ids.shape[1]
        return (ids.ne(0)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril(1)) | torch.eye(L, dtype=torch.bool)

    with pytest.raises(CheckFailed, match="attend to the later position 1, its future"):
        ch02.check_allowed_mask(one_step_ahead)


def test_allowed_mask_with_an_inverted_padding_test_is_told_so():
    def inverted(ids):
        L = ids.shape[1]
        return (ids.eq(0)[:, None, None, :] & causal_mask(L)) | torch.eye(L, dtype=torch.bool)

    with pytest.raises(CheckFailed, match="padding test is inverted"):
        ch02.check_allowed_mask(inverted)


def test_allowed_mask_that_assumes_right_padding_is_told_so_not_inverted():
    """A mask built from lengths (the first `length` keys) is a right-padding mistake, not an inverted test."""
    def from_lengths(ids):
        L = ids.shape[1]
        first = torch.arange(L)[None, :] < ids.ne(0).sum(1, keepdim=True)
        return (first[:, None, None, :] & causal_mask(L)) | torch.eye(L, dtype=torch.bool)

    with pytest.raises(CheckFailed, match="as if the padding came at the end") as failure:
        ch02.check_allowed_mask(from_lengths)
    assert "inverted" not in str(failure.value)


def test_attention_masked_after_the_softmax_gets_the_hint():
    def after(q, k, v, allowed):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) * allowed
        return w @ v, w

    with pytest.raises(CheckFailed, match="AFTER the softmax"):
        ch02.check_attention(after)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_attention_with_dot_t_on_batched_keys_is_told_to_transpose_the_last_two():
    def dot_t(q, k, v, allowed):
        w = torch.softmax((q @ k.T / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf")), dim=-1)
        return w @ v, w

    with pytest.raises(CheckFailed, match=r"`\.T` reverses ALL"):
        ch02.check_attention(dot_t)


def test_a_numpy_causal_mask_is_refused_with_the_reason():
    import numpy as np

    with pytest.raises(CheckFailed, match="returned a value of type ndarray; return a torch tensor"):
        ch02.check_causal_mask(lambda L: np.tril(np.ones((L, L), dtype=bool)))


def test_an_unrelated_error_gets_no_dot_t_hint_from_a_comment():
    def wrong_dim(q, k, v, allowed):
        # k.T would reverse all four dimensions, so transpose the last two
        w = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf")), dim=3.5)
        return w @ v, w

    with pytest.raises(CheckFailed) as failure:
        ch02.check_attention(wrong_dim)
    assert "raised TypeError" in str(failure.value) and "`.T`" not in str(failure.value)


def _flat(hidden):
    return hidden.reshape(-1, hidden.shape[-1])


def _per_sequence_mean(h, t, i):
    valid = t.ne(0)
    per_position = torch.zeros(t.shape)
    per_position[valid] = F.cross_entropy(h[valid] @ i[1:].T, t[valid] - 1, reduction="none")
    return (per_position.sum(dim=1) / valid.sum(dim=1)).mean()


def _zeroed_after_the_loss(h, t, i):
    logits = h @ i.T
    logits[..., 0] = float("-inf")               # the padding item is no class, but padding targets are 0: inf loss
    losses = F.cross_entropy(_flat(logits), t.reshape(-1), reduction="none")
    return (losses * t.ne(0).reshape(-1)).sum() / t.ne(0).sum()      # inf * 0 = NaN


@pytest.mark.parametrize("wrong, hint", [
    (lambda h, t, i: F.cross_entropy(_flat(h) @ i.T, t.reshape(-1)), "padding positions are in the mean"),
    (lambda h, t, i: F.cross_entropy(_flat(h) @ i.T, t.reshape(-1), ignore_index=0), "row 0 of items is the padding"),
    (lambda h, t, i: F.cross_entropy(h[t.ne(0)] @ i.T, t[t.ne(0)]), "row 0 of items is the padding item"),
    (lambda h, t, i: F.cross_entropy(h[t.ne(0)] @ i[1:].T, t[t.ne(0)] - 1, reduction="sum") / t.numel(),
     "divided by all B*L positions"),
    (lambda h, t, i: F.cross_entropy(h[t.ne(0)] @ i[1:].T, t[t.ne(0)] - 1, reduction="sum"), "summed the losses"),
    (lambda h, t, i: F.cross_entropy(h[t.ne(0)] @ i[1:].T, t[t.ne(0)]), "the classes are targets - 1"),
    (lambda h, t, i: -torch.log(torch.exp(h[t.ne(0)] @ i[1:].T) / torch.exp(h[t.ne(0)] @ i[1:].T).sum(-1, True)
                                ).gather(1, t[t.ne(0)][:, None] - 1).mean(), "not finite where the logits are large"),
    (lambda h, t, i: valid_ce(h.detach(), t, i.detach()), "not connected to the model"),
    (lambda h, t, i: torch.tensor(valid_ce(h, t, i).item()), "not connected to the model"),
    (lambda h, t, i: valid_ce(h, t, i.detach()), "not the library's gradient with respect to items"),
    (lambda h, t, i: torch.tensor(valid_ce(torch.from_numpy(h.numpy()), t, i.detach()).item()), "no .numpy()"),
    (lambda h, t, i: F.cross_entropy(_flat(h) @ i[1:].T, t.reshape(-1) - 1, ignore_index=0), "into the class -1"),
    (lambda h, t, i: valid_ce(h, t, i).reshape(1), "the value is right: return it as a 0-dimensional tensor"),
    (_per_sequence_mean, "averaged each sequence's mean"),
    (_zeroed_after_the_loss, "not finite although the logits are small"),
])
def test_valid_ce_mistakes_get_their_hint(wrong, hint):
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch02.check_valid_ce.__wrapped__(wrong)


def test_valid_ce_cases_include_an_empty_row_and_a_target_in_the_last_column():
    cases = ch02.valid_ce_cases()
    assert any(bool(c.args[1].eq(0).all(dim=1).any()) for c in cases)
    assert any(int(c.args[1].max()) == c.args[2].shape[0] - 1 for c in cases)


@pytest.mark.parametrize("mistake, hint", [
    ("post_ln", "post-LN block"), ("residual_from_norm", "layout='tf'"),
    ("attention_residual_from_norm", "the attention's residual is taken from LN(x)"),
    ("no_residual", "residual connections"), ("no_ffn_residual", "the FFN's residual connection is missing"),
    ("one_norm", "block.ln_ffn for the feed-forward"), ("stale_norm", "the UPDATED x"),
    ("ffn_unnormalised", "the FFN reads the un-normalised x"),
    ("attention_unnormalised", "the attention reads the un-normalised x"), ("fresh_norms", "their learned scale"),
    ("no_dropout", "not in training"), ("dropout_after_sum", "after the residual sum"),
    ("functional_dropout", "its training flag defaults to True"),
    ("functional_dropout_in_training", "no seed can make them agree"), ("ffn_first", "wrong order"),
])
def test_block_mistakes_get_their_hint(mistake, hint):
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch02.check_block.__wrapped__(ch02._block_variants()[mistake])


def test_a_block_that_returns_the_pair_is_told_to_return_x():
    with pytest.raises(CheckFailed, match="return the new x only"):
        ch02.check_block.__wrapped__(lambda block, x, ctx: block(x, ctx))


def test_the_check_block_tells_its_two_layernorms_apart():
    block = ch02.make_check_block()
    assert not torch.allclose(block.ln_attn.weight, block.ln_ffn.weight)
    assert block.dropout.p > 0


def test_a_block_that_adds_in_place_is_told_to_write_x_equals_x_plus():
    def in_place(block, x, ctx):
        x += block.dropout(block.attention(block.ln_attn(x), ctx)[0])
        x += block.dropout(block.ffn(block.ln_ffn(x)))
        return x
    with pytest.raises(CheckFailed, match=re.escape("write x = x + ...")):
        ch02.check_block.__wrapped__(in_place)


def test_a_block_with_dropout_on_one_sub_layer_only_gets_the_dropout_recipe():
    def attention_dropout_only(block, x, ctx):
        x = x + block.dropout(block.attention(block.ln_attn(x), ctx)[0])
        return x + block.ffn(block.ln_ffn(x))
    with pytest.raises(CheckFailed, match="right without dropout, wrong with it"):
        ch02.check_block.__wrapped__(attention_dropout_only)


def test_a_partly_detached_block_is_caught_by_its_gradient():
    def detached_attention(block, x, ctx):
        x = x + block.dropout(block.attention(block.ln_attn(x), ctx)[0]).detach()
        return x + block.dropout(block.ffn(block.ln_ffn(x)))
    with pytest.raises(CheckFailed, match="not its gradient"):
        ch02.check_block.__wrapped__(detached_attention)


def test_calling_the_librarys_block_passes_with_a_note(capsys):
    ch02.check_block(lambda block, x, ctx: block(x, ctx)[0])
    out = capsys.readouterr().out
    assert "✅" in out and "calls the library's Block itself" in out


def test_stub_heads_are_reported_without_raising(capsys):
    ch02.check_heads(stub, stub)
    assert "library's version" in capsys.readouterr().out


@pytest.mark.parametrize("split, merge, hint", [
    (lambda x, H: x.reshape(x.shape[0], H, x.shape[1], -1), merge_heads, "mixes positions with channels"),
    (lambda x, H: x.reshape(*x.shape[:2], -1, H).permute(0, 3, 1, 2), merge_heads, "not every H-th channel"),
    (lambda x, H: x.reshape(*x.shape[:2], H, -1), merge_heads, "swap L and H with transpose(1, 2)"),
    (split_heads, lambda x: x.reshape(x.shape[0], x.shape[2], -1), "mixes positions with channels"),
    (split_heads, lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1), "not every H-th channel"),
])
def test_head_mistakes_get_their_hint(split, merge, hint):
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch02.check_heads.__wrapped__(split, merge)


def test_other_correct_ways_to_split_pass(capsys):
    ch02.check_heads(lambda x, H: torch.stack(x.chunk(H, dim=-1), dim=1), lambda x: torch.cat(x.unbind(1), dim=-1))
    assert "✅" in capsys.readouterr().out


def test_the_split_cases_include_one_where_a_missing_transpose_keeps_the_shape():
    assert any(c.args[0].shape[1] == c.args[1] for c in ch02.split_cases())


def test_in_heads_comparison_is_deterministic_and_leaves_the_rng_alone():
    state = torch.get_rng_state()
    first = ch02.compare_in_heads(ch02.reference_attention)
    assert torch.equal(state, torch.get_rng_state())
    assert max(first.values()) < 1e-5
    assert ch02.compare_in_heads(ch02.reference_attention) == first


def test_attention_without_gradients_is_caught():
    """The right numbers under torch.no_grad() would leave the projections untrained."""
    def no_grad(q, k, v, allowed):
        with torch.no_grad():
            return ch02.reference_attention(q, k, v, allowed)

    with pytest.raises(CheckFailed, match="no gradient flows"):
        ch02.check_attention(no_grad)


def test_attention_renormalised_after_the_softmax_is_caught_where_it_gives_nan():
    """Masking after the softmax and renormalising agrees with the reference while the visible keys keep some
    weight, and gives 0/0 when the hidden keys' logits are far larger: a case has them 50 to 200 above."""
    def renormalised(q, k, v, allowed):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) * allowed
        w = w / w.sum(-1, keepdim=True)
        return w @ v, w

    with pytest.raises(CheckFailed, match="AFTER the softmax|BEFORE the softmax"):
        ch02.check_attention.__wrapped__(renormalised)


@pytest.mark.parametrize("wrong, hint", [
    (lambda q, k, v, a: _finish(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, a), "K Q^T"),
    (lambda q, k, v, a: _finish(q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1]), v, a), "multiplied the logits"),
    (lambda q, k, v, a: (lambda w: (w @ v, w))(
        torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~a, float("-inf")), -1) / math.sqrt(q.shape[-1])),
     "the scaling comes after the softmax"),
    (lambda q, k, v, a: (attention(q, k, v, a)[0],
                         (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~a, float("-inf"))),
     "the second value is the logits"),
])
def test_more_attention_mistakes_get_their_hint(wrong, hint):
    with pytest.raises(CheckFailed, match=re.escape(hint)):
        ch02.check_attention.__wrapped__(wrong)


def _finish(logits, v, allowed):
    w = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    return w @ v, w


@pytest.mark.parametrize("split, merge, name", [
    (split_heads, lambda x: merge_heads(x).tolist(), "merge"),
    (lambda x, H: split_heads(x, H).numpy(), lambda x: merge_heads(torch.as_tensor(x)).numpy(), "split"),
    (lambda x, H: list(split_heads(x, H)), merge_heads, "split"),
])
def test_heads_that_return_lists_or_arrays_are_told_to_return_tensors(split, merge, name):
    split.__name__, merge.__name__ = "split_heads", "merge_heads"
    with pytest.raises(CheckFailed, match=rf"`{name}_heads` returned a \w+: return a torch tensor"):
        ch02.check_heads.__wrapped__(split, merge)


def test_a_block_that_switches_to_eval_mode_is_told_so():
    def evaluates(block, x, ctx):
        block.eval()
        return block_forward(block, x, ctx)

    with pytest.raises(CheckFailed, match=re.escape("switched the block to evaluation mode (block.eval()")):
        ch02.check_block.__wrapped__(evaluates)


def test_a_wrong_split_beside_an_unfinished_merge_is_reported_as_wrong():
    def split(x, n_heads):
        return x.reshape(x.shape[0], n_heads, x.shape[1], -1)

    with pytest.raises(CheckFailed, match="mixes positions with channels"):
        ch02.check_heads.__wrapped__(split, stub)
