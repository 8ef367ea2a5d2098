"""KIP-227's fetch session cache (broker.fetch_session) alone, and with the fetcher's side
(protocol.fetch_session) in a seeded simulation: epochs, partitions added, changed and
removed, leaderships moving, lost answers, and Kafka's eviction rules."""

from __future__ import annotations

import random
import uuid

import pytest

from broker.fetch_session import (FINAL_EPOCH, INITIAL_EPOCH, CachedPartition,
                                  FetchSessionCache, SessionContext, next_epoch)
from protocol.errors import ErrorCode
from protocol.fetch_session import FetchSessionHandler

EVICTION_MS = 120_000
T0 = 1_000_000


def part(topic: str, index: int, offset: int = 0, epoch: int = 0) -> CachedPartition:
    return CachedPartition(topic, uuid.UUID(int=hash(topic) & 0xFFFF), index, offset, 1024,
                           current_leader_epoch=epoch)


def consumer_session(cache: FetchSessionCache, now: int, n: int = 1):
    return cache.maybe_create(now, privileged=False, partitions=[part("t", i) for i in range(n)])


def follower_session(cache: FetchSessionCache, now: int, n: int = 1, replica: int = 1):
    return cache.maybe_create(now, privileged=True, replica_id=replica,
                              partitions=[part("t", i) for i in range(n)])


def context(cache: FetchSessionCache, now: int, session_id: int, epoch: int, *,
            parts=(), forgotten=(), replica: int = -1) -> SessionContext | ErrorCode:
    return cache.new_context(now, session_id=session_id, epoch=epoch, replica_id=replica,
                             uses_topic_ids=False, partitions=list(parts),
                             forgotten=list(forgotten))


# -- epochs and the request kinds -----------------------------------------------------------

def test_a_full_request_makes_a_session_that_then_takes_epoch_1_2_3():
    cache = FetchSessionCache(rng=random.Random(1))
    ctx = context(cache, T0, 0, INITIAL_EPOCH, parts=[part("t", 0), part("t", 1)])
    assert isinstance(ctx, SessionContext) and ctx.cached and ctx.full
    sid = ctx.session.id
    assert sid != 0 and set(ctx.session.partitions) == {("t", 0), ("t", 1)}
    for epoch in (1, 2, 3):
        ctx = context(cache, T0 + epoch, sid, epoch)
        assert isinstance(ctx, SessionContext) and ctx.cached and not ctx.full
    # the same epoch again (a retry the broker already took) is refused, and changes nothing
    assert context(cache, T0 + 9, sid, 3) == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.get(sid).epoch == 4
    assert context(cache, T0 + 9, sid + 1, 4) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_epoch_minus_one_is_sessionless_and_closes_the_session_it_names():
    cache = FetchSessionCache()
    sid = consumer_session(cache, T0).id
    ctx = context(cache, T0, sid, FINAL_EPOCH, parts=[part("t", 0)])
    assert isinstance(ctx, SessionContext) and not ctx.cached and ctx.full
    assert ctx.session.id == 0 and cache.get(sid) is None and len(cache) == 0


def test_a_full_request_naming_a_session_replaces_it():
    cache = FetchSessionCache(rng=random.Random(2))
    old = consumer_session(cache, T0).id
    ctx = context(cache, T0, old, INITIAL_EPOCH, parts=[part("t", 5)])
    assert isinstance(ctx, SessionContext) and ctx.session.id != old
    assert cache.get(old) is None and len(cache) == 1


def test_another_replica_cannot_use_a_session_nor_a_v13_request_a_v12_session():
    cache = FetchSessionCache()
    s = follower_session(cache, T0, replica=1)
    assert context(cache, T0, s.id, 1, replica=2) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.new_context(T0, session_id=s.id, epoch=1, replica_id=1, uses_topic_ids=True,
                             partitions=[], forgotten=[]) == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert s.epoch == 1  # refused requests leave it as it was
    assert isinstance(context(cache, T0, s.id, 1, replica=1), SessionContext)


def test_incremental_requests_add_change_and_forget_partitions():
    cache = FetchSessionCache()
    s = consumer_session(cache, T0, n=2)
    s.changed.clear()
    added, updated, removed = cache.update(
        s, [part("t", 1, offset=7), part("u", 0)], [("t", 0), ("nope", 3)])
    assert (added, updated, removed) == ([("u", 0)], [("t", 1)], [("t", 0)])
    assert s.partitions[("t", 1)].fetch_offset == 7
    assert s.changed == {("t", 1), ("u", 0)}
    # forgetting every partition closes the session: the answer is sessionless
    ctx = context(cache, T0, s.id, s.epoch, forgotten=[("t", 1), ("u", 0)])
    assert isinstance(ctx, SessionContext) and not ctx.cached and cache.get(s.id) is None


