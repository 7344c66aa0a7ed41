"""Positional attention (PARec, FPARec) and the handcrafted patterns against written-out references."""
from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.attention import SequenceContext, merge_heads, split_heads
from tutorial_lib.attention.low_rank import soft_cap
from tutorial_lib.attention.positional import PATTERNS, PositionalAttention, handcrafted_logits
from tutorial_lib.errors import ConfigError
from tutorial_lib.models import build_model

B, L, D, H = 3, 10, 16, 2


def _ids(padded: bool = True, width: int = L) -> torch.Tensor:
    ids = torch.randint(1, 40, (B, width), generator=torch.Generator().manual_seed(0))
    if padded:
        ids[0, : width - 6] = 0
        ids[1, : width - 1] = 0
    return ids


def _naive(att: PositionalAttention, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """softmax over the real keys j <= i of the pattern's (soft-capped) logits at the absolute positions,
    times V."""
    n, width = att.max_len, ids.shape[1]
    if att.kind == "full":
        full = soft_cap(att.w_pos / math.sqrt(D // H))
    elif att.kind == "factorized":
        full = soft_cap(att.f1 @ att.f2.transpose(-2, -1) / math.sqrt(D // H))
    else:
        full = handcrafted_logits(att.kind, n).expand(att.n_heads, -1, -1)
    pos = torch.arange(n - width, n)
    v = split_heads(att.v_proj(x), att.n_heads)
    out = torch.zeros_like(v)
    for b in range(B):
        for i in range(width):
            keys = [j for j in range(i + 1) if ids[b, j] != 0]
            if not keys:
                continue
            w = torch.softmax(full[:, pos[i], pos[keys]], dim=-1)              # (H, n_keys)
            out[b, :, i] = torch.einsum("hk,hkd->hd", w, v[b][:, keys])
    return merge_heads(out)


@pytest.mark.parametrize("kind", ["full", "factorized", *PATTERNS])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("width", [L, 7])
def test_matches_naive_reference(kind, padded, width):
    torch.manual_seed(0)
    heads = H if kind in ("full", "factorized") else 1
    att = PositionalAttention(D, heads, L, kind, rank=4).eval()
    with torch.no_grad():                      # make the learned patterns far from uniform
        for p in att.parameters():
            if p.dim() == 3:
                p.normal_(0, 2.0)
    ids = _ids(padded, width)
    x = torch.randn(B, width, D)
    ctx = SequenceContext.from_item_ids(ids, max_len=L)
    y, w = att(x, ctx)
    assert w is None
    ref = _naive(att, x, ids)
    valid = ids.ne(0)
    torch.testing.assert_close(y[valid], ref[valid], atol=1e-5, rtol=1e-5)
    # the materialised weights give the same output and respect the masks
    y2, w2 = att(x, SequenceContext.from_item_ids(ids, max_len=L, need_weights=True))
    torch.testing.assert_close(y2[valid], y[valid], atol=1e-5, rtol=1e-5)
    assert w2.shape == (B, heads, width, width) and (w2.triu(1) == 0).all()


def test_handcrafted_patterns_are_the_documented_formulas():
    n = 6
    i, j = 5, torch.arange(6)
    expected = {
        "average": torch.ones(6),
        "linear": (n - (i - j)).float(),
        "exponential": torch.exp(-(i - j).float()),
    }
    for pattern, scores in expected.items():
        w = torch.softmax(handcrafted_logits(pattern, n)[i], dim=-1)
        torch.testing.assert_close(w, scores / scores.sum())
    assert torch.isneginf(handcrafted_logits("linear", n).triu(1)[0, 1:]).all()
    with pytest.raises(ConfigError, match="pattern"):
        handcrafted_logits("cosine", n)


def test_exponential_pattern_puts_most_weight_on_recent_items():
    w = torch.softmax(handcrafted_logits("exponential", 50)[-1], dim=-1)
    assert w[-1] > 0.6 and w[-3:].sum() > 0.9
    w_avg = torch.softmax(handcrafted_logits("average", 50)[-1], dim=-1)
    torch.testing.assert_close(w_avg, torch.full((50,), 1 / 50))


def test_factorised_pattern_has_rank_at_most_k():
    """The module's own logits (not a product rebuilt here): rank k up to the soft cap, which bends them only
    beyond |x| ~ 5, and the full pattern is not low-rank."""
    torch.manual_seed(0)      # an unlucky draw (about 1 in 4,000) puts enough logits past the cap to lift rank 4
    att = PositionalAttention(D, 1, 30, "factorized", rank=3)
    with torch.no_grad():
        att.f1.normal_()
        att.f2.normal_()
    singular = torch.linalg.svdvals(att.pattern_logits()[0].double())
    assert att.pattern_logits().abs().max() < 5 and singular[3] < 1e-3 * singular[0]
    full = PositionalAttention(D, 1, 30, "full")
    with torch.no_grad():
        full.w_pos.normal_()
    assert torch.linalg.matrix_rank(full.pattern_logits()[0]) > 3
    with pytest.raises(ConfigError, match="rank"):
        PositionalAttention(D, 1, 30, "factorized", rank=31)


def test_dropout_path_in_training_and_shared_path_in_eval():
    torch.manual_seed(1)
    att = PositionalAttention(D, H, L, "full", attn_dropout=0.5)
    ids, x = _ids(), torch.randn(B, L, D)
    ctx = SequenceContext.from_item_ids(ids, max_len=L)
    att.train()
    a, _ = att(x, ctx)
    b, _ = att(x, ctx)
    assert not torch.allclose(a, b)                                     # dropout on the weights is active
    att.eval()
    torch.testing.assert_close(att(x, ctx)[0][ids.ne(0)], _naive(att, x, ids)[ids.ne(0)], atol=1e-5, rtol=1e-5)


def test_parameter_counts_per_layer():
    """The paper's lost Table 1, per layer and without biases: SASRec 3d^2 (+ d^2 for our W_O),
    PARec d^2 + h n^2, FPARec d^2 + 2 h n k."""
    n_items, n, d, h, k = 50, 40, 32, 2, 8
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    def attention_params(model):
        return count(model.blocks[0].attention)
    sasrec = build_model("sasrec", n_items, n, d_model=d, n_heads=h, n_layers=1)
    parec = build_model("parec", n_items, n, d_model=d, n_heads=h, n_layers=1)
    fparec = build_model("fparec", n_items, n, d_model=d, n_heads=h, n_layers=1, k=k)
    assert attention_params(sasrec) == 4 * d * d + 4 * d
    assert attention_params(parec) == d * d + d + h * n * n
    assert attention_params(fparec) == d * d + d + 2 * h * n * k
    # no position embedding on the input: the positions live in the pattern
    assert parec.position_embedding is None and sasrec.position_embedding is not None


def test_compat_layout_is_the_released_code():
    model = build_model("fparec", 50, 12, d_model=16, compat=True)
    assert model.layout == "tf" and model.position_embedding is not None
    assert all(block.ffn is None for block in model.blocks) and model.stack_ffn is not None
    assert model.blocks[0].attention.attn_dropout == 0.2
    paper = build_model("fparec", 50, 12, d_model=16)
    assert all(block.ffn is not None for block in paper.blocks) and paper.stack_ffn is None
    ids = _ids(width=12)
    assert model.eval()(ids).shape == (B, 12, 16)


def test_the_exponential_pattern_decays_with_the_distance_over_tau():
    i, j = torch.arange(5)[:, None], torch.arange(5)[None]
    written_out = (-(i - j) / 2.0).float().masked_fill(j > i, float("-inf"))
    torch.testing.assert_close(handcrafted_logits("exponential", 5, tau=2.0), written_out)


def test_learned_patterns_start_near_uniform_as_the_released_code():
    """W_pos ~ N(0, 0.01²) truncated at 2 std; F_1, F_2 scaled so that F_1 F_2^T has entries of std about 0.01."""
    torch.manual_seed(0)
    full = PositionalAttention(D, H, 50, "full")
    assert full.w_pos.abs().max() <= 0.02 and 0.007 < full.w_pos.std() < 0.011
    factorized = PositionalAttention(D, H, 50, "factorized", rank=16)
    std = math.sqrt(0.01) / 16 ** 0.25                                   # 0.05
    for f in (factorized.f1, factorized.f2):
        assert f.abs().max() <= 2 * std and 0.8 * std < f.std() < std
    assert 0.007 < (factorized.f1 @ factorized.f2.mT).std() < 0.011


def test_a_bidirectional_pattern_gives_the_same_output_with_and_without_its_weights():
    torch.manual_seed(0)
    att = PositionalAttention(D, H, L, "full").eval()
    with torch.no_grad():
        att.w_pos.normal_(0, 2.0)
    ids, x = _ids(), torch.randn(B, L, D)
    fast, _ = att(x, SequenceContext.from_item_ids(ids, causal=False, max_len=L))
    slow, weights = att(x, SequenceContext.from_item_ids(ids, causal=False, max_len=L, need_weights=True))
    assert (weights.triu(1) > 0).any()                                    # the future is attended to
    valid = ids.ne(0)
    torch.testing.assert_close(fast[valid], slow[valid], atol=1e-5, rtol=1e-5)


def test_values_come_from_the_memory_stream_when_one_is_given():
    """The weights depend on positions only, so the output is a function of the values' source alone."""
    torch.manual_seed(0)
    att = PositionalAttention(D, H, L, "full").eval()
    ctx = SequenceContext.from_item_ids(_ids(), max_len=L)
    x, memory = torch.randn(B, L, D), torch.randn(B, L, D)
    torch.testing.assert_close(att(x, ctx, memory=memory)[0], att(memory, ctx)[0])


def test_a_context_of_another_max_len_is_refused_with_both_sizes():
    att = PositionalAttention(D, H, L, "full")
    with pytest.raises(ConfigError, match=rf"size {L} but the model's max_len is {L + 2}"):
        att(torch.randn(B, L, D), SequenceContext.from_item_ids(_ids(), max_len=L + 2))
