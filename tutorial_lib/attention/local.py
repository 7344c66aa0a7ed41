"""Local attention (Locker, He et al., CIKM 2021): some heads are local encoders, the rest stay global.

The ``M`` heads are split into ``M_l`` local and ``M_g = M - M_l`` global ones (paper Eq. 2)::

    V_i = [V_i^(1,local); ...; V_i^(M_l,local); V_i^(1,global); ...; V_i^(M_g,global)] W_O

Global heads are scaled dot-product attention. Local heads use one of five encoders on their own
``d/M``-dimensional slices of ``Q, K, V``. ``rnn``, ``conv`` and ``win`` look at most ``s`` items away
(``window = s``); ``initial`` and ``adapt`` see every position and favour the near ones through a bias
(``window`` does not change them):

* ``rnn`` (Eq. 3): a GRU run over the last ``s + 1`` values ``V_{i-s} .. V_i`` (looking back); its
  final state is the output. One GRU per local head.
* ``conv`` (Eq. 4): ``ReLU(Conv1d(V))`` with a kernel over the ``2s + 1`` centred rows (bidirectional)
  or over the ``s + 1`` rows ending at ``i`` (causal: one-sided, no future row).
* ``win`` (Eq. 6): dot-product attention masked to ``|i - j| <= s`` (causal: ``0 <= i - j <= s``).
* ``initial`` (Eq. 5): dot-product logits plus a learnable bias per distance, ``w_ij + p_{i-j}``
  (``p = ln σ``), initialised as a Gaussian bump ``p_Δ = a exp(-Δ^2 / b)`` (``a = 1``, ``b = 0.5``: the
  released code's ``α = 1, σ = 0.5``).
* ``adapt`` (Eq. 7): the bias is predicted, ``p_ij = MLP(V_i + V_j + W_u v_u + b_{i-j})``, from the two
  value vectors, a distance embedding and a user vector ``v_u`` built from the sequence as in FISM
  (``Σ_t x_t / sqrt(n)`` over the input embeddings; on the causal backbone over the items ``<= i`` only;
  padding and a cloze model's ``[MASK]`` tokens are not items, as in the released code).

For ``initial`` and ``adapt`` the paper removes position embeddings from the local heads and gives
them to the global heads' queries and keys only: the backbone then adds no positions, and this module
adds ``P`` (a position table shared by the layers) to the global heads' ``Q`` and ``K``.

On a causal backbone every local encoder is one-sided (no future position reaches the output).

**Released-code compatibility** (``compat=True``, docs/methods.md §5.1): ``initial`` multiplies the logits by
``sigmoid(p / 0.1)`` with the Gaussian centred one step ahead; ``adapt`` uses a linear predictor;
``rnn`` looks *forward* (``V_i .. V_{i+s}``, so it needs the bidirectional backbone); for ``initial``
and ``adapt`` the positions go to the *local* heads' queries and keys and the global heads get none. One
approximation remains there: the released code adds per-layer tables ``P^q, P^k`` *after* the projections, while
this module adds the model's one ``d``-wide position table before each layer's ``W_Q, W_K``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .base import Attention, SequenceContext, check_heads, merge_heads, split_heads
from .dot_product import naive_attention
from .pairwise_bias import pairwise_mlp_bias

ENCODERS = ("rnn", "conv", "win", "initial", "adapt")
#: encoders whose local heads take no position embedding (positions go to the global heads)
POSITION_FREE = ("initial", "adapt")


def distance_matrix(L: int, device: torch.device | None = None) -> torch.Tensor:
    """``(L, L)`` long, entry ``[i, j] = i - j`` (positive: ``j`` is in the past of ``i``)."""
    idx = torch.arange(L, device=device)
    return idx[:, None] - idx[None, :]


def local_window(L: int, reach: int, causal: bool, device: torch.device | None = None) -> torch.Tensor:
    """``(L, L)`` bool: key ``j`` is within ``reach`` of query ``i`` (and not in the future if ``causal``)."""
    dist = distance_matrix(L, device)
    return (dist >= 0) & (dist <= reach) if causal else dist.abs() <= reach


def fism_user_vectors(embeddings: torch.Tensor, valid: torch.Tensor, causal: bool) -> torch.Tensor:
    """FISM-style user vector ``Σ_t x_t / sqrt(n)`` from the input embeddings ``(B, L, d)``.

    ``causal``: one vector per position, over the items ``<= i`` (``(B, L, d)``); otherwise one per
    sequence, broadcast to every position. Padding is excluded.
    """
    x = embeddings * valid[..., None].to(embeddings.dtype)
    if causal:
        count = valid.cumsum(dim=1).clamp_min(1).to(x.dtype)
        return x.cumsum(dim=1) / count.sqrt()[..., None]
    count = valid.sum(dim=1, keepdim=True).clamp_min(1).to(x.dtype)
    return (x.sum(dim=1, keepdim=True) / count.sqrt()[..., None]).expand_as(x)


class LocalAttention(Attention):
    """Locker's multi-head attention with ``n_local`` local heads and ``n_heads - n_local`` global heads.

    Args:
        d_model: width ``d`` (divisible by ``n_heads``).
        n_heads: total heads ``M``.
        n_local: local heads ``M_l`` (``1 <= M_l <= M``; ``M_l = M`` leaves no global head).
        encoder: one of :data:`ENCODERS`.
        max_len: longest window (size of the distance tables).
        window: reach ``s`` of the local encoders.
        attn_dropout: dropout on attention weights (global heads and the masking-based local ones).
        position_table: the shared position embedding (``initial``/``adapt``: added to the global
            heads' queries and keys; with ``compat`` to the local ones).
        compat: the released code's behaviour (see the module docstring).
        gauss_a, gauss_b: the Gaussian initialisation ``a exp(-Δ^2 / b)`` of ``initial``.
        causal: built for a causal backbone (one-sided local encoders; the conv kernel has ``s + 1`` taps).
    """

    def __init__(self, d_model: int, n_heads: int, n_local: int, encoder: str, max_len: int, window: int = 1,
                 attn_dropout: float = 0.0, position_table: nn.Embedding | None = None, compat: bool = False,
                 gauss_a: float = 1.0, gauss_b: float = 0.5, causal: bool = True):
        super().__init__()
        check_heads(d_model, n_heads)
        if encoder not in ENCODERS:
            raise ConfigError(f"unknown local encoder {encoder!r}; valid encoders are: {', '.join(ENCODERS)}")
        if not 1 <= n_local <= n_heads:
            raise ConfigError(f"n_local must be in 1..n_heads={n_heads}, got {n_local}")
        if window < 1 or window >= max_len:
            raise ConfigError(f"window (the reach s of the local encoder) must be in 1..max_len-1={max_len - 1}, "
                              f"got {window}")
        if encoder in POSITION_FREE and position_table is None:
            raise ConfigError(f"the {encoder!r} encoder needs the shared position table (positions go to the "
                              "global heads' queries and keys only)")
        self.d_model, self.n_heads, self.n_local, self.encoder = d_model, n_heads, n_local, encoder
        self.max_len, self.window, self.attn_dropout, self.compat = max_len, window, attn_dropout, compat
        self.gauss_a, self.gauss_b, self.causal = gauss_a, gauss_b, causal
        self.dh = d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.position_table = position_table
        dh, ml = self.dh, n_local
        if encoder == "rnn":
            self.grus = nn.ModuleList(nn.GRU(dh, dh, batch_first=True) for _ in range(ml))
        elif encoder == "conv":
            taps = window + 1 if causal else 2 * window + 1
            self.convs = nn.ModuleList(nn.Conv1d(dh, dh, taps) for _ in range(ml))
        elif encoder == "initial":
            self.distance_bias = nn.Parameter(torch.empty(ml, 2 * max_len - 1))   # p_Δ, Δ = -(n-1)..n-1
        elif encoder == "adapt":
            self.distance_embedding = nn.Parameter(torch.empty(ml, 2 * max_len - 1, dh))
            self.user_proj = nn.Linear(d_model, ml * dh)
            hidden = dh
            if compat:
                self.predictor = nn.ModuleList(nn.Linear(dh, 1) for _ in range(ml))
            else:
                # no bias on the output layer: it would add one constant to every logit of a row, which the
                # softmax cancels (its gradient is exactly zero), so it could never learn anything
                self.predictor = nn.ModuleList(nn.Sequential(nn.Linear(dh, hidden), nn.ReLU(),
                                                             nn.Linear(hidden, 1, bias=False))
                                               for _ in range(ml))
        self.reset_parameters()

    # ------------------------------------------------------------------ set-up
    def reset_parameters(self) -> None:
        """The Gaussian bump for ``initial`` (centred at distance 0; one step ahead with ``compat``);
        N(0, 0.02) for the distance embeddings of ``adapt``."""
        if self.encoder == "initial":
            delta = torch.arange(-(self.max_len - 1), self.max_len, dtype=torch.float32)
            if self.compat:                      # the code's index mapping puts the peak at j = i + 1
                delta = delta + 1
            bump = self.gauss_a * torch.exp(-delta ** 2 / self.gauss_b)
            with torch.no_grad():
                self.distance_bias.copy_(bump.expand_as(self.distance_bias))
        elif self.encoder == "adapt":
            nn.init.normal_(self.distance_embedding, std=0.02)

    def _distance_index(self, L: int, device: torch.device) -> torch.Tensor:
        """``(L, L)`` index into the distance tables: ``(i - j) + max_len - 1``."""
        return distance_matrix(L, device) + self.max_len - 1

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor, ctx: SequenceContext, memory: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, d)`` -> ``(B, L, d)`` and, with ``ctx.need_weights``, the ``(B, M, L, L)`` weights (local
        heads first); ``None`` for the ``rnn`` and ``conv`` encoders, which have no weights."""
        if memory is not None:
            raise ConfigError("local attention supports the 'paper' layout only")
        if ctx.causal != self.causal:
            raise ConfigError(f"this local attention was built for a {'causal' if self.causal else 'bidirectional'} "
                              "backbone; build it with causal=ctx.causal")
        if self.compat and ctx.causal and self.encoder == "rnn":
            raise ConfigError("the released code's RNN encoder looks forward (V_i..V_{i+s}); it needs the "
                              "bidirectional backbone (compat=False gives the paper's backward-looking RNN)")
        q, k, v = (split_heads(t, self.n_heads) for t in self.in_proj(x).chunk(3, dim=-1))   # (B, M, L, dh)
        if self.position_table is not None:
            q, k = self._add_positions(q, k, ctx)
        ml = self.n_local
        v = v * ctx.valid_mask[:, None, :, None].to(v.dtype)           # padding values never leak
        local_out, local_w = self._local(q[:, :ml], k[:, :ml], v[:, :ml], ctx)
        outs, weights = [local_out], [local_w]
        if ml < self.n_heads:
            g_out, g_w = self._global(q[:, ml:], k[:, ml:], v[:, ml:], ctx)
            outs.append(g_out)
            weights.append(g_w)
        out = torch.cat(outs, dim=1)
        w = None
        if ctx.need_weights and all(t is not None for t in weights):
            w = torch.cat(weights, dim=1)
        return self.out_proj(merge_heads(out)), w

    def _add_positions(self, q: torch.Tensor, k: torch.Tensor, ctx: SequenceContext
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the projected position embedding to the global heads' (``compat``: the local heads')
        queries and keys: ``(x + P) W = x W + P W``."""
        p = self.position_table(ctx.positions)                                  # (L, d)
        w_q, w_k, _ = self.in_proj.weight.chunk(3, dim=0)
        pq = (p @ w_q.t()).view(-1, self.n_heads, self.dh).transpose(0, 1)     # (M, L, dh)
        pk = (p @ w_k.t()).view(-1, self.n_heads, self.dh).transpose(0, 1)
        heads = torch.zeros(self.n_heads, 1, 1, device=q.device, dtype=q.dtype)
        if self.compat:
            heads[: self.n_local] = 1.0
        else:
            heads[self.n_local:] = 1.0
        return q + heads * pq, k + heads * pk

    def _global(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: SequenceContext
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Dot-product attention of the global heads: ``(B, M_g, L, dh)`` each -> ``(B, M_g, L, dh)``, weights."""
        p = self.attn_dropout if self.training else 0.0
        if ctx.need_weights:
            return naive_attention(q, k, v, ctx.allowed(), p, self.training)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.allowed(), dropout_p=p), None

    def _local(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: SequenceContext
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The local heads' encoder: ``(B, M_l, L, dh)`` each -> ``(B, M_l, L, dh)``, weights or ``None``."""
        if self.encoder == "rnn":
            return self._rnn(v, ctx), None
        if self.encoder == "conv":
            return self._conv(v, ctx), None
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.dh)                   # (B, M_l, L, L)
        allowed = ctx.allowed()
        L = ctx.length
        if self.encoder == "win":
            allowed = allowed & local_window(L, self.window, ctx.causal, q.device)
        elif self.encoder == "initial":
            bias = self.distance_bias[:, self._distance_index(L, q.device)]     # (M_l, L, L)
            logits = logits * torch.sigmoid(bias / 0.1) if self.compat else logits + bias
        else:
            logits = logits + self._adaptive_bias(v, ctx)
        allowed = allowed | torch.eye(L, dtype=torch.bool, device=q.device)     # every row keeps itself
        weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        p = self.attn_dropout if self.training else 0.0
        return F.dropout(weights, p, self.training) @ v, weights if ctx.need_weights else None

    def _adaptive_bias(self, v: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        """``(B, M_l, L, L)`` predicted bias ``pred(V_i + V_j + W_u v_u + b_{i-j})``.

        The first layer of the predictor is linear, so it is applied to each term separately; the
        ``(B, L, L, hidden)`` hidden layer is then formed block by block and never stored
        (:func:`~tutorial_lib.attention.pairwise_bias.pairwise_mlp_bias`). On the causal backbone the
        future entries (masked afterwards anyway) are not computed.

        With ``compat`` (the released code's *linear* predictor) the bias is a sum of a row term
        (``V_i``, the user vector, the predictor's bias), a column term and a distance term, and the
        row's softmax cancels the row term: the user projection and the predictor's bias then get
        (numerically) zero gradient and the released encoder is not user-adaptive. Reproduced as released.
        """
        B, ml, L, dh = v.shape
        x0 = ctx.extras.get("input_embeddings")
        if x0 is None:
            raise ConfigError("the adaptive encoder needs ctx.extras['input_embeddings'] (set by the backbone)")
        items = ctx.extras.get("item_mask", ctx.valid_mask)    # a cloze model's [MASK] is not an item
        user = self.user_proj(fism_user_vectors(x0, items, ctx.causal)).view(B, L, ml, dh)
        dist = self.distance_embedding[:, self._distance_index(L, v.device)]    # (M_l, L, L, dh)
        out = []
        for m, pred in enumerate(self.predictor):
            first = pred if self.compat else pred[0]
            cols = v[:, m] @ first.weight.t()                                   # (B, L, h): V_j
            rows = cols + first(user[:, :, m])                                  # (B, L, h): V_i, v_u, bias
            dm = dist[m] @ first.weight.t()                                      # (L, L, h): b_{i-j}
            if self.compat:                                                      # linear predictor, h = 1
                out.append((rows[:, :, None] + cols[:, None, :] + dm[None]).squeeze(-1))
            else:                  # (B, L, L, h) hidden layer in row blocks: pairwise_bias.py, 5x faster
                second = pred[2]
                out.append(pairwise_mlp_bias(rows, cols, dm, second.weight[0], causal=ctx.causal))
        return torch.stack(out, dim=1)

    def _rnn(self, v: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        """GRU over each position's window of ``s + 1`` values (backward ``i-s..i``; ``compat``: ``i..i+s``)."""
        B, ml, L, dh = v.shape
        s = self.window
        pad = (0, 0, s, 0) if not self.compat else (0, 0, 0, s)
        out = []
        for m, gru in enumerate(self.grus):
            padded = F.pad(v[:, m], pad)                                        # (B, L + s, dh)
            windows = padded.unfold(1, s + 1, 1).permute(0, 1, 3, 2)            # (B, L, s + 1, dh)
            _, h = gru(windows.reshape(B * L, s + 1, dh))
            out.append(h[-1].view(B, L, dh))
        return torch.stack(out, dim=1)

    def _conv(self, v: torch.Tensor, ctx: SequenceContext) -> torch.Tensor:
        """``ReLU(Conv1d)`` over ``2s + 1`` centred rows, or, causal, over the ``s + 1`` rows ending at ``i``
        (left zero padding: no future row)."""
        s = self.window
        pad = (s, 0) if self.causal else (s, s)
        out = []
        for m, conv in enumerate(self.convs):
            y = conv(F.pad(v[:, m].transpose(1, 2), pad))                       # (B, dh, L)
            out.append(torch.relu(y).transpose(1, 2))
        return torch.stack(out, dim=1)
