"""model/packed.py: the eager float32 linears run oneDNN's packed GEMM on a CPU, computing what F.linear computes,
packing again when their weight changes, and never where gradients, another dtype or a trace need the plain one."""

import copy
from dataclasses import fields
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from model import packed
from model.checkpoint import load_checkpoint
from model.compile import Compiled, CompiledStep, adopt, uncompile
from model.decoding import greedy_decode
from model.packed import Linear, release
from model.steps import Steps
from model.tokenizer import read_lines
from tests.importers.marian_fixture import DATA
from tests.model.helpers import SOURCES, batch

needs_onednn = pytest.mark.skipif(not packed._ONEDNN, reason="oneDNN's packed GEMM runs the eager linears")
BUNDLED = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"


@needs_onednn
def test_a_linear_runs_on_its_packed_weight_and_computes_f_linear():
    torch.manual_seed(0)
    layer = Linear(256, 3000)
    x = torch.randn(4, 3, 256)  # (B, T, K): the kernel takes it as a (12, 256) matrix
    with torch.inference_mode():
        got = layer(x)
    assert layer.packed.held, "the eager layer did not pack its weight"
    want = F.linear(x, layer.weight, layer.bias)
    assert got.shape == (4, 3, 3000)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    with torch.no_grad():
        layer.weight.mul_(2)  # changed in place (training, load_state_dict): packed again
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-4, rtol=1e-5)


@needs_onednn
def test_one_row_reads_the_weight_as_stored_and_makes_no_copy():
    torch.manual_seed(2)
    layer = Linear(512, 2000)
    x = torch.randn(1, 1, 512)  # a batch-1 decoder step
    with torch.inference_mode():
        got = layer(x)
    assert not layer.packed.held, "one row made a packed copy of the weight"
    assert torch.allclose(got, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)


@needs_onednn
def test_gradients_run_the_plain_linear_and_a_copy_packs_its_own_weight():
    torch.manual_seed(1)
    layer = Linear(256, 512)
    x = torch.randn(5, 256)
    layer(x).sum().backward()  # training: autograd needs F.linear
    assert layer.weight.grad is not None and not layer.packed.held
    with torch.no_grad():
        first = layer(x)
    copied = copy.deepcopy(layer)  # a packed weight has no storage: the copy leaves it behind
    assert layer.packed.held and not copied.packed.held
    with torch.no_grad():
        assert torch.equal(copied(x), first) and copied.packed.held
    assert release(copied) == 1 and not copied.packed.held


@needs_onednn
def test_a_small_layer_runs_the_plain_linear_and_makes_no_copy():
    layer = Linear(64, 64)  # below PACKED_FROM_ELEMENTS: oneDNN's call would cost more than the product
    x = torch.randn(32, 64)
    with torch.inference_mode():
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert not layer.packed.held


def test_other_dtypes_run_the_plain_linear():
    layer = Linear(8, 4).double()
    with torch.no_grad():
        y = layer(torch.randn(2, 8, dtype=torch.float64))
    assert y.dtype == torch.float64 and not layer.packed.held


def test_an_exported_linear_traces_the_plain_op():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Linear(8, 8), Linear(8, 4)

        def forward(self, x):
            return self.b(self.a(x))

    model = Two().eval().requires_grad_(False)
    with torch.no_grad():  # as model/compile exports: nothing asks for gradients
        program = torch.export.export(model, (torch.randn(2, 8),))
    ops = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert "aten.linear.default" in ops and not any("mkldnn" in op for op in ops), ops


@needs_onednn
@pytest.mark.skipif(not (DATA / "test_2016_flickr.en.gz").exists(), reason="Multi30k's test2016 is not here")
def test_the_bundled_model_decodes_test2016_to_the_plain_gemms_tokens(monkeypatch):
    """The packed GEMM adds in another order than MKL's sgemm: the greedy tokens stay the same on test2016."""
    fast, tokenizer, _ = load_checkpoint(BUNDLED)
    plain = load_checkpoint(BUNDLED)[0]
    rows = sorted(tokenizer.encode_batch(list(read_lines(DATA / "test_2016_flickr.en.gz"))[:256]), key=len)
    batches = [rows[i : i + 32] for i in range(0, len(rows), 32)]
    pad = fast.config.source_pad_id

    def decode(model):
        out = []
        for b in batches:
            src = torch.full((len(b), max(map(len, b))), pad)
            for i, r in enumerate(b):
                src[i, : len(r)] = torch.tensor(r)
            out += greedy_decode(model, src, 2 * src.size(1) + 10)
        return out

    got = decode(fast)
    assert sum(isinstance(m, Linear) and m.packed.held for m in fast.modules()) > 0
    assert fast.packed_generator.held or fast.output_proj is not None
    monkeypatch.setattr(packed, "_ONEDNN", False)
    want = decode(plain)
    assert not any(isinstance(m, Linear) and m.packed.held for m in plain.modules())
    assert [h.tokens for h in got] == [h.tokens for h in want]
    for g, w in zip(got, want, strict=True):
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


@needs_onednn
def test_adopting_graphs_for_every_step_drops_the_eager_layers_packed_weights(trained_checkpoint, monkeypatch):
    monkeypatch.setattr(packed, "PACKED_FROM_ELEMENTS", 0)  # the tests' small model packs its layers too
    model = load_checkpoint(trained_checkpoint)[0]
    greedy_decode(model, batch(SOURCES), 5)

    def held() -> int:
        return sum(isinstance(m, Linear) and m.packed.held for m in model.modules())

    assert held() > 0
    adopt(model, Compiled(None, {"greedy_step": CompiledStep(model, "greedy_step")}))
    assert held() > 0, "the prefill and the full step still run eagerly: their layers keep their packed weights"
    every = {f.name: CompiledStep(model, f.name) for f in fields(Steps)}
    adopt(model, Compiled(None, every))
    assert held() == 0
    uncompile(model)
    greedy_decode(model, batch(SOURCES), 5)  # eager again: packed again
    assert held() > 0
