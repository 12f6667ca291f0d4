"""The decoder steps and the prefill compiled ahead of time (AOTInductor), and kept on disk for the next start.

Eager PyTorch spends most of a small decoder step on per-op overhead (about 150 ops for a 3-layer decoder).
Each graph here is exported (`torch.export`) with dynamic row counts, key windows and source windows, compiled by
Inductor with frozen weights (pre-packed and folded into the kernels; max-autotune for the small-row steps:
graph_mode) into an AOTInductor package (one shared library with its kernels and its packed weights), and loaded
from that package. A growing cache and a batch that changes size every step never recompile: the greedy step has
one graph for 1 row, one for 2 rows up to the logit screen's minimum (model/screen.py), one from there, and one from
LARGE_ROWS rows on, tuned at the cache's full row count; the full step (beam search, sampling) the same without the
screen's; the prefill one graph padded and one packed.

    compiled = compile_graphs(model, cache)   # builds what the package directory lacks, loads the rest
    adopt(model, compiled)                    # between two decoder steps: model.steps runs the graphs from now on

or both at once, `compile_model(model, cache)`. `compile_graphs` leaves `model` and `cache` alone, so it can run on
another thread while they go on decoding eagerly (the server's background mode).

Why packages rather than torch.compile's own caches: with frozen weights Inductor's graph cache stores nothing
(`Bypassing FX Graph Cache because 'mkldnn tensors unpickleable'`, and AOTAutograd's cache refuses freezing), so
every start compiled every graph again; without freezing the graphs cache but decode up to 3x slower
(docs/performance.md, Start-up). A package holds the frozen graph whole, and loads in well under a second.

A package is found by the weights and the graph (its rows, the cache's shape, the dtype, the screen) and records
what it was built for: torch's version, the device and the CPU's features (or the GPU), the thread count Inductor
wrote into the kernels, and this code. One built for anything else, or unreadable, is ignored with a warning and
built again; packages are written to a temporary name, flushed to disk and renamed into place, so that servers
starting together on one directory, and a start after a crash or a power cut, each find a whole package or none. A
package whose bytes changed on disk since (a member failing its CRC-32) is built again too, and a temporary package
left by a build killed while writing it is removed once nothing has written to it for LEFTOVER_S.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import platform
import secrets
import shutil
import threading
import time
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache as memoized
from pathlib import Path

import torch
from torch.export import Dim

from model.decoding import MIN_WINDOW, PACK_MAX_TOKENS, KVCache
from model.steps import StepGraphs, Steps
from model.transformer import Transformer

log = logging.getLogger(__name__)
# torch's own pickling of export specs and its autotuner warn once per graph about torch's own deprecated APIs: not
# the user's business
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
warnings.filterwarnings("ignore", message="TypedStorage is deprecated", module="torch._inductor.select_algorithm")
# Inductor's int8 lowering copies its zero points with torch.tensor(tensor): one warning per layer per graph
warnings.filterwarnings("ignore", message="To copy construct from a tensor", module="torch._inductor.mkldnn_lowerings")
PACKAGE_DIR = "nmt-serve-graphs"  # under Inductor's cache directory (NMT_COMPILE_CACHE_DIR)
FORMAT = "1"  # of the packages' metadata: a package of another format is built again
SOURCES = ("transformer.py", "screen.py", "quantize.py", "compile.py")  # the code the graphs are traced from

LEFTOVER_S = 3600  # a temporary package nothing has written to for this long was left by a build that was killed

# Steps of this many rows or more run a graph of their own, tuned at the cache's full row count; fewer rows run
# graphs tuned at 1, 2 (and the screen's minimum) rows. Kernels tuned at 2 rows ran a 128-row beam step ~1.4x
# slower than kernels tuned at 128 rows, and those ran a 4-row step ~1.5x slower.
LARGE_ROWS = 16


def graph_mode(graph: Graph, mode: str) -> str:
    """The mode `graph` is built in: `mode` for the decoder steps of fewer than LARGE_ROWS rows, "default" for the
    rest. Max-autotune's C++ GEMM kernels ran a 1-row step in 0.3-0.5 ms against oneDNN's 1.8 ms (4 rows: 0.6
    against 0.8-1.2 ms); from LARGE_ROWS rows on it picked oneDNN's packed GEMMs anyway (32 rows: 3.5-3.7 ms, the
    default mode's 3.2-3.3 ms), as for the prefill's rows x source tokens, so there it only doubled the build."""
    return mode if graph.fn.endswith("_step") and graph.hi < LARGE_ROWS else "default"


class Cancelled(Exception):
    """compile_graphs was asked to stop (the server is shutting down)."""


@dataclass(frozen=True)
class Graph:
    """One compiled graph: which function, for `lo`..`hi` rows (sources for the prefill), tuned at `hint` rows."""

    fn: str  # greedy_step, logprob_step, prefill or prefill_packed: the model's function, and its field of Steps
    lo: int
    hi: int
    hint: int

    @property
    def name(self) -> str:
        return f"{self.fn}-{self.lo}-{self.hi}"


def row_ranges(max_rows: int, screen_rows: int | None) -> list[tuple[int, int, int]]:
    """(lo, hi, hint) row ranges whose graphs cover every step of a cache of max_rows: 1 row, 2 rows on, the logit
    screen's minimum on (screen_rows, when it is on and below LARGE_ROWS) and LARGE_ROWS on (tuned at max_rows)."""
    starts = sorted({r for r in (1, 2, screen_rows or 1, LARGE_ROWS) if r <= max_rows})
    ends = [s - 1 for s in starts[1:]] + [max_rows]
    return [(lo, hi, max_rows if lo == LARGE_ROWS else lo) for lo, hi in zip(starts, ends, strict=True)]


