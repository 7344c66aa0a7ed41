"""PARec / FPARec (Luo et al. 2024) and the handcrafted position patterns of their ablation.

The paper's design (default): pre-LN blocks whose attention is positional only, ``V = LN(H) W_V``, a
point-wise FFN in every block, no position embedding added to the input (the positions live in the
attention pattern), no output projection.

``compat=True`` gives the released TF code's layout (docs/methods.md §4.2): ``V`` from the un-normalised
stream with the residual from ``LN(H)`` (SASRec's TF layout), absolute position embeddings still added
to the input, dropout on the attention weights, and **one** FFN after the whole attention stack instead
of one per block.
"""
from __future__ import annotations

from ..attention.positional import PositionalAttention
from .backbone import SequentialRecommender
from .registry import register_model


def _build(n_items: int, max_len: int, kind: str, d_model: int, n_layers: int, n_heads: int, dropout: float,
           rank: int = 40, tau: float = 1.0, attn_dropout: float | None = None, out_proj: bool = False,
           ffn_dim: int | None = None, compat: bool = False) -> SequentialRecommender:
    p_attn = attn_dropout if attn_dropout is not None else (dropout if compat else 0.0)
    return SequentialRecommender(
        n_items, max_len, d_model, n_layers,
        attention_factory=lambda i: PositionalAttention(d_model, n_heads, max_len, kind, rank, p_attn, out_proj, tau),
        dropout=dropout, ffn_dim=ffn_dim, layout="tf" if compat else "paper",
        positions="absolute" if compat else "none", ffn_placement="stack" if compat else "block",
    )


@register_model("parec", "PARec: learned n x n positional attention per layer and head", family="positional")
def build_parec(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                dropout: float = 0.2, attn_dropout: float | None = None, out_proj: bool = False,
                ffn_dim: int | None = None, compat: bool = False) -> SequentialRecommender:
    """PARec: ``softmax(causal(W_pos / sqrt(d/h))) LN(H) W_V`` with a free ``W_pos`` (n x n) per head."""
    return _build(n_items, max_len, "full", d_model, n_layers, n_heads, dropout, attn_dropout=attn_dropout,
                  out_proj=out_proj, ffn_dim=ffn_dim, compat=compat)


@register_model("fparec", "FPARec: positional attention factorised as F1 F2^T (rank k)", family="positional")
def build_fparec(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                 dropout: float = 0.2, k: int | None = None, attn_dropout: float | None = None,
                 out_proj: bool = False, ffn_dim: int | None = None, compat: bool = False) -> SequentialRecommender:
    """FPARec: ``W_pos = F1 F2^T`` with ``F1, F2`` of shape ``n x k``; ``k=None`` means 40 (the authors'
    script) or ``max_len`` when that is shorter."""
    rank = min(40, max_len) if k is None else k
    return _build(n_items, max_len, "factorized", d_model, n_layers, n_heads, dropout, rank=rank,
                  attn_dropout=attn_dropout, out_proj=out_proj, ffn_dim=ffn_dim, compat=compat)


def _register_pattern(pattern: str, description: str) -> None:
    @register_model(f"pattern-{pattern}", description, family="positional")
    def build(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, dropout: float = 0.2,
              tau: float = 1.0, ffn_dim: int | None = None) -> SequentialRecommender:
        return _build(n_items, max_len, pattern, d_model, n_layers, 1, dropout, tau=tau, ffn_dim=ffn_dim)

    build.__doc__ = f"Handcrafted positional attention: {description} (see attention.positional)."


_register_pattern("average", "fixed pattern: every earlier item weighs the same")
_register_pattern("linear", "fixed pattern: weight falls linearly with distance, n - (i - j)")
_register_pattern("exponential", "fixed pattern: weight falls exponentially with distance, exp(-(i - j)/tau)")
