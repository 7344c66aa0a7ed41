"""RKSA: the skew-normal sampler against its closed form, the correlation matrix, the causal shape
parameter, the listwise loss, the co-occurrence table, and the reduction to dot-product attention."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.attention import SequenceContext
from tutorial_lib.attention.kernelized import (
    JITTER,
    CooccurrenceProvider,
    KernelizedAttention,
    causal_shape_ratio,
    counting_kernel,
    exact_skew_normal_covariance,
    exact_skew_normal_delta,
    exact_skew_normal_sample,
    listwise_cooccurrence_loss,
    skew_normal_covariance,
    skew_normal_mean,
    skew_normal_sample,
    valid_correlation,
)
from tutorial_lib.data import leave_one_out
from tutorial_lib.data.cooccurrence import CooccurrenceTable
from tutorial_lib.data.dataset import SequenceDataset
from tutorial_lib.data.split import LeaveOneOutSplit
from tutorial_lib.errors import ConfigError
from tutorial_lib.models import build_model
from written_out import allowed_by_loops

D, L = 16, 7


def _random_correlation(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n + 2, generator=g, dtype=torch.float64)
    cov = a @ a.t()
    s = cov.diagonal().rsqrt()
    return cov * s[:, None] * s[None, :]


def test_sampler_matches_closed_form_mean_and_covariance():
    n, draws = 4, 400_000
    psi = _random_correlation(n)
    xi = torch.tensor([0.5, -1.0, 0.0, 2.0], dtype=torch.float64)
    omega = torch.tensor([1.0, 0.5, 2.0, 0.3], dtype=torch.float64)
    delta = torch.tensor([0.0, 0.5, 0.9, -0.7], dtype=torch.float64)
    chol = torch.linalg.cholesky(psi)
    g = torch.Generator().manual_seed(0)
    z = skew_normal_sample(xi.expand(draws, n), omega.expand(draws, n), delta.expand(draws, n), chol, g)
    mean, cov = z.mean(0), torch.cov(z.t())
    torch.testing.assert_close(mean, skew_normal_mean(xi, omega, delta), atol=0.01, rtol=0.0)
    torch.testing.assert_close(cov, skew_normal_covariance(omega, delta, psi), atol=0.02, rtol=0.02)
    # and it is skewed exactly where δ != 0
    skew = ((z - mean) ** 3).mean(0) / z.var(0) ** 1.5
    assert abs(skew[0]) < 0.02 and skew[2] > 0.3 and skew[3] < -0.1


def test_gradients_flow_through_the_sample():
    """Reparameterised: with the noise fixed (the generator re-seeded on every call), the sample is a smooth
    function of ξ, ω, δ and the Cholesky factor, and its analytic gradients match finite differences."""
    chol = torch.linalg.cholesky(_random_correlation(4))
    g = torch.Generator().manual_seed(0)
    xi = torch.randn(2, 4, generator=g, dtype=torch.float64)
    omega = torch.rand(2, 4, generator=g, dtype=torch.float64) + 0.5
    delta = torch.rand(2, 4, generator=g, dtype=torch.float64) * 0.9

    def sample(xi, omega, delta, chol):
        return skew_normal_sample(xi, omega, delta, chol, torch.Generator().manual_seed(1))

    inputs = tuple(t.clone().requires_grad_() for t in (xi, omega, delta, chol))
    assert torch.autograd.gradcheck(sample, inputs)
    z = sample(*inputs)
    (z ** 2).sum().backward()
    for t in inputs:
        assert t.grad.abs().sum() > 0


def _layer(kernels: str = "ciu", n_users: int = 3) -> tuple[KernelizedAttention, CooccurrenceProvider]:
    torch.manual_seed(0)
    provider = CooccurrenceProvider()
    provider.prepare(LeaveOneOutSplit([np.array([1, 2, 3, 4, 2]), np.array([2, 3, 5]), np.array([6, 1, 2])],
                                      np.zeros(3, np.int64), np.zeros(3, np.int64), 8))
    return KernelizedAttention(D, 1, provider, kernels), provider


def _ctx(ids: torch.Tensor, **kw) -> SequenceContext:
    user = torch.randn(ids.shape[0], D)
    return SequenceContext.from_item_ids(ids, max_len=L, user=user, **kw)


@pytest.mark.parametrize("kernels", ["c", "i", "u", "ci", "ciu"])
def test_correlation_is_valid_with_repeats_and_padding(kernels):
    att, provider = _layer(kernels)
    ids = torch.tensor([[0, 0, 1, 2, 2, 2, 3],      # padding and a repeated item
                        [4, 4, 4, 4, 4, 4, 4],      # one item only
                        [1, 2, 3, 4, 5, 6, 7]])
    ctx = _ctx(ids)
    psi = att.correlation(torch.randn(3, L, D), ctx, provider.batch(ctx))
    torch.testing.assert_close(psi, psi.transpose(1, 2))
    torch.testing.assert_close(psi.diagonal(dim1=1, dim2=2), torch.ones(3, L))
    assert torch.linalg.eigvalsh(psi.double()).min() > 1e-4               # positive definite
    assert (psi[0, :2, 2:] == 0).all()                                      # padding is uncorrelated
    torch.linalg.cholesky(psi)


@pytest.mark.parametrize("kernels", ["i", "u", "ciu"])
def test_correlation_values_match_the_written_out_kernels(kernels):
    """ψ's entries, not only its validity: x̂ x̂ᵀ (item), cos(g ⊙ x̂_j, g ⊙ x̂_l) with g = W_s u (user), the
    mixture r = softmax(W_u u + b_u) over the chosen kernels, padding as the identity, then (ψ + εI)/(1 + ε)."""
    att, provider = _layer(kernels)
    ids = torch.tensor([[0, 0, 1, 2, 2, 2, 3], [1, 2, 3, 4, 5, 6, 7]])
    ctx = _ctx(ids)
    x = torch.randn(2, L, D)
    stats = provider.batch(ctx)
    with torch.no_grad():
        psi = att.correlation(x, ctx, stats)
        xn = x / x.norm(dim=-1, keepdim=True)
        gx = att.user_gate(ctx.user)[:, None, :] * xn if "u" in kernels else None
        gx = gx / gx.norm(dim=-1, keepdim=True) if gx is not None else None
        parts = {"c": provider.counting(stats), "i": xn @ xn.transpose(1, 2),
                 "u": gx @ gx.transpose(1, 2) if gx is not None else None}
        if len(kernels) == 1:
            mixed = parts[kernels]
        else:
            r = torch.softmax(ctx.user @ att.kernel_mix.weight.T + att.kernel_mix.bias, dim=-1)
            mixed = sum(r[:, i, None, None] * parts[kind] for i, kind in enumerate(kernels))
    want = torch.empty(2, L, L)
    for b in range(2):
        for j in range(L):
            for l in range(L):
                real = ids[b, j] > 0 and ids[b, l] > 0
                want[b, j, l] = mixed[b, j, l] if real else float(j == l)
    want = (want + JITTER * torch.eye(L)) / (1 + JITTER)
    torch.testing.assert_close(psi, want, atol=1e-5, rtol=1e-5)


def test_counting_kernel():
    cooc = torch.tensor([[[4.0, 2.0, 0.0], [2.0, 3.0, 1.0], [0.0, 1.0, 0.0]]])
    counts = torch.tensor([[4.0, 3.0, 0.0]])
    k = counting_kernel(cooc, counts)
    torch.testing.assert_close(k, torch.tensor([[[1.0, 4 / 12, 0.0], [4 / 12, 1.0, 0.0], [0.0, 0.0, 1.0]]]))


def _naive_shape(cooc: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    B, n, _ = cooc.shape
    out = torch.zeros(B, n, n)
    for b in range(B):
        for t in range(n):
            keys = [k for k in range(t + 1) if valid[b, k]]
            if not valid[b, t] or not keys:
                continue
            c = cooc[b].clone()
            for k in keys:                       # the diagonal, as seen from row t
                others = [l for l in keys if l != k]
                c[k, k] = sum(c[k, l] for l in others) / max(len(others), 1)
            a = torch.tensor([sum(c[j, k] * c[k, t] for k in keys) if j in keys else 0.0 for j in range(n)])
            out[b, t] = a / a.max() if a.max() > 0 else a
    return out


def test_shape_ratio_matches_written_out_eq_10_and_is_causal():
    g = torch.Generator().manual_seed(2)
    c = torch.randint(0, 6, (2, L, L), generator=g).float()
    c = c + c.transpose(1, 2)
    valid = torch.ones(2, L, dtype=torch.bool)
    valid[1, :2] = False
    c = c * valid[:, :, None] * valid[:, None, :]
    got = causal_shape_ratio(c, valid)
    torch.testing.assert_close(got, _naive_shape(c, valid), atol=1e-5, rtol=1e-5)
    c2 = c.clone()
    c2[:, -1, :-1] += 5
    c2[:, :-1, -1] += 5
    torch.testing.assert_close(causal_shape_ratio(c2, valid)[:, :-1], got[:, :-1])


def test_listwise_loss_prefers_psi_that_ranks_like_cooccurrence():
    cooc = torch.zeros(1, 4, 4)
    cooc[0, 3, :3] = torch.tensor([10.0, 1.0, 0.0])
    cooc = cooc + cooc.transpose(1, 2)
    valid = torch.ones(1, 4, dtype=torch.bool)
    good = torch.eye(4)[None].clone()
    good[0, 3, :3] = torch.tensor([0.9, 0.1, 0.0])
    bad = torch.eye(4)[None].clone()
    bad[0, 3, :3] = torch.tensor([0.0, 0.1, 0.9])
    assert listwise_cooccurrence_loss(good, cooc, valid) < listwise_cooccurrence_loss(bad, cooc, valid)
    assert listwise_cooccurrence_loss(good, torch.zeros_like(cooc), valid) == 0


def test_listwise_loss_value_written_out():
    """ListNet top-1, averaged over the rows t with at least two earlier real keys, one of them co-occurring:
    -Σ_{j<t} softmax(log(1 + C_t,<t))_j log softmax(ψ_t,<t / τ)_j."""
    g = torch.Generator().manual_seed(5)
    cooc = torch.randint(0, 4, (2, 5, 5), generator=g).float()
    cooc = cooc + cooc.transpose(1, 2)
    cooc[0, 2, :2] = cooc[0, :2, 2] = 0.0                                  # row 2 of sequence 0: nothing co-occurs
    psi = torch.rand(2, 5, 5, generator=g)
    valid = torch.tensor([[True] * 5, [False, True, True, True, True]])
    per_row = []
    for b in range(2):
        for t in range(5):
            keys = [j for j in range(t) if valid[b, j]]
            if not valid[b, t] or len(keys) < 2 or cooc[b, t, keys].sum() == 0:
                continue
            target = torch.softmax(torch.log1p(cooc[b, t, keys]), 0)
            per_row.append(-(target * torch.log_softmax(psi[b, t, keys] / 0.1, 0)).sum())
    assert len(per_row) == 4                                               # rows 3, 4 of each sequence
    got = listwise_cooccurrence_loss(psi, cooc, valid, tau=0.1)
    assert got.item() == pytest.approx(torch.stack(per_row).mean().item(), rel=1e-5)


def test_zero_scale_reduces_to_dot_product_attention():
    att, provider = _layer()
    att.eval()
    with torch.no_grad():
        att.scale_qk.weight.zero_()                                           # Ω's bilinear form = -9 d / sqrt(d)
        att.scale_qk.bias[:D].fill_(3.0)
        att.scale_qk.bias[D:].fill_(-3.0)                                     # softplus(-36) ~ 0: Ω -> 1e-4
    ids = torch.tensor([[0, 1, 2, 3, 4, 2, 1]])
    x = torch.randn(1, L, D)
    ctx = _ctx(ids, need_weights=True)
    _, w = att(x, ctx)
    q, k, _ = att.qkv(x).chunk(3, dim=-1)
    logits = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~ctx.allowed()[:, 0], float("-inf"))
    torch.testing.assert_close(w[:, 0], torch.softmax(logits, -1), atol=1e-3, rtol=1e-3)
    att.train()
    torch.manual_seed(3)
    _, w_train = att(x, _ctx(ids, need_weights=True))
    torch.testing.assert_close(w_train[:, 0], torch.softmax(logits, -1), atol=1e-3, rtol=1e-3)


def _written_out_rksa_weights(att: KernelizedAttention, x: torch.Tensor, ids: torch.Tensor, cooc: torch.Tensor,
                              shape_ratio: torch.Tensor) -> torch.Tensor:
    """Evaluation-mode RKSA weights of one head written out: softmax over allowed keys of
    Ξ + Ω δ sqrt(2/π), with Ξ = q kᵀ/sqrt(d), Ω = softplus(a bᵀ/sqrt(d)) + 1e-4, α = softplus(c eᵀ/sqrt(d)) ᾱ."""
    q, k, _ = att.qkv(x).chunk(3, dim=-1)
    a, b = att.scale_qk(x).chunk(2, dim=-1)
    c, e = att.shape_qk(x).chunk(2, dim=-1)
    xi = q @ k.transpose(1, 2) / math.sqrt(D)
    omega = torch.log1p(torch.exp(a @ b.transpose(1, 2) / math.sqrt(D))) + 1e-4
    alpha = torch.log1p(torch.exp(c @ e.transpose(1, 2) / math.sqrt(D))) * shape_ratio
    delta = alpha / torch.sqrt(1 + alpha ** 2)
    z = xi + omega * delta * math.sqrt(2 / math.pi)
    return torch.softmax(z.masked_fill(~allowed_by_loops(ids), float("-inf")), dim=-1)


def test_evaluation_weights_match_the_written_out_layer():
    """Ordinary Ω and α (not driven to zero): the layer's mean logits Ξ + Ω δ sqrt(2/π) with the shape ratio
    ᾱ of Eq. 10 written out (``_naive_shape``) — and the shape ratio matters, so dropping it would fail."""
    att, provider = _layer()
    att.eval()
    with torch.no_grad():
        att.shape_qk.bias.fill_(1.0)                                          # α of order one: δ far from 0
    ids = torch.tensor([[0, 1, 2, 3, 4, 2, 1], [5, 6, 7, 8, 1, 2, 3]])
    x = torch.randn(2, L, D)
    ctx = _ctx(ids, need_weights=True)
    out, w = att(x, ctx)
    cooc = provider.batch(ctx)["cooc"]
    want = _written_out_rksa_weights(att, x, ids, cooc, _naive_shape(cooc, ids > 0))
    torch.testing.assert_close(w[:, 0], want, atol=1e-5, rtol=1e-5)
    v = att.qkv(x).chunk(3, dim=-1)[2]
    torch.testing.assert_close(out, att.out_proj(want @ v), atol=1e-5, rtol=1e-5)
    without_shape = _written_out_rksa_weights(att, x, ids, cooc, (ids > 0)[:, None, :].float().expand(-1, L, -1))
    assert (w[:, 0] - without_shape).abs().max() > 1e-3


@pytest.mark.parametrize("options", [{}, {"construction": "exact"}, {"shape_counts": "normalized"}])
def test_training_sample_is_causal_given_the_noise(options):
    model = build_model("rksa", 8, L, n_users=3, d_model=D, dropout=0.0, **options)
    model.prepare(LeaveOneOutSplit([np.array([1, 2, 3, 4, 2]), np.array([2, 3, 5]), np.array([6, 1, 2])],
                                   np.zeros(3, np.int64), np.zeros(3, np.int64), 8))
    model.train()
    ids = torch.tensor([[0, 1, 2, 3, 4, 2, 1], [5, 6, 7, 8, 1, 2, 3]])
    ids2 = ids.clone()
    ids2[:, -2:] = torch.tensor([[7, 7], [8, 8]])
    users = torch.tensor([0, 2])
    torch.manual_seed(4)
    a = model(ids, users=users)
    torch.manual_seed(4)
    b = model(ids2, users=users)
    torch.testing.assert_close(a[:, :-2][ids[:, :-2] > 0], b[:, :-2][ids[:, :-2] > 0], atol=1e-5, rtol=1e-5)
    assert model.auxiliary_loss() is not None and torch.isfinite(model.auxiliary_loss())
    a.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    for block in model.blocks:                                             # the sample reaches Ω and α
        for proj in (block.attention.scale_qk, block.attention.shape_qk):
            assert proj.weight.grad is not None and proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("options, at_evaluation", [({}, 0), ({"kernels": "iu"}, 0), ({"construction": "exact"}, 1),
                                                    ({"shape_counts": "normalized"}, 1)])
def test_the_counting_kernel_is_built_once_per_batch_and_only_when_read(monkeypatch, options, at_evaluation):
    import tutorial_lib.attention.kernelized as kernelized

    calls = []
    real = kernelized.counting_kernel
    monkeypatch.setattr(kernelized, "counting_kernel", lambda *a: calls.append(1) or real(*a))
    model = build_model("rksa", 8, L, n_users=3, d_model=D, **options)   # two blocks share the batch's lookups
    model.prepare(LeaveOneOutSplit([np.array([1, 2, 3, 4, 2]), np.array([2, 3, 5]), np.array([6, 1, 2])],
                                   np.zeros(3, np.int64), np.zeros(3, np.int64), 8))
    ids, users = torch.tensor([[0, 1, 2, 3, 4, 2, 1], [5, 6, 7, 8, 1, 2, 3]]), torch.tensor([0, 2])
    with torch.no_grad():
        model.eval()(ids, users=users)
    assert len(calls) == at_evaluation
    calls.clear()
    model.train()(ids, users=users)
    assert len(calls) == (0 if options.get("kernels") == "iu" else 1)


def test_last_row_only_is_rksa_on_the_last_row_and_dot_product_elsewhere():
    """``stochastic_rows="last"`` (docs/methods.md A1, option a): the last query row equals the default layer's
    last row, every other row is plain dot-product attention, and only the last row is noisy in training."""
    full, provider = _layer()
    last = KernelizedAttention(D, 1, provider, "ciu", stochastic_rows="last")
    last.load_state_dict(full.state_dict())
    ids = torch.tensor([[0, 1, 2, 3, 4, 2, 1], [5, 6, 7, 8, 1, 2, 3]])
    x = torch.randn(2, L, D)
    ctx = _ctx(ids, need_weights=True)
    full.eval(), last.eval()
    _, w_full = full(x, ctx)
    _, w_last = last(x, ctx)
    torch.testing.assert_close(w_last[:, :, -1], w_full[:, :, -1])
    q, k, _ = full.qkv(x).chunk(3, dim=-1)
    logits = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~ctx.allowed()[:, 0], float("-inf"))
    dot = torch.softmax(logits, -1)
    torch.testing.assert_close(w_last[:, 0, :-1][ids[:, :-1] > 0], dot[:, :-1][ids[:, :-1] > 0])
    assert not torch.allclose(w_full[:, 0, -2], dot[:, -2])                  # the default layer differs there
    last.train()
    torch.manual_seed(5)
    out_a, w_a = last(x, ctx)
    torch.manual_seed(6)
    out_b, w_b = last(x, ctx)
    torch.testing.assert_close(w_a[:, :, :-1], w_b[:, :, :-1])               # deterministic rows
    assert not torch.allclose(w_a[:, :, -1], w_b[:, :, -1])                  # the sampled row
    out_a.sum().backward()
    assert last.scale_qk.weight.grad.abs().sum() > 0 and last.shape_qk.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="stochastic_rows"):
        KernelizedAttention(D, 1, provider, "ciu", stochastic_rows="first")
    model = build_model("rksa", 8, L, n_users=3, d_model=D, stochastic_rows="last")
    assert all(block.attention.stochastic_rows == "last" for block in model.blocks)


def test_cooccurrence_counts_training_items_only_and_backends_agree():
    seqs = [np.array([1, 2, 3, 9, 8]), np.array([2, 3, 4, 7, 6]), np.array([1, 3, 5, 5])]
    split = leave_one_out(SequenceDataset("t", seqs, 9))
    dense, sparse = CooccurrenceTable(split.train, 9, dense=True), CooccurrenceTable(split.train, 9, dense=False)
    a = torch.tensor([1, 2, 3, 3, 9, 0, 1, 3, 0, 9])
    b = torch.tensor([3, 3, 3, 1, 8, 1, 4, 0, 0, 0])                      # padding (0) on either side, or both
    torch.testing.assert_close(dense.pair_counts(a, b), sparse.pair_counts(a, b))
    assert dense.pair_counts(a, b).tolist() == [2.0, 2.0, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert dense.item_counts(torch.tensor([9, 8, 6, 3])).tolist() == [0.0, 0.0, 0.0, 3.0]  # valid/test never counted
    ids = torch.tensor([[0, 1, 2, 3]])
    assert dense.block(ids)[0].tolist() == [[0, 0, 0, 0], [0, 2, 1, 2], [0, 1, 2, 2], [0, 2, 2, 3]]



@pytest.mark.parametrize("dense", [True, False])
def test_cooccurrence_lookups_refuse_ids_outside_the_catalogue(dense):
    """A negative id would wrap around the dense matrix and an id above n_items would hit another pair's sparse
    key: both must fail with the range, not return a count."""
    table = CooccurrenceTable([np.array([1, 2, 3]), np.array([2, 3])], 3, dense=dense)
    assert table.pair_counts(torch.tensor([2, 0]), torch.tensor([3, 3])).tolist() == [2.0, 0.0]
    for bad in (-1, 4):
        with pytest.raises(ValueError, match=rf"item id {bad} is outside 0\.\.3"):
            table.pair_counts(torch.tensor([1, bad]), torch.tensor([2, 2]))
        with pytest.raises(ValueError, match=rf"item id {bad} is outside"):
            table.pair_counts(torch.tensor([2, 2]), torch.tensor([bad, 1]))
        with pytest.raises(ValueError, match=rf"item id {bad} is outside"):
            table.block(torch.tensor([[0, 1, bad]]))
        with pytest.raises(ValueError, match=rf"item id {bad} is outside"):
            table.item_counts(torch.tensor([bad]))
    assert table.block(torch.zeros(0, 4, dtype=torch.long)).shape == (0, 4, 4)

def test_bad_settings():
    provider = CooccurrenceProvider()
    with pytest.raises(ConfigError, match="kernels"):
        KernelizedAttention(D, 1, provider, "cx")
    with pytest.raises(ConfigError, match="item_kernel"):
        KernelizedAttention(D, 1, provider, "ci", item_kernel="poly")
    with pytest.raises(ConfigError, match="n_users"):
        build_model("rksa", 8, L)
    model = build_model("rksa-c", 8, L)                                       # the counting kernel alone needs no user
    assert model.user_embedding is None
    with pytest.raises(ConfigError, match="prepare"):
        model(torch.tensor([[1, 2, 3]]))


def test_kernel_subset_models_are_rksa_with_their_kernels():
    from tutorial_lib.models.registry import get_model_entry

    assert get_model_entry("rksa-iu").preset_of() == ("rksa", {"kernels": "iu"})
    assert get_model_entry("rksa").preset_of() == ("rksa", {})
    assert get_model_entry("sasrec").preset_of() == ("sasrec", {})


def test_leave_user_out_counts_only_the_other_users():
    seqs = [np.array([1, 2, 3, 4, 8]), np.array([2, 3, 4, 7, 6]), np.array([1, 3, 5, 5])]
    split = leave_one_out(SequenceDataset("t", seqs, 9))
    train_sets = [set(s.tolist()) for s in split.train]                   # [1,2,3], [2,3,4], [1,3]

    def others(u: int, a: int, b: int) -> float:                          # written out: users v != u only
        return float(sum(a in s and b in s for v, s in enumerate(train_sets) if v != u and a and b))

    provider = CooccurrenceProvider(leave_user_out=True)
    provider.prepare(split)
    users = torch.tensor([0, 0, 1])
    ids = torch.tensor([[0, 1, 2, 3],                                     # user 0's training window
                        [1, 2, 3, 4],                                     # user 0's test input: + validation item 4
                        [0, 2, 3, 4]])
    stats = provider.batch(SequenceContext.from_item_ids(ids, users=users))
    want = torch.tensor([[[others(int(u), a, b) for b in row] for a in row] for u, row in zip(users, ids.tolist())])
    torch.testing.assert_close(stats["cooc"], want)
    assert stats["cooc"][1, 3].tolist() == [0.0, 1.0, 1.0, 1.0]           # the validation item keeps every count
    counts = torch.tensor([[others(int(u), a, a) for a in row] for u, row in zip(users, ids.tolist())])
    torch.testing.assert_close(provider.counting(stats), counting_kernel(want, counts))
    plain = CooccurrenceProvider()
    plain.prepare(split)
    assert plain.batch(SequenceContext.from_item_ids(ids[:1]))["cooc"][0, 1, 3] == 2.0   # user 0 counted itself
    with pytest.raises(ConfigError, match="users="):
        provider.batch(SequenceContext.from_item_ids(ids))


def test_leave_user_out_model_is_called_with_users():
    from tutorial_lib.models.backbone import user_inputs

    seqs = [np.array([1, 2, 3, 4, 8]), np.array([2, 3, 4, 7, 6]), np.array([1, 3, 5, 5])]
    split = leave_one_out(SequenceDataset("t", seqs, 9))
    model = build_model("rksa-c", 9, L, leave_user_out=True)               # no user embedding, yet needs users
    model.prepare(split)
    users = torch.tensor([0, 1])
    assert model.user_embedding is None and user_inputs(model, users) == {"users": users}
    ids = torch.tensor([[0, 1, 2, 3], [0, 2, 3, 4]])
    assert model(ids, **user_inputs(model, users)).shape == (2, 4, model.d_model)
    with pytest.raises(ConfigError, match="users="):
        model(ids)
    assert user_inputs(build_model("rksa-c", 9, L), users) == {}            # the default needs no users


def test_sample_gradient_is_finite_when_delta_rounds_to_one():
    alpha = torch.tensor([[0.5, 5000.0, 20.0]], requires_grad=True)
    chol = torch.linalg.cholesky(_random_correlation(3).float())
    delta = alpha / torch.sqrt(1.0 + alpha ** 2)                           # 1.0 in float32 for α = 5000
    z = skew_normal_sample(torch.zeros(1, 3), torch.ones(1, 3), delta, chol, torch.Generator().manual_seed(0),
                           spread=torch.rsqrt(1.0 + alpha ** 2))
    z.sum().backward()
    assert torch.isfinite(alpha.grad).all()
    plain = torch.tensor([[0.5, 2.0, 3.0]])
    d = plain / torch.sqrt(1 + plain ** 2)
    a = skew_normal_sample(torch.zeros(1, 3), torch.ones(1, 3), d, chol, torch.Generator().manual_seed(0))
    b = skew_normal_sample(torch.zeros(1, 3), torch.ones(1, 3), d, chol, torch.Generator().manual_seed(0),
                           spread=torch.rsqrt(1 + plain ** 2))
    torch.testing.assert_close(a, b)                                       # the same sample where both are exact


def test_evaluation_does_not_build_psi_unless_weights_are_asked(monkeypatch):
    att, provider = _layer("ciu")
    att.eval()
    calls = []
    original = KernelizedAttention.correlation
    monkeypatch.setattr(KernelizedAttention, "correlation",
                        lambda self, *a: calls.append(1) or original(self, *a))
    ids = torch.tensor([[0, 0, 1, 2, 3, 4, 5]])
    x = torch.randn(1, L, D)
    with torch.no_grad():
        out, _ = att(x, _ctx(ids))
        assert calls == [] and att.last_psi is None
        out2, _ = att(x, _ctx(ids, need_weights=True))
    assert calls == [1] and att.last_psi is not None
    torch.testing.assert_close(out, out2)


# ----------------------------------------------------------------------------- A6: the exact construction
def _sign_flip_skew_normal(psi: torch.Tensor, alpha: torch.Tensor, draws: int, seed: int) -> torch.Tensor:
    """SN(0, ψ, α) by its definition, independently of the additive construction: ``y ~ N(0, ψ)``, ``u ~ N(0, 1)``,
    ``z = y`` if ``u < αᵀy`` else ``-y`` (the density ``2 φ(z; ψ) Φ(αᵀz)``)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(draws, psi.shape[0], generator=g, dtype=psi.dtype) @ torch.linalg.cholesky(psi).t()
    u = torch.randn(draws, generator=g, dtype=psi.dtype)
    return torch.where((u < y @ alpha)[:, None], y, -y)


