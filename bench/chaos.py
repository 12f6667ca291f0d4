"""Chaos: faults under load against a real nmt-serve on loopback, counting what every client got back.

    python bench/chaos.py [--model-dir DIR] [--in-flight 64] [--streams 200] [--rounds 2] [--idle 10000]

Starts `nmt-serve` (the bundled checkpoint by default, NMT_COMPILE=off, a free port on 127.0.0.1) and runs:
- sigterm: --in-flight requests, each on its own connection, all of them in the engine (4 rows decoding, so that they
  stay in flight), then SIGTERM; new connections must be refused while they drain, each must get its 200 with the
  translation it gets alone, and the process must exit 0. A new server is started for the rest.
- disconnects: --rounds of --streams SSE streams opened together, each closed (FIN) or reset (RST) after its head,
  its first event or its second; the queue and batch gauges must return to 0; the server's RSS before and after.
- idle: --idle connections opened and left idle (as many as RLIMIT_NOFILE allows; the line says how many), a fresh
  connection translates, then each idle one asks GET /health, then a fresh one translates again.
- pipelining: 50 connections each writing a translation, GET /health and a /tokenize back to back: answered in order.
- http: request heads over 64 KB (431), chunked bodies (200, and 413 over 1 MB), a body without a length (422 for
  the empty POST, then 400 for the bytes after it), 100 slowloris heads trickled for 3 s while fresh connections
  translate, then completed (200).
- hostile: tests/app/hostile.py's LIVE bodies (when the tests are importable; a few of them otherwise), each
  followed by a translation on the same connection.
- hostile-structure: bench/hostile_shapes.py's corpus (markup nested thousands deep, `<br>` storms, many tiny
  sentences, one huge sentence, forms, ids past the vocabulary, at the default limits, and malformed variants) sent
  by two clients at once, each followed by a translation on the same connection: each must get its documented status
  (200, or the 413/422/400 the corpus names) and the translation what it gets alone; the gauges return to 0.
- kill-9: --in-flight plain requests and a quarter as many streams on a server of 8 rows; once the first answers
  are in and streams are under way, SIGKILL. What was answered must be whole; what was in flight may only see its
  connection cut. The server is restarted on the same port and every cut request sent again: each must get what it
  gets alone, and the checkpoint's files must be unchanged.
- step-fault: a server whose decoder step raises once when a trigger file appears (patched in at start-up, the
  product has no such switch). Streams and plain requests share the batch, the trigger is set, more requests
  arrive: the requests in that step get a JSON 500 `model_error` (a stream: its tokens so far, then an error event),
  every other one what it gets alone; the gauges return to 0 and the server goes on.
- head-timeout: on that server, NMT_HEAD_TIMEOUT_S=2: connections stopped half-way through a head get a JSON 408
  and are closed, silent ones are closed, heads trickled in time are answered, fresh connections translate.

Each scenario prints one line: requests sent, answered (200 with the expected body), errors by kind (a status with
a JSON `{"error", "type"}` body, or a refused connection), unexpected (a response other than the one the scenario
expects) and lost = sent - answered - errors: no answer, a cut-short or wrong body, a hang. Then the CPU and one JSON
line with everything. Exits 1 if anything was lost or unexpected. Takes about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import resource
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, cpu_description
from bench.server import HOST, Server, eager_server

TEXT = "A man is riding a bike."
STREAMED = "Two young men are playing football in a park. A dog runs after the ball."
TIMEOUT = 60  # seconds a client waits for an answer before counting it lost
BUNDLED_HOSTILE = [  # (path, body, content type, status): used when tests/app/hostile.py cannot be imported
    ("/translate", b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}", "application/json", 422),
    ("/translate", b'{"text": "\\ud800 dog </s>"}', "application/json", 200),
    ("/tokenize", b'{"text": "\xff"}', "application/json", 422),
    ("/translate", b'{"text": "a"}', "text/plain", 422),
]
CUT, FAILED_EVENT, SILENT_CLOSED = "cut by kill -9", "model_error event", "closed, nothing sent"
ERROR_KINDS = ("refused", CUT, FAILED_EVENT, SILENT_CLOSED)  # outcomes that are answers a client can act on
FAULTY_SERVER = """
import os, sys
from pathlib import Path
from model.transformer import Transformer
trigger, decode_greedy = Path(os.environ["NMT_CHAOS_FAULT_FILE"]), Transformer.decode_greedy
def failing_once(self, tokens, cache):
    if trigger.exists():
        trigger.unlink(missing_ok=True)
        raise RuntimeError("injected fault (bench/chaos.py)")
    return decode_greedy(self, tokens, cache)
