"""Start, graceful stop and the event log, seen from outside the process."""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import Producer

from broker.events import EVENT_TYPES, read_events
from tests.interop.librdkafka import create_topic
from tests.util import wait_until

pytestmark = pytest.mark.interop


def test_sigterm_shuts_down_cleanly_and_the_next_start_skips_recovery(broker):
    topic = f"life-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"x")
    assert producer.flush(10) == 0
    assert broker.stop() == 0  # SIGTERM: exit status 0
    assert os.path.exists(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))
    broker.start()
    events = wait_until(lambda: [e for e in read_events(broker.data_dir)
                                 if e["type"] == "broker_start"][1:] or None, 10)
    assert events[0]["clean_shutdown"] is True
    assert not [e for e in read_events(broker.data_dir) if e["type"] == "log_recovery"]


def test_events_record_topics_requests_and_recovery(broker):
    topic = f"ev-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"x", partition=1)
    assert producer.flush(10) == 0
    wait_until(lambda: any(e["type"] == "request" and e["api"] == "Produce"
                           for e in read_events(broker.data_dir)), 10,
               message="sampled request events are flushed periodically")
    broker.restart(kill=True)

    def seen():
        events = read_events(broker.data_dir)
        kinds = {e["type"] for e in events}
        return events if {"broker_start", "topic_create", "request", "log_recovery"} <= kinds \
            else None
    events = wait_until(seen, 10, message="events not written")
    created = [e for e in events if e["type"] == "topic_create"]
    assert [(e["topic"], e["partitions"]) for e in created] == [(topic, 2)]
    produces = [e for e in events if e["type"] == "request" and e["api"] == "Produce"]
    assert produces and all(e["latency_ms"] >= 0 and e["response_bytes"] > 0
                            and e["error"] == "" for e in produces)
    starts = [e for e in events if e["type"] == "broker_start"]
    assert [s["clean_shutdown"] for s in starts] == [True, False]
    for e in events:  # every event carries exactly its declared fields
        assert set(e) - {"ts", "type", "broker"} <= set(EVENT_TYPES[e["type"]])
