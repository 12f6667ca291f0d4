"""Beam search's cross-attention keys/values: one copy per beam row (duplicated) or one per source (shared)?

    python bench/beam_cross.py [--model-dir checkpoints/multi30k-en-de] [--beam 4] [--groups 1,32]
                               [--src-len 16] [--tgt-len 20] [--rounds 400,150] [--threads 2] [--clock wall|cpu]

The server gives a beam request `beam` rows of the KV cache and copies the source's cross-attention keys/values
into each of them at admission (KVCache.duplicate), so that the decoder step runs unchanged over per-row cross
K/V. This measures, side by side in one run, the eager float32 decoder step (inference_mode) of the bundled model
for G sources of `beam` rows each (N = G * beam rows), source window `--src-len`, self-attention window
`--tgt-len`, under three layouts of the cross K/V:

  (a) duplicated: cross K/V laid out per row (2, L, N, H, S, Dh), as the server does; times `model.step`.
  (b) gathered:   one cross K/V per source (2, L, G, H, S, Dh), indexed to per row (`cross_kv[:, :, row_to_source]`,
                  a gather that copies) at every step before the same `model.step`.
  (c) grouped:    one cross K/V per source, and a step (grouped_step, below) whose cross-attention takes a source's
                  `beam` rows as `beam` queries against its one K/V: q (G, k, H, 1, Dh) -> (G, H, k, Dh) against
                  keys (G, H, S, Dh). Otherwise the very math of DecoderLayer.step, with the model's own weights;
                  its output is checked against (a)'s (within 1e-5) before anything is timed.

The inputs are laid out as KVCache lays them (views of buffers one row and one slot larger than what is used).
Each round times one step of each variant, in a rotating order; the figure per variant is the median of its step
times, and the comparison the median (with quartiles) over rounds of each round's ratio to (a). Single steps and
medians, because on a shared machine a neighbour taking a core for a moment multiplies one step's time.
It also prints the bytes each variant's cross K/V take (for the S window) and the one-off cost of duplicating at
admission (KVCache.duplicate after an add, and the equivalent index copy alone) in steps of (a).

Prints the CPU, torch version and threads, a table, then one JSON line with every figure. On a machine other
processes keep busy, 2-thread wall times are mostly waiting (each parallel region waits for the thread a neighbour
displaced); `--threads 1 --clock cpu` then times the work itself, in CPU seconds of the one thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, cpu_description
from model.checkpoint import load_checkpoint
from model.layers import DecoderLayer
from model.transformer import Transformer

VARIANTS = ("duplicated", "gathered", "grouped")


def grouped_layer_step(layer: DecoderLayer, x, past_k, past_v, past_keep, cross_k, cross_v, cross_mask, beam: int):
    """DecoderLayer.step with the cross-attention grouped by source. x (N, 1, D) with rows g*beam + j belonging to
    source g; past_k/v (N, H, T, Dh), past_keep (N, 1, 1, T); cross_k/v (G, H, S, Dh), cross_mask (G, 1, 1, S)
    -> x (N, 1, D), this token's k and v (N, H, Dh)"""
    q, k, v = layer.self_attn.project_qkv(layer.sub_self.pre(x))  # (N, H, 1, Dh)
    x = layer.sub_self.post(x, layer.self_attn.attend_cached(q, k, v, past_k, past_v, past_keep))
    attn = layer.cross_attn
    N, D = x.size(0), x.size(2)
    G = N // beam
    q = attn.q_proj(layer.sub_cross.pre(x)).view(G, beam, attn.n_heads, attn.head_dim).transpose(1, 2)  # (G, H, k, Dh)
    y, _ = attn.attend(q, cross_k, cross_v, cross_mask, fused=False)  # (G, k, D)
    x = layer.sub_cross.post(x, y.reshape(N, 1, D))
    return layer.sub_ffn.post(x, layer.ffn(layer.sub_ffn.pre(x))), k[:, :, 0], v[:, :, 0]


