"""Consumer settings: `ConsumerConfig`, registered as config kind "consumer".

Kafka's ConsumerConfig names (dots -> underscores) and Kafka's defaults:

    cfg = check_config("consumer", bootstrap_servers="h:9092", group_id="billing",
                       auto_offset_reset="earliest")

What the consumer uses today (assign mode): group_id (committed offsets only),
auto_offset_reset, fetch_min_bytes, fetch_max_wait_ms, fetch_max_bytes,
max_partition_fetch_bytes, max_poll_records, isolation_level (read_uncommitted, or
read_committed: client/consumer/isolation.py),
default_api_timeout_ms, client_rack. The group-membership settings (session_timeout_ms,
heartbeat_interval_ms, max_poll_interval_ms, partition_assignment_strategy,
group_instance_id, enable_auto_commit, auto_commit_interval_ms) are accepted and checked
and used by subscribe(), the group driver (client/consumer/coordinator.py) and auto-commit.
key_deserializer / value_deserializer (callables, None by default) are applied by the
Consumer to every record it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from client.config import (
    ClientConfig, bool_field, callable_field, choice_field, int_field, register_config,
    str_field,
)

__all__ = ["ConsumerConfig", "ShareConsumerConfig", "ASSIGNORS"]

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")


def _check_strategy(name: str, value: Any) -> tuple[str, ...]:
    """A name, a comma-separated string of names, or a list of names (Kafka's list type)."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise TypeError(f"config {name} must be a str or a list of str, "
                        f"got {type(value).__name__}")
    if not items:
        raise ValueError(f"config {name} names no assignor")
    return tuple(items)


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(ClientConfig):
    """KafkaConsumer settings (Kafka's ConsumerConfig), Kafka's defaults."""

    group_id: str | None = str_field(None, nullable=True)
    group_instance_id: str | None = str_field(None, nullable=True)
    auto_offset_reset: str = choice_field("latest", ["earliest", "latest", "none"])
    enable_auto_commit: bool = bool_field(True)
    auto_commit_interval_ms: int = int_field(5000)
    fetch_min_bytes: int = int_field(1)
    fetch_max_wait_ms: int = int_field(500)
    fetch_max_bytes: int = int_field(52428800, low=1)
    max_partition_fetch_bytes: int = int_field(1048576, low=1)
    max_poll_records: int = int_field(500, low=1)
    max_poll_interval_ms: int = int_field(300000, low=1)
    session_timeout_ms: int = int_field(45000, low=1)
    heartbeat_interval_ms: int = int_field(3000, low=1)
    partition_assignment_strategy: tuple[str, ...] = field(
        default=("range", "cooperative-sticky"), metadata={"check": _check_strategy})
    # KIP-848: "consumer" heartbeats with ConsumerGroupHeartbeat and lets the coordinator
    # assign (group_remote_assignor: its assignor, None for the broker's default); "classic"
    # is JoinGroup/SyncGroup with partition_assignment_strategy, as before
    group_protocol: str = choice_field("classic", ["classic", "consumer"])
    group_remote_assignor: str | None = str_field(None, nullable=True)
    isolation_level: str = choice_field("read_uncommitted",
                                        ["read_uncommitted", "read_committed"])
    default_api_timeout_ms: int = int_field(60000)
    # closing: the final commit, the revocation and the LeaveGroup together get at most
    # close_timeout_ms (Java's close() default); when the close comes from a cancellation
    # they get cancelled_close_timeout_ms, shielded, and the rest is abandoned
    close_timeout_ms: int = int_field(30000)
    cancelled_close_timeout_ms: int = int_field(1000)
    client_rack: str = str_field("")
    check_crcs: bool = bool_field(True)
    exclude_internal_topics: bool = bool_field(True)
    allow_auto_create_topics: bool = bool_field(True)
    # applied to each record's key / value (when not None) before the application sees
    # it, as aiokafka's: one argument, the bytes; returns any object
    key_deserializer: Callable[[bytes], Any] | None = callable_field()
    value_deserializer: Callable[[bytes], Any] | None = callable_field()

    _client_id_prefix = "consumer"


register_config("consumer")(ConsumerConfig)


@dataclass(frozen=True, kw_only=True)
class ShareConsumerConfig(ClientConfig):
    """KafkaShareConsumer settings (KIP-932), registered as config kind "share_consumer".

    share_acknowledgement_mode: "implicit" accepts every record a poll returned at the
    next poll, commit or close; "explicit" wants acknowledge() for each of them first.
    heartbeat_interval_ms is the first interval only: the broker's answers set the next.
    max_poll_records bounds a poll and each ShareFetch (MaxRecords, BatchSize)."""

    group_id: str = str_field("")
    share_acknowledgement_mode: str = choice_field("implicit", ["implicit", "explicit"])
    fetch_min_bytes: int = int_field(1)
    fetch_max_wait_ms: int = int_field(500)
    fetch_max_bytes: int = int_field(52428800, low=1)
    max_poll_records: int = int_field(500, low=1)
    heartbeat_interval_ms: int = int_field(5000, low=1)
    default_api_timeout_ms: int = int_field(60000)
    close_timeout_ms: int = int_field(30000)
    client_rack: str = str_field("")
    key_deserializer: Callable[[bytes], Any] | None = callable_field()
    value_deserializer: Callable[[bytes], Any] | None = callable_field()

    _client_id_prefix = "share-consumer"


register_config("share_consumer")(ShareConsumerConfig)