def graphs_for(model: Transformer, cache: KVCache, steps: Iterable[str] = ("greedy", "logprobs")) -> list[Graph]:
    """Every graph a cache's steps and admissions run, in the order they are built: the first step's (what most
    requests run), the prefill's, the other steps'. steps: "greedy" (greedy_step), "logprobs" (logprob_step)."""
    per_step = []
    for step in steps:
        fn = {"greedy": "greedy_step", "logprobs": "logprob_step"}[step]
        screened = model.screen.min_rows if model.screen is not None and step == "greedy" else None
        per_step.append([Graph(fn, lo, hi, hint) for lo, hi, hint in row_ranges(cache.max_batch, screened)])
    prefill = [Graph("prefill", 1, 1, 1)]  # one source (a dynamic batch would not take size 1: export specializes it)
    if cache.max_batch > 1:
        prefill.append(Graph("prefill", 2, cache.max_batch, 2))
    if cache.max_batch > 1 and cache.max_src_len > 2:  # KVCache.add packs sources of different lengths
        prefill.append(Graph("prefill_packed", 2, cache.max_batch, 2))
    return [*per_step[0], *prefill, *(g for graphs in per_step[1:] for g in graphs)] if per_step else prefill


class _Fn(torch.nn.Module):
    """One of the model's functions as a module, for torch.export."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model


class _Step(_Fn):
    def __init__(self, model: Transformer, fn: str):
        super().__init__(model)
        self.fn = fn

    def forward(self, tokens, positions, past_kv, cross_kv, src_keep):
        return getattr(self.model, self.fn)(tokens, positions, past_kv, cross_kv, src_keep)


class _Prefill(_Fn):
    def forward(self, src):
        return self.model.prefill(src)


class _PrefillPacked(_Fn):
    def forward(self, ids, positions, seq, index):
        return self.model.prefill_packed(ids, positions, seq, index)


def _dim(name: str, lo: int, hi: int):
    return Dim(name, min=lo, max=hi) if lo < hi else Dim.STATIC


def _example(model: Transformer, cache: KVCache, graph: Graph):
    """The module to export, example inputs of the strides the cache hands the graph, and their dynamic dims."""
    c, rows = model.config, _dim("rows", graph.lo, graph.hi)
    if graph.fn == "prefill":
        src = torch.full((graph.hint, min(3, cache.max_src_len)), c.unk_id, device=cache.kv.device)
        return _Prefill(model), (src,), ({0: rows, 1: _dim("S", 1, cache.max_src_len)},)
    if graph.fn == "prefill_packed":
        b, s = graph.hint, 3
        src = torch.full((b, s), c.unk_id, device=cache.kv.device)
        src[1:, 1:] = c.source_pad_id
        keep = src != c.source_pad_id
        from model.decoding import packed

        inputs = packed(src, keep, keep.sum(1), int(keep.sum()))
        tokens = Dim("T", min=2, max=PACK_MAX_TOKENS)
        ds = ({0: tokens}, {0: tokens}, {0: tokens}, {0: rows, 1: _dim("S", 2, cache.max_src_len)})
        return _PrefillPacked(model), inputs, ds
    n, t, s = graph.hint, min(MIN_WINDOW + 1, cache.max_len), min(MIN_WINDOW + 1, cache.max_src_len)
    inputs = (  # views of the cache's buffers, as KVCache.step takes them
        cache.tokens[:n], cache.positions[:n], cache.kv[:, :, :n, :, :t], cache.cross_kv[:, :, :n, :, :s],
        cache.src_keep[:n, :s],
    )  # fmt: skip
    window, source = _dim("T", MIN_WINDOW, cache.max_len), _dim("S", MIN_WINDOW, cache.max_src_len)
    ds = ({0: rows}, {0: rows}, {2: rows, 4: window}, {2: rows, 4: source}, {0: rows, 1: source})
    return _Step(model, graph.fn), inputs, ds


@memoized
def _code_digest() -> str:
    here = Path(__file__).parent
    return hashlib.sha256(b"".join((here / f).read_bytes() for f in SOURCES)).hexdigest()[:16]


def weights_digest(model: Transformer) -> str:
    """A digest of the model's configuration and weights (what a package's directory is named by)."""
    h = hashlib.sha256(json.dumps(model.config.__dict__, sort_keys=True, default=str).encode())
    for name, t in sorted(model.state_dict(keep_vars=False).items()):
        h.update(name.encode())
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def cpu_features() -> str:
    """The CPU's model name and a digest of its feature flags (what Inductor's C++ kernels are built for)."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    return f"{model} [{hashlib.sha256(flags.encode()).hexdigest()[:12]}]"