def grouped_step(model: Transformer, tokens, positions, past_kv, cross_kv, src_keep, beam: int):
    """Transformer.step with one cross K/V per source: cross_kv (2, L, G, H, S, Dh), src_keep (G, S); the other
    arguments per row (N = G * beam), as `step` takes them -> logits (N, V), kv (2, L, N, H, Dh)"""
    x = model.tgt_embed(tokens[:, None], positions[:, None])  # (N, 1, D)
    past_keep = (torch.arange(past_kv.size(4), device=tokens.device)[None, :] < positions[:, None])[:, None, None]
    cross_mask = src_keep[:, None, None, :]  # (G, 1, 1, S)
    ks, vs = [], []
    for i, layer in enumerate(model.decoder_layers):
        x, k, v = grouped_layer_step(
            layer, x, past_kv[0, i], past_kv[1, i], past_keep, cross_kv[0, i], cross_kv[1, i], cross_mask, beam
        )
        ks.append(k)
        vs.append(v)
    return model.generator(model.decoder_norm(x[:, 0])), torch.stack([torch.stack(ks), torch.stack(vs)])


def make_inputs(model: Transformer, groups: int, beam: int, src_len: int, tgt_len: int, seed: int = 0) -> dict:
    """Sources of G sentences (lengths src_len - 4 .. src_len, padded at the end), encoded by the model, and a
    decoder state at position tgt_len, as KVCache would hold it: views of buffers a row and a slot larger."""
    c = model.config
    g = torch.Generator().manual_seed(seed)
    L, H, Dh, N = c.n_decoder_layers, c.n_heads, c.head_dim, groups * beam
    lengths = torch.randint(max(1, src_len - 4), src_len + 1, (groups,), generator=g)
    lengths[0] = src_len
    src = torch.randint(4, c.src_vocab_size, (groups, src_len), generator=g)
    src[torch.arange(src_len)[None, :] >= lengths[:, None]] = c.source_pad_id
    keep = src != c.source_pad_id  # (G, S)
    shared = model.prefill(src)  # (2, L, G, H, S, Dh)
    row_to_source = torch.arange(N) // beam  # rows g*beam .. g*beam + beam - 1 belong to source g

    def cache_view(rows: int, length: int, fill: torch.Tensor | None = None) -> torch.Tensor:
        buf = torch.zeros(2, L, rows + 1, H, length + 1, Dh)
        if fill is not None:
            buf[:, :, :rows, :, :length] = fill
        return buf[:, :, :rows, :, :length]

    keep_buf = torch.zeros(N + 1, src_len + 1, dtype=torch.bool)
    keep_buf[:N, :src_len] = keep[row_to_source]
    shared_keep_buf = torch.zeros(groups + 1, src_len + 1, dtype=torch.bool)
    shared_keep_buf[:groups, :src_len] = keep
    return {
        "tokens": torch.randint(4, c.tgt_vocab_size, (N,), generator=g),
        "positions": torch.full((N,), tgt_len, dtype=torch.long),
        "past_kv": cache_view(N, tgt_len, torch.randn(2, L, N, H, tgt_len, Dh, generator=g)),
        "dup_kv": cache_view(N, src_len, shared[:, :, row_to_source]),
        "dup_keep": keep_buf[:N, :src_len],
        "shared_kv": cache_view(groups, src_len, shared),
        "shared_keep": shared_keep_buf[:groups, :src_len],
        "row_to_source": row_to_source,
        "src": src,
        "beam": beam,
    }


def step_fns(model: Transformer, x: dict) -> dict:
    """One decoder step under each variant, as argument-free callables -> (logits, kv)."""
    t, p, past = x["tokens"], x["positions"], x["past_kv"]
    idx, beam = x["row_to_source"], x["beam"]
    return {
        "duplicated": lambda: logits_kv(model.step(t, p, past, x["dup_kv"], x["dup_keep"])),
        "gathered": lambda: logits_kv(model.step(t, p, past, x["shared_kv"][:, :, idx], x["shared_keep"][idx])),
        "grouped": lambda: grouped_step(model, t, p, past, x["shared_kv"], x["shared_keep"], beam),
    }


