"""model/quantize.py's int8 layers run eagerly: oneDNN's int8 kernel where it exists, the same function as the
pattern the compiled graphs are traced from."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model import quantize
from model.checkpoint import load_checkpoint
from model.decoding import greedy_decode
from model.packed import release
from model.quantize import ACTIVATION_EPS, ACTIVATION_MAX, Int8Linear, activation_qparams, quantize_int8
from tests.model.helpers import SOURCES, batch

ROOT = Path(__file__).resolve().parents[2]
needs_onednn = pytest.mark.skipif(not quantize._ONEDNN_INT8, reason="oneDNN's int8 kernels run the eager layers")


def integer_reference(layer: Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer's function in exact integer arithmetic: (q - zero) @ W_int8^T, then the two scales and the bias."""
    ops = torch.ops.quantized_decomposed
    scale, zero = ops.choose_qparams.tensor(x, 0, ACTIVATION_MAX, ACTIVATION_EPS, torch.uint8)
    q = ops.quantize_per_tensor.tensor(x, scale, zero, 0, ACTIVATION_MAX, torch.uint8).long() - zero
    acc = (q.reshape(-1, x.size(-1)) @ layer.qweight.long().T).double()  # (M, N), exact
    y = acc * scale.double() * layer.scale.double() + layer.bias.double()
    return y.reshape(*x.shape[:-1], -1).float()


@needs_onednn
def test_an_eager_int8_layer_runs_onednns_kernel_and_computes_the_integer_result(monkeypatch):
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 3000)
    layer = Int8Linear(linear.weight, linear.bias)
    x = torch.randn(4, 3, 1024) * 3  # (B, T, K): the kernel takes it as a (12, 1024) matrix
    with torch.inference_mode():
        got = layer(x)
    assert layer._onednn is not None, "the eager layer did not pack its weight for oneDNN's kernel"
    want = integer_reference(layer, x)
    assert got.shape == (4, 3, 3000)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    monkeypatch.setattr(quantize, "_ONEDNN_INT8", False)  # the pattern as written, what torch.export traces
    pattern = Int8Linear(linear.weight, linear.bias)(x)
    assert torch.allclose(got, pattern, atol=1e-4, rtol=1e-4)


@needs_onednn
def test_a_copied_or_released_int8_layer_packs_its_own_weight_again():
    torch.manual_seed(1)
    linear = torch.nn.Linear(64, 32)
    layer = Int8Linear(linear.weight, linear.bias)
    x = torch.randn(5, 64)
    first = layer(x)
    copied = copy.deepcopy(layer)  # a packed weight has no storage: the copy leaves it behind
    assert copied._onednn is None
    assert torch.equal(copied(x), first) and copied._onednn is not None
    model = torch.nn.Sequential(copied)
    assert release(model) == 1 and copied._onednn is None  # what adopt does once graphs run every step
    assert release(model) == 0 and torch.equal(copied(x), first) and copied._onednn is not None


@needs_onednn
def test_an_eager_int8_model_decodes_as_the_pattern_does(trained_checkpoint, monkeypatch):
    fast, pattern = (load_checkpoint(trained_checkpoint)[0] for _ in range(2))
    quantize_int8(fast), quantize_int8(pattern)
    src = batch(SOURCES)
    got = greedy_decode(fast, src, 30)
    monkeypatch.setattr(quantize, "_ONEDNN_INT8", False)
    want = greedy_decode(pattern, src, 30)
    assert [h.tokens for h in got] == [h.tokens for h in want]
    for g, w in zip(got, want, strict=True):
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


def test_eager_activation_qparams_equal_choose_qparams_bit_for_bit():
    ops = quantize._ops()
    g = torch.Generator().manual_seed(4)
    cases = [torch.zeros(2, 8), torch.full((1, 16), 1e-6), -torch.zeros(3, 4), torch.tensor([[0.0, -0.0, 1.0]])]
    cases += [torch.rand(3, 64, generator=g) + 0.5, -torch.rand(3, 64, generator=g) - 0.1]  # one sign: 0 in range
    cases += [torch.randn(int(torch.randint(1, 9, (1,), generator=g)), 1024, generator=g) * 10 ** (e / 10) for e in
              range(-60, 50)]  # fmt: skip
    for x in cases:
        want = ops.choose_qparams.tensor(x, 0, ACTIVATION_MAX, ACTIVATION_EPS, torch.uint8)
        got = activation_qparams(x)
        for a, b in zip(got, want, strict=True):
            assert (a.dtype, a.shape) == (b.dtype, b.shape) and torch.equal(a, b), (x.abs().max(), got, want)


def test_loading_the_int8_ops_logs_none_of_torchaos_import_warnings():
    """A CPU server's log does not start with torchao's CUDA libraries failing to load: its import is quieted, and
    the loggers' levels are put back after it."""
    code = (
        "import logging; logging.basicConfig(level=logging.WARNING)\n"
        "from model.quantize import _ops\n"
        "assert hasattr(_ops(), 'choose_qparams')\n"
        "assert logging.getLogger('torchao').level == logging.NOTSET\n"
        "logging.getLogger('torchao').warning('still heard')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "still heard" in done.stderr
    for noise in ("Failed to load", "Enum subclass", "no triton"):
        assert noise not in done.stderr, done.stderr


def test_int8_is_said_to_lose_on_an_x86_cpu_without_vnni_only():
    """model.quantize.int8_warning: an AVX2-only x86 CPU (oneDNN's int8 GEMMs without an int8 dot product) gets the
    warning the server logs and /info shows; one with AVX-512 VNNI, AVX-VNNI or AMX does not, nor a CPU whose flags
    say nothing of x86 (an ARM server) or that has none to read."""
    from model.quantize import int8_warning

    avx2 = ("fpu", "sse4_2", "fma", "avx", "avx2", "bmi2")
    warning = int8_warning(avx2)
    assert warning is not None and "NMT_QUANTIZE=none" in warning and "slower than float32" in warning
    assert int8_warning((*avx2, "avx512f", "avx512bw")) is not None  # AVX-512 without VNNI (Skylake-SP)
    for vnni in ("avx512_vnni", "avx_vnni", "amx_int8"):
        assert int8_warning((*avx2, vnni)) is None
    assert int8_warning(("fp", "asimd", "asimddp")) is None and int8_warning(()) is None
