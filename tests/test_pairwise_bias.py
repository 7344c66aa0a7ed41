"""The blocked pairwise MLP (Locker+Adapt's bias) against its broadcast form: values, gradients, blocks."""
from __future__ import annotations

import pytest
import torch

from tutorial_lib.attention.pairwise_bias import pairwise_mlp_bias


def _inputs(B=3, L=7, h=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=dtype, requires_grad=True)
            for shape in ((B, L, h), (B, L, h), (L, L, h), (h,))]


def _broadcast(rows, cols, dist, w2):
    return torch.relu(rows[:, :, None] + cols[:, None, :] + dist[None]) @ w2


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_elements", [1, 40, 10**6])        # one row per block, a few rows, one block
def test_values_and_gradients_match_the_broadcast_form(causal, block_elements):
    inputs = _inputs()
    got = pairwise_mlp_bias(*inputs, causal=causal, block_elements=block_elements)
    ref = _broadcast(*inputs)
    if causal:
        ref = ref.tril()
    torch.testing.assert_close(got, ref)
    upstream = torch.randn_like(got)
    grads = torch.autograd.grad((got * upstream).sum(), inputs)
    ref_grads = torch.autograd.grad((ref * upstream).sum(), inputs)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda *t: pairwise_mlp_bias(*t, causal=causal, block_elements=block_elements),
                                    tuple(inputs))


def test_causal_future_entries_are_zero_and_pass_no_gradient():
    inputs = _inputs(seed=1)
    out = pairwise_mlp_bias(*inputs, causal=True, block_elements=10**6)   # one block holds the whole matrix
    assert out.triu(1).eq(0).all()
    future = torch.ones_like(out).triu(1)
    grads = torch.autograd.grad((out * future).sum(), inputs, allow_unused=True)
    assert all(g is None or g.abs().max() == 0 for g in grads)


def test_float32_on_a_realistic_shape_and_shape_errors():
    rows, cols, dist, w2 = (t.detach().float() for t in _inputs(B=4, L=30, h=8, seed=2))
    torch.testing.assert_close(pairwise_mlp_bias(rows, cols, dist, w2, block_elements=500),
                               _broadcast(rows, cols, dist, w2), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="rows and cols"):
        pairwise_mlp_bias(rows, cols[:, :-1], dist, w2)
    with pytest.raises(ValueError, match="dist must be"):
        pairwise_mlp_bias(rows, cols, dist[:-1], w2)
