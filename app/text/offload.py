"""Where a request's text work runs: on the event loop when it is small, else on a thread; a request's parts at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
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


async def each_group(keys: Sequence[K], run: Callable[[K, list[int]], Awaitable[list[T]]]) -> list[T]:
    """run(key, places) for each key and the places it has in `keys` (each language's texts, each model's), all at
    once (all_at_once), and each result back at its place."""
    groups: dict[K, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    parts = await all_at_once([run(key, places) for key, places in groups.items()])
    out: list[T] = [None] * len(keys)  # type: ignore[list-item]
    for places, part in zip(groups.values(), parts, strict=True):
        for i, item in zip(places, part, strict=True):
            out[i] = item
    return out
