"""The consumer protocol's embedded formats: what JoinGroup and SyncGroup carry as bytes.

Owns: ConsumerProtocolSubscription (v0-3) and ConsumerProtocolAssignment (v0-3), each
encoded as an int16 version prefix followed by the struct (docs/PROTOCOL.md §5), and the typed
views the coordinator's events and the client's assignors use.

Fields are only ever appended to these formats, so a reader that meets a newer version
parses the layout it knows and ignores what follows, as Kafka's ConsumerProtocol does.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field

from protocol.errors import DecodeError
from protocol.schema import F, Message

ConsumerProtocolSubscription = Message(
    "ConsumerProtocolSubscription", valid="0-3", flexible="none", fields=[
        F("topics", "[]string"),
        F("user_data", "bytes", nullable="0+"),
        F("owned_partitions", [
            F("topic", "string", "1+"),
            F("partitions", "[]int32", "1+"),
        ], "1+"),
        F("generation_id", "int32", "2+", default=-1),
        F("rack_id", "string", "3+", nullable="3+"),
    ])


ConsumerProtocolAssignment = Message(
    "ConsumerProtocolAssignment", valid="0-3", flexible="none", fields=[
        F("assigned_partitions", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
        F("user_data", "bytes", nullable="0+"),
    ])


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 3


@dataclass
class Assignment:
    partitions: dict[str, list[int]]
    user_data: bytes | None = None
    version: int = 0


_PREFIX = struct.Struct(">h")


def _decode(message: Message, data: bytes):
    if len(data) < 2:
        raise DecodeError(f"{message.name}: {len(data)} bytes cannot hold a version")
    (version,) = _PREFIX.unpack_from(data)
    if version < 0:
        raise DecodeError(f"{message.name}: negative version {version}")
    known = min(version, message.versions.high)
    stream = io.BytesIO(data)
    stream.seek(2)
    return version, message.parse_stream(stream, known)


def decode_subscription(data: bytes) -> Subscription:
    version, s = _decode(ConsumerProtocolSubscription, data)
    owned: dict[str, list[int]] = {}
    for tp in s.get("owned_partitions") or []:
        owned.setdefault(tp.topic, []).extend(tp.partitions)
    return Subscription(list(s.topics), s.user_data, owned, s.get("generation_id", -1),
                        s.get("rack_id"), version)


def encode_subscription(sub: Subscription) -> bytes:
    body = {"topics": sub.topics, "user_data": sub.user_data,
            "owned_partitions": [{"topic": t, "partitions": p}
                                 for t, p in sorted(sub.owned_partitions.items())],
            "generation_id": sub.generation_id, "rack_id": sub.rack_id}
    return _PREFIX.pack(sub.version) + ConsumerProtocolSubscription.build(body, sub.version)


def decode_assignment(data: bytes) -> Assignment:
    """librdkafka treats a zero-length assignment as empty, and so do we."""
    if not data:
        return Assignment({})
    version, a = _decode(ConsumerProtocolAssignment, data)
    parts: dict[str, list[int]] = {}
    for tp in a.assigned_partitions:
        parts.setdefault(tp.topic, []).extend(tp.partitions)
    return Assignment(parts, a.user_data, version)


def encode_assignment(assignment: Assignment) -> bytes:
    body = {"assigned_partitions": [{"topic": t, "partitions": p}
                                    for t, p in sorted(assignment.partitions.items())],
            "user_data": assignment.user_data}
    return _PREFIX.pack(assignment.version) + ConsumerProtocolAssignment.build(
        body, assignment.version)


def partition_names(parts: dict[str, list[int]], *, sort: bool = False) -> list[str]:
    """{"t": [1, 0]} -> ["t-1", "t-0"]: the "topic-partition" form of the event log, the
    analysis tables and dump-log's text; sort=True orders topics and partitions."""
    if sort:
        return [f"{t}-{p}" for t, ps in sorted(parts.items()) for p in sorted(ps)]
    return [f"{t}-{p}" for t, ps in parts.items() for p in ps]
