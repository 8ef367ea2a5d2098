"""The group coordinator hosted on __consumer_offsets.

Owns: `GroupRuntime`, broker.coordinator.runtime's CoordinatorRuntime for the pure
GroupCoordinator (classic, KIP-848 and KIP-932 share groups, offsets): its records are the
group and offset records of broker.coordinator.cg_records and .share_records, its configs
Kafka's offsets.topic.*, group.* and group.share.*, and it expires old offsets on
offsets.retention.check.interval.ms. `share_group_listeners` are told when a share group
member leaves or is fenced (`ShareMemberGone`), once its records are written.

Offset records are replayed into the coordinator only once the high watermark covers them.
Until then OffsetFetch does not see them: a commit that is still only in the leader's log
may be truncated away by the next leader, and an offset read from it would then go
backwards (a chaos run saw exactly that, a paused follower in the ISR holding the HW
back). Kafka's coordinator runtime likewise answers reads from the last committed state. A
commit whose answer timed out is replayed once the HW covers it after all, as it will be by
any later leader's load. Group records are replayed at once: the group's own requests are
what they order.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from broker import timeouts
from broker.config import BrokerConfig, ConfigError
from broker.coordinator.assignors import ASSIGNORS
from broker.coordinator.consumer_group import ConsumerGroupConfig
from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.coordinator.effects import Append, ShareMemberGone
from broker.coordinator.membership import GroupConfig
from broker.coordinator.offsets import OffsetRecord
from broker.coordinator.runtime import CoordinatorRuntime, Waiter
from broker.coordinator.share_group import ShareGroupConfig
from protocol.errors import ErrorCode
from protocol.batch_header import BatchHeader
from protocol.control_records import decode_end_txn_marker
from protocol.record_errors import InvalidRecordError
from protocol.records import Record

__all__ = ["GroupRuntime", "OFFSETS_TOPIC", "Waiter", "coordinator_config"]

log = logging.getLogger("minibroker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


def _assignor_name(value: str) -> str:
    """group.consumer.assignors names an assignor as Kafka does, by class name, or by its
    short name (uniform, range)."""
    name = value.strip().rsplit(".", 1)[-1].removesuffix("Assignor").lower()
    if name not in ASSIGNORS:
        raise ConfigError(f"invalid value {value!r} for group.consumer.assignors: one of "
                          f"{', '.join(ASSIGNORS)} (or Kafka's UniformAssignor, RangeAssignor)")
    return name


def coordinator_config(broker_config: BrokerConfig) -> CoordinatorConfig:
    c = broker_config
    return CoordinatorConfig(
        num_partitions=c.offsets_topic_num_partitions,
        offsets_retention_ms=c.offsets_retention_minutes * 60_000,
        offset_metadata_max_bytes=c.offset_metadata_max_bytes,
        group=GroupConfig(
            min_session_timeout_ms=c.group_min_session_timeout_ms,
            max_session_timeout_ms=c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            max_size=c.group_max_size),
        consumer_group=ConsumerGroupConfig(
            session_timeout_ms=c.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
            assignors=tuple(_assignor_name(a) for a in c.group_consumer_assignors),
            max_size=c.group_consumer_max_size),
        share_group=ShareGroupConfig(
            enabled=c.group_share_enable,
            session_timeout_ms=c.group_share_session_timeout_ms,
            heartbeat_interval_ms=c.group_share_heartbeat_interval_ms,
            max_size=c.group_share_max_size))


@dataclass(frozen=True)
class _TxnRecord:
    """A TxnOffsetCommit's record, pending in its producer's transaction once committed."""
    producer_id: int
    record: OffsetRecord


class GroupRuntime(CoordinatorRuntime):
    topic = OFFSETS_TOPIC

    def __init__(self, broker):
        super().__init__(broker)
        self.coordinator = GroupCoordinator(coordinator_config(broker.config))
        self.coordinator.leads_in_metadata = (
            lambda index: broker.metadata_cache.leader(OFFSETS_TOPIC, index) == broker.node_id)
        self.coordinator.topics = self._topics
        self.coordinator.topic_id = self._topic_id
        self.coordinator.topic_name = self._topic_name
        self.coordinator.consumer_groups.group_configs = broker.metadata_cache.group_configs
        # called (group id, member id, reason) when a share group member leaves or is
        # fenced: how share-partition leaders here learn to release what it acquired
        self.share_group_listeners: list[Callable[[str, str, str], None]] = []
        # partition -> offset records appended but not yet below the high watermark, with
        # the log offset each ends at: replayed into the cache only once committed
        self._uncommitted_offsets: dict[
            int, deque[tuple[int, OffsetRecord | _TxnRecord]]] = {}

    async def ensure_offsets_topic(self) -> bool:
        return await self.ensure_topic()

    def _topics(self) -> dict[str, int]:
        """The metadata image's topics for consumer groups' assignments: name -> partition
        count."""
        image = self.broker.metadata_cache.image
        return {t.name: len(t.partitions) for t in image.topics_by_id.values()}

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.broker.metadata_cache.topic(name)
        return topic.topic_id if topic is not None else None

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.broker.metadata_cache.topic_by_id(topic_id)
        return topic.name if topic is not None else None

    # -- CoordinatorRuntime's hooks ---------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.coordinator.config.num_partitions

    @property
    def commit_timeout_ms(self) -> int:
        return self.broker.config.offsets_commit_timeout_ms

    def topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact",
                "segment.bytes": str(self.broker.config.offsets_topic_segment_bytes)}

    def carry_out(self, effect: Any, failed: ErrorCode,
                  uncommitted: tuple[int, int] | None) -> None:
        if not isinstance(effect, ShareMemberGone):
            super().carry_out(effect, failed, uncommitted)
            return
        # the member is gone from the group whether or not its tombstones were written: a
        # failed append leaves the coordinator's view ahead of the log, which a load fixes
        for listener in list(self.share_group_listeners):
            listener(effect.group_id, effect.member_id, effect.reason)

    def records_of(self, effect: Any) -> tuple[int, list[tuple[bytes, bytes | None]]] | None:
        if not isinstance(effect, Append):
            return None
        return (self.coordinator.partition_for(effect.group_id),
                [(r.key, r.value) for r in effect.records])

    def producer_of(self, effect: Any) -> tuple[int, int] | None:
        if isinstance(effect, Append) and effect.producer_id >= 0:
            return (effect.producer_id, effect.producer_epoch)
        return None

    def appended(self, effect: Any, index: int, end: int) -> None:
        now = self.broker.now_ms()
        for record in effect.records:
            if effect.producer_id >= 0:
                # pending until the marker: its own order in the queue keeps it after
                # the commits before it and before the marker's completion
                self._uncommitted_offsets.setdefault(index, deque()).append(
                    (end, _TxnRecord(effect.producer_id, record)))
            elif record.entry is not None:
                self._uncommitted_offsets.setdefault(index, deque()).append((end, record))
            else:
                self.coordinator.replay_record(record, now)

    def before_operation(self) -> None:
        self.on_committed(None, None)

    def on_committed(self, index: int | None, high_watermark: int | None) -> None:
        for i in ([index] if index is not None else list(self._uncommitted_offsets)):
            queue = self._uncommitted_offsets.get(i)
            partition = self.broker.partition(OFFSETS_TOPIC, i)
            if not queue or partition is None:
                continue
            hw = partition.high_watermark
            while queue and queue[0][0] <= hw:
                self._replay(queue.popleft()[1])
            if not queue:
                del self._uncommitted_offsets[i]

    def _replay(self, entry: OffsetRecord | _TxnRecord) -> None:
        if isinstance(entry, _TxnRecord):
            self.coordinator.offsets.replay_txn_record(entry.producer_id, entry.record)
        else:
            self.coordinator.replay_record(entry, self.broker.now_ms())

    def complete_transaction(self, index: int, producer_id: int, producer_epoch: int,
                             commit: bool) -> None:
        """A transaction's marker in __consumer_offsets-`index` is committed (the
        WriteTxnMarkers handler calls this once the HW covers it): its offsets count
        (COMMIT) or go (ABORT). What the HW covers is replayed first, so the transaction's
        own TxnOffsetCommits, which precede its marker, are pending by then; the same
        producer's next TxnOffsetCommit cannot be in the log yet, since the coordinator
        refuses the next transaction's partitions until every marker of this one is written."""
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        if partition is not None:
            self.on_committed(index, partition.high_watermark)
        self.coordinator.offsets.complete_txn(producer_id, commit)

    def begin_load(self, index: int, leader_epoch: int) -> None:
        self.coordinator.begin_load(index)

    def replay_batch(self, header: BatchHeader, records: list[Record], now_ms: int) -> int:
        if header.is_control:
            for record in records[:1]:
                try:
                    marker = decode_end_txn_marker(record.key, record.value)
                except InvalidRecordError:
                    continue  # not an end-transaction marker: nothing to complete
                self.coordinator.offsets.complete_txn(header.producer_id, marker.committed)
            return 0
        replayed = 0
        for record in records:
            if record.key is None:
                continue  # every coordinator record has a key: nothing to replay
            if header.is_transactional:
                self.coordinator.offsets.replay_txn_record(
                    header.producer_id, OffsetRecord(record.key, record.value))
            else:
                self.coordinator.replay(record.key, record.value, now_ms, loading=True)
            replayed += 1
        return replayed

    def finish_load(self, index: int, now_ms: int) -> list:
        self.coordinator.finish_load(index, now_ms)
        return []  # the timers of the loaded members are new: apply_effects wakes the loop

    def unload(self, index: int, now_ms: int) -> list:
        self._uncommitted_offsets.pop(index, None)  # the next leader decides them
        return self.coordinator.unload(index, now_ms)

    def on_timers(self, now_ms: int) -> list:
        return self.coordinator.on_timers(now_ms)

    def background_tasks(self) -> list:
        return [self._expiry_loop]

    async def _expiry_loop(self) -> None:
        interval = self.broker.config.offsets_retention_check_interval_ms / 1000
        while True:
            await timeouts.sleep(interval)
            self.apply_effects(self.coordinator.expire_offsets(self.broker.now_ms()))
