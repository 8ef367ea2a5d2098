"""The share coordinator hosted on __share_group_state, and the way a share-partition
leader reaches it.

Owns: `ShareCoordinatorRuntime`, broker.coordinator.runtime's CoordinatorRuntime for the
pure ShareCoordinator (broker.share_coordinator.state): its records are Kafka's
ShareSnapshot/ShareUpdate (broker.share_coordinator.records), its topic is made with the
share.coordinator.state.topic.* settings, and the persister methods (`read_state`,
`write_state`, `initialize_state`, `delete_state`, `read_summary`) that the partition
leaders of this broker call: this broker's own coordinator directly when it leads the
key's partition, the leader of that partition over the inter-broker listener otherwise
(Kafka's DefaultStatePersister, which batches the same requests).

The topic is not compacted: a key's state is its last snapshot and the updates after it,
which compaction by key would cut apart. As in Kafka it keeps its records (retention.ms
-1); pruning the records below every key's last snapshot is not done yet.
"""

from __future__ import annotations

import logging
from typing import Any


from broker.coordinator.runtime import CoordinatorRuntime
from broker.net.peer import PeerUnavailable
from broker.share_coordinator import records
from broker.share_coordinator.state import (
    Append, ShareCoordinator, ShareCoordinatorConfig, SharePartitionKey)
from protocol import messages as m
from protocol.batch_header import BatchHeader
from protocol.errors import DecodeError, ErrorCode
from protocol.records import Record

log = logging.getLogger("minibroker.share_coordinator")

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
STATE_REQUEST_TIMEOUT_S = 10.0
STATE_API_VERSION = 0
_UNAVAILABLE = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}


def share_coordinator_config(c) -> ShareCoordinatorConfig:
    return ShareCoordinatorConfig(
        num_partitions=c.share_coordinator_state_topic_num_partitions,
        snapshot_update_records=c.share_coordinator_snapshot_update_records_per_snapshot)


class ShareCoordinatorRuntime(CoordinatorRuntime):
    topic = SHARE_GROUP_STATE_TOPIC

    def __init__(self, broker):
        super().__init__(broker)
        self.coordinator = ShareCoordinator(share_coordinator_config(broker.config))

    # -- CoordinatorRuntime's hooks -------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.coordinator.config.num_partitions

    @property
    def commit_timeout_ms(self) -> int:
        return self.broker.config.request_timeout_ms

    def topic_configs(self) -> dict[str, str]:
        c = self.broker.config
        brokers = max(1, len(self.broker.metadata_cache.image.brokers))
        min_isr = min(c.share_coordinator_state_topic_min_isr,
                      c.share_coordinator_state_topic_replication_factor, brokers)
        return {"cleanup.policy": "delete", "retention.ms": "-1",
                "segment.bytes": str(c.share_coordinator_state_topic_segment_bytes),
                "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false"}

    def records_of(self, effect: Any) -> tuple[int, list[tuple[bytes, bytes | None]]] | None:
        if not isinstance(effect, Append):
            return None
        return (self.coordinator.partition_for(effect.key),
                [records.encode(effect.key, effect.value, effect.snapshot)])

    def appended(self, effect: Any, index: int, end: int) -> None:
        self.coordinator.replay(effect.key, effect.value, effect.snapshot)

    def begin_load(self, index: int, leader_epoch: int) -> None:
        self.coordinator.begin_load(index, leader_epoch)

    def replay_batch(self, header: BatchHeader, batch: list[Record], now_ms: int) -> int:
        replayed = 0
        for record in batch:
            if record.key is None:
                continue
            try:
                decoded = records.decode(record.key, record.value)
            except (DecodeError, ValueError) as e:
                log.error("%s: record at offset %d does not decode (%s): skipped",
                          SHARE_GROUP_STATE_TOPIC, record.offset, e)
                continue
            if decoded is None:
                continue  # a record type this version does not know
            self.coordinator.replay(*decoded)
            replayed += 1
        return replayed

    def finish_load(self, index: int, now_ms: int) -> list:
        self.coordinator.finish_load(index)
        return []

    def unload(self, index: int, now_ms: int) -> list:
        self.coordinator.unload(index)
        return []

    def on_timers(self, now_ms: int) -> list:
        return self.coordinator.tick(now_ms)

    def background_tasks(self) -> list:
        return [lambda: self.hold_channels(f"share-persister-{self.broker.node_id}")]

    # -- the persister: what a share-partition leader asks -------------------------------------

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> dict:
        """The key's stored state (error_code, state_epoch, start_offset, state_batches);
        start_offset -1 when the share partition has none yet."""
        return await self._ask(key, m.READ_SHARE_GROUP_STATE,
                               self.coordinator.handle_read, leader_epoch)

    async def write_state(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                          start_offset: int, batches: list[dict]) -> dict:
        return await self._ask(key, m.WRITE_SHARE_GROUP_STATE, self.coordinator.handle_write,
                               state_epoch, leader_epoch, start_offset, batches)

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int,
                               start_offset: int) -> dict:
        return await self._ask(key, m.INITIALIZE_SHARE_GROUP_STATE,
                               self.coordinator.handle_initialize, state_epoch, start_offset)

    async def delete_state(self, key: SharePartitionKey) -> dict:
        return await self._ask(key, m.DELETE_SHARE_GROUP_STATE, self.coordinator.handle_delete)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> dict:
        return await self._ask(key, m.READ_SHARE_GROUP_STATE_SUMMARY,
                               self.coordinator.handle_read_summary, leader_epoch)

    async def serve(self, operation: Any, key: SharePartitionKey, *args: Any) -> dict:
        """One key's operation on this broker's coordinator, for a request that came here
        (the handlers of keys 83-87) or a leader on this broker."""
        waiter = await self.call(operation, key, *args)
        return waiter.answer({"error_code": ErrorCode.NONE})

    async def _ask(self, key: SharePartitionKey, api_key: int, operation: Any,
                   *args: Any) -> dict:
        if not await self.ensure_topic():
            return dict(_UNAVAILABLE)
        index = self.coordinator.partition_for(key)
        leader = self.broker.metadata_cache.leader(self.topic, index)
        if leader == self.broker.node_id:
            return await self.serve(operation, key, *args)
        channel = self.channels.get(leader) if leader >= 0 and self.channels else None
        if channel is None:
            return dict(_UNAVAILABLE)
        version = STATE_API_VERSION
        body = m.request_body(api_key, version, records.request_fields(api_key, key, *args))
        try:
            response = await channel.request(api_key, version, body, STATE_REQUEST_TIMEOUT_S)
        except PeerUnavailable:
            return dict(_UNAVAILABLE)
        return records.response_result(api_key, response)
