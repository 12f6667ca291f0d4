"""Device and dtype settings resolve to what this host has, or say what it lacks."""

from __future__ import annotations

import pytest
import torch

from app.engine.device import device_name, resolve_device


def test_resolve_device():
    expected = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("auto", "float32") == (expected, torch.float32)
    assert resolve_device("cpu", "float32") == (torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_device("cpu", "float16")
    with pytest.raises(ValueError, match="not a torch device"):
        resolve_device("banana", "float32")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda", "bfloat16")


def test_device_name_names_the_cpu_or_the_gpu():
    assert device_name(torch.device("cpu")).strip()
    if torch.cuda.is_available():
        assert device_name(torch.device("cuda:0")) == torch.cuda.get_device_name(0)
