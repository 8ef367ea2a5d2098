"""One keyed timer service for the coordinator, driven by an injected clock.

Owns: `TimerService`. Session expiry, rebalance timeouts, the initial rebalance delay and
the sync timeout are all entries here, keyed so that rescheduling replaces the old deadline
(a heartbeat pushes its member's session deadline forward without leaving the old one
behind). It never reads a clock: callers pass `now_ms`, and the trio runtime sleeps until
`next_deadline()`.
"""

from __future__ import annotations

import heapq
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


class TimerService(Generic[K]):
    def __init__(self):
        self._deadlines: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []
        self._seq = 0  # ties broken by scheduling order, so expiry order is deterministic

    def schedule(self, key: K, deadline_ms: int) -> None:
        self._deadlines[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))

    def cancel(self, key: K) -> None:
        self._deadlines.pop(key, None)  # its heap entry is skipped when it surfaces

    def deadline(self, key: K) -> int | None:
        return self._deadlines.get(key)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> K | None:
        """The earliest key whose deadline is at or before now, or None; it fires once.

        One at a time, because firing one timer may cancel or reschedule another due at the
        same instant: that one must then not fire on its old deadline."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._deadlines[key]
        return key

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._deadlines.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)

    def __len__(self) -> int:
        return len(self._deadlines)