def logits_kv(out: tuple) -> tuple:
    """`Transformer.step`'s logits and kv (its attention facts left out: the grouped step computes none)."""
    return out[0], out[-1]


def check(fns: dict, atol: float = 1e-5) -> dict:
    """The largest difference of each variant's logits and kv from the duplicated step's; raises past atol."""
    ref_logits, ref_kv = fns["duplicated"]()
    diffs = {}
    for name in VARIANTS[1:]:
        logits, kv = fns[name]()
        diffs[name] = max((logits - ref_logits).abs().max().item(), (kv - ref_kv).abs().max().item())
        if diffs[name] > atol:
            raise AssertionError(f"{name} differs from duplicated by {diffs[name]:.3g} > {atol}")
    return diffs


CLOCK = time.perf_counter  # main() sets time.thread_time for --clock cpu


def call_times(fn, calls: int) -> list[float]:
    """Seconds of each of `calls` calls: medians of single calls shrug off the moments a neighbour takes a core."""
    out = []
    for _ in range(calls):
        t0 = CLOCK()
        fn()
        out.append(CLOCK() - t0)
    return out


def quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], q[2]


def measure_steps(fns: dict, rounds: int) -> dict:
    """Interleaved rounds, one step of each variant per round in a rotating order: the median seconds per step
    of each variant, and the median (and quartiles) over rounds of each variant's ratio to duplicated."""
    for fn in fns.values():  # warm-up
        call_times(fn, 5)
    per = {name: [] for name in VARIANTS}
    for r in range(rounds):
        for name in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
            per[name] += call_times(fns[name], 1)
    out = {name: statistics.median(v) for name, v in per.items()}
    for name in VARIANTS[1:]:
        ratios = [a / d for a, d in zip(per[name], per["duplicated"])]
        out[f"{name}_ratio"] = statistics.median(ratios)
        out[f"{name}_ratio_quartiles"] = quartiles(ratios)
    return out


def duplicate_cost(model: Transformer, x: dict, calls: int) -> dict:
    """Seconds of the one-off copy at admission: KVCache.duplicate of G prefilled rows into (beam - 1) * G new
    ones (then removed again), and the same copy as one index assignment into a per-row buffer: medians."""
    groups, beam, src_len = x["shared_kv"].size(2), x["beam"], x["shared_kv"].size(4)
    out = {}
    try:
        from model.decoding import KVCache

        cache = KVCache(model, max_batch=groups * beam, max_len=64, max_src_len=src_len)
        cache.add(model, x["src"])
        rows = list(range(groups)) * (beam - 1)

        def dup() -> None:
            new = cache.duplicate(rows)
            cache.remove(list(new))

        call_times(dup, 3)
        out["kvcache_duplicate_s"] = statistics.median(call_times(dup, calls))
    except Exception as e:  # model/decoding.py is shared with other work: report, do not fail the bench
        out["kvcache_duplicate_error"] = f"{type(e).__name__}: {e}"
    two, L, N, H, S, Dh = x["dup_kv"].shape
    dst = torch.zeros(two, L, N + 1, H, S + 1, Dh)[:, :, :N, :, :S]  # a per-row buffer, as KVCache's
    src, idx = x["shared_kv"], x["row_to_source"]

    def copy() -> None:
        dst[:] = src[:, :, idx]

    call_times(copy, 3)
    out["index_copy_s"] = statistics.median(call_times(copy, calls))
    return out


def cross_bytes(x: dict) -> dict:
    """Bytes of cross K/V over the S window: stored per row (duplicated), per source (shared), and the per-row
    copy the gathered variant makes afresh at every step."""
    dup, shared = x["dup_kv"], x["shared_kv"]
    per = dup.element_size()
    return {
        "duplicated_bytes": dup.numel() * per,
        "shared_bytes": shared.numel() * per,
        "gathered_transient_bytes": dup.numel() * per,
    }


