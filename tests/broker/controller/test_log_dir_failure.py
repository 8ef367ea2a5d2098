"""A broker's failed log directory at the active controller (KIP-858): the heartbeat that
names it offline moves the broker's leaderships and ISR places to the other in-sync
replicas, keeps the broker registered and unfenced, and keeps it from leading, joining an
ISR or being placed on until it registers again with the directory online."""

from __future__ import annotations

import uuid

from broker.controller.election import NO_LEADER
from broker.controller.image import LOST_DIR
from broker.controller.replication_control import PREFERRED_ELECTION, UNCLEAN_ELECTION
from protocol.errors import ErrorCode
from broker.controller.election import UNASSIGNED_DIR, PartitionChangeRecord
from protocol.messages.cluster import (
    AssignReplicasToDirsRequest, BrokerHeartbeatRequest, BrokerRegistrationRequest,
)
from protocol.metadata_records import MetadataRecordType as T

from .test_quorum_controller import Cluster, incarnation, leaders, wire


def dir_of(broker_id: int, generation: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(0xD1 << 64) + (generation << 32) + broker_id)


class DirCluster(Cluster):
    """Brokers that register a log directory each and can report it offline."""

    def register(self, broker_id: int, *, generation: int = 0, rack: str | None = None,
                 previous_epoch: int = -1, log_dirs: list[uuid.UUID] | None = None) -> dict:
        body = wire(BrokerRegistrationRequest, 3, {
            "broker_id": broker_id, "cluster_id": "c",
            "incarnation_id": incarnation(broker_id, generation),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + broker_id,
                           "security_protocol": 0}],
            "features": [], "rack": rack, "previous_broker_epoch": previous_epoch,
            "log_dirs": [dir_of(broker_id)] if log_dirs is None else log_dirs})
        return self.apply(self.controller.register_broker(body, self.now, self.offset))

    def heartbeat_result(self, broker_id: int, offline: list[uuid.UUID]):
        body = wire(BrokerHeartbeatRequest, 1, {
            "broker_id": broker_id, "broker_epoch": self.image.brokers[broker_id].epoch,
            "current_metadata_offset": self.offset, "want_fence": False,
            "want_shut_down": False, "offline_log_dirs": offline})
        return self.controller.broker_heartbeat(body, self.now, self.offset)

    def dir_failed(self, broker_id: int) -> dict:
        return self.apply(self.heartbeat_result(broker_id, [dir_of(broker_id)]))


def test_an_offline_directory_moves_leaderships_and_isr_places_to_the_other_replicas():
    c = DirCluster()
    c.start(1, 2, 3)
    assert c.image.brokers[1].log_dirs == (dir_of(1),)
    c.create("t", assignments=[[1, 2, 3], [2, 1, 3], [3, 2, 1]])
    assert leaders(c, "t") == {0: 1, 1: 2, 2: 3}

    result = c.heartbeat_result(1, [dir_of(1)])
    assert [r[0] for r in result.records] == [T.PARTITION_CHANGE_RECORD] * 3 + [
        T.BROKER_REGISTRATION_CHANGE_RECORD]
    response = c.apply(result)
    assert response == {"error_code": 0, "is_caught_up": True, "is_fenced": False,
                        "should_shut_down": False}
    assert leaders(c, "t") == {0: 2, 1: 2, 2: 3}  # the next ISR member in replica order
    assert [c.partition("t", p).isr for p in range(3)] == [(2, 3), (2, 3), (3, 2)]
    assert c.partition("t", 0).leader_epoch == 1 and c.partition("t", 1).leader_epoch == 0

    broker = c.image.brokers[1]
    assert broker.log_dirs == (LOST_DIR,) and not broker.fenced  # registered, unfenced
    assert [b.broker_id for b in c.image.unfenced_brokers()] == [1, 2, 3]
    assert c.image.active_broker_ids() == {2, 3}
    assert c.standby_image() == c.image  # every broker replays the same change


def test_naming_the_directory_again_or_an_unknown_one_writes_nothing():
    c = DirCluster()
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    assert c.heartbeat_result(1, [uuid.uuid4()]).records == ()
    assert c.heartbeat_result(1, [LOST_DIR]).records == ()
    c.dir_failed(1)
    assert c.heartbeat_result(1, [dir_of(1)]).records == ()
    assert c.heartbeat_result(1, []).records == ()  # a heartbeat brings no directory back
    assert c.image.brokers[1].log_dirs == (LOST_DIR,)


