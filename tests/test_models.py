"""Properties every registered model must have (new models are covered automatically)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.attention import SequenceContext
from tutorial_lib.data.split import LeaveOneOutSplit
from tutorial_lib.errors import ConfigError, UnknownNameError
from tutorial_lib.models import build_model, get_model_entry, model_names
from tutorial_lib.training.losses import full_ce_loss
from written_out import allowed_by_loops, heads, masked_softmax_attention

N_ITEMS, MAX_LEN, D = 30, 12, 16
SMALL = dict(d_model=D, n_heads=2, n_layers=2)
MODELS = model_names()
#: one model per attention family (tests that train: tests/test_cuda.py, deterministic mode in test_trainer.py)
FAMILIES = ["sasrec", "lightsans", "lightsans-ape", "parec", "fparec", "pattern-exponential", "locker-conv",
            "locker-rnn", "locker-adapt", "rksa", "bert4rec"]


N_USERS = 4


def make(name: str, seed: int = 0, **extra) -> torch.nn.Module:
    """A small model; models that need statistics of a training split (RKSA) get a random one."""
    valid = get_model_entry(name).options()
    opts = {k: v for k, v in {**SMALL, **extra}.items() if k in valid}
    torch.manual_seed(seed)
    model = build_model(name, N_ITEMS, MAX_LEN, n_users=N_USERS, **opts)
    g = np.random.default_rng(seed)
    model.prepare(LeaveOneOutSplit([g.integers(1, N_ITEMS + 1, 15) for _ in range(N_USERS)],
                                   np.zeros(N_USERS, np.int64), np.zeros(N_USERS, np.int64), N_ITEMS))
    return UserAware(model) if model.user_embedding is not None else model


class UserAware(torch.nn.Module):
    """Calls a model that has a user embedding with fixed user indices 0..B-1, so the generic tests
    below apply to it unchanged."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)

    def _users(self, ids):
        return torch.arange(ids.shape[0], device=ids.device) % N_USERS

    def forward(self, ids, **kw):
        return self.inner(ids, users=self._users(ids), **kw)

    def score_next(self, ids, **kw):
        return self.inner.score_next(ids, users=self._users(ids), **kw)


def batch(seed: int = 0, padded: bool = True, width: int = MAX_LEN) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, N_ITEMS + 1, (4, width), generator=g)
    if padded:
        ids[1, : width - 5] = 0
        ids[2, : width - 1] = 0
        ids[3, : width // 2] = 0
    return ids


def test_registry_is_not_empty():
    assert "sasrec" in MODELS


@pytest.mark.parametrize("name", MODELS)
def test_shapes_and_padding_column(name):
    model = make(name).eval()
    ids = batch()
    with torch.no_grad():
        out = model(ids)
        scores = model.score_next(ids)
    assert out.shape == (4, MAX_LEN, D)
    assert scores.shape == (4, N_ITEMS + 1)
    assert torch.isneginf(scores[:, 0]).all()
    assert torch.isfinite(scores[:, 1:]).all()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("padded", [False, True])
def test_causal(name, padded):
    model = make(name).eval()
    if not model.causal:
        pytest.skip("bidirectional by design (cloze-trained); see test_bidirectional_models_see_the_future")
    assert_causal(model, batch(padded=padded))


def assert_causal(model: torch.nn.Module, ids: torch.Tensor) -> None:
    """Changing the items after position t leaves every valid output up to t unchanged, and does change the
    outputs after t."""
    t = MAX_LEN - 4
    ids2 = ids.clone()
    ids2[:, t + 1:] = torch.randint(1, N_ITEMS + 1, (4, MAX_LEN - t - 1), generator=torch.Generator().manual_seed(9))
    assert (ids2[:, t + 1:] != ids[:, t + 1:]).any()
    with torch.no_grad():
        a, b = model(ids), model(ids2)
    valid = ids.ne(0)
    va = valid[:, : t + 1]
    torch.testing.assert_close(a[:, : t + 1][va], b[:, : t + 1][va], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:], atol=1e-4)  # the change did reach the later positions


