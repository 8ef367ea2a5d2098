"""client.AdminClient against the real broker: topics, partitions, groups, typed errors,
retries."""

from __future__ import annotations

import pytest
import trio

from client import AdminClient, NewTopic, TopicPartition, errors
from client.admin import CreatedTopic, GroupDescription
from protocol.consumer_protocol import (
    Assignment, Subscription, encode_assignment, encode_subscription,
)
from protocol.errors import ErrorCode
from protocol.messages import JOIN_GROUP, SYNC_GROUP

SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
DEADLINE_S = 10


def test_unknown_config_key_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unknown admin config 'request_timeout_msec'"):
        AdminClient(bootstrap_servers="127.0.0.1:9092", request_timeout_msec=10)
    with pytest.raises(TypeError, match="'group_id'"):
        AdminClient(bootstrap_servers="127.0.0.1:9092", group_id="g")  # a consumer's


async def test_topic_round_trip(shared_broker):
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=shared_broker.bootstrap) as admin:
            created = await admin.create_topics({"rt-a": 3})
            assert list(created) == ["rt-a"]
            a = created["rt-a"]
            assert isinstance(a, CreatedTopic) and a.topic_id is not None
            assert (a.num_partitions, a.replication_factor) == (3, 1)
            created = await admin.create_topics([
                NewTopic("rt-b", 2, 1, configs={"cleanup.policy": "compact"}),
                "rt-c"])  # a bare name: the broker's defaults
            assert [(t.name, t.num_partitions) for t in created.values()] == [
                ("rt-b", 2), ("rt-c", 1)]

            listed = {t.name: t for t in await admin.list_topics()}
            assert {"rt-a", "rt-b", "rt-c"} <= set(listed)
            assert listed["rt-a"].num_partitions == 3
            assert listed["rt-a"].topic_id == a.topic_id
            assert not any(t.is_internal for t in listed.values())

            with pytest.raises(errors.TopicAlreadyExistsError, match="rt-a") as exc:
                await admin.create_topics({"rt-a": 1})
            assert exc.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
            assert not exc.value.retriable

            await admin.create_partitions({"rt-a": 5})
            described = await admin.describe_topics(["rt-a"])
            assert [p.partition for p in described["rt-a"].partitions] == [0, 1, 2, 3, 4]
            assert {p.leader for p in described["rt-a"].partitions} == {0}
            with pytest.raises(errors.InvalidPartitionsError):
                await admin.create_partitions({"rt-a": 2})

            await admin.delete_topics(["rt-a", "rt-b", "rt-c"])
            names = {t.name for t in await admin.list_topics()}
            assert not names & {"rt-a", "rt-b", "rt-c"}
            # UNKNOWN_TOPIC_OR_PARTITION is retriable for a producer, an answer here:
            # raised at once, not after default_api_timeout_ms of retries
            with trio.fail_after(2):
                with pytest.raises(errors.UnknownTopicOrPartitionError):
                    await admin.delete_topics(["rt-a"])
                with pytest.raises(errors.UnknownTopicOrPartitionError):
                    await admin.describe_topics(["rt-a"])


async def test_each_topic_succeeds_or_fails_on_its_own(shared_broker):
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=shared_broker.bootstrap) as admin:
            await admin.create_topics({"mix-old": 1})
            with pytest.raises(errors.TopicAlreadyExistsError, match="mix-old"):
                await admin.create_topics({"mix-new": 2, "mix-old": 1})
            with pytest.raises(errors.InvalidTopicError):
                await admin.create_topics({"bad/name": 1})
            listed = {t.name: t.num_partitions for t in await admin.list_topics()}
            assert listed["mix-new"] == 2 and "bad/name" not in listed
            with pytest.raises(errors.UnknownTopicOrPartitionError, match="mix-gone"):
                await admin.delete_topics(["mix-new", "mix-gone"])
            assert "mix-new" not in {t.name for t in await admin.list_topics()}
            created = await admin.create_topics({"mix-check": 1}, validate_only=True)
            assert created["mix-check"].num_partitions == 1
            assert "mix-check" not in {t.name for t in await admin.list_topics()}


async def _join_stable_group(admin: AdminClient, group_id: str, topic: str) -> str:
    """One member joins `group_id` over raw JoinGroup/SyncGroup and takes partition 0 of
    `topic`; returns its member id. The group stays Stable until its session times out."""
    node_id = next(iter((await admin.cluster.maybe_refresh()).brokers))
    conn = await admin.pool.get(node_id)
    join = {"group_id": group_id, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range",
                           "metadata": encode_subscription(Subscription([topic]))}]}
    resp = (await conn.request(JOIN_GROUP, join)).body
    if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        join["member_id"] = resp.member_id
        resp = (await conn.request(JOIN_GROUP, join)).body
    assert resp.error_code == 0, resp
    member = resp.member_id
    sync = {"group_id": group_id, "generation_id": resp.generation_id, "member_id": member,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member,
                             "assignment": encode_assignment(Assignment({topic: [0]}))}]}
    resp = (await conn.request(SYNC_GROUP, sync)).body
    assert resp.error_code == 0, resp
    return member


