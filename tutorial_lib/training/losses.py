"""Training losses, all computed only at valid (non-padding) target positions.

* ``ce``: full softmax cross-entropy over every item (Transformers4Rec / "Dross into gold").
* ``bce``: binary cross-entropy with sampled negatives (the original SASRec).
* ``sampled-ce``: softmax cross-entropy over the target and N shared uniform negatives.

Each takes the backbone's hidden states ``(B, L, d)``, the targets ``(B, L)`` (0 = no target) and
the item matrix ``(n_items + 1, d)`` used for scoring.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

LOSSES = ("ce", "bce", "sampled-ce")


def valid_positions(hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather ``(N, d)`` hidden states and ``(N,)`` targets at the positions that have a target."""
    mask = targets.ne(0)
    return hidden[mask], targets[mask]


class ChunkedSoftmaxCE(torch.autograd.Function):
    """Mean cross-entropy of ``softmax(h W^T)`` computed in row chunks, gradients formed on the fly.

    The plain version materialises the ``(N, n_items)`` logits, their softmax and their gradient:
    hundreds of MB per batch that stream through memory three times. Here each chunk of rows is
    scored, turned into its gradient ``softmax - onehot`` while it is still in cache, and folded
    into ``dL/dh`` and ``dL/dW`` immediately. Same numbers (up to float rounding), much less
    memory, and on a CPU a SASRec epoch on ML-1M 1.45x faster than with ``F.cross_entropy``
    (results/benchmarks/train_speed.md).
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, h: torch.Tensor, w: torch.Tensor, t: torch.Tensor,
                chunk: int) -> torch.Tensor:
        """``h`` ``(N, d)`` states, ``w`` ``(C, d)`` class vectors, ``t`` ``(N,)`` class indices -> the mean loss
        ``()``; the gradients for ``h`` and ``w`` are computed here, chunk by chunk, and saved."""
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = torch.zeros_like(w) if need_grad else None
        total = h.new_zeros((), dtype=torch.float64)
        for start in range(0, h.shape[0], chunk):
            hc, tc = h[start:start + chunk], t[start:start + chunk]
            logits = hc @ w.t()
            lse = torch.logsumexp(logits, dim=1)
            total += (lse - logits.gather(1, tc[:, None]).squeeze(1)).sum(dtype=torch.float64)
            if need_grad:
                probs = logits.sub_(lse[:, None]).exp_()
                probs[torch.arange(len(tc), device=tc.device), tc] -= 1.0
                grad_h[start:start + chunk] = probs @ w
                grad_w.addmm_(probs.t(), hc)
        n = max(h.shape[0], 1)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.n = n
        return (total / n).to(h.dtype)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        """The saved ``(N, d)`` and ``(C, d)`` gradients scaled by ``grad_out / N``."""
        grad_h, grad_w = ctx.saved_tensors
        scale = grad_out / ctx.n
        return grad_h * scale, grad_w * scale, None, None


#: rows per chunk of the full cross-entropy on a CPU: a (128, n_items) block of logits stays in cache
CPU_CE_CHUNK = 128
#: logits per chunk on a GPU (256 MiB in float32): ML-1M's batches fit in one chunk, large catalogues stay bounded
#: (above 2**26 / 128 = 524,288 items the 128-row floor makes chunks larger than this)
GPU_CE_LOGITS = 2**26


def ce_chunk_rows(setting: int | str | None, device: torch.device, n_items: int) -> int | None:
    """Rows per chunk of :func:`full_ce_loss` for ``setting`` (``ce_chunk`` of the trainer's config).

    ``"auto"``: 128 rows on a CPU, where the chunked loss made a SASRec epoch 1.45x faster than the plain one
    because each block of logits stays in cache; on a GPU as many rows as keep a chunk under
    :data:`GPU_CE_LOGITS` logits, because there each chunk costs a dozen kernel launches and a GPU needs large
    blocks to be busy. Measured on an H100 only (ML-1M, batch 128: 2.0 s per epoch in chunks of 128 against
    0.5 s unchunked; results/benchmarks/train_speed_h100.md); MPS and other accelerators follow the GPU rule
    unmeasured. An int or ``None`` (no chunks) is used as it is.
    """
    if setting != "auto":
        return setting
    if device.type == "cpu":
        return CPU_CE_CHUNK
    return max(CPU_CE_CHUNK, GPU_CE_LOGITS // max(n_items, 1))


def full_ce_loss(hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor, chunk: int | None = CPU_CE_CHUNK
                 ) -> torch.Tensor:
    """Mean softmax cross-entropy over all items ``1..n`` at valid positions.

    Only valid positions are scored: on short-sequence data most positions are padding, and scoring
    them would cost most of the training time for nothing. ``chunk`` rows at a time go through
    :class:`ChunkedSoftmaxCE`; ``chunk=None`` uses the plain ``F.cross_entropy`` (same value).
    """
    h, t = valid_positions(hidden, targets)
    w = items[1:]  # (n_items, d): the padding item is never a class
    if chunk is None:
        return F.cross_entropy((h @ w.t()).float(), t - 1)
    return ChunkedSoftmaxCE.apply(h.float(), w.float(), t - 1, chunk)


def bce_loss(hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor, negatives: torch.Tensor
             ) -> torch.Tensor:
    """SASRec's loss: ``-log σ(r_pos) - Σ_j log(1 - σ(r_neg_j))``, averaged over valid positions.

    ``negatives`` is ``(B, L, n_neg)``; with one negative this is exactly the original loss.
    """
    mask = targets.ne(0)
    h = hidden[mask]                                   # (N, d)
    pos = (h * F.embedding(targets[mask], items)).sum(-1)                    # (N,)
    neg = torch.einsum("nd,nkd->nk", h, F.embedding(negatives[mask], items))  # (N, n_neg)
    return (F.softplus(-pos.float()) + F.softplus(neg.float()).sum(-1)).mean()


def sampled_softmax_loss(hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor,
                         negatives: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over ``[target, negatives]`` with ``negatives`` ``(n_neg,)`` shared by the batch.

    Negatives that happen to equal a position's target are masked out (no "accidental hits"). With
    uniform sampling the log-Q correction is a constant and drops out.
    """
    h, t = valid_positions(hidden, targets)
    pos = (h * F.embedding(t, items)).sum(-1, keepdim=True)  # (N, 1)
    neg = h @ F.embedding(negatives, items).t()              # (N, n_neg)
    neg = neg.masked_fill(negatives[None, :].eq(t[:, None]), float("-inf"))
    logits = torch.cat([pos, neg], dim=1).float()
    return F.cross_entropy(logits, torch.zeros(len(t), dtype=torch.long, device=logits.device))
