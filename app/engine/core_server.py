"""The engine process's side of app/engine/remote.py: its EngineCores served to the front-ends over ZeroMQ.

One ROUTER socket, read on this process's event loop (the batcher's worker thread steps the model beside it). The loop
is what every request passes through, so a request costs it little: no task and no coroutine for a decode (its
sequences are submitted as the message is read, and the answer leaves from the future's callback), a stream's tokens
handed straight to its front-end's next message (`Forward`), many messages read at one wake-up (`wire.Reader`), and
everything a front-end is owed at one wake-up sent as one message, without waiting (see app/engine/remote.py for the
protocol, backpressure, cancellation and what a front-end sees when this process dies). Only alignments and attention
weights, rare and run between two steps, are tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import torch
import zmq

from app.engine import wire
from app.engine.core import EngineCore
from app.engine.errors import EngineUnavailable
from app.engine.metrics import Metrics
from app.engine.wire import HWM, Reply, Request
from model.options import DecodingOptions, greedy_after

log = logging.getLogger("nmt_serve.remote")
CALLS = ("generate", "search", "align", "attention", "stream")  # the EngineCore methods a request may name


class CoreServer:
    """The engine process's side: named EngineCores behind a ROUTER socket (see the module's docstring)."""

    def __init__(
        self, cores: dict[str, EngineCore], address: str, hwm: int = HWM, metrics: Metrics | None = None,
        failed: dict[str, str] | None = None,
    ):  # fmt: skip
        wire.check_private(address)
        self.cores, self.address, self.hwm, self.metrics = cores, address, hwm, metrics
        self.failed = failed or {}  # the models that did not load, and why: a front-end says so as one process does
        # (front-end, request id) of each request being served: how to give it up (its answer is owed while here)
        self._open: dict[tuple[bytes, int], Callable[[], Any]] = {}
        self._outbox: dict[bytes, list[Reply]] = {}  # replies for each front-end, sent at the end of this wake-up
        self._tokens: dict[tuple[bytes, int], list[int]] = {}  # each stream's "tokens" reply in the outbox
        self._flushing = False
        self._cut_off: set[bytes] = set()  # front-ends whose requests were cancelled: their next message gets a reset

    @property
    def requests(self) -> int:
        """Requests being served: calls running and streams flowing."""
        return len(self._open)

    async def serve(self) -> None:
        """Answer requests until cancelled."""
        self._sock = wire.open_socket(zmq.ROUTER, self.hwm)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a vanished front-end fails, not silently dropped
        self._sock.bind(self.address)
        self._reader = wire.Reader(self._sock, self._received)
        try:
            await asyncio.Future()  # the reader's callbacks do the work
        finally:
            self._reader.close()
            for give_up in self._open.values():
                give_up()
            self._sock.close()

    def _received(self, frames: list[bytes]) -> None:
        """A front-end's message: the requests it made at one wake-up of its loop."""
        who, frame = frames
        for req in wire.decode(frame):
            try:
                self._handle(who, req)
            except Exception as e:  # noqa: BLE001 - a malformed request fails alone, not the engine's loop
                self._post(who, wire.error_reply(req.id, e))

    def _handle(self, who: bytes, req: Request) -> None:
        if who in self._cut_off:
            self._cut_off.discard(who)
            self._post(who, Reply(req.id, "reset"))
        key, core = (who, req.id), self.cores.get(req.core)
        if req.kind == "cancel":
            if (give_up := self._open.pop(key, None)) is not None:
                give_up()
        elif req.kind == "bye":
            self._cancel(who)
        elif req.kind == "status":
            failed = {name: {"failed": why} for name, why in self.failed.items()}
            self._post(who, Reply(req.id, "status", failed | {name: facts(core) for name, core in self.cores.items()}))
        elif req.kind == "metrics":  # the cores' series, for a front-end's /metrics
            self._post(who, Reply(req.id, "ok", b"" if self.metrics is None else self.metrics.engine_exposition()))
        elif core is None or req.kind not in CALLS:
            error = EngineUnavailable(f"the engine process has no model {req.core!r} (it has {sorted(self.cores)})")
            self._post(who, wire.error_reply(req.id, error))
        elif req.kind == "stream":
            src, budget, options, request = req.args  # request: the front-end's number for the streams' request
            try:
                stream = core.stream(src, budget, placed(core, options), None if request is None else (who, request),
                                     Forward(self, who, req.id))  # fmt: skip
            except Exception as e:  # noqa: BLE001 - QueueFull, EngineUnavailable, ...: the stream's error
                self._post(who, wire.error_reply(req.id, e))
                return
            self._open[key] = stream.close
            tokens = self._tokens[key] = []  # taken: a "tokens" reply now (RemoteStream.accepted); first ids join it
            self._post(who, Reply(req.id, "tokens", tokens))
            stream.future.add_done_callback(partial(self._answer, who, req.id, first))
        elif req.kind in ("generate", "search"):  # most requests: answered from the future, with no task
            srcs, budgets, options = req.args
            if req.kind == "generate":
                options = greedy_after(options)  # generate's third argument: `start`
            try:
                answer = core.searching(srcs, budgets, placed(core, options))
            except Exception as e:  # noqa: BLE001 - QueueFull, EngineUnavailable, ...: the call's error
                self._post(who, wire.error_reply(req.id, e))
                return
            self._open[key] = answer.cancel
            answer.add_done_callback(partial(self._answer, who, req.id, firsts if req.kind == "generate" else None))
        else:
            task = asyncio.create_task(getattr(core, req.kind)(*req.args))
            self._open[key] = task.cancel
            task.add_done_callback(partial(self._answer, who, req.id, None))

    def _answer(self, who: bytes, request_id: int, shape: Callable | None, future: asyncio.Future) -> None:
        """A request's future is done: its answer (its result, reshaped, or its error) goes back, unless it was
        given up (then nothing is sent)."""
        if self._open.pop((who, request_id), None) is None or future.cancelled():
            return
        if (error := future.exception()) is not None:
            self._post(who, wire.error_reply(request_id, error))
        else:
            self._post(who, Reply(request_id, "ok", future.result() if shape is None else shape(future.result())))

    def _token(self, who: bytes, request_id: int, token: int) -> None:
        """A stream's new token: it joins the stream's "tokens" reply of this wake-up, or starts one."""
        key = (who, request_id)
        if key not in self._open:  # given up: nobody reads it
            return
        tokens = self._tokens.get(key)
        if tokens is None:
            tokens = self._tokens[key] = []
            self._post(who, Reply(request_id, "tokens", tokens))
        tokens.append(token)

    def _post(self, who: bytes, reply: Reply) -> None:
        """Queue a reply; the outbox leaves once the tasks woken with this one have run."""
        self._outbox.setdefault(who, []).append(reply)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        outbox, self._outbox, self._tokens, self._flushing = self._outbox, {}, {}, False
        for who, replies in outbox.items():
            why = wire.send_now(self._sock, [who, wire.encode(replies)])
            if why is not None:
                log.warning("front-end %s is %s: cancelling its %d request(s)", who.hex(), why,
                            sum(k[0] == who for k in self._open))  # fmt: skip
                self._cancel(who)
                if why == "full":
                    self._cut_off.add(who)
        self._reader.sent()

    def _cancel(self, who: bytes) -> None:
        for key in [key for key in self._open if key[0] == who]:
            self._open.pop(key)()


