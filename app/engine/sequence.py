"""Request and sequence state: what a caller submits to the scheduler, and how its result comes back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.engine.errors import EngineFailure
from model.hypothesis import Hypothesis

if TYPE_CHECKING:
    from app.engine.scheduler import Batcher
    from model.search import Search

log = logging.getLogger("nmt_serve.batcher")


@dataclass(eq=False)
class Job:
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass(eq=False)
class Sequence(Job):
    """One source text to decode; its future gets the search's hypotheses, best first."""

    src: list[int]
    search: Search  # how it is decoded; replaced by a fresh one when an out-of-memory error restarts it
    stream: asyncio.Queue | Any = None  # streaming only (a queue, or a caller's sink): each token id, then None
    sent: int = 0  # tokens handed to the stream so far
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float = 0.0  # perf_counter() when its first token came out; 0.0 before
    ooms: int = 0  # times a CUDA out-of-memory error pushed it back to the waiting line
    request: object = field(default_factory=object)  # the request it is part of: requests take turns to be admitted


@dataclass(eq=False)
class Call(Job):
    fn: Callable[[], Any]


STOP = object()
PURGE = object()  # a caller gave up on a sequence: drop the cancelled ones before the next step


def resolve(job: Job, result: Any, error: BaseException | None) -> None:
    if not job.future.done():
        job.future.set_result(result) if error is None else job.future.set_exception(error)
    if getattr(job, "stream", None) is not None:
        job.stream.put_nowait(None)


def put_all(items: list[tuple[asyncio.Queue, int]]) -> None:
    for queue_, token in items:
        queue_.put_nowait(token)


class TokenStream:
    """A submitted sequence's token ids as they are generated (not </s>); `close()` drops it if it is unfinished."""

    def __init__(self, batcher: Batcher, seq: Sequence):
        self._batcher, self._seq = batcher, seq

    async def accepted(self) -> None:
        """Taken already: the batcher refuses a stream when it is submitted (app/engine/remote.py's waits for it)."""

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> int:
        token = await self._seq.stream.get()
        if token is None:
            raise StopAsyncIteration
        return token

    async def result(self) -> Hypothesis:
        """The finished hypothesis, once the tokens have run out; raises what the sequence failed with."""
        return (await self._seq.future)[0]

    @property
    def future(self) -> asyncio.Future:
        """The sequence's future: its hypotheses (one), or what it failed with."""
        return self._seq.future

    def close(self) -> None:
        self._batcher.drop([self._seq])


def settle(job: Job, result: Any, error: BaseException | None = None) -> None:
    """From the worker thread: resolve a job's future on its caller's loop."""
    try:
        job.loop.call_soon_threadsafe(resolve, job, result, error)
    except RuntimeError:  # the caller's event loop is gone
        pass


def resolve_all(results: list[tuple[Job, Any]]) -> None:
    for job, result in results:
        resolve(job, result, None)


def settle_all(results: list[tuple[Job, Any]]) -> None:
    """From the worker thread: resolve the futures of the jobs a step finished, one wake-up per event loop rather than
    one per job (each wake-up is a write to the loop's self-pipe and a pass of it)."""
    on_loops(resolve_all, [(job.loop, (job, result)) for job, result in results])


def on_loops(fn: Callable[[list], Any], items: list[tuple[asyncio.AbstractEventLoop, Any]]) -> None:
    """From the worker thread: fn(its items) on each event loop, one call (one wake-up) per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list] = {}
    for loop, item in items:
        by_loop.setdefault(loop, []).append(item)
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(fn, batch)
        except RuntimeError:  # the caller's event loop is gone
            pass


def fail(jobs: list[Job], error: Exception) -> None:
    """From the worker thread: the model raised while serving these jobs."""
    log.error("model failure on %d request(s)", len(jobs), exc_info=error)
    failure = EngineFailure(
        f"the model failed while serving this request ({type(error).__name__}: {error}); "
        "other requests were not affected"
    )
    for job in jobs:
        settle(job, None, failure)


def deliver(streaming: list[Sequence]) -> None:
    """From the worker thread: hand the streaming sequences' new tokens to their callers, one wake-up per event
    loop rather than per token."""
    items = []
    for seq in streaming:
        tokens = seq.search.tokens
        items += [(seq.loop, (seq.stream, tok)) for tok in tokens[seq.sent :]]
        seq.sent = len(tokens)
    on_loops(put_all, items)