@pytest.mark.parametrize("name", MODELS)
def test_trimmed_equals_padded(name):
    """A batch trimmed to its longest sequence gives the same valid outputs as the same batch padded to max_len,
    and each row gives the same outputs alone (no interaction across the batch)."""
    model = make(name).eval()
    ids = batch(padded=True, width=8)          # at most 8 valid items
    full = torch.zeros(4, MAX_LEN, dtype=torch.long)
    full[:, -8:] = ids
    with torch.no_grad():
        short, long = model(ids), model(full)
        alone = model(ids[2:3, -1:])            # one item, no padding at all
    valid = ids.ne(0)
    torch.testing.assert_close(short[valid], long[:, -8:][valid], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone[0, -1], short[2, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_mixed_precision_keeps_the_outputs_finite(name, dtype):
    """Under autocast (the trainer's ``precision``; CPU autocast stands in for CUDA's), a left-padded batch
    gives finite outputs in training mode. fp16 used to underflow the normaliser of the padding rows of
    the position-only attentions (0/0), and the NaN reached the valid rows through the next block."""
    model = make(name).train()
    ids = batch(padded=True)
    with torch.autocast("cpu", dtype=dtype):
        out = model(ids)
    assert torch.isfinite(out[ids.ne(0)]).all()


@pytest.mark.parametrize("name", [n for n in MODELS if n.startswith("rksa")])
def test_rksa_correlation_survives_bf16_when_the_window_is_longer_than_the_width(name):
    """With L > d the item and user Gram matrices are rank-deficient; built in bf16, ψ lost its positive
    definiteness and the sampler's Cholesky factorisation failed (ML-1M: L = 200, d = 64)."""
    for seed in range(3):
        model = make(name, seed=seed, d_model=8).train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(batch(seed, padded=True))           # MAX_LEN = 12 > d = 8
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", MODELS)
def test_padding_content_does_not_leak(name):
    """Garbage written into the padding positions (embedding row 0 and every block's input) changes no
    valid output."""
    model = make(name).eval()
    ids = batch(padded=True)
    pad = ids.eq(0)
    with torch.no_grad():
        ref = model(ids)
        model.item_embedding.weight[0].normal_()
        hooks = []
        if hasattr(model, "blocks"):
            def noise(_module, args):
                x, *rest = args
                x = x.clone()
                x[pad] = 10 * torch.randn(int(pad.sum()), x.shape[-1])
                return (x, *rest)
            hooks = [blk.register_forward_pre_hook(noise) for blk in model.blocks]
        out = model(ids)
        for h in hooks:
            h.remove()
    torch.testing.assert_close(out[~pad], ref[~pad], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_gradients_reach_every_parameter(name):
    model = make(name, dropout=0.0).train()
    ids = batch(padded=True)
    ids[0] = torch.arange(1, MAX_LEN + 1)      # one full row so every position embedding is used
    targets = torch.roll(ids, -1, dims=1) * ids.ne(0)
    targets[:, -1] = 1
    loss = full_ce_loss(model(ids), targets, model.output_embedding)
    loss.backward()
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        assert p.grad is not None, f"{pname} gets no gradient"
        g = p.grad
        if pname == "item_embedding.weight":
            g = g[1:]                          # the padding row may stay zero
        assert g.abs().sum() > 0, f"{pname} has an all-zero gradient"


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_same_model_and_training(name):
    def run():
        model = make(name, seed=5)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        ids = batch(padded=True)
        targets = torch.roll(ids, -1, dims=1) * ids.ne(0)
        torch.manual_seed(11)                  # dropout
        losses = []
        with torch.no_grad():
            out = model.eval()(ids)
        model.train()
        for _ in range(2):
            opt.zero_grad()
            loss = full_ce_loss(model(ids), targets, model.output_embedding)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return out, losses

    (o1, l1), (o2, l2) = run(), run()
    assert torch.equal(o1, o2)
    assert l1 == l2
    o3 = make(name, seed=6).eval()(batch(padded=True))
    assert not torch.allclose(o1, o3)


def test_sasrec_tf_layout_runs_and_differs():
    paper = make("sasrec", seed=0, layout="paper").eval()
    tf = make("sasrec", seed=0, layout="tf").eval()
    ids = batch(padded=True)
    with torch.no_grad():
        a, b = paper(ids), tf(ids)
    assert b.shape == a.shape and torch.isfinite(b).all()
    assert not torch.allclose(a, b, atol=1e-3)
    # tf layout has no output projection
    assert sum(p.numel() for p in tf.parameters()) < sum(p.numel() for p in paper.parameters())


@pytest.mark.parametrize("layout", ["paper", "tf"])
def test_one_block_matches_its_written_out_layout(layout):
    """A block in evaluation mode against its equations (docs/methods.md §2.1), projections split by hand:
    paper ``x + Attn(LN x)`` then ``+ FFN(LN x)``; tf: queries from ``q = LN x``, keys and values from the raw
    ``x``, ``y = q + Attn``, ``f = LN y``, ``(f + FFN f) * valid``."""
    model = make("sasrec", seed=3, layout=layout).eval()
    block, att = model.blocks[0], model.blocks[0].attention
    ids = batch(padded=True)
    x = torch.randn(*ids.shape, D)
    with torch.no_grad():
        got, _ = block(x, SequenceContext.from_item_ids(ids, max_len=MAX_LEN))
        w_q, w_k, w_v = att.in_proj.weight.chunk(3)
        b_q, b_k, b_v = att.in_proj.bias.chunk(3)
        ln_a, ln_f, ffn = block.ln_attn, block.ln_ffn, block.ffn.net
        q_in = F.layer_norm(x, (D,), ln_a.weight, ln_a.bias, ln_a.eps)
        kv_in = x if layout == "tf" else q_in
        h = att.n_heads
        a, _ = masked_softmax_attention(heads(q_in @ w_q.T + b_q, h), heads(kv_in @ w_k.T + b_k, h),
                                        heads(kv_in @ w_v.T + b_v, h), allowed_by_loops(ids))
        a = att.out_proj(a)
        y = (q_in if layout == "tf" else x) + a
        f = F.layer_norm(y, (D,), ln_f.weight, ln_f.bias, ln_f.eps)
        ff = torch.relu(f @ ffn[0].weight.T + ffn[0].bias) @ ffn[3].weight.T + ffn[3].bias
        want = (f + ff) * (ids > 0)[..., None] if layout == "tf" else y + ff
    valid = ids > 0
    torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=1e-5)
    if layout == "tf":
        assert (got[~valid] == 0).all()


def test_sasrec_in_the_fparec_code_layout():
    """``ffn_placement="stack"``: attention-only blocks and one FFN after them (FPARec's released code with
    dot-product attention); causal like every layout, and a bad placement is refused by name."""
    model = make("sasrec", layout="tf", ffn_placement="stack").eval()
    assert all(block.ffn is None for block in model.blocks) and model.stack_ffn is not None
    assert_causal(model, batch(padded=True))
    with pytest.raises(ConfigError, match="ffn_placement"):
        build_model("sasrec", N_ITEMS, MAX_LEN, ffn_placement="middle")


@pytest.mark.parametrize("name", MODELS)
def test_max_len_below_two(name):
    with pytest.raises(ConfigError, match="max_len"):
        build_model(name, N_ITEMS, 1, n_users=N_USERS)


@pytest.mark.parametrize("name", MODELS)
def test_unknown_option_lists_valid_options(name):
    with pytest.raises(ConfigError) as exc:
        build_model(name, N_ITEMS, MAX_LEN, no_such_option=3)
    msg = str(exc.value)
    assert "no_such_option" in msg
    for opt in get_model_entry(name).options():
        assert opt in msg


def test_text_for_a_number_option_is_refused_with_its_name():
    """`--option d_model=abc` reaches build_model as a string; it used to fail deep inside with a TypeError."""
    with pytest.raises(ConfigError, match="option 'd_model' of model 'sasrec' expects a number"):
        build_model("sasrec", N_ITEMS, MAX_LEN, d_model="abc")


@pytest.mark.parametrize("options, message", [
    ({"d_model": 64.5}, "option 'd_model' of model 'sasrec' expects a number, a whole one .*got 64.5"),
    ({"d_model": 1e3}, "got 1000.0: write d_model=1000"),
    ({"n_layers": True}, "'n_layers' .* a whole one"),
    ({"ffn_dim": float("inf")}, "'ffn_dim' .* a whole one"),
    ({"dropout": float("nan")}, "'dropout' .* a finite one"),
    ({"attn_dropout": 2.0}, "'attn_dropout' .* dropout probability: it must be in \\[0, 1\\), got 2.0"),
    ({"attn_dropout": -0.1}, "must be in \\[0, 1\\)"),
    ({"tie_embeddings": 1}, "is true or false"),
])
def test_a_value_of_the_wrong_type_is_refused_with_the_options_name(options, message):
    """A float where a whole number goes used to fail inside torch (`empty(): ... got float`), and attn_dropout=2 at
    the first forward pass."""
    with pytest.raises(ConfigError, match=message):
        build_model("sasrec", N_ITEMS, MAX_LEN, **options)


def test_sizes_must_be_whole_numbers_but_numpy_integers_are_fine():
    with pytest.raises(ConfigError, match="'n_items' .* a whole one, got 2.5"):
        build_model("sasrec", 2.5, MAX_LEN)
    model = build_model("fparec", np.int64(N_ITEMS), np.int64(MAX_LEN), k=np.int32(4), d_model=np.int64(16))
    assert model.max_len == MAX_LEN and build_model("sasrec", N_ITEMS, MAX_LEN, ffn_dim=None, attn_dropout=None)


def test_sasrec_bad_settings():
    with pytest.raises(ConfigError, match="divisible"):
        build_model("sasrec", N_ITEMS, MAX_LEN, d_model=10, n_heads=3)
    with pytest.raises(ConfigError, match="layout"):
        build_model("sasrec", N_ITEMS, MAX_LEN, layout="bogus")
    with pytest.raises(ConfigError, match="dropout"):
        build_model("sasrec", N_ITEMS, MAX_LEN, dropout=1.0)


@pytest.mark.parametrize("name", [m for m in MODELS if "n_heads" in get_model_entry(m).options()])
@pytest.mark.parametrize("n_heads, message", [(0, "n_heads must be >= 1, got 0"),
                                              (3, "d_model=16 must be divisible by n_heads=3")])
def test_every_model_refuses_impossible_heads(name, n_heads, message):
    """`--heads 0` used to end in a ZeroDivisionError inside the attention module's constructor."""
    with pytest.raises(ConfigError, match=message):
        make(name, n_heads=n_heads)


def test_input_longer_than_max_len():
    model = make("sasrec")
    with pytest.raises(ConfigError, match="max_len"):
        model(torch.ones(1, MAX_LEN + 1, dtype=torch.long))


def test_unknown_model_lists_valid_names():
    with pytest.raises(UnknownNameError) as exc:
        build_model("no-such-model", N_ITEMS, MAX_LEN)
    for name in MODELS:
        assert name in str(exc.value)


@pytest.mark.parametrize("value", ["maybe", 0, 1])
def test_a_true_or_false_option_takes_only_true_or_false(value):
    """``tie_embeddings=maybe`` used to be stored as text and behave as true."""
    with pytest.raises(ConfigError, match="tie_embeddings=true or tie_embeddings=false"):
        build_model("sasrec", N_ITEMS, MAX_LEN, tie_embeddings=value)


def test_a_misspelt_option_gets_a_suggestion_beside_its_name():
    with pytest.raises(ConfigError, match=r"no option\(s\): 'dropot' \(did you mean 'dropout'\?\), 'zzz';"):
        build_model("sasrec", N_ITEMS, MAX_LEN, dropot=0.1, zzz=1)


def test_model_name_is_case_insensitive():
    assert get_model_entry("SASRec").name == "sasrec"


def test_score_is_dot_product_with_item_matrix():
    model = make("sasrec").eval()
    ids = batch()
    with torch.no_grad():
        h = model(ids)[:, -1]
        s = model.score_next(ids)
    torch.testing.assert_close(s[:, 1:], h @ model.output_embedding[1:].t())
    assert F.softmax(s, -1)[:, 0].eq(0).all()


def test_dropout_matches_the_inverted_dropout_distribution():
    from tutorial_lib.models.backbone import Dropout

    drop = Dropout(0.25)
    x = torch.ones(200_000, requires_grad=True)
    torch.manual_seed(0)
    y = drop(x)
    zeros = (y == 0).float().mean().item()
    assert abs(zeros - 0.25) < 0.01 and abs(y.mean().item() - 1.0) < 0.01
    assert torch.isclose(torch.unique(y), torch.tensor([0.0, 1 / 0.75])).all()
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())                      # the gradient is the scaled mask
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ConfigError, match="dropout"):
        Dropout(1.0)