def test_exact_sampler_is_the_skew_normal_of_eq_4():
    """The exact construction draws SN(ξ, ωψω, α): its mean, covariance and third moments agree with the closed
    form and with the definition's sign-flip sampler (which shares no code with it)."""
    n, draws = 4, 400_000
    psi = _random_correlation(n, seed=3)
    xi = torch.tensor([0.5, -1.0, 0.0, 2.0], dtype=torch.float64)
    omega = torch.tensor([1.0, 0.5, 2.0, 0.3], dtype=torch.float64)
    alpha = torch.tensor([2.0, 0.0, 1.5, -1.0], dtype=torch.float64)
    z = exact_skew_normal_sample(xi.expand(draws, n), omega.expand(draws, n), alpha.expand(draws, n), psi,
                                 torch.linalg.cholesky(psi), torch.Generator().manual_seed(0))
    delta = exact_skew_normal_delta(alpha[None], psi)[0][0]
    want_delta = psi @ alpha / torch.sqrt(1 + alpha @ psi @ alpha)
    torch.testing.assert_close(delta, want_delta)
    torch.testing.assert_close(z.mean(0), skew_normal_mean(xi, omega, delta), atol=0.01, rtol=0.0)
    torch.testing.assert_close(torch.cov(z.t()), exact_skew_normal_covariance(omega, delta, psi), atol=0.02,
                               rtol=0.02)
    ref = xi + omega * _sign_flip_skew_normal(psi, alpha, draws, seed=1)
    torch.testing.assert_close(z.mean(0), ref.mean(0), atol=0.01, rtol=0.0)
    third = ((z - z.mean(0)) ** 3).mean(0) / z.var(0) ** 1.5
    third_ref = ((ref - ref.mean(0)) ** 3).mean(0) / ref.var(0) ** 1.5
    torch.testing.assert_close(third, third_ref, atol=0.03, rtol=0.0)
    assert third.abs().max() > 0.1                                         # skewed, so the comparison has teeth


