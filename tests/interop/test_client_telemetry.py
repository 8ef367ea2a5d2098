"""KIP-714 with librdkafka (confluent-kafka): a broker with telemetry.metrics set is asked
for a subscription and pushed the producer's and consumer's metrics, which its event log
keeps as client_metrics events; without it, nothing is advertised and nothing pushed."""

from __future__ import annotations

import confluent_kafka
import pytest

from broker.events import read_events
from tests.interop.test_metrics import scrape
from harness.ports import free_port
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop


def client_metrics(broker) -> list[dict]:
    return [e for e in read_events(broker.data_dir) if e["type"] == "client_metrics"]


def test_librdkafka_pushes_its_metrics_to_a_broker_that_subscribes(make_broker):
    broker = make_broker(**{"telemetry.metrics": "org.apache.kafka.producer.,"
                                                 "org.apache.kafka.consumer.",
                            "telemetry.push.interval.ms": 500})
    topic = unique("telemetry")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "client.id": "the-producer"})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "client.id": "the-consumer", "group.id": unique("g"),
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])

        def pushed() -> bool:
            producer.produce(topic, b"v")
            producer.poll(0)
            consumer.poll(0.1)
            ids = {e["client_id"] for e in client_metrics(broker)}
            return {"the-producer", "the-consumer"} <= ids
        wait_until(pushed, 60, interval_s=0.05,
                   message="a client_metrics event from the producer and the consumer")
    finally:
        consumer.close()
        producer.flush(10)
    events = client_metrics(broker)
    producer_points = [p for e in events if e["client_id"] == "the-producer"
                       for p in e["points"]]
    assert any(p.startswith("org.apache.kafka.producer.request.latency.avg=")
               for p in producer_points)
    assert all(p.startswith("org.apache.kafka.producer.") for p in producer_points)
    consumer_points = [p for e in events if e["client_id"] == "the-consumer"
                       for p in e["points"]]
    assert consumer_points and all(p.startswith("org.apache.kafka.consumer.")
                                   for p in consumer_points)
    assert all(e["client_instance_id"] for e in events)

    # a closed consumer says goodbye with a last, terminating push; the broker keeps
    # client_metrics events in its event log's buffer until the next flush, so wait for it
    def said_goodbye() -> bool:
        return any(e["terminating"] for e in client_metrics(broker)
                   if e["client_id"] == "the-consumer")
    wait_until(said_goodbye, 10, interval_s=0.05,
               message="the closed consumer's terminating client_metrics push")


def test_no_subscription_no_telemetry(make_broker):
    metrics_port = free_port()
    broker = make_broker(**{"metrics.port": metrics_port})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(unique("quiet"), b"v")
    assert producer.flush(30) == 0
    requests = {labels for name, labels in scrape(metrics_port)
                if name == "kafka_network_requestmetrics_totaltimems_count"}
    assert (("request", "Produce"),) in requests
    # the APIs are not advertised: librdkafka never asks
    assert (("request", "GetTelemetrySubscriptions"),) not in requests
    assert client_metrics(broker) == []
