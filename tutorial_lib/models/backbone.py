"""The shared backbone: item + position embeddings -> N attention blocks -> scores over all items.

Written once; every method in the course is this backbone with a different attention family.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ..attention.base import Attention, SequenceContext
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..data.split import LeaveOneOutSplit

LAYOUTS = ("paper", "tf")
POSITIONS = ("absolute", "none")
FFN_PLACEMENTS = ("block", "stack")


class Dropout(nn.Module):
    """Inverted dropout, ``x * (rand >= p) / (1 - p)`` in training and the identity in evaluation: the same
    distribution as :class:`torch.nn.Dropout`, drawn with ``torch.rand`` into a float mask, which on a CPU is
    about twice as fast as ``nn.Dropout``'s Bernoulli sampling (``benchmarks/train_speed.py``)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` of any shape -> the same shape, dropped out and rescaled in training."""
        if not self.training or self.p == 0.0:
            return x
        mask = (torch.rand_like(x) >= self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * mask

    def extra_repr(self) -> str:
        """``p=...`` in the module's repr."""
        return f"p={self.p}"


class FeedForward(nn.Module):
    """Point-wise feed-forward network ``W_2 Dropout(ReLU(W_1 x))``, applied to every position."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), nn.ReLU(), Dropout(dropout),
                                 nn.Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` -> ``(..., d)``, position by position."""
        return self.net(x)


class Block(nn.Module):
    """One self-attention block.

    ``layout="paper"`` (pre-LN, SASRec paper, default)::

        x = x + Dropout(Attn(LN(x)))
        x = x + Dropout(FFN(LN(x)))

    ``layout="tf"`` (the released TF code, docs/methods.md §2.1): queries from ``q = LN(x)`` but keys and
    values from the raw ``x``, residual from ``q``, the FFN residual from its normalised input, and
    padding positions zeroed after the block::

        q = LN(x);  x = q + Attn(q, keys/values=x)
        f = LN(x);  x = (f + Dropout(FFN(f))) * valid

    With ``ffn=False`` the block is attention only (FPARec's released code runs one FFN after the whole
    stack instead, see :class:`SequentialRecommender`).
    """

    def __init__(self, attention: Attention, d_model: int, ffn_dim: int, dropout: float,
                 layout: str = "paper", ln_eps: float = 1e-8, ffn: bool = True):
        super().__init__()
        self.attention, self.layout = attention, layout
        self.ln_attn = nn.LayerNorm(d_model, eps=ln_eps)
        self.ln_ffn = nn.LayerNorm(d_model, eps=ln_eps) if ffn else None
        self.ffn = FeedForward(d_model, ffn_dim, dropout) if ffn else None
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, ctx: SequenceContext) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` -> ``(B, L, d)`` and the attention's ``(B, H, L, L)`` weights (or ``None``)."""
        if self.layout == "tf":
            q = self.ln_attn(x)
            a, weights = self.attention(q, ctx, memory=x)
            x = q + a
            if self.ffn is not None:
                f = self.ln_ffn(x)
                x = (f + self.dropout(self.ffn(f))) * ctx.valid_mask.unsqueeze(-1).to(x.dtype)
            return x, weights
        a, weights = self.attention(self.ln_attn(x), ctx)
        x = x + self.dropout(a)
        if self.ffn is not None:
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
        objective: how the model is trained (the trainer reads it):
            ``"next"``: every position predicts the next item (SASRec family; needs causal attention);
            ``"cloze"``: masked items are predicted with bidirectional attention (BERT4Rec); the item
            table then has one extra row, id ``n_items + 1``, for ``[MASK]``;
            ``"last"``: every prefix of a history is its own sample and only its last position predicts
            (RecBole's training; the only correct one for non-causal attention such as LightSANs' released code).
        causal: whether attention masks future positions (default: ``objective == "next"``).
        ffn_placement: ``"block"`` (a point-wise FFN in every block, the papers) or ``"stack"`` (the
            blocks are attention only and one FFN follows the stack: FPARec's released code, docs/methods.md §4.2).
        tie_embeddings: score items with the input item embedding (SASRec and every paper here), or
            with a separate output table (``False``; see notebook 02: it lets the model stop recommending
            the items it has just read).
        n_users: when given, a user embedding table ``(n_users, d)`` whose rows reach the attention
            layers as ``ctx.user`` (``forward(..., users=...)`` must then be called with user indices).
        full_width: left-pad every input to ``max_len`` before encoding and return the positions of the
            given width. For attention whose output depends on the number of padding columns (LightSANs'
            released code normalises over the whole padded window, as RecBole always pads to
            ``MAX_ITEM_LIST_LENGTH``): without it a user's scores would depend on the width of the batch,
            which the evaluator and the prefix batches trim to their longest sequence.
    """

    def __init__(self, n_items: int, max_len: int, d_model: int, n_layers: int,
                 attention_factory: Callable[[int], Attention], dropout: float = 0.2,
                 ffn_dim: int | None = None, layout: str = "paper", positions: str = "absolute",
                 embedding_scale: bool = True, objective: str = "next", causal: bool | None = None,
                 ffn_placement: str = "block", n_users: int | None = None, tie_embeddings: bool = True,
                 full_width: bool = False):
        super().__init__()
        causal = objective == "next" if causal is None else causal
        check_backbone_config(n_items=n_items, max_len=max_len, d_model=d_model, n_layers=n_layers,
                              dropout=dropout, layout=layout, positions=positions, ffn_placement=ffn_placement,
                              objective=objective, causal=causal, ffn_dim=ffn_dim)
        self.n_items, self.max_len, self.d_model = n_items, max_len, d_model
        self.objective, self.causal, self.full_width = objective, causal, full_width
        self.layout, self.positions, self.ffn_placement = layout, positions, ffn_placement
        self.mask_id = n_items + 1 if objective == "cloze" else None
        self.embedding_scale = math.sqrt(d_model) if embedding_scale else 1.0
        self.item_embedding = nn.Embedding(n_items + (2 if objective == "cloze" else 1), d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len, d_model) if positions == "absolute" else None
        self.output_table = None if tie_embeddings else nn.Parameter(torch.empty(n_items + 1, d_model))
        self.user_embedding = nn.Embedding(n_users, d_model) if n_users else None
        self.embedding_dropout = Dropout(dropout)
        ln_eps = 1e-8 if layout == "tf" else 1e-6
        per_block_ffn = ffn_placement == "block"
        self.blocks = nn.ModuleList(
            Block(attention_factory(i), d_model, ffn_dim or d_model, dropout, layout, ln_eps, ffn=per_block_ffn)
            for i in range(n_layers)
        )
        if per_block_ffn:
            self.stack_norm = self.stack_ffn = None
        else:
            self.stack_norm = nn.LayerNorm(d_model, eps=ln_eps)
            self.stack_ffn = FeedForward(d_model, ffn_dim or d_model, dropout)
        self.stack_dropout = Dropout(dropout)
        self.final_norm = nn.LayerNorm(d_model, eps=ln_eps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform for every matrix as stored, zero biases, padding row zero; then each attention
        module may re-initialise its own parameters (``reset_parameters`` of the family).

        SASRec's TF code initialises each ``(d, d)`` projection Glorot-uniform (bound ``sqrt(3/d)``). A fused
        ``(3d, d)`` Q/K/V projection (``in_proj`` of SASRec, LightSANs, Locker and RKSA) gets the bound
        ``sqrt(6/4d)``: its Q, K and V start ``1/sqrt(2)`` narrower than the TF code's. Every committed run
        used this initialisation, so it is kept and documented rather than changed."""
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias") and "norm" not in name and "ln_" not in name:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()
            if self.output_table is not None:
                self.output_table[0].zero_()
        for block in self.blocks:
            reset = getattr(block.attention, "reset_parameters", None)
            if reset is not None:
                reset()

    # ----------------------------------------------------------------- hooks for families
    def prepare(self, split: LeaveOneOutSplit) -> None:
        """Give every attention module that needs statistics of the training split (RKSA's co-occurrence
        counts) the chance to compute them. Called by the :class:`~tutorial_lib.training.Trainer`."""
        for module in self.modules():
            if module is not self and hasattr(module, "prepare"):
                module.prepare(split)

    def auxiliary_loss(self) -> torch.Tensor | None:
        """Sum of the auxiliary losses the attention layers produced in the last forward pass (RKSA's
        listwise co-occurrence loss), or ``None`` when no layer has one."""
        losses = [block.attention.aux_loss for block in self.blocks
                  if getattr(block.attention, "aux_loss", None) is not None]
        return torch.stack(losses).sum() if losses else None

    # ----------------------------------------------------------------- encoding
    def make_context(self, item_ids: torch.Tensor, need_weights: bool = False, users: torch.Tensor | None = None,
                     **extras: Any) -> SequenceContext:
        """The :class:`SequenceContext` of ``(B, L)`` ids; with a user table, ``users`` ``(B,)`` give ``ctx.user``
        ``(B, d)``; ``extras`` become ``ctx.extras``."""
        user = None
        if self.user_embedding is not None:
            if users is None:
                raise ConfigError("this model has a user embedding: call it with users=<(B,) user indices>")
            user = self.user_embedding(users)
        return SequenceContext.from_item_ids(item_ids, causal=self.causal, need_weights=need_weights,
                                             max_len=self.max_len, users=users, user=user, extras=extras)

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

    def encode(self, item_ids: torch.Tensor, need_weights: bool = False, users: torch.Tensor | None = None,
               **extras: Any) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """``(B, L)`` ids -> hidden states ``(B, L, d)`` and, per block, its attention weights."""
        width = item_ids.shape[1]
        if self.full_width and width < self.max_len:
            hidden, weights = self.encode(F.pad(item_ids, (self.max_len - width, 0)), need_weights, users, **extras)
            return hidden[:, -width:], [None if w is None else w[..., -width:, -width:] for w in weights]
        ctx = self.make_context(item_ids, need_weights=need_weights, users=users, **extras)
        x = self.embed(item_ids)
        ctx.extras.setdefault("input_embeddings", x)
        if self.mask_id is not None:                 # real items only: neither padding nor [MASK]
            ctx.extras.setdefault("item_mask", ctx.valid_mask & item_ids.ne(self.mask_id))
        weights = []
        for block in self.blocks:
            x, w = block(x, ctx)
            weights.append(w)
        if self.stack_ffn is not None:
            f = self.stack_norm(x)
            x = (f + self.stack_dropout(self.stack_ffn(f))) * ctx.valid_mask.unsqueeze(-1).to(x.dtype)
        return self.final_norm(x), weights

    def forward(self, item_ids: torch.Tensor, **extras: Any) -> torch.Tensor:
        """``(B, L)`` ids -> ``(B, L, d)`` hidden states; if ``causal``, position ``t`` summarises items ``<= t``."""
        return self.encode(item_ids, **extras)[0]

    # ------------------------------------------------------------------ scoring
    @property
    def output_embedding(self) -> torch.Tensor:
        """``(n_items + 1, d)`` item matrix used for scoring (tied with the input embedding unless the model
        was built with ``tie_embeddings=False``; the ``[MASK]`` row of a bidirectional model is not a candidate)."""
        if self.output_table is not None:
            return self.output_table
        return self.item_embedding.weight[: self.n_items + 1]

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` -> ``(..., n_items + 1)`` scores; the padding column is ``-inf``."""
        scores = hidden @ self.output_embedding.t()
        scores[..., 0] = float("-inf")
        return scores

    def next_item_input(self, item_ids: torch.Tensor) -> torch.Tensor:
        """The input whose last position predicts the next item. Causal models read the history as it
        is; a cloze model reads the history shifted left by one with ``[MASK]`` appended (the oldest
        column drops out, so the width, and ``max_len``, is kept)."""
        if self.mask_id is None:
            return item_ids
        mask = torch.full_like(item_ids[:, :1], self.mask_id)
        return torch.cat([item_ids[:, 1:], mask], dim=1) if item_ids.shape[1] == self.max_len else \
            torch.cat([item_ids, mask], dim=1)

    def score_next(self, item_ids: torch.Tensor, **extras: Any) -> torch.Tensor:
        """Scores of every candidate next item after the last position: ``(B, L)`` -> ``(B, n_items+1)``."""
        return self.score(self.forward(self.next_item_input(item_ids), **extras)[:, -1])


def user_inputs(model: nn.Module, users: torch.Tensor) -> dict[str, torch.Tensor]:
    """Keyword inputs besides the item ids: ``{"users": users}`` for a model with a user embedding
    table or one that says it ``needs_users`` (RKSA leaving the user's own counts out), else nothing
    (so baselines and plain models are called exactly as before)."""
    needs = getattr(model, "user_embedding", None) is not None or getattr(model, "needs_users", False)
    return {"users": users} if needs else {}


OBJECTIVES = ("next", "cloze", "last")


def check_backbone_config(*, n_items: int, max_len: int, d_model: int, n_layers: int, dropout: float,
                          layout: str, positions: str, ffn_placement: str = "block", objective: str = "next",
                          causal: bool = True, ffn_dim: int | None = None) -> None:
    """Raise :class:`ConfigError` for impossible settings, saying how to fix them."""
    if n_items < 1:
        raise ConfigError(f"n_items must be >= 1, got {n_items}")
    if max_len < 2:
        raise ConfigError(f"max_len must be >= 2 (one input and one target), got {max_len}")
    if d_model < 1 or n_layers < 1:
        raise ConfigError(f"d_model and n_layers must be >= 1, got d_model={d_model}, n_layers={n_layers}")
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"dropout must be in [0, 1), got {dropout}")
    if ffn_dim is not None and ffn_dim < 1:
        raise ConfigError(f"ffn_dim (the FFN's inner width) must be >= 1, got {ffn_dim}; leave it out for d_model")
    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if positions not in POSITIONS:
        raise ConfigError(f"positions must be one of {POSITIONS}, got {positions!r}")
    if ffn_placement not in FFN_PLACEMENTS:
        raise ConfigError(f"ffn_placement must be one of {FFN_PLACEMENTS}, got {ffn_placement!r}")
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if objective == "next" and not causal:
        raise ConfigError("objective='next' trains every position on the next item, which needs causal attention; "
                          "use objective='last' (prefix samples) or 'cloze' for a bidirectional model")
