"""What the server says about itself: /health and /ready, /models, and /info (the model, its compiling, its memory,
the worker that answered)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.settings import Quantize


class StatusResponse(BaseModel):
    status: str


class ReadyResponse(StatusResponse):
    status: Literal["ready", "partial"] = Field(description="`partial`: some models failed to load, the rest serve")
    models: dict[str, Literal["loading", "ready", "failed", "stopped"]]


class LanguageOut(BaseModel):
    code: str = Field(description="the model's own code (`deu_Latn`)")
    name: str = Field(description="the shortest code that names it here (`de`; `zh-Hant`)")


class ModelOut(BaseModel):
    name: str
    state: Literal["loading", "ready", "failed", "stopped"]
    default: bool = Field(description="requests that name no model and no language go to this one")
    directory: str
    source: str = Field(description="source language code from the checkpoint's metadata (`unknown` until loaded)")
    target: str
    error: str | None = Field(None, description="why it failed to load")
    device: str | None = None
    dtype: str | None = None
    threads: int | None = Field(None, description="CPU threads of its worker (NMT_THREADS, or the cores shared out)")
    parameters: int | None = None
    limits: dict[str, int] | None = None
    metadata: dict[str, Any] | None = Field(None, description="the checkpoint's metadata (training, scores)")
    languages: list[LanguageOut] | None = Field(
        None, description="a many-to-many model's languages (its `source` and `target` read `multilingual`): any of "
        "them into any other"
    )  # fmt: skip


class ModelsResponse(BaseModel):
    models: list[ModelOut]


class GemmChoice(BaseModel):
    """How a large-row decoder step's GEMMs were chosen on this CPU: the graph built both ways and timed."""

    chosen: Literal["default", "max-autotune"] = Field(
        description="`default`: oneDNN's packed GEMMs; `max-autotune`: Inductor's pick per linear among its C++ GEMM "
        "templates and oneDNN's"
    )
    ms: dict[str, float] = Field(description="each build's milliseconds a step, the best of several rounds")
    rows: int = Field(description="the rows of the timed step (the graph's largest)")
    window: int = Field(description="cached and source tokens of the timed step")


class CompileInfo(BaseModel):
    """Where compiling stands (NMT_COMPILE)."""

    mode: Literal["background", "blocking", "off"] = Field(description="NMT_COMPILE")
    state: Literal["off", "pending", "compiling", "compiled", "failed"] = Field(
        description="`compiled` once the compiled graphs serve; `failed` serves the eager model (the log says why)"
    )
    seconds: float | None = Field(description="from the start of compiling to the compiled graphs serving")
    built: int | None = Field(description="graphs compiled at this start (NMT_COMPILE_CACHE_DIR had no package)")
    loaded: int | None = Field(description="graphs loaded from the packages an earlier start built")
    graphs: Literal["aotinductor", "cuda"] = Field(
        "aotinductor",
        description="`aotinductor`: compiled packages (CPU); `cuda`: the decoder step captured as CUDA graphs for row "
        "and key-window buckets (GPU)",
    )
    serving: list[str] = Field(
        default_factory=list,
        description="the compiled graphs serving now, by name (step, rows): in the background they serve one by one "
        "as they are ready, the greedy step's first",
    )
    kernels: Literal["max-autotune", "default"] = Field(
        "max-autotune", description="NMT_COMPILE_MODE: how the graphs' GEMM kernels are chosen"
    )
    gemms: dict[str, GemmChoice] = Field(
        default_factory=dict,
        description="with `max-autotune` on a CPU: the large-row decoder steps' GEMMs, by graph, chosen by timing "
        "the step built each way on this CPU (docs/configuration.md)",
    )
    gil: Literal["released", "held"] | None = Field(
        None,
        description="on a CPU: whether the compiled graphs run with Python's lock `released` (NMT_COMPILE_RELEASE_GIL) "
        "or `held` (the setting off, its extension not built yet or not buildable: the log says why); null on a GPU "
        "and with NMT_COMPILE=off",
    )
    jobs: int | None = Field(
        None,
        description="the most graphs built at once, each in a process of its own (NMT_COMPILE_JOBS); 1: one after "
        "another on the compiling thread; 0: none built (all loaded); null until compiling ends",
    )


class MemoryInfo(BaseModel):
    """The KV cache the engine decodes in, and how its rows were chosen (NMT_MAX_BATCH_SIZE)."""

    rows: int = Field(description="decoder rows (sequences decoding together; a beam search takes `beam_size`)")
    max_len: int = Field(description="target positions per row")
    max_src_len: int = Field(description="source tokens per row")
    kv_cache_bytes: int = Field(description="the cache's keys, values and source masks")
    rows_from: Literal["setting", "cpu", "gpu memory"] = Field(
        description="`setting`: NMT_MAX_BATCH_SIZE; `cpu`: the CPU default; `gpu memory`: NMT_GPU_MEMORY_FRACTION"
    )
    gpu_memory_fraction: float | None = Field(description="on a GPU: the share of its memory the server may fill")
    gpu_total_bytes: int | None = None
    gpu_free_bytes: int | None = None
    allocated_bytes: int | None = Field(None, description="on a GPU: what PyTorch has allocated on it now")


class WorkerInfo(BaseModel):
    """The worker that answered, when the server runs several (NMT_WORKERS)."""

    index: int = Field(description="this worker's number, from 0")
    count: int = Field(description="the server's workers (NMT_WORKERS)")
    loaded: int = Field(description="how many of them have loaded their models")
    pid: int = Field(description="this worker's process id")


class InfoResponse(BaseModel):
    model: str
    models: list[str] = Field(description="every model this server serves (GET /models); `?model=` picks one here")
    version: str
    config: dict[str, Any]
    parameters: int
    vocab_size: dict[str, int]
    device: str
    device_name: str = Field(description="the GPU's name on CUDA, else the CPU model")
    dtype: str
    compiled: bool = Field(description="the encoder and decoder steps run compiled graphs (NMT_COMPILE)")
    compile: CompileInfo
    screened_logits: bool = Field(
        description="greedy picks screened in bfloat16, confirmed in float32 (NMT_SCREEN_LOGITS)"
    )
    quantize: Quantize = Field(description="`int8`: the linear layers run in int8 (NMT_QUANTIZE)")
    threads: int = Field(description="CPU threads the model's work runs on (NMT_THREADS)")
    warnings: list[str] = Field(
        default_factory=list,
        description="what the server found amiss in its settings on the CPU it runs on, as its start-up log says: e.g. "
        "NMT_QUANTIZE=int8 on a CPU where int8 decodes slower than float32",
    )
    limits: dict[str, int]
    memory: MemoryInfo
    languages: dict[str, str] = Field(description='the language pair, e.g. {"source": "en", "target": "de"}')
    metadata: dict[str, Any]
    confidence: dict[str, Any] = Field(
        description="what `confidence` means for this model: `calibrated`, `meaning`, the flags' `thresholds`, and for "
        "a calibrated one its `chrf_threshold` and what it was fitted on (docs/confidence.md)"
    )
    worker: WorkerInfo | None = Field(None, description="with NMT_WORKERS > 1: the worker that answered, else null")
