"""The ShareConsumer, on trio: a member of a KIP-932 share group.

Owns: `ShareConsumer` (and re-exports `AcknowledgeType` and `ShareConsumerRecord`).

    async with ShareConsumer("tasks", bootstrap_servers="127.0.0.1:9092",
                             group_id="workers") as worker:
        while True:
            for record in await worker.poll(timeout_ms=1000):
                handle(record.value)          # accepted at the next poll (implicit mode)

    async with ShareConsumer("tasks", bootstrap_servers="127.0.0.1:9092", group_id="workers",
                             share_acknowledgement_mode="explicit") as worker:
        for record in await worker.poll(timeout_ms=1000):
            worker.acknowledge(record, AcknowledgeType.ACCEPT if ok(record)
                               else AcknowledgeType.RELEASE)
        results = await worker.commit()       # {tp: None or the KafkaError}

Membership is share_membership.py's member, driven here by a background task:
ShareGroupHeartbeat to the group coordinator (FindCoordinator key type 0), at the interval
the broker answers; a fenced member joins again. Records are share_fetcher.py's: a
ShareFetch per leader, in a share session per leader, only when the application polls.

Acknowledgement (share_acknowledgement_mode, Kafka's share.acknowledgement.mode):
implicit (the default) accepts every record a poll returned when the next poll, commit()
or close comes; explicit wants acknowledge(record, type) for each of them before the next
poll (a RuntimeError otherwise, as Java's IllegalStateException). Either way the
acknowledgements go out with the next ShareFetch to the record's leader, or at once with
commit(). On close: what is pending is acknowledged with the final ShareAcknowledge
(epoch -1), which closes each share session (the records still held go back to the
group), then the member leaves (epoch -1); bounded by close_timeout_ms and shielded from
cancellation.
"""

from __future__ import annotations

import logging
import math
from contextlib import AsyncExitStack
from typing import Any, Iterable, Sequence

import trio

from client.cluster import Cluster, find_group_coordinator
from client.config import check_config
from client.connection import ConnectionPool, background_nursery
from client.consumer.config import ShareConsumerConfig
from client.consumer.share_fetcher import ShareConsumerRecord, ShareFetcher
from client.consumer.share_membership import HeartbeatOutcome, ShareGroupMember
from client.consumer.share_state import AcknowledgeType
from client.errors import KafkaError, for_code
from client.types import TopicPartition
from protocol.errors import ErrorCode
from protocol.messages import SHARE_GROUP_HEARTBEAT

__all__ = ["AcknowledgeType", "ShareConsumer", "ShareConsumerRecord"]

log = logging.getLogger("minibroker.client.share_consumer")

COORDINATOR_CHANNEL = "group"
LEAVE_TIMEOUT_MS = 5_000


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


