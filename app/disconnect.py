"""Work for a request that is dropped when its client goes away before the answer is ready."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

from app.errors import ClientDisconnected

T = TypeVar("T")


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it (its sequences leave the batch) if the client disconnects first. One watcher task a
    request, which cancels this one, rather than a task for each and asyncio.wait(): the event loop's work per request
    takes the cores from the decoder step (README, "Why the event loop's work costs more than its share")."""
    me, gone = asyncio.current_task(), False

    async def watch() -> None:
        nonlocal gone
        await _disconnect(receive)
        gone = True
        me.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:  # this request was cancelled itself
            raise
        me.uncancel()
        raise ClientDisconnected(
            "the client closed the connection before the answer was ready; its work was dropped"
        ) from None
    finally:
        watcher.cancel()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":  # the body has been read: nothing else comes
        pass
