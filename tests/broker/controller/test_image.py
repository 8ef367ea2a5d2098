"""The metadata image: encoded metadata records, decoded and replayed, give the cluster's
brokers, topics, partitions, configs, producer ids and features, as Kafka's MetadataDelta
builds a MetadataImage."""

from __future__ import annotations

import uuid

import pytest

from broker.controller.election import NO_LEADER, PartitionRegistration
from broker.controller.image import (
    BROKER_RESOURCE, LOST_DIR, TOPIC_RESOURCE, BrokerEndpoint, MetadataImage,
    MetadataImageError,
)
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

ORDERS = uuid.UUID("6f1c3e0a-0000-4000-8000-000000000001")
AUDIT = uuid.UUID("6f1c3e0a-0000-4000-8000-000000000002")

VERSIONS = {T.REGISTER_BROKER_RECORD: 3, T.PARTITION_RECORD: 2, T.PARTITION_CHANGE_RECORD: 2,
            T.BROKER_REGISTRATION_CHANGE_RECORD: 2}
DIR_1 = uuid.UUID("5e1d0a7c-0000-4000-8000-000000000001")


def wire(record_type: T, **body) -> bytes:
    return encode_metadata_record(record_type, VERSIONS.get(record_type, 0), body)


def register(broker_id: int, epoch: int, *, fenced: bool = True,
             log_dirs: list[uuid.UUID] | None = None) -> bytes:
    return wire(T.REGISTER_BROKER_RECORD, broker_id=broker_id,
                incarnation_id=uuid.UUID(int=100 + broker_id), broker_epoch=epoch,
                end_points=[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9090 + broker_id,
                             "security_protocol": 0}],
                features=[], rack=f"rack-{broker_id}", fenced=fenced, log_dirs=log_dirs or [])


def partition(topic_id: uuid.UUID, partition_id: int, replicas: list[int]) -> bytes:
    return wire(T.PARTITION_RECORD, partition_id=partition_id, topic_id=topic_id,
                replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0,
                partition_epoch=0)


def cluster_records() -> list[bytes]:
    """Three brokers registered and unfenced, and a topic of three partitions, RF 3."""
    records = [wire(T.FEATURE_LEVEL_RECORD, name="metadata.version", feature_level=19)]
    for b in range(3):
        records.append(register(b, epoch=10 + b))
    for b in range(3):
        records.append(wire(T.UNFENCE_BROKER_RECORD, id=b, epoch=10 + b))
    records.append(wire(T.TOPIC_RECORD, name="orders", topic_id=ORDERS))
    for p in range(3):
        records.append(partition(ORDERS, p, [p % 3, (p + 1) % 3, (p + 2) % 3]))
    records.append(wire(T.PRODUCER_IDS_RECORD, broker_id=0, broker_epoch=10,
                        next_producer_id=1000))
    records.append(wire(T.NO_OP_RECORD))
    return records


def replay(records: list[bytes], image: MetadataImage = MetadataImage.EMPTY) -> MetadataImage:
    return image.replay(decode_metadata_record(r) for r in records)


def test_a_three_broker_cluster_with_a_topic_from_encoded_records():
    image = replay(cluster_records())
    assert [b.broker_id for b in image.unfenced_brokers()] == [0, 1, 2]
    assert image.active_broker_ids() == {0, 1, 2}
    b1 = image.brokers[1]
    assert (b1.incarnation_id, b1.epoch, b1.rack) == (uuid.UUID(int=101), 11, "rack-1")
    assert b1.endpoint("PLAINTEXT") == BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9091, 0)
    assert b1.endpoint("CONTROLLER") is None

    topic = image.topic("orders")
    assert topic is not None and topic.topic_id == ORDERS
    assert image.topic_by_id(ORDERS) is topic
    assert image.topic("missing") is None and image.partitions("missing") == {}
    assert dict(image.partitions("orders")) == {
        0: PartitionRegistration((0, 1, 2), (0, 1, 2), 0),
        1: PartitionRegistration((1, 2, 0), (1, 2, 0), 1),
        2: PartitionRegistration((2, 0, 1), (2, 0, 1), 2)}
    assert [image.leader("orders", p) for p in range(3)] == [0, 1, 2]
    assert image.leader("orders", 7) == NO_LEADER
    assert image.next_producer_id == 1000
    assert dict(image.features) == {"metadata.version": 19}


def test_a_new_registration_starts_fenced_and_replaces_the_old_incarnation():
    image = replay([register(0, epoch=5, fenced=False)])
    assert image.active_broker_ids() == {0}
    image = replay([register(0, epoch=6)], image)
    assert image.brokers[0].epoch == 6 and image.brokers[0].fenced
    assert image.unfenced_brokers() == ()


