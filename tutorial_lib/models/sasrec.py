"""SASRec (Kang & McAuley, ICDM 2018): the backbone with causal scaled dot-product attention."""
from __future__ import annotations

from ..attention.dot_product import DotProductAttention
from .backbone import SequentialRecommender
from .registry import register_model


@register_model("sasrec", "SASRec: causal multi-head dot-product self-attention", family="dot_product")
def build_sasrec(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                 dropout: float = 0.2, attn_dropout: float | None = None, layout: str = "paper",
                 ffn_dim: int | None = None, embedding_scale: bool = True,
                 tie_embeddings: bool = True, ffn_placement: str = "block") -> SequentialRecommender:
    """SASRec.

    ``layout="paper"``: pre-LN blocks with an output projection and dropout on the attention output
    (``attn_dropout=None`` means 0 there, so PyTorch's fused attention kernel is used).
    ``layout="tf"``: the released TF code (docs/methods.md §2.1): no output projection, keys/values from
    the un-normalised input, residual from the normalised input and dropout on the attention weights
    (``attn_dropout=None`` means ``dropout`` there).
    ``ffn_placement="stack"``: the blocks are attention only and one FFN follows the stack. With
    ``layout="tf"`` this is SASRec as the FPARec authors' code builds it (``--attention_type dot_product``,
    docs/methods.md §4.2); whether the FPARec paper's SASRec baseline was trained with that code is not known
    (§4.3).
    """
    tf = layout == "tf"
    p_attn = attn_dropout if attn_dropout is not None else (dropout if tf else 0.0)
    return SequentialRecommender(
        n_items, max_len, d_model, n_layers,
        attention_factory=lambda i: DotProductAttention(d_model, n_heads, attn_dropout=p_attn, out_proj=not tf),
        dropout=dropout, ffn_dim=ffn_dim, layout=layout, embedding_scale=embedding_scale,
        tie_embeddings=tie_embeddings, ffn_placement=ffn_placement,
    )


@register_model("sasrec-untied", "SASRec with a separate output item table (the course's variant, not a paper's)",
                family="dot_product")
def build_sasrec_untied(n_items: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                        dropout: float = 0.2, attn_dropout: float | None = None, layout: str = "paper",
                        ffn_dim: int | None = None, embedding_scale: bool = True) -> SequentialRecommender:
    """SASRec whose scores use their own item table instead of the input embedding.

    With tied tables the hidden state of position ``t`` carries the embedding of the item just read, so
    that item scores high as its own successor; on MovieLens, where nobody rates a film twice, the tied
    model keeps ranking the last items it read near the top (docs/results.md, "The FPARec paper's
    cross-entropy SASRec"). A separate output table weakens that coupling (on ML-1M it also ranks the films
    the user has not seen less well, measured there); every paper of the course ties the tables, so this is
    a labelled variant.
    """
    return build_sasrec(n_items, max_len, d_model, n_layers, n_heads, dropout, attn_dropout, layout, ffn_dim,
                        embedding_scale, tie_embeddings=False)