async def test_list_and_describe_groups(shared_broker):
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=shared_broker.bootstrap,
                               client_id="admin-test") as admin:
            # before the group exists (this also waits out the coordinator's first load)
            dead = (await admin.describe_groups(["billing"]))["billing"]
            assert (dead.state, dead.members) == ("Dead", ())

            await admin.create_topics({"invoices": 2})
            member = await _join_stable_group(admin, "billing", "invoices")

            listed = {g.group_id: g for g in await admin.list_groups()}
            assert listed["billing"].protocol_type == "consumer"
            assert listed["billing"].state == "Stable"

            described = await admin.describe_groups(["billing", "nobody"])
            assert list(described) == ["billing", "nobody"]
            g = described["billing"]
            assert isinstance(g, GroupDescription)
            assert (g.group_id, g.state, g.protocol_type, g.protocol, g.coordinator) == (
                "billing", "Stable", "consumer", "range", 0)
            [m] = g.members
            assert m.member_id == member and m.client_id == "admin-test"
            assert m.assignment == (TopicPartition("invoices", 0),)
            assert described["nobody"].state == "Dead"


async def test_retries_until_the_broker_is_back(broker):
    """A connection failure is retriable: the admin keeps trying (with backoff) through
    the outage, until default_api_timeout_ms."""
    await trio.to_thread.run_sync(broker.stop)
    async with AdminClient(bootstrap_servers=broker.bootstrap, retry_backoff_ms=20,
                           reconnect_backoff_ms=20, reconnect_backoff_max_ms=100) as admin:
        with trio.fail_after(5):
            with pytest.raises(errors.KafkaTimeoutError,
                               match=r"within 300 ms .*last error: .*cannot connect"):
                await admin.list_topics(timeout_ms=300)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, broker.start)
                assert await admin.list_topics() == []
            await admin.create_topics({"after-outage": 1})
            assert [t.name for t in await admin.list_topics()] == ["after-outage"]


async def test_describe_configs_tells_overrides_from_defaults(shared_broker):
    from client.admin import ConfigResource
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=shared_broker.bootstrap) as admin:
            await admin.create_topics([NewTopic("cfg-a", 1, 1, configs={
                "cleanup.policy": "compact", "retention.ms": "1234"})])
            resource = ConfigResource("topic", "cfg-a")
            configs = (await admin.describe_configs([resource]))[resource]
            overridden = {n: e.value for n, e in configs.items() if not e.is_default}
            assert overridden == {"cleanup.policy": "compact", "retention.ms": "1234"}
            assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
            assert configs["segment.bytes"].is_default and configs["segment.bytes"].value
            broker = ConfigResource("broker", "0")
            assert "num.partitions" in (await admin.describe_configs([broker]))[broker]
            missing = ConfigResource("topic", "cfg-never")
            with pytest.raises(errors.UnknownTopicOrPartitionError, match="cfg-never"):
                await admin.describe_configs([missing])
            await admin.delete_topics(["cfg-a"])


async def test_list_offsets_and_committed_offsets(shared_broker):
    from client import Producer
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=shared_broker.bootstrap) as admin:
            await admin.create_topics({"lo-a": 2})
            async with Producer(bootstrap_servers=shared_broker.bootstrap) as producer:
                for i in range(5):
                    await producer.send("lo-a", b"v", partition=i % 2)
                await producer.flush()
            tp0, tp1 = TopicPartition("lo-a", 0), TopicPartition("lo-a", 1)
            assert await admin.list_offsets({tp0: "latest", tp1: "latest"}) == {tp0: 3, tp1: 2}
            assert await admin.list_offsets({tp1: "earliest"}) == {tp1: 0}
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await admin.list_offsets({TopicPartition("lo-never", 0): "latest"})

            assert await admin.list_consumer_group_offsets("lo-nobody") == {}
            from client import Consumer
            async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                                group_id="lo-group", enable_auto_commit=False) as consumer:
                await consumer.commit({tp1: 2, tp0: 1})
            assert await admin.list_consumer_group_offsets("lo-group") == {tp0: 1, tp1: 2}
            await admin.delete_topics(["lo-a"])
