"""The records a controller writes when it becomes active (Kafka's
ActivationRecordsGenerator).

Owns `activation_records`: on a new cluster, the FeatureLevelRecords that bootstrap
metadata.version and the other features (broker.controller.features chooses the levels),
and, once, the migration of a data
directory from before the cluster: its topics as single-replica partitions led by this
node, their configs and its producer-id limit (`LegacySource`, which
broker.metadata.LegacyMetadata satisfies). Both are skipped when the image already has
them, so a controller that activates again writes nothing. Pure: a function of the image.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from broker.controller import features
from broker.controller.config_control import render_config_value
from broker.controller.controller_result import Record
from broker.controller.image import TOPIC_RESOURCE, MetadataImage
from protocol.metadata_records import MetadataRecordType as T


class LegacyTopicSource(Protocol):
    """What activation reads of a migrated topic (any object with these attributes)."""

    @property
    def name(self) -> str: ...
    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def partitions(self) -> int: ...
    @property
    def configs(self) -> Mapping[str, Any]: ...


class LegacySource(Protocol):
    """What activation reads of a migrated data directory (broker.metadata.LegacyMetadata,
    which the broker loads)."""

    @property
    def topics(self) -> Sequence[LegacyTopicSource]: ...
    @property
    def producer_id_limit(self) -> int: ...


def activation_records(image: MetadataImage, node_id: int,
                       legacy: LegacySource | None) -> list[Record]:
    """The bootstrap records a new cluster (or a migrated data dir) needs; none when the
    image has them."""
    records = features.bootstrap_records(image)
    if legacy is not None and not image.topics_by_id:
        records += _migration_records(image, node_id, legacy)
    return records


def _migration_records(image: MetadataImage, node: int, legacy: LegacySource) -> list[Record]:
    records: list[Record] = []
    for topic in legacy.topics:
        records.append((int(T.TOPIC_RECORD), 0, {"name": topic.name,
                                                 "topic_id": topic.topic_id}))
        for p in range(topic.partitions):
            records.append((int(T.PARTITION_RECORD), 0, {
                "partition_id": p, "topic_id": topic.topic_id, "replicas": [node],
                "isr": [node], "leader": node, "leader_epoch": 0, "partition_epoch": 0}))
        for name, value in sorted(topic.configs.items()):
            rendered = render_config_value(value)
            if rendered is not None:
                records.append((int(T.CONFIG_RECORD), 0, {
                    "resource_type": TOPIC_RESOURCE, "resource_name": topic.name,
                    "name": name, "value": rendered}))
    # topics and configs leave the next producer id alone: the image's is the one to pass
    if legacy.producer_id_limit > image.next_producer_id:
        records.append((int(T.PRODUCER_IDS_RECORD), 0, {
            "broker_id": node, "broker_epoch": -1,
            "next_producer_id": legacy.producer_id_limit}))
    return records