def environment(device: torch.device) -> dict[str, str]:
    """What a package was built for, beside its graph: a package is used only where all of it matches."""
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        where = f"{p.name} (sm_{p.major}{p.minor}), CUDA {torch.version.cuda}"
    else:  # the vector ISA Inductor builds its kernels for: ATEN_CPU_CAPABILITY can lower it below the CPU's best
        where = f"{cpu_features()}, {vector_isa() or 'scalar'}"
    return {
        "format": FORMAT, "torch": f"{torch.__version__} ({torch.version.git_version[:12]})",
        "device": f"{device.type}: {where}", "threads": str(torch.get_num_threads()), "code": _code_digest(),
    }  # fmt: skip


def default_dir() -> Path:
    """Where packages go: PACKAGE_DIR in Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR, NMT_COMPILE_CACHE_DIR)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / PACKAGE_DIR


def use_cache_dir(path: str | os.PathLike) -> None:
    """Keep Inductor's on-disk caches (autotuning results, compiled kernels) and the packages in `path` from now on,
    for this process and the compiler processes it starts: a later start with the same directory loads the packages
    this one built."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path


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
                        list(self.loaded), self.started, self.order)  # fmt: skip


_loading = threading.Lock()  # one load at a time in this process: what a load newly maps is its own


def _extracted() -> set[str]:
    """The directories AOTInductor unpacked a package into (TMPDIR/aotinductor_XXXXXX) whose shared libraries this
    process has mapped, read from /proc/self/maps (empty where there is none)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in maps:
        path = line.split(maxsplit=5)[-1]
        at = path.find("/aotinductor_")
        end = path.find("/", at + 1)
        if at >= 0 and end > at and path.startswith("/"):
            found.add(path[:end])
    return found


def _load(path: Path, expected: dict[str, str]):
    """The package's runner when it was built for `expected`, else None (with a warning saying why).

    AOTInductor unpacks a package into a fresh directory under TMPDIR and removes it only when the runner is
    destroyed, which a server that is stopped or killed never does: every start left its graphs' libraries there
    (hundreds of MB for an OPUS-MT-sized model, in RAM where /tmp is a tmpfs). On CPU the library and its packed
    weights are all the runner needs once mapped, so the directory goes right after loading."""
    from torch._inductor import aoti_load_package

    try:
        with zipfile.ZipFile(path) as archive:  # AOTInductor reads members without checking their CRC-32
            broken = archive.testzip()
        if broken is not None:
            raise ValueError(f"{broken} fails its checksum")
        with _loading:
            before = _extracted()
            runner = aoti_load_package(str(path))
            if expected["device"].startswith("cpu"):  # CUDA runners may load kernel binaries later
                for directory in _extracted() - before:
                    shutil.rmtree(directory, ignore_errors=True)
        found = runner.get_metadata()
    except Exception as e:  # noqa: BLE001 - a corrupt or partial package is built again
        log.warning("ignoring the compiled graph %s: it cannot be loaded (%s); compiling it again", path, e)
        return None
    differ = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
    if differ:
        why = "; ".join(f"{k} {a!r} here {b!r}" for k, (a, b) in differ.items())
        log.warning("ignoring the compiled graph %s: it was built for %s; compiling it again", path, why)
        return None
    return runner.loader.boxed_run


def _sync(path: Path) -> None:
    """Flush a file's or a directory's contents to disk (best effort: some file systems refuse a directory's)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_leftovers(directory: Path) -> None:
    """Remove the temporary packages of builds killed while writing them: those nothing has written to for
    LEFTOVER_S (another server's build writes its package in seconds, and never after LEFTOVER_S)."""
    now = time.time()
    for tmp in directory.glob(".*.tmp.pt2"):
        try:
            if now - tmp.stat().st_mtime > LEFTOVER_S:
                tmp.unlink()
                log.warning("removed %s: a package a stopped build had left half-written", tmp)
        except OSError:  # another server removed it first, or the directory is read-only
            pass


def vector_isa() -> str:
    """The vector instructions Inductor builds CPU kernels with ("avx512 avx512_vnni", "avx2", ...; "" for none).
    Inductor finds them by building a probe library per ISA in its cache and loading it; a server killed while one
    was being written leaves it broken, and from then on every kernel built from that cache uses narrower vectors or
    none, silently (up to several times slower). So where a probe fails for an ISA the CPU's flags list, the probes'
    libraries are removed and built again (a probe that fails for another reason costs a few seconds a start)."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    flags = cpu_vec_isa.x86_isa_checker() if platform.machine() in ("x86_64", "AMD64") else []
    candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list if set(str(isa).split()) <= set(flags)]
    if set(map(str, candidates)) <= set(map(str, cpu_vec_isa.valid_vec_isa_list())):
        return str(cpu_vec_isa.pick_vec_isa() or "")
    failed = sorted(set(map(str, candidates)) - set(map(str, cpu_vec_isa.valid_vec_isa_list())))
    classes = [cpu_vec_isa.VecISA, *_subclasses(cpu_vec_isa.VecISA)]
    probes = {v for c in classes for k, v in vars(c).items() if k.endswith("_code") and isinstance(v, str)}
    removed = []
    for source in Path(cache_dir()).glob("*/*.cpp"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if source.read_text() in probes:
                removed += [built for built in source.parent.glob(f"{source.stem}.*") if built.suffix != ".cpp"]
    for built in removed:
        built.unlink(missing_ok=True)
    for c in classes:  # the probes' results are cached per process
        for value in vars(c).values():
            if hasattr(value, "cache_clear"):
                value.cache_clear()
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    isa = cpu_vec_isa.pick_vec_isa()
    log.warning(
        "Inductor's probes for %s failed on a CPU that has them: %d probe libraries in %s (left broken by a build "
        "killed while writing them?) were removed and the probes run again; now using %s", ", ".join(failed),
        len(removed), cache_dir(), str(isa) if isa else "none: the compiled kernels will be scalar",
    )  # fmt: skip
    return str(isa) if isa else ""


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def _build(model: Transformer, cache: KVCache, graph: Graph, path: Path, metadata: dict[str, str], mode: str):
    module, inputs, dynamic_shapes = _example(model, cache, graph)
    with torch.no_grad():  # strict: traced by dynamo, which keeps to this thread (non-strict tracing fakes the
        # tensors of the eager model decoding on the worker thread meanwhile)
        exported = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=True)
    configs = {
        "freezing": True, "max_autotune": mode == "max-autotune", "aot_inductor.metadata": metadata,
        "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False,  # no tables on stderr
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of this build's own, which AOTInductor creates only once it writes the package: a build killed while
    # compiling leaves nothing behind, one killed while writing leaves a temporary package (_remove_leftovers).
    tmp = path.with_name(f".{path.stem}-{os.getpid()}-{secrets.token_hex(4)}.tmp.pt2")
    try:
        with torch.no_grad():  # Inductor freezes the weights (packing them for oneDNN) only without autograd
            torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp), inductor_configs=configs)
        _sync(tmp)  # the bytes on disk before the name: after a power cut the package is whole or absent, not empty
        os.replace(tmp, path)  # whole or not at all, for another server starting on the same directory
        _sync(path.parent)  # the rename too
    finally:
        tmp.unlink(missing_ok=True)


def compile_graphs(
    model: Transformer, cache: KVCache, log: Callable[[str], None] | None = None,
    cancelled: Callable[[], bool] | None = None, steps: Iterable[str] = ("greedy", "logprobs"),
    directory: Path | None = None, mode: str = "max-autotune", ready: Callable[[Compiled], None] | None = None,
    building: Callable[[], None] | None = None,
) -> Compiled:  # fmt: skip
    """Every graph the cache's steps (and admissions) run, loaded from `directory` (default_dir()) or built into it;
    `model` and `cache` are only read. `cancelled` is asked before each graph: True raises Cancelled. `steps`: which
    steps to compile, the greedy one and the full one (log-probabilities) by default. mode: "max-autotune" (the GEMMs
    of the small-row steps benchmarked, the results cached: graph_mode) or "default". `ready`, when given, is handed
    Compiled.so_far() after each graph but the last (the server adopts them one by one); `building` is called before
    each graph that has to be built rather than loaded."""
    device = cache.kv.device
    directory = Path(directory or default_dir()) / weights_digest(model)
    _remove_leftovers(directory)
    expected = environment(device)  # on a CPU, vector_isa() first mends broken ISA probes: builds stay vectorised
    shape = f"b{cache.max_batch}-t{cache.max_len}-s{cache.max_src_len}-{str(cache.kv.dtype).removeprefix('torch.')}"
    screen = model.screen
    quantized = getattr(model, "quantized", None)  # "int8": model/quantize.py's layers, which Inductor lowers to int8
    graphs = graphs_for(model, cache, steps)
    compiled = Compiled(directory, order=[g.name for g in graphs])
    t0 = compiled.started
    for i, graph in enumerate(graphs):
        if cancelled is not None and cancelled():
            raise Cancelled("compiling cancelled")
        screened = f"-screen{screen.min_rows}" if screen is not None and graph.fn == "greedy_step" else ""
        built_as = graph_mode(graph, mode) if not quantized else "default"  # max-autotune's GEMM choices are float's
        path = directory / f"{graph.name}-{shape}{screened}{f'-{quantized}' if quantized else ''}-{built_as}.pt2"
        run, how = (_load(path, expected) if path.exists() else None), "loaded"
        if run is None:
            if building is not None:
                building()
            _build(model, cache, graph, path, {**expected, "graph": path.name}, built_as)
            run, how = _load(path, expected), "built"
            if run is None:
                raise RuntimeError(f"the compiled graph {path} does not load")
        getattr(compiled, how).append(graph.name)
        if graph.fn not in compiled.functions:
            kind = CompiledPrefill if graph.fn.startswith("prefill") else CompiledStep
            compiled.functions[graph.fn] = kind(model, graph.fn)
        compiled.functions[graph.fn].graphs.append((graph.lo, graph.hi, run))
        if log:
            log(f"{how} the {graph.fn} graph for {graph.lo}-{graph.hi} rows ({time.perf_counter() - t0:.0f} s so far)")
        if ready is not None and i < len(graphs) - 1:
            ready(compiled.so_far())
    compiled.seconds = time.perf_counter() - t0
    return compiled


def adopt(model: Transformer, compiled: Compiled) -> None:
    """The model steps with the compiled graphs from its next step on (KVCache takes model.steps' functions every
    step; call this between steps): they take their functions' places in model.steps, the others stay as they are.
    The cache's contents are the same either way, so sequences in flight go on."""
    model.steps = replace(model.steps, **compiled.functions)


def compile_model(model: Transformer, cache: KVCache, **options) -> Compiled:
    """compile_graphs, then adopt: the model steps compiled from now on."""
    compiled = compile_graphs(model, cache, **options)
    adopt(model, compiled)
    return compiled


def uncompile(model: Transformer) -> None:
    """Back to the eager model."""
    model.steps = Steps.eager(model)
