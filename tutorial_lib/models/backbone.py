"""The shared backbone: item + position embeddings -> N attention blocks -> scores over all items.

Written once; every method in the course is this backbone with a different attention family.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..attention.base import Attention, SequenceContext
from ..errors import ConfigError

LAYOUTS = ("paper", "tf")
POSITIONS = ("absolute", "none")


class FeedForward(nn.Module):
    """Point-wise feed-forward network ``W_2 Dropout(ReLU(W_1 x))``, applied to every position."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    """One self-attention block.

    ``layout="paper"`` (pre-LN, SASRec paper, default)::

        x = x + Dropout(Attn(LN(x)))
        x = x + Dropout(FFN(LN(x)))

    ``layout="tf"`` (the released TF code, methods.md §2.1): queries from ``q = LN(x)`` but keys and
    values from the raw ``x``, residual from ``q``, the FFN residual from its normalised input, and
    padding positions zeroed after the block::

        q = LN(x);  x = q + Attn(q, keys/values=x)
        f = LN(x);  x = (f + Dropout(FFN(f))) * valid
    """

    def __init__(self, attention: Attention, d_model: int, ffn_dim: int, dropout: float,
                 layout: str = "paper", ln_eps: float = 1e-8):
        super().__init__()
        self.attention, self.layout = attention, layout
        self.ln_attn = nn.LayerNorm(d_model, eps=ln_eps)
        self.ln_ffn = nn.LayerNorm(d_model, eps=ln_eps)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, ctx: SequenceContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.layout == "tf":
            q = self.ln_attn(x)
            a, weights = self.attention(q, ctx, memory=x)
            x = q + a
            f = self.ln_ffn(x)
            x = (f + self.dropout(self.ffn(f))) * ctx.valid_mask.unsqueeze(-1).to(x.dtype)
            return x, weights
        a, weights = self.attention(self.ln_attn(x), ctx)
        x = x + self.dropout(a)
        x = x + self.dropout(self.ffn(self.ln_ffn(x)))
        return x, weights


class SequentialRecommender(nn.Module):
    """Embeddings -> blocks -> final LayerNorm; scores are dot products with the (tied) item embeddings.

    Args:
        n_items: number of items; ids run ``1..n_items``, 0 is padding.
        max_len: longest input window ``L``. Positions are counted from the right (the most recent
            item always has position ``max_len - 1``), so a batch trimmed to a shorter width gets the
            same position embeddings as the full window.
        d_model: width ``d``.
        n_layers: number of blocks.
        attention_factory: ``layer_index -> Attention``; a fresh module per block.
        dropout: dropout on embeddings, attention output and FFN.
        ffn_dim: inner FFN width (default ``d_model`` as in SASRec).
        layout: ``"paper"`` or ``"tf"`` (see :class:`Block`).
        positions: ``"absolute"`` (learned position embeddings added to the input) or ``"none"``
            (families that encode positions inside attention).
        embedding_scale: multiply item embeddings by ``sqrt(d)`` on input (SASRec's code does).
        causal: autoregressive model (every position predicts the next item).
    """

    def __init__(self, n_items: int, max_len: int, d_model: int, n_layers: int,
                 attention_factory: Callable[[int], Attention], dropout: float = 0.2,
                 ffn_dim: int | None = None, layout: str = "paper", positions: str = "absolute",
                 embedding_scale: bool = True, causal: bool = True):
        super().__init__()
        check_backbone_config(n_items=n_items, max_len=max_len, d_model=d_model, n_layers=n_layers,
                              dropout=dropout, layout=layout, positions=positions)
        self.n_items, self.max_len, self.d_model, self.causal = n_items, max_len, d_model, causal
        self.layout, self.positions = layout, positions
        self.embedding_scale = math.sqrt(d_model) if embedding_scale else 1.0
        self.item_embedding = nn.Embedding(n_items + 1, d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len, d_model) if positions == "absolute" else None
        self.embedding_dropout = nn.Dropout(dropout)
        ln_eps = 1e-8 if layout == "tf" else 1e-6
        self.blocks = nn.ModuleList(
            Block(attention_factory(i), d_model, ffn_dim or d_model, dropout, layout, ln_eps) for i in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model, eps=ln_eps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform for every matrix (as SASRec's TF code), zero biases, padding row zero."""
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias") and "norm" not in name and "ln_" not in name:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()

    # ----------------------------------------------------------------- encoding
    def make_context(self, item_ids: torch.Tensor, need_weights: bool = False, **extras) -> SequenceContext:
        return SequenceContext.from_item_ids(item_ids, causal=self.causal, need_weights=need_weights, **extras)

    def embed(self, item_ids: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` ids -> ``(B, L, d)`` input states (padding positions are zero)."""
        L = item_ids.shape[1]
        if L > self.max_len:
            raise ConfigError(f"input has length {L} but the model was built with max_len={self.max_len}")
        x = self.item_embedding(item_ids) * self.embedding_scale
        if self.position_embedding is not None:
            pos = torch.arange(self.max_len - L, self.max_len, device=item_ids.device)
            x = x + self.position_embedding(pos)
        x = self.embedding_dropout(x)
        return x * item_ids.ne(0).unsqueeze(-1).to(x.dtype)

    def encode(self, item_ids: torch.Tensor, need_weights: bool = False, **extras
               ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """``(B, L)`` ids -> hidden states ``(B, L, d)`` and, per block, its attention weights."""
        ctx = self.make_context(item_ids, need_weights=need_weights, **extras)
        x = self.embed(item_ids)
        weights = []
        for block in self.blocks:
            x, w = block(x, ctx)
            weights.append(w)
        return self.final_norm(x), weights

    def forward(self, item_ids: torch.Tensor, **extras) -> torch.Tensor:
        """``(B, L)`` ids -> ``(B, L, d)`` hidden states; position ``t`` summarises items ``<= t``."""
        return self.encode(item_ids, **extras)[0]

    # ------------------------------------------------------------------ scoring
    @property
    def output_embedding(self) -> torch.Tensor:
        """``(n_items + 1, d)`` item matrix used for scoring (tied with the input embedding)."""
        return self.item_embedding.weight

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` -> ``(..., n_items + 1)`` scores; the padding column is ``-inf``."""
        scores = hidden @ self.output_embedding.t()
        scores[..., 0] = float("-inf")
        return scores

    def score_next(self, item_ids: torch.Tensor, **extras) -> torch.Tensor:
        """Scores of every candidate next item after the last position: ``(B, L)`` -> ``(B, n_items+1)``."""
        return self.score(self.forward(item_ids, **extras)[:, -1])


def check_backbone_config(*, n_items: int, max_len: int, d_model: int, n_layers: int, dropout: float,
                          layout: str, positions: str) -> None:
    """Raise :class:`ConfigError` for impossible settings, saying how to fix them."""
    if n_items < 1:
        raise ConfigError(f"n_items must be >= 1, got {n_items}")
    if max_len < 2:
        raise ConfigError(f"max_len must be >= 2 (one input and one target), got {max_len}")
    if d_model < 1 or n_layers < 1:
        raise ConfigError(f"d_model and n_layers must be >= 1, got d_model={d_model}, n_layers={n_layers}")
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"dropout must be in [0, 1), got {dropout}")
    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if positions not in POSITIONS:
        raise ConfigError(f"positions must be one of {POSITIONS}, got {positions!r}")
