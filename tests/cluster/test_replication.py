"""Replication on three processes, judged by confluent-kafka as the issue's outside tests
judge it: acknowledged writes survive a leader's kill -9, the ISR shrinks and comes back
(NOT_ENOUGH_REPLICAS meanwhile), committed offsets survive their coordinator's kill, and a
rolling restart under a running producer loses and duplicates nothing. Plus what only
the project checks: a follower that was down catches up and rejoins, a leader's
unreplicated tail is cut from its log when it comes back as a follower, and a consumer
with a follower's client.rack reads from that follower (KIP-392).

Every test keeps a history (what was acknowledged, what was read back) and checks it: no
acknowledged record missing, none twice, each key's records in send order.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from harness.raw import call
from protocol import messages as m
from protocol.records import decode_batches
from tests.cluster import confluent
from tests.cluster.harness import Cluster
from tests.util import unique

pytestmark = pytest.mark.interop

KEYS = 10


def isr_everywhere(cluster: Cluster, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR) as the first running node's Metadata shows it."""
    node = cluster.running()[0].node_id
    return {i: (p.leader_id, sorted(p.isr_nodes)) for i, p in cluster.partitions(node, topic).items()}


def wait_full_isr(cluster: Cluster, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    def full() -> bool:
        views = [cluster.partitions(n.node_id, topic) for n in cluster.running()]
        return all(len(v) == partitions and all(
            p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
            for p in v.values()) for v in views)
    cluster.wait_for(full, timeout_s, f"every replica of {topic} back in its ISR")


def create(cluster: Cluster, topic: str, partitions: int, min_isr: int) -> None:
    confluent.create_topic(cluster.bootstrap, topic, partitions, 3,
                           config={"min.insync.replicas": str(min_isr)})
    wait_full_isr(cluster, topic, partitions)


class History:
    """What a producer was told, and what a consumer read back."""

    def __init__(self) -> None:
        self.acked: dict[str, list[int]] = defaultdict(list)  # key -> sequence numbers
        self.failed = 0
        self.lock = threading.Lock()

    def on_delivery(self, err, msg) -> None:
        with self.lock:
            if err is None:
                key = msg.key().decode()
                self.acked[key].append(int(msg.value().decode().split("-")[1]))
            else:
                self.failed += 1

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())


def producer(bootstrap: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5,
                     "message.timeout.ms": 60000, **extra})


def produce(p: Producer, history: History, topic: str, start: int, count: int,
            partition: int | None = None) -> None:
    for seq in range(start, start + count):
        key = f"k{seq % KEYS}"
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, key=key, value=f"{key}-{seq}", on_delivery=history.on_delivery,
                          **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> dict[str, list[int]]:
    """Every record of the topic from the start, as key -> sequence numbers in log order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen: dict[str, list[int]] = defaultdict(list)
    n, deadline = 0, time.monotonic() + timeout_s
    try:
        while n < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            key = msg.key().decode()
            seen[key].append(int(msg.value().decode().split("-")[1]))
            n += 1
        # a little longer, for records that should not be there (duplicates)
        extra_deadline = time.monotonic() + 2
        while time.monotonic() < extra_deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                seen[msg.key().decode()].append(int(msg.value().decode().split("-")[1]))
    finally:
        c.close()
    return seen


def check_history(history: History, seen: dict[str, list[int]]) -> None:
    """Nothing acknowledged lost, nothing read twice, each key in send order."""
    for key, acked in history.acked.items():
        got = seen.get(key, [])
        missing = set(acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged records of {key} lost: {sorted(missing)[:10]}"
    for key, got in seen.items():
        assert len(got) == len(set(got)), f"duplicates of {key}: {len(got) - len(set(got))}"
        assert got == sorted(got), f"{key} out of send order"


# -- the checks ---------------------------------------------------------------------

def test_acknowledged_writes_survive_a_leader_kill(cluster):
    topic = unique("survive")
    create(cluster, topic, 1, min_isr=2)
    leader = isr_everywhere(cluster, topic)[0][0]
    history = History()
    p = producer(cluster.bootstrap)
    produce(p, history, topic, 0, 5000)
    p.flush(30)
    cluster.kill(leader)
    produce(p, history, topic, 5000, 5000)  # retried to the new leader
    assert p.flush(60) == 0
    assert history.failed == 0 and history.count == 10000
    cluster.restart(leader)
    wait_full_isr(cluster, topic, 1)
    check_history(history, read_all(cluster.bootstrap, topic, history.count))


def test_the_isr_shrinks_and_recovers(cluster):
    topic = unique("isr")
    strict = unique("strict")
    create(cluster, topic, 3, min_isr=2)
    create(cluster, strict, 1, min_isr=3)
    victim = next(n.node_id for n in cluster.nodes if n.node_id != cluster.active_controller())
    cluster.kill(victim)

    def shrunk() -> bool:
        return all(victim not in isr for _, isr in isr_everywhere(cluster, topic).values())
    cluster.wait_for(shrunk, 30, f"broker {victim} out of every ISR of {topic}")

    # min.insync.replicas=3 with two in-sync replicas: refused before the append
    p = producer(cluster.bootstrap, **{"message.timeout.ms": 3000})
    errors: list[KafkaError] = []
    p.produce(strict, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT), errors[0]
    # librdkafka retries NOT_ENOUGH_REPLICAS until message.timeout.ms: ask the broker directly
    assert _produce_error(cluster, strict) == KafkaError.NOT_ENOUGH_REPLICAS

    history = History()
    p = producer(cluster.bootstrap)
    produce(p, history, topic, 0, 3000)
    assert p.flush(30) == 0 and history.count == 3000  # min.insync.replicas=2 still holds
    cluster.restart(victim)
    wait_full_isr(cluster, topic, 3)
    wait_full_isr(cluster, strict, 1)
    check_history(history, read_all(cluster.bootstrap, topic, history.count))


def _produce_error(cluster: Cluster, topic: str) -> int:
    """One acks=all Produce to the partition's leader, over a raw connection: its error."""
    from protocol.records import Record, encode_batch
    leader = isr_everywhere(cluster, topic)[0][0]
    body = call(cluster.node(leader).port, m.PRODUCE, 9, {
        "transactional_id": None, "acks": -1, "timeout_ms": 3000, "topic_data": [
            {"name": topic, "partition_data": [
                {"index": 0, "records": encode_batch([Record(0, 0, None, b"x", [])])}]}]})
    return body["responses"][0]["partition_responses"][0]["error_code"]


