"""RKSA (Ji et al., AAAI 2020): SASRec's backbone with relation-aware kernelized stochastic attention.

The model has a user embedding table ``U`` (``n_users`` rows, paper §Embedding Layer; A16: N(0, 0.02)),
whose row reaches every layer's kernels; the co-occurrence counts of the training split are computed by
``model.prepare(split)`` (the Trainer calls it) and shared by the layers. With ``leave_user_out=True`` the
counts leave each sequence's own user out (attention.kernelized), and the model is called with ``users=``.
"""
from __future__ import annotations

from torch import nn

from ..attention.kernelized import CooccurrenceProvider, KernelizedAttention
from ..errors import ConfigError
from .backbone import SequentialRecommender
from .registry import register_model


def build_rksa_model(n_items: int, max_len: int, n_users: int | None, kernels: str = "ciu", d_model: int = 64,
                     n_layers: int = 2, n_heads: int = 1, dropout: float = 0.5, attn_dropout: float = 0.0,
                     item_kernel: str = "linear", rank_weight: float = 1e-3, stochastic: bool = True,
                     ffn_dim: int | None = None, stochastic_rows: str = "all",
                     leave_user_out: bool = False, construction: str = "eq13",
                     shape_counts: str = "raw") -> SequentialRecommender:
    """RKSA on SASRec's backbone, its layers sharing one :class:`CooccurrenceProvider`; ``n_users`` is required
    when the kernels read the user embedding (see :class:`KernelizedAttention` for the options)."""
    provider = CooccurrenceProvider(leave_user_out, shape_counts)
    layers = [KernelizedAttention(d_model, n_heads, provider, kernels, item_kernel, attn_dropout, rank_weight,
                                  stochastic=stochastic, stochastic_rows=stochastic_rows, construction=construction)
              for _ in range(n_layers)]
    uses_user = layers[0].uses_user
    if uses_user and not n_users:
        raise ConfigError(f"RKSA with kernels {kernels!r} reads a user embedding: pass n_users (the number of "
                          "users of the dataset)")
    model = SequentialRecommender(
        n_items, max_len, d_model, n_layers, attention_factory=lambda i: layers[i],
        dropout=dropout, ffn_dim=ffn_dim, n_users=n_users if uses_user else None,
    )
    if model.user_embedding is not None:
        nn.init.normal_(model.user_embedding.weight, std=0.02)
    model.needs_users = leave_user_out          # the counts depend on whose sequence it is (user_inputs reads it)
    return model


def _register(name: str, kernels: str, description: str, variant_of: str | None = None) -> None:
    @register_model(name, description, family="kernelized", variant_of=variant_of)
    def build(n_items: int, max_len: int, n_users: int | None = None, d_model: int = 64, n_layers: int = 2,
              n_heads: int = 1, dropout: float = 0.5, attn_dropout: float = 0.0, kernels: str = kernels,
              item_kernel: str = "linear", rank_weight: float = 1e-3, stochastic: bool = True,
              ffn_dim: int | None = None, stochastic_rows: str = "all",
              leave_user_out: bool = False, construction: str = "eq13",
              shape_counts: str = "raw") -> SequentialRecommender:
        return build_rksa_model(n_items, max_len, n_users, kernels, d_model, n_layers, n_heads, dropout, attn_dropout,
                                item_kernel, rank_weight, stochastic, ffn_dim, stochastic_rows, leave_user_out,
                                construction, shape_counts)

    build.__doc__ = f"{description} (see attention.kernelized)."


_register("rksa", "ciu", "RKSA: skew-normal stochastic attention logits, counting + item + user kernels")
for _subset in ("c", "i", "u", "ci", "cu", "iu"):
    _register(f"rksa-{_subset}", _subset, f"RKSA with the kernel subset {_subset.upper()} (the paper's Table 3)",
              variant_of="rksa")
