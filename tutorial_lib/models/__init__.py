"""The shared backbone and the registry of named models."""
from . import lightsans, locker, parec, rksa, sasrec  # noqa: F401  (register the models)
from .backbone import Block, FeedForward, SequentialRecommender
from .registry import MODELS, build_model, get_model_entry, model_names, register_model

__all__ = ["SequentialRecommender", "Block", "FeedForward", "MODELS", "build_model", "get_model_entry",
           "model_names", "register_model"]