def test_a_moved_partition_marks_only_the_sessions_holding_it_and_wakes_their_fetch():
    cache = FetchSessionCache()
    a, b = consumer_session(cache, T0, n=1), consumer_session(cache, T0, n=3)
    a.changed.clear()
    b.changed.clear()
    woken = []
    b.waker = lambda: woken.append("b")
    cache.mark_changed("t", 2)
    assert a.changed == set() and b.changed == {("t", 2)} and woken == ["b"]
    cache.remove(b.id)
    cache.mark_changed("t", 0)  # a removed session is no longer told
    assert a.changed == {("t", 0)} and woken == ["b", "b"]  # removal woke its fetch once


def test_a_move_of_the_hw_alone_wakes_a_consumers_fetch_but_not_a_followers():
    """A follower reads to the log end: the HW gives its waiting fetch nothing to answer
    with. Both sessions still read the partition at their next fetch (to send the HW)."""
    cache = FetchSessionCache()
    consumer, follower = consumer_session(cache, T0), follower_session(cache, T0)
    consumer.changed.clear()
    follower.changed.clear()
    woken: list[str] = []
    consumer.waker = lambda: woken.append("consumer")
    follower.waker = lambda: woken.append("follower")
    cache.mark_changed("t", 0, high_watermark_only=True)
    assert woken == ["consumer"]
    assert consumer.changed == follower.changed == {("t", 0)}
    cache.mark_changed("t", 0)  # records: both wake
    assert sorted(woken) == ["consumer", "consumer", "follower"]


def test_the_epoch_wraps_to_1_never_to_the_initial_0():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


# -- eviction --------------------------------------------------------------------------------

def test_a_full_cache_refuses_a_new_session_while_the_others_are_in_use():
    cache = FetchSessionCache(max_slots=2, eviction_ms=EVICTION_MS)
    consumer_session(cache, T0)
    consumer_session(cache, T0)
    assert consumer_session(cache, T0 + 1000) is None
    ctx = context(cache, T0, 0, INITIAL_EPOCH, parts=[part("t", 0)])
    assert isinstance(ctx, SessionContext) and not ctx.cached  # full requests, session 0


def test_the_least_recently_used_session_idle_past_the_eviction_time_goes_first():
    cache = FetchSessionCache(max_slots=2, eviction_ms=EVICTION_MS)
    old, used = consumer_session(cache, T0), consumer_session(cache, T0)
    cache.touch(used, T0 + EVICTION_MS)
    new = consumer_session(cache, T0 + EVICTION_MS + 1)
    assert new is not None and cache.get(old.id) is None and cache.get(used.id) is used
    assert cache.evictions == 1


def test_a_follower_evicts_a_consumer_session_in_use_but_a_consumer_cannot():
    cache = FetchSessionCache(max_slots=2, eviction_ms=EVICTION_MS)
    c1, c2 = consumer_session(cache, T0, n=5), consumer_session(cache, T0, n=3)
    assert consumer_session(cache, T0 + 1, n=50) is None  # consumers: only old sessions
    f = follower_session(cache, T0 + 1, n=3)
    # the least valuable consumer session (fewest partitions) made room
    assert f is not None and cache.get(c2.id) is None and cache.get(c1.id) is c1
    # a follower outranks any consumer, whatever their sizes
    f2 = follower_session(cache, T0 + 2, n=1, replica=2)
    assert f2 is not None and cache.get(c1.id) is None
    # but not a follower's session younger than the eviction time
    assert follower_session(cache, T0 + 3, n=100, replica=3) is None
    assert {s.id for s in cache} == {f.id, f2.id}


def test_sessions_older_than_the_eviction_time_are_evictable_by_a_bigger_consumer():
    cache = FetchSessionCache(max_slots=2, eviction_ms=EVICTION_MS)
    f = follower_session(cache, T0, n=10)
    c = consumer_session(cache, T0, n=4)
    later = T0 + EVICTION_MS + 1
    cache.touch(f, later)  # both in use, both older than the eviction time
    cache.touch(c, later)
    assert consumer_session(cache, later, n=4) is None  # worth no more than the old one
    made = consumer_session(cache, later, n=5)  # more partitions: takes its slot
    assert made is not None and cache.get(c.id) is None and cache.get(f.id) is f
    # a consumer never outranks a follower's session, however many partitions it has
    cache.touch(made, later)
    assert cache.maybe_create(later, privileged=False,
                              partitions=[part("big", i) for i in range(100)]) is not made
    assert cache.get(f.id) is f


