"""The event loop's CPU time per /translate request, with the model's work stubbed out: what HTTP, routing,
validation, tokenizing and formatting cost the thread that every request passes through.

    python bench/loop_cpu.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--rounds 3] [--concurrency 32]

Runs the real app in process (its lifespan, the bundled checkpoint, eager) and calls it as an ASGI server would,
`--concurrency` requests at a time, with the batcher's `generate` answering at once (each source echoed back as its
translation). So the figure is the loop's own work, free of the decoder's threads competing for the cores. On 2 cores
that work matters beyond its share: a neighbour busy a quarter of the time in half-millisecond bursts halves the rate
of a 2-thread decoder step, because each of the step's parallel regions waits for the thread the neighbour displaced.

Rounds alternate between the collector as the server runs it (what startup loaded frozen out of its reach, see
app/main.py) and as Python leaves it (gc.unfreeze()), and print thread CPU per request for each, and their ratio.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path

from asgi_lifespan import LifespanManager

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.main import create_app
from app.settings import Settings
from bench.common import corpus_arguments, read_sentences
from model.decoding import Hypothesis


async def post(app, path: str, body: bytes) -> int:
    """One request through the ASGI app, as uvicorn would hand it over; returns the status."""
    # Not httpx.ASGITransport: the client's own work per request would run on this thread too and blur the figure.
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"nmt"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    answered, sent, status = asyncio.Event(), False, []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the disconnect watcher waits here until the answer is out
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif not message.get("more_body"):
            answered.set()

    await app(scope, receive, send)
    return status[0]


async def echo(srcs: list[list[int]], budgets: list[int]) -> list[Hypothesis]:
    return [Hypothesis(tokens=src[:-1], logprobs=[-0.1] * len(src), finish_reason="eos") for src in srcs]


async def measure(app, bodies: list[bytes], concurrency: int) -> float:
    """Loop-thread CPU seconds per request over all bodies."""
    gate = asyncio.Semaphore(concurrency)

    async def one(body: bytes) -> int:
        async with gate:
            return await post(app, "/translate", body)

    c0 = time.thread_time()
    statuses = await asyncio.gather(*(one(b) for b in bodies))
    cpu = time.thread_time() - c0
    if set(statuses) != {200}:
        raise SystemExit(f"unexpected statuses: {sorted(set(statuses))}")
    return cpu / len(bodies)


async def main() -> None:
    p = corpus_arguments(__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument(
        "--passes",
        type=int,
        default=3,
        help="passes over the corpus per measurement: a full collection comes only every few thousand requests",
    )
    args = p.parse_args()
    bodies = [json.dumps({"text": s}).encode() for s in read_sentences(args)]
    app = create_app(Settings(model_dir=args.model_dir, compile=False, threads=args.threads))
    async with LifespanManager(app, startup_timeout=300):
        await app.state.loading
        if app.state.engine is None:
            raise SystemExit(f"the model did not load: {app.state.load_error}")
        app.state.engine.core.batcher.generate = echo
        await measure(app, bodies[:100], args.concurrency)  # warm-up
        per = {"frozen": [], "unfrozen": []}
        for r in range(args.rounds):
            for mode in ("frozen", "unfrozen") if r % 2 == 0 else ("unfrozen", "frozen"):
                if mode == "frozen":
                    gc.collect()
                    gc.freeze()
                else:
                    gc.unfreeze()
                per[mode].append(await measure(app, bodies * args.passes, args.concurrency))
        ratios = [u / f for f, u in zip(per["frozen"], per["unfrozen"])]
    print(
        f"{len(bodies) * args.passes} requests per measurement at concurrency {args.concurrency}, {args.rounds} rounds; "
        "loop-thread CPU per request:"
    )
    for mode, values in per.items():
        print(
            f"  {mode:9} {statistics.median(values) * 1e3:.3f} ms "
            f"(rounds {', '.join(f'{v * 1e3:.3f}' for v in values)})"
        )
    print(f"  unfrozen/frozen = {statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    asyncio.run(main())
