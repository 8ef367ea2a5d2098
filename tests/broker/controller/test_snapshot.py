"""A metadata snapshot is the image written as the records that rebuild it: replaying a
snapshot's records onto the empty image gives back the image, for any history."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.controller.image import LOST_DIR, TOPIC_RESOURCE, MetadataImage
from broker.controller.raft_batches import pack_records
from broker.controller.snapshot import (decode_snapshot, encode_snapshot, image_records,
                                        load_snapshot)
from protocol.errors import DecodeError
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record
from protocol.record_errors import CorruptRecordError
from tests.broker.controller.test_image import cluster_records, replay

VERSIONS = {T.REGISTER_BROKER_RECORD: 3, T.BROKER_REGISTRATION_CHANGE_RECORD: 2,
            T.PARTITION_RECORD: 2, T.PARTITION_CHANGE_RECORD: 2}


def record(kind: T, **body) -> tuple:
    """A record as the log hands it to the image: encoded, then decoded."""
    return tuple(decode_metadata_record(encode_metadata_record(kind, VERSIONS.get(kind, 0),
                                                                body)))


def test_a_cluster_image_round_trips_through_its_snapshot():
    image = replay(cluster_records())
    loaded, records = load_snapshot(encode_snapshot(image))
    assert loaded == image
    assert MetadataImage.EMPTY.replay(records) == image
    # metadata.version leads, as Kafka's snapshots open with it
    assert records[0][0] == T.FEATURE_LEVEL_RECORD and records[0][2].name == "metadata.version"


def test_the_empty_image_is_an_empty_snapshot():
    assert list(image_records(MetadataImage.EMPTY)) == []
    assert load_snapshot(encode_snapshot(MetadataImage.EMPTY)) == (MetadataImage.EMPTY, [])


@pytest.mark.parametrize("data, error", [
    (b"\x05", CorruptRecordError),  # claims five records, holds none
    (pack_records([b"\x01\x63\x00"]), DecodeError),  # record type 99 is unknown
])
def test_snapshot_data_that_is_not_records_is_refused(data, error):
    with pytest.raises(error):
        decode_snapshot(data)


# -- random histories ----------------------------------------------------------------------

names = st.text("abcxyz.-_", min_size=1, max_size=6)


@st.composite
def histories(draw) -> list[tuple]:
    """A valid sequence of metadata records: each names only what exists at its turn."""
    out: list[tuple] = []
    brokers: dict[int, int] = {}  # id -> epoch
    topics: dict[uuid.UUID, tuple[str, set[int]]] = {}
    scram: set[tuple[str, int]] = set()
    acls: set[uuid.UUID] = set()
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(
            ["broker", "fence", "change", "topic", "partition", "pchange", "remove", "config",
             "pid", "feature", "scram", "unscram", "acl", "unacl", "noop"]))
        if kind == "broker":
            b, epoch = draw(st.integers(0, 4)), draw(st.integers(0, 1000))
            brokers[b] = epoch
            out.append(record(
                T.REGISTER_BROKER_RECORD, broker_id=b, incarnation_id=uuid.UUID(int=epoch + 1),
                broker_epoch=epoch, features=[],
                end_points=[{"name": "PLAINTEXT", "host": draw(names), "port": 9092,
                             "security_protocol": 0}],
                rack=draw(st.none() | names), fenced=draw(st.booleans()),
                in_controlled_shutdown=draw(st.booleans()),
                log_dirs=draw(st.sampled_from([[], [LOST_DIR], [uuid.UUID(int=200 + b)]]))))
        elif kind == "fence" and brokers:
            b = draw(st.sampled_from(sorted(brokers)))
            which = draw(st.sampled_from([T.FENCE_BROKER_RECORD, T.UNFENCE_BROKER_RECORD]))
            out.append(record(which, id=b, epoch=brokers[b]))
        elif kind == "change" and brokers:
            b = draw(st.sampled_from(sorted(brokers)))
            out.append(record(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=b,
                              broker_epoch=brokers[b], fenced=draw(st.sampled_from([-1, 0, 1])),
                              in_controlled_shutdown=draw(st.sampled_from([0, 1])),
                              log_dirs=draw(st.sampled_from([[], [LOST_DIR]]))))
        elif kind == "topic":
            name = draw(names)
            if any(n == name for n, _ in topics.values()):
                continue
            topic_id = uuid.UUID(int=draw(st.integers(1, 1 << 64)))
            if topic_id in topics:
                continue
            topics[topic_id] = (name, set())
            out.append(record(T.TOPIC_RECORD, name=name, topic_id=topic_id))
        elif kind in ("partition", "pchange", "remove") and topics:
            topic_id = draw(st.sampled_from(sorted(topics)))
            name, partitions = topics[topic_id]
            replicas = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True))
            if kind == "partition":
                p = draw(st.integers(0, 5))
                partitions.add(p)
                out.append(record(T.PARTITION_RECORD, partition_id=p, topic_id=topic_id,
                                  replicas=replicas, isr=replicas[:draw(st.integers(1, 3))],
                                  leader=draw(st.sampled_from(replicas + [-1])),
                                  leader_recovery_state=draw(st.sampled_from([0, 1])),
                                  leader_epoch=draw(st.integers(0, 50)),
                                  partition_epoch=draw(st.integers(0, 50)),
                                  directories=[],
                                  eligible_leader_replicas=draw(st.none() | st.just(replicas[1:])),
                                  last_known_elr=draw(st.none() | st.just(replicas[:1]))))
            elif kind == "pchange" and partitions:
                out.append(record(T.PARTITION_CHANGE_RECORD,
                                  partition_id=draw(st.sampled_from(sorted(partitions))),
                                  topic_id=topic_id, isr=replicas[:1],
                                  leader=draw(st.sampled_from(replicas + [-1, -2])),
                                  replicas=draw(st.none() | st.just(replicas)),
                                  eligible_leader_replicas=draw(
                                      st.none() | st.just(replicas[1:]) | st.just([])),
                                  last_known_elr=draw(st.none() | st.just(replicas[:1]))))
            elif kind == "remove":
                del topics[topic_id]
                out.append(record(T.REMOVE_TOPIC_RECORD, topic_id=topic_id))
        elif kind == "config":
            resource_type = draw(st.sampled_from([TOPIC_RESOURCE, 4]))
            resource = (draw(st.sampled_from([n for n, _ in topics.values()] or ["t"]))
                        if resource_type == TOPIC_RESOURCE
                        else draw(st.sampled_from(["", "0", "1"])))
            out.append(record(T.CONFIG_RECORD, resource_type=resource_type,
                              resource_name=resource, name=draw(names),
                              value=draw(st.none() | names)))
        elif kind == "pid":
            out.append(record(T.PRODUCER_IDS_RECORD, broker_id=0, broker_epoch=1,
                              next_producer_id=draw(st.integers(0, 1 << 40))))
        elif kind == "feature":
            out.append(record(T.FEATURE_LEVEL_RECORD,
                              name=draw(st.sampled_from(["metadata.version", "kraft.version",
                                                         "group.version"])),
                              feature_level=draw(st.integers(0, 20))))
        elif kind == "scram":
            key = (draw(names), draw(st.sampled_from([1, 2])))
            scram.add(key)
            out.append(record(T.USER_SCRAM_CREDENTIAL_RECORD, name=key[0], mechanism=key[1],
                              salt=draw(st.binary(max_size=8)),
                              stored_key=draw(st.binary(max_size=8)),
                              server_key=draw(st.binary(max_size=8)),
                              iterations=draw(st.integers(4096, 10000))))
        elif kind == "unscram" and scram:
            key = draw(st.sampled_from(sorted(scram)))
            scram.discard(key)
            out.append(record(T.REMOVE_USER_SCRAM_CREDENTIAL_RECORD, name=key[0],
                              mechanism=key[1]))
        elif kind == "acl":
            acl_id = uuid.UUID(int=draw(st.integers(1, 1 << 64)))
            acls.add(acl_id)
            out.append(record(T.ACCESS_CONTROL_ENTRY_RECORD, id=acl_id,
                              resource_type=draw(st.integers(1, 7)), resource_name=draw(names),
                              pattern_type=draw(st.sampled_from([3, 4])),
                              principal="User:" + draw(names), host="*",
                              operation=draw(st.integers(2, 14)),
                              permission_type=draw(st.sampled_from([2, 3]))))
        elif kind == "unacl" and acls:
            acl_id = draw(st.sampled_from(sorted(acls)))
            acls.discard(acl_id)
            out.append(record(T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, id=acl_id))
        elif kind == "noop":
            out.append(record(T.NO_OP_RECORD))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_any_history_replays_to_the_image_its_snapshot_rebuilds(history):
    image = MetadataImage.EMPTY.replay(history)
    loaded, records = load_snapshot(encode_snapshot(image))
    assert loaded == image
    # and the snapshot's records are a history too: its own snapshot is the same bytes
    assert encode_snapshot(MetadataImage.EMPTY.replay(records)) == encode_snapshot(image)