def test_fencing_and_unfencing_a_broker():
    image = replay(cluster_records())
    fenced = replay([wire(T.FENCE_BROKER_RECORD, id=1, epoch=11)], image)
    assert [b.broker_id for b in fenced.unfenced_brokers()] == [0, 2]
    assert fenced.active_broker_ids() == {0, 2}
    assert fenced.brokers[1].fenced and 1 in fenced.brokers  # still registered
    assert not image.brokers[1].fenced  # the earlier image did not change
    unfenced = replay([wire(T.UNFENCE_BROKER_RECORD, id=1, epoch=11)], fenced)
    assert unfenced.active_broker_ids() == {0, 1, 2}
    assert unfenced == image


def test_a_broker_whose_log_directories_are_all_offline_stays_registered_but_inactive():
    image = replay([register(1, epoch=11, fenced=False, log_dirs=[DIR_1])])
    assert image.brokers[1].log_dirs == (DIR_1,) and image.active_broker_ids() == {1}
    offline = replay([wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=1, broker_epoch=11,
                           log_dirs=[LOST_DIR])], image)
    b1 = offline.brokers[1]
    assert not b1.has_online_dir and not b1.fenced and not b1.in_controlled_shutdown
    assert offline.active_broker_ids() == set()
    assert [b.broker_id for b in offline.unfenced_brokers()] == [1]  # Metadata still lists it
    # an empty log_dirs changes nothing (Kafka's replay); the fence fields still apply
    fenced = replay([wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=1, broker_epoch=11,
                          fenced=1)], offline)
    assert fenced.brokers[1].fenced and fenced.brokers[1].log_dirs == (LOST_DIR,)
    # only a new registration (a restart) brings the directory back
    back = replay([register(1, epoch=12, log_dirs=[DIR_1]),
                   wire(T.UNFENCE_BROKER_RECORD, id=1, epoch=12)], fenced)
    assert back.brokers[1].has_online_dir and back.active_broker_ids() == {1}


def test_a_registration_naming_no_directory_counts_as_online():
    """An older broker's registration (BrokerRegistration before v2) names no directory."""
    image = replay([register(1, epoch=11, fenced=False)])
    assert image.brokers[1].log_dirs == () and image.brokers[1].has_online_dir
    assert image.active_broker_ids() == {1}


def test_registration_changes_for_controlled_shutdown_and_unfencing():
    image = replay([register(1, epoch=11)])
    unfenced = replay([wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=1, broker_epoch=11,
                            fenced=-1)], image)
    assert unfenced.active_broker_ids() == {1}
    leaving = replay([wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=1, broker_epoch=11,
                           in_controlled_shutdown=1)], unfenced)
    assert leaving.brokers[1].in_controlled_shutdown and leaving.active_broker_ids() == set()


def test_a_leader_change_bumps_both_epochs_and_an_isr_change_only_the_partition_epoch():
    image = replay(cluster_records())
    # broker 0 is fenced: partition 0 moves to 1 and 0 leaves the ISR
    image = replay([wire(T.FENCE_BROKER_RECORD, id=0, epoch=10),
                    wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0,
                         isr=[1, 2], leader=1)], image)
    p0 = image.partition("orders", 0)
    assert p0 == PartitionRegistration((0, 1, 2), (1, 2), 1, leader_epoch=1,
                                       partition_epoch=1)
    assert image.leader("orders", 0) == 1
    # leader -2 (absent) means "unchanged": an ISR-only change keeps the leader epoch
    image = replay([wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0,
                         isr=[1])], image)
    p0 = image.partition("orders", 0)
    assert (p0.isr, p0.leader, p0.leader_epoch, p0.partition_epoch) == ((1,), 1, 1, 2)
    image = replay([wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0,
                         leader=NO_LEADER)], image)
    p0 = image.partition("orders", 0)
    assert (p0.isr, p0.leader, p0.leader_epoch, p0.partition_epoch) == ((1,), -1, 2, 3)
    # the other partitions are untouched
    assert image.partition("orders", 1) == PartitionRegistration((1, 2, 0), (1, 2, 0), 1)


