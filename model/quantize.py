"""int8 linear layers: weights in int8 per output channel, activations quantized per tensor as they arrive.

`quantize_int8(model)` swaps every linear layer of a Transformer (the output projection included, tied or not) for an
Int8Linear, which computes what PyTorch's PT2E flow writes for a dynamically quantized linear (the X86 Inductor
quantizer's default: weights symmetric int8 per output channel, activations affine uint8 per tensor with their range
measured on each call; here the activations keep to 7 bits, ACTIVATION_MAX), in the same `quantized_decomposed` ops:

    dequantize_per_tensor(quantize_per_tensor(x, *choose_qparams(x))) @ dequantize_per_channel(w_int8).T + b

Exported and built with Inductor's freezing on (model/compile/), that pattern is lowered to oneDNN's int8
`qlinear` kernels: the packages then hold int8 weights and the matmuls run in int8. Run eagerly on a CPU, the layer
calls those same kernels itself (`onednn.qlinear_pointwise` on a weight packed once, as Inductor's lowering does), so
the eager model (before the graphs are built, with NMT_COMPILE=off, for /attention) computes what the graphs compute,
at int8 speed: dequantizing a 256k-row output projection to float32 on every step, as the pattern says, took 2.2 s
a step at NLLB-200's size, the kernel 18 ms. Where oneDNN's kernels are missing (another device, a build without
them), the pattern runs as written: the int8 arithmetic in float32.
The ops come from torchao, where PyTorch's quantization flow now lives (torch 2.13 no longer has them).
"""

from __future__ import annotations

import gc
import logging

import torch
import torch.nn.functional as F
from torch import nn

from model.packed import release_freed_memory
from model.transformer import Transformer

# choose_qparams' floor on the activation scale: what the X86 Inductor quantizer's dynamic activation observer uses
ACTIVATION_EPS = 2.0**-12
# Activations in 7 bits (0..127, as PyTorch's reduce_range): x86 CPUs without VNNI multiply uint8 by int8 with
# vpmaddubsw, which adds pairs of products into int16 and saturates past 32,767 (255 * 127 * 2 = 64,770 does; 127 *
# 127 * 2 = 32,258 does not). With 8 bits an AVX2-only CPU gave other tokens than an AVX-512 VNNI one, and other
# than the eager model; with 7 every CPU adds exactly, so the tokens do not depend on the machine.
ACTIVATION_MAX = 127
# oneDNN's int8 linear kernel, which Inductor lowers the pattern to on x86 CPUs
_ONEDNN_INT8 = torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_pointwise")


# What importing torchao logs that says nothing to a user of its CPU ops: its CUDA-only libraries (mxfp8, CUTLASS)
# failing to load on a CPU build of torch, no Triton, and a deprecation inside torch about torchao's enums
_IMPORT_NOISE = ("torchao", "torchao.kernel.intmm", "torch.utils._pytree")


