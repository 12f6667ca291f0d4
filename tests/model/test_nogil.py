"""model/compile/nogil.py: the compiled graphs run with the GIL released, so other threads run Python meanwhile (the
event loop, other models' engines), and compute what AOTInductor's own binding computes."""

import logging
import os
import shutil
import threading
import time

import pytest
import torch

from model.checkpoint import load_checkpoint
from model.compile import compile_graphs, graphs_for, nogil
from model.compile.graphs import example_inputs
from model.compile.store import _load_on_cpu
from model.decoding import KVCache
from tests.conftest import ONE_ROW

pytestmark = pytest.mark.compiles


@pytest.fixture
def prefill(one_row_packages, trained_checkpoint, tmp_path):
    """The one-row prefill graph as the server loads it (model/compile/shared.py's Graph), and example inputs."""
    shutil.copytree(one_row_packages[0], tmp_path, dirs_exist_ok=True)
    model = load_checkpoint(trained_checkpoint)[0]
    cache = KVCache(model, **ONE_ROW)
    compiled = compile_graphs(model, cache, steps=("greedy",), directory=tmp_path, mode="default")
    assert compiled.loaded == one_row_packages[1]
    graph = compiled.functions["prefill"].graphs[0][2].__self__
    (found,) = [g for g in graphs_for(model, cache, steps=("greedy",)) if g.name == "prefill-1-1"]
    return graph, list(example_inputs(model, cache, found)[1])


def test_graphs_compute_what_aotinductors_binding_computes(prefill):
    graph, inputs = prefill
    assert nogil.released(), "the extension was not built or loaded"
    got, want = graph.run(inputs), graph.runner.run(inputs)
    assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


class Product(torch.nn.Module):
    def forward(self, x):
        return x @ x


@pytest.fixture(scope="module")
def slow_graph(tmp_path_factory):
    """A compiled graph of one large product (a few hundred ms a call on one thread), loaded as the server loads its
    graphs, and its input."""
    x = torch.randn(2048, 2048)
    path = tmp_path_factory.mktemp("product") / "product.pt2"
    torch._inductor.aoti_compile_and_package(torch.export.export(Product(), (x,)), package_path=str(path))
    return _load_on_cpu(path), [x]


def test_other_threads_run_python_while_a_graph_runs(slow_graph, prefill):
    """While a thread runs a graph three times, the main thread runs a Python loop and notes the longest it went
    without the GIL. Holding the GIL (AOTInductor's binding, pytorch/pytorch#197516), the loop stops for each whole
    call; released, only for the interpreter's switches between the two threads (5 ms)."""
    graph, inputs = slow_graph
    assert nogil.released(), "the extension was not built or loaded"  # (prefill: compile_graphs loaded it)
    calls: list[float] = []

    def run_graphs() -> None:
        for _ in range(3):
            t0 = time.perf_counter()
            graph.run(inputs)
            calls.append(time.perf_counter() - t0)

    worker = threading.Thread(target=run_graphs, name="graphs")
    worker.start()
    last, longest = time.perf_counter(), 0.0
    while worker.is_alive():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    assert longest < min(calls) / 2, f"the loop stopped for {longest * 1e3:.0f} ms, a call took {min(calls) * 1e3:.0f}"


def test_without_a_compiler_graphs_run_holding_the_gil_with_one_warning(tmp_path, monkeypatch, caplog):
    """Where the extension cannot be built (no C++ compiler on PATH here), the graphs still run, through AOTInductor's
    binding, and the log says what that costs and why. The build's directory goes with it, and so does one a build
    killed long ago had left."""
    for name, value in (("_loaded", None), ("_run", None), ("_tried", False)):
        monkeypatch.setattr(nogil, name, value)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    killed = tmp_path / ".build-killed"
    (killed / "owner").parent.mkdir()
    (killed / "owner").touch()
    os.utime(killed / "owner", (time.time() - 3600,) * 2)
    with caplog.at_level(logging.WARNING, logger="model.compile"):
        assert not nogil.ensure(tmp_path) and not nogil.released()
        assert not nogil.ensure(tmp_path)  # tried once a process
    (record,) = [r for r in caplog.records if r.name == "model.compile"]
    assert "holding the GIL" in record.getMessage() and "no-such-compiler" in record.getMessage()
    assert list(tmp_path.glob("*.so")) == [] and list(tmp_path.glob(".build-*")) == []

    class Runner:
        def run(self, inputs):
            return [inputs[0] + 1]

    assert torch.equal(nogil.run(Runner(), [torch.zeros(2)])[0], torch.ones(2))
