"""Losses against brute-force references, and the negative sampler."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tutorial_lib.errors import ConfigError
from tutorial_lib.training import NegativeSampler, TrainConfig, bce_loss, full_ce_loss, sampled_softmax_loss
from tutorial_lib.training.losses import ce_chunk_rows

B, L, D, N_ITEMS = 3, 6, 8, 25


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, D, generator=g, dtype=torch.float64).float()
    items = torch.randn(N_ITEMS + 1, D, generator=g)
    targets = torch.randint(1, N_ITEMS + 1, (B, L), generator=g)
    targets[0, :2] = 0
    targets[2, :5] = 0
    return hidden, targets, items


def _brute_ce(hidden, targets, items):
    losses = []
    for b in range(B):
        for t in range(L):
            y = int(targets[b, t])
            if y == 0:
                continue
            logits = [float(hidden[b, t].double() @ items[j].double()) for j in range(1, N_ITEMS + 1)]
            m = max(logits)
            lse = m + math.log(sum(math.exp(x - m) for x in logits))
            losses.append(lse - logits[y - 1])
    return sum(losses) / len(losses)


@pytest.mark.parametrize("chunk", [1, 4, 128])
def test_full_ce_chunked_equals_plain_and_brute_force(chunk):
    hidden, targets, items = _inputs()
    h1, w1 = hidden.clone().requires_grad_(), items.clone().requires_grad_()
    h2, w2 = hidden.clone().requires_grad_(), items.clone().requires_grad_()
    plain = full_ce_loss(h1, targets, w1, chunk=None)
    chunked = full_ce_loss(h2, targets, w2, chunk=chunk)
    plain.backward()
    (chunked * 1.0).backward()
    assert chunked.item() == pytest.approx(plain.item(), abs=1e-5)
    assert plain.item() == pytest.approx(_brute_ce(hidden, targets, items), abs=1e-5)
    torch.testing.assert_close(h2.grad, h1.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w2.grad, w1.grad, atol=1e-5, rtol=1e-5)
    assert (w1.grad[0] == 0).all()       # padding is never a class
    assert (h1.grad[targets.eq(0)] == 0).all() and (h2.grad[targets.eq(0)] == 0).all()


def test_auto_chunks_are_small_on_a_cpu_and_large_on_a_gpu():
    """CPU: 128 rows (cache-sized blocks). GPU: one chunk for ML-1M-sized batches, bounded logits for large
    catalogues. An explicit setting is kept."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert ce_chunk_rows("auto", cpu, 3416) == 128
    assert ce_chunk_rows("auto", gpu, 3416) == 2**26 // 3416 >= 128 * 150      # batch 128 x 150 valid positions
    assert ce_chunk_rows("auto", gpu, 10**7) == 128                             # never below the CPU's chunk
    assert ce_chunk_rows(None, gpu, 3416) is None and ce_chunk_rows(64, gpu, 3416) == 64


@pytest.mark.parametrize("bad", [0, -4, 2.5, "all", True, np.int64(0)])
def test_a_bad_ce_chunk_is_refused(bad):
    with pytest.raises(ConfigError, match="ce_chunk"):
        TrainConfig(ce_chunk=bad)


def test_a_numpy_integer_ce_chunk_becomes_a_plain_int():
    chunk = TrainConfig(ce_chunk=np.int64(64)).ce_chunk
    assert chunk == 64 and type(chunk) is int


def test_full_ce_gradient_scales_with_upstream_gradient():
    hidden, targets, items = _inputs(1)
    h1 = hidden.clone().requires_grad_()
    h2 = hidden.clone().requires_grad_()
    full_ce_loss(h1, targets, items, chunk=None).backward()
    (3.0 * full_ce_loss(h2, targets, items, chunk=2)).backward()
    torch.testing.assert_close(h2.grad, 3.0 * h1.grad, atol=1e-5, rtol=1e-5)


def test_padding_positions_do_not_contribute():
    hidden, targets, items = _inputs()
    hidden2 = hidden.clone()
    hidden2[targets.eq(0)] = 1e3 * torch.randn(int(targets.eq(0).sum()), D)
    neg = torch.randint(1, N_ITEMS + 1, (B, L, 2), generator=torch.Generator().manual_seed(0))
    shared = torch.arange(1, 11)
    for chunk in (None, 3):
        assert full_ce_loss(hidden, targets, items, chunk) == pytest.approx(
            full_ce_loss(hidden2, targets, items, chunk).item(), abs=1e-6)
    assert bce_loss(hidden, targets, items, neg).item() == pytest.approx(bce_loss(hidden2, targets, items, neg).item())
    assert sampled_softmax_loss(hidden, targets, items, shared).item() == pytest.approx(
        sampled_softmax_loss(hidden2, targets, items, shared).item())


