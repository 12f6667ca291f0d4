"""The compiled graphs at run time: loaded or built for a cache (`compile_graphs`), and stepping the model (`adopt`).

A function's graphs each cover a range of row counts (CompiledStep); `adopt` puts them in the model's Steps
(model/steps.py) in place of its eager functions, `uncompile` puts those back.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch

from model.compile import choice, nogil
from model.compile.builders import Builders, jobs_for
from model.compile.graphs import Graph, build, graph_mode, graphs_for, timing_inputs, uncalled
from model.compile.identity import environment, weights_digest
from model.compile.store import current, default_dir, load, remove_leftovers
from model.decoding import KVCache
from model.packed import release
from model.steps import StepGraphs, Steps
from model.transformer import Transformer

log = logging.getLogger("model.compile")  # one logger for the package


class Cancelled(Exception):
    """compile_graphs was asked to stop (the server is shutting down)."""


class CompiledStep(StepGraphs):
    """A decoder step's graphs, each for a range of row counts; called by KVCache.step. A row count no graph
    covers runs the eager step (and is counted in `missed`, unless the graphs are `partial`: still being built)."""

    rows_input = 0  # the input whose first dimension is the row count

    def __init__(self, model: Transformer, fn: str):
        self.fn, self.eager, self.graphs, self.missed, self.partial = fn, getattr(model, fn), [], 0, False

    def __call__(self, *inputs: torch.Tensor):
        n = inputs[self.rows_input].size(0)
        for lo, hi, run in self.graphs:
            if lo <= n <= hi:
                return self.output(run(list(inputs)))
        if self.partial:
            return self.eager(*inputs)
        if not self.missed:
            log.warning("no compiled %s graph for %d rows; running it eagerly", self.fn, n)
        self.missed += 1
        return self.eager(*inputs)

    @staticmethod
    def output(outputs: list[torch.Tensor]):
        return outputs  # the step's tensors, as the eager step returns them


class CompiledPrefill(CompiledStep):
    """The padded or packed prefill's graphs, for a range of sources; other batches run eagerly."""

    rows_input = -1  # src (B, S) of the padded prefill, index (B, S) of the packed one

    @staticmethod
    def output(outputs: list[torch.Tensor]):
        return outputs[0]  # cross_kv


@dataclass
class Compiled:
    """compile_graphs' result: the compiled functions, and what it took to get them."""

    directory: Path | None  # where the packages are (None: CUDA graphs, model/cuda_graphs.py)
    functions: dict[str, StepGraphs] = field(default_factory=dict)  # by the model function (Steps' field) they run
    seconds: float = 0.0
    built: list[str] = field(default_factory=list)  # graphs compiled now
    loaded: list[str] = field(default_factory=list)  # graphs read from packages
    started: float = field(default_factory=time.perf_counter)
    order: list[str] = field(default_factory=list)  # every graph's name, in the order they are built or loaded
    uncalled: frozenset[str] = frozenset()  # Steps fields the cache never calls (graphs.uncalled): none needed
    choices: dict[str, choice.Choice] = field(default_factory=dict)  # by graph: the GEMMs timed on this CPU
    jobs: int = 0  # the most graphs built at once (1: one after another on the calling thread; 0: none built)

    @property
    def missed(self) -> int:
        return sum(f.missed for f in self.functions.values())

    @property
    def names(self) -> list[str]:
        """The graphs built or loaded, in the order compile_graphs took them."""
        return sorted(self.built + self.loaded, key=self.order.index)

    def so_far(self) -> Compiled:
        """A copy of the graphs built or loaded so far, to adopt while compile_graphs goes on: the rows and steps
        they do not cover yet run eagerly, without a warning."""
        functions = {}
        for name, f in self.functions.items():
            functions[name] = copy.copy(f)
            functions[name].graphs, functions[name].partial = list(f.graphs), True
        return Compiled(self.directory, functions, time.perf_counter() - self.started, list(self.built),
                        list(self.loaded), self.started, self.order, self.uncalled, dict(self.choices),
                        self.jobs)  # fmt: skip


