"""How many rows the engine decodes together: NMT_MAX_BATCH_SIZE when set, else 32 on a CPU, and on a GPU as many as
NMT_GPU_MEMORY_FRACTION of its memory holds after the weights (as vLLM's gpu_memory_utilization sizes its cache).

A row costs its KV cache (its own keys and values for every position, and its source's for every token, in the
model's dtype) and what a decoder step computes for it (float32 logits, the attention over the whole window); the
prefill and the libraries' workspaces are held back from the budget first."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.transformer import TransformerConfig

CPU_ROWS = 32  # a CPU's step time grows with the rows from a few on: more only adds latency
MAX_GPU_ROWS = 1024  # a GPU's step time is flat up to hundreds of rows; beyond this, the queue is the limit
LIBRARY_RESERVE = 512 << 20  # cuBLAS and cuDNN workspaces, the CUDA graphs' outputs, allocator slack


def row_bytes(c: TransformerConfig, max_len: int, max_src_len: int, itemsize: int) -> int:
    """Device memory one decoder row takes: its KV cache (KVCache's buffers) and the step's work for it."""
    kv = 2 * c.n_decoder_layers * c.d_model * (max_len + 1 + max_src_len + 1) * itemsize  # keys and values
    mask = max_src_len + 1  # src_keep
    window = max(max_len, max_src_len) + 1
    step = 3 * c.tgt_vocab_size * 4 + 3 * c.n_heads * window * 4 + (8 * c.d_model + 2 * c.d_ff) * 4
    return kv + mask + step


def prefill_bytes(c: TransformerConfig, prefill_tokens: int, max_src_len: int) -> int:
    """The most an admission's encoder pass holds at once: prefill_tokens source tokens padded up to 4x, in float32
    activations, and their cross-attention keys and values."""
    tokens = 4 * max(prefill_tokens, max_src_len)
    return tokens * ((c.d_ff + 8 * c.d_model) * 4 + 2 * c.n_decoder_layers * c.d_model * 4)


@dataclass(frozen=True)
class Sizing:
    rows: int
    how: str  # "setting", "cpu" or "gpu memory"
    budget: int | None = None  # bytes the rows could take (GPU)


def gpu_rows(
    c: TransformerConfig, max_len: int, max_src_len: int, itemsize: int, free: int, total: int, fraction: float,
    prefill_tokens: int,
) -> Sizing:  # fmt: skip
    """Rows that fit `fraction` of a GPU's `total` memory, of which `free` is free now (the weights loaded)."""
    used = total - free
    budget = int(fraction * total) - used - prefill_bytes(c, prefill_tokens, max_src_len) - LIBRARY_RESERVE
    per_row = row_bytes(c, max_len, max_src_len, itemsize)
    if budget < per_row:
        raise ValueError(
            f"NMT_GPU_MEMORY_FRACTION={fraction} of the GPU's {total / 2**30:.1f} GiB leaves no room for one decoder row "
            f"({per_row / 2**20:.1f} MiB) beside the {used / 2**30:.1f} GiB in use: raise it, or lower "
            "NMT_MAX_NEW_TOKENS / NMT_MAX_INPUT_TOKENS"
        )
    return Sizing(min(MAX_GPU_ROWS, budget // per_row), "gpu memory", budget)


def decoder_rows(
    c: TransformerConfig, device: torch.device, dtype: torch.dtype, max_len: int, max_src_len: int,
    setting: int | None, fraction: float, prefill_tokens: int, shared: bool = False,
) -> Sizing:  # fmt: skip
    """The KV cache's rows for a model loaded on `device`: the setting when given, else CPU_ROWS or gpu_rows.
    `shared`: one of several server processes on the GPU (NMT_WORKERS), each sizing its cache from its own share of
    the memory (`fraction`) at the same time, so only this process's own allocations count as in use: what the GPU
    reports in use would hold the other workers' caches, or not yet, depending on who loaded first."""
    if setting is not None:
        return Sizing(setting, "setting")
    if device.type != "cuda":
        return Sizing(CPU_ROWS, "cpu")
    free, total = torch.cuda.mem_get_info(device)
    if shared:
        free = total - torch.cuda.memory_reserved(device)
    return gpu_rows(c, max_len, max_src_len, dtype.itemsize, free, total, fraction, prefill_tokens)
