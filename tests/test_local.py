"""Locker's local encoders against written-out references, their reach, and the bidirectional backbone."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tutorial_lib.attention import SequenceContext, split_heads
from tutorial_lib.attention.local import ENCODERS, LocalAttention, fism_user_vectors, local_window
from tutorial_lib.data import TrainingWindows, iterate_cloze_batches
from tutorial_lib.errors import ConfigError
from tutorial_lib.models import build_model
from written_out import allowed_by_loops

B, L, D, M = 2, 9, 16, 2
DH = D // M


def _layer(encoder: str, causal: bool = True, window: int = 2, compat: bool = False) -> LocalAttention:
    torch.manual_seed(0)
    table = nn.Embedding(L, D) if encoder in ("initial", "adapt") else None
    return LocalAttention(D, M, 1, encoder, L, window, position_table=table, compat=compat, causal=causal).eval()


def _ctx(ids: torch.Tensor, causal: bool = True, x0: torch.Tensor | None = None, **kw) -> SequenceContext:
    extras = {"input_embeddings": x0 if x0 is not None else torch.randn(*ids.shape, D)}
    return SequenceContext.from_item_ids(ids, causal=causal, max_len=L, extras=extras, **kw)


def _ids() -> torch.Tensor:
    ids = torch.randint(1, 30, (B, L), generator=torch.Generator().manual_seed(1))
    ids[1, :3] = 0
    return ids


def _local_head_output(att: LocalAttention, x: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
    """The local head's output before W_O: ``(B, L, dh)``."""
    captured = {}
    handle = att.out_proj.register_forward_hook(lambda m, args, out: captured.setdefault("in", args[0]))
    att(x, ctx)
    handle.remove()
    return captured["in"][..., :DH]


@pytest.mark.parametrize("encoder", ["rnn", "conv", "win"])
def test_local_heads_only_see_their_window(encoder):
    """On the causal backbone the local head at position t reads items t-s..t only."""
    s, t = 2, 6
    att = _layer(encoder, window=s)
    ids = torch.randint(1, 30, (B, L), generator=torch.Generator().manual_seed(2))
    x = torch.randn(B, L, D)
    x2 = x.clone()
    x2[:, : t - s] += torch.randn(B, t - s, D)          # far past
    x2[:, t + 1:] += torch.randn(B, L - t - 1, D)       # future
    ctx = _ctx(ids)
    a, b = _local_head_output(att, x, ctx), _local_head_output(att, x2, ctx)
    torch.testing.assert_close(a[:, t], b[:, t])
    x3 = x.clone()
    x3[:, t - s] += 1.0                                 # the oldest item inside the window matters
    assert not torch.allclose(_local_head_output(att, x3, ctx)[:, t], a[:, t])


def test_window_mask():
    assert local_window(5, 1, causal=True).tolist()[3] == [False, False, True, True, False]
    assert local_window(5, 1, causal=False).tolist()[3] == [False, False, True, True, True]


@pytest.mark.parametrize("encoder, compat", [("rnn", False), ("conv", False), ("rnn", True)])
def test_rnn_and_conv_match_explicit_windows(encoder, compat):
    """Causal: position t reads items t-s..t. The released RNN (``compat``, bidirectional backbone) reads
    V_t..V_{t+s} instead, zero rows past the end; each window oldest first."""
    s = 2
    x, ids = torch.randn(B, L, D), _ids()
    ctx = _ctx(ids, causal=not compat)
    att = _layer(encoder, causal=not compat, window=s, compat=compat)
    got = _local_head_output(att, x, ctx)
    v = split_heads(att.in_proj(x).chunk(3, dim=-1)[2], M)[:, 0] * ids.ne(0)[..., None]
    zeros = torch.zeros(B, s, DH)
    padded = torch.cat([v, zeros] if compat else [zeros, v], dim=1)
    for t in range(L):
        window = padded[:, t: t + s + 1]
        if encoder == "rnn":
            _, h = att.grus[0](window)
            ref = h[-1]
        else:
            ref = torch.relu(torch.einsum("bkd,edk->be", window, att.convs[0].weight) + att.convs[0].bias)
        mask = ids[:, t].ne(0)
        torch.testing.assert_close(got[mask, t], ref[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoder", ["win", "adapt"])
@pytest.mark.parametrize("causal", [True, False])
def test_win_and_adapt_heads_are_their_softmax_written_out(encoder, causal):
    """The local head's output: softmax over the allowed keys of q kᵀ/sqrt(d_h), restricted to |i - j| <= s for
    ``win`` and plus the predicted bias for ``adapt``, applied to the values (padding values zeroed)."""
    s = 2
    att = _layer(encoder, causal=causal, window=s)
    x, ids = torch.randn(B, L, D), _ids()
    ctx = _ctx(ids, causal=causal)
    got = _local_head_output(att, x, ctx)
    q, k, v = (split_heads(t, M) for t in att.in_proj(x).chunk(3, dim=-1))
    v = v * ids.ne(0)[:, None, :, None]
    logits = q[:, 0] @ k[:, 0].transpose(-2, -1) / math.sqrt(DH)
    allowed = allowed_by_loops(ids, causal)
    if encoder == "win":
        near = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs() <= s
        allowed = allowed & (near | torch.eye(L, dtype=torch.bool))
    else:
        logits = logits + att._adaptive_bias(v[:, :1], ctx)[:, 0]          # the bias itself: the test below
    want = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1) @ v[:, 0]
    valid = ids.ne(0)
    torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=1e-5)


