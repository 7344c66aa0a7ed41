"""Out-of-memory errors: recognised on every allocator, re-raised with advice, everything else untouched."""
from __future__ import annotations

import pytest
import torch

from tutorial_lib.errors import NotEnoughMemoryError, TutorialLibError
from tutorial_lib.training.memory import explain_out_of_memory, is_out_of_memory

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