def test_a_broker_without_directories_cannot_have_them_taken_offline():
    """An older broker registered no directory id: an offline report names none of its."""
    c = DirCluster()
    c.register(1, log_dirs=[])
    assert c.heartbeat(1)["is_fenced"] is False
    c.create("t", 1, 1)
    assert c.heartbeat_result(1, [dir_of(1)]).records == ()
    assert leaders(c, "t") == {0: 1}


def test_the_last_isr_member_stays_eligible_but_the_partition_goes_offline():
    c = DirCluster()
    c.start(1, 2)
    c.create("solo", assignments=[[1]])
    c.dir_failed(1)
    solo = c.partition("solo", 0)
    assert (solo.leader, solo.isr, solo.elr) == (NO_LEADER, (), (1,))


def test_a_broker_with_a_failed_directory_is_not_picked_until_it_registers_again():
    c = DirCluster()
    c.start(1, 2, 3)
    c.create("t", assignments=[[1, 2]])
    c.create("solo", assignments=[[1]])
    c.dir_failed(1)
    assert leaders(c, "t") == {0: 2} and leaders(c, "solo") == {0: NO_LEADER}

    # no election picks it: another broker's unfencing, preferred and unclean elections
    c.heartbeat(3, want_fence=True)
    c.heartbeat(3)
    assert leaders(c, "solo") == {0: NO_LEADER}
    assert c.elect(PREFERRED_ELECTION, {"t": [0]}) == {
        ("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert c.elect(UNCLEAN_ELECTION, {"solo": [0]}) == {
        ("solo", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    # no placement either: new replicas go to the brokers that can host them
    assert c.create("new", 4, 2)["error_code"] == ErrorCode.NONE
    assert all(1 not in p.replicas for p in c.image.partitions("new").values())
    assert c.create("wide", 1, 3)["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR

    # restarted with the directory online: it registers again and leads what waited for it
    epoch = c.image.brokers[1].epoch
    assert c.register(1, generation=1, previous_epoch=epoch)["error_code"] == ErrorCode.NONE
    assert c.image.brokers[1].log_dirs == (dir_of(1),)
    assert c.heartbeat(1)["is_fenced"] is False
    assert leaders(c, "solo") == {0: 1} and 1 in c.image.active_broker_ids()
    assert c.standby_image() == c.image


def test_registering_again_while_the_directory_is_still_offline_elects_nothing_on_it():
    """A broker that lost its registration (STALE_BROKER_EPOCH) registers its directories
    and names the failed one in its next heartbeat: the directory goes offline before the
    unfencing, which would otherwise hand it the partitions waiting for it."""
    c = DirCluster()
    c.start(1, 2)
    c.create("solo", assignments=[[1]])
    c.dir_failed(1)
    c.heartbeat(1, want_fence=True)
    assert c.register(1)["error_code"] == ErrorCode.NONE  # the same incarnation
    assert c.image.brokers[1].has_online_dir and c.image.brokers[1].fenced
    solo_before = c.partition("solo", 0)
    result = c.heartbeat_result(1, [dir_of(1)])
    assert [r[0] for r in result.records] == [T.BROKER_REGISTRATION_CHANGE_RECORD,
                                              T.UNFENCE_BROKER_RECORD]
    assert c.apply(result)["is_fenced"] is False
    assert c.image.brokers[1].log_dirs == (LOST_DIR,)
    assert c.partition("solo", 0) == solo_before  # never led, not even for a moment


def test_a_controlled_shutdown_keeps_the_directory_offline():
    c = DirCluster()
    c.start(1, 2)
    c.dir_failed(1)
    c.heartbeat(1, want_shut_down=True)
    assert c.image.brokers[1].in_controlled_shutdown
    assert c.image.brokers[1].log_dirs == (LOST_DIR,)


def test_registrations_with_reserved_duplicate_or_taken_directories_are_refused():
    c = DirCluster()
    assert c.register(1)["error_code"] == ErrorCode.NONE
    invalid = ErrorCode.INVALID_REGISTRATION
    assert c.register(2, log_dirs=[LOST_DIR])["error_code"] == invalid
    assert c.register(2, log_dirs=[dir_of(2), dir_of(2)])["error_code"] == invalid
    assert c.register(2, log_dirs=[dir_of(1)])["error_code"] == invalid
    assert 2 not in c.image.brokers
    assert c.register(2, log_dirs=[dir_of(2), dir_of(2, generation=1)])["error_code"] == 0


# -- several directories a broker (JBOD): AssignReplicasToDirs, one directory offline ------


def assign(c: DirCluster, broker_id: int, directory: uuid.UUID,
           partitions: dict[str, list[int]]) -> dict:
    body = wire(AssignReplicasToDirsRequest, 0, {
        "broker_id": broker_id, "broker_epoch": c.image.brokers[broker_id].epoch,
        "directories": [{"id": directory, "topics": [
            {"topic_id": c.image.topic(t).topic_id,
             "partitions": [{"partition_index": i} for i in ps]}
            for t, ps in partitions.items()]}]})
    return c.apply(c.controller.assign_replicas_to_dirs(body, c.now))


def codes(answer: dict) -> list[int]:
    return [p["error_code"] for d in answer["directories"] for t in d["topics"]
            for p in t["partitions"]]


def test_assignments_record_each_replicas_directory():
    c = DirCluster()
    a, b = dir_of(1), dir_of(1, generation=1)
    c.register(1, log_dirs=[a, b])
    c.heartbeat(1)
    c.start(2)
    c.create("t", assignments=[[1, 2], [2, 1]])
    assert c.partition("t", 0).directories == ()  # none said yet
    answer = assign(c, 1, b, {"t": [0, 1]})
    assert answer["error_code"] == 0 and codes(answer) == [0, 0]
    assert c.partition("t", 0).directory_of(1) == b and c.partition("t", 1).directory_of(1) == b
    assert c.partition("t", 0).directory_of(2) == UNASSIGNED_DIR
    epoch = c.partition("t", 0).partition_epoch
    assert codes(assign(c, 1, b, {"t": [0]})) == [0]  # the same again: no record
    assert c.partition("t", 0).partition_epoch == epoch
    assert codes(assign(c, 1, a, {"t": [0]})) == [0]  # moved
    assert c.partition("t", 0).directory_of(1) == a
    assert c.standby_image() == c.image  # replayed alike, and kept by snapshots
    # new replicas (a reassignment's) start unassigned; those that stay keep theirs
    p = c.partition("t", 0).merge(PartitionChangeRecord(
        topic_id=c.image.topic("t").topic_id, partition_id=0, replicas=(3, 1)))
    assert p.directories == (UNASSIGNED_DIR, a)


def test_bad_assignments_are_refused_and_change_nothing():
    c = DirCluster()
    a = dir_of(1)
    c.start(1, 2)
    c.create("t", assignments=[[2]])
    before = c.image
    assert codes(assign(c, 1, a, {"t": [0, 7]})) == [ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    answer = assign(c, 1, uuid.uuid4(), {"t": [0]})  # a directory it did not register
    assert answer["error_code"] == ErrorCode.INVALID_REQUEST
    assert c.image == before


def test_one_directory_of_two_offline_moves_only_its_replicas():
    c = DirCluster()
    a, b = dir_of(1), dir_of(1, generation=1)
    c.register(1, log_dirs=[a, b])
    c.heartbeat(1)
    c.start(2, 3)
    c.create("t", assignments=[[1, 2, 3], [1, 3, 2], [2, 1, 3]])
    assign(c, 1, a, {"t": [0, 2]})
    assign(c, 1, b, {"t": [1]})
    result = c.heartbeat_result(1, [a])
    response = c.apply(result)
    assert response["is_fenced"] is False
    assert c.image.brokers[1].log_dirs == (b,)
    assert 1 in c.image.active_broker_ids()
    # t-0 (led there) moves; t-2 (a follower there) leaves the ISR; t-1 (in b) stays
    assert leaders(c, "t") == {0: 2, 1: 1, 2: 2}
    assert [1 in c.partition("t", p).isr for p in range(3)] == [False, True, False]
    assert 1 not in c.partition("t", 0).elr
    assert c.standby_image() == c.image
