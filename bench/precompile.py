"""A first start's graphs built one after another against several at once (NMT_COMPILE_JOBS), side by side in one
run, then the graphs of each decoding in turn.

    python bench/precompile.py --src $T.en.gz [--jobs 1,0] [--limit 300] [--model-dir DIR]

For each --jobs value `nmt-serve --precompile` fills a fresh package directory (the server's settings otherwise:
NMT_* variables apply), timed from its start to its exit. Then each directory's graphs are loaded into an engine's
model and cache of their own, as a server loads them, and decode the same sentences at batch 1 and 32 (greedy), the
directories taking turns for --rounds rounds: graphs built side by side (their small-row GEMMs autotuned beside
other builds, their large-row steps timed with the others paused) should decode as fast, and the same tokens.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.loading import load_engine
from app.settings import Settings
from bench.common import DEFAULT_MODEL, cpu_description, pad_batch
from model.compile import adopt
from model.decoding import greedy_decode
from model.options import max_new_tokens_for
from model.tokenizer import read_lines


def precompile(model_dir: str, directory: Path, jobs: str) -> tuple[float, str]:
    env = {**os.environ, "NMT_COMPILE_CACHE_DIR": str(directory), "NMT_COMPILE_JOBS": jobs}
    cmd = [sys.executable, "-m", "app.cli", "--model-dir", model_dir, "--precompile"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, out.strip().splitlines()[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--src", required=True)
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--jobs", default="1,0", help="NMT_COMPILE_JOBS values, built in turn (0: the server's default)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--keep", help="build into this directory's subfolders (jobs-N) and keep them, or decode with "
                   "those an earlier run left there (default: a temporary directory)")
    args = p.parse_args()
    print(f"CPU: {cpu_description()}; torch {torch.__version__}; model {args.model_dir}")
    root = Path(args.keep or tempfile.mkdtemp(prefix="nmt-precompile-"))
    dirs, seconds = {}, {}
    for jobs in args.jobs.split(","):
        dirs[jobs] = root / f"jobs-{jobs}"
        if args.keep and dirs[jobs].exists():  # built by an earlier run: only decoded
            print(f"NMT_COMPILE_JOBS={jobs}: the graphs in {dirs[jobs]}", flush=True)
            continue
        seconds[jobs], said = precompile(args.model_dir, dirs[jobs], jobs)
        print(f"NMT_COMPILE_JOBS={jobs}: {seconds[jobs]:.1f} s from start to exit; {said}", flush=True)
    first = args.jobs.split(",")[0]
    for jobs in seconds:
        if first in seconds:
            print(f"  NMT_COMPILE_JOBS={jobs} over {first}: {seconds[first] / seconds[jobs]:.2f}x as fast")

    engines = {}
    for jobs, directory in dirs.items():
        engine = load_engine(Settings(model_dir=args.model_dir, compile="blocking", compile_cache_dir=directory))
        torch.set_num_threads(engine.core.batcher.threads)
        graphs = engine.core.compiler.precompile()
        assert not graphs.built, f"{directory} lacked {graphs.built}"
        adopt(engine.core.model, graphs)
        engines[jobs] = engine
    tok = engines[first].tokenizer
    encoded = sorted(tok.encode_batch(list(read_lines(args.src))[: args.limit]), key=len)
    for bs in (1, 32):
        batches = [pad_batch(encoded[i : i + bs], tok.pad_id) for i in range(0, len(encoded), bs)]
        rates, tokens = {j: [] for j in engines}, {}
        for _ in range(args.rounds):
            for jobs, engine in engines.items():
                model, cache = engine.core.model, engine.core.batcher.cache
                t0, out = time.perf_counter(), []
                for src in batches:
                    out += [h.tokens for h in greedy_decode(model, src, max_new_tokens_for(src.size(1)), cache)]
                rates[jobs].append(len(encoded) / (time.perf_counter() - t0))
                tokens[jobs] = out
        line = ", ".join(f"jobs {j}: {max(r):.1f} sent/s" for j, r in rates.items())
        same = all(t == tokens[first] for t in tokens.values())
        ratios = ", ".join(f"{j} over {first} {max(rates[j]) / max(rates[first]):.2f}x" for j in rates if j != first)
        print(f"batch {bs} (best of {args.rounds}): {line}; {ratios}; same tokens: {same}")


if __name__ == "__main__":
    main()
