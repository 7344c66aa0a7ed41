"""resolve_device: "auto", explicit names, and $SEQREC_DEVICE deciding what "auto" means."""
from __future__ import annotations

import pytest
import torch

from tutorial_lib.errors import ConfigError
from tutorial_lib.utils import resolve_device
from tutorial_lib.utils.device import DEVICE_ENV


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (True, False, "cuda"),
                                                  (False, True, "mps"), (False, False, "cpu")])
def test_auto_prefers_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert resolve_device("auto") == torch.device(expected) and resolve_device() == torch.device(expected)


def test_the_environment_decides_what_auto_means(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(DEVICE_ENV, " CPU ")
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setenv(DEVICE_ENV, "auto")                  # "auto" in the environment: the usual preference
    assert resolve_device("auto") == torch.device("cuda")


def test_an_explicit_device_ignores_the_environment(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "no-such-device")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_a_bad_or_missing_device_in_the_environment_is_named(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "tpu")
    with pytest.raises(ConfigError, match=rf"{DEVICE_ENV}='tpu' in the environment: unknown device 'tpu'"):
        resolve_device("auto")
    if not torch.cuda.is_available():
        monkeypatch.setenv(DEVICE_ENV, "cuda")
        with pytest.raises(ConfigError, match=rf"{DEVICE_ENV}='cuda'.*no CUDA GPU is visible.*unset {DEVICE_ENV}"):
            resolve_device("auto")


def test_unknown_explicit_device_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="use 'auto', 'cpu', 'cuda' or 'mps'"):
        resolve_device("tpu")
