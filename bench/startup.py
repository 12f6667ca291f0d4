"""How fast nmt-serve starts: seconds to the first translation, to /ready and to compiled speed, cold and warm.

    python bench/startup.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--model-dir DIR] [--threads 2]
        [--source en --target de]   (a model of many languages)

NMT_QUANTIZE and the server's other settings come from the environment. A 4xx answer other than 429 (a request the
server will never take) ends the run with its message.

Runs `nmt-serve` as a child process five times, one after another, each with OMP_NUM_THREADS=--threads:

    off              NMT_COMPILE=off: the eager model alone
    blocking-cold    NMT_COMPILE=blocking, an empty compile cache: compiled before /ready
    background-cold  NMT_COMPILE=background (the default), an empty compile cache: eager at once, compiled graphs
                     swapped in
    background-warm  NMT_COMPILE=background, the packages background-cold built (a restart)
    blocking-warm    NMT_COMPILE=blocking, the same packages: ready once they are loaded

Each run gets NMT_COMPILE_CACHE_DIR: a new empty directory for the first two, one shared directory (empty at
first, or --cache-dir) for the last three.

From the moment the process starts, a client POSTs /translate in a loop (--texts test sentences per request, one
request at a time, 503s retried), polls /ready and /info, and records each answered request. A run ends --after
seconds after the compiled graphs serve (at once for `off`, which runs --after seconds from its first answer). It
prints, per run: seconds from the start to the first 200 from /translate, to /ready, to the first compiled graph
serving, to the greedy step's and the prefill's all serving (what these greedy requests run; in the background the
graphs serve one by one, /info's compile.serving), and to every graph serving (compile state `compiled`),
sentences/s while compiling and after, and the server's resident memory at the end (rss_mb); then one JSON line.
The client shares the cores with the server, as real clients on the same machine would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, cpu_description, require_checkpoint, require_files
from bench.server import Server, free_port
from model.tokenizer import read_lines

RUNS = {  # name: (NMT_COMPILE, which cache directory)
    "off": ("off", "fresh"),
    "blocking-cold": ("blocking", "fresh"),
    "background-cold": ("background", "shared"),  # empty when it runs first of the shared ones: it fills it
    "background-warm": ("background", "shared"),
    "blocking-warm": ("blocking", "shared"),
}


async def run_one(name: str, args, texts: list[str], cache_dir: str) -> dict:
    mode, _ = RUNS[name]
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "NMT_LOG_LEVEL": "warning", "NMT_COMPILE": mode,
           "NMT_COMPILE_CACHE_DIR": cache_dir}  # fmt: skip
    t0 = time.monotonic()
    server = Server(args.model_dir, port=port, env=env)
    url = server.base
    marks: dict[str, float] = {}
    answered: list[tuple[float, int]] = []  # (seconds since start, sentences) per 200
    serving: list[tuple[float, set[str]]] = []  # (seconds since start, the graphs serving), from /info
    stop = asyncio.Event()
    direction = {k: v for k, v in (("source", args.source), ("target", args.target)) if v}

    async def translate(client: httpx.AsyncClient) -> None:
        i = 0
        while not stop.is_set():
            batch = [texts[(i + j) % len(texts)] for j in range(args.texts)]
            try:
                r = await client.post(f"{url}/translate", json={"text": batch, **direction}, timeout=120)
            except httpx.HTTPError:
                await asyncio.sleep(0.05)
                continue
            if 400 <= r.status_code < 500 and r.status_code != 429:  # not a busy or starting server: say why
                stop.set()
                sys.exit(f"{name}: /translate answered {r.status_code}: {r.text[:300]}")
            if r.status_code == 200:
                now = time.monotonic() - t0
                marks.setdefault("first_translation", now)
                answered.append((now, len(batch)))
                i += args.texts
            else:
                await asyncio.sleep(0.05)

    async def watch(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            now = time.monotonic() - t0
            if server.proc.poll() is not None:
                sys.exit(f"{name}: nmt-serve exited with {server.proc.returncode}")
            if now > args.timeout:
                sys.exit(f"{name}: no compiled graphs after {args.timeout} s")
            try:
                if "ready" not in marks and (await client.get(f"{url}/ready", timeout=5)).status_code == 200:
                    marks["ready"] = time.monotonic() - t0
                if "ready" in marks and "compiled" not in marks:
                    compiling = (await client.get(f"{url}/info", timeout=5)).json()["compile"]
                    state, now = compiling["state"], time.monotonic() - t0
                    if compiling["serving"]:
                        serving.append((now, set(compiling["serving"])))
                    if state == "compiled" or (mode == "off" and "first_translation" in marks):
                        marks["compiled"] = now
                    elif state == "failed":
                        sys.exit(f"{name}: compiling failed (see the server's log)")
            except httpx.HTTPError:
                pass
            if "compiled" in marks and time.monotonic() - t0 > marks["compiled"] + args.after:
                stop.set()
            await asyncio.sleep(0.2)

    rss_mb = None
    try:
        async with httpx.AsyncClient() as client:
            await asyncio.gather(translate(client), watch(client))
        rss_mb = resident_mb(server.proc.pid)
    finally:
        server.stop()

    def rate(start: float, end: float) -> float | None:
        done = [(t, n) for t, n in answered if start < t <= end]
        if len(done) < 2:
            return None
        return round(sum(n for _, n in done[1:]) / (done[-1][0] - done[0][0]), 1)

    if serving:  # the first graph, and the greedy step's and the prefill's: what these requests run
        greedy = {g for g in serving[-1][1] if not g.startswith("logprob_step")}
        marks["first_graph"] = serving[0][0]
        marks["greedy_compiled"] = next(t for t, graphs in serving if greedy <= graphs)
    row = {"run": name, "compile": mode, **{f"{k}_s": round(v, 1) for k, v in marks.items()}}
    row["sent_s_while_compiling"] = rate(marks["ready"], marks["compiled"]) if mode == "background" else None
    row["sent_s_after"] = rate(marks["compiled"], marks["compiled"] + args.after + 1)
    row["rss_mb"] = rss_mb  # the server's resident memory at the end, compiled graphs loaded
    return row


def resident_mb(pid: int) -> float | None:
    """A process's resident set in MB (Linux), else None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--src", required=True, help="sentences to translate (text or .gz, one per line)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--texts", type=int, default=8, help="sentences per request")
    p.add_argument("--after", type=float, default=20, help="seconds to keep translating once compiled")
    p.add_argument("--timeout", type=float, default=900, help="give up on a run after this many seconds")
    p.add_argument("--cache-dir", help="the shared runs' compile cache directory, kept (default: a temporary one)")
    p.add_argument("--source", help="the requests' source language (a model of many languages needs it)")
    p.add_argument("--target", help="the requests' target language (a model of many languages needs it)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated subset of {list(RUNS)}, in order")
    args = p.parse_args(argv)
    if unknown := [name for name in args.runs.split(",") if name not in RUNS]:
        p.error(f"--runs: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(RUNS)}")
    require_files(p, src=args.src)
    require_checkpoint(p, "--model-dir", args.model_dir)
    texts = list(read_lines(args.src))[:200]
    print(f"CPU: {cpu_description()}", flush=True)
    quantize = os.environ.get("NMT_QUANTIZE", "none")
    print(f"model: {args.model_dir}, {args.threads} threads, {args.texts} sentences a request, NMT_QUANTIZE={quantize}",
          flush=True)  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(prefix="nmt-compile-cache-") as temporary:
        shared = args.cache_dir or temporary
        for name in args.runs.split(","):
            with tempfile.TemporaryDirectory(prefix="nmt-compile-cache-") as fresh:
                row = asyncio.run(run_one(name, args, texts, shared if RUNS[name][1] == "shared" else fresh))
            rows.append(row)
            cells = [f"{k} {v}" for k, v in row.items() if k not in ("run", "compile") and v is not None]
            print(f"  {name:<16} " + ", ".join(cells), flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
