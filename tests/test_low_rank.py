"""LightSANs' low-rank attention against written-out references, causality in extreme regimes, the
released-code compatibility mode and prefix-sample training."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tutorial_lib.attention import SequenceContext, merge_heads, split_heads
from tutorial_lib.attention.low_rank import (
    DecoupledPositionAttention,
    LowRankAttention,
    causal_interest_aggregation,
    soft_cap,
)
from tutorial_lib.data import PrefixSamples, iterate_prefix_batches
from tutorial_lib.models import build_model
from tutorial_lib.errors import ConfigError

B, L, D, H, K = 3, 9, 16, 2, 4


def _ids(padded: bool = True) -> torch.Tensor:
    ids = torch.randint(1, 40, (B, L), generator=torch.Generator().manual_seed(0))
    if padded:
        ids[0, :4] = 0
        ids[1, :8] = 0  # a single real item
    return ids


def _naive_prefix_aggregation(x, logits, valid):
    """For every t: softmax over the real items j <= t of logits[j], then the weighted sum of x[j]."""
    out = torch.zeros(x.shape[0], x.shape[1], logits.shape[-1], x.shape[-1], dtype=torch.float64)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            keep = valid[b, : t + 1].nonzero().flatten()
            if len(keep) == 0:
                continue
            w = torch.softmax(logits[b, keep].double(), dim=0)          # (n, k)
            out[b, t] = w.t() @ x[b, keep].double()
    return out


@pytest.mark.parametrize("padded", [False, True])
def test_causal_aggregation_matches_per_prefix_softmax(padded):
    torch.manual_seed(0)
    x, logits = torch.randn(B, L, D), 3 * torch.randn(B, L, K)
    valid = _ids(padded).ne(0)
    got, weights = causal_interest_aggregation(x, logits, valid, return_weights=True)
    ref = _naive_prefix_aggregation(x, logits, valid)
    torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)
    # the weights reproduce the interests and are a distribution over the real items j <= t
    torch.testing.assert_close(torch.einsum("btjk,bjd->btkd", weights, x), got, atol=1e-5, rtol=1e-5)
    sums = weights.sum(dim=2)
    has_item = valid.cumsum(dim=1) > 0
    torch.testing.assert_close(sums[has_item], torch.ones_like(sums[has_item]))
    assert (weights.permute(0, 3, 1, 2).triu(1) == 0).all()             # nothing from the future


def test_aggregation_is_causal_even_with_extreme_logits():
    """A huge logit at a later position must not change (underflow) earlier interests: the soft cap
    keeps every exponential inside float32's range."""
    torch.manual_seed(1)
    x = torch.randn(1, L, D)
    logits = torch.randn(1, L, K)
    valid = torch.ones(1, L, dtype=torch.bool)
    before, _ = causal_interest_aggregation(x, soft_cap(logits), valid)
    logits2 = logits.clone()
    logits2[0, -1] = 1e6                                                # the last item dominates every interest
    after, _ = causal_interest_aggregation(x, soft_cap(logits2), valid)
    assert torch.equal(after[:, :-1], before[:, :-1])    # exactly: no shift taken over the window (rounding)
    assert torch.isfinite(after).all()


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 8])
def test_chunks_stay_exact_when_one_block_dwarfs_the_earlier_ones(chunk):
    """Interest logits that differ by tens (weights e^-40 against 1): the earlier blocks' sums must survive
    in float32. Carried as ``cumsum - own block`` they cancelled, and the output was off by up to 4."""
    from tutorial_lib.attention.low_rank import chunked_low_rank_attention

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 8, D)
    k[:, 6:] *= 5.0
    v[:, 6:] *= 5.0
    theta = torch.randn(K, D)
    valid = torch.ones(1, 8, dtype=torch.bool)
    logits_k, logits_v = soft_cap(k @ theta.t()), soft_cap(v @ theta.t())
    assert logits_k.amax() - logits_k.amin() > 40                      # the regime the old carry failed in
    out, _ = chunked_low_rank_attention(q, k, v, logits_k, logits_v, valid, H, chunk)
    dh = D // H
    for t in range(8):                                                   # Eq. 3 per prefix, in float64
        k_t = torch.softmax(logits_k[0, : t + 1].double(), 0).t() @ k[0, : t + 1].double()      # (K, D)
        v_t = torch.softmax(logits_v[0, : t + 1].double(), 0).t() @ v[0, : t + 1].double()
        for h in range(H):
            cols = slice(h * dh, (h + 1) * dh)
            a = torch.softmax(q[0, t, cols].double() @ k_t[:, cols].t() / math.sqrt(dh), 0)
            torch.testing.assert_close(out[0, h, t].double(), a @ v_t[:, cols], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [1, 4, 32])
