"""The decoder steps and the prefill compiled ahead of time (AOTInductor), and kept on disk for the next start.

Eager PyTorch spends most of a small decoder step on per-op overhead (about 150 ops for a 3-layer decoder). Each
graph here is one of the model's functions exported with dynamic row counts and windows and compiled by Inductor
with frozen weights into an AOTInductor package (one shared library with its kernels and its packed weights), and
loaded from that package.

    compiled = compile_graphs(model, cache)   # builds what the package directory lacks, loads the rest
    adopt(model, compiled)                    # between two decoder steps: model.steps runs the graphs from now on

or both at once, `compile_model(model, cache)`. `compile_graphs` leaves `model` and `cache` alone, so it can run on
another thread while they go on decoding eagerly (the server's background mode).

Why packages rather than torch.compile's own caches: with frozen weights Inductor's graph cache stores nothing
(`Bypassing FX Graph Cache because 'mkldnn tensors unpickleable'`, and AOTAutograd's cache refuses freezing), so
every start compiled every graph again; without freezing the graphs cache but decode up to 3x slower
(docs/performance.md, Start-up). A package holds the frozen graph whole, and loads in well under a second.

    graphs.py     which graphs a cache's steps run, and one exported and built into a package
    builders.py   the packages a start lacks built side by side, each in a child process of its own
    choice.py     the large-row steps' GEMMs, chosen on this CPU by timing the graph built each way
    identity.py   what a package is found by and was built for (weights, environment, this code)
    nogil.py      the graphs run with the GIL released (a C++ extension of a few lines, built once)
    store.py      the package directory: written whole or not at all, loaded, leftovers of killed builds removed
    runtime.py    compile_graphs, and the graphs stepping the model (adopt, uncompile)
"""

from model.compile.graphs import LARGE_ROWS, Graph, graph_mode, graphs_for, row_ranges
from model.compile.identity import FORMAT, SOURCES, cpu_features, environment, vector_isa, weights_digest
from model.compile.runtime import (
    Cancelled,
    Compiled,
    CompiledPrefill,
    CompiledStep,
    adopt,
    compile_graphs,
    compile_model,
    uncompile,
)
from model.compile.store import LEFTOVER_S, PACKAGE_DIR, default_dir, use_cache_dir

__all__ = [
    "FORMAT", "LARGE_ROWS", "LEFTOVER_S", "PACKAGE_DIR", "SOURCES", "Cancelled", "Compiled", "CompiledPrefill",
    "CompiledStep", "Graph", "adopt", "compile_graphs", "compile_model", "cpu_features", "default_dir", "environment",
    "graph_mode", "graphs_for", "row_ranges", "uncompile", "use_cache_dir", "vector_isa", "weights_digest",
]  # fmt: skip
