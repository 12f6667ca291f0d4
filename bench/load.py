"""Load test: a real nmt-serve process driven over HTTP at several concurrency levels, side by side.

    python bench/load.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--levels 1,8,32,64] [--limit N]

Prepares in-process greedy decoding of each sentence alone (the floor a request cannot beat; compiled
as the server compiles), then starts `nmt-serve` on a free port, waits for /ready and sends every
sentence as its own /translate request with N requests in flight, over keep-alive connections of a
minimal HTTP/1.1 client (`--client httpx` for httpx, which takes 8x the CPU a request from the cores the
server runs on). Prints sentences/s, output tokens/s and p50/p95/p99 latency per level, and the two
ratios the service is judged by: sentences/s at concurrency 32 over concurrency 1, and p50 latency at
concurrency 1 over the in-process p50. For the second, in-process decoding and requests at concurrency
1 take turns, 100 sentences at a time, so that the machine's drift does not fall between them;
in-process decoding is also timed with the cores left idle for --pause-ms before each sentence, as a
server's are while a response travels. Last, the service at concurrency 32 and 1 takes turns with CTranslate2
float32 decoding the same sentences in process at batch 32 and 1 (the peer bench/peers.py times), and the
medians of the per-round ratios are printed: ours at concurrency 32 over CTranslate2 at batch 32, and what
batching pays each of the two (ours: concurrency 32 over 1 over HTTP; CTranslate2: batch 32 over 1 in process).
With --frontends N,N,..., after those servers one more for each count, of N HTTP front-end processes apart from one
engine process (NMT_FRONTENDS), runs the highest level (and its ratio to in-process decoding, where there is one).

    python bench/load.py --device cuda [--dtype float16] --levels 1,32,256 --src ...

On a GPU (--device cuda; the server gets NMT_DEVICE and NMT_DTYPE, and sizes its batch from GPU memory) in-process
decoding runs there too, on CUDA graphs captured as the server captures them (model/cuda_graphs.py), and the
corpus is also decoded in process in batches of the largest level (--in-process-batch): the service at that
concurrency over that is what serving costs against batched decoding with no server in between. The CTranslate2
rounds are left out there (they time CTranslate2 on the CPU; bench/peers.py --device cuda races on the GPU). With
--mps the whole run (in-process decoding and the servers) is under NVIDIA's Multi-Process Service, a control daemon of
the run's own, started before CUDA and stopped at the end: several workers' kernels then share the GPU at once.

    python bench/load.py --src ... --documents 1,5,20 [--levels 1,32] [--paragraph 5]

Documents instead (only this; the phases above are left out): consecutive sentences of --src, N to a document
(joined by spaces, a paragraph break after every --paragraph of them), each document one /translate request that the
server splits into its sentences, every one a sequence of the running batch. Prints per size and concurrency
documents/s, sentences/s and p50/p99 latency, and the ratio a document is judged by: p50 latency of the largest
documents over the smallest at concurrency 1 (20 sentences over 1: goal < 3x, its sentences decode side by side). At
concurrency 1 the sizes take turns, the largest size's worth of sentences at a time, so that drift falls on all alike.
--repeat sends the sentences that many times; with --workers N,N,... the first count runs every level and each other
one the highest (with each worker's profile, as above). On a GPU the corpus is also decoded in process in batches of
the sentences the highest level keeps in flight (the level times the largest size), and each row at that level gets
its sentences/s over that (`sent_s_over_in_process`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import ct2_missing, cuda_missing, sizes
from bench.peers import ISA_LIMITS, keep_to
from bench.server import Server

DEFAULT_MODEL = ROOT / "checkpoints" / "multi30k-en-de"


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def prepared_model(
    model_dir: str, threads: int, compile: bool, rows: int, device: str = "cpu", dtype: str = "float32",
    quantize: str = "none",
):  # fmt: skip
    """The model on `device` in `dtype` (its linear layers in int8 with quantize="int8", as NMT_QUANTIZE), its
    tokenizer and a KVCache of `rows` rows shaped as the server's (max_new_tokens + 1 positions, max_input_tokens
    sources), compiled as the server compiles unless compile is False: AOTInductor graphs on the CPU
    (model/compile/), CUDA graphs on a GPU (model/cuda_graphs.py)."""
    import torch

    from app.engine.device import resolve_device
    from model.checkpoint import load_checkpoint
    from model.decoding import KVCache

    torch.set_num_threads(threads)
    dev, dt = resolve_device(device, dtype)
    model, tok, _ = load_checkpoint(model_dir, dev, dt)
    if quantize == "int8":
        from model.quantize import quantize_int8

        quantize_int8(model)
    cache = KVCache(model, rows, 257, 256)
    if compile and dev.type == "cuda":
        from model.cuda_graphs import capture_model

        print(f"in-process, {rows} rows: CUDA graphs captured in {capture_model(model, cache).seconds:.1f} s",
              flush=True)  # fmt: skip
    elif compile:
        from model.compile import compile_model

        print(f"in-process: compiled in {compile_model(model, cache).seconds:.0f} s", flush=True)
    return model, tok, cache


def in_process_decoder(
    model_dir: str, threads: int, compile: bool, device: str = "cpu", dtype: str = "float32", quantize: str = "none"
) -> Callable[[list[str], float], list[float]]:
    """A function giving the seconds to tokenize, greedy-decode (batch 1, KV cache) and detokenize each of some
    sentences alone, compiled as the server compiles unless compile is False, with the cores left idle for `pause`
    seconds before each sentence (as a server at concurrency 1 leaves them while a response travels and the next
    request comes in) or back to back (pause 0)."""
    import torch

    from model.decoding import greedy_decode, max_new_tokens_for

    model, tok, cache = prepared_model(model_dir, threads, compile, 1, device, dtype, quantize)
    where = cache.kv.device

    def timed(sentences: list[str], pause: float) -> list[float]:
        out = []
        for s in sentences[:3] + sentences:  # three warm-up runs: each call follows the server's turn
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter()
            ids = tok.encode(s)
            hyp = greedy_decode(model, torch.tensor([ids], device=where), max_new_tokens_for(len(ids)), cache)[0]
            tok.decode(hyp.tokens)
            out.append(time.perf_counter() - t0)
        return out[3:]

    return timed


def in_process_batched(
    model_dir: str,
    threads: int,
    compile: bool,
    batch: int,
    sentences: list[str],
    device: str,
    dtype: str,
    quantize: str = "none",
) -> float:
    """Sentences/s tokenizing, greedy-decoding and detokenizing all the sentences in process, length-sorted in
    batches of `batch` (KV cache of `batch` rows; compiled as the server compiles), after one warm-up pass of the
    first batch. The model and its cache are freed before it returns, so a server started next has the memory."""
    import gc

    import torch

    prepared = prepared_model(model_dir, threads, compile, batch, device, dtype, quantize)
    rate = _batched_rate(*prepared, batch, sentences)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rate


def _batched_rate(model, tok, cache, batch: int, sentences: list[str]) -> float:
    import torch

    from model.decoding import greedy_decode, max_new_tokens_for

    pad, where = model.config.source_pad_id, cache.kv.device

    def decode(part: list[str]) -> None:
        ids = sorted(tok.encode_batch(part), key=len)
        for i in range(0, len(ids), batch):
            rows = ids[i : i + batch]
            src = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
            for r, x in enumerate(rows):
                src[r, : len(x)] = torch.tensor(x)
            hyps = greedy_decode(model, src.to(where), max_new_tokens_for(src.size(1)), cache)
            tok.decode_batch([h.tokens for h in hyps])

    decode(sentences[:batch])
    t0 = time.perf_counter()
    decode(sentences)
    return len(sentences) / (time.perf_counter() - t0)


@contextmanager
def running_server(
    model_dir: str, threads: int, server_args: Sequence[str] = (), compile: bool = True, settings: dict | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start `nmt-serve` on a free port, wait for /ready, yield (base URL, process); SIGTERM it afterwards.
    `settings`: more NMT_* variables for it (NMT_DEVICE, NMT_DTYPE, NMT_MAX_QUEUE)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "NMT_LOG_LEVEL": "warning", "NMT_COMPILE": str(compile)}
    env.update(settings or {})
    server = Server(model_dir, *server_args, env=env)
    url = server.base
    try:
        # compiling takes minutes here (seconds with the packages on disk)
        deadline = time.monotonic() + (900 if compile else 120)
        if not server.wait_ready(deadline - time.monotonic()):
            sys.exit("nmt-serve did not become ready")
        # ready comes while the graphs are still being built (NMT_COMPILE=background): time the compiled server
        while compile and (state := httpx.get(f"{url}/info", timeout=5).json()["compile"]["state"]) != "compiled":
            if state in ("failed", "off") or server.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"nmt-serve's graphs did not compile (state {state!r})")
            time.sleep(1)
        yield url, server.proc
    finally:
        server.stop()


class RawConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON, on asyncio streams. The load generator shares the two
    cores with the server, so it must be cheap: httpx took 1.2 ms of CPU a request here (1.2 s of the ~5 s a run
    at concurrency 32 takes), this 0.14 ms. Handles what nmt-serve sends back: bodies with a Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host.encode()

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        host, port = httpx.URL(url).host, httpx.URL(url).port
        return cls(*await asyncio.open_connection(host, port), host)

    async def post(self, path: str, payload: dict) -> tuple[int, dict]:
        body = json.dumps(payload).encode()
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), self.host, len(body), body)
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, length = int(head[9:12]), 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, json.loads(await self.reader.readexactly(length))

    def close(self) -> None:
        self.writer.close()


async def drive(url: str, sentences: list[str], concurrency: int, client: str = "raw") -> dict:
    """Send every sentence as its own /translate request, `concurrency` in flight, over `raw` connections
    (RawConnection) or with an httpx.AsyncClient."""
    latencies, out_tokens, errors = [], 0, 0
    queue = list(reversed(sentences))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    pool = httpx.AsyncClient(base_url=url, timeout=120, limits=limits) if client == "httpx" else None

    async def worker() -> None:
        nonlocal out_tokens, errors
        conn = await RawConnection.open(url) if pool is None else None
        try:
            while queue:
                text = queue.pop()
                t0 = time.perf_counter()
                if conn is not None:
                    async with asyncio.timeout(120):
                        status, body = await conn.post("/translate", {"text": text})
                else:
                    r = await pool.post("/translate", json={"text": text})
                    status, body = r.status_code, r.json()
                latencies.append(time.perf_counter() - t0)
                if status != 200:
                    errors += 1
                    continue
                out_tokens += body["usage"]["output_tokens"]
        finally:
            if conn is not None:
                conn.close()

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if pool is not None:
            await pool.aclose()
    return summarize(concurrency, len(sentences), errors, out_tokens, latencies, t0, time.perf_counter())


def summarize(
    concurrency: int, sentences: int, errors: int, out_tokens: int, latencies: list[float], t0: float, t1: float
) -> dict:
    wall = t1 - t0
    return {
        "concurrency": concurrency,
        "sentences": sentences,
        "errors": errors,
        "sent_s": round(sentences / wall, 1),
        "out_tok_s": round(out_tokens / wall, 1),
        "p50_ms": round(1000 * percentile(latencies, 50), 1),
        "p95_ms": round(1000 * percentile(latencies, 95), 1),
        "p99_ms": round(1000 * percentile(latencies, 99), 1),
        "latencies": latencies,  # seconds, dropped from what is printed
        "out_tokens": out_tokens,  # dropped too
        "span": (t0, t1),  # perf_counter, the same clock in every process here (CLOCK_MONOTONIC); dropped too
    }


def drive_in(url: str, sentences: list[str], concurrency: int, client: str, procs: int) -> dict:
    """`drive`, by `procs` client processes together when concurrency allows (each a share of the connections and
    of the sentences, started together): one asyncio client spends ~0.14 ms of CPU a request, which caps it near
    7,000 requests/s, below what several server workers on a GPU answer."""
    procs = max(1, min(procs, concurrency))
    if procs == 1:
        return asyncio.run(drive(url, sentences, concurrency, client))
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # the children only drive HTTP: nothing of the parent's CUDA
    start, results = ctx.Barrier(procs), ctx.Queue()
    shares = [concurrency // procs + (k < concurrency % procs) for k in range(procs)]
    children = [
        ctx.Process(target=drive_child, args=(url, sentences[k::procs], shares[k], client, start, results))
        for k in range(procs)
    ]
    for child in children:
        child.start()
    rows = [results.get(timeout=600) for _ in children]
    for child in children:
        child.join()
    return summarize(
        concurrency, sum(r["sentences"] for r in rows), sum(r["errors"] for r in rows),
        sum(r["out_tokens"] for r in rows), [x for r in rows for x in r["latencies"]],
        min(r["span"][0] for r in rows), max(r["span"][1] for r in rows),
    )  # fmt: skip


def drive_child(url: str, sentences: list[str], concurrency: int, client: str, start, results) -> None:
    start.wait()
    results.put(asyncio.run(drive(url, sentences, concurrency, client)))


@contextmanager
def ct2_in_process(args: argparse.Namespace) -> Iterator[tuple[str, Callable[[int], float]]]:
    """CTranslate2 on the converted checkpoint, in float32 (int8 with --quantize int8), in a process of its own
    (bench/peers.py's worker, 2 threads), in its faster GEMM backend on the CPU it runs on: both (MKL, and oneDNN with
    CT2_USE_MKL=0) decode all the sentences once at batch 32, and the faster is kept. Yields its name (the worker's,
    e.g. "ct2_fp32_dnnl") and a function that decodes all the sentences once, 32 or 1 at a time as peers.py does,
    and returns sentences/s."""
    import tempfile

    from bench.ct2_convert import convert
    from bench.peers import decode_once, start_worker, stop_worker
    from model.checkpoint import load_checkpoint

    base = "ct2_int8" if args.quantize == "int8" else "ct2_fp32"
    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as ct2_dir:
        convert(*load_checkpoint(args.model_dir)[:2], ct2_dir)
        options = argparse.Namespace(**{**vars(args), "batch_sizes": "1,32", "beam": 1, "length_penalty": 1.0,
                                        "limit_batch1": 0})  # fmt: skip
        rates, child, chosen = {}, None, base
        for name in (base, f"{base}_dnnl"):
            candidate = start_worker(options, name, ct2_dir)
            x = decode_once(candidate, 32)
            rates[name] = len(x["outputs"]) / x["seconds"]
            if child is None or rates[name] > rates[chosen]:
                if child is not None:
                    stop_worker(child)
                child, chosen = candidate, name
            else:
                stop_worker(candidate)
        print(
            "CTranslate2 at batch 32, each backend once: "
            + ", ".join(f"{n} {r:.1f} sent/s" for n, r in rates.items())
            + f"; racing {chosen}",
            flush=True,
        )
        try:

            def run(batch_size: int) -> float:
                x = decode_once(child, batch_size)
                return len(x["outputs"]) / x["seconds"]

            yield chosen, run
        finally:
            stop_worker(child)


def documents(sentences: list[str], size: int, paragraph: int = 0) -> list[str]:
    """Consecutive runs of `size` sentences, one document each (a short last run is left out): joined by spaces, with
    a paragraph break after every `paragraph` sentences (0: none). A sentence without a final . ! or ? gets a full
    stop, so that the splitter finds each sentence where it ends."""
    ended = [s if s.endswith((".", "!", "?")) else s + "." for s in map(str.strip, sentences)]
    out = []
    for i in range(0, len(ended) - size + 1, size):
        run = ended[i : i + size]
        out.append("".join(s + ("" if k == size - 1 else "\n\n" if paragraph and (k + 1) % paragraph == 0 else " ")
                           for k, s in enumerate(run)))  # fmt: skip
    return out


async def document_turns(url: str, by_size: dict[int, list[str]], client: str = "raw") -> dict[int, dict]:
    """Concurrency 1, the sizes taking turns, the largest size's worth of sentences at a time: per size its
    latencies, documents sent and seconds spent."""
    turn = max(by_size)
    out = {size: {"latencies": [], "documents": 0, "seconds": 0.0, "errors": 0} for size in by_size}
    for start in range(0, max(size * len(docs) for size, docs in by_size.items()), turn):
        for size, docs in by_size.items():
            part = docs[start // size : (start + turn) // size]
            if part:
                t0 = time.perf_counter()
                row = await drive(url, part, 1, client)
                out[size]["seconds"] += time.perf_counter() - t0
                out[size]["latencies"] += row["latencies"]
                out[size]["documents"] += len(part)
                out[size]["errors"] += row["errors"]
    return out


def document_row(size: int, concurrency: int, sentences: int, documents: int, seconds: float, latencies: list[float],
                 errors: int) -> dict:  # fmt: skip
    """One line of the document table: `sentences` is what the server's splitter finds in the documents sent."""
    return {
        "sentences_per_document": size, "concurrency": concurrency, "documents": documents, "errors": errors,
        "doc_s": round(documents / seconds, 2), "sent_s": round(sentences / seconds, 1),
        "p50_ms": round(1000 * percentile(latencies, 50), 1), "p99_ms": round(1000 * percentile(latencies, 99), 1),
    }  # fmt: skip


