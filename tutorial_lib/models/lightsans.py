"""LightSANs (Fan et al., SIGIR 2021): low-rank decomposed self-attention on the shared backbone.

* ``lightsans``: item-to-interest attention plus decoupled position encoding (positions only inside
  attention, none added to the input).
* ``lightsans-ape``: the same low-rank attention with absolute positions added to the input, as in SASRec.

``compat=True`` switches to the released code's attention (docs/methods.md §3.2: unmasked, non-causal
aggregation, softmax over the sequence axis, its scales and initialisation) and to its training on
prefix samples (``objective="last"``), every input padded to the full ``max_len`` (its unmasked softmax
counts the padding columns, so a narrower batch would change a user's scores). The padding stays on the
left, as everywhere in the course, where RecBole pads on the right and counts positions from the oldest
item (docs/methods.md §1.1): with the unmasked softmax over the sequence axis, the side of the padding
changes which position rows the real items get and what the softmax normalises over, so the compat mode is
the released attention's arithmetic, not its exact numbers. The rest of the released model (post-LN blocks,
GELU, an inner FFN width of 256, a LayerNorm on the input embeddings) is not reproduced: the blocks stay
this course's.
"""
from __future__ import annotations

import warnings

from torch import nn

from ..attention.low_rank import LowRankAttention
from .backbone import SequentialRecommender
from .registry import register_model


def _build(n_items: int, max_len: int, decoupled: bool, d_model: int, n_layers: int, n_heads: int,
           k_interests: int | None, dropout: float, attn_dropout: float, ffn_dim: int | None, compat: bool
           ) -> SequentialRecommender:
    if k_interests is None:      # the authors' 20, capped at a shorter window (as FPARec's default k)
        k_interests = min(20, max_len)
    table = nn.Embedding(max_len, d_model) if decoupled else None  # one position table, shared by the layers
    model = SequentialRecommender(
        n_items, max_len, d_model, n_layers,
        attention_factory=lambda i: LowRankAttention(d_model, n_heads, k_interests, attn_dropout, table, compat),
        dropout=dropout, ffn_dim=ffn_dim, positions="none" if decoupled else "absolute",
        objective="last" if compat else "next", full_width=compat,
    )
    if k_interests > max_len:    # FPARec refuses k > max_len outright; here the model still works, only uselessly
        warnings.warn(f"k_interests={k_interests} is above max_len={max_len}: LightSANs compresses up to max_len "
                      f"positions into k interests, so a k above max_len compresses nothing and costs more than "
                      f"SASRec's attention. Choose k_interests <= max_len (20 is the authors' ML-1M setting)",
                      stacklevel=4)
    return model


@register_model("lightsans", "LightSANs: k latent interests (causal prefix aggregation) + decoupled positions",
                family="low_rank")
def build_lightsans(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                    k_interests: int | None = None, dropout: float = 0.2, attn_dropout: float = 0.0,
                    ffn_dim: int | None = None, compat: bool = False) -> SequentialRecommender:
    """LightSANs with decoupled position encoding (paper Eq. 1-4). ``k_interests=None`` means 20, the authors'
    ML-1M configuration (the paper's text states no k; its Table 3 parameter count fits 20; docs/methods.md
    §3.2-3.3), or ``max_len`` when the window is shorter."""
    return _build(n_items, max_len, True, d_model, n_layers, n_heads, k_interests, dropout, attn_dropout,
                  ffn_dim, compat)


@register_model("lightsans-ape", "LightSANs-ape: k latent interests, absolute positions added to the input",
                family="low_rank")
def build_lightsans_ape(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                        k_interests: int | None = None, dropout: float = 0.2, attn_dropout: float = 0.0,
                        ffn_dim: int | None = None, compat: bool = False) -> SequentialRecommender:
    """LightSANs-ape: the low-rank attention with SASRec's absolute position embedding (``k_interests`` as in
    :func:`build_lightsans`)."""
    return _build(n_items, max_len, False, d_model, n_layers, n_heads, k_interests, dropout, attn_dropout,
                  ffn_dim, compat)
