"""A blocking raw-socket client for interop tests: hand-built requests through our sans-IO
ClientConnection, for cases no real client will send (bad input, exact versions)."""

from __future__ import annotations

import socket

from protocol.connection import ClientConnection
from protocol.messages import CREATE_TOPICS, PRODUCE


class Raw:
    """A blocking socket speaking through our sans-IO ClientConnection."""

    def __init__(self, broker):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        self.conn = ClientConnection("raw-test")

    def call(self, api_key: int, version: int, body) -> object:
        _, raw = self.conn.send_request(api_key, version, body)
        self.sock.sendall(raw)
        while (response := self.conn.next_response()) is None:
            data = self.sock.recv(65536)
            assert data, "broker closed the connection"
            self.conn.receive_data(data)
        return response.body

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()

    def __enter__(self) -> "Raw":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
