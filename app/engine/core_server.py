"""The engine process's side of app/engine/remote.py: its EngineCores served to the front-ends over ZeroMQ.

One ROUTER socket; each request runs as a task on this process's event loop (the batcher's worker thread steps the
model beside it); everything a front-end is owed at one wake-up leaves as one message, sent without waiting (see
app/engine/remote.py for the protocol, backpressure, cancellation and what a front-end sees when this process dies).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import torch
import zmq

from app.engine import wire
from app.engine.core import EngineCore
from app.engine.errors import EngineUnavailable
from app.engine.metrics import Metrics
from app.engine.wire import HWM, Reply, Request
from model.options import DecodingOptions

log = logging.getLogger("nmt_serve.remote")
CALLS = ("generate", "search", "align", "attention", "stream")  # the EngineCore methods a request may name


class CoreServer:
    """The engine process's side: named EngineCores behind a ROUTER socket (see the module's docstring)."""

    def __init__(self, cores: dict[str, EngineCore], address: str, hwm: int = HWM, metrics: Metrics | None = None):
        wire.check_private(address)
        self.cores, self.address, self.hwm, self.metrics = cores, address, hwm, metrics
        self._tasks: dict[tuple[bytes, int], asyncio.Task] = {}  # (front-end, request id): its call or stream pump
        self._outbox: dict[bytes, list[Reply]] = {}  # replies for each front-end, sent at the end of this wake-up
        self._tokens: dict[tuple[bytes, int], list[int]] = {}  # each stream's "tokens" reply in the outbox
        self._flushing = False
        self._cut_off: set[bytes] = set()  # front-ends whose requests were cancelled: their next message gets a reset

    @property
    def requests(self) -> int:
        """Requests being served: calls running and streams flowing."""
        return len(self._tasks)

    async def serve(self) -> None:
        """Answer requests until cancelled."""
        self._sock = wire.open_socket(zmq.ROUTER, self.hwm)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a vanished front-end fails, not silently dropped
        self._sock.bind(self.address)
        try:
            while True:
                who, frame = await self._sock.recv_multipart()
                req = wire.decode(frame)
                try:
                    self._handle(who, req)
                except Exception as e:  # noqa: BLE001 - a malformed request fails alone, not the engine's loop
                    self._post(who, wire.error_reply(req.id, e))
        finally:
            for task in self._tasks.values():
                task.cancel()
            self._sock.close()

    def _handle(self, who: bytes, req: Request) -> None:
        if who in self._cut_off:
            self._cut_off.discard(who)
            self._post(who, Reply(req.id, "reset"))
        key, core = (who, req.id), self.cores.get(req.core)
        if req.kind == "cancel":
            if (task := self._tasks.pop(key, None)) is not None:
                task.cancel()
        elif req.kind == "bye":
            self._cancel(who)
        elif req.kind == "status":
            self._post(who, Reply(req.id, "status", {name: facts(core) for name, core in self.cores.items()}))
        elif req.kind == "metrics":  # the cores' series, for a front-end's /metrics
            self._post(who, Reply(req.id, "ok", b"" if self.metrics is None else self.metrics.engine_exposition()))
        elif core is None or req.kind not in CALLS:
            error = EngineUnavailable(f"the engine process has no model {req.core!r} (it has {sorted(self.cores)})")
            self._post(who, wire.error_reply(req.id, error))
        elif req.kind == "stream":
            src, budget, options, request = req.args  # request: the front-end's number for the streams' request
            try:
                stream = core.stream(src, budget, placed(core, options), None if request is None else (who, request))
            except Exception as e:  # noqa: BLE001 - QueueFull, EngineUnavailable, ...: the stream's error
                self._post(who, wire.error_reply(req.id, e))
                return
            self._tasks[key] = asyncio.create_task(self._pump(who, req.id, stream))
            tokens = self._tokens[key] = []  # taken: a "tokens" reply now (RemoteStream.accepted); first ids join it
            self._post(who, Reply(req.id, "tokens", tokens))
        else:
            args = (*req.args[:2], placed(core, req.args[2])) if req.kind == "search" else req.args
            self._tasks[key] = asyncio.create_task(self._call(who, req.id, getattr(core, req.kind), args))

    async def _call(self, who: bytes, request_id: int, method, args: tuple) -> None:
        try:
            reply = Reply(request_id, "ok", await method(*args))
        except Exception as e:  # noqa: BLE001 - every failure goes back to the front-end
            reply = wire.error_reply(request_id, e)
        finally:  # also when cancelled: then nothing is sent
            self._tasks.pop((who, request_id), None)
        self._post(who, reply)

    async def _pump(self, who: bytes, request_id: int, stream) -> None:
        """Forward a stream's tokens, then its hypothesis; cancelled, close it (which frees its row)."""
        try:
            async for token in stream:
                tokens = self._tokens.get((who, request_id))
                if tokens is None:  # the first of this wake-up: a new "tokens" reply, which the later ones join
                    tokens = self._tokens[who, request_id] = []
                    self._post(who, Reply(request_id, "tokens", tokens))
                tokens.append(token)
            reply = Reply(request_id, "ok", await stream.result())
        except Exception as e:  # noqa: BLE001 - every failure goes back to the front-end
            reply = wire.error_reply(request_id, e)
        finally:
            stream.close()
            self._tasks.pop((who, request_id), None)
        self._post(who, reply)

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
                            sum(k[0] == who for k in self._tasks))  # fmt: skip
                self._cancel(who)
                if why == "full":
                    self._cut_off.add(who)

    def _cancel(self, who: bytes) -> None:
        for key in [key for key in self._tasks if key[0] == who]:
            self._tasks.pop(key).cancel()


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