@torch.inference_mode()
def run(model: Transformer, groups: int, beam: int, src_len: int, tgt_len: int, rounds: int) -> dict:
    """Every figure for one G: step times, ratios, the check, memory and the admission copy."""
    x = make_inputs(model, groups, beam, src_len, tgt_len)
    fns = step_fns(model, x)
    diffs = check(fns)
    steps = measure_steps(fns, rounds)
    dup = duplicate_cost(model, x, max(3, rounds // 4))
    row = {"G": groups, "beam": beam, "rows": groups * beam, "src_len": src_len, "tgt_len": tgt_len}
    for name in VARIANTS:
        row[f"{name}_ms"] = round(steps[name] * 1e3, 4)
    for name in VARIANTS[1:]:
        row[f"{name}_vs_duplicated"] = round(steps[f"{name}_ratio"], 3)
        row[f"{name}_vs_duplicated_quartiles"] = [round(v, 3) for v in steps[f"{name}_ratio_quartiles"]]
        row[f"{name}_max_abs_diff"] = float(f"{diffs[name]:.3g}")
    row.update(cross_bytes(x))
    for key, value in dup.items():
        if key.endswith("_s"):
            row[key[:-2] + "_ms"] = round(value * 1e3, 4)
            row[key[:-2] + "_in_steps"] = round(value / steps["duplicated"], 3)
        else:
            row[key] = value
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--groups", default="1,32", help="sources per step (G), comma-separated")
    p.add_argument("--src-len", type=int, default=16)
    p.add_argument("--tgt-len", type=int, default=20)
    p.add_argument("--rounds", default="400,150", help="rounds (one step of each variant), one per G (or one for all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="cpu: this thread's CPU time instead of wall time (needs --threads 1): what a step costs when other "
        "processes share the cores, as the time they take from it is not counted",
    )  # fmt: skip
    args = p.parse_args()
    if args.clock == "cpu":
        if args.threads != 1:
            p.error("--clock cpu counts the calling thread only: it needs --threads 1")
        global CLOCK
        CLOCK = time.thread_time
    torch.set_num_threads(args.threads)
    model, _, _ = load_checkpoint(args.model_dir)
    model = model.float().eval()
    groups = [int(v) for v in args.groups.split(",")]
    rounds = [int(v) for v in args.rounds.split(",")]
    rounds = (rounds * len(groups))[: len(groups)] if len(rounds) == 1 else rounds
    print(f"CPU: {cpu_description()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock; model {args.model_dir}")
    print(
        f"beam {args.beam}, source window {args.src_len}, target window {args.tgt_len}, eager float32, "
        f"interleaved rounds (one step of each variant): {', '.join(f'G={g}: {r}' for g, r in zip(groups, rounds))}"
    )
    rows = [run(model, g, args.beam, args.src_len, args.tgt_len, r) for g, r in zip(groups, rounds)]
    head = (
        f"{'G':>3} {'rows':>4} | {'dup ms':>8} {'gath ms':>8} {'group ms':>8} | {'gath/dup':>8} {'group/dup':>9} |"
        f" {'cross KiB dup/shared':>20} | {'duplicate() ms':>14} {'= steps':>7} | {'index copy ms':>13}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        dup_ms = r.get("kvcache_duplicate_ms", float("nan"))
        dup_steps = r.get("kvcache_duplicate_in_steps", float("nan"))
        print(
            f"{r['G']:>3} {r['rows']:>4} |"
            f" {r['duplicated_ms']:>8.3f} {r['gathered_ms']:>8.3f} {r['grouped_ms']:>8.3f} |"
            f" {r['gathered_vs_duplicated']:>8.3f} {r['grouped_vs_duplicated']:>9.3f} |"
            f" {r['duplicated_bytes'] / 1024:>9.0f}/{r['shared_bytes'] / 1024:<10.0f} |"
            f" {dup_ms:>14.3f} {dup_steps:>7.3f} | {r['index_copy_ms']:>13.3f}"
        )
    print(
        json.dumps(
            {
                "cpu": cpu_description(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                "clock": args.clock, "results": rows,
            }  # fmt: skip
        )
    )


if __name__ == "__main__":
    main()
