"""Where a request's text work runs: on the event loop when it is small, else on a thread; a request's parts at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
# Requests whose texts have at most this many characters in all are tokenized and detokenized on the event loop:
# that takes tens of microseconds, less than a hop to a thread and back, which also passes the GIL to and fro
# while the batcher's worker needs it. Longer requests are tokenized on a thread.
INLINE_CHARS = 2_000


async def inline_or_on_thread(size: int, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) here when the request is small (`size` characters, at most INLINE_CHARS), else on a thread."""
    if size <= INLINE_CHARS:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


async def all_at_once(parts: list[Awaitable[T]]) -> list[T]:
    """Each part's result, in order, the parts run at once; the first to fail cancels the others (their sequences
    leave the batch) and is raised as it is."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(part) for part in parts]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [t.result() for t in tasks]
