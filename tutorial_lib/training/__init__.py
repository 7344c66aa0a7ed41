"""Losses and the trainer."""
from .checkpoint import load_checkpoint, save_checkpoint
from .losses import LOSSES, bce_loss, full_ce_loss, sampled_softmax_loss
from .negatives import NegativeSampler
from .trainer import TrainConfig, Trainer, TrainResult

__all__ = ["LOSSES", "bce_loss", "full_ce_loss", "sampled_softmax_loss", "NegativeSampler", "TrainConfig",
           "Trainer", "TrainResult", "save_checkpoint", "load_checkpoint"]