Transformer.decode_greedy = failing_once
from app.cli import main
main(sys.argv[1:])
"""  # nmt-serve whose decoder step raises once, at the first step after the trigger file appears


@dataclass
class Tally:
    """What one scenario's clients got back."""

    name: str
    sent: int = 0
    answered: int = 0
    errors: Counter = field(default_factory=Counter)
    lost_kinds: Counter = field(default_factory=Counter)
    unexpected: int = 0
    notes: dict = field(default_factory=dict)

    def count(self, outcome: str | int, expected: str | int = 200) -> None:
        """One request's outcome: 200 (its expected body), another status (a JSON error), one of ERROR_KINDS, or a
        kind of loss ("closed", "timeout", "wrong body", "<status> not JSON")."""
        self.sent += 1
        if outcome == 200:
            self.answered += 1
        elif isinstance(outcome, int) or outcome in ERROR_KINDS:
            self.errors[str(outcome)] += 1
        else:
            self.lost_kinds[outcome] += 1
        self.unexpected += outcome != expected

    @property
    def lost(self) -> int:
        return self.sent - self.answered - sum(self.errors.values())

    def line(self) -> str:
        errors = ", ".join(f"{k} x{v}" for k, v in sorted(self.errors.items())) or "none"
        lost = f"{self.lost}" + (
            f" ({', '.join(f'{k} x{v}' for k, v in self.lost_kinds.items())})" if self.lost else ""
        )
        notes = "; ".join(f"{k} {v}" for k, v in self.notes.items())
        return (f"{self.name:<12} sent {self.sent:>6}  answered {self.answered:>6}  errors {errors}  "
                f"unexpected {self.unexpected}  lost {lost}" + (f"  [{notes}]" if notes else ""))  # fmt: skip

    def summary(self) -> dict:
        return {"sent": self.sent, "answered": self.answered, "errors": dict(self.errors), "lost": self.lost,
                "lost_kinds": dict(self.lost_kinds), "unexpected": self.unexpected, **self.notes}  # fmt: skip


# ---- raw HTTP/1.1 ------------------------------------------------------------------------------------------------


def post(path: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: nmt\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), content_type.encode(), len(body), body))  # fmt: skip


GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: nmt\r\n\r\n"
CHUNKED_HEAD = (
    b"POST /translate HTTP/1.1\r\nHost: nmt\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunked(body: bytes, size: int) -> bytes:
    pieces = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(pieces) + b"0\r\n\r\n"


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one response."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(await reader.readline() or b"-", 16):  # "-": the connection ended mid-body (ValueError)
            body += await reader.readexactly(size + 2)
            body = body[:-2]
        await reader.readline()
    else:
        body = await reader.read()
    return int(lines[0].split()[1]), body


def outcome(status: int, body: bytes, expected_body: bytes | None = None) -> int | str:
    """200 with the expected body (when one is given), another status with a JSON error, or how it was lost."""
    if status == 200:
        return 200 if expected_body is None or body == expected_body else "wrong body"
    try:
        return status if set(json.loads(body)) == {"error", "type"} else f"{status} not JSON"
    except ValueError:
        return f"{status} not JSON"


async def exchange(port: int, *requests: bytes, expected: list[bytes | None] | None = None) -> list[int | str]:
    """Write the requests back to back on one new connection; the outcome of each, in order."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except ConnectionRefusedError:
        return ["refused"] * len(requests)
    out: list[int | str] = []
    try:
        writer.write(b"".join(requests))
        async with asyncio.timeout(TIMEOUT):
            for i in range(len(requests)):
                out.append(outcome(*await read_response(reader), (expected or [None] * len(requests))[i]))
    except TimeoutError:
        out += ["timeout"] * (len(requests) - len(out))
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        out += ["closed"] * (len(requests) - len(out))
    finally:
        writer.close()
    return out


async def solo(port: int, request: bytes) -> bytes:
    """The body a request gets alone (what it must get under load too)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(request)
    status, body = await read_response(reader)
    writer.close()
    assert status == 200, body
    return body


# ---- the scenarios -------------------------------------------------------------------------------------------------


async def sigterm(server: Server, n: int) -> Tally:
    t = Tally("sigterm")
    request = post("/translate", json.dumps({"text": TEXT}).encode())
    expected = await solo(server.port, request)
    clients = [asyncio.create_task(exchange(server.port, request, expected=[expected])) for _ in range(n)]
    while await asyncio.to_thread(server.gauges) + sum(c.done() for c in clients) < n:  # until all are accepted:
        await asyncio.sleep(0.02)  # each request answered or in the engine
    server.proc.send_signal(signal.SIGTERM)
    while True:  # new connections refused while the requests drain
        try:
            _, writer = await asyncio.open_connection(HOST, server.port)
            writer.close()
            await asyncio.sleep(0.02)
        except ConnectionRefusedError:
            break
    t.notes["unanswered when refused"] = sum(not c.done() for c in clients)
    for c in clients:
        t.count((await c)[0])
    t.notes["exit code"] = await asyncio.to_thread(server.proc.wait, 60)
    t.unexpected += t.notes["exit code"] != 0
    return t


async def leave_mid_stream(port: int, events: int, abort: bool) -> int | str:
    body = json.dumps({"text": STREAMED, "stream": True, "split": "none"}).encode()
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(post("/translate", body))
        async with asyncio.timeout(TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
            seen = b""
            while seen.count(b"data: ") < events and (chunk := await reader.read(4096)):
                seen += chunk
    except TimeoutError:
        return "timeout"
    except (ConnectionError, asyncio.IncompleteReadError):
        return "closed"
    writer.transport.abort() if abort else writer.close()
    return int(head.split()[1])


async def disconnects(server: Server, streams: int, rounds: int) -> Tally:
    t = Tally("disconnects")
    rss = [server.rss_mb()]
    for _ in range(rounds):
        for result in await asyncio.gather(*(leave_mid_stream(server.port, i % 3, i % 2 == 1) for i in range(streams))):
            t.count(result)
        deadline = time.monotonic() + 30
        while (left := server.gauges()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        t.notes["queue+batch after"] = left
        t.unexpected += left != 0
        rss.append(server.rss_mb())
    t.notes["RSS MB"] = " -> ".join(f"{r:.0f}" for r in rss)
    return t


def more_files(wanted: int) -> int:
    """Raise RLIMIT_NOFILE's soft limit towards `wanted` (up to the hard limit) for this process and the servers it
    starts; the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


async def idle(server: Server, wanted: int) -> Tally:
    t = Tally("idle")
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    n = max(0, min(wanted, limit - 1_000))
    request = post("/translate", json.dumps({"text": TEXT}).encode())
    expected = await solo(server.port, request)
    socks = []
    try:
        for _ in range(n):
            socks.append(socket.create_connection((HOST, server.port), timeout=30))
        deadline = time.monotonic() + 30
        while (held := server.connections_held(socks)) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        t.notes["connections held"] = f"{held} of {n} (RLIMIT_NOFILE {limit})"
        t.unexpected += held < n
        for result in await asyncio.gather(*(exchange(server.port, request, expected=[expected]) for _ in range(5))):
            t.count(*result)
        for s in socks:
            s.sendall(GET_HEALTH)
        for s in socks:
            s.settimeout(TIMEOUT)
            with s.makefile("rb") as f:
                status_line = f.readline()
                t.count(int(status_line.split()[1]) if status_line else "closed")
        for result in await asyncio.gather(*(exchange(server.port, request, expected=[expected]) for _ in range(5))):
            t.count(*result)
    finally:
        for s in socks:
            s.close()
    return t


async def pipelining(server: Server, connections: int = 50) -> Tally:
    t = Tally("pipelining")
    requests = [post("/translate", json.dumps({"text": TEXT}).encode()), GET_HEALTH,
                post("/tokenize", b'{"text": "A dog."}')]  # fmt: skip
    expected = [await solo(server.port, r) for r in requests]
    for results in await asyncio.gather(*(exchange(server.port, *requests, expected=expected)
                                          for _ in range(connections))):  # fmt: skip
        for result in results:
            t.count(result)
    return t


async def slowloris(server: Server, t: Tally, connections: int = 100, steps: int = 10) -> None:
    """Heads sent a header every 0.3 s while fresh connections translate, then completed: all answered."""
    slow = [await asyncio.open_connection(HOST, server.port) for _ in range(connections)]
    request = post("/translate", json.dumps({"text": TEXT}).encode())
    for _, w in slow:
        w.write(b"GET /health HTTP/1.1\r\nHost: nmt\r\n")
    for i in range(steps):
        for _, w in slow:
            w.write(b"X-Slow-%d: %s\r\n" % (i, b"z" * 100))
        t.count((await exchange(server.port, request))[0])
        await asyncio.sleep(0.3)
    for _, w in slow:
        w.write(b"\r\n")
    for r, w in slow:
        try:
            async with asyncio.timeout(TIMEOUT):
                t.count(outcome(*await read_response(r)))
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError) as e:
            t.count("timeout" if isinstance(e, TimeoutError) else "closed")
        w.close()


async def http_edges(server: Server, repeat: int = 10) -> Tally:
    t = Tally("http")
    valid = json.dumps({"text": TEXT}).encode()
    expected = await solo(server.port, post("/translate", valid))
    big_header = b"GET /health HTTP/1.1\r\nHost: nmt\r\nX-Big: " + b"x" * 100_000 + b"\r\n\r\n"
    cases = [  # (requests written at once, the status each must get)
        ([big_header], [431]),
        ([b"GET /health?" + b"q" * 100_000 + b" HTTP/1.1\r\nHost: nmt\r\n\r\n"], [431]),
        ([CHUNKED_HEAD + chunked(valid, 7), GET_HEALTH], [200, 200]),
        ([CHUNKED_HEAD + chunked(json.dumps({"text": "a " * (1 << 20)}).encode(), 65536), GET_HEALTH], [413, 200]),
    ]
    for _ in range(repeat):
        for requests, statuses in cases:
            bodies = [expected if r.startswith(CHUNKED_HEAD) and s == 200 else None for r, s in zip(requests, statuses)]
            for result, status in zip(await exchange(server.port, *requests, expected=bodies), statuses):
                t.count(result, status)
        # a body without a length: the POST is read as empty (422), the bytes after it are not a request (400)
        no_length = b"POST /translate HTTP/1.1\r\nHost: nmt\r\nContent-Type: application/json\r\n\r\n"
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(no_length)
        t.count(outcome(*await read_response(reader)), 422)
        writer.write(valid)
        t.count(outcome(*await read_response(reader)), 400)
        writer.close()
    await slowloris(server, t)
    return t


def hostile_bodies() -> tuple[list, str]:
    try:
        from tests.app.hostile import LIVE

        return LIVE, "tests/app/hostile.py LIVE"
    except ImportError:  # the tests are not there
        return BUNDLED_HOSTILE, "bench/chaos.py's own list"


async def hostile(server: Server, repeat: int = 5) -> Tally:
    t = Tally("hostile")
    bodies, source = hostile_bodies()
    t.notes["bodies"] = f"{len(bodies)} from {source}"
    then = post("/translate", json.dumps({"text": TEXT}).encode())
    expected = await solo(server.port, then)

    async def one(path: str, body: bytes, content_type: str, status: int) -> None:
        first, second = await exchange(server.port, post(path, body, content_type), then, expected=[None, expected])
        t.count(first, status)
        t.count(second)

    await asyncio.gather(*(one(*case) for _ in range(repeat) for case in bodies))
    return t


async def hostile_structure(server: Server, clients: int = 2) -> Tally:
    """bench/hostile_shapes.py's corpus: the hardest shapes of markup, documents, forms and ids at the limits, and
    their malformed variants, sent by `clients` clients at once (each the whole corpus, in its own order; two fill
    the queue with their sequences at most, so none gets a 429), each followed by a translation on the same
    connection."""
    from bench.hostile_shapes import corpus

    t = Tally("hostile-structure")
    cases = corpus()
    t.notes["bodies"] = f"{len(cases)} from bench/hostile_shapes.py"
    then = post("/translate", json.dumps({"text": TEXT}).encode())
    expected = await solo(server.port, then)

    async def client(order: list) -> None:
        for _, path, body, content_type, status in order:
            first, second = await exchange(
                server.port, post(path, body, content_type), then, expected=[None, expected]
            )  # fmt: skip
            t.count(first, status)
            t.count(second)

    starts = [i * len(cases) // clients for i in range(clients)]
    await asyncio.gather(*(client(cases[i:] + cases[:i]) for i in starts))
    t.notes["queue+batch after"] = left = server.gauges()
    t.unexpected += left != 0
    return t


async def fetch(port: int, request: bytes) -> tuple[int, bytes] | str:
    """(status, body) of one request on a new connection, or how it was lost ("refused", "closed", "timeout")."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except ConnectionRefusedError:
        return "refused"
    try:
        writer.write(request)
        async with asyncio.timeout(TIMEOUT):
            return await read_response(reader)
    except TimeoutError:
        return "timeout"
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return "closed"
    finally:
        writer.close()


def digests(directory: str) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(directory).iterdir()) if p.is_file()
    }


async def kill9(model_dir: str, threads: int, n: int) -> Tally:
    t = Tally("kill-9")
    before = digests(model_dir)
    kinds = [post("/translate", json.dumps({"text": text}).encode()) for text in (TEXT, STREAMED)]
    kinds.append(post("/translate", json.dumps({"text": STREAMED, "stream": True, "split": "none"}).encode()))
    server = eager_server(model_dir, threads, NMT_MAX_BATCH_SIZE="8")
    try:
        expected = {r: await solo(server.port, r) for r in kinds}
        requests = [kinds[i % 2] for i in range(n)] + [kinds[2]] * (n // 4)
        tasks = [asyncio.create_task(exchange(server.port, r, expected=[expected[r]])) for r in requests]
        while sum(task.done() for task in tasks) < 8:  # the first answers are in; the rest decode or wait
            await asyncio.sleep(0.005)
        t.notes["exit"] = await asyncio.to_thread(server.kill)
        results = [(await task)[0] for task in tasks]
    finally:
        server.stop()
    cut = [r for r, result in zip(requests, results) if result == "closed"]
    for result in results:
        t.count(*((CUT, CUT) if result == "closed" else (result, 200)))  # in flight at the kill: cut, as expected
    t.notes["answered before the kill"], t.notes["cut"] = results.count(200), len(cut)
    # on the same port, as a supervisor would restart it
    server = eager_server(model_dir, threads, port=server.port, NMT_MAX_BATCH_SIZE="8")
    try:
        again = await asyncio.gather(*(exchange(server.port, r, expected=[expected[r]]) for r in cut))
    finally:
        server.stop()
    for (result,) in again:
        t.count(result)
    t.notes["answered after the restart"] = sum(result == 200 for (result,) in again)
    t.notes["checkpoint unchanged"] = digests(model_dir) == before
    t.unexpected += (t.notes["exit"] != -signal.SIGKILL) + (not cut) + (not t.notes["checkpoint unchanged"])
    return t


def failed_midway(body: bytes, whole: bytes) -> bool:
    """A stream that ended with a model_error event after a prefix of the events it gets alone."""
    events = [e for e in body.split(b"\n\n") if e]
    if not events or not events[-1].startswith(b"data: "):
        return False
    last = json.loads(events[-1][len(b"data: ") :])
    return last.get("type") == "model_error" and whole.startswith(b"\n\n".join(events[:-1]))


async def step_fault(server: Server, trigger: Path, n: int = 8) -> Tally:
    t = Tally("step-fault")
    plain = post("/translate", json.dumps({"text": STREAMED, "split": "none"}).encode())
    streamed = post("/translate", json.dumps({"text": STREAMED, "split": "none", "stream": True}).encode())
    later = post("/translate", json.dumps({"text": TEXT}).encode())
    expected = {r: await solo(server.port, r) for r in (plain, streamed, later)}
    requests = [plain, streamed] * (n // 2)
    tasks = [asyncio.create_task(fetch(server.port, r)) for r in requests]
    while await asyncio.to_thread(server.gauges, ("nmt_running_batch_size",)) < n:  # all of them decoding
        await asyncio.sleep(0.005)
    trigger.touch()
    while trigger.exists():  # the failing step has begun: what is sent now is not in it
        await asyncio.sleep(0.002)
    requests += [later, streamed, plain] * 2
    tasks += [asyncio.create_task(fetch(server.port, r)) for r in requests[n:]]
    failed = []
    for i, (request, task) in enumerate(zip(requests, tasks)):
        result = await task
        if isinstance(result, str):
            kind = result
        elif result[0] == 200 and result[1] == expected[request]:
            kind = 200
        elif result[0] == 200 and request == streamed and failed_midway(result[1], expected[streamed]):
            kind = FAILED_EVENT
        elif result[0] == 500 and json.loads(result[1]).get("type") == "model_error":
            kind = 500
        else:
            kind = outcome(*result, expected[request])
        failed += [i] if kind in (500, FAILED_EVENT) else []
        t.count(kind, kind if i < n and kind in (500, FAILED_EVENT) else 200)  # only those decoding may fail
    deadline = time.monotonic() + 30
    while (left := server.gauges()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    t.count(*await exchange(server.port, later, expected=[expected[later]]))  # and the server goes on
    t.notes["failed in the faulty step"] = f"{len(failed)} of the {n} decoding"
    t.notes["queue+batch after"] = left
    t.unexpected += trigger.exists() + (not failed) + (left != 0)
    return t


async def head_timeout(server: Server, limit: float, connections: int = 50) -> Tally:
    t = Tally("head-timeout")
    request = post("/translate", json.dumps({"text": TEXT}).encode())
    expected = await solo(server.port, request)
    half = [await asyncio.open_connection(HOST, server.port) for _ in range(connections)]
    silent = [await asyncio.open_connection(HOST, server.port) for _ in range(connections)]
    for _, w in half:
        w.write(b"GET /health HTTP/1.1\r\nHost: nmt\r\n")

    async def trickled() -> int | str:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        for piece in (b"GET /health HTTP/1.1\r\n", b"Host: nmt\r\n", b"X-Slow: 1\r\n", b"\r\n"):
            writer.write(piece)
            await asyncio.sleep(limit / 8)
        result = outcome(*await read_response(reader))
        writer.close()
        return result

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int | str) -> None:
        try:
            async with asyncio.timeout(limit + TIMEOUT):
                t.count(outcome(*await read_response(reader)) if status != SILENT_CLOSED else
                        SILENT_CLOSED if await reader.read() == b"" else "wrong body", status)  # fmt: skip
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError) as e:
            t.count("timeout" if isinstance(e, TimeoutError) else "closed", status)
        writer.close()

    started = time.monotonic()
    for result in await asyncio.gather(*(trickled() for _ in range(connections // 5))):
        t.count(result)
    t.count(*await exchange(server.port, request, expected=[expected]))
    await asyncio.gather(*(answer(r, w, 408) for r, w in half), *(answer(r, w, SILENT_CLOSED) for r, w in silent))
    t.notes["closed after"] = f"{time.monotonic() - started:.1f} s (limit {limit:g} s)"
    t.count(*await exchange(server.port, request, expected=[expected]))
    return t


# ---- the run -----------------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--idle", type=int, default=10_000)
    args = p.parse_args()
    limit = more_files(args.idle + 1_000)
    t0, tallies = time.monotonic(), []

    server = eager_server(args.model_dir, args.threads, NMT_MAX_BATCH_SIZE="4")  # 4 rows: the requests stay in flight
    try:
        tallies.append(asyncio.run(sigterm(server, args.in_flight)))
    finally:
        server.stop()
    print(tallies[-1].line(), flush=True)
    server = eager_server(args.model_dir, args.threads, NMT_HEAD_TIMEOUT_S="600")  # idle holds connections for a while
    try:
        for scenario in (
            lambda: disconnects(server, args.streams, args.rounds), lambda: idle(server, args.idle),
            lambda: pipelining(server), lambda: http_edges(server), lambda: hostile(server),
            lambda: hostile_structure(server),
        ):  # fmt: skip
            tallies.append(asyncio.run(scenario()))
            print(tallies[-1].line(), flush=True)
    finally:
        server.stop()
    tallies.append(asyncio.run(kill9(args.model_dir, args.threads, args.in_flight)))
    print(tallies[-1].line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="nmt-chaos-") as tmp:
        trigger, limit_s = Path(tmp) / "fail-next-step", 2.0
        server = eager_server(args.model_dir, args.threads, script=FAULTY_SERVER, NMT_CHAOS_FAULT_FILE=str(trigger),
                              NMT_HEAD_TIMEOUT_S=str(limit_s))  # fmt: skip
        try:
            for scenario in (lambda: step_fault(server, trigger), lambda: head_timeout(server, limit_s)):
                tallies.append(asyncio.run(scenario()))
                print(tallies[-1].line(), flush=True)
        finally:
            server.stop()

    cpu = cpu_description()
    print(f"CPU: {cpu}")
    bad = sum(t.lost + t.unexpected for t in tallies)
    summary = {"scenarios": {t.name: t.summary() for t in tallies}, "seconds": round(time.monotonic() - t0, 1),
               "rlimit_nofile": limit, "model_dir": args.model_dir, "cpu": cpu, "ok": bad == 0}  # fmt: skip
    print(json.dumps(summary))
    sys.exit(0 if bad == 0 else 1)


if __name__ == "__main__":
    main()