def test_initial_bias_is_an_additive_gaussian_bump():
    att = _layer("initial")
    bump = att.distance_bias[0]
    delta = torch.arange(-(L - 1), L).float()
    torch.testing.assert_close(bump, torch.exp(-delta ** 2 / 0.5))
    x, ids = torch.randn(B, L, D), _ids()
    ctx = _ctx(ids, need_weights=True)
    _, w = att(x, ctx)
    q, k, _ = (split_heads(t, M) for t in att.in_proj(x).chunk(3, dim=-1))
    logits = q[:, 0] @ k[:, 0].transpose(-2, -1) / math.sqrt(DH)
    idx = torch.arange(L)[:, None] - torch.arange(L)[None, :] + L - 1
    logits = (logits + bump[idx]).masked_fill(~ctx.allowed()[:, 0], float("-inf"))
    valid = ids.ne(0)
    torch.testing.assert_close(w[:, 0][valid], torch.softmax(logits, -1)[valid], atol=1e-5, rtol=1e-5)
    compat = _layer("initial", compat=True)
    assert compat.distance_bias[0].argmax().item() == L - 2                # peak at j = i + 1 (the code's off-by-one)


def test_initial_and_adapt_give_positions_to_global_heads_only():
    for encoder in ("initial", "adapt"):
        att = _layer(encoder)
        x, ids = torch.randn(1, L, D), torch.randint(1, 30, (1, L))
        ctx = _ctx(ids)
        q, k, v = (split_heads(t, M) for t in att.in_proj(x).chunk(3, dim=-1))
        q2, k2 = att._add_positions(q, k, ctx)
        torch.testing.assert_close(q2[:, 0], q[:, 0])                      # local head: no positions
        assert not torch.allclose(q2[:, 1], q[:, 1])                       # global head: positions added
        qc, _ = _layer(encoder, compat=True)._add_positions(q, k, ctx)
        assert not torch.allclose(qc[:, 0], q[:, 0]) and torch.allclose(qc[:, 1], q[:, 1])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("compat", [False, True])
def test_adaptive_bias_matches_the_predictor_applied_to_every_pair(causal, compat):
    att = _layer("adapt", causal=causal, compat=compat)
    x, ids = torch.randn(B, L, D), _ids()
    x0 = torch.randn(B, L, D)
    ctx = _ctx(ids, causal=causal, x0=x0)
    v = split_heads(att.in_proj(x).chunk(3, dim=-1)[2], M)[:, :1] * ids.ne(0)[:, None, :, None]
    got = att._adaptive_bias(v, ctx)[:, 0]
    user = att.user_proj(fism_user_vectors(x0, ids.ne(0), causal=causal))    # (B, L, dh)
    idx = torch.arange(L)[:, None] - torch.arange(L)[None, :] + L - 1
    inp = v[:, 0][:, :, None] + v[:, 0][:, None, :] + user[:, :, None] + att.distance_embedding[0][idx][None]
    ref = att.predictor[0](inp).squeeze(-1)                                  # the MLP on the (B, L, L, dh) input
    if causal and not compat:                        # future pairs are masked later and not computed: zero
        assert not got.triu(1).any()
        got, ref = got.tril(), ref.tril()
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_fism_user_vector_is_causal_on_the_causal_backbone():
    x = torch.randn(1, 5, 3)
    valid = torch.tensor([[False, True, True, True, True]])
    u = fism_user_vectors(x, valid, causal=True)
    torch.testing.assert_close(u[0, 2], (x[0, 1] + x[0, 2]) / math.sqrt(2))
    u_all = fism_user_vectors(x, valid, causal=False)
    torch.testing.assert_close(u_all[0, 1], x[0, 1:].sum(0) / 2.0)


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="encoder"):
        LocalAttention(D, M, 1, "lstm", L)
    with pytest.raises(ConfigError, match="n_local"):
        LocalAttention(D, M, 3, "win", L)
    with pytest.raises(ConfigError, match="window"):
        LocalAttention(D, M, 1, "win", L, window=L)
    att = _layer("rnn", compat=True, causal=True)
    with pytest.raises(ConfigError, match="forward"):
        att(torch.randn(B, L, D), _ctx(_ids()))


