"""Two models in one server: how to share the CPU's cores between their worker threads, and whether their compiled
graphs let go of Python's lock (GIL) while they run.

    python bench/models.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 200] [--rounds 3]
    python bench/models.py --gil --src ../shared/data/multi30k/test_2016_flickr.en.gz [--compile-cache-dir DIR]

Loads two engines per way of sharing, as a server with NMT_MODELS builds them (each its own KV cache, batch and
worker thread): `shared out` gives each model half the cores (the default), `all cores` gives each every core (two
OpenMP teams on the same cores when both are busy). Each way is timed on two loads, side by side in rounds that take
turns: one model busy (the other idle), and both busy at once, each sent every sentence at --concurrency sentences
in flight. Prints sentences/s for each, per round and as medians, and the ratios that decide the default. The models
are the bundled en->de and en->fr checkpoints (--models), eager (as NMT_COMPILE=off): compiling changes how fast a
step is, not how two workers share the cores.

--gil: the two engines shared out, each with its compiled graphs (the greedy step's and the prefill's, loaded from
--compile-cache-dir or built into it first: minutes on two cores), timed the same way with the graphs run through
model/compile/nogil.py's extension (the GIL released: NMT_COMPILE_RELEASE_GIL=true) and through AOTInductor's own
binding (held), the two taking turns in each round.
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


async def compiled_engines(dirs: list[str], threads: int, cache_dir: str | None):
    """engines(), each with its greedy step's and prefill's graphs compiled as the server's (on a thread with the
    worker's thread count: Inductor writes it into the kernels)."""
    import torch

    from model.compile import PACKAGE_DIR, compile_model, default_dir, use_cache_dir

    if cache_dir:
        use_cache_dir(cache_dir)
    directory = Path(cache_dir) / PACKAGE_DIR if cache_dir else default_dir()
    out = await engines(dirs, threads)
    for engine in out:

        def build(core=engine.core):
            torch.set_num_threads(threads)
            return compile_model(core.model, core.batcher.cache, steps=("greedy",), directory=directory)

        graphs = await asyncio.to_thread(build)
        print(f"{engine.name}: {len(graphs.built)} graphs built, {len(graphs.loaded)} loaded", flush=True)
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
    if args.gil:
        await gil(args, sentences, await compiled_engines(dirs, max(1, cores // 2), args.compile_cache_dir))
        return
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


async def gil(args: argparse.Namespace, sentences: list[str], pair: list) -> None:
    """The compiled engines timed with the GIL released and held, taking turns (which goes first alternates)."""
    from model.compile import nogil

    if not nogil.released():
        sys.exit("the graphs do not run through model/compile/nogil.py's extension (see the warning above)")
    a, b = pair
    figures: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for way in ("released", "held") if r % 2 == 0 else ("held", "released"):
            nogil.want(way == "released")
            for load, busy in (("one busy", [a]), ("both busy", [a, b])):
                figures.setdefault(f"{way}, {load}", []).append(await rate(busy, sentences, args.concurrency))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items()), flush=True)
    nogil.want(True)
    median = {k: statistics.median(v) for k, v in figures.items()}
    print(f"\nsentences/s, median of {args.rounds} rounds (compiled, one thread each):")
    for k, v in sorted(median.items()):
        print(f"  {k:<22} {v:8.1f}   rounds {', '.join(f'{x:.1f}' for x in figures[k])}")
    for load in ("one busy", "both busy"):
        print(f"{load}, released / held: {median[f'released, {load}'] / median[f'held, {load}']:.2f}x")
    print(f"both busy over one busy: released {median['released, both busy'] / median['released, one busy']:.2f}x, "
          f"held {median['held, both busy'] / median['held, one busy']:.2f}x")  # fmt: skip
    for engine in pair:
        engine.stop()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--models", default=DEFAULT_MODELS, help="two checkpoint directories, comma-separated")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gil", action="store_true", help="compiled engines, the GIL released against held")
    p.add_argument("--compile-cache-dir", help="where the graphs are (or are built): NMT_COMPILE_CACHE_DIR")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
