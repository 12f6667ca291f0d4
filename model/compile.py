"""torch.compile for the one-token decoder step (dynamic rows and key windows) and for the prefill.

Eager PyTorch spends most of a small decoder step on per-op overhead (about 150 ops for a 3-layer
decoder). Inductor with frozen weights (max-autotune) and the C++ wrapper turns the step into a few
fused kernels. The row count, the key window and the source window are all dynamic, so a growing
cache and a batch that changes size every step never recompile: one graph serves 1 row, one 2 rows
up to the logit screen's minimum (model/screen.py), one every larger batch. A dynamic row count ran
a 32-row step ~15% faster here than a graph per power-of-two row bucket did (most matmuls go to
oneDNN rather than to Inductor's own C++ GEMM kernels), and no step computes padding rows.

    compile_model(model)         # model.compiled_step/compiled_prefill are then used by KVCache
    warm_up(model, cache)        # compile every graph now rather than on the first requests

The prefill (encoder and cross-attention keys/values), padded and packed, is compiled too, with dynamic shapes.
"""

from __future__ import annotations

import logging
import time

import torch
import torch._dynamo
import torch._inductor.config as inductor_config

from model.decoding import MIN_WINDOW, KVCache
from model.transformer import Transformer

log = logging.getLogger(__name__)
COMPILED = ("compiled_step", "compiled_prefill", "compiled_prefill_packed")  # what compile_model sets on a model


class CompiledStep:
    """model.greedy_step compiled; called by KVCache.step with dynamic rows and windows."""

    def __init__(self, model: Transformer, mode: str = "max-autotune-no-cudagraphs"):
        device = next(model.parameters()).device
        inductor_config.freezing = True  # weights become constants: pre-packed, folded into the kernels
        if device.type == "cpu":
            inductor_config.cpp_wrapper = True  # the graph's glue code in C++, not Python
        # three graphs per model, and a process may compile several models (the tests do)
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        self.fn = torch.compile(model.greedy_step, mode=mode, fullgraph=True, dynamic=False)
        self.eager, self.missed = model.greedy_step, 0  # missed: steps no compiled graph covered
        self.warm = False  # set by warm_up: from then on only the guards that tell the graphs apart run

    def __call__(self, tokens, positions, past_kv, cross_kv, src_keep):
        if not self.warm:  # rows (one row still gets a graph of its own: dynamo specializes size 1) and windows
            rows = ((tokens, 0), (positions, 0), (past_kv, 2), (cross_kv, 2), (src_keep, 0))
            for t, dim in (*rows, (past_kv, 4), (cross_kv, 4), (src_keep, 1)):
                torch._dynamo.maybe_mark_dynamic(t, dim)
            return self.fn(tokens, positions, past_kv, cross_kv, src_keep)
        # Full guard evaluation costs ~150 us a call; the weights are frozen and only the row count
        # differs between the compiled graphs, so checking only what differs is safe here.
        try:
            with torch.compiler.set_stance("eager_on_recompile", skip_guard_eval_unsafe=True):
                return self.fn(tokens, positions, past_kv, cross_kv, src_keep)
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
    model.compiled_prefill = CompiledPrefill(model.prefill)
    model.compiled_prefill_packed = CompiledPrefill(model.prefill_packed)


def uncompile(model: Transformer) -> None:
    """Back to the eager model."""
    for name in COMPILED:
        model.__dict__.pop(name, None)


def warm_rows(max_rows: int, screen_rows: int | None) -> list[int]:
    """Row counts whose steps compile every graph a cache of max_rows needs: 1 row, 2 rows (dynamic from
    there), and the logit screen's minimum (screen_rows) when it is on and can be reached."""
    return sorted({r for r in (1, 2, screen_rows or 1) if r <= max_rows})


@torch.inference_mode()
def warm_up(model: Transformer, cache: KVCache, log=None) -> float:
    """Compile every graph of the step (and of the prefill) for an empty cache; returns the seconds it took."""
    if cache.n:
        raise ValueError("warm_up needs an empty cache")
    c, t0 = model.config, time.perf_counter()
    screen = getattr(model, "screen", None)
    for rows in warm_rows(cache.max_batch, screen.min_rows if screen is not None else None):
        width = min(MIN_WINDOW, cache.max_src_len)
        src = torch.full((rows, width), c.unk_id, device=cache.kv.device)
        src[:, -1] = c.eos_id
        cache.add(model, src)
        tokens = torch.full((rows,), c.bos_id, device=cache.kv.device)
        for _ in range(min(MIN_WINDOW + 1, cache.max_len)):  # window MIN_WINDOW, then longer
            model.decode_greedy(tokens, cache)
        cache.remove(range(cache.n))
        if log:
            log(f"compiled the decoder step for {rows} rows ({time.perf_counter() - t0:.0f} s so far)")
    if cache.max_batch > 1 and cache.max_src_len > 2:  # sources of different lengths: the packed prefill
        src = torch.tensor(
            [[c.unk_id, c.unk_id, c.eos_id], [c.eos_id, c.source_pad_id, c.source_pad_id]], device=cache.kv.device
        )
        cache.remove(cache.add(model, src))
    for name in COMPILED:
        if (compiled := getattr(model, name, None)) is not None:
            compiled.warm = True
    return time.perf_counter() - t0
