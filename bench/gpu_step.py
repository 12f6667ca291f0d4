"""The greedy decoder step's time on the GPU with and without CUDA graphs, at every row bucket the graphs have.

    python bench/gpu_step.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--models checkpoint,opus-shape]
        [--dtypes fp32,fp16] [--max-batch 512]

For each model (the bundled checkpoint, and a random model of OPUS-MT's shape: d_model 512, 6 + 6 layers, 8 heads,
FFN 2048, a vocabulary of 58,101, as nmt-import makes of a Marian model) and dtype: one KVCache for --max-batch rows,
its greedy step captured as CUDA graphs (model/cuda_graphs.py) for rows 1, 2, 4, ... --max-batch. At each bucket of n
rows, n sources of real lengths (--src's first sentences by the bundled tokenizer; the OPUS shape gets random ids of
the same lengths) are prefilled with KVCache.add and --past steps taken; then the step the decoding loop calls
(model.decode_greedy: KVCache.step) runs --steps times in a row, --repeats times, eager and graphed, each run between
two torch.cuda.synchronize() calls. The median per step is reported, with its range. float32 runs without TF32.
Prints a table and one JSON line: {"device", "gpu", "driver", "torch", "cuda", "results": [{model, dtype, rows, ...}]}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, pad_batch
from bench.peers import exact_float32, gpu_description, torch_dtype
from model.checkpoint import load_checkpoint
from model.decoding import KVCache
from model.tokenizer import load_tokenizer, read_lines
from model.transformer import Transformer

FALLBACK_LENGTHS = [9, 12, 14, 15, 16, 17, 18, 20, 23, 28]  # source tokens, when no --src is given
# OPUS-MT's en-de as nmt-import reads its config.json (model/importers/marian.py)
OPUS_SHAPE = {
    "model_type": "marian", "vocab_size": 58101, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6,
    "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048,
    "activation_function": "swish", "max_position_embeddings": 512, "scale_embedding": True, "pad_token_id": 58100,
    "eos_token_id": 0, "decoder_start_token_id": 58100, "forced_eos_token_id": 0, "bad_words_ids": [[58100]],
    "share_encoder_decoder_embeddings": True,
}  # fmt: skip


def buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to max_batch, and max_batch itself: the row counts the graphs are captured for."""
    out = [1]
    while out[-1] * 2 < max_batch:
        out.append(out[-1] * 2)
    return out + [max_batch] if max_batch > 1 else out


def opus_shape_model(seed: int = 0) -> Transformer:
    """A model of OPUS-MT's shape with random weights (the step's time does not depend on their values)."""
    from model.importers.marian import model_config

    config = model_config(OPUS_SHAPE)
    config.logits_bias = True  # OPUS-MT models have a final_logits_bias
    torch.manual_seed(seed)
    return Transformer(config).eval()


def sources_for(model: Transformer, lengths: list[int], real: list[list[int]] | None, rows: int) -> list[list[int]]:
    """`rows` source id lists, each ending in </s>: the real ones where given, else random ids of those lengths."""
    c = model.config
    if real is not None:
        return [real[i % len(real)] for i in range(rows)]
    g = torch.Generator().manual_seed(rows)
    special = {c.source_pad_id, c.eos_id, c.bos_id, c.unk_id}
    out = []
    for i in range(rows):
        ids = torch.randint(0, c.src_vocab_size, (lengths[i % len(lengths)] - 1,), generator=g).tolist()
        out.append([t if t not in special else c.unk_id + 1 for t in ids] + [c.eos_id])
    return out


def time_steps(
    model: Transformer, cache: KVCache, src: torch.Tensor, past: int, steps: int, repeats: int,
    sync: Callable[[], None] = lambda: None,
) -> list[float]:  # fmt: skip
    """Seconds per greedy step for each of `repeats` runs of `steps` steps in a row, after prefilling src (N, S)
    into the empty cache and taking `past` steps; the cache is empty again after."""
    c = model.config
    cache.add(model, src)
    try:
        tokens = torch.full((src.size(0),), c.bos_id, dtype=torch.long, device=src.device)
        for _ in range(past):
            tokens, _ = model.decode_greedy(tokens, cache)
        times = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                tokens, _ = model.decode_greedy(tokens, cache)
            sync()
            times.append((time.perf_counter() - t0) / steps)
        return times
    finally:
        cache.remove(range(cache.n))


def row(model: str, dtype: str, rows: int, eager: list[float], graphs: list[float]) -> dict:
    """One bucket's figures: the median milliseconds per step (and range) of each, and eager / graphed."""
    e, g = statistics.median(eager), statistics.median(graphs)
    return {
        "model": model, "dtype": dtype, "rows": rows, "eager_ms": round(1000 * e, 4), "graphs_ms": round(1000 * g, 4),
        "eager_range_ms": [round(1000 * min(eager), 4), round(1000 * max(eager), 4)],
        "graphs_range_ms": [round(1000 * min(graphs), 4), round(1000 * max(graphs), 4)],
        "speedup": round(e / g, 2),
    }  # fmt: skip