def test_the_input_is_scaled_items_plus_right_aligned_positions_and_zero_at_padding():
    torch.manual_seed(0)
    model = build_model("sasrec", N_ITEMS, MAX_LEN, d_model=D, dropout=0.0).eval()
    ids = torch.randint(1, N_ITEMS + 1, (2, 7))
    ids[1, :3] = 0
    written_out = (model.item_embedding(ids) * D ** 0.5 + model.position_embedding.weight[MAX_LEN - 7:])
    torch.testing.assert_close(model.embed(ids), written_out * ids.ne(0)[..., None])


def test_each_family_keeps_its_own_initialisation_after_the_backbones():
    """The backbone initialises every matrix Glorot-uniform, then lets each attention module initialise its own
    parameters: Locker's Gaussian bump, PARec's small pattern and LightSANs' N(0, 1) interests in the released
    code's mode are not Glorot."""
    torch.manual_seed(0)
    locker = build_model("locker-initial", N_ITEMS, MAX_LEN, d_model=D, n_heads=2).blocks[0].attention
    delta = torch.arange(-(MAX_LEN - 1), MAX_LEN).float()
    bump = locker.gauss_a * torch.exp(-delta ** 2 / locker.gauss_b)
    torch.testing.assert_close(locker.distance_bias.detach(), bump.expand_as(locker.distance_bias))
    assert build_model("parec", N_ITEMS, MAX_LEN, d_model=D).blocks[0].attention.w_pos.abs().max() <= 0.02
    theta = build_model("lightsans", N_ITEMS, MAX_LEN, d_model=D, compat=True).blocks[0].attention.theta_k
    assert theta.abs().max() > 1.0                               # N(0, 1), far outside Glorot's bound


def test_the_auxiliary_loss_is_the_sum_over_the_layers():
    model = make("rksa-c").train()
    model(torch.randint(1, N_ITEMS + 1, (N_USERS, MAX_LEN), generator=torch.Generator().manual_seed(1)))
    parts = [block.attention.aux_loss for block in model.blocks]
    assert len(parts) == 2 and all(p is not None for p in parts)
    torch.testing.assert_close(model.auxiliary_loss(), parts[0] + parts[1])
