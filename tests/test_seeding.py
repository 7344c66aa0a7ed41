"""forked_torch_rng: a seeded block that leaves the caller's random numbers alone."""
from __future__ import annotations

import pytest
import torch

from tutorial_lib.utils import forked_torch_rng


def test_the_block_is_seeded_and_the_callers_generator_is_untouched():
    torch.manual_seed(123)
    expected_after = torch.rand(3)
    torch.manual_seed(123)
    with forked_torch_rng(7):
        inside = torch.rand(3)
    assert torch.equal(inside, torch.rand(3, generator=torch.Generator().manual_seed(7)))
    assert torch.equal(torch.rand(3), expected_after)


def test_without_a_seed_the_block_draws_on_a_copy():
    torch.manual_seed(5)
    expected_after = torch.rand(2)
    torch.manual_seed(5)
    with forked_torch_rng():
        assert torch.equal(torch.rand(2), expected_after)   # the caller's stream, continued on a copy
    assert torch.equal(torch.rand(2), expected_after)       # ... which the caller does not lose


def test_the_generator_is_restored_when_the_block_raises():
    torch.manual_seed(9)
    expected_after = torch.rand(2)
    torch.manual_seed(9)
    with pytest.raises(ValueError), forked_torch_rng(1):
        torch.rand(100)
        raise ValueError("construction failed")
    assert torch.equal(torch.rand(2), expected_after)
