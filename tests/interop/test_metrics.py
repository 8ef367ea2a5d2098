"""The Prometheus endpoint of a broker process (metrics.port): what a scrape shows after
confluent-kafka produced and consumed, that bad HTTP costs only its own connection, and
that without metrics.port the broker opens no port but Kafka's."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request

import confluent_kafka
import confluent_kafka.admin
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.events import read_events
from harness.ports import free_port
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop

RECORDS = 200
PARTITIONS = 3


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics, parsed: {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its sockets in LISTEN state, from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failures = []
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(30) == 0
    assert failures == []


def _consume(bootstrap: str, topic: str, count: int) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"),
                                         "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen = 0

        def read() -> bool:
            nonlocal seen
            seen += len([m for m in consumer.consume(100, timeout=0.5) if not m.error()])
            return seen >= count
        wait_until(read, 30, interval_s=0.01, message=f"{count} records consumed")
    finally:
        consumer.close()


def test_a_scrape_shows_what_kafka_clients_did(make_broker):
    metrics_port = free_port()
    broker = make_broker(**{"metrics.port": metrics_port})
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("metered")
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    before = scrape(metrics_port)
    all_in = ("kafka_server_brokertopicmetrics_messagesin_total", ())
    topic_in = ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", topic),))
    assert topic_in not in before

    _produce(broker.bootstrap, topic, RECORDS)
    after = scrape(metrics_port)
    assert after[all_in] - before[all_in] == RECORDS
    assert after[topic_in] == RECORDS
    bytes_in = after[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", topic),))]
    assert bytes_in > RECORDS * len(b"value-0")
    # this node's partitions: the topic's alone (no group has made __consumer_offsets)
    assert after[("kafka_server_replicamanager_partitioncount", ())] == PARTITIONS
    assert after[("kafka_server_replicamanager_leadercount", ())] == PARTITIONS
    assert after[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert after[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert after[("kafka_controller_kafkacontroller_globalpartitioncount", ())] == PARTITIONS
    assert after[("kafka_server_kafkaserver_brokerstate", ())] == 3
    produce = after[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))]
    assert produce >= 1
    assert after[("kafka_network_requestmetrics_totaltimems_bucket",
                  (("le", "+Inf"), ("request", "Produce")))] == produce
    assert after[("kafka_network_requestmetrics_totaltimems_sum", (("request", "Produce"),))] > 0

    _consume(broker.bootstrap, topic, RECORDS)
    consumed = scrape(metrics_port)
    # every batch went out once to this one consumer
    assert consumed[("kafka_server_brokertopicmetrics_bytesout_total",
                     (("topic", topic),))] == bytes_in
    assert consumed[("kafka_network_requestmetrics_totaltimems_count",
                     (("request", "FetchConsumer"),))] >= 1
    # the endpoint's port and Kafka's, nothing else
    assert listening_ports(broker.pid) == {broker.port, metrics_port}

    # the last figures go to the event log at shutdown, just before broker_stop
    assert broker.stop() == 0
    events = read_events(broker.data_dir)
    assert [e["type"] for e in events[-2:]] == ["metrics", "broker_stop"]
    last = events[-2]
    assert last["messages_in"] == after[all_in] and last["bytes_out"] == bytes_in
    # the consumer's group.id made __consumer_offsets since: the one node holds and leads all
    assert last["partition_count"] == last["leader_count"] == PARTITIONS + 50
    # written after the node handed the quorum on: no longer the active controller
    assert last["active_controller"] == 0 and last["global_partitions"] == 0
    assert any(r.startswith("FetchConsumer=") for r in last["requests"])


RESET = b"(reset)"


def _raw_http(port: int, sent: bytes) -> bytes:
    """What the endpoint answers before it closes; RESET when it closed with bytes of ours
    still unread (the kernel then resets the connection, and may drop the answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        try:
            s.sendall(sent)
            s.shutdown(socket.SHUT_WR)
            received = b""
            while data := s.recv(65536):
                received += data
        except ConnectionResetError:
            return RESET
        return received


def test_bad_http_costs_only_its_connection(make_broker):
    metrics_port = free_port()
    broker = make_broker(**{"metrics.port": metrics_port})
    assert _raw_http(metrics_port, b"\x00\x00\x00\x2a\x00\x12garbage\r\n\r\n").startswith(
        b"HTTP/1.1 400")
    assert _raw_http(metrics_port, b"DELETE /metrics HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 405")
    too_long = _raw_http(metrics_port, b"GET /metrics HTTP/1.1\r\n" + b"A: b\r\n" * 4000)
    assert too_long == RESET or too_long.startswith(b"HTTP/1.1 431")
    assert _raw_http(metrics_port, b"GET /metri") == b""  # cut short: closed, unanswered
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/nothing", timeout=5)
    assert e.value.code == 404
    # the broker and its endpoint carry on
    assert broker.running
    assert scrape(metrics_port)[("kafka_server_kafkaserver_brokerstate", ())] == 3
    _produce(broker.bootstrap, unique("after-junk"), 1)  # auto-created, one partition


def test_off_by_default(broker):
    assert listening_ports(broker.pid) == {broker.port}


def test_a_taken_metrics_port_stops_the_start_with_one_line(tmp_path):
    from tests.interop.conftest import BrokerProcess, BrokerStartError
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = BrokerProcess(tmp_path / "taken", {"metrics.port": port})
        try:
            with pytest.raises(BrokerStartError):
                b.start()
        finally:
            b.stop(kill=True)  # were it to start after all
        assert b.proc.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port} (metrics.port): address already in use" \
            in b.tail()