def measure(name: str, model: Transformer, dtype_name: str, real, lengths, args) -> list[dict]:
    """Every bucket of one model in one dtype, eager and graphed."""
    from model.compile import adopt, uncompile
    from model.cuda_graphs import capture_model

    dtype = torch_dtype(dtype_name)
    if dtype == torch.float32:
        exact_float32()
    model = model.to(device="cuda", dtype=dtype)
    sizes = buckets(args.max_batch)
    all_sources = sources_for(model, lengths, real, args.max_batch)
    longest = max(map(len, all_sources))
    max_len = min(max(args.max_len, args.past + args.steps * args.repeats + 2), model.config.max_positions)
    cache = KVCache(model, args.max_batch, max_len, longest)
    compiled = capture_model(
        model, cache, log=lambda m: print(f"{name} {dtype_name}: {m}", file=sys.stderr, flush=True)
    )
    out = []
    for n in sizes:
        src = pad_batch(all_sources[:n], model.config.source_pad_id).cuda()
        figures = {}
        for mode in ("eager", "graphs"):
            if mode == "eager":
                uncompile(model)
            else:
                adopt(model, compiled)
            figures[mode] = time_steps(model, cache, src, args.past, args.steps, args.repeats, torch.cuda.synchronize)
        out.append(row(name, dtype_name, n, figures["eager"], figures["graphs"]))
        r = out[-1]
        print(f"  {name:<16} {dtype_name:<5} {n:>5} rows {r['eager_ms']:>9.3f} ms {r['graphs_ms']:>9.3f} ms "
              f"{r['speedup']:>6.2f}x", flush=True)  # fmt: skip
    uncompile(model)
    del cache, compiled
    torch.cuda.empty_cache()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL), help="the checkpoint (and the tokenizer for --src)")
    p.add_argument("--src", help="sentences whose token counts the sources take (default: a fixed set of lengths)")
    p.add_argument("--models", default="checkpoint,opus-shape", help="comma-separated: checkpoint, opus-shape")
    p.add_argument("--dtypes", default="fp32,fp16", help="comma-separated: fp32, fp16, bf16")
    p.add_argument("--max-batch", type=int, default=512, help="the cache's rows: buckets 1, 2, 4, ... up to it")
    p.add_argument("--max-len", type=int, default=128, help="the cache's positions (at least what the steps take)")
    # the defaults time positions 4 to 27, all in the graphs' shortest key window (32), as most of a sentence is
    p.add_argument("--past", type=int, default=4, help="steps taken before timing (also the warm-up)")
    p.add_argument("--steps", type=int, default=1, help="steps in a row per timed run (1: a sync after each, as the "
                   "decoding loop has)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=24, help="timed runs per bucket and mode")
    args = p.parse_args()
    models, dtypes = args.models.split(","), args.dtypes.split(",")
    if unknown := [m for m in models if m not in ("checkpoint", "opus-shape")]:
        p.error(f"unknown models {unknown}: choose from checkpoint, opus-shape")
    if unknown := [d for d in dtypes if d not in ("fp32", "fp16", "bf16")]:
        p.error(f"unknown dtypes {unknown}: choose from fp32, fp16, bf16")
    if args.max_batch < 1 or min(args.past, args.steps, args.repeats) < 1:
        p.error("--max-batch, --past, --steps and --repeats must be at least 1")
    if not torch.cuda.is_available():
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a build without CUDA"
        p.error(f"no CUDA device: PyTorch finds none here (torch {torch.__version__}, {built}); CUDA graphs need an "
                "NVIDIA GPU")  # fmt: skip

    gpu = gpu_description()
    print(f"GPU: {gpu['gpu']}, driver {gpu['driver']}; torch {gpu['torch']}, CUDA {gpu['cuda']}, cuDNN {gpu['cudnn']}")
    real = None
    if args.src:
        lines = list(read_lines(args.src))[: args.max_batch]
        real = load_tokenizer(args.model_dir).encode_batch(lines)
        lengths = list(map(len, real))
        print(f"sources: the first {len(lines)} sentences of {args.src} (the OPUS shape: random ids of their lengths)")
    else:
        lengths = FALLBACK_LENGTHS
        print(f"sources: random ids of {FALLBACK_LENGTHS} tokens, in turn")
    print(f"{'model':<16} {'dtype':<5} {'rows':>5}      {'eager':>9}    {'graphs':>9}   eager/graphs "
          f"(median ms per step of {args.repeats} runs of {args.steps} steps)", flush=True)  # fmt: skip
    results = []
    for name in models:
        for dtype in dtypes:
            if name == "checkpoint":
                model, _, meta = load_checkpoint(args.model_dir)
                label = meta.get("name", Path(args.model_dir).name)
                results += measure(label, model, dtype, real, lengths, args)
            else:
                results += measure("opus-shape", opus_shape_model(), dtype, None, lengths, args)
    print(json.dumps({"device": "cuda", **gpu, "results": results}))


if __name__ == "__main__":
    main()
