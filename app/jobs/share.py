"""The jobs' share of the engine: at most NMT_JOB_SEGMENTS_IN_FLIGHT segments of all jobs together in it at once."""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import asynccontextmanager


class Share:
    """At most `cap` units of all jobs in the engine at once; waiters are served first come first."""

    def __init__(self, cap: int):
        self.cap, self.in_flight, self.peak = cap, 0, 0
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()

    @asynccontextmanager
    async def take(self, n: int):
        n = min(n, self.cap)
        if self._waiting or self.in_flight + n > self.cap:
            granted = asyncio.get_running_loop().create_future()
            self._waiting.append((n, granted))
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():  # granted as it was cancelled: give it back
                    self._give(n)
                else:
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

    def _wake(self) -> None:
        while self._waiting and self.in_flight + self._waiting[0][0] <= self.cap:
            n, granted = self._waiting.popleft()
            self.in_flight += n
            granted.set_result(None)