class Forward:
    """A stream's sink in the engine process: its tokens join the front-end's next message (the end, None, is the
    future's: `CoreServer._answer`)."""

    __slots__ = ("server", "who", "request_id")

    def __init__(self, server: CoreServer, who: bytes, request_id: int):
        self.server, self.who, self.request_id = server, who, request_id

    def put_nowait(self, token: int | None) -> None:
        if token is not None:
            self.server._token(self.who, self.request_id, token)


def first(hyps: list):
    """A stream's answer: its one hypothesis."""
    return hyps[0]


def firsts(answers: list[list]) -> list:
    """generate's answer: each source's best hypothesis."""
    return [hyps[0] for hyps in answers]


def facts(core: EngineCore) -> dict[str, Any]:
    """What a front-end needs to know of a core without asking: its state, its size, its load."""
    return {
        "stopped": core.stopped, "compiled": core.compiled, "graphs_at_start": core.graphs_at_start,
        "rows": core.rows, "max_queue": core.max_queue, "load": core.load, "config": core.config.to_dict(),
        "info": core.info(), "memory": core.memory(),
    }  # fmt: skip


def placed(core: EngineCore, options: DecodingOptions | list[DecodingOptions]):
    """The options with their `glued` array (a front-end's, which has no torch) as a tensor on the core's device, made
    once for each array."""
    moved: dict[int, torch.Tensor] = {}

    def one(o: DecodingOptions) -> DecodingOptions:
        if o.glued is None or isinstance(o.glued, torch.Tensor) and o.glued.device == core.device:
            return o
        if id(o.glued) not in moved:
            moved[id(o.glued)] = torch.as_tensor(o.glued, device=core.device)
        return replace(o, glued=moved[id(o.glued)])

    return [one(o) for o in options] if isinstance(options, list) else one(options)


# ---- the front-end's side --------------------------------------------------------------------------------------