def test_bce_matches_formula():
    hidden, targets, items = _inputs(2)
    neg = torch.randint(1, N_ITEMS + 1, (B, L, 3), generator=torch.Generator().manual_seed(1))
    total, n = 0.0, 0
    sig = lambda x: 1.0 / (1.0 + math.exp(-x))
    for b in range(B):
        for t in range(L):
            y = int(targets[b, t])
            if y == 0:
                continue
            h = hidden[b, t].double()
            term = -math.log(sig(float(h @ items[y].double())))
            for j in neg[b, t].tolist():
                term -= math.log(1.0 - sig(float(h @ items[j].double())))
            total, n = total + term, n + 1
    assert bce_loss(hidden, targets, items, neg).item() == pytest.approx(total / n, rel=1e-5)


def test_sampled_softmax_masks_accidental_hits():
    hidden, targets, items = _inputs(3)
    negs = torch.tensor([3, 7, 11, 19])
    targets = targets.clone()
    targets[targets > 0] = 20                   # targets never among the negatives ...
    base = sampled_softmax_loss(hidden, targets, items, negs)
    # reference by hand
    mask = targets.ne(0)
    h = hidden[mask].double()
    logits = torch.cat([(h * items[20].double()).sum(-1, keepdim=True), h @ items[negs].double().t()], 1)
    ref = (torch.logsumexp(logits, 1) - logits[:, 0]).mean()
    assert base.item() == pytest.approx(ref.item(), rel=1e-5)
    # ... now a negative equals the target: masking it gives the loss without that negative
    hit = sampled_softmax_loss(hidden, targets, items, torch.tensor([3, 7, 11, 19, 20]))
    assert hit.item() == pytest.approx(base.item(), rel=1e-6)
    unmasked = torch.cat([logits, logits[:, :1]], 1)
    assert hit.item() != pytest.approx((torch.logsumexp(unmasked, 1) - unmasked[:, 0]).mean().item(), rel=1e-3)


def test_negative_sampler_avoids_history():
    rng = np.random.default_rng(0)
    n_items = 50
    train = [rng.choice(np.arange(1, n_items + 1), size=int(n), replace=False) for n in rng.integers(2, 21, 40)]
    sampler = NegativeSampler(train, n_items)
    users = torch.arange(40)
    neg = sampler.sample(users, (40, 7, 5), torch.Generator().manual_seed(0))
    assert neg.shape == (40, 7, 5)
    assert neg.min() >= 1 and neg.max() <= n_items
    for u in range(40):
        assert not set(neg[u].flatten().tolist()) & set(train[u].tolist()), f"user {u} got a history item"
    # negatives still cover the allowed items (not a degenerate constant)
    assert len(set(neg[0].flatten().tolist())) > 5
    flat = sampler.sample(users[:3], (3, 4), torch.Generator().manual_seed(1))
    assert flat.shape == (3, 4)
    for u in range(3):
        assert not set(flat[u].tolist()) & set(train[u].tolist())


def test_negative_sampler_draws_every_allowed_item_in_the_first_draw_and_in_the_redraws():
    """User 0 has no history: its negatives come from the first draw, uniform over 1..n (the last item too).
    User 1 has seen every item but the last: nearly all of its negatives come from the redraws, which must
    reach the last item as well."""
    n_items = 5
    sampler = NegativeSampler([np.array([], dtype=np.int64), np.arange(1, n_items)], n_items)
    neg = sampler.sample(torch.tensor([0, 1]), (2, 2000), torch.Generator().manual_seed(0))
    counts = torch.bincount(neg[0], minlength=n_items + 1)
    assert counts[0] == 0 and bool((counts[1:] > 300).all())        # 400 expected per item
    assert float(neg[1].eq(n_items).float().mean()) > 0.95          # 1 - 0.8^20: ~99% within the redraws


def test_negative_sampler_is_seeded():
    train = [np.array([1, 2, 3]), np.array([4, 5])]
    s = NegativeSampler(train, 20)
    a = s.sample(torch.tensor([0, 1]), (2, 10), torch.Generator().manual_seed(3))
    b = s.sample(torch.tensor([0, 1]), (2, 10), torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.fixture
def two_threads():
    """Two intra-op threads for the test (conftest pins one), as on the 2-core machines that trained the rows."""
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("loss", ["bce", "sampled-ce"])
def test_sampled_losses_give_the_same_gradient_every_time_on_several_threads(loss, two_threads):
    """At ML-1M's size (3,416 items, batch 128 x 200 positions) the gradient of the item table repeats bit for bit.
    Indexing the table (``items[ids]``) would not: its backward adds the repeated ids' rows with atomic additions
    when several threads share the work, so two runs with one seed drifted apart (by 1e-10 here, by 1e-5 in the
    weights after two epochs); the losses look the rows up with ``F.embedding``, whose backward does not."""
    grads = []
    for _ in range(4):
        g = torch.Generator().manual_seed(0)
        items = torch.randn(3417, 64, generator=g, requires_grad=True)
        hidden = torch.randn(128, 200, 64, generator=g)
        targets = torch.randint(1, 3417, (128, 200), generator=g)
        if loss == "bce":
            value = bce_loss(hidden, targets, items, torch.randint(1, 3417, (128, 200, 1), generator=g))
        else:
            value = sampled_softmax_loss(hidden, targets, items, torch.randint(1, 3417, (64,), generator=g))
        value.backward()
        grads.append(items.grad)
    assert all(torch.equal(grad, grads[0]) for grad in grads[1:])
