"""The jobs' share of the engine: at most NMT_JOB_SEGMENTS_IN_FLIGHT segments of all jobs together in it at once, a
quarter of that while people are translating (Activity: a translation request in flight, or one within QUIET_S),
so that a job fills the batch when the server is otherwise idle and gives way when it is not."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from contextlib import asynccontextmanager, suppress
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

QUIET_S = 1.0  # an interactive request this recent still counts: a client's next one is on its way
BUSY_SHARE = 4  # the share while people are translating: 1 / this of the cap


class Activity:
    """Translation requests (not file jobs) in flight, and when the last one ended: told by the Interactive middleware.
    The front-ends of one engine (NMT_FRONTENDS) share theirs (`share_with`): a job gives way to a request whichever
    front-end it came to."""

    def __init__(self, clock=time.monotonic):
        self.clock, self._slots, self._at = clock, [0.0, -math.inf], 0  # (in flight, last) of each process

    def share_with(self, slots: Any, index: int) -> None:
        """Keep the counts in `slots` (a shared array of doubles: two each process, `slots_for`), at `index`'s."""
        self._slots, self._at = slots, 2 * index
        slots[self._at], slots[self._at + 1] = 0.0, -math.inf

    @property
    def in_flight(self) -> int:
        return int(self._slots[self._at])

    @in_flight.setter
    def in_flight(self, n: int) -> None:
        self._slots[self._at] = n  # this process's own slot: no other writes it

    @property
    def last(self) -> float:
        return self._slots[self._at + 1]

    @last.setter
    def last(self, when: float) -> None:
        self._slots[self._at + 1] = when

    def busy(self) -> bool:
        counts, lasts = self._slots[0::2], self._slots[1::2]
        return any(counts) or self.clock() - max(lasts) < QUIET_S


def slots_for(ctx: Any, processes: int) -> Any:
    """The array the processes' Activity shares: (in flight, last) of each, in shared memory (monotonic time is the
    machine's, the same in each process)."""
    return ctx.Array("d", [0.0, -math.inf] * processes, lock=False)


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
