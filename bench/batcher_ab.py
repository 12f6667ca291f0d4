"""Greedy continuous batching before and after a change: the in-process scheduler of two source trees, in turns.

    git worktree add /tmp/before <commit>
    python bench/batcher_ab.py --src ../shared/data/multi30k/test_2016_flickr.en.gz --before /tmp/before [--rounds 3]

Each round runs, in a child process per tree (this tree and --before), the scheduler (app/engine/scheduler.py's
Batcher, or app/batcher.py's in trees from before the engine package) on the bundled model, eager, 2 threads:
320 sentences submitted at once with at most 32 in flight, then 80 one at a time. Prints the CPU, each pass's
wall seconds per sentence, and the median over rounds of after / before for each concurrency; checks that both
trees produce the same tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import cpu_description

CHILD = r"""
import asyncio, json, sys, time
import torch
sys.path.insert(0, ".")
from model.checkpoint import load_checkpoint
from model.decoding import max_new_tokens_for
from model.tokenizer import read_lines
try:
    from app.engine.scheduler import Batcher
except ImportError:
    from app.batcher import Batcher
torch.set_num_threads(1)
model, tokenizer, _ = load_checkpoint(sys.argv[1])
src = tokenizer.encode_batch(list(read_lines(sys.argv[2]))[:320], side="source")

async def run(concurrency, sentences):
    batcher = Batcher(model, 32, 256, 256, 2048, threads=2)
    batcher.start()
    gate = asyncio.Semaphore(concurrency)
    async def one(s):
        async with gate:
            return (await batcher.generate([s], [max_new_tokens_for(len(s))]))[0].tokens
    await one(sentences[0])
    t0 = time.perf_counter()
    out = await asyncio.gather(*(one(s) for s in sentences))
    seconds = time.perf_counter() - t0
    batcher.stop()
    return seconds / len(sentences), out

result = {}
for concurrency, sentences in ((32, src), (1, src[:80])):
    per, out = asyncio.run(run(concurrency, sentences))
    result[concurrency] = {"s_per_sentence": per, "tokens": out}
print(json.dumps(result))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--before", required=True, help="a checkout of the commit to compare with (git worktree add)")
    p.add_argument("--model-dir", default=str(ROOT / "checkpoints" / "multi30k-en-de"))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(cpu_description())
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    passes: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            run = subprocess.run(
                [sys.executable, "-c", CHILD, str(Path(args.model_dir).resolve()), str(Path(args.src).resolve())],
                cwd=trees[name], capture_output=True, text=True, check=True,
            )  # fmt: skip
            passes[name].append(json.loads(run.stdout))
            figures = {c: round(v["s_per_sentence"] * 1000, 3) for c, v in passes[name][-1].items()}
            print(f"round {r + 1} {name:6s} ms per sentence at concurrency 32 / 1: {figures['32']} / {figures['1']}")
    same = all(a[c]["tokens"] == b[c]["tokens"] for a, b in zip(passes["before"], passes["after"]) for c in ("32", "1"))
    ratios = {
        c: statistics.median(a[c]["s_per_sentence"] / b[c]["s_per_sentence"] for a, b in zip(passes["after"], passes["before"]))
        for c in ("32", "1")
    }  # fmt: skip
    print(f"after / before time per sentence (median of rounds): concurrency 32 {ratios['32']:.3f}, "
          f"concurrency 1 {ratios['1']:.3f}; same tokens: {same}")  # fmt: skip
    print(json.dumps({"cpu": cpu_description(), "after_over_before": ratios, "same_tokens": same}))


if __name__ == "__main__":
    main()
