"""The share consumer's fetcher (KIP-932): ShareFetch and ShareAcknowledge at the leaders of
the member's partitions, one share session per leader.

Owns: `ShareConsumerRecord` (a ConsumerRecord with its delivery count) and `ShareFetcher`.

A ShareFetch goes to a leader when the application polls and nothing it fetched from that
leader is left to hand out: records are acquired (locked to this member for the group's
record lock duration) only as fast as the application takes them, so a member that stops
polling stops acquiring, and what it holds goes to another member when its locks expire.
At most one request per leader is in flight (a lock per leader), so that the session's
epochs go out in order; a ShareFetch waits up to fetch_max_wait_ms for records (long
polling) and asks for at most max_poll_records (MaxRecords, BatchSize). Only the records
inside the answer's AcquiredRecords ranges are handed out (share_state.acquired).

Acknowledgements are kept per leader, since they belong to the session that acquired the
records, and go out with that leader's next ShareFetch (piggybacked), or at once with
ShareAcknowledge (`commit`), or with the final ShareAcknowledge that closes the session
(`close`). A session the leader dropped (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, a lost connection) is opened again with epoch 0; the
acknowledgements pending there are void, since the leader handed those records back.

Errors per partition (NOT_LEADER_OR_FOLLOWER and the other metadata codes) ask for fresh
metadata and the partition is fetched from its new leader later, after retry_backoff_ms;
one that is not retriable (TOPIC_AUTHORIZATION_FAILED) is kept and raised from the next
poll (`raise_error`).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Iterable, NamedTuple, Sequence

import trio

from client.cluster import Cluster
from client.connection import ConnectionPool
from client.consumer.config import ShareConsumerConfig
from client.consumer.fetcher import ConsumerRecord
from client.consumer.share_state import (
    FINAL_EPOCH, GAP, AcknowledgeType, ShareSessionState, acknowledgement_batches, acquired,
)
from client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, for_code
from client.types import TopicPartition
from protocol.errors import ErrorCode
from protocol.messages import SHARE_ACKNOWLEDGE, SHARE_FETCH
from protocol.records import decode_batch_rows, row_batches

__all__ = ["ShareConsumerRecord", "ShareFetcher"]

log = logging.getLogger("minibroker.client.share_consumer")

E = ErrorCode
_SESSION_GONE = {E.SHARE_SESSION_NOT_FOUND, E.INVALID_SHARE_SESSION_EPOCH}

Acks = dict[TopicPartition, dict[int, int]]  # tp -> offset -> acknowledge type


class ShareConsumerRecord(NamedTuple):
    """One record a share consumer was given: ConsumerRecord's fields, then how many times
    it has been delivered (1 the first time)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes | None]] = ()
    delivery_count: int = 1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class _Leader:
    """What the fetcher keeps for one leader node."""

    def __init__(self) -> None:
        self.session: ShareSessionState[TopicPartition] = ShareSessionState()
        self.lock = trio.Lock()  # one request in flight, so that epochs go in order
        self.buffer: deque[ShareConsumerRecord] = deque()
        self.acks: Acks = {}
        self.fetching = False
        self.not_before = 0.0  # after an error: no ShareFetch before this (trio time)


