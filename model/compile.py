"""torch.compile for the one-token decoder steps (dynamic rows and key windows) and for the prefill.

Eager PyTorch spends most of a small decoder step on per-op overhead (about 150 ops for a 3-layer
decoder). Inductor with frozen weights (max-autotune) and the C++ wrapper turns the step into a few
fused kernels. The row count, the key window and the source window are all dynamic, so a growing
cache and a batch that changes size every step never recompile: one graph serves 1 row, one 2 rows
up to the logit screen's minimum (model/screen.py), one every larger batch. A dynamic row count ran
a 32-row step ~15% faster here than a graph per power-of-two row bucket did (most matmuls go to
oneDNN rather than to Inductor's own C++ GEMM kernels), and no step computes padding rows.

    compile_model(model)         # model.compiled_step/compiled_prefill are then used by KVCache
    warm_up(model, cache)        # compile every graph now rather than on the first requests

or, while the model goes on decoding eagerly (the server's background mode):

    twin, seconds = compile_twin(model, cache)   # on another thread: graphs for a cache of cache's shape
    adopt(model, twin)                           # between two decoder steps: the model steps compiled from now on

There are two steps: greedy_step (each row's best token, what greedy requests take) and logprob_step (every
token's log-probability, what beam search and sampling take). The prefill (encoder and cross-attention
keys/values), padded and packed, is compiled too, with dynamic shapes.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable

import torch
import torch._dynamo
import torch._inductor.config as inductor_config

from model.decoding import MIN_WINDOW, KVCache
from model.transformer import Transformer

log = logging.getLogger(__name__)
COMPILED = (
    "compiled_step",
    "compiled_logprob_step",
    "compiled_prefill",
    "compiled_prefill_packed",
)  # compile_model sets


class Cancelled(Exception):
    """warm_up was asked to stop (the server is shutting down)."""


# Steps of this many rows or more run a graph of their own, compiled (and its GEMMs autotuned) at the cache's full
# row count; fewer rows run graphs tuned at 1, 2 (and the screen's minimum) rows. Kernels tuned at 2 rows ran a
# 128-row beam step ~1.4x slower than kernels tuned at 128 rows, and those ran a 4-row step ~1.5x slower.
LARGE_ROWS = 16


def _small_rows(step, *inputs):  # two functions, so that dynamo keeps two caches of graphs (one per code object)
    return step(*inputs)


def _large_rows(step, *inputs):
    return step(*inputs)


class CompiledStep:
    """model.greedy_step (or logprob_step) compiled; called by KVCache.step with dynamic rows and windows."""

    def __init__(self, model: Transformer, mode: str = "max-autotune-no-cudagraphs", step: str = "greedy_step"):
        device = next(model.parameters()).device
        inductor_config.freezing = True  # weights become constants: pre-packed, folded into the kernels
        if device.type == "cpu":
            inductor_config.cpp_wrapper = True  # the graph's glue code in C++, not Python
        # three graphs per model, and a process may compile several models (the tests do)
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        self.eager, self.missed = getattr(model, step), 0  # missed: steps no compiled graph covered
        self.small, self.large = (
            torch.compile(f, mode=mode, fullgraph=True, dynamic=False) for f in (_small_rows, _large_rows)
        )
        self.warm = False  # set by warm_up: from then on only the guards that tell the graphs apart run

    def __call__(self, tokens, positions, past_kv, cross_kv, src_keep):
        fn = self.large if tokens.size(0) >= LARGE_ROWS else self.small
        if not self.warm:  # rows (one row still gets a graph of its own: dynamo specializes size 1) and windows
            rows = ((tokens, 0), (positions, 0), (past_kv, 2), (cross_kv, 2), (src_keep, 0))
            for t, dim in (*rows, (past_kv, 4), (cross_kv, 4), (src_keep, 1)):
                torch._dynamo.maybe_mark_dynamic(t, dim)
            return fn(self.eager, tokens, positions, past_kv, cross_kv, src_keep)
        # Full guard evaluation costs ~150 us a call; the weights are frozen and only the row count
        # differs between the compiled graphs, so checking only what differs is safe here.
        try:
            with torch.compiler.set_stance("eager_on_recompile", skip_guard_eval_unsafe=True):
                return fn(self.eager, tokens, positions, past_kv, cross_kv, src_keep)
        except RuntimeError as e:  # inputs no warmed-up graph covers: answer them eagerly, say so once
            if "Recompilation" not in str(e):
                raise
            if not self.missed:
                log.warning("a decoder step needed a graph the warm-up did not compile; running it eagerly: %s", e)
            self.missed += 1
            return self.eager(tokens, positions, past_kv, cross_kv, src_keep)


class CompiledPrefill:
    """model.prefill (or prefill_packed) compiled with dynamic shapes; once warm, a shape no graph
    covers (a batch of 1 with a 1-token source, say) runs eagerly rather than stalling to compile."""

    def __init__(self, fn):
        self.fn = torch.compile(fn, fullgraph=True, dynamic=True)
        self.warm = False

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        inputs = [t.clone() for t in inputs]  # made here, under KVCache.add's inference mode: the same guards always
        if not self.warm:
            return self.fn(*inputs)
        with torch.compiler.set_stance("eager_on_recompile"):
            return self.fn(*inputs)


def compile_model(model: Transformer, mode: str = "max-autotune-no-cudagraphs") -> None:
    """Give the model a compiled decoder step and prefill (KVCache uses them from now on)."""
    model.compiled_step = CompiledStep(model, mode)
    model.compiled_logprob_step = CompiledStep(model, mode, "logprob_step")
    model.compiled_prefill = CompiledPrefill(model.prefill)
    model.compiled_prefill_packed = CompiledPrefill(model.prefill_packed)


def use_cache_dir(path: str | os.PathLike) -> None:
    """Keep Inductor's on-disk caches (compiled graphs, autotuning results) in `path` from now on, for this process
    and the compiler processes it starts: a later start with the same directory reuses what this one compiled."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path


