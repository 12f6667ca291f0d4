"""Where the model runs: the device and dtype a setting names, and the hardware's name."""

from __future__ import annotations

import platform

import torch

from model.cpu import cpu_info

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """Map "auto" to cuda when available, else cpu; refuse half precision off CUDA."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device {device!r} is not a torch device; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was requested but CUDA is not available here; use auto or cpu")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r} does not exist; this host has {torch.cuda.device_count()} CUDA devices")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if dtype != "float32" and dev.type != "cuda":
        raise ValueError(f"dtype {dtype} needs a CUDA device, but the device is {dev.type}; use float32")
    return dev, DTYPES[dtype]


def device_name(device: torch.device) -> str:
    """The GPU's name on CUDA, else the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_info().model or platform.processor() or platform.machine() or "unknown CPU"