def test_one_client_opening_sessions_in_a_loop_cannot_exhaust_the_cache_for_followers():
    cache = FetchSessionCache(max_slots=10, eviction_ms=EVICTION_MS)
    for i in range(1000):
        consumer_session(cache, T0 + i)
    assert len(cache) == 10  # bounded: the rest were answered sessionless
    for replica in (1, 2):
        assert follower_session(cache, T0 + 1000, n=1, replica=replica) is not None
    assert len(cache) == 10 and sum(s.privileged for s in cache) == 2


# -- simulation: the fetcher's handler against the cache --------------------------------------

class SimFetcher:
    """A fetcher (consumer or follower) with the partitions it wants and their offsets."""

    def __init__(self, name: str, replica: int, rng: random.Random):
        self.name, self.replica, self.rng = name, replica, rng
        self.handler: FetchSessionHandler[tuple[str, int]] = FetchSessionHandler()
        self.offsets: dict[tuple[str, int], tuple[int, int]] = {}  # key -> (offset, epoch)

    def mutate(self) -> None:
        r = self.rng.random()
        key = (self.rng.choice("ab"), self.rng.randrange(6))
        if r < 0.3:
            offset, epoch = self.offsets.get(key, (0, 0))
            self.offsets[key] = (offset + self.rng.randrange(1, 5), epoch)  # records came
        elif r < 0.45:
            self.offsets.pop(key, None)  # unassigned, or its leadership moved away
        elif r < 0.55 and key in self.offsets:
            offset, epoch = self.offsets[key]
            self.offsets[key] = (offset, epoch + 1)  # a new leader epoch, same leader
        for k, (offset, epoch) in self.offsets.items():
            self.handler.set(k, {"offset": offset, "epoch": epoch})
        for k in [k for k in self.handler.wanted if k not in self.offsets]:
            self.handler.remove(k)


def _run(seed: int, steps: int = 400) -> dict[str, int]:
    rng = random.Random(seed)
    cache = FetchSessionCache(max_slots=3, eviction_ms=1000, rng=random.Random(seed))
    fetchers = [SimFetcher(f"c{i}", -1, rng) for i in range(3)] + \
        [SimFetcher(f"f{i}", i + 1, rng) for i in range(2)]
    now = T0
    seen = {"incremental": 0, "full": 0, "session_errors": 0, "lost": 0, "sessionless": 0}
    for _ in range(steps):
        now += rng.randrange(0, 400)
        f = rng.choice(fetchers)
        f.mutate()
        if not f.handler.has_work:
            continue
        plan = f.handler.build()
        others = {s.id: (s.epoch, dict(s.partitions)) for s in cache
                  if s.id != plan.session_id}
        parts = [part(k[0], k[1], d["offset"], d["epoch"]) for k, d in plan.partitions.items()]
        seen["full" if plan.full else "incremental"] += 1
        lost = rng.random() < 0.1
        if lost and rng.random() < 0.5:  # lost before the broker saw it
            f.handler.handle_error()
            seen["lost"] += 1
            continue
        ctx = cache.new_context(now, session_id=plan.session_id, epoch=plan.epoch,
                                replica_id=f.replica, uses_topic_ids=False, partitions=parts,
                                forgotten=list(plan.forgotten))
        assert len(cache) <= 3
        if isinstance(ctx, ErrorCode):
            seen["session_errors"] += 1
            # an error touches no other session
            assert {s.id: (s.epoch, dict(s.partitions)) for s in cache
                    if s.id != plan.session_id} == others
            assert not f.handler.handle_response(plan, ctx, 0)
            assert f.handler.build().full  # the next request opens a new session
            continue
        if lost:  # the broker took it, the answer was lost
            f.handler.handle_error()
            seen["lost"] += 1
            continue
        seen["sessionless"] += not ctx.cached
        assert f.handler.handle_response(plan, ErrorCode.NONE,
                                         ctx.session.id if ctx.cached else 0)
        if ctx.cached:
            # both sides agree on the session: its epoch and every partition's fields
            session = cache.get(f.handler.session_id)
            assert session is ctx.session and session.epoch == f.handler.epoch
            assert {k: (p.fetch_offset, p.current_leader_epoch)
                    for k, p in session.partitions.items()} == \
                {k: (d["offset"], d["epoch"]) for k, d in f.handler.sent.items()}
            assert f.handler.sent == f.handler.wanted
        else:
            assert f.handler.session_id == 0 and f.handler.build().full
    return seen


@pytest.mark.parametrize("seed", range(20))
def test_simulated_fetchers_and_the_cache_always_agree_on_each_session(seed):
    seen = _run(seed)
    assert seen["incremental"] > 0 and seen["full"] > 0


def test_the_simulation_exercises_errors_losses_and_refusals():
    totals: dict[str, int] = {}
    for seed in range(20):
        for k, v in _run(seed).items():
            totals[k] = totals.get(k, 0) + v
    assert all(totals[k] > 0 for k in ("session_errors", "lost", "sessionless")), totals