def test_eligible_leader_replicas_replay_from_both_partition_records():
    image = replay(cluster_records())
    # a change naming no ELR leaves it; an empty list empties it
    image = replay([wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0, isr=[],
                         leader=NO_LEADER, eligible_leader_replicas=[0, 1],
                         last_known_elr=[0])], image)
    p0 = image.partition("orders", 0)
    assert (p0.isr, p0.elr, p0.last_known_elr, p0.partition_epoch) == ((), (0, 1), (0,), 1)
    image = replay([wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0,
                         isr=[1], leader=1)], image)
    assert image.partition("orders", 0).elr == (0, 1)
    image = replay([wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0,
                         eligible_leader_replicas=[], last_known_elr=[])], image)
    p0 = image.partition("orders", 0)
    assert (p0.isr, p0.elr, p0.last_known_elr) == ((1,), (), ())
    # a PartitionRecord carries them (tagged, v2); an older one has none
    image = replay([wire(T.PARTITION_RECORD, partition_id=3, topic_id=ORDERS,
                         replicas=[0, 1, 2], isr=[2], leader=2, leader_epoch=4,
                         partition_epoch=7, directories=[], eligible_leader_replicas=[1],
                         last_known_elr=None),
                    encode_metadata_record(T.PARTITION_RECORD, 0, {
                        "partition_id": 4, "topic_id": ORDERS, "replicas": [0], "isr": [0],
                        "leader": 0, "leader_epoch": 0, "partition_epoch": 0})], image)
    assert (image.partition("orders", 3).elr,
            image.partition("orders", 3).last_known_elr) == ((1,), ())
    assert (image.partition("orders", 4).elr,
            image.partition("orders", 4).last_known_elr) == ((), ())


def test_config_set_overwrite_and_delete():
    image = replay(cluster_records())
    image = replay([
        wire(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name="orders",
             name="retention.ms", value="1000"),
        wire(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name="orders",
             name="cleanup.policy", value="compact"),
        wire(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name="orders",
             name="retention.ms", value="2000"),
        wire(T.CONFIG_RECORD, resource_type=BROKER_RESOURCE, resource_name="1",
             name="log.retention.ms", value="5"),
    ], image)
    assert dict(image.topic_configs("orders")) == {"retention.ms": "2000",
                                                    "cleanup.policy": "compact"}
    assert dict(image.broker_configs(1)) == {"log.retention.ms": "5"}
    assert image.broker_configs(0) == {}
    image = replay([
        wire(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name="orders",
             name="retention.ms", value=None),
        wire(T.CONFIG_RECORD, resource_type=BROKER_RESOURCE, resource_name="1",
             name="log.retention.ms", value=None),
    ], image)
    assert dict(image.topic_configs("orders")) == {"cleanup.policy": "compact"}
    assert (BROKER_RESOURCE, "1") not in image.configs


def test_removing_a_topic_removes_its_partitions_and_configs_and_frees_its_name():
    image = replay(cluster_records() + [
        wire(T.TOPIC_RECORD, name="audit", topic_id=AUDIT), partition(AUDIT, 0, [2]),
        wire(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name="orders",
             name="retention.ms", value="1000"),
        wire(T.REMOVE_TOPIC_RECORD, topic_id=ORDERS)])
    assert image.topic("orders") is None and image.topic_by_id(ORDERS) is None
    assert image.partitions("orders") == {} and image.leader("orders", 0) == NO_LEADER
    assert image.topic_configs("orders") == {}
    assert list(image.partitions("audit")) == [0]
    with pytest.raises(MetadataImageError, match="no such topic"):
        replay([wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=0, leader=1)],
               image)
    # the name may be reused by a new topic id, with no partitions of the old one
    image = replay([wire(T.TOPIC_RECORD, name="orders", topic_id=uuid.UUID(int=9))], image)
    assert image.partitions("orders") == {}


def test_replaying_the_same_records_gives_the_same_image():
    records = cluster_records() + [
        wire(T.FENCE_BROKER_RECORD, id=2, epoch=12),
        wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=2, isr=[0, 1], leader=0),
        wire(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name="orders",
             name="retention.ms", value="1000")]
    first, second = replay(records), replay(records)
    assert first == second and first is not second
    assert first != replay(records[:-1])
    assert first.leader("orders", 2) == 0


