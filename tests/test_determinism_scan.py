"""Which operations a training run calls, checked on the CPU against those that stop a deterministic GPU run.

``--deterministic`` turns on ``torch.use_deterministic_algorithms`` in its strict form. On a CPU nothing a model
of the course calls lacks a deterministic version (tests/test_trainer.py trains every family in that mode), but
several CUDA kernels have none and raise instead. Without a GPU in CI, these tests record the ATen operations one
epoch of training and validation calls (forward, loss, backward, optimiser step, ranking) under a
``TorchDispatchMode`` and compare them with torch's list of operations that raise on CUDA. The fused attention
kernels differ between CPU and CUDA and cannot be seen here; tests/test_cuda.py checks those on a GPU.
"""
from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from test_models import FAMILIES
from tutorial_lib.models import build_model
from tutorial_lib.training import TrainConfig, Trainer

MAX_LEN = 10

#: ATen operations with no deterministic CUDA kernel in torch 2.13 (``torch.use_deterministic_algorithms``' list
#: of operations that raise). Each maps to a test of its arguments, read by name from the operation's schema:
#: ``None`` means any call raises.
RAISES_ON_CUDA = {
    "avg_pool3d_backward": None,
    "_adaptive_avg_pool2d_backward": None,
    "_adaptive_avg_pool3d_backward": None,
    "adaptive_max_pool2d_backward": None,
    "fractional_max_pool2d_backward": None,
    "fractional_max_pool3d_backward": None,
    "max_unpool2d": None,
    "max_unpool3d": None,
    "upsample_linear1d_backward": None,
    "upsample_bilinear2d_backward": None,
    "upsample_bicubic2d_backward": None,
    "upsample_trilinear3d_backward": None,
    "reflection_pad1d_backward": None,
    "reflection_pad2d_backward": None,
    "reflection_pad3d_backward": None,
    "_ctc_loss_backward": None,
    "grid_sampler_2d_backward": None,
    "grid_sampler_3d_backward": None,
    "put_": None,
    "put": None,
    "histc": None,
    # a loss over (B, C, L) logits reduced to a number (nll_loss2d_forward_out_cuda_template)
    "nll_loss2d_forward": lambda argument: argument("reduction", 1) != 0,
    "bincount": lambda argument: argument("weights", None) is not None,
    "median": lambda argument: argument("dim", None) is not None,          # the overloads that return indices
    "scatter_reduce": lambda argument: argument("reduce", None) == "prod",
    "_embedding_bag_backward": lambda argument: argument("mode", 0) == 2,  # mode="max"
}
#: deterministic on CUDA in recent torch, not in older releases (docs/reproducibility.md): reported, not refused
VERSION_DEPENDENT = {"cumsum"}
#: the families whose training calls a floating-point cumsum, as README says
CUMSUM_FAMILIES = {"lightsans", "lightsans-ape", "locker-adapt", "rksa"}


def _argument(func, args: tuple, kwargs: dict, name: str, default):
    """The value of argument ``name`` of a call of the ATen operation ``func``, or ``default`` when not given."""
    if name in kwargs:
        return kwargs[name]
    names = [a.name for a in func._schema.arguments]
    if name not in names:
        return default
    position = names.index(name)
    return args[position] if len(args) > position else default


class OperationRecorder(TorchDispatchMode):
    """Records the ATen operations called inside it: ``raises_on_cuda`` those of :data:`RAISES_ON_CUDA` whose
    arguments make them raise, ``float_cumsum`` whether a floating-point ``cumsum`` was called."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.raises_on_cuda: set[str] = set()
        self.float_cumsum = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.names.add(name)
        if name in RAISES_ON_CUDA:
            condition = RAISES_ON_CUDA[name]
            if condition is None or condition(partial(_argument, func, args, kwargs)):
                self.raises_on_cuda.add(name)
        if name.rstrip("_") in VERSION_DEPENDENT and args[0].is_floating_point():
            self.float_cumsum = True
        return func(*args, **kwargs)


def one_epoch(split, name: str, loss: str = "ce", **config) -> OperationRecorder:
    torch.manual_seed(0)
    model = build_model(name, split.n_items, MAX_LEN, n_users=len(split.train), d_model=16, n_layers=1,
                        dropout=0.1)
    recorder = OperationRecorder()
    with recorder:
        result = Trainer(model, split, TrainConfig(epochs=1, batch_size=32, loss=loss, device="cpu", **config)).fit()
    assert math.isfinite(result.history[0]["loss"])
    return recorder


def test_the_recorder_sees_an_operation_that_raises_on_cuda():
    """A loss over (B, C, L) logits (what ``F.cross_entropy(logits.transpose(1, 2), targets)`` calls) raises on
    CUDA in deterministic mode when it is reduced; per position it does not."""
    logits = torch.randn(2, 5, 3, requires_grad=True)
    targets = torch.randint(0, 5, (2, 3))
    with OperationRecorder() as reduced:
        F.cross_entropy(logits, targets).backward()
    with OperationRecorder() as per_position:
        F.cross_entropy(logits, targets, reduction="none").sum().backward()
    assert reduced.raises_on_cuda == {"nll_loss2d_forward"}
    assert "nll_loss2d_forward" in per_position.names and not per_position.raises_on_cuda


def test_the_recorder_sees_backward_operations_and_cumsum():
    x = torch.randn(1, 2, 6, requires_grad=True)
    with OperationRecorder() as padded:
        F.pad(x, (1, 1), mode="reflect").sum().backward()
    with OperationRecorder() as counted:
        torch.arange(4).cumsum(0)
    with OperationRecorder() as summed:
        torch.rand(4).cumsum(0)
    assert padded.raises_on_cuda == {"reflection_pad1d_backward"}
    assert not counted.float_cumsum and summed.float_cumsum


def test_the_recorder_reads_arguments_by_name():
    """scatter_reduce raises on CUDA with reduce='prod' only; its reduce is the fifth positional argument."""
    index = torch.tensor([0, 1, 0])
    with OperationRecorder() as product:
        torch.zeros(2).scatter_reduce(0, index, torch.ones(3), reduce="prod")
    with OperationRecorder() as total:
        torch.zeros(2).scatter_reduce(0, index, torch.ones(3), reduce="sum")
    assert product.raises_on_cuda == {"scatter_reduce"} and not total.raises_on_cuda


@pytest.mark.parametrize("name", FAMILIES)
def test_no_family_calls_an_operation_that_stops_a_deterministic_gpu_run(tiny_split, name):
    recorder = one_epoch(tiny_split, name)
    assert not recorder.raises_on_cuda, f"{name} calls {sorted(recorder.raises_on_cuda)}"
    assert recorder.float_cumsum == (name in CUMSUM_FAMILIES)


@pytest.mark.parametrize("loss", ["bce", "sampled-ce"])
def test_the_sampled_losses_call_no_operation_that_stops_a_deterministic_gpu_run(tiny_split, loss):
    recorder = one_epoch(tiny_split, "sasrec", loss, n_negatives=8)
    assert not recorder.raises_on_cuda
