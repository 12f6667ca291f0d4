"""Where a request's text work runs: on the event loop when it is small, else on a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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
