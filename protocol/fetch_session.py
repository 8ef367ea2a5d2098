"""Incremental fetch sessions, the fetcher's side (KIP-227; Kafka's FetchSessionHandler).
Sans-IO: it says what the next Fetch request carries and learns from its answer.

Owns `FetchSessionHandler`, one per broker a fetcher talks to. The fetcher tells it which
partitions it wants fetched now and with what (`set`, `remove`, or `want` for the whole
set at once, as Java's builder takes it); `build` then makes the next request's session
fields:

- with no session yet (or after an error), a full request: session 0 (or the old one, to
  close it) at epoch 0, naming every partition wanted; the broker's answer names the new
  session, or 0 when its cache has no room (the next request is full again);
- in a session, an incremental request at the session's next epoch naming only the
  partitions added or whose fetch fields changed since they were last sent, and in
  `forgotten` those no longer wanted. Its answer holds only the partitions with something
  to say.

`handle_response` takes the answer's top-level error and session id:
FETCH_SESSION_ID_NOT_FOUND starts over with a new session; any other error (such as
INVALID_FETCH_SESSION_EPOCH) or a lost connection (`handle_error`) closes the session and
opens a new one with the next full request, as Java's handler does. The caller ignores the
partitions of an answer that failed so.

A key is whatever names a partition to the caller ((topic, partition) usually); the data
is the request's partition entry (a dict), compared whole to tell a change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Hashable, Iterable, Mapping, TypeVar

from protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

K = TypeVar("K", bound=Hashable)


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(frozen=True)
class FetchPlan(Generic[K]):
    """What one request carries: its session fields and the partitions it names."""
    session_id: int
    epoch: int
    partitions: Mapping[K, dict]
    forgotten: tuple[K, ...]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler(Generic[K]):
    def __init__(self, use_sessions: bool = True) -> None:
        # use_sessions False: every request is full and asks for no session (epoch -1)
        self.use_sessions = use_sessions
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH if use_sessions else FINAL_EPOCH
        self.wanted: dict[K, dict] = {}  # what the next request should fetch
        self.sent: dict[K, dict] = {}  # what the broker's session holds
        self._dirty: set[K] = set()  # wanted, and not sent as it is now
        self._forget: set[K] = set()  # sent, and no longer wanted

    # -- what the fetcher wants ---------------------------------------------------------------

    def set(self, key: K, data: dict) -> None:
        if self.wanted.get(key) != data:
            self.wanted[key] = data
            self._dirty.add(key)
        self._forget.discard(key)

    def remove(self, key: K) -> None:
        if self.wanted.pop(key, None) is not None:
            self._dirty.discard(key)
            self._forget.add(key)

    def want(self, partitions: Mapping[K, dict]) -> None:
        """The whole set wanted now: what is not in it is removed (Java's builder)."""
        for key in [k for k in self.wanted if k not in partitions]:
            self.remove(key)
        for key, data in partitions.items():
            self.set(key, data)

    @property
    def has_work(self) -> bool:
        """Whether a request is worth sending: something to fetch, or to forget."""
        return bool(self.wanted) or bool(self._forget and self.session_id)

    # -- the request and its answer -------------------------------------------------------------

    def build(self) -> FetchPlan[K]:
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            return FetchPlan(self.session_id, self.epoch, dict(self.wanted), ())
        return FetchPlan(self.session_id, self.epoch,
                         {k: self.wanted[k] for k in self._dirty},
                         tuple(k for k in self._forget if k not in self.wanted))

    def handle_response(self, plan: FetchPlan[K], error_code: int, session_id: int) -> bool:
        """The answer to `plan`. False when it failed as a whole (its partitions are to be
        ignored); the next request is then a full one."""
        if not self.use_sessions:
            self._dirty.clear()
            self._forget.clear()
            return error_code == ErrorCode.NONE
        if error_code != ErrorCode.NONE:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self._start_over()
            return False
        if plan.full:
            self.sent = dict(plan.partitions)
            self._forget = {k for k in self.sent if k not in self.wanted}
        else:
            self.sent.update(plan.partitions)
            for key in plan.forgotten:
                self.sent.pop(key, None)
                self._forget.discard(key)
        for key, data in plan.partitions.items():
            if self.wanted.get(key) == data:
                self._dirty.discard(key)
        if session_id == INVALID_SESSION_ID:
            # no session (a full cache), or it was closed: full requests from now on
            self.session_id = INVALID_SESSION_ID
            self._start_over()
        elif plan.full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """No answer (the connection failed): the broker may or may not have taken the
        request, so its session is closed and a new one opened (Java's nextCloseExisting)."""
        if self.use_sessions:
            self._start_over()

    def _start_over(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.sent.clear()
        self._dirty = set(self.wanted)
        self._forget.clear()

    def keys(self) -> Iterable[K]:
        return self.sent.keys()
