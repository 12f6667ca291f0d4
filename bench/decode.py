"""Cached vs recompute greedy decoding, side by side in one run, at batch 1 and batch 32.

    python bench/decode.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 200]

Prints tokens/s and sentences/s of each and the cached/recompute ratio, and checks that both produce
the same tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model.checkpoint import load_checkpoint  # noqa: E402
from model.decoding import greedy_decode, greedy_decode_reference  # noqa: E402
from model.evaluate import max_new_tokens_for  # noqa: E402
from model.tokenizer import read_lines  # noqa: E402

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"


def run(decode, model, batches) -> tuple[float, int, list[list[int]]]:
    out, tokens = [], 0
    t0 = time.perf_counter()
    for src in batches:
        hyps = decode(model, src, max_new_tokens_for(src.size(1)))
        out += [h.tokens for h in hyps]
        tokens += sum(len(h.logprobs) for h in hyps)  # generated tokens, </s> included
    return time.perf_counter() - t0, tokens, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--src", required=True)
    p.add_argument("--limit", type=int, default=0, help="first N sentences only (0 = all)")
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, _ = load_checkpoint(args.model_dir)
    sentences = list(read_lines(args.src))
    sentences = sentences[: args.limit] if args.limit else sentences
    encoded = sorted(tok.encode_batch(sentences), key=len)  # length-sorted, as a server batches
    results = []
    for bs in map(int, args.batch_sizes.split(",")):
        batches = []
        for i in range(0, len(encoded), bs):
            chunk = encoded[i : i + bs]
            src = torch.full((len(chunk), max(map(len, chunk))), tok.pad_id, dtype=torch.long)
            for r, ids in enumerate(chunk):
                src[r, : len(ids)] = torch.tensor(ids)
            batches.append(src)
        run(greedy_decode, model, batches[:2])  # warm-up
        t_c, n_c, out_c = run(greedy_decode, model, batches)
        t_r, n_r, out_r = run(greedy_decode_reference, model, batches)
        same = sum(a == b for a, b in zip(out_c, out_r)) / len(out_c)
        row = {
            "batch": bs,
            "sentences": len(sentences),
            "cached_tok_s": round(n_c / t_c, 1),
            "recompute_tok_s": round(n_r / t_r, 1),
            "cached_sent_s": round(len(sentences) / t_c, 1),
            "recompute_sent_s": round(len(sentences) / t_r, 1),
            "speedup": round((n_c / t_c) / (n_r / t_r), 2),
            "same_output": round(same, 4),
        }
        results.append(row)
        print(
            f"batch {bs:>3}: cached {row['cached_tok_s']:>8} tok/s ({row['cached_sent_s']} sent/s) | "
            f"recompute {row['recompute_tok_s']:>8} tok/s ({row['recompute_sent_s']} sent/s) | "
            f"cached/recompute = {row['speedup']}x | identical outputs {same:.1%}",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
