"""broker.telemetry: the subscription clients are given, and each check a push must pass
(KIP-714's errors), in order; a push that passes is decoded."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.config import BrokerConfig
from broker.telemetry import ClientTelemetry, point_text
from protocol.codecs import Codec, compress
from protocol.errors import ErrorCode
from protocol.otlp import DataPoint
from tests.protocol.test_otlp import metric, metrics_data, point

PUSH = metrics_data(metric("org.apache.kafka.producer.request.latency.avg", 5, point(2.5)))


def telemetry(**overrides: str) -> ClientTelemetry:
    return ClientTelemetry(BrokerConfig.load({"telemetry.metrics": "*", **overrides}))


def push(client: uuid.UUID, subscription: int, data: bytes = PUSH, *, codec: int = 0,
         terminating: bool = False) -> SimpleNamespace:
    return SimpleNamespace(client_instance_id=client, subscription_id=subscription,
                           terminating=terminating, compression_type=codec, metrics=data)


def test_a_new_client_gets_an_id_and_the_subscription():
    t = telemetry(**{"telemetry.push.interval.ms": "5000"})
    answer = t.subscribe(uuid.UUID(int=0))
    assert answer["client_instance_id"].int != 0
    assert answer["requested_metrics"] == [""]  # every metric
    assert answer["push_interval_ms"] == 5000 and answer["telemetry_max_bytes"] == 1048576
    assert answer["accepted_compression_types"] == [4, 3, 1, 2]
    again = t.subscribe(answer["client_instance_id"])
    assert again["client_instance_id"] == answer["client_instance_id"]
    assert again["subscription_id"] == answer["subscription_id"]
    prefixes = ClientTelemetry(BrokerConfig.load({"telemetry.metrics": "a.b,c"}))
    assert prefixes.subscribe(uuid.UUID(int=0))["requested_metrics"] == ["a.b", "c"]
    assert prefixes.subscription_id != t.subscription_id
    off = ClientTelemetry(BrokerConfig.load({}))
    assert not off.enabled and off.subscribe(uuid.UUID(int=0))["requested_metrics"] == []


def test_each_check_of_a_push():
    t = telemetry(**{"telemetry.push.interval.ms": "10000", "telemetry.max.bytes": "4096"})
    client = t.subscribe(uuid.UUID(int=0))["client_instance_id"]
    sub = t.subscription_id
    assert t.push(push(uuid.UUID(int=0), sub), 0) == (ErrorCode.INVALID_REQUEST, None)
    assert t.push(push(client, sub + 1), 0) == (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, None)
    assert t.push(push(client, sub, b"x" * 4097), 0) == (ErrorCode.TELEMETRY_TOO_LARGE, None)
    assert t.push(push(client, sub, codec=9), 0)[0] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert t.push(push(client, sub, b"\x0a\x05abc"), 0)[0] == ErrorCode.INVALID_RECORD
    error, decoded = t.push(push(client, sub, compress(Codec.ZSTD, PUSH), codec=Codec.ZSTD),
                            1_000)
    assert error == ErrorCode.NONE and decoded is not None
    assert decoded.points == [DataPoint("org.apache.kafka.producer.request.latency.avg",
                                        2.5, {}, 7)]
    # the next push comes at half the interval at the soonest, unless the client is leaving
    assert t.push(push(client, sub), 5_999)[0] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert t.push(push(client, sub), 6_000)[0] == ErrorCode.NONE
    assert t.push(push(client, sub, terminating=True), 6_001)[0] == ErrorCode.NONE
    # a push from a client instance the broker has not seen (another broker's) is taken
    assert t.push(push(uuid.uuid4(), sub), 7_000)[0] == ErrorCode.NONE
    off = ClientTelemetry(BrokerConfig.load({}))
    assert off.push(push(client, off.subscription_id), 0)[0] == \
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID


def test_points_as_the_event_carries_them():
    assert point_text(DataPoint("a.b", 2.5)) == "a.b=2.5"
    assert point_text(DataPoint("n.lat", 3.0, {"node.id": 1, "b": "x"})) == \
        "n.lat{b=x,node.id=1}=3"
