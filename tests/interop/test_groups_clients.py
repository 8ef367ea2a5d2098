"""Consumer groups with kafka-python and aiokafka against the real broker: subscribe, consume,
commit, close, and a new member of the same group resumes from the commits; and one group
mixing kafka-python and librdkafka members under the range assignor."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from broker.events import read_events
from tests.interop.group_helpers import (
    GroupMember, all_partitions, broker_assignment, describe_group, disjoint_cover, pump,
)
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop
SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0",
                           "group.min.session.timeout.ms": "1000"}
WAIT_S = 30
PARTITIONS = 3


def _produce(bootstrap: str, topic: str, tag: str, per_partition: int) -> set[bytes]:
    values = [(p, f"{tag}-{p}-{i}".encode())
              for p in range(PARTITIONS) for i in range(per_partition)]
    produce(bootstrap, topic, [(None, v, None, p) for p, v in values])
    return {v for _, v in values}


# -- kafka-python ---------------------------------------------------------------------------------

def _kp_consumer(bootstrap: str, group: str, topic: str, client_id: str, **extra) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=300,
                             max_poll_interval_ms=20000, **extra)
    consumer.subscribe([topic])
    # kafka-python builds its "metadata snapshot" of the subscription only from the next
    # metadata response after subscribe(). Joining before that makes a leader rejoin as soon
    # as the snapshot arrives (a second, client-made rebalance; with no commits the positions
    # restart at the beginning), and kafka-python 3.0.12 can strand that rejoin: if a poll()
    # times out between its JoinGroup and SyncGroup, need_rejoin() is already False on the
    # next poll, the finished join is never applied and heartbeats stay off, so the broker
    # (rightly) evicts it after session.timeout.ms. topics() always fetches metadata, so the
    # snapshot is complete before the first poll joins.
    assert topic in consumer.topics()
    return consumer


def _kp_consume(consumer: KafkaConsumer, n: int) -> list:
    got = []

    def more():
        for records in consumer.poll(timeout_ms=100).values():
            got.extend(records)
        return len(got) >= n
    wait_until(more, WAIT_S, interval_s=0.001, message=f"kafka-python to consume {n} records")
    return got


def test_kafka_python_group_resumes_from_committed_offsets(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic, group = unique("kp-g"), unique("kp-grp")
    create_topic(bootstrap, topic, PARTITIONS)
    first_values = _produce(bootstrap, topic, "first", 4)
    tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]

    consumer = _kp_consumer(bootstrap, group, topic, "kp-first")
    try:
        got = _kp_consume(consumer, len(first_values))
        assert sorted(r.value for r in got) == sorted(first_values)
        assert consumer.assignment() == set(tps)
        consumer.commit()
        assert {tp.partition: consumer.committed(tp) for tp in tps} == {p: 4 for p in range(3)}
    finally:
        consumer.close()

    second_values = _produce(bootstrap, topic, "second", 3)
    consumer = _kp_consumer(bootstrap, group, topic, "kp-second")
    try:
        assert {tp.partition: consumer.committed(tp) for tp in tps} == {p: 4 for p in range(3)}
        got = _kp_consume(consumer, len(second_values))
        assert sorted(r.value for r in got) == sorted(second_values), "only what follows commits"
        assert all(r.offset >= 4 for r in got)
        consumer.commit()
        assert {tp.partition: consumer.committed(tp) for tp in tps} == {p: 7 for p in range(3)}
    finally:
        consumer.close()


# -- aiokafka -------------------------------------------------------------------------------------

def test_aiokafka_group_resumes_from_committed_offsets(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic, group = unique("aio-g"), unique("aio-grp")
    create_topic(bootstrap, topic, PARTITIONS)
    first_values = _produce(bootstrap, topic, "first", 4)
    tps = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=6000, heartbeat_interval_ms=300,
                                max_poll_interval_ms=20000)

    async def consume(c: AIOKafkaConsumer, n: int) -> list:
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < n and time.monotonic() < deadline:
            for records in (await c.getmany(timeout_ms=200)).values():
                got.extend(records)
        assert len(got) >= n, f"aiokafka consumed {len(got)} of {n}"
        return got

    async def first_run():
        c = consumer()
        await c.start()
        try:
            got = await consume(c, len(first_values))
            await c.commit()
            committed = {tp.partition: await c.committed(tp) for tp in tps}
            return got, c.assignment(), committed
        finally:
            await c.stop()

    async def second_run():
        c = consumer()
        await c.start()
        try:
            before = {tp.partition: await c.committed(tp) for tp in tps}
            got = await consume(c, len(second_values))
            return before, got
        finally:
            await c.stop()

    got, assignment, committed = asyncio.run(first_run())
    assert sorted(r.value for r in got) == sorted(first_values)
    assert assignment == set(tps)
    assert committed == {p: 4 for p in range(PARTITIONS)}

    second_values = _produce(bootstrap, topic, "second", 3)
    before, got = asyncio.run(second_run())
    assert before == {p: 4 for p in range(PARTITIONS)}
    assert sorted(r.value for r in got) == sorted(second_values), "only what follows commits"
    assert all(r.offset >= 4 for r in got)


# -- one group, two client libraries ---------------------------------------------------------------

class KafkaPythonMember:
    """A kafka-python consumer that polls without pause in a thread of its own, next to the
    librdkafka members the pump polls in turn.

    Why not in turn with them: kafka-python 3.0.12 (and its main branch still) finishes a
    JoinGroup + SyncGroup on its I/O thread, but applies the result only inside a poll()
    that is waiting for it; a poll() that finds it already finished sends a new JoinGroup
    and drops the finished one, assignment and all (join_group_async restarts a done
    _join_task). A leader's JoinGroup in a Stable group starts a rebalance, in Kafka as
    here, and an eager librdkafka member rejoins only from its own poll(): with both
    polled by one thread, once a join outlasted kafka-python's 50 ms turn (a loaded
    machine) every later join completed during librdkafka's turn and was dropped, a new
    generation each time, and the group never settled. Polled continuously, a poll() is
    waiting when the join completes.

    The consumer is touched by the polling thread only until close(); `owned` is what its
    assignment was after the last poll."""

    POLL_MS = 500  # returns at once with records; a join completes within it

    def __init__(self, consumer: KafkaConsumer, name: str):
        self.consumer = consumer
        self.name = name
        self.messages: list = []
        self.owned: set[tuple[str, int]] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"poll-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=self.POLL_MS).values():
                    self.messages.extend(records)
                self.owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        except BaseException as e:  # the test sees it at its next poll()
            self.error = e

    def poll(self, timeout: float = 0.0) -> None:
        """Nothing to poll (the thread does): raise what stopped the thread, if anything."""
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.POLL_MS / 1000 + 30)
        assert not self._thread.is_alive(), f"{self.name}'s poll() did not return"
        self.consumer.close()


@pytest.mark.parametrize("leader", ["kafka-python", "librdkafka"])
def test_mixed_group_of_kafka_python_and_librdkafka_under_range(shared_broker, leader):
    """The first member to join leads and runs its own range assignor for both."""
    bootstrap = shared_broker.bootstrap
    topic, group = unique("mixed"), unique("mixed-grp")
    partitions = 6
    create_topic(bootstrap, topic, partitions)
    everything = all_partitions(topic, partitions)
    members: list = []

    def start_kp():
        members.append(KafkaPythonMember(_kp_consumer(
            bootstrap, group, topic, "kp-member",
            partition_assignment_strategy=[RangePartitionAssignor]), "kp-member"))
        return members[-1]

    def start_rdk():
        members.append(GroupMember(bootstrap, group, [topic], "rdk-member",
                                   **{"partition.assignment.strategy": "range"}))
        return members[-1]

    try:
        first = start_kp() if leader == "kafka-python" else start_rdk()
        pump(members, lambda: first.owned == everything, WAIT_S, f"{leader} alone",
             broker=shared_broker, group=group)
        second = start_rdk() if leader == "kafka-python" else start_kp()
        kp, rdk = (first, second) if leader == "kafka-python" else (second, first)
        pump(members, lambda: disjoint_cover([kp.owned, rdk.owned], everything), WAIT_S,
             "kafka-python and librdkafka members to own each partition once",
             broker=shared_broker, group=group)
        description = describe_group(bootstrap, group)
        assert description.partition_assignor == "range"
        assert broker_assignment(description) == {"kp-member": kp.owned,
                                                   "rdk-member": rdk.owned}
        leaders = [e["client_id"] for e in read_events(shared_broker.data_dir)
                   if e.get("group") == group and e["type"] == "group_assignment"
                   and e["leader"]]
        assert set(leaders) == {first.name}
        # range over one topic: contiguous halves
        halves = sorted([sorted(p for _, p in kp.owned), sorted(p for _, p in rdk.owned)])
        assert halves == [[0, 1, 2], [3, 4, 5]]
        mark = rdk.mark()

        values = {f"m-{i}".encode() for i in range(60)}
        produce(bootstrap, topic, [(None, v, None, i % partitions)
                                   for i, v in enumerate(sorted(values))])
        pump(members, lambda: len(kp.messages) + len(rdk.messages) >= len(values), WAIT_S,
             "both members to consume their partitions", broker=shared_broker, group=group)
        kp_values = [r.value for r in kp.messages]
        assert sorted(kp_values + rdk.values()) == sorted(values), "each record exactly once"
        assert rdk.events[mark:] == [], "the group rebalanced while consuming"
        assert {(r.topic, r.partition) for r in kp.messages} <= kp.owned
        assert {(t, p) for t, p, *_ in rdk.messages} <= rdk.owned
    finally:
        for m in members:
            m.close()
