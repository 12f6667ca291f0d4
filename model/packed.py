"""Float32 linear layers run eagerly on oneDNN's packed GEMM, the kernel the compiled graphs run.

A weight (N, K) is reordered once into oneDNN's blocked layout (`mkldnn._reorder_linear_weight`) and multiplied by
`mkldnn._linear_pointwise`: what Inductor's freezing lowers a float32 linear to in the AOTInductor packages
(model/compile/). Eagerly, F.linear would run aten's plain sgemm (MKL) on the weight as stored, which at
NLLB-200-distilled-600M's size took 1.5-2x as long a decoder step (bench/peers.py; docs/performance-history.md), its
256k-row output projection most of all. The packed copy is made on a layer's first eager call on a CPU, and again
when the weight is replaced or changed in place (training); it is not state: copies and pickles start without it,
and `release` drops every copy a model holds (model/compile's `adopt` does, once graphs run all its steps). It costs
memory: a second copy of each float32 weight the eager model multiplies by.

Anything else runs F.linear: another device or dtype, gradients (training), a trace (torch.export, torch.compile:
they see the plain F.linear and lower it themselves), a torch without oneDNN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedWeight:
    """A weight's copy in oneDNN's layout, kept while the weight is the same tensor at the same version."""

    __slots__ = ("_packed", "_version", "_weight")

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._weight: torch.Tensor | None = None
        self._version, self._packed = -1, None

    def __reduce__(self):
        return PackedWeight, ()  # a copy (copy.deepcopy, pickle) packs again: a packed weight has no storage

    @property
    def held(self) -> bool:
        return self._packed is not None

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """F.linear(x, weight, bias), on the packed weight where it can run. x (..., K), weight (N, K) -> (..., N)"""
        if not _runs_packed(x, weight, bias):
            return F.linear(x, weight, bias)
        version = -2 if weight.is_inference() else weight._version  # inference tensors keep no version
        if self._weight is not weight or self._version != version:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
            self._weight, self._version = weight, version
        rows = x.reshape(-1, x.size(-1)).contiguous()  # (M, K): the kernel takes a matrix
        y = torch.ops.mkldnn._linear_pointwise(rows, self._packed, bias, "none", [], "")
        return y.view(*x.shape[:-1], weight.size(0))


def _runs_packed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (
        _ONEDNN
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.numel() > 0
        and not (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))
        and not torch.compiler.is_compiling()
    )


class Linear(nn.Linear):
    """nn.Linear (the same parameters and state dict) whose eager float32 calls on a CPU run the packed GEMM."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.packed = PackedWeight()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.packed.linear(x, self.weight, self.bias)


def release(model: nn.Module) -> int:
    """Drop every packed copy the model's layers hold (they pack again if called eagerly) and hand the memory back;
    returns how many were dropped."""
    from model.quantize import release_freed_memory

    dropped = 0
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, PackedWeight) and value.held:
                value.clear()
                dropped += 1
    if dropped:
        release_freed_memory()
    return dropped
