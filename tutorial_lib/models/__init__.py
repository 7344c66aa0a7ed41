"""The shared backbone and the registry of named models."""
from . import sasrec  # noqa: F401  (registers "sasrec")
from .backbone import Block, FeedForward, SequentialRecommender
from .registry import MODELS, build_model, get_model_entry, model_names, register_model

__all__ = ["SequentialRecommender", "Block", "FeedForward", "MODELS", "build_model", "get_model_entry",
           "model_names", "register_model"]
