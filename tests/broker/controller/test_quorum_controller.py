"""The active controller: requests become metadata records and a response, as Kafka's
QuorumController writes them. Every result's records go through the codec and back into
the controller, as the runtime will replay them, and a standby replaying the same records
must reach the same image."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from typing import Any

import pytest
from construct import Container

from broker.controller.election import NO_LEADER, LeaderRecoveryState
from broker.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.metadata import LegacyMetadata, LegacyTopic
from broker.controller.features import BOOTSTRAP
from broker.controller.config_control import APPEND, DELETE, SET, SUBTRACT
from broker.controller.controller_result import ControllerResult
from broker.controller.quorum_controller import NO_DEADLINE, ControllerSettings, QuorumController
from broker.controller.snapshot import encode_snapshot, load_snapshot
from protocol.errors import ErrorCode
from protocol.messages.cluster import (
    BrokerHeartbeatRequest, BrokerRegistrationRequest, ElectLeadersRequest,
    UnregisterBrokerRequest,
)
from protocol.messages.topics import (
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
)
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record
from protocol.schema import Message

SESSION = 9000


def wire(message: Message, version: int, body: dict) -> Container:
    """A request as the runtime will hand it over: encoded and decoded at `version`."""
    return message.parse(message.build(body, version), version)


def incarnation(broker_id: int, generation: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(generation << 32) + broker_id + 1)


class Cluster:
    """A controller with a fake Raft log: each result with records is one entry, replayed
    through the codec at once; `log` keeps every decoded record for a standby."""

    def __init__(self, settings: ControllerSettings | None = None, seed: int = 7,
                 legacy: LegacyMetadata | None = None) -> None:
        self.settings = settings or ControllerSettings(node_id=100, voters=(100,),
                                                       max_idle_interval_ms=0)
        self.controller = QuorumController(self.settings, random.Random(seed))
        self.now = 1_000
        self.offset = 0
        self.log: list[tuple[int, int, Any]] = []
        self.apply(self.controller.activate(self.now, legacy))

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def apply(self, result: ControllerResult | None) -> Any:
        if result is None:
            return None
        if result.records:
            decoded = [decode_metadata_record(encode_metadata_record(t, v, body))
                       for t, v, body in result.records]
            self.controller.replay(decoded)
            self.log.extend(decoded)
            self.offset += 1
        return result.response

    def register(self, broker_id: int, *, generation: int = 0, rack: str | None = None,
                 previous_epoch: int = -1) -> dict:
        body = wire(BrokerRegistrationRequest, 3, {
            "broker_id": broker_id, "cluster_id": "c", "incarnation_id":
                incarnation(broker_id, generation),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + broker_id,
                           "security_protocol": 0}],
            "features": [], "rack": rack, "previous_broker_epoch": previous_epoch})
        return self.apply(self.controller.register_broker(body, self.now, self.offset))

    def heartbeat(self, broker_id: int, *, epoch: int | None = None, offset: int | None = None,
                  want_fence: bool = False, want_shut_down: bool = False) -> dict:
        if epoch is None:
            epoch = self.image.brokers[broker_id].epoch
        body = wire(BrokerHeartbeatRequest, 1, {
            "broker_id": broker_id, "broker_epoch": epoch,
            "current_metadata_offset": self.offset if offset is None else offset,
            "want_fence": want_fence, "want_shut_down": want_shut_down})
        return self.apply(self.controller.broker_heartbeat(body, self.now, self.offset))

    def start(self, *broker_ids: int, racks: dict[int, str] | None = None) -> None:
        for b in broker_ids:
            assert self.register(b, rack=(racks or {}).get(b))["error_code"] == 0
        for b in broker_ids:
            assert self.heartbeat(b)["is_fenced"] is False

    def create(self, name: str, partitions: int = -1, rf: int = -1, *,
               assignments: list | None = None, configs: dict | None = None,
               validate_only: bool = False) -> dict:
        body = wire(CreateTopicsRequest, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": i, "broker_ids": b}
                            for i, b in enumerate(assignments or [])],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "validate_only": validate_only})
        return self.apply(self.controller.create_topics(body, self.now))["topics"][0]

    def tick(self, now: int) -> list:
        self.now = now
        return [self.apply(r) for r in self.controller.tick(now)]

    def elect(self, election_type: int, topic_partitions: dict[str, list[int]] | None) -> dict:
        body = wire(ElectLeadersRequest, 2, {
            "election_type": election_type,
            "topic_partitions": None if topic_partitions is None else [
                {"topic": t, "partitions": ps} for t, ps in topic_partitions.items()]})
        response = self.apply(self.controller.elect_leaders(body, self.now))
        return {(t["topic"], p["partition_id"]): p["error_code"]
                for t in response["replica_election_results"] for p in t["partition_result"]}

    def alter_configs(self, resource_type: int, name: str, ops: list[tuple[str, int, Any]],
                      validate_only: bool = False) -> dict:
        body = Container(resources=[Container(
            resource_type=resource_type, resource_name=name,
            configs=[Container(name=k, config_operation=op, value=v) for k, op, v in ops])],
            validate_only=validate_only)
        return self.apply(self.controller.incremental_alter_configs(body, self.now))[
            "responses"][0]

    def partition(self, name: str, pid: int):
        p = self.image.partition(name, pid)
        assert p is not None
        return p

    def topic_id(self, name: str) -> uuid.UUID:
        topic = self.image.topic(name)
        assert topic is not None
        return topic.topic_id

    def standby_image(self) -> MetadataImage:
        return MetadataImage.EMPTY.replay(self.log)


def settings(**kw: Any) -> ControllerSettings:
    kw.setdefault("node_id", 100)
    kw.setdefault("voters", (100,))
    # the NoOpRecords off unless a test is about them: the other timers' deadlines and
    # what a tick writes are read on their own
    kw.setdefault("max_idle_interval_ms", 0)
    return ControllerSettings(**kw)


def leaders(cluster: Cluster, name: str) -> dict[int, int]:
    return {pid: p.leader for pid, p in cluster.image.partitions(name).items()}


# --- activation ---------------------------------------------------------------------------


def test_activation_bootstraps_the_metadata_version_once():
    c = Cluster()
    assert c.image.features == BOOTSTRAP
    assert c.controller.activate(c.now) is None
    assert c.controller.next_deadline() == c.now + 300_000  # the first rebalance check


def test_activation_gives_every_registered_broker_a_fresh_session():
    c = Cluster()
    c.start(1)
    standby = QuorumController(c.settings, random.Random(1), c.image)
    assert standby.tick(c.now + 10 * SESSION) == []  # not active: no sessions, no fencing
    standby.activate(c.now + 10 * SESSION)
    assert standby.next_deadline() == c.now + 10 * SESSION + SESSION
    assert standby.tick(c.now + 11 * SESSION - 1) == []
    fenced = standby.tick(c.now + 11 * SESSION)
    assert [r.records[-1][0] for r in fenced] == [T.FENCE_BROKER_RECORD]


def test_reset_takes_the_given_image_and_forgets_sessions():
    c = Cluster()
    c.start(1)
    c.controller.reset(MetadataImage.EMPTY)
    assert c.image is MetadataImage.EMPTY
    assert c.controller.next_deadline() == NO_DEADLINE


# --- registration and heartbeats ----------------------------------------------------------


def test_registration_writes_a_fenced_broker_whose_epoch_is_the_entry_offset():
    c = Cluster()
    c.offset = 41
    response = c.register(1, rack="r1")
    assert response == {"error_code": 0, "broker_epoch": 41}
    broker = c.image.brokers[1]
    assert (broker.epoch, broker.fenced, broker.rack, broker.incarnation_id) == (
        41, True, "r1", incarnation(1))
    assert [(e.name, e.port) for e in broker.endpoints] == [("PLAINTEXT", 9001)]


def test_a_second_incarnation_with_a_live_session_is_a_duplicate_registration():
    c = Cluster()
    c.start(1)
    before = c.image
    result = c.controller.register_broker(wire(BrokerRegistrationRequest, 0, {
        "broker_id": 1, "cluster_id": "c", "incarnation_id": incarnation(1, 1),
        "listeners": [], "features": [], "rack": None}), c.now, c.offset)
    assert result.records == ()
    assert result.response["error_code"] == ErrorCode.DUPLICATE_BROKER_REGISTRATION == 101
    assert c.image is before
    # the same incarnation registering again is a retry and works
    assert c.register(1)["error_code"] == 0
    # once the old session has expired, the new incarnation may take the id
    c.now += SESSION
    assert c.register(1, generation=1)["error_code"] == 0
    assert c.image.brokers[1].incarnation_id == incarnation(1, 1)


def test_a_clean_restart_naming_the_previous_epoch_is_no_duplicate():
    c = Cluster()
    c.start(1)
    epoch = c.image.brokers[1].epoch
    assert c.register(1, generation=1, previous_epoch=epoch)["error_code"] == 0


def test_a_new_incarnation_after_a_controlled_shutdown_is_no_duplicate():
    # a fenced broker has no valid session (Kafka's BrokerHeartbeatManager.hasValidSession):
    # the process that stopped cleanly a moment ago is not a rival of the one starting now
    c = Cluster()
    c.start(1, 2)
    assert c.heartbeat(1, want_shut_down=True)["should_shut_down"] is False
    c.heartbeat(2)
    assert c.heartbeat(1, want_shut_down=True)["should_shut_down"] is True
    assert c.image.brokers[1].fenced
    assert c.register(1, generation=1)["error_code"] == 0
    assert c.image.brokers[1].incarnation_id == incarnation(1, 1)


def test_a_new_incarnation_of_a_live_broker_loses_its_leaderships():
    c = Cluster()
    c.start(1, 2)
    c.create("t", 2, 2)
    led_by_1 = [pid for pid, leader in leaders(c, "t").items() if leader == 1]
    assert led_by_1
    c.now += SESSION  # the old process died without a word
    assert c.register(1, generation=1)["error_code"] == 0
    for pid in led_by_1:
        assert c.partition("t", pid).leader == 2
        assert c.partition("t", pid).isr == (2,)


def test_an_isr_shrink_below_min_isr_keeps_the_replica_leaving_eligible():
    """Finding 7 (docs/RELIABILITY.md): the ISR shrinks to its leader alone, below
    min.insync.replicas; the leader dies and loses its unsynced tail. The replica that
    left last holds every record below the HW (which stopped there): it is elected, and
    the dead leader, registering after its unclean shutdown, is no longer eligible."""
    c = Cluster(settings(auto_leader_rebalance_enable=False, min_insync_replicas=2))
    c.start(1, 2, 3)
    c.create("t", assignments=[[1, 2, 3]])
    alter_partition(c, 1, "t", 0, [1, 2])
    assert (c.partition("t", 0).isr, c.partition("t", 0).elr) == ((1, 2), ())
    alter_partition(c, 1, "t", 0, [1])
    assert (c.partition("t", 0).isr, c.partition("t", 0).elr) == ((1,), (2,))
    # broker 1 is killed: its session runs out
    c.now += SESSION
    for b in (2, 3):
        c.heartbeat(b)
    c.tick(c.now)
    p = c.partition("t", 0)
    assert (p.leader, p.isr, p.elr, p.leader_recovery_state) == \
        (2, (2,), (1,), LeaderRecoveryState.RECOVERED)
    # it comes back without its unsynced tail: out of the ELR before it registers
    assert c.register(1, generation=1)["error_code"] == 0
    assert (c.partition("t", 0).leader, c.partition("t", 0).elr) == (2, ())
    c.heartbeat(1)
    assert c.partition("t", 0).leader == 2
    assert c.standby_image() == c.image


def test_an_unclean_restart_of_the_last_eligible_replica_is_an_unclean_election():
    """The last ISR member, fenced, waits in the ELR. Back after a clean shutdown (its
    registration names the epoch its shutdown recorded) it leads cleanly; back after a
    crash it is out of the ELR, and, no replica being eligible, is elected as the last
    known leader, uncleanly (RECOVERING)."""
    for clean in (True, False):
        c = Cluster(settings(auto_leader_rebalance_enable=False))
        c.start(1, 2)
        c.create("t", assignments=[[1, 2]])
        c.heartbeat(2, want_fence=True)
        c.heartbeat(2)  # back, but out of the ISR
        c.now += SESSION
        c.heartbeat(2)
        c.tick(c.now)  # broker 1's session ran out
        offline = c.partition("t", 0)
        assert (offline.leader, offline.isr, offline.elr, offline.last_known_elr) == \
            (NO_LEADER, (), (1,), (1,))
        epoch = c.image.brokers[1].epoch
        assert c.register(1, generation=1,
                          previous_epoch=epoch if clean else -1)["error_code"] == 0
        waiting = c.partition("t", 0)
        assert (waiting.leader, waiting.elr, waiting.last_known_elr) == \
            (NO_LEADER, (1,) if clean else (), (1,))
        c.heartbeat(1)
        back = c.partition("t", 0)
        assert (back.leader, back.isr, back.elr, back.last_known_elr) == (1, (1,), (), ())
        assert back.leader_recovery_state == (
            LeaderRecoveryState.RECOVERED if clean else LeaderRecoveryState.RECOVERING)
        assert c.standby_image() == c.image


def test_a_clean_restart_over_a_live_registration_is_a_fence_not_an_unclean_shutdown():
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    c.heartbeat(2, want_fence=True)
    c.heartbeat(2)
    epoch = c.image.brokers[1].epoch
    assert c.register(1, generation=1, previous_epoch=epoch)["error_code"] == 0
    p = c.partition("t", 0)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (), (1,))  # eligible still
    # the same, after a crash: out of the ISR and not eligible
    d = Cluster(settings(auto_leader_rebalance_enable=False))
    d.start(1, 2)
    d.create("t", assignments=[[1, 2]])
    d.heartbeat(2, want_fence=True)
    d.heartbeat(2)
    d.now += SESSION
    d.heartbeat(2)
    assert d.register(1, generation=1)["error_code"] == 0
    p = d.partition("t", 0)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (), ())


def test_a_new_min_insync_replicas_clears_the_eligible_leader_replicas():
    c = Cluster(settings(auto_leader_rebalance_enable=False, min_insync_replicas=2))
    c.start(1, 2, 3)
    c.create("t", assignments=[[1, 2, 3]])
    c.create("u", assignments=[[1, 2, 3]])
    for name in ("t", "u"):
        alter_partition(c, 1, name, 0, [1])
        assert c.partition(name, 0).elr == (2, 3)
    # another config of the topic leaves them
    c.alter_configs(TOPIC_RESOURCE, "t", [("retention.ms", SET, "1000")])
    assert c.partition("t", 0).elr == (2, 3)
    before = c.partition("t", 0)
    c.alter_configs(TOPIC_RESOURCE, "t", [("min.insync.replicas", SET, "1")])
    after = c.partition("t", 0)
    assert (after.elr, after.isr, after.leader) == ((), (1,), 1)
    assert after.partition_epoch == before.partition_epoch + 1
    assert c.partition("u", 0).elr == (2, 3)  # another topic's stay
    # the topic's min.insync.replicas is what the rules read from then on
    c.alter_configs(TOPIC_RESOURCE, "u", [("min.insync.replicas", SET, "3")])
    assert c.partition("u", 0).elr == ()
    alter_partition(c, 1, "u", 0, [1, 2])
    assert c.partition("u", 0).elr == ()  # 3, cleared, is not eligible again by itself
    alter_partition(c, 1, "u", 0, [1])
    assert c.partition("u", 0).elr == (2,)  # below three, 2 leaves into the ELR
    assert c.standby_image() == c.image


def test_min_insync_replicas_is_capped_at_the_replica_count():
    c = Cluster(settings(auto_leader_rebalance_enable=False, min_insync_replicas=3))
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    alter_partition(c, 1, "t", 0, [1, 2])
    assert c.partition("t", 0).elr == ()  # two members reach min(3, 2)
    alter_partition(c, 1, "t", 0, [1])
    assert c.partition("t", 0).elr == (2,)


def test_heartbeat_with_an_unknown_broker_or_a_stale_epoch_is_refused():
    c = Cluster()
    c.register(1)
    assert c.heartbeat(5, epoch=0)["error_code"] == ErrorCode.STALE_BROKER_EPOCH == 77
    response = c.heartbeat(1, epoch=c.image.brokers[1].epoch + 1)
    assert response["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert c.image.brokers[1].fenced


def test_a_broker_is_unfenced_once_caught_up_and_not_asking_to_stay_fenced():
    c = Cluster()
    c.register(1)
    epoch = c.image.brokers[1].epoch
    behind = c.heartbeat(1, offset=epoch - 1)
    assert behind == {"error_code": 0, "is_caught_up": False, "is_fenced": True,
                      "should_shut_down": False}
    assert c.heartbeat(1, want_fence=True)["is_fenced"] is True
    assert c.image.brokers[1].fenced
    result = c.controller.broker_heartbeat(wire(BrokerHeartbeatRequest, 0, {
        "broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": epoch,
        "want_fence": False, "want_shut_down": False}), c.now)
    assert [r[0] for r in result.records] == [T.UNFENCE_BROKER_RECORD]
    assert result.response == {"error_code": 0, "is_caught_up": True, "is_fenced": False,
                               "should_shut_down": False}
    c.apply(result)
    assert not c.image.brokers[1].fenced
    # a later heartbeat changes nothing
    again = c.controller.broker_heartbeat(wire(BrokerHeartbeatRequest, 0, {
        "broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": c.offset,
        "want_fence": False, "want_shut_down": False}), c.now)
    assert again.records == () and again.response["is_fenced"] is False


def test_an_unfenced_broker_asking_to_be_fenced_is_fenced_and_loses_leadership():
    c = Cluster()
    c.start(1, 2)
    c.create("t", 2, 2)
    assert c.heartbeat(1, want_fence=True)["is_fenced"] is True
    assert c.image.brokers[1].fenced
    assert set(leaders(c, "t").values()) == {2}


def test_heartbeats_keep_the_session_and_expiry_fences_moving_leadership():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 3, 3)
    start = c.now
    assert c.controller.next_deadline() == start + SESSION
    c.now = start + SESSION - 1
    for b in (1, 2):
        c.heartbeat(b)
    assert c.controller.next_deadline() == start + SESSION  # broker 3's
    assert c.tick(start + SESSION - 1) == []
    assert c.tick(start + SESSION) == [None]
    assert c.image.brokers[3].fenced and not c.image.brokers[1].fenced
    for p in c.image.partitions("t").values():
        assert p.leader in (1, 2)
        assert 3 not in p.isr
    assert c.standby_image() == c.image
    assert c.controller.next_deadline() == start + 2 * SESSION - 1
    assert c.tick(start + SESSION + 1) == []  # a fenced broker is not fenced again


def test_fencing_every_isr_member_leaves_the_partition_offline_the_last_one_eligible():
    c = Cluster()
    c.start(1, 2)
    c.create("t", 1, 2)
    first, second = c.partition("t", 0).replicas
    c.heartbeat(first, want_fence=True)
    assert c.partition("t", 0).leader == second and c.partition("t", 0).isr == (second,)
    c.heartbeat(second, want_fence=True)
    offline = c.partition("t", 0)
    # the last member leaves the ISR for the ELR (KIP-966), and is the last known leader
    assert (offline.leader, offline.isr, offline.elr, offline.last_known_elr) == \
        (NO_LEADER, (), (second,), (second,))
    # the first broker comes back: it is in neither, so the partition stays offline
    c.heartbeat(first)
    assert c.partition("t", 0).leader == NO_LEADER
    # the eligible replica comes back and leads again at once (handleBrokerUnfenced)
    epoch_before = c.partition("t", 0).leader_epoch
    c.heartbeat(second)
    back = c.partition("t", 0)
    assert back.leader == second and back.leader_epoch == epoch_before + 1
    assert (back.isr, back.elr, back.last_known_elr) == ((second,), (), ())
    assert back.leader_recovery_state == LeaderRecoveryState.RECOVERED
    assert c.standby_image() == c.image


def test_a_restarted_broker_recovers_its_offline_partitions_after_registering_again():
    c = Cluster()
    c.start(1)
    c.create("t", 2, 1)
    c.tick(c.now + SESSION)
    assert set(leaders(c, "t").values()) == {NO_LEADER}
    assert c.register(1, generation=1)["error_code"] == 0
    assert set(leaders(c, "t").values()) == {NO_LEADER}  # still fenced
    assert c.heartbeat(1)["is_fenced"] is False
    assert set(leaders(c, "t").values()) == {1}


def test_controlled_shutdown_moves_leadership_then_lets_the_broker_go():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 6, 3)
    first = c.heartbeat(2, want_shut_down=True)
    assert first == {"error_code": 0, "is_caught_up": True, "is_fenced": False,
                     "should_shut_down": False}
    assert c.image.brokers[2].in_controlled_shutdown
    assert 2 not in c.image.active_broker_ids()
    for p in c.image.partitions("t").values():
        assert p.leader != 2 and 2 not in p.isr
    # brokers 1 and 3 have not yet replayed the entry that made them the leaders
    assert c.heartbeat(2, want_shut_down=True)["should_shut_down"] is False
    c.heartbeat(1)
    assert c.heartbeat(2, want_shut_down=True)["should_shut_down"] is False
    c.heartbeat(3)
    second = c.heartbeat(2, want_shut_down=True)
    assert second["should_shut_down"] is True and second["is_fenced"] is True
    assert c.image.brokers[2].fenced
    assert c.standby_image().brokers == c.image.brokers
    # told to go, it is never unfenced again by this registration
    late = c.heartbeat(2)
    assert late["should_shut_down"] is True and late["is_fenced"] is True
    assert c.image.brokers[2].fenced


def test_controlled_shutdown_of_the_only_isr_member_takes_the_partition_offline():
    c = Cluster()
    c.start(1)
    c.create("t", 1, 1)
    assert c.heartbeat(1, want_shut_down=True)["should_shut_down"] is False
    assert c.partition("t", 0).leader == NO_LEADER
    assert (c.partition("t", 0).isr, c.partition("t", 0).elr) == ((), (1,))
    assert c.heartbeat(1, want_shut_down=True)["should_shut_down"] is True


def test_a_fenced_broker_asking_to_shut_down_may_go_at_once():
    c = Cluster()
    c.register(1)
    response = c.heartbeat(1, offset=0, want_shut_down=True)
    assert response["should_shut_down"] is True and response["is_fenced"] is True


def unregister(c: Cluster, broker_id: int) -> Any:
    body = wire(UnregisterBrokerRequest, 0, {"broker_id": broker_id})
    result = c.controller.unregister_broker(body, c.now)
    return result, c.apply(result)


def test_unregister_removes_the_registration_after_the_isrs_and_leaderships():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 3, 2)
    held = {p for p in range(3) if 1 in c.partition("t", p).replicas}
    epoch = c.image.brokers[1].epoch
    result, response = unregister(c, 1)
    assert response["error_code"] == 0
    # Kafka's order: every partition change first, the UnregisterBrokerRecord last
    assert [t for t, _, _ in result.records][-1] == T.UNREGISTER_BROKER_RECORD
    assert dict(result.records[-1][2]) == {"broker_id": 1, "broker_epoch": epoch}
    assert 1 not in c.image.brokers
    for p in range(3):
        partition = c.partition("t", p)
        assert 1 not in partition.isr and 1 not in partition.elr and partition.leader != 1
        assert partition.leader != NO_LEADER
    # the replicas still name it: moving them away is a reassignment's job
    assert {p for p in range(3) if 1 in c.partition("t", p).replicas} == held
    # a standby replaying the log and a snapshot agree
    assert MetadataImage.EMPTY.replay(c.log) == c.image
    assert load_snapshot(encode_snapshot(c.image))[0] == c.image


def test_unregistering_an_unknown_broker_answers_its_code_and_changes_nothing():
    c = Cluster()
    c.start(1, 2)
    before = c.image
    result, response = unregister(c, 9)
    assert response["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert result.records == () and c.image == before
    unregister(c, 2)
    again, response = unregister(c, 2)  # twice: the second finds nothing
    assert response["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED and again.records == ()


def test_an_unregistered_broker_is_placed_nowhere_and_may_register_again():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("old", 1, 3)
    epoch = c.image.brokers[3].epoch
    unregister(c, 3)
    # a broker still running learns at its next heartbeat, and registers again
    assert c.heartbeat(3, epoch=epoch)["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    created = c.create("t", 4, 2)
    assert created["error_code"] == 0
    assert all(3 not in c.partition("t", p).replicas for p in range(4))
    assert c.create("three", 1, 3)["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert c.register(3, generation=1)["error_code"] == 0
    assert c.heartbeat(3)["is_fenced"] is False
    # the partition that still names it is its again, to catch up and rejoin the ISR
    assert 3 in c.partition("old", 0).replicas and 3 not in c.partition("old", 0).isr


# --- CreateTopics ---------------------------------------------------------------------------


def test_leaders_are_spread_evenly():
    c = Cluster()
    c.start(1, 2, 3)
    out = c.create("t", 6, 3)
    assert out["error_code"] == 0 and (out["num_partitions"], out["replication_factor"]) == (6, 3)
    assert Counter(leaders(c, "t").values()) == {1: 2, 2: 2, 3: 2}
    for p in c.image.partitions("t").values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert c.topic_id("t") == out["topic_id"]


def test_placement_start_comes_from_the_injected_rng():
    firsts = set()
    for seed in range(12):
        c = Cluster(seed=seed)
        c.start(1, 2, 3)
        c.create("t", 1, 1)
        firsts.add(c.partition("t", 0).leader)
    assert firsts == {1, 2, 3}
    a, b = Cluster(seed=3), Cluster(seed=3)
    for c in (a, b):
        c.start(1, 2, 3)
        c.create("t", 4, 2)
    assert a.image.topic("t") == b.image.topic("t")


def test_replication_factor_above_the_unfenced_brokers_is_refused():
    c = Cluster()
    c.start(1, 2)
    c.register(3)  # registered but fenced: it does not count
    out = c.create("t", 1, 3)
    assert out["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert out["error_message"].startswith(
        "Unable to replicate the partition 3 time(s): the target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered")
    assert c.image.topic("t") is None
    assert c.create("z", 1, 0)["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR


def test_defaults_apply_for_minus_one():
    c = Cluster(settings(default_num_partitions=3, default_replication_factor=2))
    c.start(1, 2)
    out = c.create("t")
    assert (out["num_partitions"], out["replication_factor"]) == (3, 2)
    assert len(c.image.partitions("t")) == 3


@pytest.mark.parametrize("name, partitions, rf, code", [
    ("bad/name", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("t", 0, 1, ErrorCode.INVALID_PARTITIONS),
    ("t", -5, 1, ErrorCode.INVALID_PARTITIONS),
    ("t", 10_001, 1, ErrorCode.INVALID_PARTITIONS),
])
def test_create_topics_refuses(name, partitions, rf, code):
    c = Cluster()
    c.start(1)
    out = c.create(name, partitions, rf)
    assert out["error_code"] == code and out["error_message"]
    assert (out["num_partitions"], out["replication_factor"]) == (-1, -1)
    assert c.image.topics_by_id == {}


def test_an_existing_topic_is_refused_and_validate_only_writes_nothing():
    c = Cluster()
    c.start(1)
    dry = c.create("t", 2, 1, validate_only=True)
    assert dry["error_code"] == 0 and dry["num_partitions"] == 2
    assert c.image.topic("t") is None
    assert c.create("t", 2, 1)["error_code"] == 0
    again = c.create("t", 2, 1)
    assert again["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert again["error_message"] == "Topic 't' already exists."


def test_a_topic_named_twice_in_one_request_is_refused_once():
    c = Cluster()
    c.start(1)
    body = wire(CreateTopicsRequest, 7, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1},
        {"name": "t", "num_partitions": 1, "replication_factor": 1},
        {"name": "u", "num_partitions": 1, "replication_factor": 1}]})
    topics = c.apply(c.controller.create_topics(body, c.now))["topics"]
    assert [(t["name"], t["error_code"]) for t in topics] == [
        ("t", ErrorCode.INVALID_REQUEST), ("u", 0)]


def test_topic_configs_are_validated_and_recorded():
    c = Cluster()
    c.start(1)
    bad = c.create("t", 1, 1, configs={"retention.ms": "soon"})
    assert bad["error_code"] == ErrorCode.INVALID_CONFIG
    unknown = c.create("t", 1, 1, configs={"no.such.config": "1"})
    assert unknown["error_code"] == ErrorCode.INVALID_CONFIG
    assert c.create("t", 1, 1, configs={"retention.ms": "1000",
                                        "cleanup.policy": "compact"})["error_code"] == 0
    assert dict(c.image.topic_configs("t")) == {"retention.ms": "1000",
                                                "cleanup.policy": "compact"}


def test_a_manual_assignment_is_honoured_and_checked():
    c = Cluster()
    c.start(1, 2, 3)
    out = c.create("t", assignments=[[3, 1], [2, 3]])
    assert out["error_code"] == 0 and (out["num_partitions"], out["replication_factor"]) == (2, 2)
    assert c.partition("t", 0).replicas == (3, 1) and c.partition("t", 0).leader == 3
    assert c.partition("t", 1).replicas == (2, 3) and c.partition("t", 1).leader == 2
    unknown = c.create("u", assignments=[[1, 9]])
    assert unknown["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    both = c.create("v", 1, -1, assignments=[[1]])
    assert both["error_code"] == ErrorCode.INVALID_REQUEST


def test_a_manual_assignment_naming_a_fenced_broker_keeps_it_out_of_the_isr():
    c = Cluster()
    c.start(1, 2)
    c.register(3)
    assert c.create("t", assignments=[[3, 1]])["error_code"] == 0
    p = c.partition("t", 0)
    assert p.replicas == (3, 1) and p.isr == (1,) and p.leader == 1


def test_the_offsets_topic_replication_factor_is_capped_by_the_voters():
    c = Cluster(settings(voters=(1, 2), offsets_topic_replication_factor=3))
    c.start(1, 2, 3)
    out = c.create("__consumer_offsets", 5, -1)
    assert out["error_code"] == 0 and out["replication_factor"] == 2
    assert all(len(p.replicas) == 2 for p in c.image.partitions("__consumer_offsets").values())
    # an explicit factor is taken as asked
    c2 = Cluster(settings(voters=(1,), offsets_topic_replication_factor=3))
    c2.start(1, 2)
    assert c2.create("__consumer_offsets", 1, 2)["replication_factor"] == 2


def test_placement_is_rack_aware_when_brokers_have_racks():
    c = Cluster()
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    c.start(*racks, racks=racks)
    c.create("t", 12, 3)
    for p in c.image.partitions("t").values():
        assert len({racks[b] for b in p.replicas}) == 3
    assert Counter(leaders(c, "t").values()) == {b: 2 for b in racks}


# --- DeleteTopics -----------------------------------------------------------------------


def test_delete_topics_by_name_and_by_id():
    c = Cluster()
    c.start(1)
    t_id = c.create("t", 1, 1)["topic_id"]
    c.create("u", 1, 1)
    c.create("__consumer_offsets", 1, 1)
    body = wire(DeleteTopicsRequest, 6, {"topics": [
        {"name": None, "topic_id": t_id},
        {"name": "u", "topic_id": uuid.UUID(int=0)},
        {"name": "gone", "topic_id": uuid.UUID(int=0)},
        {"name": None, "topic_id": uuid.UUID(int=42)},
        {"name": "__consumer_offsets", "topic_id": uuid.UUID(int=0)},
    ]})
    result = c.controller.delete_topics(body, c.now)
    assert [r[0] for r in result.records] == [T.REMOVE_TOPIC_RECORD] * 2
    responses = c.apply(result)["responses"]
    assert [(r["name"], r["error_code"]) for r in responses] == [
        ("t", 0), ("u", 0), ("gone", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (None, ErrorCode.UNKNOWN_TOPIC_ID), ("__consumer_offsets", ErrorCode.INVALID_REQUEST)]
    assert responses[0]["topic_id"] == t_id
    assert set(c.image.topic_ids_by_name) == {"__consumer_offsets"}


def test_delete_topics_by_name_before_v6():
    c = Cluster()
    c.start(1)
    c.create("t", 1, 1, configs={"retention.ms": "5"})
    body = wire(DeleteTopicsRequest, 5, {"topic_names": ["t", "t"], "timeout_ms": 1})
    responses = c.apply(c.controller.delete_topics(body, c.now))["responses"]
    assert [r["error_code"] for r in responses] == [0, ErrorCode.INVALID_REQUEST]
    assert c.image.topic("t") is None and dict(c.image.topic_configs("t")) == {}


def test_delete_topics_when_deletion_is_disabled():
    c = Cluster(settings(delete_topic_enable=False))
    c.start(1)
    c.create("t", 1, 1)
    body = wire(DeleteTopicsRequest, 5, {"topic_names": ["t"], "timeout_ms": 1})
    result = c.controller.delete_topics(body, c.now)
    assert result.records == ()
    assert result.response["responses"][0]["error_code"] == ErrorCode.TOPIC_DELETION_DISABLED


# --- CreatePartitions -------------------------------------------------------------------


def create_partitions(c: Cluster, topics: list[dict], validate_only: bool = False) -> list:
    body = wire(CreatePartitionsRequest, 3, {"topics": topics, "timeout_ms": 1,
                                             "validate_only": validate_only})
    return [(r["name"], r["error_code"])
            for r in c.apply(c.controller.create_partitions(body, c.now))["results"]]


def test_create_partitions_adds_placed_partitions_with_the_topics_replication_factor():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 3, 2)
    assert create_partitions(c, [{"name": "t", "count": 6, "assignments": None}]) == [("t", 0)]
    parts = c.image.partitions("t")
    assert sorted(parts) == list(range(6))
    assert all(len(p.replicas) == 2 and p.isr == p.replicas for p in parts.values())
    assert Counter(p.leader for p in parts.values()) == {1: 2, 2: 2, 3: 2}


def test_create_partitions_refusals_and_assignments():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 2, 2)
    assert create_partitions(c, [
        {"name": "t", "count": 1, "assignments": None},
        {"name": "nope", "count": 3, "assignments": None},
    ]) == [("t", ErrorCode.INVALID_PARTITIONS), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert create_partitions(c, [{"name": "t", "count": 2, "assignments": None}]) == [
        ("t", ErrorCode.INVALID_PARTITIONS)]
    assert create_partitions(c, [{"name": "t", "count": 4, "assignments": [
        {"broker_ids": [3, 1]}]}]) == [("t", ErrorCode.INVALID_REPLICA_ASSIGNMENT)]
    assert create_partitions(c, [{"name": "t", "count": 3, "assignments": [
        {"broker_ids": [3]}]}]) == [("t", ErrorCode.INVALID_REPLICA_ASSIGNMENT)]
    assert create_partitions(c, [{"name": "t", "count": 3, "assignments": [
        {"broker_ids": [3, 1]}]}], validate_only=True) == [("t", 0)]
    assert len(c.image.partitions("t")) == 2
    assert create_partitions(c, [{"name": "t", "count": 3, "assignments": [
        {"broker_ids": [3, 1]}]}]) == [("t", 0)]
    assert c.partition("t", 2).replicas == (3, 1)


# --- IncrementalAlterConfigs --------------------------------------------------------------


def test_incremental_alter_configs_on_a_topic():
    c = Cluster()
    c.start(1)
    c.create("t", 1, 1, configs={"retention.ms": "1000"})
    ok = c.alter_configs(TOPIC_RESOURCE, "t", [("retention.ms", DELETE, None),
                                              ("segment.bytes", SET, "1048576"),
                                              ("cleanup.policy", APPEND, "compact")])
    assert ok == {"error_code": 0, "error_message": None, "resource_type": TOPIC_RESOURCE,
                  "resource_name": "t"}
    assert dict(c.image.topic_configs("t")) == {"segment.bytes": "1048576",
                                                "cleanup.policy": "delete,compact"}
    c.alter_configs(TOPIC_RESOURCE, "t", [("cleanup.policy", SUBTRACT, "delete")])
    assert c.image.topic_configs("t")["cleanup.policy"] == "compact"
    before = c.image
    assert c.alter_configs(TOPIC_RESOURCE, "t", [("segment.bytes", SET, "7")],
                           validate_only=False)["error_code"] == ErrorCode.INVALID_CONFIG
    assert c.alter_configs(TOPIC_RESOURCE, "t", [("retention.ms", APPEND, "7")])[
        "error_code"] == ErrorCode.INVALID_CONFIG
    assert c.alter_configs(TOPIC_RESOURCE, "t", [("nope", SET, "7")])[
        "error_code"] == ErrorCode.INVALID_CONFIG
    assert c.alter_configs(TOPIC_RESOURCE, "t", [("retention.ms", 9, "7")])[
        "error_code"] == ErrorCode.INVALID_REQUEST
    assert c.alter_configs(TOPIC_RESOURCE, "t", [("retention.ms", SET, "7")],
                           validate_only=True)["error_code"] == 0
    assert c.image is before
    assert c.alter_configs(TOPIC_RESOURCE, "missing", [("retention.ms", SET, "7")])[
        "error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_unchanged_value_writes_no_record():
    c = Cluster()
    c.start(1)
    c.create("t", 1, 1, configs={"retention.ms": "1000"})
    body = Container(resources=[Container(resource_type=TOPIC_RESOURCE, resource_name="t",
                                          configs=[Container(name="retention.ms",
                                                             config_operation=SET,
                                                             value="1000")])],
                     validate_only=False)
    result = c.controller.incremental_alter_configs(body, c.now)
    assert result.records == () and result.response["responses"][0]["error_code"] == 0


def test_broker_configs_are_stored_as_config_records():
    c = Cluster()
    c.start(1)
    assert c.alter_configs(BROKER_RESOURCE, "1", [("log.retention.ms", SET, "5000")])[
        "error_code"] == 0
    assert c.alter_configs(BROKER_RESOURCE, "", [("log.retention.ms", SET, "6000")])[
        "error_code"] == 0
    assert c.image.broker_configs(1)["log.retention.ms"] == "5000"
    assert c.image.broker_configs("")["log.retention.ms"] == "6000"
    assert c.alter_configs(BROKER_RESOURCE, "x", [("log.retention.ms", SET, "1")])[
        "error_code"] == ErrorCode.INVALID_REQUEST
    assert c.alter_configs(BROKER_RESOURCE, "1", [("log.retention.ms", SET, "x")])[
        "error_code"] == ErrorCode.INVALID_CONFIG
    assert c.alter_configs(7, "g", [("a", SET, "1")])["error_code"] == ErrorCode.INVALID_REQUEST


# --- elections ----------------------------------------------------------------------------


def test_a_preferred_leader_out_of_the_isr_is_not_available():
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2, 3)
    c.create("t", 3, 3)
    preferred = {pid: p.replicas[0] for pid, p in c.image.partitions("t").items()}
    pid = next(p for p, b in preferred.items() if b == 1)
    c.heartbeat(1, want_fence=True)
    moved = c.partition("t", pid)
    assert moved.leader != 1 and 1 not in moved.isr
    c.heartbeat(1)
    # broker 1 is not in the ISR: it cannot be elected
    assert c.elect(0, {"t": [pid]}) == {("t", pid): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}


def test_preferred_election_when_the_preferred_leader_is_in_the_isr():
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2, 3)
    c.create("t", 3, 3)
    pid = next(p for p, part in c.image.partitions("t").items() if part.replicas[0] == 1)
    change = c.controller.elect_leaders(wire(ElectLeadersRequest, 2, {
        "election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [pid]}]}), c.now)
    assert change.records == ()
    assert change.response["replica_election_results"][0]["partition_result"][0][
        "error_code"] == ErrorCode.ELECTION_NOT_NEEDED
    # move leadership away by hand, the way a PartitionChangeRecord from elsewhere would
    before = c.partition("t", pid)
    other = before.replicas[1]
    c.controller.replay([decode_metadata_record(encode_metadata_record(
        T.PARTITION_CHANGE_RECORD, 0, {"topic_id": c.topic_id("t"),
                                       "partition_id": pid, "leader": other}))])
    assert c.partition("t", pid).leader == other
    assert c.elect(0, {"t": [pid, 99], "nope": [0]}) == {
        ("t", pid): 0, ("t", 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    after = c.partition("t", pid)
    assert after.leader == 1
    assert after.leader_epoch == before.leader_epoch + 2
    assert after.partition_epoch == before.partition_epoch + 2


def test_preferred_election_of_all_partitions_reports_only_those_that_needed_one():
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2)
    c.create("t", 2, 2)
    assert c.elect(0, None) == {}
    pid = next(p for p, part in c.image.partitions("t").items() if part.replicas[0] == 1)
    c.controller.replay([decode_metadata_record(encode_metadata_record(
        T.PARTITION_CHANGE_RECORD, 0, {"topic_id": c.topic_id("t"),
                                       "partition_id": pid, "leader": 2}))])
    assert c.elect(0, None) == {("t", pid): 0}
    assert c.partition("t", pid).leader == 1


def unclean_setup(c: Cluster) -> None:
    """Topic t, one partition on brokers 1 and 2, offline with ISR [first] while the
    other replica is alive but out of the ISR."""
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    c.heartbeat(2, want_fence=True)
    c.heartbeat(2)  # back, but not in the ISR
    c.heartbeat(1, want_fence=True)


def test_unclean_election_by_request():
    c = Cluster()
    unclean_setup(c)
    offline = c.partition("t", 0)
    assert (offline.leader, offline.isr, offline.elr) == (NO_LEADER, (), (1,))
    assert c.elect(1, {"t": [0]}) == {("t", 0): 0}
    p = c.partition("t", 0)
    assert p.leader == 2 and p.isr == (2,) and p.elr == ()
    assert p.leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert c.elect(1, {"t": [0]}) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}


def test_unclean_election_without_a_live_replica():
    c = Cluster()
    c.start(1)
    c.create("t", 1, 1)
    c.heartbeat(1, want_fence=True)
    assert c.elect(1, {"t": [0]}) == {("t", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}


def test_the_topic_config_overrides_the_unclean_setting():
    c = Cluster()
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]], configs={"unclean.leader.election.enable": "true"})
    c.heartbeat(2, want_fence=True)
    c.heartbeat(2)
    c.heartbeat(1, want_fence=True)
    assert c.partition("t", 0).leader == 2  # elected uncleanly at the fence

    d = Cluster(settings(unclean_leader_election_enable=True))
    d.start(1, 2)
    d.create("t", assignments=[[1, 2]], configs={"unclean.leader.election.enable": "false"})
    d.heartbeat(2, want_fence=True)
    d.heartbeat(2)
    d.heartbeat(1, want_fence=True)
    assert d.partition("t", 0).leader == NO_LEADER


def test_enabling_unclean_election_on_a_topic_elects_its_offline_partitions():
    c = Cluster()
    unclean_setup(c)
    assert c.partition("t", 0).leader == NO_LEADER
    c.alter_configs(TOPIC_RESOURCE, "t", [("unclean.leader.election.enable", SET, "true")])
    assert c.partition("t", 0).leader == 2


def test_auto_rebalance_gives_the_preferred_leaders_back():
    c = Cluster(settings(leader_imbalance_check_interval_ms=1000))
    c.start(1, 2, 3)
    c.create("t", 6, 3)
    preferred = {pid: p.replicas[0] for pid, p in c.image.partitions("t").items()}
    topic_id = c.topic_id("t")
    # leadership moved off broker 1 while it stayed in the ISR (as after it restarted and
    # caught up): the partitions it prefers are led by their second replica
    for pid, b in preferred.items():
        if b == 1:
            c.controller.replay([decode_metadata_record(encode_metadata_record(
                T.PARTITION_CHANGE_RECORD, 0, {"topic_id": topic_id, "partition_id": pid,
                                               "leader": c.partition("t", pid).replicas[1]}))])
    assert leaders(c, "t") != preferred
    deadline = c.controller.next_deadline()
    assert deadline == 2_000
    assert c.tick(deadline - 1) == []
    assert c.tick(deadline) == [None]
    assert leaders(c, "t") == preferred
    assert c.controller.next_deadline() == 3_000
    assert c.tick(3_000) == []  # balanced: nothing to write


def test_an_idle_controller_writes_a_no_op_record_every_idle_interval():
    c = Cluster(settings(max_idle_interval_ms=500, auto_leader_rebalance_enable=False))
    assert c.controller.next_deadline() == 1_500
    assert c.tick(1_499) == []
    before, offset = c.image, c.offset
    assert c.tick(1_500) == [None]
    assert c.log[-1] == (T.NO_OP_RECORD, 0, {}) and c.offset == offset + 1
    assert c.image == before  # a NoOpRecord changes nothing
    assert c.controller.next_deadline() == 2_000
    # written whatever else was written meanwhile, as Kafka's periodic task
    c.start(1)
    assert c.tick(2_000) == [None] and c.log[-1][0] == T.NO_OP_RECORD
    # a standby writes none; nor does a controller configured with 0
    c.controller.reset(c.image)
    assert c.controller.next_deadline() == NO_DEADLINE
    off = Cluster(settings(auto_leader_rebalance_enable=False))
    assert off.controller.next_deadline() == NO_DEADLINE


def test_auto_rebalance_respects_the_percentage_and_the_switch():
    cases: list[tuple[dict[str, Any], bool]] = [
        ({"leader_imbalance_per_broker_percentage": 50}, False),
        ({"leader_imbalance_per_broker_percentage": 49}, True),
        ({"auto_leader_rebalance_enable": False}, False)]
    for kw, moves in cases:
        c = Cluster(settings(leader_imbalance_check_interval_ms=1000, **kw))
        c.start(1, 2, 3)
        c.create("t", 6, 3)
        topic_id = c.topic_id("t")
        pid = next(p for p, part in c.image.partitions("t").items() if part.replicas[0] == 1)
        c.controller.replay([decode_metadata_record(encode_metadata_record(
            T.PARTITION_CHANGE_RECORD, 0, {"topic_id": topic_id, "partition_id": pid,
                                           "leader": c.partition("t", pid).replicas[1]}))])
        # broker 1 prefers 2 partitions and leads 1: an imbalance of 50%
        c.now = 2_000
        for b in (1, 2, 3):
            c.heartbeat(b)
        c.tick(2_000)
        assert (c.partition("t", pid).leader == 1) is moves, kw


# --- producer ids, migration, replay ----------------------------------------------------


def test_producer_id_blocks_follow_each_other():
    c = Cluster(settings(producer_id_block_size=10))
    c.start(1)
    epoch = c.image.brokers[1].epoch
    first = c.apply(c.controller.allocate_producer_ids(1, epoch))
    second = c.apply(c.controller.allocate_producer_ids(1, epoch))
    assert (first["error_code"], first["producer_id_start"], first["producer_id_len"]) == (
        0, 0, 10)
    assert second["producer_id_start"] == 10
    assert c.image.next_producer_id == 20
    stale = c.controller.allocate_producer_ids(1, epoch + 1)
    assert stale.records == () and stale.response["error_code"] == ErrorCode.STALE_BROKER_EPOCH


def test_legacy_topics_are_migrated_once():
    topic_id = uuid.UUID(int=77)
    legacy = LegacyMetadata(topics=(LegacyTopic("orders", topic_id, 3, {
        "retention.ms": 1000, "cleanup.policy": ("compact",)}),), producer_id_limit=5000)
    c = Cluster(settings(node_id=4, voters=(4,)), legacy=legacy)
    topic = c.image.topic("orders")
    assert topic is not None
    assert topic.topic_id == topic_id and sorted(topic.partitions) == [0, 1, 2]
    for p in topic.partitions.values():
        assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((4,), (4,), 4, 0)
    assert dict(c.image.topic_configs("orders")) == {"retention.ms": "1000",
                                                     "cleanup.policy": "compact"}
    assert c.image.next_producer_id == 5000
    assert c.controller.activate(c.now, legacy) is None  # topics exist: not again
    # the node registers, and leads its old partitions once unfenced
    c.start(4)
    assert set(leaders(c, "orders").values()) == {4}
    assert c.apply(c.controller.allocate_producer_ids(4, c.image.brokers[4].epoch))[
        "producer_id_start"] == 5000


def test_a_standby_replaying_the_log_reaches_the_same_image():
    c = Cluster()
    c.start(1, 2, 3)
    c.create("t", 4, 3, configs={"retention.ms": "9"})
    c.create("u", 2, 2)
    c.heartbeat(2, want_shut_down=True)
    c.tick(c.now + SESSION)
    c.apply(c.controller.allocate_producer_ids(1, c.image.brokers[1].epoch))
    standby = c.standby_image()
    assert standby == c.image


# --- AlterPartition -----------------------------------------------------------------------


def alter_partition(c: Cluster, leader: int, name: str, pid: int, isr: list[int], *,
                    leader_epoch: int | None = None, partition_epoch: int | None = None,
                    epochs: dict[int, int] | None = None, by_id: bool = True,
                    recovery: int = 0, broker_epoch: int | None = None) -> dict:
    p = c.image.partition(name, pid)
    topic = c.image.topic(name)
    member = [Container(broker_id=b, broker_epoch=e) for b, e in (epochs or {}).items()]
    body = Container(
        broker_id=leader,
        broker_epoch=c.image.brokers[leader].epoch if broker_epoch is None else broker_epoch,
        topics=[Container(
            topic_name=None if by_id else name,
            topic_id=(topic.topic_id if topic else uuid.UUID(int=9)) if by_id else None,
            partitions=[Container(
                partition_index=pid,
                leader_epoch=p.leader_epoch if leader_epoch is None and p else leader_epoch,
                partition_epoch=(p.partition_epoch if partition_epoch is None and p
                                 else partition_epoch),
                new_isr=isr, new_isr_with_epochs=member, leader_recovery_state=recovery)])])
    response = c.apply(c.controller.alter_partition(body, c.now))
    if response["error_code"]:
        return response
    return response["topics"][0]["partitions"][0]


def test_alter_partition_shrinks_and_expands_the_isr():
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2, 3)
    c.create("t", assignments=[[1, 2, 3]])
    shrunk = alter_partition(c, 1, "t", 0, [1, 2])
    assert shrunk == {"partition_index": 0, "error_code": 0, "leader_id": 1,
                      "leader_epoch": 0, "isr": [1, 2], "partition_epoch": 1,
                      "leader_recovery_state": 0}
    assert c.partition("t", 0).isr == (1, 2)
    # nothing changes: no record, the same answer
    again = c.controller.alter_partition(Container(
        broker_id=1, broker_epoch=c.image.brokers[1].epoch, topics=[Container(
            topic_name="t", topic_id=None, partitions=[Container(
                partition_index=0, leader_epoch=0, partition_epoch=1, new_isr=[1, 2],
                leader_recovery_state=0)])]), c.now)
    assert again.records == () and again.response["topics"][0]["partitions"][0]["isr"] == [1, 2]
    c.heartbeat(3, want_fence=True)
    assert alter_partition(c, 1, "t", 0, [1, 2, 3])["error_code"] == ErrorCode.INELIGIBLE_REPLICA
    c.heartbeat(3)
    assert alter_partition(c, 1, "t", 0, [1, 2, 3], epochs={
        1: c.image.brokers[1].epoch, 2: c.image.brokers[2].epoch,
        3: c.image.brokers[3].epoch - 1})["error_code"] == ErrorCode.INELIGIBLE_REPLICA
    expanded = alter_partition(c, 1, "t", 0, [1, 2, 3], by_id=False)
    assert expanded["error_code"] == 0 and expanded["isr"] == [1, 2, 3]
    assert c.standby_image() == c.image


def test_alter_partition_skips_the_epoch_check_for_an_unknown_broker_epoch():
    """KIP-903: -1 means the leader does not know the follower's epoch (its fetches carry
    no ReplicaState); the replica must still be registered and unfenced."""
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2, 3)
    c.create("t", assignments=[[1, 2, 3]])
    alter_partition(c, 1, "t", 0, [1, 2])
    unknown = {1: c.image.brokers[1].epoch, 2: c.image.brokers[2].epoch, 3: -1}
    c.heartbeat(3, want_fence=True)
    assert alter_partition(c, 1, "t", 0, [1, 2, 3], epochs=unknown)["error_code"] == (
        ErrorCode.INELIGIBLE_REPLICA)
    c.heartbeat(3)
    expanded = alter_partition(c, 1, "t", 0, [1, 2, 3], epochs=unknown)
    assert expanded["error_code"] == 0 and expanded["isr"] == [1, 2, 3]


def test_alter_partition_refusals():
    c = Cluster()
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    assert alter_partition(c, 1, "t", 0, [1], leader_epoch=5)["error_code"] == \
        ErrorCode.FENCED_LEADER_EPOCH
    assert alter_partition(c, 1, "t", 0, [1], partition_epoch=5)["error_code"] == \
        ErrorCode.INVALID_UPDATE_VERSION
    assert alter_partition(c, 2, "t", 0, [2])["error_code"] == ErrorCode.INVALID_REQUEST
    assert alter_partition(c, 1, "t", 0, [1, 7])["error_code"] == ErrorCode.INVALID_REQUEST
    assert alter_partition(c, 1, "t", 0, [1], broker_epoch=-5)["error_code"] == \
        ErrorCode.STALE_BROKER_EPOCH
    c.create("u", 1, 1)
    gone = c.controller.alter_partition(Container(
        broker_id=1, broker_epoch=c.image.brokers[1].epoch, topics=[
            Container(topic_name=None, topic_id=uuid.UUID(int=9), partitions=[
                Container(partition_index=0, leader_epoch=0, partition_epoch=0,
                          new_isr=[1], leader_recovery_state=0)]),
            Container(topic_name="nope", topic_id=None, partitions=[
                Container(partition_index=0, leader_epoch=0, partition_epoch=0,
                          new_isr=[1], leader_recovery_state=0)])]), c.now)
    assert [t["partitions"][0]["error_code"] for t in gone.response["topics"]] == [
        ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert c.partition("t", 0).isr == (1, 2)


def test_a_leader_dropping_itself_from_the_isr_hands_over_leadership():
    c = Cluster()
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    out = alter_partition(c, 1, "t", 0, [2])
    assert out["error_code"] == ErrorCode.NEW_LEADER_ELECTED and out["leader_id"] == 2


def test_an_unclean_leader_recovers_by_expanding_its_isr():
    c = Cluster()
    unclean_setup(c)
    c.elect(1, {"t": [0]})
    assert c.partition("t", 0).leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert alter_partition(c, 2, "t", 0, [2, 1])["error_code"] == \
        ErrorCode.INELIGIBLE_REPLICA  # broker 1 is fenced
    c.heartbeat(1)
    # a recovering leader may not expand its ISR and stay recovering
    assert alter_partition(c, 2, "t", 0, [2, 1], recovery=1)["error_code"] == \
        ErrorCode.INVALID_REQUEST
    out = alter_partition(c, 2, "t", 0, [2, 1], recovery=0)
    assert out["error_code"] == 0 and out["leader_recovery_state"] == 0
    assert c.partition("t", 0).leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_preferred_election_after_the_preferred_replica_rejoins_the_isr():
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2)
    c.create("t", assignments=[[1, 2]])
    c.heartbeat(1, want_fence=True)
    c.heartbeat(1)
    before = c.partition("t", 0)
    assert before.leader == 2 and before.isr == (2,)
    assert c.elect(0, {"t": [0]}) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    alter_partition(c, 2, "t", 0, [2, 1])
    assert c.elect(0, {"t": [0]}) == {("t", 0): 0}
    after = c.partition("t", 0)
    assert after.leader == 1 and after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 2


# --- invariants under random operations ---------------------------------------------------


def check_invariants(c: Cluster) -> None:
    active = c.image.active_broker_ids()
    for topic in c.image.topics_by_id.values():
        for pid, p in topic.partitions.items():
            where = f"{topic.name}-{pid} {p}"
            assert set(p.isr) <= set(p.replicas) and set(p.elr) <= set(p.replicas), where
            assert not set(p.isr) & set(p.elr), where
            if p.leader == NO_LEADER:
                # offline only while no ISR member, nor with the ISR empty an ELR member,
                # may lead
                assert not set(p.isr) & active, where
                assert p.isr or not set(p.elr) & active, where
            else:
                assert p.leader in p.isr and p.leader in active, where
            # min.insync.replicas is 1: the ELR is kept only while the ISR is empty
            assert not p.elr or not p.isr, where
            # a broker that may not lead leaves the ISRs
            assert all(r in active for r in p.isr), where
    assert c.standby_image() == c.image


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_keep_the_partition_invariants(seed):
    rnd = random.Random(seed)
    c = Cluster(settings(leader_imbalance_check_interval_ms=5_000), seed=seed)
    brokers = [1, 2, 3, 4]
    generation = dict.fromkeys(brokers, 0)
    c.start(*brokers)
    names = [f"t{i}" for i in range(4)]
    for _ in range(120):
        op = rnd.randrange(9)
        b = rnd.choice(brokers)
        registered = c.image.brokers.get(b)
        if op == 0:
            c.now += rnd.choice([1_000, 4_000, SESSION])
            c.tick(c.now)
        elif op == 1 and registered is not None:
            c.heartbeat(b, want_fence=rnd.random() < 0.2, want_shut_down=rnd.random() < 0.1)
        elif op == 2:
            previous = -1
            if registered is not None and rnd.random() < 0.5:
                generation[b] += 1
                if rnd.random() < 0.5:  # after a clean shutdown
                    previous = registered.epoch
            c.register(b, generation=generation[b], previous_epoch=previous)
        elif op == 3:
            c.create(rnd.choice(names), rnd.randint(1, 4), rnd.randint(1, 3))
        elif op == 4:
            c.apply(c.controller.delete_topics(wire(DeleteTopicsRequest, 5, {
                "topic_names": [rnd.choice(names)], "timeout_ms": 1}), c.now))
        elif op == 5:
            c.elect(rnd.randrange(2), None)
        elif op == 6:
            for name in names:
                for pid, p in c.image.partitions(name).items():
                    if p.leader == NO_LEADER:
                        continue
                    isr = [p.leader] + [r for r in p.replicas
                                        if r != p.leader and rnd.random() < 0.6]
                    alter_partition(c, p.leader, name, pid, isr)
        elif op == 7 and c.image.topic_ids_by_name:
            name = rnd.choice(sorted(c.image.topic_ids_by_name))
            create_partitions(c, [{"name": name, "count": len(c.image.partitions(name)) + 1,
                                   "assignments": None}])
        elif op == 8:
            for other in brokers:
                if other in c.image.brokers:
                    c.heartbeat(other)
        check_invariants(c)


def test_a_batch_applies_its_records_when_its_image_is_read_and_refuses_a_bad_one():
    """_Batch applies the records added since its image was last read in one replay: a read
    sees every one of them, and a record the image refuses fails the operation at the
    latest when its result is made."""
    from broker.controller.image import MetadataImageError
    from broker.controller.controller_result import Batch as _Batch
    topic_id = uuid.UUID(int=7)
    batch = _Batch(MetadataImage.EMPTY)
    batch.add(T.TOPIC_RECORD, 0, {"name": "orders", "topic_id": topic_id})
    for p in range(3):
        batch.add(T.PARTITION_RECORD, 0, {"partition_id": p, "topic_id": topic_id,
                                          "replicas": [1], "isr": [1], "leader": 1})
    batch.add(T.PARTITION_CHANGE_RECORD, 0, {"partition_id": 1, "topic_id": topic_id,
                                             "leader": NO_LEADER})
    topic = batch.image.topic("orders")
    assert topic is not None and sorted(topic.partitions) == [0, 1, 2]
    assert [topic.partitions[p].leader for p in range(3)] == [1, NO_LEADER, 1]
    assert [r[0] for r in batch.result(None).records] == [
        T.TOPIC_RECORD, *[T.PARTITION_RECORD] * 3, T.PARTITION_CHANGE_RECORD]
    batch.add(T.PARTITION_CHANGE_RECORD, 0, {"partition_id": 9, "topic_id": topic_id,
                                             "leader": 1})
    with pytest.raises(MetadataImageError):
        batch.result(None)