def document_goal(rows: list[dict], goal: float = 3.0) -> tuple[float, str] | None:
    """p50 latency at concurrency 1 of the largest documents over the smallest, and its line (with the goal when the
    two are 20 and 1 sentences); None without two sizes at concurrency 1."""
    c1 = {r["sentences_per_document"]: r["p50_ms"] for r in rows if r["concurrency"] == 1}
    if len(c1) < 2:
        return None
    small, big = min(c1), max(c1)
    ratio = round(c1[big] / c1[small], 2)
    line = (f"a {big}-sentence document over a {small}-sentence one, p50 at concurrency 1: {c1[big]} / {c1[small]} ms "
            f"= {ratio}x")  # fmt: skip
    if (small, big) == (1, 20):
        line += f" (goal < {goal:g}x: {'met' if ratio < goal else 'missed'})"
    return ratio, line


def run_documents(args: argparse.Namespace, levels: list[int], settings: dict, sentences: list[str]) -> dict:
    """The document mode: per size, concurrency 1 (the sizes taking turns) and then every other level, on a server of
    the first --workers count; then the highest level on each other count. At the highest level, where each worker
    spent the time (`profile`, as drive_levels)."""
    from app.segment import segment

    sentences = sentences * args.repeat
    by_size = {size: documents(sentences, size, args.paragraph) for size in args.documents}
    by_size = {size: docs for size, docs in by_size.items() if docs}
    found = {size: sum(len(segment(d)) for d in docs) for size, docs in by_size.items()}  # what the server will split
    for size, docs in by_size.items():
        print(f"{len(docs)} documents of {size} sentences ({found[size]} as the server splits them)", flush=True)
    rows = []
    for workers in args.workers:
        run_levels = levels if workers == args.workers[0] else levels[-1:]
        with running_server(args.model_dir, args.threads, args.server_arg, args.compile,
                            server_settings(settings, workers, args.compile)) as (url, server):  # fmt: skip
            asyncio.run(drive(url, [d for docs in by_size.values() for d in docs[:2]], 1, args.client))  # warm-up
            for level in run_levels:
                if level == 1:  # the sizes take turns
                    timed = asyncio.run(document_turns(url, by_size, args.client))
                else:
                    timed = {}
                    for size, docs in by_size.items():
                        before = workers_now(url, server.pid) if level == levels[-1] else None
                        t0 = time.perf_counter()
                        row = asyncio.run(drive(url, docs, level, args.client))
                        seconds = time.perf_counter() - t0
                        timed[size] = {**row, "documents": len(docs), "seconds": seconds}
                        if before is not None:
                            timed[size]["profile"] = where_the_time_went(before, workers_now(url, server.pid), seconds)
                level_rows = []
                for size, t in timed.items():
                    r = document_row(size, level, found[size], t["documents"], t["seconds"], t["latencies"],
                                     t["errors"])  # fmt: skip
                    level_rows.append(
                        {**r, "workers": workers, **({"profile": t["profile"]} if "profile" in t else {})}
                    )
                for r in level_rows:
                    print(f"workers {workers} {r['sentences_per_document']:>3} sentences/document, concurrency "
                          f"{level:>3}: {r['doc_s']:>7} docs/s {r['sent_s']:>7} sent/s | p50 {r['p50_ms']:>8} ms p99 "
                          f"{r['p99_ms']:>8} ms | errors {r['errors']}", flush=True)  # fmt: skip
                    print_profile(r.get("profile", []))
                rows += level_rows
    summary = {"documents": rows}
    if (goal := document_goal(rows)) is not None:
        summary["p50_c1_largest_over_smallest"] = goal[0]
        print(goal[1])
    return summary


