"""Fairness: one-sentence requests alone and beside a client that keeps sending requests of many tiny sentences.

    python bench/fairness.py [--requests 200] [--clients 4] [--big-sentences 0] [--rounds 5] [--fifo]

Starts `nmt-serve` (the bundled checkpoint by default, NMT_COMPILE=off, a free port on 127.0.0.1) and sends
--requests one-sentence requests from --clients clients, one request in flight each, alone, and as many beside a
client that keeps one big request in flight ("A dog runs." --big-sentences times; 0: the server's
NMT_MAX_REQUEST_SEQUENCES, the most one request may have); the two take turns, a --rounds'th of the requests at a
time, after a warm-up. Prints p50/p99 latency of both, the ratio p99 beside / p99 alone (overall, and the median of
the rounds' ratios, which a burst of other work on the cores moves less), the 429s, and how many big requests were
answered meanwhile. With --fifo a second server, whose waiting line is first come first served as admission was
before requests took turns (patched in at start-up by this script: the product has no such switch), takes its turns
in the same rounds, and the two are printed side by side. Other NMT_* variables in the environment reach the servers
(e.g. NMT_MAX_BATCH_SIZE). The whole measurement is bounded by --timeout seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, cpu_description
from bench.load import RawConnection, percentile
from bench.server import Server, eager_server

BIG_SENTENCE = "A dog runs."
SENTENCES = [
    "A man is riding a bike.", "Two girls are playing in the park.", "A dog runs near the water.",
    "An old man is standing in the snow.", "A woman walks down a busy street.", "Three people eat at a table.",
    "The boy is jumping at the beach.", "A child in a red coat is climbing a tree.",
]  # fmt: skip
FIFO_SERVER = """
import sys
from app.engine.waiting import WaitingLine
append, one = WaitingLine.append, object()
def first_come_first_served(self, seq):
    seq.request = one
    append(self, seq)
WaitingLine.append = first_come_first_served
from app.cli import main
main(sys.argv[1:])
"""  # nmt-serve whose every sequence is part of one request: its waiting line is one first-come-first-served queue


@dataclass
class Tally:
    """What one condition's requests got back, over its rounds."""

    latencies: list[float] = field(default_factory=list)  # seconds, of the one-sentence requests answered 200
    p99s: list[float] = field(default_factory=list)  # of each round's
    statuses: Counter = field(default_factory=Counter)
    big_latencies: list[float] = field(default_factory=list)
    big_statuses: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def row(self) -> dict:
        s = self.statuses
        out = {"requests": s.total(), "ok": s[200], "429": s[429], "other_errors": s.total() - s[200] - s[429],
               "seconds": round(self.seconds, 2), "p50_ms": ms(self.latencies, 50),
               "p99_ms": ms(self.latencies, 99)}  # fmt: skip
        if self.big_statuses:
            out |= {"big_answered": self.big_statuses[200], "big_429": self.big_statuses[429],
                    "big_p50_ms": ms(self.big_latencies, 50)}  # fmt: skip
        return out


def ms(latencies: list[float], q: float) -> float | None:
    return round(1000 * percentile(latencies, q), 1) if latencies else None


async def phase(server: Server, requests: int, clients: int, big: str | None, tally: Tally) -> None:
    """`requests` one-sentence requests from `clients` clients, beside a client that keeps `big` in flight if given."""
    sent, first = 0, len(tally.latencies)

    async def timed(conn: RawConnection, text: str, statuses: Counter, latencies: list[float]) -> None:
        t0 = time.perf_counter()
        status, _ = await conn.post("/translate", {"text": text})
        statuses[status] += 1
        if status == 200:
            latencies.append(time.perf_counter() - t0)

    async def small_client() -> None:
        nonlocal sent
        conn = await RawConnection.open(server.base)
        try:
            while sent < requests:
                text, sent = SENTENCES[sent % len(SENTENCES)], sent + 1
                await timed(conn, text, tally.statuses, tally.latencies)
        finally:
            conn.close()

    async def big_client() -> None:
        conn = await RawConnection.open(server.base)
        try:
            while True:
                await timed(conn, big, tally.big_statuses, tally.big_latencies)
        finally:
            conn.close()  # cancelled: the server drops the big request's sequences

    beside, answered = asyncio.create_task(big_client()) if big else None, tally.big_statuses.total()
    try:
        while (
            beside is not None and tally.big_statuses.total() == answered and not await asyncio.to_thread(server.gauges)
        ):
            await asyncio.sleep(0.01)  # until the first big request is in the engine (or was answered)
        t0 = time.perf_counter()
        await asyncio.gather(*(small_client() for _ in range(clients)))
        tally.seconds += time.perf_counter() - t0
        tally.p99s.append(percentile(tally.latencies[first:], 99) if len(tally.latencies) > first else math.nan)
    finally:
        if beside is not None:
            beside.cancel()
            await asyncio.gather(beside, return_exceptions=True)
    while await asyncio.to_thread(server.gauges):  # the cancelled big request's sequences leave
        await asyncio.sleep(0.01)


