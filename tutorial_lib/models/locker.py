"""Locker (He et al., CIKM 2021): local encoders beside global heads, on the causal SASRec backbone
(``locker-*``) and on a bidirectional, cloze-trained BERT4Rec backbone (``bert4rec``, ``bert4rec-locker-*``),
the one the paper used.

For the ``initial`` and ``adapt`` encoders the backbone adds no position embedding: the attention adds
a shared position table to the global heads' queries and keys (paper §3.3.2).
"""
from __future__ import annotations

from torch import nn

from ..attention.dot_product import DotProductAttention
from ..attention.local import ENCODERS, POSITION_FREE, LocalAttention
from .backbone import SequentialRecommender
from .registry import register_model


def build_locker(n_items: int, max_len: int, encoder: str, objective: str = "next", d_model: int = 64,
                 n_layers: int = 2, n_heads: int = 2, n_local: int = 1, window: int = 1, dropout: float = 0.2,
                 attn_dropout: float = 0.0, ffn_dim: int | None = None, compat: bool = False) -> SequentialRecommender:
    """A Locker model: ``n_local`` of the ``n_heads`` heads use ``encoder``, on the ``objective``'s backbone."""
    causal = objective == "next"
    table = nn.Embedding(max_len, d_model) if encoder in POSITION_FREE else None
    return SequentialRecommender(
        n_items, max_len, d_model, n_layers,
        attention_factory=lambda i: LocalAttention(d_model, n_heads, n_local, encoder, max_len, window, attn_dropout,
                                                   table, compat, causal=causal),
        dropout=dropout, ffn_dim=ffn_dim, positions="none" if table is not None else "absolute", objective=objective,
    )


def _register(encoder: str, objective: str) -> None:
    prefix = "locker" if objective == "next" else "bert4rec-locker"
    backbone = "causal SASRec backbone" if objective == "next" else "bidirectional BERT4Rec backbone"

    @register_model(f"{prefix}-{encoder}", f"Locker+{encoder.capitalize()}: local {encoder} heads + global heads, "
                    f"{backbone}", family="local")
    def build(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, n_local: int = 1,
              window: int = 1, dropout: float = 0.2, attn_dropout: float = 0.0, ffn_dim: int | None = None,
              compat: bool = False) -> SequentialRecommender:
        return build_locker(n_items, max_len, encoder, objective, d_model, n_layers, n_heads, n_local, window,
                            dropout, attn_dropout, ffn_dim, compat)

    build.__doc__ = f"Locker with the {encoder!r} local encoder on the {backbone} (see attention.local)."


for _encoder in ENCODERS:
    _register(_encoder, "next")
    _register(_encoder, "cloze")


@register_model("bert4rec", "BERT4Rec: bidirectional self-attention trained on the cloze task ([MASK])",
                family="dot_product")
def build_bert4rec(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                   dropout: float = 0.2, attn_dropout: float = 0.0, ffn_dim: int | None = None) -> SequentialRecommender:
    """BERT4Rec (Sun et al., CIKM 2019) on this course's blocks: bidirectional attention, a ``[MASK]`` token
    (id ``n_items + 1``), trained to recover masked items (``TrainConfig.mask_prob``); the next item is
    predicted by appending ``[MASK]`` to the history."""
    return SequentialRecommender(
        n_items, max_len, d_model, n_layers,
        attention_factory=lambda i: DotProductAttention(d_model, n_heads, attn_dropout=attn_dropout),
        dropout=dropout, ffn_dim=ffn_dim, objective="cloze",
    )
