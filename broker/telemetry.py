"""Client telemetry (KIP-714): which metrics clients are asked to push, and what they pushed.

Owns: `ClientTelemetry`, the broker's one subscription (`telemetry.metrics`, name prefixes,
`*` for all; `telemetry.push.interval.ms`), the client instances it has handed out ids to
(bounded: the least recently heard from is forgotten first), and the checks a push must
pass, as Kafka's ClientMetricsManager makes them: the subscription id it was given
(UNKNOWN_SUBSCRIPTION_ID), not before half its interval since its last push unless it is
terminating (THROTTLING_QUOTA_EXCEEDED), at most `telemetry.max.bytes`
(TELEMETRY_TOO_LARGE), a codec it was offered (UNSUPPORTED_COMPRESSION_TYPE) and a
MetricsData that decodes (INVALID_RECORD). Kafka configures subscriptions as client-metrics
resources (IncrementalAlterConfigs); minibroker has this one broker-wide subscription, which
ListClientMetricsResources names. With `telemetry.metrics` empty the telemetry APIs are not
advertised and clients push nothing.

What a client pushed becomes one `client_metrics` event (broker/events.py) per push, each
point `name{attribute=value,...}=value`, so that `minibroker analyze` can chart what the
clients saw.
"""

from __future__ import annotations

import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from broker.config import BrokerConfig
from protocol.codecs import Codec, decompress
from protocol.errors import ErrorCode
from protocol.otlp import DataPoint, OtlpError, Telemetry, decode_metrics
from protocol.record_errors import RecordError

MAX_CLIENTS = 10_000  # client instances remembered
INFLATION = 16  # a compressed push may decompress to this many times telemetry.max.bytes
ACCEPTED_CODECS = (Codec.ZSTD, Codec.LZ4, Codec.GZIP, Codec.SNAPPY)  # Kafka's order
SUBSCRIPTION_NAME = "minibroker"  # the one subscription ListClientMetricsResources names


@dataclass
class ClientInstance:
    last_push_ms: int = -1


class ClientTelemetry:
    def __init__(self, config: BrokerConfig):
        prefixes = tuple(config.telemetry_metrics)
        self.enabled = bool(prefixes)
        self.requested = [""] if "*" in prefixes else list(prefixes)
        self.interval_ms = config.telemetry_push_interval_ms
        self.max_bytes = config.telemetry_max_bytes
        # the same subscription keeps its id across restarts; another gets another
        text = f"{','.join(self.requested)}|{self.interval_ms}".encode()
        self.subscription_id = zlib.crc32(text) - (1 << 31)
        self.clients: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()

    def subscribe(self, client_instance_id: uuid.UUID) -> dict:
        """GetTelemetrySubscriptions' answer (a zero id gets a new one)."""
        if client_instance_id.int == 0:
            client_instance_id = uuid.uuid4()
        self._instance(client_instance_id)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "client_instance_id": client_instance_id,
                "subscription_id": self.subscription_id,
                "accepted_compression_types": [int(c) for c in ACCEPTED_CODECS],
                "push_interval_ms": self.interval_ms, "telemetry_max_bytes": self.max_bytes,
                "delta_temporality": True,
                "requested_metrics": self.requested if self.enabled else []}

    def _instance(self, client_instance_id: uuid.UUID) -> ClientInstance:
        instance = self.clients.pop(client_instance_id, None) or ClientInstance()
        self.clients[client_instance_id] = instance
        while len(self.clients) > MAX_CLIENTS:
            self.clients.popitem(last=False)
        return instance

    def push(self, body, now_ms: int) -> tuple[ErrorCode, Telemetry | None]:
        """Check and decode one PushTelemetry: (NONE, what it carried) or (the error, None)."""
        client_instance_id: uuid.UUID = body.client_instance_id
        if client_instance_id.int == 0:
            return ErrorCode.INVALID_REQUEST, None
        if not self.enabled or body.subscription_id != self.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID, None
        instance = self._instance(client_instance_id)
        if (not body.terminating and instance.last_push_ms >= 0
                and now_ms - instance.last_push_ms < self.interval_ms // 2):
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED, None
        data = body.metrics or b""
        if len(data) > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE, None
        codec = body.compression_type
        if codec != Codec.NONE and codec not in ACCEPTED_CODECS:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, None
        try:
            raw = decompress(codec, data, self.max_bytes * INFLATION)
            telemetry = decode_metrics(raw)
        except (OtlpError, RecordError):  # a codec's error, or not a MetricsData
            return ErrorCode.INVALID_RECORD, None
        instance.last_push_ms = now_ms
        return ErrorCode.NONE, telemetry


def point_text(point: DataPoint) -> str:
    """`name{k=v,...}=value`: one point as the client_metrics event carries it."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(point.attributes.items()))
    return f"{point.name}{{{labels}}}={point.value:g}" if labels else \
        f"{point.name}={point.value:g}"
