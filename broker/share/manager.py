"""The share partitions this broker leads, and the trio side of serving them.

Owns: `SharePartitionManager` (Kafka's SharePartitionManager), one per broker: a
share-partition (one share group's view of one topic partition, broker.share.partition)
is made when a ShareFetch first names it here, loaded from the share coordinator
(ReadShareGroupState through broker.share_coordinator.runtime) or, for a group that never
read it, started where `share.auto.offset.reset` says and written there first; it is
dropped when this broker stops leading the partition (the next leader loads it, and this
one's writes are refused from then on by the leader epoch).

Acquiring reads the log from the share partition's fetch offset up to the high watermark
(whole batches, as they lie on disk; transaction markers are never delivered) and hands
those batches' offsets to the state machine; the bytes go out with the ranges acquired,
cut after the last batch that holds one. Every change that must outlive this leader
(acknowledgement, release, an archived record, a moved start offset) is written to the
share coordinator before it is answered, under the share partition's lock, so a
failover loses only locks, never an acknowledgement: a record accepted was accepted. A
write the coordinator refuses or never answers drops the share partition from memory,
and the next request loads it again from what was written; the records acquired since
are delivered again, which at-least-once delivery allows.

Locks expire on a timer task (`run`), which also writes the archived records of the
delivery limit. `emit_state` writes a `share_partition_state` event for each share partition
whose figures changed since its last one; the broker calls it with its `metrics` event
(every events.metrics.interval.ms and at shutdown), so a busy share partition costs one
event per interval, never one per request. Long-polling fetches wait through `wait_for_records`: an append, a lock
that expired or a record released wakes them.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Iterable

import trio

from broker import timeouts
from broker.share.offset_reset import parse_auto_offset_reset
from broker.share.partition import SharePartition, share_partition_config
from broker.share.session import ShareSession, ShareSessionCache
from broker.share_coordinator.state import SharePartitionKey
from protocol.batch_walk import BatchWalk
from protocol.errors import ErrorCode

log = logging.getLogger("minibroker.share")
READ_START_BYTES = 64 * 1024
E = ErrorCode


@dataclass
class Holder:
    """One share partition served here, with what loading it established."""
    key: SharePartitionKey
    topic: str
    partition: int
    leader_epoch: int
    state_epoch: int
    state: SharePartition
    lock: trio.Lock = field(default_factory=trio.Lock)
    # the figures of the last share_partition_state event, which is written only on change
    reported: tuple[int, ...] | None = None


class SharePartitionManager:
    def __init__(self, broker):
        self.broker = broker
        c = broker.config
        self.sessions = ShareSessionCache(c.group_share_max_share_sessions)
        self.holders: dict[SharePartitionKey, Holder] = {}
        self._loading: dict[SharePartitionKey, trio.Event] = {}
        self._timers_changed = trio.Event()
        self._nursery: trio.Nursery | None = None

    # -- loading --------------------------------------------------------------------------------

    async def holder(self, group_id: str, topic: str, topic_id: uuid.UUID,
                     index: int) -> Holder | ErrorCode:
        """The share partition of `group_id` on topic partition `index`, loaded; or why
        this broker cannot serve it now."""
        key = SharePartitionKey(group_id, topic_id, index)
        while True:
            partition = self.broker.partition(topic, index)
            if partition is None or not partition.is_leader:
                self.drop(key)
                return E.NOT_LEADER_OR_FOLLOWER
            held = self.holders.get(key)
            if held is not None and held.leader_epoch == partition.leader_epoch:
                return held
            if held is not None:
                self.drop(key)  # this broker leads again at a newer epoch: load afresh
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        done = self._loading[key] = trio.Event()
        try:
            return await self._load(key, topic, index, partition)
        finally:
            del self._loading[key]
            done.set()

    async def _load(self, key: SharePartitionKey, topic: str, index: int,
                    partition) -> Holder | ErrorCode:
        coordinator = self.broker.share_coordinator
        leader_epoch = partition.leader_epoch
        answer = await coordinator.read_state(key, leader_epoch)
        if answer["error_code"] != E.NONE:
            return E(answer["error_code"])
        config = share_partition_config(self.broker, key.group_id)
        if answer["start_offset"] < 0:
            start = await self._reset_offset(key.group_id, partition)
            written = await coordinator.write_state(key, answer["state_epoch"], leader_epoch,
                                                    start, [])
            if written["error_code"] != E.NONE:
                return E(written["error_code"])
            state = SharePartition.initial(config, start)
        else:
            state = SharePartition.from_persisted(config, answer["start_offset"],
                                                  answer["state_batches"])
        state.move_start_offset(partition.log_start_offset)
        held = Holder(key, topic, index, leader_epoch, answer["state_epoch"], state)
        self.holders[key] = held
        self.broker.events.emit("share_partition_loaded", group_id=key.group_id, topic=topic,
                                partition=index, start_offset=state.start_offset,
                                in_flight=state.in_flight_count())
        return held

    async def _reset_offset(self, group_id: str, partition) -> int:
        """Where a share group that never read this partition starts (share.auto.offset.reset)."""
        policy = parse_auto_offset_reset(
            self.broker.metadata_cache.group_configs(group_id).get(
                "share.auto.offset.reset", "latest"))
        if policy.kind == "earliest":
            return partition.log_start_offset
        if policy.kind == "latest":
            return partition.high_watermark
        timestamp = self.broker.now_ms() - policy.duration_ms
        found = partition.log.offset_for_timestamp(timestamp)
        return partition.high_watermark if found is None else found.offset

    async def revalidate(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]]
                         ) -> None:
        """Drop the share partitions held here whose stored state moved on without this
        leader: an admin's AlterShareGroupOffsets or DeleteShareGroupOffsets on an empty
        group, which a leader with nothing to write would never hear of. Asked when a
        member opens a share session, as every member of a group that was empty does."""
        for topic_id, index in partitions:
            key = SharePartitionKey(group_id, topic_id, index)
            held = self.holders.get(key)
            if held is None:
                continue
            summary = await self.broker.share_coordinator.read_summary(key, held.leader_epoch)
            if summary["error_code"] == E.NONE and (
                    summary["state_epoch"] != held.state_epoch or summary["start_offset"] < 0):
                if self.holders.get(key) is held:
                    self.drop(key)

    def drop(self, key: SharePartitionKey) -> None:
        self.holders.pop(key, None)

    def on_leadership_lost(self, topic: str, index: int) -> None:
        for key in [k for k, h in self.holders.items() if (h.topic, h.partition) == (topic, index)]:
            self.drop(key)

    # -- what requests do -----------------------------------------------------------------------

    async def persist(self, held: Holder) -> ErrorCode:
        """Write the share partition's state to the share coordinator; on refusal drop it, so
        the next request loads what was written."""
        start, batches = held.state.persisted_state()
        answer = await self.broker.share_coordinator.write_state(
            held.key, held.state_epoch, held.leader_epoch, start, batches)
        error = E(answer["error_code"])
        if error != E.NONE:
            log.warning("share partition %s-%d of %r: state not written (%s): reloading",
                        held.topic, held.partition, held.key.group_id, error.name)
            if self.holders.get(held.key) is held:
                self.drop(held.key)
        return error

    def read_batches(self, held: Holder, max_bytes: int, max_records: int
                     ) -> tuple[bytes, list[tuple[int, int]]]:
        """The log's bytes from the share partition's fetch offset up to the high
        watermark (at least one batch), enough for `max_records` records and at most
        `max_bytes`, and the (first, last) offsets of the data batches in them. The read
        starts small and grows: librdkafka asks for up to fetch.max.bytes (50 MiB) and
        500 records, and reading the first would cost more than the rest of the fetch."""
        partition = self.broker.partition(held.topic, held.partition)
        if partition is None:
            return b"", []
        offset = max(held.state.next_fetch_offset(), partition.log_start_offset)
        end = partition.high_watermark
        if offset >= end:
            return b"", []
        limit = max(max_bytes, 1)
        size = min(limit, READ_START_BYTES)
        while True:
            data = partition.log.read(offset, size, max_offset=end, min_one_message=True)
            batches = [(h.base_offset, h.last_offset) for _pos, h in BatchWalk(data)
                       if not h.is_control]
            covered = batches[-1][1] - offset + 1 if batches else 0
            if covered >= max_records or len(data) < size or size >= limit:
                return data, batches
            size = min(limit, size * 4)

    async def acquire(self, held: Holder, member_id: str, max_records: int,
                      max_bytes: int) -> tuple[bytes, list[dict], ErrorCode]:
        """Acquire records for a member: the bytes to send and the ranges acquired."""
        async with held.lock:
            if self.holders.get(held.key) is not held:
                return b"", [], E.NOT_LEADER_OR_FOLLOWER
            data, batches = self.read_batches(held, max_bytes, max_records)
            acquired = held.state.acquire(member_id, self.broker.now_ms(), batches, max_records)
            if not acquired:
                return b"", [], E.NONE
            self._timers_changed.set()
            last = max(a.last_offset for a in acquired)
            return _cut_after(data, last), [
                {"first_offset": a.first_offset, "last_offset": a.last_offset,
                 "delivery_count": a.delivery_count} for a in acquired], E.NONE

    async def acknowledge(self, held: Holder, member_id: str,
                          batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        async with held.lock:
            if self.holders.get(held.key) is not held:
                return E.NOT_LEADER_OR_FOLLOWER
            error = held.state.acknowledge(member_id, batches, self.broker.now_ms())
            if error != E.NONE:
                return error
            self._archived(held, member_id)
            error = await self.persist(held)
            self._records_released(held)
            return error

    async def release_session(self, session: ShareSession) -> None:
        """A session ended: the records its member acquired here go back."""
        await self.release(session.group_id, session.member_id, session.partitions)

    async def close_session(self, session: ShareSession) -> None:
        """The member's last request (epoch -1) is done: its session goes, and the
        records it still holds go back."""
        self.sessions.close(session)
        await self.release_session(session)

    async def release(self, group_id: str, member_id: str,
                      partitions: Iterable[tuple[uuid.UUID, int]]) -> None:
        """The records a member acquired on these partitions go back (a session that
        ended, or partitions its ShareFetch forgot)."""
        for (topic_id, index) in sorted(partitions, key=str):
            held = self.holders.get(SharePartitionKey(group_id, topic_id, index))
            if held is None:
                continue
            async with held.lock:
                if held.state.release_member(member_id, self.broker.now_ms()):
                    self._archived(held, member_id)
                    await self.persist(held)
                    self._records_released(held)

    def _archived(self, held: Holder, member_id: str) -> None:
        for first, last, reason in held.state.last_archived:
            self.broker.events.emit(
                "share_records_archived", group_id=held.key.group_id, topic=held.topic,
                partition=held.partition, member_id=member_id, first_offset=first,
                last_offset=last, reason=reason)

    def _records_released(self, held: Holder) -> None:
        self.broker.notify_data_arrived(held.topic, held.partition)

    # -- state events ---------------------------------------------------------------------------

    def emit_state(self) -> None:
        """A `share_partition_state` event per share partition held here whose figures
        changed since its last one (an idle share partition writes none)."""
        for held in list(self.holders.values()):
            sp = held.state
            counts = sp.state_counts()
            figures = (sp.start_offset, sp.end_offset, counts["available"],
                       counts["acquired"], counts["acknowledged"], counts["archived"],
                       sp.acquisitions, sp.redeliveries)
            if figures == held.reported:
                continue
            held.reported = figures
            self.broker.events.emit(
                "share_partition_state", group_id=held.key.group_id, topic=held.topic,
                partition=held.partition, start_offset=sp.start_offset,
                end_offset=sp.end_offset, in_flight=sp.in_flight_count(),
                available_records=counts["available"], acquired_records=counts["acquired"],
                acknowledged_records=counts["acknowledged"],
                archived_records=counts["archived"], acquisitions=sp.acquisitions,
                redeliveries=sp.redeliveries)

    # -- lock expiry ----------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                self._timers_changed = trio.Event()
                deadlines = [d for h in self.holders.values()
                             if (d := h.state.next_deadline()) is not None]
                if not deadlines:
                    await self._timers_changed.wait()
                    continue
                delay = (min(deadlines) - self.broker.now_ms()) / 1000
                if delay > 0:
                    with timeouts.move_on_after(delay):
                        await self._timers_changed.wait()
                    continue
                await self._expire(self.broker.now_ms())

    async def _expire(self, now_ms: int) -> None:
        for held in list(self.holders.values()):
            deadline = held.state.next_deadline()
            if deadline is None or deadline > now_ms:
                continue
            async with held.lock:
                expired = held.state.expire_locks(now_ms)
                if not expired:
                    continue
                for e in expired:
                    self.broker.events.emit(
                        "share_lock_expired", group_id=held.key.group_id, topic=held.topic,
                        partition=held.partition, member_id=e.member_id,
                        first_offset=e.first_offset, last_offset=e.last_offset,
                        archived=e.archived)
                await self.persist(held)
                self._records_released(held)

    def connection_closed(self, connection: object) -> None:
        """A client connection closed: its share sessions end, their records go back."""
        ended = self.sessions.connection_closed(connection)
        if ended and self._nursery is not None:
            for session in ended:
                self._nursery.start_soon(self.release_session, session)


def _cut_after(data: bytes, last_offset: int) -> bytes:
    """`data` up to and including the batch that holds `last_offset`."""
    end = 0
    for pos, header in BatchWalk(data):
        end = pos + header.size
        if header.last_offset >= last_offset:
            break
    return data[:end] if end else data
