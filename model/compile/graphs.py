"""Which graphs a cache's steps run (`graphs_for`), and one graph exported and built into a package (`build`).

Each graph is one of the model's functions exported (`torch.export`) with dynamic row counts, key windows and source
windows, and compiled by Inductor with frozen weights (pre-packed and folded into the kernels; max-autotune for the
small-row steps: graph_mode) into an AOTInductor package. A growing cache and a batch that changes size every step
never recompile: the greedy step has one graph for 1 row, one for 2 rows up to the logit screen's minimum
(model/screen.py), one from there, and one from LARGE_ROWS rows on, tuned at the cache's full row count; the full step
(beam search, sampling) the same without the screen's; the prefill one graph padded and one packed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.export import Dim

from model.compile.store import put, temporary_for
from model.decoding import MIN_WINDOW, PACK_MAX_TOKENS, KVCache, packed
from model.transformer import Transformer

# torch's own pickling of export specs and its autotuner warn once per graph about torch's own deprecated APIs: not
# the user's business
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
warnings.filterwarnings("ignore", message="TypedStorage is deprecated", module="torch._inductor.select_algorithm")
# Inductor's int8 lowering copies its zero points with torch.tensor(tensor): one warning per layer per graph
warnings.filterwarnings("ignore", message="To copy construct from a tensor", module="torch._inductor.mkldnn_lowerings")

# Steps of this many rows or more run a graph of their own, tuned at the cache's full row count; fewer rows run
# graphs tuned at 1, 2 (and the screen's minimum) rows. Kernels tuned at 2 rows ran a 128-row beam step ~1.4x
# slower than kernels tuned at 128 rows, and those ran a 4-row step ~1.5x slower.
LARGE_ROWS = 16

# The examples a graph is exported with set the sizes Inductor tunes its dynamic dimensions for: which loops it spreads
# over the threads (a loop it believes short runs on one) and how oneDNN's packed GEMMs are blocked. So they are a
# sentence's: SENTENCE_TOKENS source tokens (and cached tokens, for a step), and PREFILL_ROWS arrivals encoded
# together. With the smallest sizes (3 tokens, 2 rows) as examples, a 32-sentence prefill took 33 ms against 26 and
# loops of a step's attention ran on one thread (docs/performance-history.md, "Graphs tuned for a sentence's sizes").
SENTENCE_TOKENS = 16
PREFILL_ROWS = 8
# Except the one-row graphs' (the step and the one-source prefill), which keep the smallest sizes: tuned for a
# sentence's, the one-row step took 292 us against 266 (its few loops spread over the threads) and decoding one
# sentence at a time went 0.91x as fast on a 2-core AVX-512 EPYC, 1.04x with both back ("Before and after #62 on an
# AVX-512 CPU" in docs/performance-history.md)
ONE_ROW_TOKENS = MIN_WINDOW


def graph_mode(graph: Graph, mode: str) -> str:
    """The mode `graph` is built in: `mode` for the decoder steps of fewer than LARGE_ROWS rows; "measured" for the
    larger steps when `mode` is max-autotune (built both ways and timed on this CPU: model/compile/choice.py);
    "default" for the prefill. Max-autotune's C++ GEMM kernels ran a 1-row step in 0.3-0.5 ms against oneDNN's
    1.8 ms (4 rows: 0.6 against 0.8-1.2 ms), on every CPU tried; from LARGE_ROWS rows on which is faster depends on
    the CPU. For the prefill's rows x source tokens it picked oneDNN's packed GEMMs anyway."""
    if not graph.fn.endswith("_step"):
        return "default"
    if graph.hi < LARGE_ROWS:
        return mode
    return "measured" if mode == "max-autotune" else "default"


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


def uncalled(cache: KVCache) -> frozenset[str]:
    """The Steps fields a cache never calls: the packed prefill where it holds one row (KVCache.add packs two sources
    or more)."""
    return frozenset({"prefill_packed"}) if cache.max_batch <= 1 else frozenset()


def graphs_for(model: Transformer, cache: KVCache, steps: Iterable[str] = ("greedy", "logprobs")) -> list[Graph]:
    """Every graph a cache's steps and admissions run, in the order they are built: the first step's (what most
    requests run), the prefill's, the other steps'. steps: "greedy" (greedy_step), "logprobs" (logprob_step)."""
    per_step = []
    for step in steps:
        fn = {"greedy": "greedy_step", "logprobs": "logprob_step"}[step]
        screened = model.screen.min_rows if model.screen is not None and step == "greedy" else None
        per_step.append([Graph(fn, lo, hi, hint) for lo, hi, hint in row_ranges(cache.max_batch, screened)])
    prefill = [Graph("prefill", 1, 1, 1)]  # one source (a dynamic batch would not take size 1: export specializes it)
    arrivals = min(PREFILL_ROWS, cache.max_batch)  # the example batch of the prefill graphs of 2 rows on
    if cache.max_batch > 1:
        prefill.append(Graph("prefill", 2, cache.max_batch, arrivals))
    if cache.max_batch > 1 and cache.max_src_len > 2:  # KVCache.add packs sources of different lengths
        prefill.append(Graph("prefill_packed", 2, cache.max_batch, arrivals))
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


def example_inputs(model: Transformer, cache: KVCache, graph: Graph):
    """The module to export, example inputs of the strides the cache hands the graph, and their dynamic dims."""
    c, rows = model.config, _dim("rows", graph.lo, graph.hi)
    if graph.fn == "prefill":
        tokens = ONE_ROW_TOKENS + 1 if graph.hi == 1 else SENTENCE_TOKENS
        src = torch.full((graph.hint, min(tokens, cache.max_src_len)), c.unk_id, device=cache.kv.device)
        return _Prefill(model), (src,), ({0: rows, 1: _dim("S", 1, cache.max_src_len)},)
    if graph.fn == "prefill_packed":  # sources of s, s - 1, s - 2, s - 3, s, ... tokens (the first is the longest)
        b, s = graph.hint, min(SENTENCE_TOKENS, cache.max_src_len, PACK_MAX_TOKENS // graph.hint)
        src = torch.full((b, s), c.unk_id, device=cache.kv.device)
        for r in range(1, b):
            src[r, max(1, s - r % 4) :] = c.source_pad_id
        keep = src != c.source_pad_id
        inputs = packed(src, keep, keep.sum(1), int(keep.sum()))
        tokens = Dim("T", min=2, max=PACK_MAX_TOKENS)
        ds = ({0: tokens}, {0: tokens}, {0: tokens}, {0: rows, 1: _dim("S", 2, cache.max_src_len)})
        return _PrefillPacked(model), inputs, ds
    tokens = ONE_ROW_TOKENS if graph.hi == 1 else SENTENCE_TOKENS
    n, t, s = graph.hint, min(tokens + 1, cache.max_len), min(tokens, cache.max_src_len)
    inputs = (  # views of the cache's buffers, as KVCache.step takes them
        cache.tokens[:n], cache.positions[:n], cache.kv[:, :, :n, :, :t], cache.cross_kv[:, :, :n, :, :s],
        cache.src_keep[:n, :s],
    )  # fmt: skip
    window, source = _dim("T", MIN_WINDOW, cache.max_len), _dim("S", MIN_WINDOW, cache.max_src_len)
    ds = ({0: rows}, {0: rows}, {2: rows, 4: window}, {2: rows, 4: source}, {0: rows, 1: source})
    return _Step(model, graph.fn), inputs, ds


def timing_inputs(cache: KVCache, graph: Graph, window: int) -> list[torch.Tensor]:
    """A decoder step's inputs at the graph's tuned row count and `window` cached (and source) tokens, to time it
    with: the keys and values are views of the cache's own buffers, which a step only reads (so the worker may go on
    decoding with them), the rest copies of them that every row holds valid."""
    n, t, s = graph.hint, min(window, cache.max_len), min(window, cache.max_src_len)
    tokens = torch.full_like(cache.tokens, 3)  # an id every vocabulary has (the bundled models' <unk>)
    positions = torch.full_like(cache.positions, t - 1)
    src_keep = torch.ones_like(cache.src_keep)
    return [tokens[:n], positions[:n], cache.kv[:, :, :n, :, :t], cache.cross_kv[:, :, :n, :, :s], src_keep[:n, :s]]


def build(model: Transformer, cache: KVCache, graph: Graph, path: Path, metadata: dict[str, str], mode: str):
    """Export `graph` and compile it into the package `path` (written whole or not at all), with `metadata`."""
    module, inputs, dynamic_shapes = example_inputs(model, cache, graph)
    with torch.no_grad():  # strict: traced by dynamo, which keeps to this thread (non-strict tracing fakes the
        # tensors of the eager model decoding on the worker thread meanwhile)
        exported = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=True)
    configs = {
        "freezing": True, "max_autotune": mode == "max-autotune", "aot_inductor.metadata": metadata,
        "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False,  # no tables on stderr
    }  # fmt: skip
    tmp = temporary_for(path)  # AOTInductor creates it only once it writes the package
    try:
        with torch.no_grad():  # Inductor freezes the weights (packing them for oneDNN) only without autograd
            torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp), inductor_configs=configs)
        put(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
