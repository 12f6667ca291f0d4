"""Two models in one server: how to share the CPU's cores between their worker threads.

    python bench/models.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 200] [--rounds 3]

Loads two engines per way of sharing, as a server with NMT_MODELS builds them (each its own KV cache, batch and
worker thread): `shared out` gives each model half the cores (the default), `all cores` gives each every core (two
OpenMP teams on the same cores when both are busy). Each way is timed on two loads, side by side in rounds that take
turns: one model busy (the other idle), and both busy at once, each sent every sentence at --concurrency sentences
in flight. Prints sentences/s for each, per round and as medians, and the ratios that decide the default. The models
are the bundled en->de and en->fr checkpoints (--models), eager (as NMT_COMPILE=off): compiling changes how fast a
step is, not how two workers share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import cpu_description

DEFAULT_MODELS = f"{ROOT / 'checkpoints' / 'multi30k-en-de'},{ROOT / 'checkpoints' / 'multi30k-en-fr'}"


async def engines(dirs: list[str], threads: int):
    from app.loading import load_engine
    from app.settings import Settings

    settings = Settings(compile="off", max_new_tokens=128)
    out = []
    for d in dirs:
        engine = await asyncio.to_thread(load_engine, settings, model_dir=Path(d), threads=threads)
        await engine.start()
        out.append(engine)
    return out


async def rate(busy: list, sentences: list[str], concurrency: int) -> float:
    """Sentences/s of all of `busy` together, each sent every sentence with `concurrency` in flight."""

    async def drive(engine) -> None:
        queue = list(sentences)

        async def worker() -> None:
            while queue:
                await engine.translate(queue.pop())

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    t0 = time.perf_counter()
    await asyncio.gather(*(drive(e) for e in busy))
    return len(sentences) * len(busy) / (time.perf_counter() - t0)


async def main(args: argparse.Namespace) -> None:
    import torch

    cores = torch.get_num_threads()
    with gzip.open(args.src, "rt") if args.src.endswith(".gz") else open(args.src) as f:
        sentences = [line.strip() for line in f][: args.limit]
    dirs = args.models.split(",")
    print(f"CPU: {cpu_description()}; torch {torch.__version__}; {len(sentences)} sentences, concurrency "
          f"{args.concurrency}, models {[Path(d).name for d in dirs]}", flush=True)  # fmt: skip
    ways = {"shared out": await engines(dirs, max(1, cores // 2)), "all cores": await engines(dirs, cores)}
    figures: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for way, (a, b) in ways.items():
            for load, busy in (("one busy", [a]), ("both busy", [a, b])):
                figures.setdefault(f"{way}, {load}", []).append(await rate(busy, sentences, args.concurrency))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items()), flush=True)
    median = {k: statistics.median(v) for k, v in figures.items()}
    print(f"\nsentences/s, median of {args.rounds} rounds (threads: shared out {max(1, cores // 2)} each, all cores "
          f"{cores} each):")  # fmt: skip
    for k, v in median.items():
        print(f"  {k:<24} {v:8.1f}")
    print(
        f"one model busy, shared out / all cores: {median['shared out, one busy'] / median['all cores, one busy']:.2f}x"
    )
    print(
        f"both busy, shared out / all cores:      {median['shared out, both busy'] / median['all cores, both busy']:.2f}x"
    )
    for engines_ in ways.values():
        for e in engines_:
            e.stop()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--models", default=DEFAULT_MODELS, help="two checkpoint directories, comma-separated")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