def against_in_process(rows: list[dict], level: int, sent_s: float) -> list[str]:
    """Documents: each row at the highest level gets its sentences/s over in-process batched decoding's
    (`sent_s_over_in_process`); the lines that say so."""
    lines = []
    for r in rows:
        if r["concurrency"] == level:
            r["sent_s_over_in_process"] = round(r["sent_s"] / sent_s, 2)
            lines.append(
                f"workers {r['workers']}, {r['sentences_per_document']} sentences/document at concurrency "
                f"{level} / in-process batched: {r['sent_s']} / {sent_s:.1f} sent/s = {r['sent_s_over_in_process']}x"
            )
    return lines


def server_settings(settings: dict[str, str], workers: int, compile: bool) -> dict[str, str]:
    """The NMT_* settings for a server of `workers` processes. With several, each must have its graphs when /ready
    says 200 (NMT_COMPILE=blocking): /info's compile state is only the answering worker's."""
    out = {**settings, "NMT_WORKERS": str(workers)}
    if workers > 1 and compile:
        out["NMT_COMPILE"] = "blocking"
    return out


def print_profile(profile: list[dict]) -> None:
    """Where each worker's time went over a level (where_the_time_went), a line each."""
    for index, p in enumerate(profile):
        print(f"  worker {index}: " + ", ".join(f"{k} {v}" for k, v in p.items()), flush=True)