async def rounds(
    servers: dict[str, Server], bigs: dict[str, str], args: argparse.Namespace
) -> dict[str, dict[str, Tally]]:
    """Each server alone and beside the big client, taking turns for --rounds rounds so that drift falls on all."""
    tallies = {name: {"alone": Tally(), "beside": Tally()} for name in servers}
    for name, server in servers.items():  # warm-up, not counted: the first requests of a fresh process are slow
        await phase(server, args.clients, args.clients, bigs[name], Tally())
    for r in range(args.rounds):
        share = args.requests // args.rounds + (r < args.requests % args.rounds)
        for name, server in servers.items():
            await phase(server, share, args.clients, None, tallies[name]["alone"])
            await phase(server, share, args.clients, bigs[name], tallies[name]["beside"])
    return tallies


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--threads", type=int, default=2, help="the server's OMP_NUM_THREADS")
    p.add_argument("--requests", type=int, default=200, help="one-sentence requests alone, and as many beside")
    p.add_argument("--clients", type=int, default=4, help="clients sending them, one request in flight each")
    p.add_argument("--big-sentences", type=int, default=0, help="sentences of each big request (0: the request limit)")
    p.add_argument("--rounds", type=int, default=5, help="rounds the conditions take turns in")
    p.add_argument("--fifo", action="store_true", help="also a server whose admission is first come first served")
    p.add_argument("--timeout", type=float, default=900, help="seconds the measurement may take")
    args = p.parse_args(argv)
    if min(args.requests, args.clients, args.rounds) < 1 or args.big_sentences < 0 or args.rounds > args.requests:
        p.error("--requests, --clients and --rounds must be at least 1 (rounds at most requests), --big-sentences "
                "at least 0")  # fmt: skip
    t0 = time.monotonic()
    with ExitStack() as stack:
        servers = {"turns": stack.enter_context(eager_server(args.model_dir, args.threads))}
        if args.fifo:
            servers["fifo"] = stack.enter_context(eager_server(args.model_dir, args.threads, script=FIFO_SERVER))
        limits = {name: httpx.get(f"{s.base}/info", timeout=10).json()["limits"] for name, s in servers.items()}
        sizes = {name: args.big_sentences or limits[name]["max_request_sequences"] for name in servers}
        bigs = {name: " ".join([BIG_SENTENCE] * n) for name, n in sizes.items()}
        try:
            tallies = asyncio.run(asyncio.wait_for(rounds(servers, bigs, args), args.timeout))
        except TimeoutError:
            sys.exit(f"the measurement took over --timeout {args.timeout:g} s")
    results = {}
    for name, tally in tallies.items():
        alone, beside = tally["alone"].row(), tally["beside"].row()
        ratio = round(beside["p99_ms"] / alone["p99_ms"], 2) if beside["p99_ms"] and alone["p99_ms"] else None
        per_round = [b / a for a, b in zip(tally["alone"].p99s, tally["beside"].p99s, strict=True)]
        median = round(statistics.median(per_round), 2)
        results[name] = {"limits": limits[name], "big_sentences": sizes[name], "alone": alone, "beside": beside,
                         "p99_beside_over_alone": ratio, "median_round_p99_ratio": median,
                         "round_p99_ratios": [round(r, 2) for r in per_round]}  # fmt: skip
        for label, row in (("alone", alone), ("beside", beside)):
            big = (f"; big requests of {sizes[name]} sentences answered {row['big_answered']} (p50 "
                   f"{row['big_p50_ms']} ms), 429 {row['big_429']}") if label == "beside" else ""  # fmt: skip
            print(f"{name:<5} {label:<6} {row['ok']}/{row['requests']} ok in {row['seconds']} s, p50 "
                  f"{row['p50_ms']} ms, p99 {row['p99_ms']} ms, 429 {row['429']}, other errors {row['other_errors']}"
                  f"{big}", flush=True)  # fmt: skip
        print(f"{name:<5} p99 beside / p99 alone: {beside['p99_ms']} / {alone['p99_ms']} ms = {ratio}x; each round's: "
              f"{', '.join(f'{r:.2f}' for r in per_round)}, median {median}x", flush=True)  # fmt: skip
    if args.fifo:
        turns, fifo = results["turns"], results["fifo"]
        print(f"p99 beside / alone: requests taking turns {turns['p99_beside_over_alone']}x (median of rounds "
              f"{turns['median_round_p99_ratio']}x), first come first served {fifo['p99_beside_over_alone']}x (median "
              f"of rounds {fifo['median_round_p99_ratio']}x)")  # fmt: skip
    cpu = cpu_description()
    print(f"CPU: {cpu}")
    print(json.dumps({"results": results, "requests": args.requests, "clients": args.clients, "rounds": args.rounds,
                      "cpu": cpu, "model_dir": args.model_dir,
                      "seconds": round(time.monotonic() - t0, 1)}))  # fmt: skip


if __name__ == "__main__":
    main()
