"""The decoder step replayed as CUDA graphs, for row and window buckets over the static KV cache (CUDA only).

On a GPU the step of a translation model is a few hundred small kernels, and a step of a few rows costs what their
launches cost, not what they compute. Captured once as a CUDA graph, the step replays in one launch. A graph replays
on fixed addresses and shapes, so the step is captured for row buckets (1, 2, 4, 8, ... up to the cache's rows, as
vLLM captures batch sizes) times key-window buckets (32, 64, 128, ... up to the cache's length; one window bounds
both the target positions and the source tokens), each over views of the one KVCache; a live batch runs the
smallest graph that holds it. What the graph computes for the padding rows (the free rows after the live ones) is
never read: every operation of the step works row by row, and a row's keys beyond its own position and source are
masked. The greedy step is captured whole, its token choice included; the full step (beam search, sampling) up to
its final norm (`step_hidden`), its log-probabilities computed after the replay on the live rows alone, so that no
graph holds a rows x vocabulary output of its own.

    graphs = capture_graphs(model, cache)   # a few seconds; on the thread that steps the cache
    adopt(model, graphs)                    # model/compile's: model.steps replays them from the next step on

The prefill (the encoder and the cross-attention keys and values) runs eagerly: its shapes vary with every
admission, and a batch of sources is tens of kernels, each with real work.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

import torch

from model.compile import Cancelled, Compiled, adopt
from model.decoding import KVCache
from model.steps import StepGraphs
from model.transformer import Transformer

MIN_WINDOW_BUCKET = 32  # the shortest key window captured: shorter windows run the 32-key graph


def row_buckets(max_rows: int) -> list[int]:
    """The row counts captured: powers of two below max_rows, and max_rows."""
    buckets, b = [], 1
    while b < max_rows:
        buckets.append(b)
        b *= 2
    return [*buckets, max_rows]


def window_buckets(longest: int) -> list[int]:
    """The key windows captured: MIN_WINDOW_BUCKET, doubled while below `longest`, and `longest`."""
    buckets, w = [], MIN_WINDOW_BUCKET
    while w < longest:
        buckets.append(w)
        w *= 2
    return [*buckets, longest]


def bucket(n: int, buckets: list[int]) -> int:
    """The smallest bucket that holds n (buckets ascending, the last one ≥ n)."""
    return buckets[bisect.bisect_left(buckets, n)]


FAMILIES = ("greedy_step", "step_hidden")  # what is captured: the greedy step whole, the full step's decoder


def graph_name(fn: str, rows: int, window: int) -> str:
    return f"{fn}-{rows}-rows-{window}-keys"


class GraphedSteps:
    """The captured graphs of one model on one KVCache, keyed by (function, rows, window); `replay` is what
    KVCache.step calls through GraphedStep."""

    def __init__(self, model: Transformer, cache: KVCache, emulate: bool = False):
        """emulate: record the graphs instead of capturing them and run the padded step eagerly (any device): the
        buckets and the padding as the graphs run them, where there is no GPU (the tests)."""
        if cache.kv.device.type != "cuda" and not emulate:
            raise ValueError(f"CUDA graphs need a CUDA cache; this one is on {cache.kv.device}")
        self.model, self.cache, self.emulate = model, cache, emulate
        self.rows = row_buckets(cache.max_batch)
        self.windows = window_buckets(max(cache.max_len, cache.max_src_len))
        # (fn, rows, window) -> the graph (None when emulated), its inputs' addresses, its outputs
        self.graphs: dict[tuple[str, int, int], tuple[torch.cuda.CUDAGraph | None, tuple[int, ...], tuple]] = {}
        # one memory pool for every graph's intermediate tensors
        self.pool = None if emulate else torch.cuda.graph_pool_handle()
        self.replays = 0

    def plan(self) -> list[tuple[str, int, int]]:
        """Every (fn, rows, window) to capture: the greedy step's first (what most requests run), the largest first
        (the later graphs reuse the pool's memory)."""
        return [(fn, r, w) for fn in FAMILIES for r in reversed(self.rows) for w in reversed(self.windows)]

    def shape(self, rows: int, window: int) -> tuple[int, int, int]:
        """(rows, target window, source window) of a graph."""
        return rows, min(window, self.cache.max_len), min(window, self.cache.max_src_len)

    def _inputs(self, rows: int, t: int, s: int) -> tuple[torch.Tensor, ...]:
        c = self.cache  # views of the cache's buffers, as KVCache.step hands them over
        return c.tokens[:rows], c.positions[:rows], c.kv[:, :, :rows, :, :t], c.cross_kv[:, :, :rows, :, :s], \
            c.src_keep[:rows, :s]  # fmt: skip

    def function(self, fn: str) -> Callable[..., tuple[torch.Tensor, ...]]:
        """The model function a family of FAMILIES captures: the greedy step whole, or the full step's decoder."""
        return self.model.greedy_step if fn == "greedy_step" else self.model.step_hidden

    @torch.inference_mode()
    def capture(self, fn: str, rows: int, window: int) -> None:
        """Capture `fn` for `rows` rows and `window` keys. Only reads the cache, so sequences in flight go on."""
        inputs = self._inputs(*self.shape(rows, window))
        pointers = tuple(t.data_ptr() for t in inputs)
        if self.emulate:
            self.graphs[fn, rows, window] = (None, pointers, ())
            return
        run = self.function(fn)
        stream = torch.cuda.Stream(self.cache.kv.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the capture: cuBLAS picks and allocates its workspace
            run(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            outputs = run(*inputs)  # greedy_step: ids, logprobs (rows,), hidden (rows, D), facts (rows, 2), kv
        self.graphs[fn, rows, window] = (graph, pointers, outputs)

    def padded(self, fn: str, n: int, longest: int, src_len: int) -> tuple[int, int, int] | None:
        """The captured (rows, target window, source window) of `fn` that holds n rows of keys up to `longest` and
        sources up to `src_len`, or None when that graph is not captured (yet)."""
        if n > self.rows[-1]:
            return None
        key = (fn, bucket(n, self.rows), bucket(max(longest, src_len), self.windows))
        return self.shape(*key[1:]) if key in self.graphs else None

    def replay(self, fn: str, live: int, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """Replay `fn`'s graph of the inputs' shape: its outputs' first `live` rows (kv's along its rows
        dimension), valid until the next replay."""
        rows, t, s = inputs[0].size(0), inputs[2].size(4), inputs[3].size(4)
        window = next(w for w in self.windows if self.shape(rows, w)[1:] == (t, s))
        graph, pointers, outputs = self.graphs[fn, rows, window]
        if pointers != tuple(x.data_ptr() for x in inputs):
            raise RuntimeError("a CUDA graph replays only on the cache it was captured on")
        if graph is None:  # emulated
            outputs = self.function(fn)(*inputs)
        else:
            graph.replay()
        self.replays += 1
        *rest, kv = outputs
        return [x[:live] for x in rest] + [kv[:, :, :live]]


class GraphedStep(StepGraphs):
    """A decoder step (greedy_step, or logprob_step when not `greedy`) on the graphs: KVCache.step asks `padded` for
    the shape to hand over, and passes the live row count. Without one (no graph for that shape yet) it runs the
    eager step."""

    def __init__(self, steps: GraphedSteps, greedy: bool):
        self.steps, self.greedy = steps, greedy
        self.eager = steps.model.greedy_step if greedy else steps.model.logprob_step
        self.captured = "greedy_step" if greedy else "step_hidden"

    def padded(self, n: int, longest: int, src_len: int) -> tuple[int, int, int] | None:
        return self.steps.padded(self.captured, n, longest, src_len)

    @torch.inference_mode()
    def __call__(self, tokens, positions, past_kv, cross_kv, src_keep, live: int | None = None):
        if live is None:
            return self.eager(tokens, positions, past_kv, cross_kv, src_keep)
        outputs = self.steps.replay(self.captured, live, (tokens, positions, past_kv, cross_kv, src_keep))
        if self.greedy:
            return outputs  # ids, logprobs, hidden, facts, kv
        hidden, facts, kv = outputs
        return self.steps.model.generator(hidden).float().log_softmax(-1), facts, kv  # (live, V) float32


def compiled(steps: GraphedSteps, started: float, order: list[str]) -> Compiled:
    """The graphs captured so far as model/compile's Compiled, for `adopt` (model.steps' greedy_step and
    logprob_step)."""
    functions = {"greedy_step": GraphedStep(steps, greedy=True), "logprob_step": GraphedStep(steps, greedy=False)}
    return Compiled(
        directory=None, functions=functions, seconds=time.perf_counter() - started,
        built=[graph_name(*key) for key in steps.graphs], started=started, order=order,
    )  # fmt: skip


def capture_graphs(
    model: Transformer, cache: KVCache, log: Callable[[str], None] | None = None,
    cancelled: Callable[[], bool] | None = None, ready: Callable[[Compiled], None] | None = None,
    emulate: bool = False,
) -> Compiled:  # fmt: skip
    """Capture every graph the cache's steps need, on this thread (the one that steps the cache, between two
    steps). `ready`, when given, is handed the graphs captured so far after each one but the last. emulate: see
    GraphedSteps."""
    steps = GraphedSteps(model, cache, emulate)
    plan, t0 = steps.plan(), time.perf_counter()
    order = [graph_name(*key) for key in plan]
    for i, key in enumerate(plan):
        if cancelled is not None and cancelled():
            raise Cancelled("capturing cancelled")
        steps.capture(*key)
        if ready is not None and i < len(plan) - 1:
            ready(compiled(steps, t0, order))
    if log:
        log(f"captured {len(plan)} CUDA graphs of the decoder step in {time.perf_counter() - t0:.1f} s")
    return compiled(steps, t0, order)


def capture_model(
    model: Transformer, cache: KVCache, log: Callable[[str], None] | None = None, emulate: bool = False
) -> Compiled:
    """capture_graphs, then adopt: the model steps on the graphs from now on (model/compile's uncompile undoes
    it)."""
    graphs = capture_graphs(model, cache, log, emulate=emulate)
    adopt(model, graphs)
    return graphs
