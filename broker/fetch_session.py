"""Incremental fetch sessions, the broker's side (KIP-227; Kafka's FetchSession.scala).
Pure: time is an argument, the session ids come from an injected random source.

Owns `CachedPartition`, `FetchSession` and `FetchSessionCache`. The Fetch handler
(broker.handlers.fetch) decides from a request's session id and epoch which of these it
uses; the rules it follows:

- epoch 0 (INITIAL_EPOCH) is a full request: it names every partition, closes the session
  it names if any, and asks for a new one; the answer carries the new session's id, or 0
  when the cache has no room (the client then keeps sending full requests);
- epoch -1 (FINAL_EPOCH) is a full request that closes the named session and wants none
  (librdkafka always sends session 0 and epoch -1: it does not implement KIP-227);
- any other epoch is an incremental request for an existing session: it must name a
  session the cache holds (else FETCH_SESSION_ID_NOT_FOUND) at the epoch the session
  expects (else INVALID_FETCH_SESSION_EPOCH); it carries only the partitions added or
  changed since the last request, and `forgotten_topics_data` those removed. The answer
  carries only the partitions with something to say: records, a high watermark or log
  start offset other than the last one sent, an error, a preferred read replica.

What the broker keeps per partition is the request's fields (fetch offset, max bytes,
leader epochs) and what it last sent (HW, log start offset). It also keeps which of a
session's partitions may have something to say (`FetchSession.changed`): those the broker
has marked (`FetchSessionCache.mark_changed`, called wherever a partition's data, HW,
leadership or log start moves) and those that still had something to say when last read
(records beyond the fetch offset, an error). Every other partition of the session has
nothing to say and is not read at all, so a fetch costs what changed, not the session's
size.

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. When full, a
new session may take the slot of (Kafka's FetchSessionCache.tryEvict):
1. the least recently used session, if it has not been used for
   `min.incremental.fetch.session.eviction.ms`; else
2. the least valuable evictable session, if the new one is worth more: a follower's
   (privileged) session is worth more than any consumer's, then more partitions are worth
   more (an equal one keeps its slot). Any session older than the eviction time is evictable; a consumer's
   session is evictable by a follower at any age.
So one client cannot exhaust the cache for the followers, nor a burst of new consumer
sessions push out the established ones before they have been idle a while.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Iterator

from protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

# a partition within a session: (topic name, partition) up to Fetch v12, (topic id,
# partition) from v13, as the requests name them
Key = tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`; Kafka's wraps to 1, never back to the initial 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's request fields and what was last sent."""
    topic: str | None  # None: a topic id the metadata image does not know
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's own (a follower's)
    high_watermark: int = -1  # as last sent; -1 makes the next answer include it
    leader_log_start_offset: int = -1  # as last sent
    # when a fetch last read it as it arrived (not woken later): a follower's session
    # not reading it at its last fetch says the follower was caught up then
    read_ms: int = -1

    def update_request(self, other: CachedPartition) -> None:
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch
        self.log_start_offset = other.log_start_offset


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    replica_id: int  # the follower's id, -1 for a consumer
    uses_topic_ids: bool  # made by Fetch v13+
    creation_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry
    partitions: dict[Key, CachedPartition] = field(default_factory=dict)
    # partitions that may have something to say (see the module docstring)
    changed: set[Key] = field(default_factory=set)
    # set by a fetch waiting on this session, called when a partition of it is marked
    waker: Callable[[], None] | None = None
    # a follower's broker epoch as its latest fetch gave it (KIP-903): what its idle
    # partitions' leaders must name for it in AlterPartition, not the epoch of the last
    # fetch that named them, which may be from before the follower restarted
    replica_epoch: int = -1

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey order: consumers before followers, then fewer partitions."""
        return (self.privileged, self.size, self.id)


@dataclass
class SessionContext:
    """What one Fetch request works on: a cached session, or one made for it alone (a
    sessionless or refused request), and whether it is answered whole."""
    session: FetchSession
    cached: bool
    full: bool
    previous_use_ms: int = -1  # the session's last use before this request


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000,
                 rng: random.Random | None = None):
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        # by id, least recently used first (touch moves a session to the end)
        self._sessions: dict[int, FetchSession] = {}
        # (topic name, partition) -> the sessions holding it and their key for it
        self._watch: dict[tuple[str, int], dict[FetchSession, Key]] = {}
        # Kafka's evictableByAll / evictableByPrivileged membership, decided at touch
        self._by_all: set[FetchSession] = set()
        self._by_privileged: set[FetchSession] = set()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[FetchSession]:
        return iter(self._sessions.values())

    @property
    def num_partitions(self) -> int:
        return sum(s.size for s in self._sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_context(self, now_ms: int, *, session_id: int, epoch: int, replica_id: int,
                    uses_topic_ids: bool, partitions: list[CachedPartition],
                    forgotten: list[Key]) -> SessionContext | ErrorCode:
        """The session a Fetch request works on, by its session id and epoch (Kafka's
        FetchManager.newContext; the rules are the module docstring's), or the error that
        answers the whole request. An error changes no session."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full request closes the session it names
            if epoch == INITIAL_EPOCH:
                made = self.maybe_create(now_ms, privileged=replica_id >= 0,
                                         replica_id=replica_id, uses_topic_ids=uses_topic_ids,
                                         partitions=partitions)
                if made is not None:
                    return SessionContext(made, cached=True, full=True)
            return SessionContext(sessionless(partitions, replica_id, uses_topic_ids, now_ms),
                                  cached=False, full=True)
        session = self._sessions.get(session_id)
        # a session is its maker's: another replica id naming it is told it does not exist
        if session is None or session.replica_id != replica_id:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        if session.uses_topic_ids != uses_topic_ids:
            return ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        self.update(session, partitions, forgotten)
        if not session.partitions:
            self.remove(session_id)  # nothing left to follow: answered sessionless
            return SessionContext(sessionless([], replica_id, uses_topic_ids, now_ms),
                                  cached=False, full=True)
        previous = session.last_used_ms
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return SessionContext(session, cached=True, full=False, previous_use_ms=previous)

    # -- making and dropping sessions --------------------------------------------------------

    def maybe_create(self, now_ms: int, *, privileged: bool, replica_id: int = -1,
                     uses_topic_ids: bool = False,
                     partitions: Iterable[CachedPartition] = ()) -> FetchSession | None:
        """A new session holding `partitions` (the full request's), or None when the cache
        is full and nothing may be evicted for it."""
        parts = {_key(p, uses_topic_ids): p for p in partitions}
        if len(self._sessions) >= self.max_slots and not self._try_evict(
                privileged, len(parts), now_ms):
            return None
        session = FetchSession(self._new_id(), privileged, replica_id, uses_topic_ids,
                               creation_ms=now_ms, last_used_ms=now_ms)
        self._sessions[session.id] = session
        for key, p in parts.items():
            self._add(session, key, p)
        self.touch(session, now_ms)
        return session

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return None
        for p in session.partitions.values():
            self._unwatch(session, p)
        self._by_all.discard(session)
        self._by_privileged.discard(session)
        if session.waker is not None:  # a fetch waiting on it answers now
            session.waker()
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """The session was used now: it becomes the most recently used, and its
        eviction class is decided again (Kafka's FetchSessionCache.touch)."""
        self._sessions[session.id] = self._sessions.pop(session.id)
        session.last_used_ms = now_ms
        old = now_ms - session.creation_ms > self.eviction_ms
        if not session.privileged or old:
            self._by_privileged.add(session)
        else:
            self._by_privileged.discard(session)
        if old:
            self._by_all.add(session)
        else:
            self._by_all.discard(session)

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        lru = next(iter(self._sessions.values()), None)
        if lru is None:
            return False
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self._evict(lru)
            return True
        # cache full of sessions in use: the least valuable one allowed, if it is worth
        # no more than the new one (a scan, only when the cache is full)
        candidates = self._by_privileged if privileged else self._by_all
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_EPOCH)
            if session_id not in self._sessions:
                return session_id

    # -- a session's partitions ---------------------------------------------------------------

    def update(self, session: FetchSession, partitions: Iterable[CachedPartition],
               forgotten: Iterable[Key]) -> tuple[list[Key], list[Key], list[Key]]:
        """An incremental request: partitions added or changed, then those forgotten
        (Kafka's order). Returns (added, updated, removed) keys. What the request names
        may have something to say, so it is marked changed."""
        added, updated, removed = [], [], []
        for p in partitions:
            key = _key(p, session.uses_topic_ids)
            cached = session.partitions.get(key)
            if cached is None:
                self._add(session, key, p)
                added.append(key)
            else:
                cached.update_request(p)
                session.changed.add(key)
                updated.append(key)
        for key in forgotten:
            cached = session.partitions.pop(key, None)
            if cached is not None:
                self._unwatch(session, cached)
                session.changed.discard(key)
                removed.append(key)
        return added, updated, removed

    def _add(self, session: FetchSession, key: Key, p: CachedPartition) -> None:
        session.partitions[key] = p
        session.changed.add(key)
        if p.topic is not None:
            self._watch.setdefault((p.topic, p.partition), {})[session] = key

    def _unwatch(self, session: FetchSession, p: CachedPartition) -> None:
        if p.topic is None:
            return
        watchers = self._watch.get((p.topic, p.partition))
        if watchers is not None:
            watchers.pop(session, None)
            if not watchers:
                del self._watch[(p.topic, p.partition)]

    def mark_changed(self, topic: str, partition: int, high_watermark_only: bool = False
                     ) -> None:
        """The partition's data, HW, log start or leadership moved: every session holding
        it reads it at its next fetch, and a fetch waiting on one of them wakes. Except a
        follower's on a move of the HW alone: a follower reads up to the log end, so the HW
        gives it no bytes to answer with, and it learns the HW with its next answer (as
        Kafka's DelayedFetch completes on bytes). Waking it for nothing cost the leader two
        task switches per acknowledged produce, just as the produce's answer was due."""
        for session, key in self._watch.get((topic, partition), {}).items():
            session.changed.add(key)
            if session.waker is not None and not (high_watermark_only and session.privileged):
                session.waker()

    def holding(self, topic: str, partition: int) -> Iterable[tuple[FetchSession, Key]]:
        """The sessions holding this partition, with their key for it."""
        return self._watch.get((topic, partition), {}).items()


def _key(p: CachedPartition, uses_topic_ids: bool) -> Key:
    return (p.topic_id if uses_topic_ids else p.topic, p.partition)


def sessionless(partitions: Iterable[CachedPartition], replica_id: int, uses_topic_ids: bool,
                now_ms: int) -> FetchSession:
    """A session for one request only, in no cache: every partition is read and sent."""
    session = FetchSession(INVALID_SESSION_ID, replica_id >= 0, replica_id, uses_topic_ids,
                           now_ms, now_ms)
    for p in partitions:
        key = _key(p, uses_topic_ids)
        session.partitions[key] = p
        session.changed.add(key)
    return session
