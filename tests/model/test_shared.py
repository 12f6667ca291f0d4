"""model/compile/shared.py: the graphs a process loads hold each constant once, decode as before, and keep alive the
graphs whose constants they took."""

import gc
import shutil
import tempfile
import weakref
from pathlib import Path

import pytest
import torch

from model.checkpoint import load_checkpoint
from model.compile import compile_graphs, shared
from model.compile.store import unpack_library
from model.decoding import KVCache, greedy_decode
from tests.conftest import ONE_ROW
from tests.model.helpers import SOURCES, batch

pytestmark = pytest.mark.compiles


def loaded(trained_checkpoint, directory):
    model = load_checkpoint(trained_checkpoint)[0]
    cache = KVCache(model, **ONE_ROW)
    graphs = compile_graphs(model, cache, steps=("greedy",), directory=directory, mode="default")
    assert graphs.built == [] and graphs.loaded == ["greedy_step-1-1", "prefill-1-1"]
    return model, cache, graphs


def held(compiled) -> dict[str, shared.Graph]:
    return {fn: f.graphs[0][2].__self__ for fn, f in compiled.functions.items()}


def test_a_second_load_of_the_same_graphs_holds_no_constant_of_its_own(one_row_packages, trained_checkpoint,
                                                                         tmp_path):  # fmt: skip
    shutil.copytree(one_row_packages[0], tmp_path, dirs_exist_ok=True)
    first, second = loaded(trained_checkpoint, tmp_path), loaded(trained_checkpoint, tmp_path)
    for fn, graph in held(second[2]).items():
        before = held(first[2])[fn]
        assert graph.constants.keys() == before.constants.keys() and graph.constants
        for name, t in graph.constants.items():
            assert t is before.constants[name], f"{fn}: {name} is a copy"
        assert before in graph.keeps
    # the first load's graphs go; the second's keep the constants they took from them alive, and decode as eagerly
    model, cache, compiled = second
    del first
    gc.collect()
    eager = load_checkpoint(trained_checkpoint)[0]
    for source in SOURCES:
        got, want = greedy_decode(model, batch([source]), 30, cache)[0], greedy_decode(eager, batch([source]), 30)[0]
        assert got.tokens == want.tokens and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert compiled.missed == 0
    gone = [weakref.ref(g) for g in [*held(compiled).values(), *graph.keeps]]
    del model, cache, compiled, second, graph, before
    gc.collect()
    assert all(ref() is None for ref in gone), "a graph nothing refers to is still held"


def test_within_one_load_the_graphs_share_what_they_both_hold(one_row_packages, trained_checkpoint, tmp_path):
    shutil.copytree(one_row_packages[0], tmp_path, dirs_exist_ok=True)
    step, prefill = held(loaded(trained_checkpoint, tmp_path)[2]).values()
    ptr = lambda t: torch.ops.mkldnn.data_ptr(t) if t.is_mkldnn else t.data_ptr()  # noqa: E731
    common = {ptr(t) for t in step.constants.values()} & {ptr(t) for t in prefill.constants.values()}
    assert common, "the step and the prefill hold no constant in common (the shared embedding table at least)"


def test_constants_are_the_same_only_bit_for_bit():
    zero, minus_zero, nan = torch.tensor([0.0]), torch.tensor([-0.0]), torch.tensor([float("nan")])
    assert torch.equal(zero, minus_zero) and not shared.same(zero, minus_zero)
    assert shared.same(nan, nan.clone()) and not torch.equal(nan, nan.clone())
    counting = torch.arange(8.0)
    assert shared.same(counting, counting.clone()) and not shared.same(counting, counting + 1)
    assert not shared.same(torch.zeros(4, 2), torch.zeros(8)) and not shared.same(torch.zeros(2), torch.zeros(2).int())


def test_a_librarys_pages_of_constants_are_handed_back_and_the_graph_still_runs(one_row_packages):
    package = next(p for p in sorted(Path(one_row_packages[0]).rglob("prefill-*.pt2")))
    with tempfile.TemporaryDirectory() as directory:
        library = unpack_library(package, directory)
        runner = torch._C._aoti.AOTIModelContainerRunnerCpu(str(library), 1)
        src = torch.tensor([[5, 6, 7, 2]])
        want = runner.run([src])[0]
        first, last = shared._constants_span(library)
        assert shared.drop_constant_pages(library) >= last - first - 2 * 4096 > 0
        assert torch.equal(runner.run([src])[0], want)


def test_constants_appended_past_the_library_are_found_and_handed_back_too(tmp_path):
    """Over 2 GB of constants, AOTInductor appends them to the library's file and the runner maps them itself; the
    layout forced on a small graph (force_mmap_weights, what that size switches on) is read from the file's end."""
    module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    x = torch.randn(4, 64)
    with torch._inductor.config.patch({"aot_inductor.force_mmap_weights": True}):
        package = torch._inductor.aoti_compile_and_package(
            torch.export.export(module, (x,)), package_path=str(tmp_path / "m.pt2")
        )
    library = unpack_library(Path(package), tmp_path)
    runner = torch._C._aoti.AOTIModelContainerRunnerCpu(str(library), 1)
    want = runner.run([x])[0]
    torch.testing.assert_close(want, module(x))
    first, last = shared._constants_span(library)
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    assert last == library.stat().st_size and last - first >= weights
    assert shared.drop_constant_pages(library) >= weights - 2 * 4096
    assert torch.equal(runner.run([x])[0], want)