@pytest.mark.parametrize("record, message", [
    (wire(T.PARTITION_CHANGE_RECORD, topic_id=AUDIT, partition_id=0, leader=1),
     "no such topic"),
    (wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=9, leader=1),
     "no such partition"),
    (partition(AUDIT, 0, [0]), "no such topic"),
    (wire(T.REMOVE_TOPIC_RECORD, topic_id=AUDIT), "no such topic"),
    (wire(T.FENCE_BROKER_RECORD, id=7, epoch=1), "not registered"),
    (wire(T.UNREGISTER_BROKER_RECORD, broker_id=7, broker_epoch=1), "not registered"),
    (wire(T.UNREGISTER_BROKER_RECORD, broker_id=1, broker_epoch=3), "has epoch 11"),
    (wire(T.UNFENCE_BROKER_RECORD, id=1, epoch=3), "has epoch 11"),
    (wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=7, broker_epoch=1), "not registered"),
    (wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=1, broker_epoch=3), "has epoch 11"),
    (wire(T.BROKER_REGISTRATION_CHANGE_RECORD, broker_id=1, broker_epoch=11, fenced=2),
     "fenced=2"),
    (wire(T.TOPIC_RECORD, name="orders", topic_id=AUDIT), "already exists"),
    (wire(T.TOPIC_RECORD, name="audit", topic_id=ORDERS), "already names topic"),
])
def test_a_record_naming_what_the_image_lacks_is_refused(record, message):
    image = replay(cluster_records())
    with pytest.raises(MetadataImageError, match=message):
        replay([record], image)


def test_an_unregistered_broker_leaves_the_image_but_stays_among_the_replicas():
    image = replay([wire(T.UNREGISTER_BROKER_RECORD, broker_id=1, broker_epoch=11)],
                   replay(cluster_records()))
    assert sorted(image.brokers) == [0, 2] and image.active_broker_ids() == {0, 2}
    assert all(1 in p.replicas for p in image.partitions("orders").values())


def test_an_unknown_record_type_is_refused():
    with pytest.raises(MetadataImageError, match="unknown metadata record type 99"):
        MetadataImage.EMPTY.apply(99, 0, {})


def test_scram_credentials_are_kept_per_user_and_mechanism_and_removed():
    image = replay([
        wire(T.USER_SCRAM_CREDENTIAL_RECORD, name="alice", mechanism=1, salt=b"s1",
             stored_key=b"k1", server_key=b"v1", iterations=4096),
        wire(T.USER_SCRAM_CREDENTIAL_RECORD, name="alice", mechanism=2, salt=b"s2",
             stored_key=b"k2", server_key=b"v2", iterations=8192),
        # a new password replaces the credential of that mechanism alone
        wire(T.USER_SCRAM_CREDENTIAL_RECORD, name="alice", mechanism=1, salt=b"s3",
             stored_key=b"k3", server_key=b"v3", iterations=4096),
    ])
    assert sorted(image.scram_credentials) == [("alice", 1), ("alice", 2)]
    assert image.scram_credentials[("alice", 1)].salt == b"s3"
    assert image.scram_credentials[("alice", 2)].iterations == 8192
    image = replay([wire(T.REMOVE_USER_SCRAM_CREDENTIAL_RECORD, name="alice", mechanism=1)],
                   image)
    assert list(image.scram_credentials) == [("alice", 2)]
    with pytest.raises(MetadataImageError):
        replay([wire(T.REMOVE_USER_SCRAM_CREDENTIAL_RECORD, name="alice", mechanism=1)], image)


def test_acls_are_kept_by_id_and_removed():
    acl = dict(resource_type=2, resource_name="orders-", pattern_type=4,
               principal="User:alice", host="*", operation=3, permission_type=3)
    image = replay([wire(T.ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=1), **acl),
                    wire(T.ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=2),
                         **{**acl, "permission_type": 2})])
    assert image.acls[uuid.UUID(int=1)].resource_name == "orders-"
    assert image.acls[uuid.UUID(int=2)].permission_type == 2
    image = replay([wire(T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=1))], image)
    assert list(image.acls) == [uuid.UUID(int=2)]
    with pytest.raises(MetadataImageError):
        replay([wire(T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=1))], image)


def test_a_run_of_security_records_replays_as_the_records_one_by_one():
    """replay applies a run of ACL/SCRAM records to one working copy; interleaved with other
    records, the result is the same as applying each record alone."""
    acl = dict(resource_type=2, pattern_type=3, principal="User:a", host="*", operation=3,
               permission_type=3)
    records = [wire(T.ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=i),
                    resource_name=f"t{i}", **acl) for i in range(1, 6)]
    records.insert(2, wire(T.TOPIC_RECORD, name="orders", topic_id=ORDERS))
    records.append(wire(T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=2)))
    records.append(wire(T.USER_SCRAM_CREDENTIAL_RECORD, name="u", mechanism=1, salt=b"s",
                        stored_key=b"k", server_key=b"v", iterations=4096))
    at_once = replay(records)
    one_by_one = MetadataImage.EMPTY
    for r in records:
        one_by_one = one_by_one.apply(*decode_metadata_record(r))
    assert at_once == one_by_one
    assert sorted(a.resource_name for a in at_once.acls.values()) == ["t1", "t3", "t4", "t5"]
    assert at_once.topic("orders") is not None and list(at_once.scram_credentials) == [("u", 1)]
    with pytest.raises(MetadataImageError):  # a bad record inside a run still fails the replay
        replay([records[0], wire(T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=9))])


