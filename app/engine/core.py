"""The engine core: the model's side of the engine, which speaks only token ids.

It owns the model, its KV cache, the running batch (the batcher's worker thread) and the compiled graphs, and answers
in typed values: source ids and decoding options in; hypotheses (ids, log-probabilities), token streams, alignments
and attention weights out. Text (tokenizing, sentences, HTML, protected spans, confidence, the API's shapes) is the
`Engine`'s, above it (app/text/engine.py), which reaches the model only through these methods, so that the core can
live in another process (as vLLM's EngineCore does) behind the same ones.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import torch

from app.engine.attention import AttentionWeights
from app.engine.compiling import Compiler, Mode
from app.engine.device import device_name
from app.engine.memory import Sizing
from app.engine.metrics import EngineMetrics
from app.engine.scheduler import Batcher
from app.engine.sequence import TokenStream
from model.compile import Compiled
from model.constraints import continues_word
from model.hypothesis import Hypothesis
from model.options import GREEDY, DecodingOptions
from model.quantize import int8_warning, quantize_int8
from model.search import alignments
from model.transformer import Transformer

log = logging.getLogger("nmt_serve.engine")


class EngineCore:
    """The model, its cache and its running batch behind async methods of token ids (see the module's docstring)."""

    def __init__(
        self, model: Transformer, *, metrics: EngineMetrics, max_batch_size: int, max_len: int, max_src_len: int,
        prefill_tokens: int, max_queue: int, threads: int = 0, waiting_served_ratio: float = 0.3,
        max_waiting_steps: int = 4, compile: Mode = "off", compile_cache_dir: Path | None = None,
        compile_mode: str = "max-autotune", quantize: str = "none", screen_logits: bool = False,
        sizing: Sizing | None = None, gpu_memory_fraction: float | None = None, compile_jobs: int = 1,
    ):  # fmt: skip
        self.model, self.config = model, model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.quantize, self.warnings = quantize, []  # warnings: what /info and the start-up log say is amiss
        if quantize == "int8":
            quantize_int8(model)  # before compiling: the graphs are traced from the int8 layers
            if (warning := int8_warning()) is not None:
                log.warning("%s", warning)
                self.warnings.append(warning)
        self.screened = model.use_screen(screen_logits and quantize == "none")  # before compiling, as the int8 layers
        self.batcher = Batcher(
            model, max_batch_size, max_len, max_src_len, prefill_tokens, max_queue, metrics, threads,
            waiting_served_ratio, max_waiting_steps,
        )  # fmt: skip
        self.metrics = metrics
        self.sizing = sizing or Sizing(max_batch_size, "setting")
        self.gpu_memory_fraction = gpu_memory_fraction
        self.compiler = Compiler(model, self.batcher, compile, metrics, compile_cache_dir, compile_mode, compile_jobs)

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread (and nothing else: `before_ready` and `after_ready` compile)."""
        self.batcher.start()

    async def before_ready(self) -> None:
        """NMT_COMPILE=blocking: compile (or load) the graphs before the first request."""
        await self.compiler.before_ready()

    def after_ready(self) -> None:
        """NMT_COMPILE=background: compile (or load) the graphs while serving."""
        self.compiler.after_ready()

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new work, fail whatever is still queued or decoding, and join the worker (blocking)."""
        self.compiler.stop()
        self.batcher.stop(timeout)

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called: the core takes no more work."""
        return self.batcher.stopped

    unavailable = None  # the model is in this process: never out of reach (a RemoteCore's may be)

    @property
    def compiled(self) -> bool:
        """Whether the compiled graphs serve (see app/engine/compiling.py)."""
        return self.compiler.compiled

    @property
    def graphs_at_start(self) -> bool:
        """Whether the graphs are made at start-up (CUDA graphs, in seconds) rather than compiled ahead of time."""
        return self.compiler.cuda

    def precompile(self) -> Compiled:
        """Compile (or find on disk) every graph the server would use, and return what was built (blocking)."""
        return self.compiler.precompile()

    # ---- work (called from the event loop) --------------------------------------------------------

    async def generate(
        self, srcs: list[list[int]], budgets: list[int], start: tuple[int, ...] = ()
    ) -> list[Hypothesis]:
        """Greedy hypotheses for source id lists (each ending in </s>), at most `budgets[i]` tokens each, after the
        `start` tokens (a many-to-many model's target language)."""
        return await self.batcher.generate(srcs, budgets, start)

    async def search(
        self, srcs: list[list[int]], budgets: list[int], options: DecodingOptions | list[DecodingOptions]
    ) -> list[list[Hypothesis]]:
        """Each source's hypotheses, best first, decoded as `options` (one for all, or each its own) says."""
        return await self.batcher.search(srcs, budgets, options)

    def searching(
        self, srcs: list[list[int]], budgets: list[int], options: DecodingOptions | list[DecodingOptions]
    ) -> asyncio.Future:
        """`search` submitted now, answered through a future (cancel it to give up): for the engine process, which
        answers its front-ends from the future's callback rather than a task per request."""
        return self.batcher.searching(srcs, budgets, options)

    def stream(
        self, src: list[int], budget: int, options: DecodingOptions = GREEDY, request: object | None = None,
        sink: Any = None,
    ) -> TokenStream:  # fmt: skip
        """One sequence of one row, submitted now (QueueFull or EngineUnavailable raised here), its tokens streamed
        (to `sink.put_nowait`, then None, if given); streams of one `request` take turns with other requests as
        one."""
        return self.batcher.stream(src, budget, options, request, sink)

    def check_capacity(self, n: int) -> None:
        """Raise QueueFull now if `n` more sequences would not fit, before any work is spent on them."""
        self.batcher.check_capacity(n)

    async def align(
        self, srcs: list[list[int]], targets: list[list[list[int]]], start: tuple[int, ...] = ()
    ) -> list[list[list[int]]]:
        """For each target of each source, the source token each target token aligns to (between two steps)."""
        return await self.batcher.call(_align, self.model, srcs, targets, start)

    async def attention(
        self, src: list[int], tgt: list[int], layers: list[int], heads: list[int], average_heads: bool,
        start: tuple[int, ...] = (),
    ) -> AttentionWeights:  # fmt: skip
        """A teacher-forced pass over `src` and `tgt` (the decoder fed `start` after <s>), between two steps."""
        return await self.batcher.call(_attention, self.model, src, tgt, layers, heads, average_heads, start)

    async def word_continuations(self, pieces: list[str]) -> torch.Tensor:
        """(V,) True for the target tokens that continue a word (model/constraints.py's continues_word), from the
        target vocabulary's `pieces`: no token of these may follow a glossary's phrase (model/constraints.py)."""
        return torch.tensor(list(map(continues_word, pieces)), dtype=torch.bool, device=self.device)

    # ---- facts -----------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        """Decoder rows in the KV cache: the most sequence rows decoded together."""
        return self.batcher.cache.max_batch

    @property
    def max_queue(self) -> int:
        return self.batcher.max_queue

    @property
    def queue_size(self) -> int:
        """The whole queue, which every request shares (a front-end's RemoteCore admits a share of it)."""
        return self.batcher.max_queue

    @property
    def load(self) -> int:
        """Sequences waiting or decoding: what `max_queue` bounds."""
        return self.batcher.load

    def info(self) -> dict[str, Any]:
        """The model, the device and the compiled graphs, for /info."""
        c = self.config
        return {
            "config": c.to_dict(), "parameters": self.model.num_parameters(),
            "vocab_size": {"source": c.src_vocab_size, "target": c.tgt_vocab_size},
            "device": str(self.device), "device_name": device_name(self.device),
            "dtype": str(self.dtype).removeprefix("torch."), "compiled": self.compiled, "compile": self.compiler.info(),
            "screened_logits": self.screened, "quantize": self.quantize, "threads": self.batcher.threads,
            "warnings": self.warnings,
        }  # fmt: skip

    def memory(self) -> dict[str, Any]:
        """The KV cache the core decodes in: its rows, lengths and bytes, and how the rows were chosen."""
        cache = self.batcher.cache
        kv_bytes = sum(t.numel() * t.element_size() for t in (cache.kv, cache.cross_kv, cache.src_keep))
        out = {
            "rows": cache.max_batch, "max_len": cache.max_len, "max_src_len": cache.max_src_len,
            "kv_cache_bytes": kv_bytes, "rows_from": self.sizing.how, "gpu_memory_fraction": self.gpu_memory_fraction,
        }  # fmt: skip
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            out |= {"gpu_total_bytes": total, "gpu_free_bytes": free,
                    "allocated_bytes": torch.cuda.memory_allocated(self.device)}  # fmt: skip
        return out


@torch.inference_mode()
def _align(
    model: Transformer, srcs: list[list[int]], targets: list[list[list[int]]], start: tuple[int, ...]
) -> list[list[list[int]]]:
    """On the worker thread: for each target of each source, the source token each target token aligns to."""
    return alignments(model, srcs, targets, start)


@torch.inference_mode()
def _attention(
    model: Transformer, src: list[int], tgt: list[int], layers: list[int], heads: list[int], average_heads: bool,
    start: tuple[int, ...],
) -> AttentionWeights:  # fmt: skip
    """On the worker thread: the teacher-forced pass's weights, the chosen layers and heads."""
    c, device = model.config, next(model.parameters()).device
    tgt_ids = torch.tensor([[c.bos_id, *start, *tgt]], device=device)  # (1, T)
    enc, dec, cross = model.attention_weights(torch.tensor([src], device=device), tgt_ids)

    def pick(weights: list[torch.Tensor]) -> list:
        w = torch.stack([weights[i][0] for i in layers])[:, heads]  # (L', H', Q, K)
        if average_heads:
            w = w.mean(1, keepdim=True)  # (L', 1, Q, K)
        return w.double().round(decimals=4).tolist()

    return AttentionWeights(tgt_ids[0].tolist(), pick(enc), pick(dec), pick(cross))
