"""The jobs' share of the engine: at most NMT_JOB_SEGMENTS_IN_FLIGHT segments of all jobs together in it at once, a
quarter of that while people are translating (Activity: a translation request in flight, or one within QUIET_S),
so that a job fills the batch when the server is otherwise idle and gives way when it is not."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from contextlib import asynccontextmanager, suppress

from starlette.types import ASGIApp, Receive, Scope, Send

QUIET_S = 1.0  # an interactive request this recent still counts: a client's next one is on its way
BUSY_SHARE = 4  # the share while people are translating: 1 / this of the cap


class Activity:
    """Translation requests (not file jobs) in flight, and when the last one ended: told by the Interactive middleware."""

    def __init__(self, clock=time.monotonic):
        self.clock, self.in_flight, self.last = clock, 0, -math.inf

    def busy(self) -> bool:
        return self.in_flight > 0 or self.clock() - self.last < QUIET_S


class Interactive:
    """ASGI middleware counting the translation requests in flight (`POST …/translate`, any API's) in `activity`."""

    def __init__(self, app: ASGIApp, activity: Activity):
        self.app, self.activity = app, activity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("translate"):
            return await self.app(scope, receive, send)
        self.activity.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.activity.in_flight -= 1
            self.activity.last = self.activity.clock()


class Share:
    """At most `cap` units of all jobs in the engine at once (a quarter of it while `activity` is busy); waiters are
    served first come first."""

    def __init__(self, cap: int, activity: Activity | None = None):
        self.cap, self.in_flight, self.peak = cap, 0, 0
        self.busy_cap = max(1, cap // BUSY_SHARE)
        self.activity = activity or Activity()
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()

    @property
    def now(self) -> int:
        """The cap that holds now."""
        return self.busy_cap if self.activity.busy() else self.cap

    @asynccontextmanager
    async def take(self, n: int):
        n = min(n, self.cap)
        if self._waiting or not self._fits(n):
            granted = asyncio.get_running_loop().create_future()
            self._waiting.append((n, granted))
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():  # granted as it was cancelled: give it back
                    self._give(n)
                else:
                    with suppress(ValueError):  # _wake may have passed over it already
                        self._waiting.remove((n, granted))
                    self._wake()
                raise
        else:
            self.in_flight += n
        self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            self._give(n)

    def _give(self, n: int) -> None:
        self.in_flight -= n
        self._wake()

    def _fits(self, n: int) -> bool:
        """Under the cap that holds now; anything fits when nothing is in flight (a chunk larger than the busy cap)."""
        return not self.in_flight or self.in_flight + n <= self.now

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            n, granted = self._waiting.popleft()
            if granted.done():  # cancelled while it waited (its task has not run its handler yet): nothing to grant
                continue
            self.in_flight += n
            granted.set_result(None)
