"""An EngineCore in another process: the engine process serves its cores over ZeroMQ; front-ends hold RemoteCores.

As vLLM's API servers reach its EngineCore: one engine process owns the models, their KV caches, the running batch
and the compiled graphs (app/engine/core_server.py's `CoreServer`), and each HTTP front-end process does the text
work (app/text/engine.py) through `RemoteCore`s, which have EngineCore's methods, signatures and errors, in token
ids over the messages of app/engine/wire.py. A front-end process has one socket (`Connection`) for all its models:
the requests made at one pass of its event loop leave as one message, and its reader hands each reply to the future
or stream of its request id.

- Streams: the engine forwards a stream's tokens as they come. Everything it has for a front-end at one wake-up (every
  stream's new tokens, each stream's many as one list, and the finished replies) leaves as one message, in order.
- Backpressure: no send on the engine's loop ever waits. Sends are NOBLOCK under explicit high-water marks; a
  front-end whose queue is full (it stopped reading) has its requests cancelled, their rows freed, rather than stall
  the loop that serves the others, and its next message is answered with a "reset" that fails those requests on its
  side. A front-end that went away without its "bye" is found at the first reply that cannot reach it, likewise.
- Capacity: a front-end admits at most its share of the engine's queue (max_queue / frontends, but at least the most
  sequences one request may have, `least_share`: an idle front-end takes any request the limits allow), so
  check_capacity and stream() answer QueueFull at once, with no round trip; the engine stays the final judge, and its
  QueueFull arrives as the call's error, or a stream's `accepted()` raises it (the engine answers a stream it takes
  with an empty "tokens" reply at once): awaited before the stream's response begins, it is still the answer's 429,
  as in one process.
- Cancellation: a caller that gives up (its task cancelled, its stream closed) sends "cancel"; the engine gives the
  request up, which drops its sequences and frees their rows. "bye" cancels all of a front-end's requests.
- Death: the socket's monitor sees the engine's end close (a killed process), and a heartbeat (a "status" every
  heartbeat_s, which also brings the engine's load and facts) sees an engine that stopped answering for timeout_s.
  Either fails every request in flight, and each new one, with EngineUnavailable (a 503) until the engine answers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import zmq
from zmq.utils.monitor import parse_monitor_message

from app.engine import wire
from app.engine.attention import AttentionWeights
from app.engine.errors import EngineUnavailable, QueueFull
from app.engine.metrics import EngineMetrics, Metrics
from app.engine.wire import HWM, Reply, Request
from model.constraints import continues_word
from model.hypothesis import Hypothesis
from model.options import GREEDY, DecodingOptions

log = logging.getLogger("nmt_serve.remote")
SHUTTING_DOWN = "the server is shutting down"


@dataclass(eq=False)
class Pending:
    """A request in flight from a front-end: the future of its answer (and a stream's queue of token ids)."""

    core: str
    future: asyncio.Future
    tokens: asyncio.Queue | None = None  # a stream's ids, then None

    def settle(self, result: Any = None, error: Exception | None = None) -> None:
        if not self.future.done():
            self.future.set_result(result) if error is None else self.future.set_exception(error)
        if self.tokens is not None:
            self.tokens.put_nowait(None)


@dataclass(eq=False)
class RemoteStream(Pending):
    """A stream's token ids as they arrive from the engine, as app/engine/sequence.py's TokenStream."""

    first: asyncio.Future | None = None  # the engine's first reply: "tokens" as it took the stream, or its refusal

    def settle(self, result: Any = None, error: Exception | None = None) -> None:
        super().settle(result, error)  # first: its callbacks (the load it held) run before `accepted` returns
        self.heard(error)

    def heard(self, error: Exception | None = None) -> None:
        """The engine answered: the first answer took the stream, or refused it with `error`."""
        if not self.first.done():
            self.first.set_result(None) if error is None else self.first.set_exception(error)

    async def accepted(self) -> None:
        """Return once the engine took it; raise what it refused it with (its QueueFull). One round trip, not the
        first token's wait."""
        await self.first

    def __aiter__(self) -> RemoteStream:
        return self

    async def __anext__(self) -> int:
        token = await self.tokens.get()
        if token is None:
            raise StopAsyncIteration
        return token

    async def result(self) -> Hypothesis:
        """The finished hypothesis, once the tokens have run out; raises what the sequence failed with."""
        return await self.future

    def close(self) -> None:
        """Drop it if it is unfinished: the cancelled future tells the engine."""
        self.future.cancel()
        self.tokens.put_nowait(None)


class Connection:
    """A front-end process's one socket to the engine process, shared by its RemoteCores (start it on the event loop).
    `status` holds each model's facts as the last heartbeat brought them; `gone` says why requests fail now."""

    def __init__(self, address: str, heartbeat_s: float = 1.0, timeout_s: float = 5.0, hwm: int = HWM):
        wire.check_private(address)
        self.address, self.heartbeat_s, self.timeout_s, self.hwm = address, heartbeat_s, timeout_s, hwm
        self.status: dict[str, dict[str, Any]] = {}
        self.gone: str | None = "the engine process has not answered yet"
        self._pending: dict[int, Pending] = {}
        self._ids = itertools.count(1)
        self._users: set[str] = set()  # the models started on it: the last one to stop closes it
        self._sock: zmq.Socket | None = None
        self._outbox: list[Request] = []  # requests made at this pass of the event loop: they leave as one message

    def start(self, user: str) -> None:
        self._users.add(user)
        if self._sock is not None:
            return
        self._sock = wire.open_socket(zmq.DEALER, self.hwm)
        self._sock.setsockopt(zmq.IMMEDIATE, 1)  # with no engine connected a send fails at once, not queued for it
        self._monitor = self._sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._sock.connect(self.address)
        self._loop = asyncio.get_running_loop()
        self._heard = self._loop.time()
        self._readers = [wire.Reader(self._sock, self._received), wire.Reader(self._monitor, self._watched)]
        self._heartbeat_task = asyncio.create_task(self._heartbeat())

    def stop(self, user: str) -> None:
        """`user` stopped; after the last one, say bye (the engine cancels whatever is left) and close."""
        self._users.discard(user)
        if self._users or self._sock is None:
            return
        self._lose(SHUTTING_DOWN)  # which says bye
        self._flush()
        self._heartbeat_task.cancel()
        for reader in self._readers:
            reader.close()
        self._sock.disable_monitor()
        self._monitor.close()
        self._sock.close(linger=1000)  # time for the bye to leave
        self._sock = None

    def submit(self, core: str, kind: str, args: tuple, stream: bool = False) -> Pending:
        """Send a request now (EngineUnavailable if it cannot leave); its future cancelled sends "cancel"."""
        if self.gone is not None:
            raise EngineUnavailable(self.gone)
        return self._request(Request(next(self._ids), kind, core, args), stream)

    async def refresh(self, timeout: float | None = None) -> dict[str, dict[str, Any]]:
        """Every model's facts, asked now (also while `gone`); EngineUnavailable if the engine does not answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout_s if timeout is None else timeout)
        while loop.time() < deadline:
            try:
                return await asyncio.wait_for(self._ask().future, self.heartbeat_s)
            except (EngineUnavailable, TimeoutError):  # not connected yet, or no answer: ask again
                await asyncio.sleep(0.01)
        raise EngineUnavailable(f"the engine process at {self.address} did not answer")

    async def metrics(self) -> bytes:
        """The engine process's exposition of the series its cores feed (app/engine/metrics.py's ENGINE_FAMILIES)."""
        if self.gone is not None:
            raise EngineUnavailable(self.gone)
        return await asyncio.wait_for(self._request(Request(next(self._ids), "metrics")).future, self.timeout_s)

    def abandon(self, core: str, error: Exception) -> None:
        """Fail `core`'s requests in flight with `error`, and cancel them in the engine."""
        for request_id, p in list(self._pending.items()):
            if p.core == core:
                p.settle(error=error)
                self._send(Request(request_id, "cancel"))

    def _send(self, request: Request) -> None:
        """Queue a request: the requests of one pass of the event loop leave together at its end."""
        if self._sock is None:
            return
        if not self._outbox:
            self._loop.call_soon(self._flush)
        self._outbox.append(request)

    def _flush(self) -> None:
        """Send the queued requests as one message, without waiting; if it cannot leave, fail those still pending."""
        requests, self._outbox = self._outbox, []
        if not requests or self._sock is None:
            return
        if wire.send_now(self._sock, [wire.encode(requests)]) is None:
            self._readers[0].sent()
            return
        error = EngineUnavailable(self.gone or "the engine process is not reachable (or not reading)")
        for request in requests:
            if (p := self._pending.pop(request.id, None)) is not None:
                p.settle(error=error)

    def _request(self, request: Request, stream: bool = False) -> Pending:
        if self._sock is None:  # not started, or stopped: nothing would ever answer it
            raise EngineUnavailable(self.gone or "this front-end's connection to the engine process is closed")
        self._send(request)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if stream:
            p = RemoteStream(request.core, future, asyncio.Queue(), loop.create_future())
            p.first.add_done_callback(seen)
        else:
            p = Pending(request.core, future)
        self._pending[request.id] = p
        future.add_done_callback(partial(self._done, request.id))
        return p

    def _ask(self) -> Pending:
        """A "status" request: its reply refreshes `status` and clears `gone`."""
        return self._request(Request(next(self._ids), "status"))

    def _done(self, request_id: int, future: asyncio.Future) -> None:
        self._pending.pop(request_id, None)
        if future.cancelled():  # the caller gave up: the engine frees its rows
            self._send(Request(request_id, "cancel"))
        else:
            seen(future)

    def _lose(self, why: str) -> None:
        """The engine is gone (or not answering): fail everything in flight; refuse new requests until it answers."""
        if self.gone is None and why != SHUTTING_DOWN:
            log.error("%s: failing %d request(s) in flight", why, len(self._pending))
        self.gone = why
        self._send(Request(0, "bye"))  # if it is only slow, it drops what nobody waits for any more
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.settle(error=EngineUnavailable(why))

    def _received(self, frames: list[bytes]) -> None:
        self._heard = self._loop.time()
        for reply in wire.decode(frames[0]):
            self._dispatch(reply)

    def _dispatch(self, reply: Reply) -> None:
        if reply.kind == "reset":
            why = "the engine process dropped this front-end's requests: it did not read their replies in time"
            for request_id in [i for i in self._pending if i < reply.id]:
                self._pending.pop(request_id).settle(error=EngineUnavailable(why))
            return
        if reply.kind == "status":
            self.status, self.gone = reply.payload, None
        p = self._pending.get(reply.id)
        if p is None:  # cancelled or failed here already
            return
        if reply.kind == "tokens":
            for token in reply.payload:
                p.tokens.put_nowait(token)
            p.heard()
        elif reply.kind == "error":
            p.settle(error=wire.raised(reply.payload))
        else:
            p.settle(reply.payload)

    def _watched(self, frames: list[bytes]) -> None:
        if parse_monitor_message(frames)["event"] == zmq.EVENT_DISCONNECTED:
            self._lose("the engine process is gone: its connection closed")

    async def _heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            slept = loop.time()
            await asyncio.sleep(self.heartbeat_s)
            if loop.time() - slept > 2 * self.heartbeat_s:  # this process was not running (stopped, starved): the
                self._heard = max(self._heard, loop.time() - self.heartbeat_s)  # silence is its own; replies may wait
            if loop.time() - self._heard > self.timeout_s:
                self._lose(f"the engine process is gone: it has not answered for {self.timeout_s:g} s")
            with suppress(EngineUnavailable):  # not connected: the monitor or the silence tells
                self._ask()


