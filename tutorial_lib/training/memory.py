"""Out-of-memory failures turned into errors that say which settings to lower.

PyTorch reports an exhausted GPU with ``torch.OutOfMemoryError`` and an exhausted CPU with a plain
``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory"); neither names the setting that made the
tensor too large. :func:`explain_out_of_memory` re-raises both as
:class:`~tutorial_lib.errors.NotEnoughMemoryError` with advice, and lets every other error through unchanged.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..errors import NotEnoughMemoryError

#: lower-case fragments of the allocators' messages (CPU, CUDA, MPS)
OUT_OF_MEMORY_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocator's failure to find memory (CPU, CUDA or MPS)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OUT_OF_MEMORY_MARKERS)


@contextmanager
def explain_out_of_memory(doing: str, advice: str) -> Iterator[None]:
    """Re-raise an out-of-memory error inside the block as :class:`NotEnoughMemoryError`:
    ``"out of memory <doing> (<the allocator's first line>). <advice>"``."""
    try:
        yield
    except RuntimeError as exc:
        if not is_out_of_memory(exc):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if len(first) > 240:
            first = first[:237] + "..."
        raise NotEnoughMemoryError(f"out of memory {doing} ({first}). {advice}") from exc


__all__ = ["OUT_OF_MEMORY_MARKERS", "is_out_of_memory", "explain_out_of_memory"]
