"""Plots and explorers: attention maps, training curves, and a per-user explorer with a static fallback.

Everything draws with matplotlib (imported when a function is called); the interactive explorer imports
``ipywidgets`` only when it is built.
"""
from .attention import plot_attention_grid, plot_attention_map
from .curves import plot_training_curves
from .explorer import attention_explorer, explorer_static, recommend_top_k, user_attention, user_view

__all__ = ["plot_attention_map", "plot_attention_grid", "plot_training_curves", "recommend_top_k",
           "user_attention", "user_view", "explorer_static", "attention_explorer"]
