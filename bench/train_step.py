"""One nmt-train update in float32 and under --bf16 (bfloat16 autocast), taking turns: what --bf16 buys on this CPU.

    python bench/train_step.py [--rounds 3] [--steps 5] [--rows 100 --length 30]
        [--d-model 256 --heads 4 --encoder-layers 4 --decoder-layers 3 --d-ff 1024 --vocab-size 6000]

An update is what nmt-train runs for a batch: forward with dropout, label-smoothed cross-entropy, backward, gradient
clipping and an AdamW step, on random token ids of --rows x --length a side (100 x 30: about 6,000 source and target
tokens, nmt-train's default --batch-tokens). The shape defaults to the bundled English-German model's. Each round
times --steps updates in float32, then --steps with bfloat16 autocast (the order alternating by round), after two
warm-up updates each; the median of the per-round ratios is printed with its range, the CPU beside it, then one JSON
line. A CPU without bfloat16 matmuls (AVX-512 BF16 or AMX) runs bfloat16 slower than float32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import cpu_description
from model.transformer import Transformer, TransformerConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--rounds", type=int, default=3)
    a("--steps", type=int, default=5, help="updates timed per round and precision")
    a("--rows", type=int, default=100)
    a("--length", type=int, default=30, help="tokens a side and row")
    a("--vocab-size", type=int, default=6000)
    a("--d-model", type=int, default=256)
    a("--heads", type=int, default=4)
    a("--encoder-layers", type=int, default=4)
    a("--decoder-layers", type=int, default=3)
    a("--d-ff", type=int, default=1024)
    a("--threads", type=int, default=2)
    args = p.parse_args()
    if args.rounds < 1 or args.steps < 1:
        p.error("--rounds and --steps must be at least 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=args.vocab_size, tgt_vocab_size=args.vocab_size, d_model=args.d_model, n_heads=args.heads,
        n_encoder_layers=args.encoder_layers, n_decoder_layers=args.decoder_layers, d_ff=args.d_ff, dropout=0.3,
        attention_dropout=0.1, activation_dropout=0.1,
    )  # fmt: skip
    model = Transformer(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    src, tgt_in, tgt_out = torch.randint(4, args.vocab_size, (3, args.rows, args.length)).unbind(0)

    def update(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for bf16 in (False, True):
        update(bf16)
        update(bf16)
    seconds: dict[str, list[float]] = {"float32": [], "bf16": []}
    for r in range(args.rounds):
        for bf16 in (False, True) if r % 2 == 0 else (True, False):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                update(bf16)
            seconds["bf16" if bf16 else "float32"].append((time.perf_counter() - t0) / args.steps)
    per_round = [f / b for f, b in zip(seconds["float32"], seconds["bf16"])]
    ratio = {"median": round(statistics.median(per_round), 2), "min": round(min(per_round), 2),
             "max": round(max(per_round), 2)}  # fmt: skip
    tokens = 2 * args.rows * args.length
    best = {k: min(v) for k, v in seconds.items()}
    print(f"CPU: {cpu_description()}; {args.threads} threads; {sum(x.numel() for x in model.parameters()) / 1e6:.2f} M "
          f"parameters; batch {args.rows} x {args.length} a side")  # fmt: skip
    print(" | ".join(f"{k} {1000 * s:.0f} ms an update ({tokens / s:.0f} tokens/s)" for k, s in best.items())
          + f" | bf16 speed-up {ratio['median']}x (rounds {ratio['min']}-{ratio['max']})")  # fmt: skip
    print(json.dumps({"cpu": cpu_description(), "threads": args.threads, "rows": args.rows, "length": args.length,
                      "seconds_per_update": {k: [round(x, 4) for x in v] for k, v in seconds.items()},
                      "bf16_speedup": ratio}))  # fmt: skip


if __name__ == "__main__":
    main()
