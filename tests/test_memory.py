"""Out-of-memory errors: recognised on every allocator, re-raised with advice, everything else untouched."""
from __future__ import annotations

import sys

import pytest
import torch

from tutorial_lib.errors import NotEnoughMemoryError, TutorialLibError
from tutorial_lib.training.memory import (available_memory, cgroup_headroom, explain_out_of_memory, is_out_of_memory,
                                          training_step_floor)

CPU = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
       "allocate 3200000000 bytes. Error code 12 (Cannot allocate memory)")
CUDA = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB"
MPS = "MPS backend out of memory (MPS allocated: 8.00 GB, other allocations: 1.2 GB)"


@pytest.mark.parametrize("exc", [RuntimeError(CPU), RuntimeError(MPS), torch.OutOfMemoryError(CUDA)])
def test_every_allocator_failure_is_recognised(exc):
    assert is_out_of_memory(exc)


@pytest.mark.parametrize("exc", [RuntimeError("mat1 and mat2 shapes cannot be multiplied"), ValueError(CPU),
                                 KeyError("memory")])
def test_other_errors_are_not(exc):
    assert not is_out_of_memory(exc)


def test_out_of_memory_is_re_raised_with_the_advice_and_its_cause():
    with pytest.raises(NotEnoughMemoryError) as info:
        with explain_out_of_memory("while ranking", "Lower the batch."):
            raise torch.OutOfMemoryError(CUDA + "\nmore lines of the allocator's report")
    msg = str(info.value)
    assert msg.startswith("out of memory while ranking (CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert msg.endswith("Lower the batch.") and "more lines" not in msg
    assert isinstance(info.value, TutorialLibError) and isinstance(info.value.__cause__, torch.OutOfMemoryError)


def test_a_long_allocator_line_is_shortened():
    with pytest.raises(NotEnoughMemoryError) as info:
        with explain_out_of_memory("here", "Advice."):
            raise RuntimeError("out of memory " + "x" * 1000)
    assert len(str(info.value)) < 300 and "..." in str(info.value)


def test_other_errors_leave_the_block_unchanged():
    original = RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    with pytest.raises(RuntimeError) as info:
        with explain_out_of_memory("here", "Advice."):
            raise original
    assert info.value is original


def test_the_training_floor_counts_the_saved_tensors_of_every_block():
    # 4 float32 tensors of (B, L, d) per block
    assert training_step_floor(batch_size=128, width=200, d_model=64, n_layers=2) == 4 * 2 * 128 * 200 * 64 * 4


def test_the_floor_stays_below_a_measured_training_step():
    """The floor is a lower bound: the tensors one forward pass keeps for backward (counted by a saved-tensors hook)
    of SASRec and FPARec's released layout (no FFN in its blocks, dropout off: the fewest) already exceed it."""
    from tutorial_lib.models import build_model

    for name, opts in [("sasrec", {"dropout": 0.0, "d_model": 32}), ("fparec", {"compat": True, "dropout": 0.0})]:
        model = build_model(name, n_items=50, max_len=40, **opts)
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved = {}     # each stored activation once, however many operations save it; the weights not counted

        def keep(t):
            if t.is_floating_point() and t.untyped_storage().data_ptr() not in weights:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            model(torch.randint(1, 51, (8, 40))).sum().backward()
        assert sum(saved.values()) > training_step_floor(8, 40, model.d_model, len(model.blocks)), name


def test_available_memory_is_known_for_a_linux_cpu_and_unknown_for_mps():
    free = available_memory(torch.device("cpu"))
    if sys.platform.startswith("linux"):
        assert isinstance(free, int) and free > 0
    assert available_memory(torch.device("mps")) is None


def _cgroup(tmp_path, limit: str, usage: int, stat: str) -> tuple[tuple[str, str, str], ...]:
    files = [tmp_path / name for name in ("memory.max", "memory.current", "memory.stat")]
    for f, text in zip(files, (limit, str(usage), stat)):
        f.write_text(text + "\n")
    return ((str(files[0]), str(files[1]), str(files[2])),)


def test_a_cgroup_limit_leaves_the_limit_minus_the_working_set(tmp_path):
    """A container's or a JupyterHub pod's limit, which MemAvailable does not see; reclaimable cache not counted."""
    gib = 2**30
    files = _cgroup(tmp_path, str(4 * gib), 3 * gib, f"anon {2 * gib}\ninactive_file {gib}\nactive_file 5")
    assert cgroup_headroom(files) == 2 * gib
    assert cgroup_headroom(_cgroup(tmp_path, str(gib), 2 * gib, "anon 0")) == 0        # over the limit: nothing left
    assert cgroup_headroom(_cgroup(tmp_path, "max", gib, "anon 0")) is None            # cgroup v2 without a limit
    assert cgroup_headroom(_cgroup(tmp_path, str(2**63 - 4096), gib, "")) is None      # cgroup v1 without a limit
    assert cgroup_headroom(((str(tmp_path / "nowhere"), str(tmp_path / "none"), str(tmp_path / "no")),)) is None


def test_the_cpu_gets_the_smaller_of_mem_available_and_the_cgroup_headroom(monkeypatch):
    import tutorial_lib.training.memory as memory

    if not sys.platform.startswith("linux"):
        pytest.skip("MemAvailable and cgroups are Linux's")
    monkeypatch.setattr(memory, "_mem_available", lambda: 8 * 2**30)
    monkeypatch.setattr(memory, "cgroup_headroom", lambda: 2**30)
    assert available_memory(torch.device("cpu")) == 2**30
    monkeypatch.setattr(memory, "cgroup_headroom", lambda: None)
    assert available_memory(torch.device("cpu")) == 8 * 2**30
