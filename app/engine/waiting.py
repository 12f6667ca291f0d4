"""The waiting line of the scheduler: sequences submitted and not yet in the cache, admitted one request at a time in
turn, so that a request of many sentences does not keep a later one of few waiting until all of its own have rows."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from app.engine.sequence import Sequence


class WaitingLine:
    """Submitted sequences not yet in the cache, taken round-robin across requests: one from each waiting request in
    turn, in order of the requests' arrival, first come first within a request. A request that arrives mid-round
    takes its turn in that round, before those that already had theirs. Sequences put back by an out-of-memory error
    come before any turn."""

    def __init__(self) -> None:
        self._front: deque[Sequence] = deque()
        self._lines: dict[object, deque[Sequence]] = {}  # each waiting request's sequences, first come first
        self._turn: deque[object] = deque()  # requests yet to take their turn this round, in order of arrival
        self._served: deque[object] = deque()  # requests that took their turn this round and still have sequences
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Sequence]:
        yield from self._front
        for request in (*self._turn, *self._served):
            yield from self._lines[request]

    def append(self, seq: Sequence) -> None:
        line = self._lines.get(seq.request)
        if line is None:
            line = self._lines[seq.request] = deque()
            self._turn.append(seq.request)
        line.append(seq)
        self._count += 1

    def appendleft(self, seq: Sequence) -> None:
        """Put `seq` before every turn (an out-of-memory victim)."""
        self._front.appendleft(seq)
        self._count += 1

    def peek(self) -> Sequence:
        """The sequence popleft() would take; the line must not be empty."""
        if self._front:
            return self._front[0]
        return self._lines[(self._turn or self._served)[0]][0]

    def popleft(self) -> Sequence:
        self._count -= 1
        if self._front:
            return self._front.popleft()
        if not self._turn:  # the round is over: a new one, in the same order
            self._turn, self._served = self._served, self._turn
        request = self._turn.popleft()
        line = self._lines[request]
        seq = line.popleft()
        if line:
            self._served.append(request)
        else:
            del self._lines[request]
        return seq

    def drop_cancelled(self) -> None:
        """Forget the sequences whose callers gave up, keeping everyone's turn."""
        self._front = deque(s for s in self._front if not s.future.cancelled())
        for request, line in list(self._lines.items()):
            kept = deque(s for s in line if not s.future.cancelled())
            if kept:
                self._lines[request] = kept
            else:
                del self._lines[request]
        self._turn = deque(r for r in self._turn if r in self._lines)
        self._served = deque(r for r in self._served if r in self._lines)
        self._count = len(self._front) + sum(map(len, self._lines.values()))
