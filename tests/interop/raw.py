"""A blocking raw-socket client for interop tests: hand-built requests through our sans-IO
ClientConnection (harness.raw), for cases no real client will send (bad input, exact
versions)."""

from __future__ import annotations

from harness.raw import RawConnection
from protocol.messages import CREATE_TOPICS, PRODUCE


class Raw(RawConnection):
    """A connection to a test's broker (anything with a `port`), as client id raw-test."""

    def __init__(self, broker):
        super().__init__(broker.port, client_id="raw-test")


def create_topic(raw: Raw, name: str, **configs):
    """CreateTopics v5 for one topic; returns the topic's result (error_code, ...)."""
    body = raw.call(CREATE_TOPICS, 5, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout_ms": 5000})
    return body.topics[0]


def produce(raw: Raw, topic: str, records: bytes, version: int = 9):
    """Produce one batch to partition 0 with acks=1; returns the partition's result."""
    body = raw.call(PRODUCE, version, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return body.responses[0].partition_responses[0]