def drive_levels(
    url: str, pid: int, sentences: list[str], levels: list[int], args: argparse.Namespace, workers: int
) -> list:
    """Every level once, printed as it ends; the rows without their latencies. At the highest level, where each of
    the server's workers spent that time (`profile`)."""
    rows = []
    for level in levels:
        before = workers_now(url, pid) if level == levels[-1] else None
        row = drive_in(url, sentences, level, args.client, args.client_procs)
        if before is not None:
            row["profile"] = where_the_time_went(before, workers_now(url, pid), row["span"][1] - row["span"][0])
        del row["latencies"], row["out_tokens"], row["span"]
        row["workers"] = workers
        rows.append(row)
        print(
            f"workers {workers} concurrency {level:>3}: {row['sent_s']:>7} sent/s {row['out_tok_s']:>8} out tok/s | "
            f"p50 {row['p50_ms']:>7} ms p95 {row['p95_ms']:>7} ms p99 {row['p99_ms']:>7} ms | errors {row['errors']}",
            flush=True,
        )
        print_profile(row.get("profile", []))
    return rows


ENGINE_COUNTERS = {
    "nmt_decoder_step_duration_seconds_sum": "step_s", "nmt_decoder_steps_total": "steps",
    "nmt_prefill_duration_seconds_sum": "prefill_s", "nmt_prefill_duration_seconds_count": "prefills",
    "nmt_generated_tokens_total": "tokens", "nmt_prefilled_sequences_total": "prefilled",
}  # fmt: skip