def test_committed_offsets_survive_a_coordinator_kill(cluster):
    topic = unique("offsets")
    create(cluster, topic, 3, min_isr=2)
    group = unique("group")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    offsets = [TopicPartition(topic, i, 100 + i) for i in range(3)]
    c.commit(offsets=offsets, asynchronous=False)
    c.close()
    coordinator = _coordinator(cluster, group)
    cluster.kill(coordinator)

    def fetched():
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "enable.auto.commit": False})
        try:
            return [tp.offset for tp in c.committed([TopicPartition(topic, i) for i in range(3)],
                                                   timeout=10)]
        except KafkaException:
            return None
        finally:
            c.close()
    assert cluster.wait_for(lambda: fetched() == [100, 101, 102] or None, 40,
                            "the committed offsets from the new coordinator")
    assert _coordinator(cluster, group) != coordinator


def _coordinator(cluster: Cluster, group: str) -> int:
    admin = confluent.admin(cluster.bootstrap)
    result = admin.describe_consumer_groups([group])[group].result(20)
    return result.coordinator.id


def test_a_rolling_restart_loses_nothing(cluster):
    topic = unique("rolling")
    create(cluster, topic, 3, min_isr=2)
    history = History()
    p = producer(cluster.bootstrap)
    stop = threading.Event()

    def run() -> None:
        seq = 0
        while not stop.is_set():
            produce(p, history, topic, seq, 200)
            seq += 200
            p.poll(0.02)
        p.flush(60)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        for n in list(cluster.nodes):
            target = history.count + 500
            cluster.wait_for(lambda t=target: history.count > t or None, 30,
                             "the producer to make progress")
            assert cluster.terminate(n.node_id) == 0
            cluster.restart(n.node_id, kill=False)
            wait_full_isr(cluster, topic, 3)
    finally:
        stop.set()
        worker.join(90)
    assert history.failed == 0
    check_history(history, read_all(cluster.bootstrap, topic, history.count, timeout_s=90))


# -- the project's own ----------------------------------------------------------------------

def test_a_follower_that_was_down_catches_up_and_rejoins(cluster):
    topic = unique("catchup")
    create(cluster, topic, 1, min_isr=1)
    leader = isr_everywhere(cluster, topic)[0][0]
    follower = next(n.node_id for n in cluster.nodes if n.node_id != leader)
    cluster.kill(follower)
    history = History()
    p = producer(cluster.bootstrap)
    produce(p, history, topic, 0, 20000)
    assert p.flush(60) == 0 and history.count == 20000
    cluster.restart(follower)
    wait_full_isr(cluster, topic, 1, timeout_s=60)
    # read the follower's own copy (the fast cluster lets consumers read followers, KIP-392)
    check_history(history, read_replica(cluster, follower, topic, history.count))