def compile_graphs(
    model: Transformer, cache: KVCache, log: Callable[[str], None] | None = None,
    cancelled: Callable[[], bool] | None = None, steps: Iterable[str] = ("greedy", "logprobs"),
    directory: Path | None = None, mode: str = "max-autotune", ready: Callable[[Compiled], None] | None = None,
    building: Callable[[], None] | None = None, jobs: int = 1,
) -> Compiled:  # fmt: skip
    """Every graph the cache's steps (and admissions) run, loaded from `directory` (default_dir()) or built into it;
    `model` and `cache` are only read. `cancelled` is asked before each graph: True raises Cancelled. `steps`: which
    steps to compile, the greedy one and the full one (log-probabilities) by default. mode: "max-autotune" (the GEMMs
    of the small-row steps benchmarked, the results cached; on a CPU the large-row steps built both ways and the
    faster kept: graph_mode, model/compile/choice.py) or "default". `ready`, when given, is handed
    Compiled.so_far() after each graph but the last (the server adopts them one by one); `building` is called before
    each graph that has to be built rather than loaded. `jobs`: how many graphs to build at once, each in a child
    process of its own (model/compile/builders.py); 1 (the default) builds them one by one on this thread, 0 as many
    as the cores and the available memory allow (builders.jobs_for)."""
    device = cache.kv.device
    directory = Path(directory or default_dir()) / weights_digest(model)
    remove_leftovers(directory)
    expected = environment(device)  # on a CPU, vector_isa() first mends broken ISA probes: builds stay vectorised
    shape = f"b{cache.max_batch}-t{cache.max_len}-s{cache.max_src_len}-{str(cache.kv.dtype).removeprefix('torch.')}"
    screen = model.screen
    quantized = getattr(model, "quantized", None)  # "int8": model/quantize.py's layers, which Inductor lowers to int8
    graphs = graphs_for(model, cache, steps)
    compiled = Compiled(directory, order=[g.name for g in graphs], uncalled=uncalled(cache))
    t0 = compiled.started
    plan = []  # (graph, its package's path or its choice's record, the mode it is built in)
    for graph in graphs:
        screened = f"-screen{screen.min_rows}" if screen is not None and graph.fn == "greedy_step" else ""
        built_as = graph_mode(graph, mode) if not quantized else "default"  # max-autotune's GEMM choices are float's
        if built_as == "measured" and device.type != "cpu":
            built_as = "default"
        stem = f"{graph.name}-{shape}{screened}{f'-{quantized}' if quantized else ''}"
        plan.append((graph, directory / f"{stem}-{'measured.json' if built_as == 'measured' else f'{built_as}.pt2'}",
                     built_as))  # fmt: skip
    with _builders(model, cache, plan, expected, jobs if device.type == "cpu" else 1, building, log) as builders:
        if device.type == "cpu":  # the graphs run with the GIL released (model/compile/nogil.py): its extension
            nogil.ensure(directory.parent, building)  # built (once) while the children start building graphs
        for i, (graph, path, built_as) in enumerate(plan):
            if cancelled is not None and cancelled():
                raise Cancelled("compiling cancelled")
            get = functools.partial(_load_or_build, model, cache, graph, expected, building, builders, cancelled)
            if built_as == "measured":
                quiet = builders.paused if builders is not None else contextlib.nullcontext
                run, how, chosen = _measured(get, cache, graph, path, expected, quiet)
                compiled.choices[graph.name] = chosen
                if log:
                    log(f"the {graph.fn} graph for {graph.lo}-{graph.hi} rows runs {chosen.describe()}")
            else:
                run, how = get(path, built_as)
            getattr(compiled, how).append(graph.name)
            if graph.fn not in compiled.functions:
                kind = CompiledPrefill if graph.fn.startswith("prefill") else CompiledStep
                compiled.functions[graph.fn] = kind(model, graph.fn)
            compiled.functions[graph.fn].graphs.append((graph.lo, graph.hi, run))
            compiled.jobs = builders.most if builders is not None else 1 if compiled.built else 0
            if log:
                log(f"{how} the {graph.fn} graph for {graph.lo}-{graph.hi} rows "
                    f"({time.perf_counter() - t0:.0f} s so far)")  # fmt: skip
            if ready is not None and i < len(graphs) - 1:
                ready(compiled.so_far())
    compiled.seconds = time.perf_counter() - t0
    return compiled


@contextlib.contextmanager
def _builders(
    model: Transformer, cache: KVCache, plan: list[tuple[Graph, Path, str]], expected: dict[str, str], jobs: int,
    building: Callable[[], None] | None, log: Callable[[str], None] | None,
) -> Iterator[Builders | None]:  # fmt: skip
    """Child processes building the plan's missing packages, several at once, in the plan's order; None where
    `jobs` is 1 or one package at most is missing (they are built on the calling thread)."""
    if jobs == 1:
        yield None
        return
    is_current = functools.cache(lambda path: current(path, expected))  # one warning a stale package
    missing = []  # (graph, package, mode): absent, or built for another environment
    for graph, path, built_as in plan:
        if built_as != "measured":
            missing.append((graph, path, built_as))
            continue
        found = choice.read(path, expected)
        if found is None or not is_current(choice.package(path, found.chosen)):
            missing += [(graph, choice.package(path, m), m) for m in choice.CANDIDATES]
    missing = [(graph, path, how) for graph, path, how in missing if not is_current(path)]
    jobs = jobs_for(model, len(missing), jobs) if len(missing) > 1 else 1
    if jobs == 1:
        yield None
        return
    if building is not None:
        building()  # before the children start: they take this thread's priority
    if log:
        log(f"building {len(missing)} graphs, {jobs} at once in processes of their own")
    try:
        builders = Builders(model, cache, jobs, missing[0][1].parent)  # the packages' directory
    except Exception as e:  # noqa: BLE001 - the model did not save for the children: build here, as before
        logging.getLogger("model.compile").warning(
            "building the graphs one after another: the model could not be saved for child processes (%s)", e
        )
        yield None
        return
    with builders:
        for graph, path, how in missing:
            builders.submit(graph, path, {**expected, "graph": path.name}, how)
        yield builders
        if log and builders.peak_bytes:
            log(f"built {builders.started} graphs, {builders.most} at once; a build held at most "
                f"{builders.peak_bytes / 2**30:.1f} GiB")  # fmt: skip