def workers_now(url: str, pid: int) -> list[dict]:
    """Each server worker's engine counters (its /metrics) and CPU seconds so far, its event loop's (the main
    thread's) apart, in worker order. One worker: the server process itself. Several: fresh connections until each
    has answered (the kernel picks the worker), /info then /metrics on the same one."""
    from prometheus_client.parser import text_string_to_metric_families

    seen: dict[int, dict] = {}
    for _ in range(200):
        with httpx.Client(base_url=url, timeout=30) as client:
            worker = client.get("/info").json().get("worker") or {"index": 0, "count": 1, "pid": pid}
            if worker["index"] in seen:
                continue
            counters = dict.fromkeys(ENGINE_COUNTERS.values(), 0.0)
            for family in text_string_to_metric_families(client.get("/metrics").text):
                for sample in family.samples:
                    if sample.name in ENGINE_COUNTERS:
                        counters[ENGINE_COUNTERS[sample.name]] += sample.value
            seen[worker["index"]] = {**counters, **cpu_seconds(worker["pid"])}
            if len(seen) == worker["count"]:
                break
    return [seen[k] for k in sorted(seen)]


def cpu_seconds(pid: int) -> dict[str, float]:
    """A process's CPU seconds (user + system) and its main thread's (the event loop's), from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")

    def read(path: str) -> float:
        try:
            fields = Path(path).read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime

    return {"cpu_s": read(f"/proc/{pid}/stat"), "loop_cpu_s": read(f"/proc/{pid}/task/{pid}/stat")}


def where_the_time_went(before: list[dict], after: list[dict], wall: float) -> list[dict]:
    """Per worker over one level: the share of the wall time its engine spent in decoder steps and in prefills (as
    the batcher times them), the cores its process and its event loop kept busy, steps a second, rows a step and
    sequences an admission."""
    out = []
    for b, a in zip(before, after, strict=True):
        d = {k: a[k] - b[k] for k in a}
        out.append({
            "steps_busy": round(d["step_s"] / wall, 2), "prefill_busy": round(d["prefill_s"] / wall, 2),
            "process_cores": round(d["cpu_s"] / wall, 2), "loop_cores": round(d["loop_cpu_s"] / wall, 2),
            "steps_per_s": round(d["steps"] / wall), "rows_per_step": round(d["tokens"] / max(d["steps"], 1), 1),
            "step_ms": round(1000 * d["step_s"] / max(d["steps"], 1), 2),
            "prefill_ms": round(1000 * d["prefill_s"] / max(d["prefills"], 1), 2),
            "seqs_per_prefill": round(d["prefilled"] / max(d["prefills"], 1), 1),
        })  # fmt: skip
    return out


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[int], int, dict[str, str]]:
    """The arguments, the levels, the in-process batch (0 = none) and the NMT_* settings the server gets."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--src", required=True)
    p.add_argument("--levels", type=sizes, default=None, metavar="N,N,...",
                   help="concurrency levels (default 1,8,32,64; 1,32 with --documents)")  # fmt: skip
    p.add_argument("--limit", type=int, default=0, help="first N sentences only (0 = all)")
    p.add_argument("--threads", type=int, default=2, help="torch threads, in-process and in the server")
    p.add_argument("--server-arg", action="append", default=[], help="extra nmt-serve argument (repeatable)")
    p.add_argument("--workers", type=sizes, default=[1], metavar="N,N,...", help="the server's NMT_WORKERS; with "
                   "several counts, the first runs everything and each other one the highest level, one server after "
                   "another")  # fmt: skip
    p.add_argument("--frontends", type=sizes, default=[], metavar="N,N,...", help="after the --workers servers, one "
                   "server for each count at the highest level: N HTTP front-end processes and one engine process "
                   "(NMT_FRONTENDS)")  # fmt: skip
    p.add_argument("--client-procs", type=int, default=1, help="client processes sharing each level's connections "
                   "(one asyncio client tops out near 7,000 requests/s)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=1, help="send the sentences this many times at each level")
    p.add_argument("--pause-ms", type=float, default=3.0, help="also time in-process decoding with the cores idle "
                   "this long before each sentence (0 = not)")  # fmt: skip
    p.add_argument("--no-compile", dest="compile", action="store_false", help="eager model, in-process and served")
    p.add_argument("--ct2-rounds", type=int, default=3, help="rounds of concurrency 32 and 1 over HTTP taking turns "
                   "with CTranslate2 in process at batch 32 and 1 (0 = skip; needs the ctranslate2 package)")  # fmt: skip
    p.add_argument("--client", choices=["raw", "httpx"], default="raw", help="raw: keep-alive HTTP/1.1 on asyncio "
                   "streams, 0.14 ms of CPU a request; httpx: 1.2 ms, taken from the server's two cores")  # fmt: skip
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]: the server's NMT_DEVICE and in-process decoding's")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="the server's NMT_DTYPE and in-process decoding's (half precision on CUDA only)")  # fmt: skip
    p.add_argument("--in-process-batch", type=int, default=None, help="also decode the corpus in process in batches "
                   "of N, for the service at concurrency N over it (default: the largest level on CUDA; 0 = not, the "
                   "CPU's default: compiling for a second cache shape takes minutes there)")  # fmt: skip
    p.add_argument("--quantize", default="none", choices=["none", "int8"], help="the server's NMT_QUANTIZE and "
                   "in-process decoding's; with int8 the peer is CTranslate2 int8")  # fmt: skip
    p.add_argument(
        "--isa",
        choices=sorted(ISA_LIMITS),
        help="keep every engine (the server, in-process decoding, "
        "CTranslate2) to these instructions, as on a CPU without AVX-512 (bench/peers.py's ISA_LIMITS)",
    )
    p.add_argument("--mps", action="store_true", help="--device cuda: run under NVIDIA's Multi-Process Service, a "
                   "control daemon of this run's own, so that several workers' kernels share the GPU at once")  # fmt: skip
    p.add_argument("--documents", type=sizes, default=[], metavar="N,N,...", help="document mode, and only it: "
                   "documents of N consecutive sentences, one a request (e.g. 1,5,20)")  # fmt: skip
    p.add_argument("--paragraph", type=int, default=5, help="--documents: a paragraph break after every N sentences "
                   "of a document (0 = none)")  # fmt: skip
    args = p.parse_args(argv)
    if why := cuda_missing(args.device, "leave out --device to run on the CPU"):
        p.error(why)
    levels = args.levels or ([1, 32] if args.documents else [1, 8, 32, 64])
    cuda = args.device.startswith("cuda")
    # in-process batches as many sentences as the highest level keeps in flight (documents: each of its largest size)
    in_flight = max(levels) * max(args.documents, default=1)
    batch = in_flight if args.in_process_batch is None and cuda else args.in_process_batch or 0
    if cuda and args.ct2_rounds and not args.documents:
        print("CTranslate2 rounds skipped on --device cuda: they time CTranslate2 on the CPU "
              "(bench/peers.py --device cuda races on the GPU)", flush=True)  # fmt: skip
        args.ct2_rounds = 0
    if args.ct2_rounds < 0:
        p.error(f"--ct2-rounds {args.ct2_rounds}: at least 0 (0 = skip)")
    if args.ct2_rounds and not args.documents and (why := ct2_missing("skip its rounds with --ct2-rounds 0")):
        p.error(why)
    if args.dtype != "float32" and not cuda:
        p.error(f"--dtype {args.dtype} needs --device cuda; on the CPU use float32")
    if args.quantize != "none" and cuda:
        p.error("--quantize int8 is for the CPU")
    if args.mps and not cuda:
        p.error("--mps needs --device cuda: MPS shares an NVIDIA GPU between processes")
    if args.mps and args.isa:
        p.error("--mps with --isa: --isa starts the run again, which would leave the MPS daemon behind")
    # NMT_MAX_QUEUE: every request of the highest level (every sentence of its documents) is in flight at once and
    # must not get 429
    settings = {"NMT_DEVICE": args.device, "NMT_DTYPE": args.dtype, "NMT_MAX_QUEUE": str(max(256, in_flight)),
                "NMT_QUANTIZE": args.quantize}  # fmt: skip
    return args, levels, batch, settings