def _ops():
    """torch.ops.quantized_decomposed, which torchao registers (its import's warnings above kept out of the log)."""
    loggers = [logging.getLogger(name) for name in _IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        import torchao.quantization.pt2e  # noqa: F401 - registers the quantized_decomposed ops
    except ImportError as e:
        raise RuntimeError(f"int8 needs torchao, part of nmt-serve's locked dependencies: {e}") from e
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return torch.ops.quantized_decomposed


def activation_qparams(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """choose_qparams.tensor(x, 0, ACTIVATION_MAX, ACTIVATION_EPS, uint8), the same arithmetic in the same dtypes
    (torch.ao's determine_qparams for an affine per-tensor range), in 7 ops where that op's Python runs ~20 with
    its checks: ~110 us a call, 97 calls a decoder step at NLLB-200's size, 13% of an eager int8 step kept to AVX2.
    x (..., K) -> scale (1,) float64, zero point (1,) int64"""
    lo, hi = torch.aminmax(x)
    lo, hi = lo.clamp_max(0), hi.clamp_min(0)  # the range holds 0
    scale = ((hi - lo) / float(ACTIVATION_MAX)).clamp_min(ACTIVATION_EPS)  # float32, as there
    zero = (-torch.round(lo / scale).to(torch.int)).clamp(0, ACTIVATION_MAX)
    return scale.double().reshape(1), zero.long().reshape(1)


class Int8Linear(nn.Module):
    """y = x W^T + b with W in int8 (symmetric, one scale per output row) and x quantized to uint8 per call."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        ops, w = _ops(), weight.detach().float()
        amax = w.abs().amax(dim=1)
        scale = torch.clamp(amax / ((127 - -128) / 2), min=torch.finfo(torch.float32).eps)  # as the observer
        zero = torch.zeros_like(scale, dtype=torch.int64)
        self.register_buffer("qweight", ops.quantize_per_channel(w, scale, zero, 0, -128, 127, torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("zero_point", zero)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = w.size(1), w.size(0)
        self._onednn: tuple[torch.Tensor, torch.Tensor] | None = None  # (qweight, its packed copy): not state

    @property
    def weight(self) -> torch.Tensor:
        """The weight as the layer uses it: its int8 values times their row's scale (float32)."""
        return _ops().dequantize_per_channel(self.qweight, self.scale, self.zero_point, 0, -128, 127, torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.quantized_decomposed
        if torch.compiler.is_compiling():
            scale, zero = ops.choose_qparams.tensor(x, 0, ACTIVATION_MAX, ACTIVATION_EPS, torch.uint8)
        else:
            scale, zero = activation_qparams(x)
        q = ops.quantize_per_tensor.tensor(x, scale, zero, 0, ACTIVATION_MAX, torch.uint8)
        if not torch.compiler.is_compiling() and (packed := self._packed(x)) is not None:
            rows = q.reshape(-1, q.size(-1))  # (M, K): the kernel takes a matrix
            y = torch.ops.onednn.qlinear_pointwise.tensor(
                rows, scale, zero, packed, self.scale, self.zero_point, self.bias, 1.0, 0, torch.float32, "none", [], ""
            )  # (M, N), as Inductor's lowering of the pattern below calls it
            return y.reshape(*x.shape[:-1], self.out_features)
        x = ops.dequantize_per_tensor.tensor(q, scale, zero, 0, ACTIVATION_MAX, torch.uint8)
        w = ops.dequantize_per_channel(self.qweight, self.scale, self.zero_point, 0, -128, 127, torch.int8)
        return F.linear(x, w, self.bias)  # what torch.export traces, and Inductor lowers to qlinear

    def __getstate__(self) -> dict:
        """A copy (copy.deepcopy, pickle) packs its weight again: a packed weight has no storage to copy."""
        return {**super().__getstate__(), "_onednn": None}

    def __setstate__(self, state: dict) -> None:
        """An unpickled copy (in a process of its own: model/compile/builders.py's) registers the ops its forward
        calls, as __init__ does."""
        _ops()
        super().__setstate__(state)

    def _packed(self, x: torch.Tensor) -> torch.Tensor | None:
        """The weight packed for oneDNN's int8 kernel (once, on first use), or None where it cannot run x."""
        if x.device.type != "cpu" or x.dtype != torch.float32 or not x.numel() or not _ONEDNN_INT8:
            return None
        if self._onednn is None or self._onednn[0] is not self.qweight:  # packed again if the weight was replaced
            self._onednn = (self.qweight, torch.ops.onednn.qlinear_prepack(self.qweight, None))
        return self._onednn[1]

    def drop_packed(self) -> bool:
        """Forget the packed copy (model/packed.py's `release`; packed again on the next eager call) -> whether
        there was one."""
        held, self._onednn = self._onednn is not None, None
        return held

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, int8"


def quantize_int8(model: Transformer) -> int:
    """Every nn.Linear of the model becomes an Int8Linear, in place, and a tied output projection an Int8Linear of
    the target embedding's weight (the embedding itself stays float32); the logit screen is turned off (it screens
    the float32 projection). Returns how many layers were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child.weight, child.bias))
                swapped += 1
    if model.output_proj is None:  # tied: Transformer.generator calls output_proj when there is one
        model.output_proj = Int8Linear(model.tgt_embed.token.weight, None)
        swapped += 1
    model.use_screen(False)
    model.quantized = "int8"
    gc.collect()
    release_freed_memory()
    return swapped


# The instructions that multiply uint8 by int8 and add into int32 in one step (VNNI: vpdpbusd), which oneDNN's int8
# GEMMs need to beat float32's. Without them each product takes vpmaddubsw and vpmaddwd, and on a 2-core AMD EPYC
# with AVX2 only (no AVX-512) the compiled int8 model decoded test2016 at 0.44x float32's speed at batch 1 and 0.97x
# at batch 32 (bench/peers.py; docs/performance-history.md, "The GEMMs of large batches, chosen per CPU"); with
# AVX-512 VNNI it was 1.11x at batch 32 (its "int8" section).
INT8_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def int8_warning(flags: tuple[str, ...] | None = None) -> str | None:
    """What to tell a user who asked for int8 on this CPU (its flags: /proc/cpuinfo's by default), or None where
    int8 pays: an x86 CPU without an int8 dot-product instruction runs the int8 model slower than float32."""
    if flags is None:
        from model.cpu import cpu_info

        flags = cpu_info().flags
    if "avx2" not in flags or any(f in flags for f in INT8_DOT_FLAGS):
        return None  # not an x86 CPU oneDNN's int8 kernels were measured on, or one with VNNI
    return (
        "NMT_QUANTIZE=int8 on a CPU without VNNI (no avx512_vnni, avx_vnni or amx_int8 in its flags): int8 is "
        "expected to decode slower than float32 here (on an AVX2-only AMD EPYC it ran at 0.44x float32's speed at "
        "batch 1 and 0.97x at batch 32); serve float32 (NMT_QUANTIZE=none) unless memory is what you are short of"
    )