def read_replica(cluster: Cluster, node_id: int, topic: str, expected: int,
                 timeout_s: float = 30.0) -> dict[str, list[int]]:
    """Every record below node `node_id`'s HW, fetched from that node alone (Fetch v12 as
    a consumer, which a follower serves)."""
    seen: dict[str, list[int]] = defaultdict(list)
    offset, deadline = 0, time.monotonic() + timeout_s
    while sum(len(v) for v in seen.values()) < expected and time.monotonic() < deadline:
        body = call(cluster.node(node_id).port, m.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 22,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 22}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        answer = body["responses"][0]["partitions"][0]
        assert answer["error_code"] == 0, answer["error_code"]
        for header, records in decode_batches(answer["records"] or b""):
            for r in records:
                seen[r.key.decode()].append(int(r.value.decode().split("-")[1]))
            offset = header.last_offset + 1
    return seen


def test_an_unreplicated_tail_is_truncated_when_the_old_leader_returns(cluster):
    """The leader takes acks=1 writes its followers never see (both are killed), then dies
    too; the followers come back, a follower is elected (its ISR still names it) and takes
    other writes; the old leader comes back as a follower and must cut its tail where its
    epoch ended in the new leader's log, then copy the new leader's records. (Elected
    cleanly or not, the old leader's tail is not in the new leader's log.)"""
    topic = unique("diverge")
    # if the controller shrank the ISR to the leader before both followers were gone, only
    # an unclean election gives the partition a leader again
    confluent.create_topic(cluster.bootstrap, topic, 1, 3,
                           config={"unclean.leader.election.enable": "true"})
    wait_full_isr(cluster, topic, 1)
    leader = isr_everywhere(cluster, topic)[0][0]
    history = History()
    p = producer(cluster.bootstrap)
    produce(p, history, topic, 0, 100, partition=0)
    assert p.flush(30) == 0
    followers = [n.node_id for n in cluster.nodes if n.node_id != leader]
    for n in followers:
        cluster.kill(n)  # SIGSTOP would not do: fetches parked at the leader would still
        # carry the new records into their socket buffers
    lost = Producer({"bootstrap.servers": cluster.node(leader).bootstrap, "acks": 1,
                     "enable.idempotence": False, "message.timeout.ms": 5000})
    acked_once: list = []
    for i in range(50):
        lost.produce(topic, key=b"lost", value=f"lost-{i}".encode(), partition=0,
                     on_delivery=lambda err, msg: acked_once.append(err))
    lost.flush(10)
    assert len(acked_once) == 50 and all(e is None for e in acked_once), acked_once[:3]
    cluster.kill(leader)
    back = [cluster.node(n) for n in followers]
    for node in back:
        node.launch()  # together: one alone is no quorum, so it could not be unfenced
    cluster.wait_ready(back)
    cluster.wait_for(lambda: isr_everywhere(cluster, topic)[0][0] not in (-1, leader) or None,
                     30, "a new leader")
    produce(p, history, topic, 100, 100, partition=0)
    assert p.flush(60) == 0
    cluster.restart(leader)
    wait_full_isr(cluster, topic, 1, timeout_s=60)
    seen = read_replica(cluster, leader, topic, history.count)
    assert "lost" not in seen  # the old leader's unreplicated tail is gone from its log
    check_history(history, seen)


def test_a_consumer_reads_from_a_follower_in_its_rack(cluster):
    """KIP-392 with librdkafka: a consumer whose client.rack is a follower's rack is sent
    there by the leader (preferred_read_replica) and reads every record from it."""
    topic = unique("rack")
    create(cluster, topic, 1, min_isr=2)
    leader = isr_everywhere(cluster, topic)[0][0]
    follower = next(n.node_id for n in cluster.nodes if n.node_id != leader)
    history = History()
    p = producer(cluster.bootstrap)
    produce(p, history, topic, 0, 2000)
    assert p.flush(60) == 0 and history.count == 2000
    fetches: dict[int, int] = {}

    def on_stats(raw: str) -> None:
        for b in json.loads(raw)["brokers"].values():
            if b.get("nodeid", -1) >= 0:
                fetches[b["nodeid"]] = b.get("req", {}).get("Fetch", 0)

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("racked"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "client.rack": f"rack-{follower}", "statistics.interval.ms": 200,
                  "stats_cb": on_stats})
    c.subscribe([topic])
    seen: dict[str, list[int]] = defaultdict(list)
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in seen.values()) < history.count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                seen[msg.key().decode()].append(int(msg.value().decode().split("-")[1]))
        stats_deadline = time.monotonic() + 10
        while fetches.get(follower, 0) == 0 and time.monotonic() < stats_deadline:
            c.poll(0.2)
    finally:
        c.close()
    check_history(history, seen)
    assert fetches.get(follower, 0) > 0, f"no Fetch to follower {follower}: {fetches}"