class ShareFetcher:
    def __init__(self, pool: ConnectionPool, cluster: Cluster, config: ShareConsumerConfig,
                 member: Any):
        self.pool = pool
        self.cluster = cluster
        self.config = config
        self.member = member  # ShareGroupMember: its group id and member id
        self._leaders: dict[int, _Leader] = {}
        self._handed: dict[tuple[TopicPartition, int], int] = {}  # -> node, not acked yet
        self._arrived = trio.Event()  # set (and replaced) when a ShareFetch ends
        self._nursery: trio.Nursery | None = None
        self.error: KafkaError | None = None

    def _leader(self, node_id: int) -> _Leader:
        leader = self._leaders.get(node_id)
        if leader is None:
            leader = self._leaders[node_id] = _Leader()
        return leader

    # -- the background ShareFetches ------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Host the ShareFetch tasks until cancelled (`stop`)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def stop(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
            self._nursery = None

    def raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    def wake(self) -> None:
        done, self._arrived = self._arrived, trio.Event()
        done.set()

    async def wait(self, timeout_s: float) -> None:
        """Until a ShareFetch ends (or wake()), at most `timeout_s`; when none is in flight,
        at most retry_backoff_ms (a leader unknown, an error backing off)."""
        if not any(leader.fetching for leader in self._leaders.values()):
            timeout_s = min(timeout_s, self.config.retry_backoff_ms / 1000)
        with trio.move_on_after(max(0.0, timeout_s)):
            await self._arrived.wait()

    async def send_fetches(self, assignment: Iterable[TopicPartition]) -> None:
        """A ShareFetch to every leader of an assigned partition that has none in flight and
        nothing left to hand out; also to a leader that has acknowledgements only."""
        if self._nursery is None:
            return
        wanted = set(assignment)
        self.cluster.add_topics({tp.topic for tp in wanted})
        try:
            metadata = await self.cluster.maybe_refresh()
        except KafkaError as e:  # no broker answered: the poll waits and tries again
            if not e.retriable:
                raise
            log.info("ShareFetch: metadata refresh failed: %s", e)
            return
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            node = metadata.leader_for(tp.topic, tp.partition)
            if node is None or node not in self.pool.nodes \
                    or metadata.topic_id(tp.topic) is None:
                self.cluster.request_update()
                continue
            by_node.setdefault(node, []).append(tp)
        now = trio.current_time()
        for node in set(by_node) | {n for n, leader in self._leaders.items() if leader.acks}:
            leader = self._leader(node)
            if leader.fetching or leader.buffer or now < leader.not_before:
                continue
            leader.fetching = True
            self._nursery.start_soon(self._fetch_task, node, by_node.get(node, []))

    async def _fetch_task(self, node_id: int, wanted: list[TopicPartition]) -> None:
        leader = self._leaders[node_id]
        try:
            async with leader.lock:
                await self._share_fetch(node_id, leader, wanted)
        except (KafkaConnectionError, KafkaTimeoutError) as e:
            log.info("ShareFetch to node %d: %s", node_id, e)
            self._session_lost(leader)
            self.cluster.request_update()
            leader.not_before = trio.current_time() + self.config.retry_backoff_ms / 1000
        except KafkaError as e:
            if self.error is None:
                self.error = e
        finally:
            leader.fetching = False
            self.wake()

    async def _share_fetch(self, node_id: int, leader: _Leader,
                           wanted: list[TopicPartition]) -> None:
        conn = await self.pool.get(node_id)
        if not leader.session.is_open:
            self._void(leader.acks, "the share session was not open")
            leader.acks = {}
            if not wanted:
                return  # nothing to fetch there, nothing left to acknowledge
        acks, leader.acks = leader.acks, {}
        plan = leader.session.plan(wanted, acks)
        ids = self.cluster.metadata.topic_id
        topics: dict[Any, list] = {}
        for tp in plan.named:
            topics.setdefault(ids(tp.topic), []).append({
                "partition_index": tp.partition, "partition_max_bytes": 0,
                "acknowledgement_batches": acknowledgement_batches(acks.get(tp, {}))})
        forgotten: dict[Any, list] = {}
        for tp in plan.forgotten:
            forgotten.setdefault(ids(tp.topic), []).append(tp.partition)
        max_wait = self.config.fetch_max_wait_ms
        body = {
            "group_id": self.member.group_id, "member_id": self.member.member_id,
            "share_session_epoch": plan.epoch, "max_wait_ms": max_wait,
            "min_bytes": self.config.fetch_min_bytes, "max_bytes": self.config.fetch_max_bytes,
            # nothing to fetch there: a request that only acknowledges
            "max_records": self.config.max_poll_records if wanted else 0,
            "batch_size": self.config.max_poll_records,
            "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()
                       if t is not None],
            "forgotten_topics_data": [{"topic_id": t, "partitions": ps}
                                      for t, ps in forgotten.items() if t is not None]}
        resp = await conn.request(SHARE_FETCH, body,
                                  timeout_ms=self.config.request_timeout_ms + max_wait)
        top = E.of(resp.body.error_code)
        if top != E.NONE:
            self._session_lost(leader, acks)
            leader.not_before = trio.current_time() + self.config.retry_backoff_ms / 1000
            if top in _SESSION_GONE or self.cluster.note_error(top) or top.retriable:
                log.info("ShareFetch to node %d: %s; opening a new session", node_id, top.name)
                return
            raise for_code(top, resp.body.get("error_message") or f"ShareFetch to node {node_id}")
        leader.session.answered(plan)
        for t in resp.body.responses:
            name = self.cluster.metadata.topic_name(t.topic_id)
            if name is None:
                continue
            for p in t.partitions:
                self._partition(leader, TopicPartition(name, p.partition_index), p)

    def _partition(self, leader: _Leader, tp: TopicPartition, p: Any) -> None:
        ack_error = E.of(p.acknowledge_error_code)
        if ack_error != E.NONE:
            log.warning("acknowledgements on %s-%d refused: %s", tp.topic, tp.partition,
                        ack_error.name)
        code = E.of(p.error_code)
        if code != E.NONE:
            leader.not_before = trio.current_time() + self.config.retry_backoff_ms / 1000
            if not self.cluster.note_error(code) and not code.retriable \
                    and self.error is None:
                self.error = for_code(code, p.get("error_message")
                                      or f"ShareFetch {tp.topic}-{tp.partition}")
            return
        ranges = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
        if not ranges:
            return
        rows: list[ConsumerRecord] = []
        data = p.records or b""
        first = min(r[0] for r in ranges)
        for pos, header in row_batches(data, first)[0]:
            rows.extend(decode_batch_rows(data, pos, header, ConsumerRecord, tp.topic,
                                          tp.partition, first))
        kept, gaps = acquired(rows, ranges)
        leader.buffer.extend(ShareConsumerRecord(*r, delivery_count=count)
                             for r, count in kept)
        if gaps:
            leader.acks.setdefault(tp, {}).update(dict.fromkeys(gaps, GAP))

    # -- handing records out and acknowledging them ----------------------------------------

    def take(self, max_records: int, assignment: frozenset[TopicPartition]
             ) -> list[ShareConsumerRecord]:
        """Up to `max_records` fetched records, now handed out (to be acknowledged). Those of
        partitions no longer assigned are released, for another member to have at once."""
        out: list[ShareConsumerRecord] = []
        for node, leader in self._leaders.items():
            while leader.buffer and len(out) < max_records:
                r = leader.buffer.popleft()
                tp = TopicPartition(r.topic, r.partition)
                if tp not in assignment:
                    leader.acks.setdefault(tp, {})[r.offset] = AcknowledgeType.RELEASE
                    continue
                self._handed[(tp, r.offset)] = node
                out.append(r)
        return out

    def unacknowledged(self) -> int:
        return len(self._handed)

    def acknowledge(self, tp: TopicPartition, offset: int, kind: AcknowledgeType) -> None:
        node = self._handed.pop((tp, offset), None)
        if node is None:
            raise ValueError(f"{tp.topic}-{tp.partition} offset {offset} is not a record the "
                             "last poll returned, or it was acknowledged already")
        self._leader(node).acks.setdefault(tp, {})[offset] = int(AcknowledgeType(kind))

    def accept_handed(self) -> None:
        """Implicit acknowledgement: every record handed out is accepted."""
        for (tp, offset), node in self._handed.items():
            self._leader(node).acks.setdefault(tp, {})[offset] = AcknowledgeType.ACCEPT
        self._handed.clear()

    async def commit(self) -> dict[TopicPartition, KafkaError | None]:
        """Send every pending acknowledgement now, with ShareAcknowledge; per partition,
        None or the error that refused its acknowledgements."""
        results: dict[TopicPartition, KafkaError | None] = {}
        for node_id, leader in list(self._leaders.items()):
            if leader.acks:
                async with leader.lock:
                    results.update(await self._share_acknowledge(node_id, leader,
                                                                 leader.session.epoch))
        return results

    async def close(self) -> None:
        """Close every open session with a final ShareAcknowledge (epoch -1) carrying what
        is still pending; what the member still holds there goes back to the group."""
        for node_id, leader in list(self._leaders.items()):
            if not leader.session.is_open:
                continue
            async with leader.lock:
                try:
                    errors = await self._share_acknowledge(node_id, leader, FINAL_EPOCH)
                except KafkaError as e:
                    log.warning("closing the share session on node %d: %s", node_id, e)
                    continue
            for tp, error in errors.items():
                if error is not None:
                    log.warning("acknowledgements on %s-%d refused at close: %s", tp.topic,
                                tp.partition, error)

    async def _share_acknowledge(self, node_id: int, leader: _Leader, epoch: int
                                 ) -> dict[TopicPartition, KafkaError | None]:
        acks, leader.acks = leader.acks, {}
        if not leader.session.is_open:
            return self._void(acks, "the share session was not open")
        ids = self.cluster.metadata.topic_id
        topics: dict[Any, list] = {}
        for tp, offsets in acks.items():
            topics.setdefault(ids(tp.topic), []).append({
                "partition_index": tp.partition,
                "acknowledgement_batches": acknowledgement_batches(offsets)})
        try:
            conn = await self.pool.get(node_id)
            resp = await conn.request(SHARE_ACKNOWLEDGE, {
                "group_id": self.member.group_id, "member_id": self.member.member_id,
                "share_session_epoch": epoch,
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()
                           if t is not None]})
        except (KafkaConnectionError, KafkaTimeoutError) as e:
            self._session_lost(leader)
            self.cluster.request_update()
            return {tp: e for tp in acks}
        top = E.of(resp.body.error_code)
        if epoch == FINAL_EPOCH:
            leader.session.reset()
        if top != E.NONE:
            self._session_lost(leader)
            error = for_code(top, resp.body.get("error_message") or "ShareAcknowledge")
            return {tp: error for tp in acks}
        if epoch != FINAL_EPOCH:
            leader.session.acknowledged()
        results: dict[TopicPartition, KafkaError | None] = dict.fromkeys(acks)
        for t in resp.body.responses:
            name = self.cluster.metadata.topic_name(t.topic_id)
            for p in t.partitions:
                code = E.of(p.error_code)
                if name is not None and code != E.NONE:
                    self.cluster.note_error(code)
                    results[TopicPartition(name, p.partition_index)] = for_code(
                        code, p.get("error_message") or "ShareAcknowledge")
        return results

    def _session_lost(self, leader: _Leader, sent: Acks | None = None) -> None:
        """The leader dropped the session (or may have): its records went back, so what is
        buffered and pending from it is void; the next request opens a new one."""
        leader.session.reset()
        leader.buffer.clear()
        self._void({**leader.acks, **(sent or {})}, "the share session was lost")
        leader.acks = {}

    @staticmethod
    def _void(acks: Acks, why: str) -> dict[TopicPartition, KafkaError | None]:
        if acks:
            log.info("%d acknowledgements dropped: %s (the records are delivered again)",
                     sum(len(o) for o in acks.values()), why)
        error = for_code(E.SHARE_SESSION_NOT_FOUND, why)
        return {tp: error for tp in acks}