@pytest.mark.parametrize("name", ["bert4rec", *(f"bert4rec-locker-{e}" for e in ENCODERS)])
def test_bidirectional_models_see_the_future(name):
    model = build_model(name, 30, L, d_model=D).eval()
    assert model.objective == "cloze" and not model.causal and model.mask_id == 31
    ids = torch.randint(1, 31, (B, L), generator=torch.Generator().manual_seed(3))
    ids2 = ids.clone()
    ids2[:, -1] = (ids[:, -1] % 30) + 1
    with torch.no_grad():
        a, b = model(ids), model(ids2)
    assert not torch.allclose(a[:, 0], b[:, 0])


def test_adaptive_user_vector_leaves_out_mask_tokens(monkeypatch):
    """Released Locker: u = sum over t not in {PAD, MASK} (docs/methods.md §5.1, Adapt)."""
    import tutorial_lib.attention.local as local
    seen = []
    original = local.fism_user_vectors
    monkeypatch.setattr(local, "fism_user_vectors", lambda x, valid, causal: seen.append(valid) or original(x, valid, causal))
    model = build_model("bert4rec-locker-adapt", 30, L, d_model=D).eval()
    ids = torch.tensor([[0, 0, 0, 3, 4, 5, 7, 9]])
    inp = model.next_item_input(ids)                                       # ends with [MASK] = 31
    with torch.no_grad():
        model(inp)
    assert seen and all(v.tolist() == (inp.ne(0) & inp.ne(31)).tolist() for v in seen)


def test_a_cloze_row_without_a_drawn_mask_gets_only_its_most_recent_item_masked():
    train = [np.arange(1, 9), np.array([3, 4]), np.array([5, 6, 7])] * 20
    windows = TrainingWindows.from_train(train, max_len=6)
    g = torch.Generator().manual_seed(0)
    for batch in iterate_cloze_batches(windows, 8, g, mask_prob=1e-9, mask_id=99):     # nothing is ever drawn
        assert batch.inputs.eq(99).sum(dim=1).tolist() == [1] * len(batch.inputs)
        assert batch.inputs[:, -1].eq(99).all()
    last_unmasked = 0
    for batch in iterate_cloze_batches(windows, 8, g, mask_prob=0.5, mask_id=99):
        last_unmasked += int(batch.inputs[:, -1].ne(99).sum())
    assert last_unmasked > 0                   # a row with a drawn mask keeps its most recent item as it is


def test_cloze_prediction_appends_mask():
    model = build_model("bert4rec", 30, L, d_model=D).eval()
    full = torch.randint(1, 31, (1, L))
    assert model.next_item_input(full).tolist()[0] == full[0, 1:].tolist() + [31]
    short = full[:, -4:]
    assert model.next_item_input(short).tolist()[0] == short[0].tolist() + [31]
    assert model.output_embedding.shape[0] == 31                           # [MASK] is not a candidate


def test_cloze_batches_mask_and_target():
    train = [np.arange(1, 9), np.array([3, 4]), np.array([5, 6, 7])]
    windows = TrainingWindows.from_train(train, max_len=6)
    g = torch.Generator().manual_seed(0)
    for batch in iterate_cloze_batches(windows, 2, g, mask_prob=0.3, mask_id=99):
        masked = batch.inputs.eq(99)
        assert masked.any(dim=1).all()                                     # at least one mask per row
        assert (batch.targets.ne(0) == masked).all()                       # a target exactly where masked
        original = torch.where(masked, batch.targets, batch.inputs)
        for row in original.tolist():
            items = [i for i in row if i]
            assert any(items == list(s[-6:]) for s in train)               # the most recent max_len items
