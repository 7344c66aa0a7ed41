"""Attention families behind one interface: ``y, weights = attention(x, ctx)``."""
from .base import Attention, SequenceContext, merge_heads, split_heads
from .dot_product import DotProductAttention, naive_attention

__all__ = ["Attention", "SequenceContext", "DotProductAttention", "naive_attention", "split_heads", "merge_heads"]
