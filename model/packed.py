"""Float32 linear layers run eagerly on oneDNN's GEMM, the kernel the compiled graphs run.

`mkldnn._linear_pointwise` multiplies by a weight (N, K) as stored for one row and, from PACKED_FROM_ROWS rows on,
by a copy reordered once into oneDNN's blocked layout (`mkldnn._reorder_linear_weight`): what Inductor's freezing
lowers a float32 linear to in the AOTInductor packages (model/compile/). Eagerly, F.linear would run aten's plain
sgemm (MKL), which at NLLB-200-distilled-600M's size took 1.5-2x as long a decoder step (bench/peers.py;
docs/performance-history.md), its 256k-row output projection most of all. The packed copy is made on a layer's first
eager call of several rows on a CPU, and again when the weight is replaced or changed in place (training); it is
not state: copies and pickles start without it, and `release` drops every copy a model holds (model/compile's
`adopt` does, once graphs run all its steps). It costs memory: a second copy of each float32 weight the eager model
multiplies several rows by.

Anything else runs F.linear: a weight smaller than PACKED_FROM_ELEMENTS, another device or dtype, gradients
(training), a trace (torch.export, torch.compile: they see the plain F.linear and lower it themselves), a torch
without oneDNN.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import nn

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# One row (a batch-1 decoder step) runs oneDNN's kernel on the weight as stored: its matrix-vector product reads that
# layout fastest (0.75-0.8x the packed weight's time at NLLB-200's shapes, with AVX-512 and kept to AVX2); from 2 rows
# on the packed weight is as fast or faster (1.1-1.5x from 3 rows with AVX-512, 1.05-1.1x kept to AVX2). So a server
# of one row (NMT_MAX_BATCH_SIZE=1) never holds a packed copy.
PACKED_FROM_ROWS = 2
# Below 256 x 256 weights oneDNN's call costs more than the product: ~20 us more than F.linear's for a 64 x 64 layer
# (27.8 against 6.5 us, 32 rows), which the tests' small models multiply by thousands of times. The bundled model's
# smallest weights are 256 x 256 and decode faster on oneDNN (a 32-row step 5.0 against 5.3 ms with those on F.linear).
PACKED_FROM_ELEMENTS = 256 * 256


class PackedWeight:
    """A weight's copy in oneDNN's blocked layout, kept while the weight is the same tensor at the same version."""

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
        rows = x.reshape(-1, x.size(-1)).contiguous()  # (M, K): the kernel takes a matrix
        if rows.size(0) < PACKED_FROM_ROWS:
            w = weight.detach()  # oneDNN reads the weight as stored
        else:
            version = -2 if weight.is_inference() else weight._version  # inference tensors keep no version
            if self._weight is not weight or self._version != version:
                self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
                self._weight, self._version = weight, version
            w = self._packed
        y = torch.ops.mkldnn._linear_pointwise(rows, w, bias, "none", [], "")
        return y.view(*x.shape[:-1], weight.size(0))


def _runs_packed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (
        _ONEDNN
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.numel() > 0
        and weight.is_contiguous()
        and weight.numel() >= PACKED_FROM_ELEMENTS
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
    returns how many were dropped. The float32 layers' PackedWeights, and the copy of any layer with a `drop_packed`
    (model/quantize.py's int8 layers)."""
    dropped = 0
    for module in model.modules():
        drop = getattr(module, "drop_packed", None)
        dropped += bool(callable(drop) and drop())
        for value in vars(module).values():
            if isinstance(value, PackedWeight) and value.held:
                value.clear()
                dropped += 1
    if dropped:
        release_freed_memory()
    return dropped


def release_freed_memory() -> None:
    """Hand the pages of freed memory back to the system where the C library keeps them (glibc's malloc_trim): freed
    weights (the float32 ones quantize_int8 replaced, the copies `release` drops) are blocks of up to 32 MB each,
    which glibc keeps for the process (at NLLB-200-distilled-600M's size 2.1 GB of its 4.1 GB resident after
    quantizing). Elsewhere, nothing."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # not glibc
        pass
