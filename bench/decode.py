"""Cached vs recompute greedy decoding, side by side in one run, at batch 1 and batch 32.

    python bench/decode.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 200]

Prints tokens/s and sentences/s of each and the cached/recompute ratio, and checks that both produce
the same tokens.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import check_corpus, corpus_arguments, load_corpus, pad_batch
from model.decoding import greedy_decode, greedy_decode_reference
from model.evaluate import max_new_tokens_for


def run(decode, model, batches) -> tuple[float, int, list[list[int]]]:
    out, tokens = [], 0
    t0 = time.perf_counter()
    for src in batches:
        hyps = decode(model, src, max_new_tokens_for(src.size(1)))
        out += [h.tokens for h in hyps]
        tokens += sum(len(h.logprobs) for h in hyps)  # generated tokens, </s> included
    return time.perf_counter() - t0, tokens, out


def main(argv: list[str] | None = None) -> None:
    p = corpus_arguments(__doc__)
    args = p.parse_args(argv)
    check_corpus(p, args)
    model, tok, encoded = load_corpus(args)
    results = []
    for bs in map(int, args.batch_sizes.split(",")):
        batches = [pad_batch(encoded[i : i + bs], tok.pad_id) for i in range(0, len(encoded), bs)]
        run(greedy_decode, model, batches[:2])  # warm-up
        t_c, n_c, out_c = run(greedy_decode, model, batches)
        t_r, n_r, out_r = run(greedy_decode_reference, model, batches)
        same = sum(a == b for a, b in zip(out_c, out_r)) / len(out_c)
        row = {
            "batch": bs,
            "sentences": len(encoded),
            "cached_tok_s": round(n_c / t_c, 1),
            "recompute_tok_s": round(n_r / t_r, 1),
            "cached_sent_s": round(len(encoded) / t_c, 1),
            "recompute_sent_s": round(len(encoded) / t_r, 1),
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
