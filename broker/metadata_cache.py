"""What a broker knows of the cluster: the committed metadata image and the queries on it.

Owns: `MetadataCache` (Kafka's KRaftMetadataCache), the broker's read side of
`__cluster_metadata`. It holds the image replayed from every committed entry the broker
has applied, the offset after the last one (BrokerHeartbeat reports the one before it,
the last applied, as Kafka's current_metadata_offset), the cluster id and the active controller as the quorum last
named it. The handlers read only this; nothing here writes, waits or reads a clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.controller.election import NO_LEADER, PartitionRegistration
from broker.controller.image import (
    BrokerEndpoint, BrokerRegistration, MetadataImage, TopicImage, is_reserved_dir,
)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
# Kafka's Topic.INTERNAL_TOPICS: the coordinators' logs
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})


@dataclass
class MetadataCache:
    cluster_id: str
    image: MetadataImage = MetadataImage.EMPTY
    offset: int = 0  # the metadata log offset after the last applied entry
    controller_id: int = -1  # the active controller (the quorum's leader), -1 if unknown

    # -- brokers ---------------------------------------------------------------------------

    def brokers(self) -> list[BrokerRegistration]:
        """Every registered broker that is not fenced, by id (what Metadata lists)."""
        return sorted((b for b in self.image.brokers.values() if not b.fenced),
                      key=lambda b: b.broker_id)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.image.brokers.get(broker_id)

    def endpoint(self, broker_id: int, listener: str) -> BrokerEndpoint | None:
        b = self.image.brokers.get(broker_id)
        if b is None:
            return None
        return b.endpoint(listener) or (b.endpoints[0] if b.endpoints else None)

    def is_alive(self, broker_id: int) -> bool:
        b = self.image.brokers.get(broker_id)
        return b is not None and not b.fenced

    # -- topics ----------------------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return sorted(self.image.topic_ids_by_name)

    def topic(self, name: str) -> TopicImage | None:
        return self.image.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.image.topic_by_id(topic_id)

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.image.topic_configs(name)

    def group_configs(self, group: str) -> Mapping[str, str]:
        return self.image.group_configs(group)

    def partition(self, topic: str, index: int) -> PartitionRegistration | None:
        return self.image.partition(topic, index)

    def partition_count(self, topic: str) -> int:
        t = self.image.topic(topic)
        return len(t.partitions) if t else 0

    def leader(self, topic: str, index: int) -> int:
        p = self.image.partition(topic, index)
        return p.leader if p is not None else NO_LEADER

    def leader_endpoint(self, topic: str, index: int, listener: str) -> BrokerEndpoint | None:
        leader = self.leader(topic, index)
        return None if leader == NO_LEADER else self.endpoint(leader, listener)

    def online_broker_ids(self) -> frozenset[int]:
        """The brokers whose replicas are online: registered, unfenced, with a log directory
        online. Taken once for a response naming thousands of partitions."""
        return frozenset(b.broker_id for b in self.image.brokers.values()
                         if not b.fenced and b.has_online_dir)

    def offline_replicas(self, partition: PartitionRegistration,
                         online: frozenset[int] | None = None) -> list[int]:
        """Replicas on a fenced broker, or on one whose log directories all failed, or in
        a directory of their broker that failed (Kafka's: the metadata places the replica
        there, PartitionRecord.directories); `online` is `online_broker_ids()` when the
        caller has it already."""
        if online is None:
            online = self.online_broker_ids()
        return [r for r in partition.replicas
                if r not in online or self._in_offline_dir(partition, r)]

    def _in_offline_dir(self, partition: PartitionRegistration, replica: int) -> bool:
        if not partition.directories:
            return False
        directory = partition.directory_of(replica)
        broker = self.image.brokers.get(replica)
        return (directory is not None and not is_reserved_dir(directory)
                and broker is not None and bool(broker.log_dirs)
                and directory not in broker.log_dirs)


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS
