"""A metadata snapshot's contents: the image written as the records that rebuild it.

Owns: `image_records` (Kafka's `MetadataImage.write`: every record needed to rebuild an
image from the empty one), `encode_snapshot` (those records as a snapshot's data) and
`load_snapshot` (the data back to the records and the image they replay to).

A snapshot's data has the layout of one Raft entry's payload (`raft_batches.pack_records`):
a count, then each framed metadata record (`protocol.metadata_records`) with its length, so
`dump-log` and the replay code read both alike. The records are written at the versions the
controller writes, in an order the replay accepts: feature levels first (metadata.version
leads, as in Kafka), then brokers, topics with their partitions, configs, the producer id
block, SCRAM credentials, delegation tokens, ACLs and client quotas. A field the image does
not keep (a registration's supported features, the broker that took the last producer id
block) is written as
Kafka's snapshot writers write it: empty, or -1.

Pure: no I/O. Encoding a large image is CPU work the runtime does in a worker thread.
"""

from __future__ import annotations

from typing import Any, Iterator

from broker.controller.image import MetadataImage
from broker.controller.raft_batches import pack_records, unpack_records
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

Records = list[tuple[int, int, Any]]

METADATA_VERSION = "metadata.version"
# the versions the controller writes (cluster_control's REGISTER_BROKER_VERSION: v3
# carries log_dirs, v1 in_controlled_shutdown)
REGISTER_BROKER_VERSION = 3
# PartitionRecord v2 carries KIP-966's eligible leader replicas and last known ELR (and v1's
# directories: each replica's log directory, empty while none has been assigned)
PARTITION_VERSION = 2


def image_records(image: MetadataImage) -> Iterator[tuple[int, int, dict]]:
    """(type, version, body) of every record that rebuilds `image` from the empty one."""
    features = sorted(image.features.items(), key=lambda f: (f[0] != METADATA_VERSION, f[0]))
    for name, level in features:
        yield T.FEATURE_LEVEL_RECORD, 0, {"name": name, "feature_level": level}
    for broker_id, b in sorted(image.brokers.items()):
        yield T.REGISTER_BROKER_RECORD, REGISTER_BROKER_VERSION, {
            "broker_id": broker_id, "incarnation_id": b.incarnation_id,
            "broker_epoch": b.epoch,
            "end_points": [{"name": e.name, "host": e.host, "port": e.port,
                            "security_protocol": e.security_protocol} for e in b.endpoints],
            "features": [], "rack": b.rack, "fenced": b.fenced,
            "in_controlled_shutdown": b.in_controlled_shutdown, "log_dirs": list(b.log_dirs)}
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        yield T.TOPIC_RECORD, 0, {"name": topic.name, "topic_id": topic.topic_id}
        for partition_id, p in sorted(topic.partitions.items()):
            yield T.PARTITION_RECORD, PARTITION_VERSION, {
                "partition_id": partition_id, "topic_id": topic.topic_id,
                "replicas": list(p.replicas), "isr": list(p.isr), "leader": p.leader,
                "leader_recovery_state": int(p.leader_recovery_state),
                "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "directories": list(p.directories),
                "adding_replicas": list(p.adding_replicas),
                "removing_replicas": list(p.removing_replicas),
                # tagged fields, left out when empty (null reads back as empty)
                "eligible_leader_replicas": list(p.elr) or None,
                "last_known_elr": list(p.last_known_elr) or None}
    for (resource_type, resource_name), entries in sorted(image.configs.items()):
        for name, value in sorted(entries.items()):
            yield T.CONFIG_RECORD, 0, {"resource_type": resource_type,
                                       "resource_name": resource_name, "name": name,
                                       "value": value}
    if image.next_producer_id:
        yield T.PRODUCER_IDS_RECORD, 0, {"broker_id": -1, "broker_epoch": -1,
                                         "next_producer_id": image.next_producer_id}
    for (_user, _mechanism), c in sorted(image.scram_credentials.items()):
        yield T.USER_SCRAM_CREDENTIAL_RECORD, 0, {
            "name": c.user, "mechanism": c.mechanism, "salt": c.salt,
            "stored_key": c.stored_key, "server_key": c.server_key,
            "iterations": c.iterations}
    for token_id, t in sorted(image.delegation_tokens.items()):
        yield T.DELEGATION_TOKEN_RECORD, 0, {
            "owner": t.owner, "requester": t.requester, "renewers": list(t.renewers),
            "issue_timestamp": t.issue_timestamp, "max_timestamp": t.max_timestamp,
            "expiration_timestamp": t.expiration_timestamp, "token_id": token_id}
    for acl_id, a in sorted(image.acls.items()):
        yield T.ACCESS_CONTROL_ENTRY_RECORD, 0, {
            "id": acl_id, "resource_type": a.resource_type, "resource_name": a.resource_name,
            "pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
            "operation": a.operation, "permission_type": a.permission_type}
    def by_entity(item: tuple) -> list:  # a default (None) entity before the named ones
        return [(t, n is not None, n or "") for t, n in item[0]]

    for entity, quotas in sorted(image.client_quotas.items(), key=by_entity):
        for quota_key, quota_value in sorted(quotas.items()):
            yield T.CLIENT_QUOTA_RECORD, 0, {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "key": quota_key, "value": quota_value, "remove": False}


def encode_snapshot(image: MetadataImage) -> bytes:
    """The snapshot data of `image`."""
    return pack_records(encode_metadata_record(t, v, body) for t, v, body in image_records(image))


def decode_snapshot(data: bytes) -> Records:
    """The records a snapshot's data holds, decoded; CorruptRecordError or DecodeError if
    it is not what `encode_snapshot` writes."""
    return [tuple(decode_metadata_record(r)) for r in unpack_records(data)]


def load_snapshot(data: bytes) -> tuple[MetadataImage, Records]:
    """The image a snapshot's data rebuilds, and the records it was rebuilt from (what the
    listeners are told, as for any other change)."""
    records = decode_snapshot(data)
    return MetadataImage.EMPTY.replay(records), records