def test_a_run_of_partition_records_replays_as_the_records_one_by_one():
    """replay applies a run of PartitionRecords and PartitionChangeRecords to one working
    copy of each topic's partitions; interleaved with other records (a new topic, an ACL,
    a config), the result is the same as applying each record alone."""
    audit_parts = [partition(AUDIT, p, [p % 3, (p + 1) % 3]) for p in range(4)]
    records = [*cluster_records(),
               wire(T.TOPIC_RECORD, name="audit", topic_id=AUDIT),
               *audit_parts[:2],
               wire(T.PARTITION_CHANGE_RECORD, topic_id=ORDERS, partition_id=1, leader=2),
               wire(T.ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=1), resource_type=2,
                    resource_name="audit", pattern_type=3, principal="User:a", host="*",
                    operation=3, permission_type=3),
               *audit_parts[2:],
               wire(T.PARTITION_CHANGE_RECORD, topic_id=AUDIT, partition_id=3, isr=[0]),
               wire(T.CONFIG_RECORD, resource_type=2, resource_name="audit",
                    name="retention.ms", value="1000"),
               wire(T.PARTITION_CHANGE_RECORD, topic_id=AUDIT, partition_id=3, leader=1)]
    at_once = replay(records)
    one_by_one = MetadataImage.EMPTY
    for r in records:
        one_by_one = one_by_one.apply(*decode_metadata_record(r))
    assert at_once == one_by_one
    audit = at_once.topic("audit")
    assert audit is not None and sorted(audit.partitions) == [0, 1, 2, 3]
    assert audit.partitions[3].isr == (0,) and audit.partitions[3].leader == 1
    assert at_once.topic("orders").partitions[1].leader == 2
    with pytest.raises(MetadataImageError):  # a change of a partition the run lacks fails
        replay([*records, wire(T.PARTITION_CHANGE_RECORD, topic_id=AUDIT, partition_id=9,
                               leader=0)])


def test_a_run_of_config_records_replays_as_the_records_one_by_one():
    """replay applies a run of ConfigRecords (IncrementalAlterConfigs writes one per key)
    to one working copy of the configs; set, overwritten and deleted keys, a resource left
    empty, a topic removed in the middle: the same image as each record applied alone, the
    image replayed from untouched, and its configs as read-only as any image's."""
    def config(resource: str, name: str, value: str | None, kind: int = TOPIC_RESOURCE):
        return wire(T.CONFIG_RECORD, resource_type=kind, resource_name=resource, name=name,
                    value=value)
    base = replay([*cluster_records(), wire(T.TOPIC_RECORD, name="audit", topic_id=AUDIT),
                   config("orders", "retention.ms", "1"), config("audit", "segment.ms", "9")])
    records = [config("orders", "retention.ms", "2"), config("orders", "flush.ms", "3"),
               config("audit", "segment.ms", None),  # its only key: the resource goes
               config("1", "log.retention.ms", "5", BROKER_RESOURCE),
               config("orders", "retention.ms", "4"),
               wire(T.REMOVE_TOPIC_RECORD, topic_id=AUDIT),
               config("audit", "segment.ms", "7"),  # configs may precede a new topic
               config("orders", "flush.ms", None)]
    at_once = replay(records, base)
    one_by_one = base
    for r in records:
        one_by_one = one_by_one.apply(*decode_metadata_record(r))
    assert at_once == one_by_one
    assert dict(at_once.configs) == {(TOPIC_RESOURCE, "orders"): {"retention.ms": "4"},
                                     (BROKER_RESOURCE, "1"): {"log.retention.ms": "5"},
                                     (TOPIC_RESOURCE, "audit"): {"segment.ms": "7"}}
    assert dict(base.topic_configs("orders")) == {"retention.ms": "1"}
    assert dict(base.topic_configs("audit")) == {"segment.ms": "9"}
    with pytest.raises(TypeError):
        at_once.topic_configs("orders")["retention.ms"] = "0"  # type: ignore[index]
    with pytest.raises(TypeError):
        at_once.configs[(TOPIC_RESOURCE, "x")] = {}  # type: ignore[index]