@contextmanager
def mps_daemon(directory: Path) -> Iterator[dict[str, str]]:
    """NVIDIA's Multi-Process Service for the run: its control daemon started with pipe and log directories of its own
    under `directory` (a host's own daemon, if any, is left alone), this process and the servers it starts made its
    clients (CUDA_MPS_PIPE_DIRECTORY before CUDA starts here), and the daemon told to quit at the end, whatever
    happened. Yields the variables set."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise SystemExit("--mps: no nvidia-cuda-mps-control on the PATH (it comes with NVIDIA's driver)")
    variables = {"CUDA_MPS_PIPE_DIRECTORY": str(directory / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(directory / "log")}
    for d in variables.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **variables}
    subprocess.run([control, "-d"], env=env, stdin=subprocess.DEVNULL, check=True, timeout=60)
    before = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield variables
    finally:
        subprocess.run([control], input="quit\n", text=True, env=env, timeout=60, check=False)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    args, levels, batch, settings = parse_args()
    with ExitStack() as stack:
        if args.mps:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nmt-mps-")))
            stack.enter_context(mps_daemon(directory))
            print(f"MPS: a control daemon of this run's own ({directory})", flush=True)
        run(args, levels, batch, settings)


def run(args: argparse.Namespace, levels: list[int], batch: int, settings: dict[str, str]) -> None:
    from bench.common import cpu_description
    from model.tokenizer import read_lines

    # in-process decoding runs here: with --isa, start again with the limits (the server and CTranslate2 inherit them)
    cpu = cpu_description() + keep_to(args.isa, restart=True)
    print(f"CPU: {cpu}", flush=True)
    sentences = [s for s in read_lines(args.src) if s.strip()]
    sentences = sentences[: args.limit] if args.limit else sentences
    in_process_batch = None
    if batch:  # before the server starts: its batch is sized from the GPU memory it finds free
        in_process_batch = in_process_batched(
            args.model_dir, args.threads, args.compile, batch, sentences, args.device, args.dtype, args.quantize
        )
        print(f"in process, batch {batch}: {in_process_batch:.1f} sent/s", flush=True)
    if args.documents:
        summary = run_documents(args, levels, settings, sentences)
        if in_process_batch:
            summary["in_process_batch"] = {"batch": batch, "sent_s": round(in_process_batch, 1)}
            for line in against_in_process(summary["documents"], max(levels), in_process_batch):
                print(line, flush=True)
        print(json.dumps({"cpu": cpu, "mps": args.mps, **summary}))
        return
    decode = in_process_decoder(args.model_dir, args.threads, args.compile, args.device, args.dtype, args.quantize)
    with ExitStack() as stack:
        peer, ct2 = stack.enter_context(ct2_in_process(args)) if args.ct2_rounds else (None, None)
        url, server = stack.enter_context(
            running_server(args.model_dir, args.threads, args.server_arg, args.compile,
                           server_settings(settings, args.workers[0], args.compile))
        )  # fmt: skip
        results = drive_levels(url, server.pid, sentences * args.repeat, levels, args, args.workers[0])
        # The same sentences alone, in process and over HTTP, taking turns 100 at a time: a shared VM's speed
        # drifts by tens of percent within minutes, so the two must be timed side by side, not one after the other.
        alone, paused, served = [], [], []
        for i in range(0, len(sentences), 100):
            part = sentences[i : i + 100]
            alone += decode(part, 0.0)
            paused += decode(part, args.pause_ms / 1000) if args.pause_ms else []
            served += asyncio.run(drive(url, part, 1, args.client))["latencies"]
        # The service at concurrency 32 and 1 against CTranslate2 decoding the same sentences in process, 32 and 1 at
        # a time: one pass each per round, back to back, the ratios taken per round.
        vs_ct2, batching = [], []
        for _ in range(args.ct2_rounds):
            theirs = ct2(32)
            ours = asyncio.run(drive(url, sentences, 32, args.client))["sent_s"]
            vs_ct2.append((ours, theirs))
            theirs_alone = ct2(1)
            ours_alone = asyncio.run(drive(url, sentences, 1, args.client))["sent_s"]
            batching.append((ours / ours_alone, theirs / theirs_alone))
    for workers in args.workers[1:]:  # the other worker counts at the highest level, one server after another
        with running_server(args.model_dir, args.threads, args.server_arg, args.compile,
                            server_settings(settings, workers, args.compile)) as (url, server):  # fmt: skip
            results += drive_levels(url, server.pid, sentences * args.repeat, levels[-1:], args, workers)
    for frontends in args.frontends:  # then front-ends apart from one engine process, at the highest level
        split = {**server_settings(settings, 1, args.compile), "NMT_FRONTENDS": str(frontends)}
        with running_server(args.model_dir, args.threads, args.server_arg, args.compile, split) as (url, _):
            row = drive_in(url, sentences * args.repeat, levels[-1], args.client, args.client_procs)
        del row["latencies"], row["out_tokens"], row["span"]
        results.append({**row, "workers": 1, "frontends": frontends})
        print(f"frontends {frontends} concurrency {levels[-1]:>3}: {row['sent_s']:>7} sent/s | p50 {row['p50_ms']:>7} "
              f"ms p99 {row['p99_ms']:>7} ms | errors {row['errors']}", flush=True)  # fmt: skip

    summary = {"cpu": cpu, "mps": args.mps, "quantize": args.quantize, "levels": results}
    by = {r["concurrency"]: r for r in results if r["workers"] == args.workers[0] and "frontends" not in r}
    if 1 in by and 32 in by:
        summary["sent_s_c32_over_c1"] = round(by[32]["sent_s"] / by[1]["sent_s"], 2)
        print(f"batching pays: concurrency 32 / concurrency 1 sentences/s = {summary['sent_s_c32_over_c1']}x "
              "(target >= 4)")  # fmt: skip
    if in_process_batch and batch in by:
        summary["in_process_batch"] = {"batch": batch, "sent_s": round(in_process_batch, 1)}
        key = f"c{batch}_over_in_process_b{batch}"
        summary[key] = round(by[batch]["sent_s"] / in_process_batch, 2)
        print(f"served at concurrency {batch} / in-process batch {batch}: {by[batch]['sent_s']} / "
              f"{in_process_batch:.1f} sent/s = {summary[key]}x (workers {args.workers[0]})")  # fmt: skip
        for row in results:
            if "frontends" in row and row["concurrency"] == batch:
                summary[f"{key}_frontends{row['frontends']}"] = ratio = round(row["sent_s"] / in_process_batch, 2)
                print(f"  with {row['frontends']} front-ends: {row['sent_s']} / {in_process_batch:.1f} sent/s = "
                      f"{ratio}x")  # fmt: skip
            elif row["workers"] != args.workers[0] and row["concurrency"] == batch:
                summary[f"{key}_workers{row['workers']}"] = ratio = round(row["sent_s"] / in_process_batch, 2)
                print(f"  with {row['workers']} workers: {row['sent_s']} / {in_process_batch:.1f} sent/s = {ratio}x")
    p50 = {name: round(1000 * statistics.median(x), 1) for name, x in (("in_process", alone), ("http_c1", served))}
    summary["p50_ms"] = p50
    summary["p50_c1_over_in_process"] = round(p50["http_c1"] / p50["in_process"], 2)
    print(f"HTTP overhead, taking turns 100 sentences at a time: p50 over HTTP at concurrency 1 {p50['http_c1']} ms, "
          f"in process {p50['in_process']} ms: {summary['p50_c1_over_in_process']}x (target <= 1.5)")  # fmt: skip
    if paused:
        p50["in_process_paused"] = round(1000 * statistics.median(paused), 1)
        summary["p50_c1_over_paused"] = round(p50["http_c1"] / p50["in_process_paused"], 2)
        print(f"  in process with {args.pause_ms:g} ms idle before each sentence: {p50['in_process_paused']} ms, "
              f"{summary['p50_c1_over_paused']}x")  # fmt: skip
    if vs_ct2:
        ratios = sorted(ours / theirs for ours, theirs in vs_ct2)
        summary["c32_vs_ct2_in_process"] = {"peer": peer, "rounds": [[o, round(t, 1)] for o, t in vs_ct2],
                                            "ratio": round(statistics.median(ratios), 2)}  # fmt: skip
        print(f"HTTP at concurrency 32 against CTranslate2 in process at batch 32 ({peer}), taking turns: "
              + ", ".join(f"{o:.1f} vs {t:.1f}" for o, t in vs_ct2) + f" sent/s: {statistics.median(ratios):.2f}x "
              f"(rounds {ratios[0]:.2f}-{ratios[-1]:.2f}; target >= 0.7)")  # fmt: skip
        ours_pays, theirs_pays = (sorted(x) for x in zip(*batching))
        summary["batching_pays"] = {"rounds": [[round(o, 2), round(t, 2)] for o, t in batching],
                                    "ours_http_c32_over_c1": round(statistics.median(ours_pays), 2),
                                    "ct2_in_process_b32_over_b1": round(statistics.median(theirs_pays), 2)}  # fmt: skip
        print(f"what batching pays, in the same rounds: ours over HTTP, concurrency 32 / 1 = "
              f"{statistics.median(ours_pays):.2f}x (rounds {ours_pays[0]:.2f}-{ours_pays[-1]:.2f}; target >= 4); "
              f"CTranslate2 in process, batch 32 / 1 = {statistics.median(theirs_pays):.2f}x "
              f"(rounds {theirs_pays[0]:.2f}-{theirs_pays[-1]:.2f})")  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
