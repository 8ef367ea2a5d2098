"""The coordinator's one map of groups and one timer service (broker/coordinator/
coordinator.py): classic and KIP-848 consumer groups side by side, a group changing type
once empty, timers of both protocols firing from one service, and a load that rebuilds
each group as the last of its records says, whichever type that is."""

from __future__ import annotations

import itertools
import uuid

from broker.coordinator.consumer_group import ConsumerGroup, HeartbeatRequest
from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.coordinator.group import ClassicGroup, GroupState
from broker.coordinator.membership import JoinRequest
from protocol.consumer_protocol import Subscription, encode_subscription
from protocol.errors import ErrorCode as E
from tests.broker.coordinator import test_membership as membership_tests

TOPIC_ID = uuid.UUID(int=7)


def _with_topics(c: GroupCoordinator) -> GroupCoordinator:
    c.topics = lambda: {"t": 2}
    c.topic_id = lambda name: TOPIC_ID if name == "t" else None
    c.topic_name = lambda topic_id: "t" if topic_id == TOPIC_ID else None
    return c


class Harness(membership_tests.Harness):
    """The classic tests' harness (it answers waiters and replays what is appended, keeping
    the records in order), for groups of both types and any id."""

    def __init__(self):
        super().__init__()
        _with_topics(self.c)
        ids = itertools.count(1)
        self.c.consumer_groups.new_member_id = lambda: f"cm-{next(ids)}"

    def classic_join(self, group: str, member_id: str = "") -> dict:
        waiter = object()
        protocols = [("range", encode_subscription(Subscription(["t"])))]
        self.apply(self.c.join(waiter, JoinRequest(group, member_id, None, 10_000, 30_000,
                                                   "consumer", protocols), self.now))
        self.advance(0)  # a join that waits does so for the (zero) initial delay
        return self.replies[waiter]

    def classic_member(self, group: str) -> str:
        """A classic member through JoinGroup and the leader's SyncGroup: Stable."""
        member_id = self.classic_join(group)["member_id"]
        body = self.classic_join(group, member_id)
        assert body["error_code"] == E.NONE, body
        waiter = object()
        self.apply(self.c.sync(waiter, group, body["generation_id"], member_id, None, None,
                               None, {member_id: b""}, self.now))
        assert self.replies[waiter]["error_code"] == E.NONE
        return member_id

    def classic_leave(self, group: str, member_id: str) -> None:
        self.apply(self.c.leave(object(), group, [(member_id, None)], self.now))

    def heartbeat(self, group: str, member_id: str = "", epoch: int = 0) -> dict:
        waiter = object()
        fields = dict(subscribed_topic_names=["t"], rebalance_timeout_ms=5000) if epoch == 0 \
            else {}
        self.apply(self.c.consumer_group_heartbeat(
            waiter, HeartbeatRequest(group, member_id, epoch, **fields), self.now))
        return self.replies[waiter]

    def reloaded(self) -> GroupCoordinator:
        """A coordinator that loads this one's log, as a new leader of the partition."""
        c = _with_topics(GroupCoordinator(CoordinatorConfig(num_partitions=1)))
        c.begin_load(0)
        for r in self.records:
            c.replay(r.key, r.value, self.now, loading=True)
        c.finish_load(0, self.now)
        return c


def test_both_types_live_in_one_map_and_are_listed_by_type():
    h = Harness()
    h.classic_member("old")
    assert h.heartbeat("new")["error_code"] == E.NONE
    assert isinstance(h.c.groups["old"], ClassicGroup)
    assert isinstance(h.c.groups["new"], ConsumerGroup)
    assert [(g["group_id"], g["group_type"], g["group_state"]) for g in h.c.list_groups()] == [
        ("new", "consumer", "Stable"), ("old", "classic", "Stable")]


def test_a_group_of_the_other_type_is_refused_with_kafkas_errors():
    h = Harness()
    h.classic_member("old")
    member = h.heartbeat("new")["member_id"]
    body = h.heartbeat("old")
    assert (body["error_code"], body["error_message"]) == (
        E.GROUP_ID_NOT_FOUND, "Group old is not a consumer group.")
    assert h.classic_join("new")["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.c.describe("new")["error_message"] == "Group new is not a classic group."
    assert h.c.consumer_group_describe("old")["error_message"] == \
        "Group old is not a consumer group."
    # the consumer group's commit rules, not the classic ones, for a consumer group
    assert h.c.commit_error("new", 1, member, None) == E.NONE
    assert h.c.commit_error("new", 0, member, None) == E.STALE_MEMBER_EPOCH


def test_an_empty_group_changes_type_in_place_and_back():
    h = Harness()
    h.classic_leave("g", h.classic_member("g"))
    assert h.c.groups["g"].is_empty
    consumer = h.heartbeat("g")["member_id"]
    assert isinstance(h.c.groups["g"], ConsumerGroup)
    h.heartbeat("g", consumer, epoch=-1)
    assert h.c.groups["g"].is_empty
    h.classic_member("g")
    assert isinstance(h.c.groups["g"], ClassicGroup)
    assert [g["group_type"] for g in h.c.list_groups()] == ["classic"]


def test_an_offset_commit_to_a_consumer_group_leaves_it_one():
    h = Harness()
    body = h.heartbeat("g")
    waiter = object()
    h.apply(h.c.commit(waiter, "g", body["member_epoch"], body["member_id"], None,
                       [("t", 0, 5, -1, None)], h.now))
    assert h.replies[waiter] == {("t", 0): E.NONE}
    assert isinstance(h.c.groups["g"], ConsumerGroup)
    assert [(g["group_type"], g["group_state"]) for g in h.c.list_groups()] == [
        ("consumer", "Stable")]


def test_one_timer_service_expires_the_members_of_both_types():
    h = Harness()
    classic = h.classic_member("old")
    consumer = h.heartbeat("new")["member_id"]
    assert len(h.c.timers) == 2  # one session deadline each, in the one service
    # the classic session (10 s) ends before the consumer one (45 s by default)
    assert h.c.next_deadline() == 10_000
    h.advance(10_000)
    assert classic not in h.c.groups["old"].members
    assert consumer in h.c.groups["new"].members
    h.advance(35_000)
    assert h.c.groups["new"].is_empty
    assert h.c.next_deadline() is None


def test_unloading_forgets_groups_and_timers_of_both_types():
    h = Harness()
    h.classic_member("old")
    h.heartbeat("new")
    h.apply(h.c.unload(0, h.now))
    assert h.c.groups == {} and h.c.next_deadline() is None


def test_a_load_rebuilds_each_group_as_its_last_records_say():
    h = Harness()
    # classic, then consumer: its classic records come first in the log
    h.classic_leave("up", h.classic_member("up"))
    up = h.heartbeat("up")["member_id"]
    # consumer, then classic
    down = h.heartbeat("down")["member_id"]
    h.heartbeat("down", down, epoch=-1)
    classic = h.classic_member("down")
    c = h.reloaded()
    assert isinstance(c.groups["up"], ConsumerGroup)
    assert list(c.groups["up"].members) == [up]
    assert isinstance(c.groups["down"], ClassicGroup)
    assert list(c.groups["down"].members) == [classic]
    assert c.groups["down"].state == GroupState.STABLE
    assert [(g["group_id"], g["group_type"]) for g in c.list_groups()] == [
        ("down", "classic"), ("up", "consumer")]