class ShareConsumer:
    """A share group member; an async context manager. Takes ShareConsumerConfig's names
    (client.consumer.config); group_id is required."""

    def __init__(self, *topics: str, bootstrap_servers: str | Sequence[str] = "localhost:9092",
                 group_id: str = "", **config: Any):
        self.config: ShareConsumerConfig = check_config(  # type: ignore[assignment]
            "share_consumer", bootstrap_servers=bootstrap_servers, group_id=group_id,
            **config)
        if not self.config.group_id:
            raise for_code(ErrorCode.INVALID_GROUP_ID, "a ShareConsumer needs a group_id")
        self.explicit = self.config.share_acknowledgement_mode == "explicit"
        self.member = ShareGroupMember(
            self.config.group_id, topics, heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            retry_backoff_ms=self.config.retry_backoff_ms, rack_id=self.config.client_rack or None)
        self._pool: ConnectionPool | None = None
        self._cluster: Cluster | None = None
        self._fetcher: ShareFetcher | None = None
        self._exit_stack: AsyncExitStack | None = None
        self._coordinator_id: int | None = None
        self._heartbeat_scope: trio.CancelScope | None = None
        self._heartbeat_wakeup = trio.Event()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> "ShareConsumer":
        async with AsyncExitStack() as stack:
            pool = self._pool = await stack.enter_async_context(ConnectionPool(self.config))
            await pool.bootstrap()
            self._cluster = Cluster(pool, self.config, topics=self.member.topics)
            self._fetcher = ShareFetcher(pool, self._cluster, self.config, self.member)
            nursery = await stack.enter_async_context(background_nursery())
            await nursery.start(self._fetcher.run)
            await nursery.start(self._run_heartbeats)
            stack.push_async_callback(self._close)
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info) -> None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.aclose()

    async def _close(self) -> None:
        """Acknowledge what is pending and close the share sessions, then leave the group;
        shielded, within close_timeout_ms."""
        self._closed = True
        fetcher = self._open()
        fetcher.stop()
        if self._heartbeat_scope is not None:
            self._heartbeat_scope.cancel()
        with trio.CancelScope(shield=True), \
                trio.move_on_after(self.config.close_timeout_ms / 1000) as budget:
            if not self.explicit:
                fetcher.accept_handed()
            try:
                await fetcher.close()
            finally:
                body = self.member.leave()
                if body is not None:
                    try:
                        await self._coordinator_request(body, LEAVE_TIMEOUT_MS)
                    except KafkaError as e:  # the coordinator expires the member instead
                        log.warning("share group %s: leaving: %s", self.config.group_id, e)
        if budget.cancelled_caught:
            log.warning("share group %s: close did not finish within %d ms; abandoned",
                        self.config.group_id, self.config.close_timeout_ms)

    def _open(self) -> ShareFetcher:
        if self._fetcher is None:
            raise RuntimeError("the ShareConsumer is not open (use `async with`)")
        return self._fetcher

    # -- the application's calls -------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Share these topics' records with the group (replacing an earlier subscription);
        the coordinator hears of it at once."""
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        self.member.subscribe(names, _now_ms() if self._fetcher is not None else 0)
        if self._cluster is not None:
            self._cluster.add_topics(names)
        self._heartbeat_wakeup.set()

    def subscription(self) -> tuple[str, ...]:
        return self.member.topics

    def assignment(self) -> frozenset[TopicPartition]:
        return self.member.assignment

    async def poll(self, timeout_ms: int = 0, max_records: int | None = None
                   ) -> list[ShareConsumerRecord]:
        """Records acquired for this member (at most max_records, default
        max_poll_records), waiting up to `timeout_ms` for some. In implicit mode the
        records the previous poll returned are accepted first; in explicit mode each must
        have been acknowledged (RuntimeError otherwise)."""
        fetcher = self._open()
        if self._closed:
            return []
        if self.explicit:
            if fetcher.unacknowledged():
                raise RuntimeError(f"{fetcher.unacknowledged()} records of the last poll are "
                                   "not acknowledged (share_acknowledgement_mode=explicit)")
        else:
            fetcher.accept_handed()
        limit = max_records or self.config.max_poll_records
        deadline = trio.current_time() + timeout_ms / 1000
        while True:
            self._raise_errors(fetcher)
            if self.member.joined and self.member.assignment:
                await fetcher.send_fetches(self.member.assignment)
            records = fetcher.take(limit, self.member.assignment)
            if records:
                return self._deserialize(records)
            left = deadline - trio.current_time()
            if left <= 0:
                await trio.lowlevel.checkpoint()
                return []
            await fetcher.wait(left)

    async def getmany(self, timeout_ms: int = 0, max_records: int | None = None
                      ) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        """poll(), by partition (as Consumer.getmany)."""
        out: dict[TopicPartition, list[ShareConsumerRecord]] = {}
        for r in await self.poll(timeout_ms, max_records):
            out.setdefault(r.topic_partition, []).append(r)
        return out

    def acknowledge(self, record: ShareConsumerRecord,
                    type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Say what became of a record the last poll returned (explicit mode); it goes out
        with the next ShareFetch to its leader, or with commit()."""
        if not self.explicit:
            raise RuntimeError("acknowledge() needs share_acknowledgement_mode='explicit'")
        self._open().acknowledge(record.topic_partition, record.offset, AcknowledgeType(type))

    async def commit(self) -> dict[TopicPartition, KafkaError | None]:
        """Send every pending acknowledgement now (ShareAcknowledge to each leader);
        returns, per partition acknowledged, None or the error that refused it."""
        fetcher = self._open()
        if not self.explicit:
            fetcher.accept_handed()
        return await fetcher.commit()

    def _raise_errors(self, fetcher: ShareFetcher) -> None:
        if self.member.error is not None:
            raise self.member.error
        fetcher.raise_error()

    def _deserialize(self, records: list[ShareConsumerRecord]) -> list[ShareConsumerRecord]:
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        if kd is None and vd is None:
            return records
        return [r._replace(key=r.key if kd is None or r.key is None else kd(r.key),
                           value=r.value if vd is None or r.value is None else vd(r.value))
                for r in records]

    # -- membership --------------------------------------------------------------------

    async def _run_heartbeats(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as self._heartbeat_scope:
            task_status.started()
            while self.member.error is None:
                now = _now_ms()
                body = self.member.tick(now)
                if body is None:
                    due = self.member.next_heartbeat_at()
                    self._heartbeat_wakeup = trio.Event()
                    with trio.move_on_at(math.inf if due is None else (due + 1) / 1000):
                        await self._heartbeat_wakeup.wait()
                    continue
                try:
                    await self._heartbeat(body)
                except KafkaError as e:  # not retriable (an authorization error): the end
                    self.member.error = e
                    log.error("share group %s: %s", self.member.group_id, e)
                    self._open().wake()

    async def _heartbeat(self, body: dict) -> None:
        member = self.member
        before = member.assignment
        resp = await self._coordinator_request(body)
        if resp is None:
            member.on_failed(_now_ms())
            return
        answer = resp.body
        assignment = None
        if answer.error_code == 0 and answer.get("assignment") is not None:
            assignment = await self._named(answer.assignment.topic_partitions)
        outcome = member.on_response({
            "error_code": answer.error_code, "error_message": answer.error_message,
            "member_id": answer.member_id, "member_epoch": answer.member_epoch,
            "heartbeat_interval_ms": answer.heartbeat_interval_ms,
            "assignment": assignment}, _now_ms())
        if outcome is HeartbeatOutcome.COORDINATOR:
            self._coordinator_id = None
        elif outcome is HeartbeatOutcome.FATAL:
            log.error("share group %s: %s", member.group_id, member.error)
        elif outcome is HeartbeatOutcome.REJOIN:
            log.info("share group %s: fenced; joining again", member.group_id)
        if member.assignment != before or outcome is HeartbeatOutcome.FATAL:
            self._open().wake()  # a poll waiting for partitions fetches at once

    async def _named(self, topic_partitions: Any) -> dict[str, list[int]]:
        """The assignment by topic name (a topic id not known yet refreshes the metadata;
        one still unknown is left out, and comes again with a later heartbeat)."""
        assert self._cluster is not None
        if any(self._cluster.metadata.topic_name(t.topic_id) is None for t in topic_partitions):
            try:
                await self._cluster.refresh()
            except KafkaError as e:
                log.info("share group %s: metadata for the assignment: %s",
                         self.member.group_id, e)
        out: dict[str, list[int]] = {}
        for t in topic_partitions:
            name = self._cluster.metadata.topic_name(t.topic_id)
            if name is not None:
                out[name] = list(t.partitions)
        return out

    async def _coordinator_request(self, body: dict, timeout_ms: int | None = None) -> Any:
        """A ShareGroupHeartbeat to the group coordinator; None when no answer came."""
        assert self._pool is not None
        try:
            if self._coordinator_id is None:
                self._coordinator_id, _ = await find_group_coordinator(
                    self._pool, self.member.group_id)
            conn = await self._pool.get(self._coordinator_id, channel=COORDINATOR_CHANNEL)
            return await conn.request(SHARE_GROUP_HEARTBEAT, body, timeout_ms=timeout_ms)
        except KafkaError as e:
            if not e.retriable:
                raise
            log.info("share group %s: heartbeat failed: %s", self.member.group_id, e)
            self._coordinator_id = None
            return None
