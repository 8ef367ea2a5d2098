"""What the cluster tests ask through confluent-kafka (librdkafka), the client the issue's
outside checks use: brokers and racks as one bootstrap sees them, the controller DescribeCluster
names, topic creation, and placement read from Metadata.

Owns small blocking helpers; each builds its AdminClient on the bootstrap it is given, so
"from any bootstrap" is one call per node.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 10.0


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def brokers(bootstrap: str) -> dict[int, str]:
    """id -> "host:port", from Metadata (AdminClient.list_topics().brokers)."""
    md = admin(bootstrap).list_topics(timeout=TIMEOUT_S)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def describe_cluster(bootstrap: str) -> tuple[str, int | None, dict[int, tuple[str, str | None]]]:
    """(cluster id, controller id, id -> ("host:port", rack)) from DescribeCluster."""
    client = admin(bootstrap)  # kept: librdkafka fails the future of a client it destroys
    d = client.describe_cluster(request_timeout=TIMEOUT_S).result()
    nodes = {n.id: (f"{n.host}:{n.port}", n.rack) for n in d.nodes}
    return d.cluster_id, None if d.controller is None else d.controller.id, nodes


def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int = -1,
                 *, timeout_s: float = TIMEOUT_S, config: dict[str, str] | None = None) -> None:
    """CreateTopics; raises KafkaException with the broker's error."""
    client = admin(bootstrap)  # kept until the answer: see describe_cluster
    futures = client.create_topics([NewTopic(name, partitions, replication_factor,
                                             config=config or {})],
                                   operation_timeout=timeout_s, request_timeout=timeout_s)
    futures[name].result(timeout_s + 5)


def create_error(bootstrap: str, name: str, partitions: int, replication_factor: int) -> int:
    """The error code a CreateTopics that must fail answers (AssertionError if it worked)."""
    try:
        create_topic(bootstrap, name, partitions, replication_factor)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error.code()
    raise AssertionError(f"creating {name} with RF {replication_factor} succeeded")


def partitions(bootstrap: str, topic: str) -> dict[int, Any]:
    """partition id -> PartitionMetadata (.leader, .replicas, .isrs) from list_topics."""
    md = admin(bootstrap).list_topics(topic, timeout=TIMEOUT_S)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return dict(t.partitions)