def uncompile(model: Transformer) -> None:
    """Back to the eager model."""
    for name in COMPILED:
        model.__dict__.pop(name, None)


def warm_rows(max_rows: int, screen_rows: int | None) -> list[int]:
    """Row counts whose steps compile every graph a cache of max_rows needs: 1 row, 2 rows (dynamic from
    there), the logit screen's minimum (screen_rows) when it is on and below LARGE_ROWS, and max_rows when it
    reaches LARGE_ROWS (the large-row graph, tuned at that size)."""
    small = {r for r in (1, 2, screen_rows or 1) if r <= max_rows and r < LARGE_ROWS}
    return sorted(small | ({max_rows} if max_rows >= LARGE_ROWS else set()))


def compile_twin(model: Transformer, cache: KVCache, log=None, cancelled: Callable[[], bool] | None = None):
    """A twin of `model` (the same modules and weights, graphs of its own) compiled and warmed up on an empty cache of
    `cache`'s shape, without touching `model` or `cache`, which may go on decoding eagerly meanwhile.
    -> (twin, seconds); `adopt` hands its graphs to the model."""
    twin = copy.copy(model)  # a shallow copy: the same parameters, submodules and screen
    for name in COMPILED:
        twin.__dict__.pop(name, None)
    compile_model(twin)
    own = KVCache(twin, cache.max_batch, cache.max_len, cache.max_src_len, cache.kv.device, cache.kv.dtype)
    return twin, warm_up(twin, own, log, cancelled)


def adopt(model: Transformer, twin: Transformer) -> None:
    """The model steps with the twin's compiled graphs from its next step on (KVCache looks them up every step; call
    this between steps). The cache's contents are the same either way, so sequences in flight go on."""
    for name in COMPILED:
        setattr(model, name, getattr(twin, name))


@torch.inference_mode()
def warm_up(
    model: Transformer, cache: KVCache, log=None, cancelled: Callable[[], bool] | None = None,
    steps: tuple[str, ...] = ("greedy", "logprobs"),
) -> float:  # fmt: skip
    """Compile every graph of the steps (and of the prefill) for an empty cache; returns the seconds it took.
    `cancelled` is asked before each graph: when it says True, warm_up raises Cancelled. `steps`: which steps to
    compile, the greedy one and the full one (log-probabilities) by default."""
    if cache.n:
        raise ValueError("warm_up needs an empty cache")
    c, t0 = model.config, time.perf_counter()

    def check() -> None:
        if cancelled is not None and cancelled():
            raise Cancelled("warm-up cancelled")

    def step(rows: int, output: str) -> None:  # a few steps of `rows` rows: windows MIN_WINDOW, then longer
        check()
        width = min(MIN_WINDOW, cache.max_src_len)
        src = torch.full((rows, width), c.unk_id, device=cache.kv.device)
        src[:, -1] = c.eos_id
        cache.add(model, src)
        tokens = torch.full((rows,), c.bos_id, device=cache.kv.device)
        for _ in range(min(MIN_WINDOW + 1, cache.max_len)):
            cache.step(model, tokens, output)  # what decode_greedy and decode_logprobs run
        cache.remove(range(cache.n))

    screen = getattr(model, "screen", None)
    rows_of = {
        "greedy": warm_rows(cache.max_batch, screen.min_rows if screen is not None else None),
        "logprobs": warm_rows(cache.max_batch, None),  # the full step (beam search, sampling) has no screen
    }
    for output in steps:
        for rows in rows_of[output]:
            step(rows, output)
            if log:
                log(f"compiled the {output} decoder step for {rows} rows ({time.perf_counter() - t0:.0f} s so far)")
    check()
    if cache.max_batch > 1 and cache.max_src_len > 2:  # sources of different lengths: the packed prefill
        src = torch.tensor(
            [[c.unk_id, c.unk_id, c.eos_id], [c.eos_id, c.source_pad_id, c.source_pad_id]], device=cache.kv.device
        )
        cache.remove(cache.add(model, src))
    for name in COMPILED:
        if (compiled := getattr(model, name, None)) is not None:
            compiled.warm = True
    return time.perf_counter() - t0
