"""Small helpers shared by every stage: device choice, seeding, atomic file writes."""
from .device import resolve_device, synchronize
from .io import atomic_write_bytes, atomic_write_text
from .seeding import deterministic_algorithms, forked_torch_rng, seed_everything

__all__ = ["resolve_device", "synchronize", "seed_everything", "deterministic_algorithms", "forked_torch_rng",
           "atomic_write_bytes", "atomic_write_text"]