@pytest.mark.parametrize("decoupled", [False, True])
def test_the_training_path_is_exactly_causal(chunk, decoupled):
    """Scaling the later items' states leaves every earlier output bit for bit the same; a normaliser shifted
    by a maximum over the window used to move them by about 1e-5."""
    torch.manual_seed(3)
    att = LowRankAttention(D, H, K, position_table=nn.Embedding(L, D) if decoupled else None, chunk=chunk).eval()
    ids = _ids(padded=True)
    ctx = SequenceContext.from_item_ids(ids, max_len=L)
    x = torch.randn(B, L, D)
    before, _ = att(x, ctx)
    x2 = x.clone()
    x2[:, 6:] *= 5.0                                                    # later items, with far larger logits
    after, _ = att(x2, ctx)
    assert torch.equal(after[:, :6], before[:, :6])
    assert not torch.equal(after[:, 6:], before[:, 6:])


def _reference_layer(att: LowRankAttention, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Eq. 3 (+ Eq. 4) written out per position, with the causal, masked aggregation."""
    dh = D // H
    valid = ids.ne(0)
    q, k, v = att.in_proj(x).chunk(3, dim=-1)
    k_t = _naive_prefix_aggregation(k, soft_cap(k @ att.theta_k.t()), valid).float()   # (B, L, K, D)
    v_t = _naive_prefix_aggregation(v, soft_cap(v @ att.theta_v.t()), valid).float()
    out = torch.zeros(B, L, H, dh)
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        logits = torch.einsum("bld,blkd->blk", q[..., sl], k_t[..., sl]) / math.sqrt(dh)
        out[:, :, h] = torch.einsum("blk,blkd->bld", torch.softmax(logits, dim=-1), v_t[..., sl])
    out = out.reshape(B, L, D)
    if att.position is not None:
        ctx = SequenceContext.from_item_ids(ids, max_len=L)
        pos = att.position.weights(ctx) @ split_heads(v, H)             # materialised masked softmax
        out = out + merge_heads(pos)
    return att.out_proj(out)


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("chunk", [1, 4, 32])
def test_layer_matches_reference(decoupled, padded, chunk):
    """The chunked computation (blocks of 1, of 4 that do not divide L = 9, or one block) equals Eq. 3
    with per-prefix aggregation written out."""
    torch.manual_seed(2)
    table = nn.Embedding(L, D) if decoupled else None
    att = LowRankAttention(D, H, K, position_table=table, chunk=chunk).eval()
    ids = _ids(padded)
    x = torch.randn(B, L, D)
    ctx = SequenceContext.from_item_ids(ids, max_len=L, need_weights=True)
    y, w = att(x, ctx)
    ref = _reference_layer(att, x, ids)
    valid = ids.ne(0)
    torch.testing.assert_close(y[valid], ref[valid], atol=1e-4, rtol=1e-4)
    assert torch.isfinite(y).all()
    # the returned (B, H, L, L) map is the layer: y = W_O merge(W @ V)
    v = split_heads(att.in_proj(x).chunk(3, dim=-1)[2], H)
    torch.testing.assert_close(att.out_proj(merge_heads(w @ v))[valid], y[valid], atol=1e-4, rtol=1e-4)
    query = valid[:, None, :].expand(-1, H, -1)                          # rows of real items
    rows = w.sum(-1)[query]
    torch.testing.assert_close(rows, torch.full_like(rows, 2.0 if decoupled else 1.0))
    assert (w.triu(1) == 0).all()
    pad_key = ~valid[:, None, None, :].expand_as(w)
    assert (w[query][pad_key[query]] == 0).all()                         # padding keys get no weight


def test_decoupled_positions_are_shared_and_trim_invariant():
    """Positions count from the right, so the same items trimmed to fewer columns get the same output."""
    torch.manual_seed(3)
    table = nn.Embedding(L, D)
    pos = DecoupledPositionAttention(table, D, H).eval()
    ids = _ids(padded=True)
    ids[:, :4] = 0                                                       # bucketing only ever trims padding
    v = torch.randn(B, H, L, D // H)
    full = pos(v, SequenceContext.from_item_ids(ids, max_len=L))
    trimmed = pos(v[:, :, -5:], SequenceContext.from_item_ids(ids[:, -5:], max_len=L))
    valid = ids[:, -5:].ne(0)
    torch.testing.assert_close(trimmed.transpose(1, 2)[valid], full[:, :, -5:].transpose(1, 2)[valid],
                               atol=1e-5, rtol=1e-5)


def test_compat_mode_is_the_released_formula_and_leaks_the_future():
    torch.manual_seed(4)
    att = LowRankAttention(D, H, K, compat=True).eval()
    ids = _ids(padded=False)
    x = torch.randn(B, L, D)
    ctx = SequenceContext.from_item_ids(ids, causal=False, max_len=L)
    y, _ = att(x, ctx)
    q, k, v = att.in_proj(x).chunk(3, dim=-1)
    k_t = torch.softmax(k @ att.theta_k.t(), dim=1).transpose(1, 2) @ k      # over the whole window
    v_t = torch.softmax(v @ att.theta_v.t(), dim=1).transpose(1, 2) @ v
    a = torch.softmax(split_heads(q, H) @ split_heads(k_t, H).transpose(-2, -1) / math.sqrt(D // H), dim=-2)
    torch.testing.assert_close(y, att.out_proj(merge_heads(a @ split_heads(v_t, H))), atol=1e-5, rtol=1e-5)
    x2 = x.clone()
    x2[:, -1] += 1.0
    y2, _ = att(x2, ctx)
    assert not torch.allclose(y[:, 0], y2[:, 0]), "the released aggregation mixes the whole window"
    with pytest.raises(ConfigError, match="causal"):
        att(x, SequenceContext.from_item_ids(ids, causal=True, max_len=L))


def test_compat_model_trains_on_prefixes():
    model = build_model("lightsans", 30, 8, d_model=16, compat=True)
    assert model.objective == "last" and not model.causal
    assert build_model("lightsans", 30, 8, d_model=16).objective == "next"


@pytest.mark.parametrize("name", ["lightsans", "lightsans-ape"])
def test_compat_scores_do_not_depend_on_the_width_of_the_batch(name):
    """The released softmax runs over the padded window, so the model pads every input to max_len (as RecBole
    does); a batch trimmed to its longest sequence (evaluation, prefix batches) then scores a user the same."""
    torch.manual_seed(0)
    model = build_model(name, 30, 12, d_model=16, compat=True).eval()
    ids = torch.randint(1, 31, (3, 8), generator=torch.Generator().manual_seed(1))
    ids[1, :5] = 0
    full = torch.zeros(3, 12, dtype=torch.long)
    full[:, -8:] = ids
    with torch.no_grad():
        narrow, wide, alone = model.score_next(ids), model.score_next(full), model.score_next(ids[1:2, 5:])
        hidden = model(ids)
    torch.testing.assert_close(narrow, wide, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone[0], narrow[1], atol=1e-5, rtol=1e-5)
    assert hidden.shape == (3, 8, 16)


def test_prefix_samples_cover_every_prefix_once():
    train = [np.array([5, 6, 7, 8]), np.array([9]), np.array([1, 2])]
    samples = PrefixSamples.from_train(train, max_len=2)
    assert len(samples) == 3 + 0 + 1
    seen = []
    for batch in iterate_prefix_batches(samples, batch_size=3, generator=torch.Generator().manual_seed(0)):
        assert batch.targets[:, :-1].eq(0).all()
        for u, row, target in zip(batch.users.tolist(), batch.inputs.tolist(), batch.targets[:, -1].tolist()):
            prefix = [i for i in row if i]
            seen.append((u, tuple(prefix), target))
            assert len(prefix) <= 2 and row[-1] != 0
    assert sorted(seen) == sorted([(0, (5,), 6), (0, (5, 6), 7), (0, (6, 7), 8), (2, (1,), 2)])


def test_parameter_counts_follow_the_design():
    """LightSANs adds 2 k d interest parameters per layer to SASRec's attention, and the decoupled
    version a shared position table plus per layer U_Q, U_K (with biases) and a LayerNorm."""
    n_items, n, d, k, layers = 100, 50, 64, 20, 2
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    sasrec = count(build_model("sasrec", n_items, n, d_model=d, n_layers=layers))
    ape = count(build_model("lightsans-ape", n_items, n, d_model=d, n_layers=layers, k_interests=k))
    dec = count(build_model("lightsans", n_items, n, d_model=d, n_layers=layers, k_interests=k))
    assert ape - sasrec == layers * 2 * k * d
    assert dec - ape == layers * (2 * (d * d + d) + 2 * d)   # the position table replaces SASRec's, same size


@pytest.mark.parametrize("compat", [False, True])
def test_decoupled_position_attention_is_the_formula_written_out(compat):
    """softmax(LN(P) U_Q (LN(P) U_K)^T * scale) V, with the scale 1/sqrt(d_h), or the released 1/(sqrt(2) d_h)
    normalised over dim -2 without masks; causal and restricted to real items otherwise."""
    torch.manual_seed(4)
    table = nn.Embedding(L, D)
    pos = DecoupledPositionAttention(table, D, H, compat=compat)
    ids = _ids(padded=True)
    ctx = SequenceContext.from_item_ids(ids, max_len=L, causal=not compat)
    v = torch.randn(B, H, L, D // H)
    dh = D // H
    p = torch.nn.functional.layer_norm(table.weight[ctx.positions], (D,), pos.norm.weight, pos.norm.bias)
    q = (p @ pos.u_q.weight.t() + pos.u_q.bias).view(L, H, dh).transpose(0, 1)
    k = (p @ pos.u_k.weight.t() + pos.u_k.bias).view(L, H, dh).transpose(0, 1)
    logits = q @ k.transpose(-2, -1) / (math.sqrt(2.0) * dh if compat else math.sqrt(dh))
    logits = 30.0 * torch.tanh(logits / 30.0)                            # the soft cap, written out
    if compat:
        expected = torch.softmax(logits, dim=-2) @ v
    else:
        allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, None] & ids.ne(0)[:, None, None, :]
        expected = torch.softmax(logits[None].masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num() @ v
    got = pos(v, ctx)
    rows = ids.ne(0)[:, None, :, None].expand_as(got) if not compat else torch.ones_like(got, dtype=torch.bool)
    torch.testing.assert_close(got[rows], expected[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["lightsans", "lightsans-ape"])
def test_more_interests_than_positions_is_warned_about(name):
    """k interests above max_len compress nothing (and cost more than SASRec's attention): said when built;
    k = max_len, the largest meaningful rank (FPARec's limit too), builds quietly."""
    with pytest.warns(UserWarning, match="k_interests=9 is above max_len=8"):
        build_model(name, n_items=20, max_len=8, k_interests=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_model(name, n_items=20, max_len=8, k_interests=8)


@pytest.mark.parametrize("built", [False, True])
def test_interest_projections_are_glorot_uniform_or_standard_normal_as_the_released_code(built):
    """Θ (k × d) is Glorot-uniform by default (interest logits of order 1) and N(0, 1) with ``compat``; also in
    a registered model, whose backbone initialises every matrix first."""
    torch.manual_seed(0)
    if built:
        default, compat = (build_model("lightsans", 40, 50, d_model=64, k_interests=16, compat=c)
                           .blocks[0].attention for c in (False, True))
    else:
        default, compat = LowRankAttention(64, H, 16), LowRankAttention(64, H, 16, compat=True)
    bound = math.sqrt(6 / (16 + 64))
    for theta in (default.theta_k, default.theta_v):
        assert theta.abs().max() <= bound and theta.std() > 0.8 * bound / math.sqrt(3)
    for theta in (compat.theta_k, compat.theta_v):
        assert 0.9 < theta.std() < 1.1


def test_the_attention_dropout_drops_interest_weights_in_training_only():
    torch.manual_seed(0)
    att = LowRankAttention(D, H, K, attn_dropout=0.5)
    ctx, x = SequenceContext.from_item_ids(_ids(), max_len=L), torch.randn(B, L, D)
    assert not torch.allclose(att.train()(x, ctx)[0], att(x, ctx)[0])
    torch.testing.assert_close(att.eval()(x, ctx)[0], att(x, ctx)[0])
    no_dropout = LowRankAttention(D, H, K, attn_dropout=0.0)
    no_dropout.load_state_dict(att.state_dict())
    torch.testing.assert_close(no_dropout.train()(x, ctx)[0], att.eval()(x, ctx)[0])
