"""ShareFetch (78) and ShareAcknowledge (79): a share consumer's reads and
acknowledgements at the leaders of its partitions (KIP-932).

Owns: unpacking them, their share session (broker.share.session: epoch 0 opens, n
continues, -1 is the last), their authorization (READ on the group and on each topic),
and the answer's layout; broker.share.manager acquires, acknowledges and persists.

A ShareFetch first applies the acknowledgements it carries (piggybacked), then forgets
the partitions it names in ForgottenTopicsData (their records still acquired by the
member go back), then, unless it is the session's last request, acquires records from
every partition of the session: up to `MaxRecords` (v1; 500 for v0, Kafka's
max.poll.records default) and `MaxBytes` in all. With nothing acquired it waits up to
`MaxWaitMs` for an append, a lock that expired or a record another member released. Each
partition answers its fetch error and its acknowledgement error apart
(AcknowledgeErrorCode), so a bad acknowledgement (INVALID_RECORD_STATE for a record this
member does not hold, INVALID_REQUEST for a malformed range) never stops the records of
the fetch. A partition led elsewhere answers NOT_LEADER_OR_FOLLOWER with the leader and
its endpoint (NodeEndpoints), as Fetch does since KIP-951.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from broker import timeouts
from broker.handlers.common import current_leader
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_group, authorize_topic
from broker.share.session import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from protocol.errors import ErrorCode

E = ErrorCode
DEFAULT_MAX_RECORDS = 500  # ShareFetch v0 has no MaxRecords: Kafka's max.poll.records

AckBatches = list[tuple[int, int, list[int]]]
TopicPartition = tuple[uuid.UUID, int]


def _acknowledgements(partitions_of: Any) -> dict[TopicPartition, AckBatches]:
    acks: dict[TopicPartition, AckBatches] = {}
    for t in partitions_of:
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                       for b in p.acknowledgement_batches]
            if batches:
                acks.setdefault((t.topic_id, p.partition_index), []).extend(batches)
    return acks


class _Answer:
    """The partitions of an answer, by topic id, and the leaders it must name."""

    def __init__(self, ctx: RequestContext):
        self.ctx = ctx
        self.partitions: dict[TopicPartition, dict[str, Any]] = {}
        self.leaders: set[int] = set()

    def entry(self, tp: TopicPartition, fetches: bool) -> dict[str, Any]:
        out = self.partitions.get(tp)
        if out is None:
            out = {"partition_index": tp[1], "error_code": E.NONE, "error_message": None,
                   "current_leader": {"leader_id": -1, "leader_epoch": -1}}
            if fetches:
                # empty records, never null: librdkafka refuses a null record set
                out.update(acknowledge_error_code=E.NONE, acknowledge_error_message=None,
                           records=b"", acquired_records=[])
            self.partitions[tp] = out
        return out

    def fail(self, tp: TopicPartition, error: E, fetches: bool, field: str = "error_code"
             ) -> None:
        out = self.entry(tp, fetches)
        out[field] = error
        if error == E.NOT_LEADER_OR_FOLLOWER:
            topic = self.ctx.broker.metadata_cache.topic_by_id(tp[0])
            if topic is not None:
                out["current_leader"] = current_leader(self.ctx.broker, topic.name, tp[1])
                if out["current_leader"]["leader_id"] >= 0:
                    self.leaders.add(out["current_leader"]["leader_id"])

    def responses(self) -> list[dict]:
        by_topic: dict[uuid.UUID, list[dict]] = {}
        for (topic_id, _), out in self.partitions.items():
            by_topic.setdefault(topic_id, []).append(out)
        return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]

    def node_endpoints(self) -> list[dict]:
        cache = self.ctx.broker.metadata_cache
        out = []
        for node in sorted(self.leaders):
            endpoint = cache.endpoint(node, self.ctx.listener_name)
            registration = cache.broker(node)
            if endpoint is not None and registration is not None:
                out.append({"node_id": node, "host": endpoint.host, "port": endpoint.port,
                            "rack": registration.rack})
        return out


# the share coordinator not ready yet (loading, moving, just created): a fetch leaves the
# partition out and tries again while it waits, since librdkafka takes any error it does
# not know on a fetched partition for the application's; Kafka's leader likewise answers
# nothing for a share partition still initializing
_NOT_YET = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                      E.NOT_COORDINATOR, E.REQUEST_TIMED_OUT})
RETRY_LOAD_S = 0.1


async def _holder(ctx: RequestContext, answer: _Answer, group_id: str, tp: TopicPartition,
                  fetches: bool, field: str = "error_code", not_yet: set | None = None):
    """The share partition for `tp`, or None with the error written into the answer (or,
    given `not_yet`, the partition added to it when its state cannot be loaded yet)."""
    topic = ctx.broker.metadata_cache.topic_by_id(tp[0])
    if topic is None:
        answer.fail(tp, E.UNKNOWN_TOPIC_ID, fetches, field)
        return None
    if not authorize_topic(ctx, AclOperation.READ, topic.name):
        answer.fail(tp, E.TOPIC_AUTHORIZATION_FAILED, fetches, field)
        return None
    if tp[1] not in topic.partitions:
        answer.fail(tp, E.UNKNOWN_TOPIC_OR_PARTITION, fetches, field)
        return None
    held = await ctx.broker.shares.holder(group_id, topic.name, tp[0], tp[1])
    if isinstance(held, ErrorCode):
        if not_yet is not None and held in _NOT_YET:
            not_yet.add(tp)
        else:
            answer.fail(tp, held, fetches, field)
        return None
    return held


async def _apply_acknowledgements(ctx: RequestContext, answer: _Answer, group_id: str,
                                  member_id: str, acks: dict[TopicPartition, AckBatches],
                                  fetches: bool) -> None:
    field = "acknowledge_error_code" if fetches else "error_code"
    for tp, batches in acks.items():
        answer.entry(tp, fetches)
        held = await _holder(ctx, answer, group_id, tp, fetches, field)
        if held is None:
            continue
        error = await ctx.broker.shares.acknowledge(held, member_id, batches)
        if error != E.NONE:
            answer.fail(tp, error, fetches, field)


def _top_level(error: E, version_fields: dict) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": None,
            "responses": [], "node_endpoints": [], **version_fields}


async def handle_share_fetch(ctx: RequestContext) -> dict:
    b, broker = ctx.body, ctx.broker
    lock_ms = broker.config.group_share_record_lock_duration_ms
    extra = {"acquisition_lock_timeout_ms": lock_ms} if ctx.version >= 1 else {}
    if not b.group_id or not b.member_id:
        return _top_level(E.INVALID_REQUEST, extra)
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return _top_level(E.GROUP_AUTHORIZATION_FAILED, extra)
    acks = _acknowledgements(b.topics)
    named = [(t.topic_id, p.partition_index) for t in b.topics for p in t.partitions]
    forgotten = [(t.topic_id, p) for t in b.forgotten_topics_data for p in t.partitions]
    shares = broker.shares
    opened = shares.sessions.begin(b.group_id, b.member_id, b.share_session_epoch,
                                   ctx.connection, named, forgotten, bool(acks),
                                   broker.now_ms())
    for ended in opened.ended:
        await shares.release_session(ended)
    if opened.error != E.NONE:
        return _top_level(opened.error, extra)
    session = opened.session
    assert session is not None
    if b.share_session_epoch == INITIAL_EPOCH:
        await shares.revalidate(b.group_id, named)
    answer = _Answer(ctx)
    await _apply_acknowledgements(ctx, answer, b.group_id, b.member_id, acks, True)
    if forgotten:
        await shares.release(b.group_id, b.member_id, forgotten)
    if b.share_session_epoch == FINAL_EPOCH:
        await shares.close_session(session)
    else:
        # v1's MaxRecords 0 is a request that only acknowledges (librdkafka's commit)
        max_records = b.get("max_records", DEFAULT_MAX_RECORDS)
        if max_records > 0:
            await _fetch(ctx, answer, session, max_records, b.max_bytes, b.max_wait_ms)
    return {**_top_level(E.NONE, extra), "responses": answer.responses(),
            "node_endpoints": answer.node_endpoints()}


async def _fetch(ctx: RequestContext, answer: _Answer, session: ShareSession,
                 max_records: int, max_bytes: int, max_wait_ms: int) -> None:
    """Acquire from the session's partitions, waiting up to `max_wait_ms` for records."""
    broker = ctx.broker
    deadline = trio.current_time() + max(max_wait_ms, 0) / 1000
    while True:
        held_all = []
        not_yet: set[TopicPartition] = set()
        for tp in sorted(session.partitions, key=lambda tp: (str(tp[0]), tp[1])):
            held = await _holder(ctx, answer, session.group_id, tp, True, not_yet=not_yet)
            if held is not None:
                held_all.append((tp, held))
        got = 0
        budget = max_bytes if max_bytes > 0 else 2**31 - 1
        for tp, held in held_all:
            if got >= max_records or budget <= 0:
                break
            data, acquired, error = await broker.shares.acquire(
                held, session.member_id, max_records - got, budget)
            if error != E.NONE:
                answer.fail(tp, error, True)
                continue
            if acquired:
                out = answer.entry(tp, True)
                out["records"] = data
                out["acquired_records"] = acquired
                got += sum(a["last_offset"] - a["first_offset"] + 1 for a in acquired)
                budget -= len(data)
        if got or trio.current_time() >= deadline or any(
                out["error_code"] != E.NONE for out in answer.partitions.values()):
            return
        watched = [(h.topic, h.partition) for _, h in held_all]
        wake = min(deadline, trio.current_time() + RETRY_LOAD_S) if not_yet else deadline
        with timeouts.move_on_at(wake):
            if watched:
                await broker.wait_for_data(watched)
            else:
                await trio.sleep_forever()
        if not watched and not not_yet:
            return


async def handle_share_acknowledge(ctx: RequestContext) -> dict:
    b, broker = ctx.body, ctx.broker
    if not b.group_id or not b.member_id:
        return _top_level(E.INVALID_REQUEST, {})
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return _top_level(E.GROUP_AUTHORIZATION_FAILED, {})
    shares = broker.shares
    opened = shares.sessions.acknowledge_only(b.group_id, b.member_id, b.share_session_epoch,
                                              broker.now_ms())
    for ended in opened.ended:
        await shares.release_session(ended)
    if opened.error != E.NONE:
        return _top_level(opened.error, {})
    session = opened.session
    assert session is not None
    answer = _Answer(ctx)
    acks = _acknowledgements(b.topics)
    for tp in [(t.topic_id, p.partition_index) for t in b.topics for p in t.partitions]:
        answer.entry(tp, False)
    await _apply_acknowledgements(ctx, answer, b.group_id, b.member_id, acks, False)
    if b.share_session_epoch == FINAL_EPOCH:
        await shares.close_session(session)
    return {**_top_level(E.NONE, {}), "responses": answer.responses(),
            "node_endpoints": answer.node_endpoints()}