def seen(future: asyncio.Future) -> None:
    """A failure nobody awaits any more (a heartbeat's, a closed stream's) is no error."""
    if not future.cancelled():
        future.exception()


def reported(key: str, doc: str) -> property:
    """A RemoteCore's fact, as the engine reported it with its last status."""
    return property(lambda self: self._facts()[key], doc=doc)


class RemoteCore:
    """EngineCore's interface for one model of the engine process, in a front-end process (see the module's docstring).
    Its facts (rows, config, info, memory, ...) are the engine's as of the last heartbeat. It has no tensors: what it
    sends and receives is ids, lists and plain dataclasses, and this process never imports torch."""

    def __init__(self, connection: Connection, name: str, frontends: int = 1, metrics: EngineMetrics | None = None):
        self.connection, self.name, self.frontends = connection, name, frontends
        self.metrics = metrics or Metrics().engine(name)  # the front-end's (confidence); the model's are the engine's
        self.load = 0  # this front-end's sequences in flight: what its share of the queue bounds
        self.least_share = 1  # the share's floor: the most sequences one request may have (app/loading.py sets it)
        self._stopped = False

    def start(self) -> None:
        """Open the process's connection (on the event loop), if no other model has."""
        self.connection.start(self.name)

    async def before_ready(self) -> None:
        """Wait until the engine process answers, however long it takes to start, and check it serves this model."""
        await self.connection.refresh(timeout=math.inf)
        self._facts()

    def after_ready(self) -> None:
        """Nothing: compiling is the engine process's."""

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new work and fail this model's requests in flight (the engine drops them); the engine runs on."""
        self._stopped = True
        self.connection.abandon(self.name, EngineUnavailable(SHUTTING_DOWN))
        self.connection.stop(self.name)

    @property
    def stopped(self) -> bool:
        return self._stopped or self.connection.status.get(self.name, {}).get("stopped", False)

    @property
    def unavailable(self) -> str | None:
        """Why the engine process cannot be reached now (gone, or not answering), or None."""
        return self.connection.gone

    def precompile(self):
        raise RuntimeError("precompile runs in the engine process, which owns the model, not in a front-end")

    async def generate(
        self, srcs: list[list[int]], budgets: list[int], start: tuple[int, ...] = ()
    ) -> list[Hypothesis]:
        return await self._submit("generate", (srcs, budgets, start), len(srcs)).future if srcs else []

    async def search(
        self, srcs: list[list[int]], budgets: list[int], options: DecodingOptions | list[DecodingOptions]
    ) -> list[list[Hypothesis]]:
        return await self._submit("search", (srcs, budgets, options), len(srcs)).future if srcs else []

    def stream(
        self, src: list[int], budget: int, options: DecodingOptions = GREEDY, request: object | None = None
    ) -> RemoteStream:
        """Submitted now (this front-end's QueueFull or EngineUnavailable raised here; the engine's arrive as the
        stream's error). `request` travels as its id(): it is alive, so its id is its own, while its streams are."""
        return self._submit("stream", (src, budget, options, None if request is None else id(request)), 1, True)

    def check_capacity(self, n: int) -> None:
        """Raise QueueFull if `n` more sequences would not fit in this front-end's share of the engine's queue."""
        if self.load + n > self.max_queue:
            raise QueueFull(
                f"the server is busy: {self.load} sequences are waiting or decoding and this request adds {n}; "
                f"the limit is {self.max_queue} (this front-end's share of NMT_MAX_QUEUE, {self.queue_size}, among "
                f"{self.frontends}). Retry in a moment"
            )

    async def align(
        self, srcs: list[list[int]], targets: list[list[list[int]]], start: tuple[int, ...] = ()
    ) -> list[list[list[int]]]:
        return await self._submit("align", (srcs, targets, start)).future

    async def attention(
        self, src: list[int], tgt: list[int], layers: list[int], heads: list[int], average_heads: bool,
        start: tuple[int, ...] = (),
    ) -> AttentionWeights:  # fmt: skip
        return await self._submit("attention", (src, tgt, layers, heads, average_heads, start)).future

    async def word_continuations(self, pieces: list[str]) -> np.ndarray:
        """(V,) as EngineCore's, made here as an array (no torch here, and no round trip): the engine process turns
        it into a tensor on its device (core_server.py's `placed`)."""
        return np.array(list(map(continues_word, pieces)), dtype=bool)

    def _submit(self, kind: str, args: tuple, n: int = 0, stream: bool = False) -> Any:
        if self._stopped:
            raise EngineUnavailable(SHUTTING_DOWN)
        if n:
            self.check_capacity(n)
        p = self.connection.submit(self.name, kind, args, stream)
        self.load += n
        p.future.add_done_callback(lambda _: setattr(self, "load", self.load - n))
        return p

    def _facts(self) -> dict[str, Any]:
        facts = self.connection.status.get(self.name)
        if facts is None:
            raise EngineUnavailable(f"the engine process has not reported model {self.name!r}: it is not serving it")
        return facts

    compiled = reported("compiled", "Whether the compiled graphs serve (in the engine process).")
    graphs_at_start = reported("graphs_at_start", "Whether the engine makes its graphs at start-up (CUDA graphs).")
    rows = reported("rows", "Decoder rows in the engine's KV cache.")
    engine_load = reported("load", "The engine's sequences waiting or decoding, from every front-end.")

    @property
    def config(self) -> SimpleNamespace:
        """The model's TransformerConfig, its fields as the engine reported them (the class is the model's, torch's
        side: the fields are what a front-end reads)."""
        return SimpleNamespace(**self._facts()["config"])

    @property
    def max_queue(self) -> int:
        """This front-end's share of the engine's queue."""
        return max(self.least_share, self._facts()["max_queue"] // self.frontends)

    @property
    def queue_size(self) -> int:
        """The engine's whole queue, which the requests of every front-end share (what a request's limit is of)."""
        return self._facts()["max_queue"]

    def info(self) -> dict[str, Any]:
        return self._facts()["info"]

    def memory(self) -> dict[str, Any]:
        return self._facts()["memory"]


async def connect(address: str, names: list[str], frontends: int = 1, **options: Any) -> dict[str, RemoteCore]:
    """This front-end's RemoteCores for the engine process's `names`, once it answers (an Engine reads their config,
    rows and queue when it is made); `options` are the Connection's."""
    connection = Connection(address, **options)
    cores = {name: RemoteCore(connection, name, frontends) for name in names}
    for core in cores.values():
        core.start()
        await core.before_ready()
    return cores
