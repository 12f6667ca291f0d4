"""An engine from the settings: the checkpoint loaded onto the configured device, with the limits and the share of
the machine the settings give it (`load_engine`), or a front-end's, whose core is the engine process's
(`front_engine`). Only `load_engine` imports torch and the core's side, when it runs: a front-end never does."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.metrics import Metrics
from app.settings import Settings
from app.text.directions import start_tokens
from app.text.engine import DEFAULT_QUEUE, Engine
from model.confidence import Calibration
from model.metadata import read_metadata
from model.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from app.engine.remote import RemoteCore


def load_engine(
    s: Settings, metrics: Metrics | None = None, *, model_dir: Path | None = None, name: str | None = None,
    threads: int | None = None, gpu_memory_fraction: float | None = None,
) -> Engine:  # fmt: skip
    """Load the checkpoint (`model_dir`, else NMT_MODEL_DIR) onto the configured device and dtype (blocking).
    The calling thread is left single-threaded in torch so that the batcher's worker is the only thread with an
    OpenMP team. `threads` and `gpu_memory_fraction` are this model's share when the server has several."""
    import torch

    from app.engine.device import resolve_device
    from app.engine.memory import decoder_rows
    from model.checkpoint import load_checkpoint
    from model.compile import nogil

    threads = threads or s.threads or torch.get_num_threads()
    nogil.want(s.compile_release_gil)  # one extension for the process: every model the same
    torch.set_num_threads(1)  # before any parallel work here: see Batcher.threads
    model_dir = model_dir or s.model_dir
    fraction = gpu_memory_fraction or s.gpu_memory_fraction
    device, dtype = resolve_device(s.device, s.dtype)
    if s.quantize != "none" and (device.type != "cpu" or dtype != torch.float32):
        raise ValueError(f"NMT_QUANTIZE={s.quantize} runs on the CPU in float32, not on {device} in {dtype}")
    model, tokenizer, metadata = load_checkpoint(model_dir, device=device, dtype=dtype)
    calibration = Calibration.load(model_dir)
    start = start_tokens(tokenizer)
    sizing = decoder_rows(
        model.config, device, dtype, s.max_new_tokens + 1 + start, s.max_input_tokens, s.max_batch_size, fraction,
        s.prefill_tokens, shared=s.workers > 1,
    )  # fmt: skip
    return Engine.local(
        model, tokenizer, name=name or metadata.get("name") or Path(model_dir).name, metadata=metadata,
        max_batch_size=sizing.rows, prefill_tokens=s.prefill_tokens,
        max_queue=s.max_queue or max(DEFAULT_QUEUE, sizing.rows, s.frontends * s.max_batch_texts), sizing=sizing,
        gpu_memory_fraction=fraction if device.type == "cuda" else None, metrics=metrics, compile=s.compile,
        threads=threads, waiting_served_ratio=s.waiting_served_ratio, max_waiting_steps=s.max_waiting_steps,
        screen_logits=s.screen_logits, compile_cache_dir=s.compile_cache_dir, compile_mode=s.compile_mode,
        compile_jobs=s.compile_jobs,
        quantize=s.quantize, calibration=calibration, **limits(s),
    )  # fmt: skip


def front_engine(s: Settings, core: RemoteCore, model_dir: Path, name: str, metrics: Metrics) -> Engine:
    """A front-end's engine for a model the engine process serves through `core`: its tokenizer, metadata and
    calibration read from `model_dir` (not its weights), its limits from the settings, as `load_engine`'s (a request's
    share of the queue is of the engine's whole queue, as in one process). The core's `max_queue` is this front-end's
    share of the engine's queue, never less than one request's most sequences."""
    engine = Engine(
        core, load_tokenizer(model_dir), name=name, metadata=read_metadata(model_dir),
        calibration=Calibration.load(model_dir), metrics=metrics.engine(name), **limits(s),
    )  # fmt: skip
    core.least_share = engine.max_request_sequences
    return engine


def limits(s: Settings) -> dict[str, Any]:
    """The Engine's own limits, from the settings."""
    return {
        "max_input_tokens": s.max_input_tokens, "max_new_tokens": s.max_new_tokens,
        "max_batch_texts": s.max_batch_texts, "max_request_chars": s.max_request_chars,
        "max_request_sequences": s.max_request_sequences, "request_timeout_s": s.request_timeout_s,
        "min_confidence": s.min_confidence,
    }  # fmt: skip
