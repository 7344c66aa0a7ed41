"""Out-of-memory failures turned into errors that say which settings to lower.

PyTorch reports an exhausted GPU with ``torch.OutOfMemoryError`` and an exhausted CPU with a plain
``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory"); neither names the setting that made the
tensor too large. :func:`explain_out_of_memory` re-raises both as
:class:`~tutorial_lib.errors.NotEnoughMemoryError` with advice, and lets every other error through unchanged.

Some settings fail before the allocator can say so: a Linux kernel that overcommits hands out the memory and
then kills the process when it is touched (the shell prints "Killed" and nothing else). So
:func:`training_step_floor` gives a lower bound on what one training step keeps for the backward pass, and the
trainer refuses a configuration whose floor already exceeds :func:`available_memory`.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


#: (B, L, d) float32 tensors every block keeps for the backward pass, at the least: its input, the normalised
#: input, the values and the attention output (queries, keys, dropout masks, the attention scores and the
#: feed-forward layer come on top). Counted with a saved-tensors hook at width 40, dropout off, the registry's
#: families keep 5.6 (PARec and FPARec in their released layout, with no FFN in the blocks) to 36 (LightSANs) such
#: tensors per block; the peak resident memory of a CPU step is 10 to 70 of them, so the floor stays below it.
SAVED_TENSORS_PER_BLOCK = 4


def training_step_floor(batch_size: int, width: int, d_model: int, n_layers: int) -> int:
    """Bytes one training step keeps for the backward pass, at the least: ``SAVED_TENSORS_PER_BLOCK`` float32
    tensors of shape ``(batch_size, width, d_model)`` per block. The real peak is several times larger."""
    return SAVED_TENSORS_PER_BLOCK * n_layers * batch_size * width * d_model * 4


#: (limit, usage) files of the cgroup the process runs in: version 2, then version 1 (a container's or a JupyterHub
#: pod's memory limit, which Linux's MemAvailable does not see)
CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat"),
                ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                 "/sys/fs/cgroup/memory/memory.stat"))


def available_memory(device: torch.device) -> int | None:
    """Bytes ``device`` can still allocate: CUDA's free memory; for the CPU, Linux's ``MemAvailable`` (what can be
    allocated without swapping) or, when less, what the process's cgroup limit leaves; ``None`` where it is not
    known (MPS, macOS or Windows CPUs)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu" or not sys.platform.startswith("linux"):
        return None
    known = [b for b in (_mem_available(), cgroup_headroom()) if b is not None]
    return min(known) if known else None


def _mem_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or ``None``."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024    # the file counts kiB
    return None


def cgroup_headroom(files: tuple[tuple[str, str, str], ...] = CGROUP_FILES) -> int | None:
    """Bytes left under the cgroup's memory limit: the limit minus the usage, not counting the inactive file cache
    (which the kernel reclaims before it kills), as container tools count a working set; ``None`` without a
    limit or a cgroup file to read."""
    for limit_file, usage_file, stat_file in files:
        try:
            limit, usage = Path(limit_file).read_text().strip(), int(Path(usage_file).read_text())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 2**60:   # no limit (v1 writes a huge number)
            return None
        cache = 0
        try:
            for line in Path(stat_file).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key in ("inactive_file", "total_inactive_file"):
                    cache = int(value)
        except (OSError, ValueError):
            pass
        return max(int(limit) - max(usage - cache, 0), 0)
    return None


__all__ = ["OUT_OF_MEMORY_MARKERS", "SAVED_TENSORS_PER_BLOCK", "available_memory", "cgroup_headroom",
           "explain_out_of_memory", "is_out_of_memory", "training_step_floor"]
