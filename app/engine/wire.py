"""The messages between an HTTP front-end process and the engine process, and how they travel.

A front-end sends a list of `Request`s per message on a ZeroMQ DEALER socket, all it asked for at one pass of its
event loop: each its own id for the request, the kind (an EngineCore method, "stream", "cancel", "status" or "bye"),
the model's name and the arguments, in token ids. The engine process answers
on its ROUTER socket with a list of `Reply`s per message, all it has for that front-end at one wake-up: "tokens" (a
stream's new ids; the first, sent as the engine takes the stream, may have none), "ok" (the result: hypotheses, a
stream's final hypothesis), "error" (an app/engine/errors.py class's name and message), "status" (every model's facts
and load) or "reset" (the engine cancelled this front-end's requests before that id: see app/engine/remote.py).

The encoding is pickle (protocol 5): both ends are this project's own processes on one machine, over an ipc:// socket
in a folder only the server's user can reach (`check_private` refuses anything else), so nothing from a stranger is
ever unpickled; pickle carries Hypothesis, DecodingOptions (its `glued` array) and AttentionWeights as they are, with
no schema to keep in step. None holds a tensor, and their classes' modules import no torch (model/hypothesis.py,
model/options.py, app/engine/attention.py): a front-end that unpickles them never imports it. A socket others could
reach (tcp://) would need an encoding that cannot run code instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from app.engine.errors import (
    EngineFailure,
    EngineUnavailable,
    InputTooLong,
    InvalidRequest,
    OutOfMemory,
    QueueFull,
    RequestTimeout,
)  # fmt: skip

log = logging.getLogger("nmt_serve.remote")
# Messages queued per peer, each way, before a send would have to wait: a stream's tokens travel many to a message,
# so a front-end that reads at all never comes near it; one that stops reading is cut off (app/engine/remote.py).
HWM = 10_000
ERRORS = {e.__name__: e for e in (EngineUnavailable, EngineFailure, QueueFull, OutOfMemory, InvalidRequest,
                                  InputTooLong, RequestTimeout)}  # fmt: skip


@dataclass
class Request:
    """Front-end to engine."""

    id: int  # the front-end's own number for the request: its replies and its "cancel" carry it
    kind: str  # "generate", "search", "align", "attention", "stream", "cancel", "status" or "bye"
    core: str = ""  # the model's name, for the kinds that are an EngineCore method
    args: tuple = ()  # the method's positional arguments


@dataclass
class Reply:
    """Engine to front-end."""

    id: int  # the request's id
    kind: str  # "ok", "error", "tokens", "status" or "reset"
    payload: Any = None  # the result; (class name, message); new token ids; {model: facts}; nothing


def encode(message: Any) -> bytes:
    return pickle.dumps(message, protocol=5)


def decode(frame: bytes) -> Any:
    return pickle.loads(frame)  # our own processes only: see the module's docstring


def error_reply(request_id: int, error: BaseException) -> Reply:
    """An engine error as itself; anything else as an EngineFailure with its text."""
    name = type(error).__name__
    if ERRORS.get(name) is type(error):
        return Reply(request_id, "error", (name, str(error)))
    return Reply(request_id, "error", ("EngineFailure", f"the engine process failed on this request ({name}: {error})"))


def raised(payload: tuple[str, str]) -> Exception:
    """The exception an "error" reply carries, as the class the engine raised."""
    name, message = payload
    return ERRORS.get(name, EngineFailure)(message)


def check_private(address: str) -> None:
    """Refuse an address other users could reach: a network one, an abstract socket, a folder open to them."""
    scheme, _, path = address.partition("://")
    if scheme == "inproc":
        return
    if scheme != "ipc" or path.startswith("@"):
        raise ValueError(
            f"{address}: the engine's messages are pickles, which can run code, so its socket must be an ipc:// path "
            "in a private folder (or inproc://), never a network address or an abstract socket"
        )
    st = Path(path).parent.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ValueError(
            f"{Path(path).parent} (mode {st.st_mode & 0o777:o}) is open to other users; the engine's socket needs a "
            "folder only its own user can reach (chmod 700)"
        )


def open_socket(kind: int, hwm: int = HWM) -> zmq.Socket:
    """A plain (not zmq.asyncio) socket of `kind` with its high-water marks set both ways, which drops what it has not
    sent when closed: read it on the event loop through a `Reader`, write it with `send_now`."""
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.LINGER, 0)
    return sock


def send_now(sock: zmq.Socket, frames: list[bytes]) -> str | None:
    """Send without waiting, ever: None once queued; otherwise why not, "full" (the peer's queue is at its high-water
    mark, or a DEALER has no engine connected) or "gone" (a ROUTER_MANDATORY socket knows no such peer)."""
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK)
    except zmq.Again:
        return "full"
    except zmq.ZMQError as e:
        if e.errno == zmq.EHOSTUNREACH:
            return "gone"
        raise
    return None


class Reader:
    """A socket read on the event loop: every message it holds goes to `received` (its frames) whenever its descriptor
    wakes the loop, many at one wake-up, with no future, callback and poller update per message as zmq.asyncio's
    `recv` costs. ZeroMQ's descriptor only says that the socket's state may have changed, and a send can take in
    messages without it waking the loop again: call `sent()` after sending."""

    BATCH = 512  # messages read at one go; more are read after the loop's other callbacks have run

    def __init__(self, sock: zmq.Socket, received: Callable[[list[bytes]], None]):
        self.sock, self.received, self.loop = sock, received, asyncio.get_running_loop()
        self.fd = sock.getsockopt(zmq.FD)
        self.loop.add_reader(self.fd, self.drain)
        self.loop.call_soon(self.drain)  # anything that came before the reader was added

    def drain(self) -> None:
        recv, received = self.sock.recv_multipart, self.received
        for _ in range(self.BATCH):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                received(frames)
            except Exception:  # one message that cannot be read (or handled) fails alone; the others behind it are read
                log.exception("a message on %s could not be handled", self.sock.getsockopt_string(zmq.LAST_ENDPOINT))
        self.loop.call_soon(self.drain)

    def sent(self) -> None:
        """After a send: read what the socket took in meanwhile, which the descriptor may not announce."""
        if self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self.loop.call_soon(self.drain)

    def close(self) -> None:
        """Stop reading (before the socket closes)."""
        self.loop.remove_reader(self.fd)