def _load_or_build(
    model: Transformer, cache: KVCache, graph: Graph, expected: dict[str, str], building: Callable[[], None] | None,
    builders: Builders | None, cancelled: Callable[[], bool] | None, path: Path, built_as: str,
) -> tuple[Callable, str]:  # fmt: skip
    """The graph's package at `path`, loaded, or built (in mode `built_as`; by `builders` when they build it) and
    loaded -> (its run, "loaded" or "built")."""
    if builders is not None and path in builders:
        try:
            builders.wait(path, cancelled)
        except InterruptedError as e:
            raise Cancelled("compiling cancelled") from e
    else:
        run = _load_if_there(path, expected)
        if run is not None:
            return run, "loaded"
        if building is not None:
            building()
        build(model, cache, graph, path, {**expected, "graph": path.name}, built_as)
    run = load(path, expected)
    if run is None:
        raise RuntimeError(f"the compiled graph {path} does not load")
    return run, "built"


def _measured(
    get: Callable[[Path, str], tuple[Callable, str]], cache: KVCache, graph: Graph, record: Path,
    expected: dict[str, str], quiet: Callable[[], contextlib.AbstractContextManager],
) -> tuple[Callable, str, choice.Choice]:  # fmt: skip
    """A large-row step graph whose GEMMs were chosen on this CPU (model/compile/choice.py): the chosen package, once
    measured in this environment; else each candidate built (or loaded), timed (within `quiet()`: the builds of other
    graphs paused), and the fastest kept, the others' packages removed."""
    found = choice.read(record, expected)
    if found is not None and (run := _load_if_there(choice.package(record, found.chosen), expected)) is not None:
        return run, "loaded", found
    runs, how = {}, "loaded"
    for mode in choice.CANDIDATES:
        runs[mode], got = get(choice.package(record, mode), mode)
        how = "built" if got == "built" else how
    with quiet():
        ms = choice.time_graphs(runs, timing_inputs(cache, graph, choice.WINDOW))
    found = choice.Choice(min(ms, key=ms.__getitem__), ms, graph.hint, choice.WINDOW)
    choice.write(record, found, expected)
    runs.clear()  # the winner is loaded again alone: loaded after the other, it could hold that one's constants
    for mode in choice.CANDIDATES:
        if mode != found.chosen:
            choice.package(record, mode).unlink(missing_ok=True)
    run = _load_if_there(choice.package(record, found.chosen), expected)
    if run is None:
        raise RuntimeError(f"the compiled graph {choice.package(record, found.chosen)} does not load")
    return run, how, found


def _load_if_there(path: Path, expected: dict[str, str]) -> Callable | None:
    return load(path, expected) if path.exists() else None


def adopt(model: Transformer, compiled: Compiled) -> None:
    """The model steps with the compiled graphs from its next step on (KVCache takes model.steps' functions every
    step; call this between steps): they take their functions' places in model.steps, the others stay as they are.
    The cache's contents are the same either way, so sequences in flight go on. Once graphs run every step the cache
    calls, the eager layers' packed weights (model/packed.py) are dropped: they pack again if something runs eagerly."""
    model.steps = replace(model.steps, **compiled.functions)
    eager = Steps.eager(model)
    compiled_or_uncalled = (
        getattr(model.steps, f.name) != getattr(eager, f.name) or f.name in compiled.uncalled for f in fields(Steps)
    )
    if all(compiled_or_uncalled) and not any(f.partial for f in compiled.functions.values()):
        release(model)


def compile_model(model: Transformer, cache: KVCache, **options) -> Compiled:
    """compile_graphs, then adopt: the model steps compiled from now on."""
    compiled = compile_graphs(model, cache, **options)
    adopt(model, compiled)
    return compiled


def uncompile(model: Transformer) -> None:
    """Back to the eager model."""
    model.steps = Steps.eager(model)