def test_exact_and_eq_13_agree_where_they_must_and_differ_elsewhere():
    """With ψ = I and one key skewed, both give δ_j = α_j / sqrt(1 + α_j^2); with correlated keys the exact δ
    spreads the skew to the keys correlated with the skewed one, which Eq. 13 does not."""
    alpha = torch.tensor([[0.0, 1.7, 0.0]], dtype=torch.float64)
    delta, quad = exact_skew_normal_delta(alpha, torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close(delta, alpha / torch.sqrt(1 + alpha ** 2))
    assert quad.item() == pytest.approx(1.7 ** 2)
    psi = torch.tensor([[1.0, 0.6, 0.0], [0.6, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    spread, _ = exact_skew_normal_delta(alpha, psi)
    assert spread[0, 0] > 0.3 and spread[0, 2] == 0


def test_exact_sample_gradients_match_finite_differences():
    psi = _random_correlation(4, seed=1)
    g = torch.Generator().manual_seed(0)
    xi = torch.randn(2, 4, generator=g, dtype=torch.float64)
    omega = torch.rand(2, 4, generator=g, dtype=torch.float64) + 0.5
    alpha = torch.rand(2, 4, generator=g, dtype=torch.float64) * 2

    def sample(xi, omega, alpha, psi):
        return exact_skew_normal_sample(xi, omega, alpha, psi, torch.linalg.cholesky(psi),
                                        torch.Generator().manual_seed(1))

    inputs = tuple(t.clone().requires_grad_() for t in (xi, omega, alpha, psi))
    assert torch.autograd.gradcheck(lambda a, b, c, p: sample(a, b, c, (p + p.t()) / 2), inputs)
    sample(*inputs).pow(2).sum().backward()
    assert all(t.grad.abs().sum() > 0 for t in inputs)


def test_exact_layer_evaluates_the_exact_mean():
    """``construction="exact"``: at evaluation the logits are Ξ + Ω δ sqrt(2/π) with δ = ψα / sqrt(1 + αᵀψα) (ψ is
    built for it). (Its causality: ``test_training_sample_is_causal_given_the_noise``.)"""
    att, provider = _layer()
    exact = KernelizedAttention(D, 1, provider, "ciu", construction="exact")
    exact.load_state_dict(att.state_dict())
    with torch.no_grad():
        exact.shape_qk.bias.fill_(1.0)
    exact.eval()
    ids = torch.tensor([[0, 1, 2, 3, 4, 2, 1], [5, 6, 7, 8, 1, 2, 3]])
    x = torch.randn(2, L, D)
    ctx = _ctx(ids, need_weights=True)
    with torch.no_grad():
        _, w = exact(x, ctx)
        q, k, _ = exact.qkv(x).chunk(3, dim=-1)
        a, b = exact.scale_qk(x).chunk(2, dim=-1)
        c, e = exact.shape_qk(x).chunk(2, dim=-1)
        alpha = F.softplus(c @ e.transpose(1, 2) / math.sqrt(D)) * provider.batch(ctx)["shape"]
        psi = exact.correlation(x, ctx, provider.batch(ctx))
        delta = torch.stack([torch.stack([psi[i] @ alpha[i, t] / torch.sqrt(1 + alpha[i, t] @ psi[i] @ alpha[i, t])
                                          for t in range(L)]) for i in range(2)])
        z = q @ k.transpose(1, 2) / math.sqrt(D) + (F.softplus(a @ b.transpose(1, 2) / math.sqrt(D)) + 1e-4) \
            * delta * math.sqrt(2 / math.pi)
    want = torch.softmax(z.masked_fill(~allowed_by_loops(ids), float("-inf")), dim=-1)
    torch.testing.assert_close(w[:, 0], want, atol=1e-5, rtol=1e-5)
    _, w_eq13 = att.eval()(x, ctx)
    assert (w_eq13 - w).abs().max() > 1e-3                                 # a different layer, not a renaming


# ----------------------------------------------------------------------------- A9: normalized shape counts
def test_normalized_shape_counts_use_the_counting_kernel():
    seqs = [np.array([1, 2, 3, 4, 8]), np.array([2, 3, 4, 7, 6]), np.array([1, 3, 5, 5]), np.array([3, 4, 2, 1]),
            np.array([3, 6, 7, 8]), np.array([3, 5, 6, 1]), np.array([1, 2, 6, 7])]       # item 3 popular
    split = leave_one_out(SequenceDataset("t", seqs, 9))
    ids = torch.tensor([[0, 1, 2, 3, 4], [2, 3, 4, 1, 5]])
    ctx = SequenceContext.from_item_ids(ids)
    raw, normalized = CooccurrenceProvider(), CooccurrenceProvider(shape_counts="normalized")
    raw.prepare(split), normalized.prepare(split)
    a, b = raw.batch(ctx), normalized.batch(SequenceContext.from_item_ids(ids))
    torch.testing.assert_close(b["cooc"], a["cooc"])
    torch.testing.assert_close(b["shape"], causal_shape_ratio(raw.counting(a), ids > 0))
    assert (b["shape"] - a["shape"]).abs().max() > 1e-3
    with pytest.raises(ConfigError, match="shape_counts"):
        CooccurrenceProvider(shape_counts="cosine")
    with pytest.raises(ConfigError, match="construction"):
        KernelizedAttention(D, 1, raw, "ci", construction="azzalini")
