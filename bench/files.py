"""Files as jobs against the same text: a 50-page DOCX translated through /files beside the same paragraphs as a
plain-text file, and interactive /translate requests alone and beside a running 50-page job.

A page is 13 paragraphs of three Multi30k sentences (about 500 words), every other paragraph with a bold and an
italic word (so the DOCX's paragraphs are markup units, placed by alignment), a heading every fifteen paragraphs.
Each round uploads both files, one after the other in alternating order, and times each from upload to download;
the ratio is the text job's time over the DOCX job's (at least 0.9 is the goal). Then a client sends one sentence
at a time from `--clients` loops, for as many requests alone as beside a DOCX job; p50 and p99 of each, and the
p99's ratio (at most 1.5 is the goal).

    python bench/files.py --src $D/val.en.gz --src $D/test_2016_flickr.en.gz --pages 50 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, cpu_description
from bench.load import percentile
from bench.server import eager_server
from model.tokenizer import read_lines

PARAGRAPHS_A_PAGE = 13
SENTENCES_A_PARAGRAPH = 3
HEADING_EVERY = 15


def paragraphs(sentences: list[str], pages: int) -> list[str]:
    n = pages * PARAGRAPHS_A_PAGE
    return [
        " ".join(sentences[(i * SENTENCES_A_PARAGRAPH + j) % len(sentences)] for j in range(SENTENCES_A_PARAGRAPH))
        for i in range(n)
    ]


def docx_file(texts: list[str]) -> bytes:
    """The paragraphs as a Word document: headings, and a bold and an italic word in every other paragraph."""
    import docx

    document = docx.Document()
    for i, text in enumerate(texts):
        if i % HEADING_EVERY == 0:
            document.add_heading(f"Part {i // HEADING_EVERY + 1}", level=1)
        p = document.add_paragraph()
        words = text.split(" ")
        if i % 2 or len(words) < 6:
            p.add_run(text)
            continue
        p.add_run(" ".join(words[:2]) + " ")
        p.add_run(words[2]).bold = True
        p.add_run(" " + " ".join(words[3:5]) + " ")
        p.add_run(words[5]).italic = True
        p.add_run(" " + " ".join(words[6:]))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def text_file(texts: list[str]) -> bytes:
    out = []
    for i, text in enumerate(texts):
        if i % HEADING_EVERY == 0:
            out.append(f"Part {i // HEADING_EVERY + 1}")
        out.append(text)
    return ("\n\n".join(out) + "\n").encode()


async def upload(client: httpx.AsyncClient, name: str, data: bytes, target: str) -> str:
    r = await client.post("/files", files={"file": (name, data)}, data={"target": target})
    r.raise_for_status()
    return r.json()["id"]


async def status(client: httpx.AsyncClient, job_id: str) -> dict:
    return (await client.get(f"/files/{job_id}")).json()


async def finish(client: httpx.AsyncClient, job_id: str) -> None:
    """Wait for the job, download its file and delete it."""
    while (s := await status(client, job_id))["status"] not in ("done", "failed"):
        await asyncio.sleep(0.05)
    if s["status"] != "done":
        sys.exit(f"the job of {s['filename']} failed: {s['error']}")
    (await client.get(f"/files/{job_id}/download")).raise_for_status()
    await client.delete(f"/files/{job_id}")


async def job(client: httpx.AsyncClient, name: str, data: bytes, target: str) -> float:
    """Seconds from upload to the translated file downloaded."""
    t0 = time.perf_counter()
    await finish(client, await upload(client, name, data, target))
    return time.perf_counter() - t0


async def interactive(client: httpx.AsyncClient, sentences: list[str], clients: int, n: int) -> list[float]:
    """Latencies (ms) of `n` one-sentence requests from `clients` loops."""
    latencies: list[float] = []
    todo = iter(range(n))

    async def loop() -> None:
        for i in todo:
            t0 = time.perf_counter()
            r = await client.post("/translate", json={"text": sentences[i % len(sentences)]})
            r.raise_for_status()
            latencies.append(1000 * (time.perf_counter() - t0))

    await asyncio.gather(*(loop() for _ in range(clients)))
    return latencies


async def run(args: argparse.Namespace, base: str) -> None:
    sentences = [s for src in args.src for s in read_lines(src)]
    texts = paragraphs(sentences, args.pages)
    docx, txt = docx_file(texts), text_file(texts)
    print(json.dumps({"pages": args.pages, "paragraphs": len(texts), "sentences": len(texts) * SENTENCES_A_PARAGRAPH,
                      "docx_bytes": len(docx), "txt_bytes": len(txt)}), flush=True)  # fmt: skip
    async with httpx.AsyncClient(base_url=base, timeout=3600) as client:
        await job(client, "warm.txt", text_file(texts[:20]), args.target)
        ratios = []
        for r in range(args.rounds):
            order = [("book.txt", txt), ("book.docx", docx)][:: 1 if r % 2 == 0 else -1]
            seconds = {name: await job(client, name, data, args.target) for name, data in order}
            ratios.append(seconds["book.txt"] / seconds["book.docx"])
            print(json.dumps({"round": r, **{k: round(v, 2) for k, v in seconds.items()}}), flush=True)
        print(json.dumps({"docx_speed_over_text": round(statistics.median(ratios), 3),
                          "rounds": [round(x, 3) for x in ratios], "goal_at_least": 0.9}), flush=True)  # fmt: skip

        alone = await interactive(client, sentences, args.clients, args.requests)
        job_id = await upload(client, "book.docx", docx, args.target)
        while (await status(client, job_id))["status"] == "queued":
            await asyncio.sleep(0.01)
        beside = await interactive(client, sentences, args.clients, args.requests)
        during = (await status(client, job_id))["status"] == "running"  # the job outlasted the requests
        await finish(client, job_id)
        out = {"clients": args.clients, "requests": args.requests, "job_ran_throughout": during}
        for name, values in (("alone", alone), ("beside_job", beside)):
            out[name] = {"p50_ms": round(percentile(values, 50), 1), "p99_ms": round(percentile(values, 99), 1)}
        out["p99_ratio"] = round(out["beside_job"]["p99_ms"] / out["alone"]["p99_ms"], 3)
        out["goal_at_most"] = 1.5
        print(json.dumps(out), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", action="append", required=True, help="English sentences, one a line (gzip or not)")
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--target", default="de")
    p.add_argument("--pages", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", type=int, default=4, help="interactive loops, one request in flight each")
    p.add_argument("--requests", type=int, default=400, help="interactive requests alone, and as many beside the job")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    print(cpu_description(), flush=True)
    with tempfile.TemporaryDirectory(prefix="nmt-bench-jobs-") as jobs, eager_server(
        args.model_dir, args.threads, NMT_JOB_DIR=jobs
    ) as server:  # fmt: skip
        asyncio.run(run(args, server.base))


if __name__ == "__main__":
    main()
