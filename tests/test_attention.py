"""DotProductAttention against the written-out reference, and the masks it must respect."""
from __future__ import annotations

import pytest
import torch

from tutorial_lib.attention import DotProductAttention, SequenceContext
from tutorial_lib.errors import ConfigError
from written_out import allowed_by_loops, heads, masked_softmax_attention

B, L, D, H = 3, 7, 16, 2


def _ids(padded: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (B, L), generator=g)
    if padded:
        ids[0, :3] = 0   # left padding of different lengths
        ids[1, :6] = 0   # a single valid item
    return ids


def _reference(att: DotProductAttention, x: torch.Tensor, ids: torch.Tensor, causal: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written out: the mask from loops, softmax(q kᵀ / sqrt(d_h)) v, no library helper."""
    q, k, v = (heads(t, att.n_heads) for t in att.in_proj(x).chunk(3, dim=-1))
    out, w = masked_softmax_attention(q, k, v, allowed_by_loops(ids, causal))
    return att.out_proj(out), w


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("need_weights", [False, True])
def test_matches_written_out_attention(padded, causal, need_weights):
    torch.manual_seed(0)
    att = DotProductAttention(D, H).eval()
    x = torch.randn(B, L, D)
    ids = _ids(padded)
    ctx = SequenceContext.from_item_ids(ids, causal=causal, need_weights=need_weights)
    y, w = att(x, ctx)
    ref, ref_w = _reference(att, x, ids, causal)
    assert y.shape == (B, L, D)
    valid = ids.ne(0)
    # padding queries are "finite garbage" by contract; only valid positions are compared
    torch.testing.assert_close(y[valid], ref[valid], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(y).all()
    if need_weights:
        assert w.shape == (B, H, L, L)
        torch.testing.assert_close(w, ref_w)
    else:
        assert w is None


@pytest.mark.parametrize("causal", [True, False])
def test_weights_respect_padding_and_future(causal):
    torch.manual_seed(1)
    att = DotProductAttention(D, H).eval()
    ids = _ids(padded=True)
    ctx = SequenceContext.from_item_ids(ids, causal=causal, need_weights=True)
    _, w = att(torch.randn(B, L, D), ctx)
    valid = ids.ne(0)
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    for b in range(B):
        for i in range(L):
            if not valid[b, i]:
                continue
            row = w[b, :, i]                                  # (H, L)
            torch.testing.assert_close(row.sum(-1), torch.ones(H))
            assert (row[:, ~valid[b]] == 0).all(), "a valid query attends to padding"
            if causal:
                assert (row[:, future[i]] == 0).all(), "a query attends to the future"
            allowed = valid[b] & (~future[i] if causal else torch.ones(L, dtype=torch.bool))
            assert (row[:, allowed] > 0).all()
    # non-causal: some valid query must look ahead (the causal mask is really off)
    if not causal:
        assert w[2, :, 0, 1:].sum() > 0


def test_padding_content_does_not_reach_valid_positions():
    torch.manual_seed(2)
    att = DotProductAttention(D, H).eval()
    ids = _ids(padded=True)
    x = torch.randn(B, L, D)
    x2 = x.clone()
    x2[ids.eq(0)] = 100 * torch.randn(int(ids.eq(0).sum()), D)
    for need_weights in (False, True):
        y1, _ = att(x, SequenceContext.from_item_ids(ids, need_weights=need_weights))
        y2, _ = att(x2, SequenceContext.from_item_ids(ids, need_weights=need_weights))
        torch.testing.assert_close(y1[ids.ne(0)], y2[ids.ne(0)], atol=1e-5, rtol=1e-5)


def test_causal_future_does_not_reach_past():
    torch.manual_seed(3)
    att = DotProductAttention(D, H).eval()
    ids = _ids(padded=False)
    x = torch.randn(B, L, D)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(B, L - 4, D)
    y1, _ = att(x, SequenceContext.from_item_ids(ids))
    y2, _ = att(x2, SequenceContext.from_item_ids(ids))
    torch.testing.assert_close(y1[:, :4], y2[:, :4])
    assert not torch.allclose(y1[:, 4:], y2[:, 4:])


def test_heads_must_divide_width():
    with pytest.raises(ConfigError, match="divisible"):
        DotProductAttention(10, 3)
