"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71), PushTelemetry (72),
ListClientMetricsResources (74).

Owns their declarations only. A client asks which of its metrics the broker wants and how
often (GetTelemetrySubscriptions: a client instance id the broker hands out, a subscription
id, the metric name prefixes, the push interval), then pushes them (PushTelemetry: an
OpenTelemetry MetricsData protobuf, maybe compressed; protocol.otlp reads it).
ListClientMetricsResources names the client-metrics subscriptions configured. Every version
Kafka defines is declared.
"""

from protocol.schema import F, Message

GetTelemetrySubscriptionsRequest = Message(
    "GetTelemetrySubscriptionsRequest", api_key=71, valid="0", flexible="0+", fields=[
        F("client_instance_id", "uuid"),  # zero: the broker hands one out
    ])

GetTelemetrySubscriptionsResponse = Message(
    "GetTelemetrySubscriptionsResponse", api_key=71, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("client_instance_id", "uuid"),
        F("subscription_id", "int32"),
        F("accepted_compression_types", "[]int8"),
        F("push_interval_ms", "int32"),
        F("telemetry_max_bytes", "int32"),
        F("delta_temporality", "bool"),
        # metric name prefixes; [] none, [""] every metric
        F("requested_metrics", "[]string"),
    ])

PushTelemetryRequest = Message(
    "PushTelemetryRequest", api_key=72, valid="0", flexible="0+", fields=[
        F("client_instance_id", "uuid"),
        F("subscription_id", "int32"),
        F("terminating", "bool"),
        F("compression_type", "int8"),
        F("metrics", "bytes"),
    ])

PushTelemetryResponse = Message(
    "PushTelemetryResponse", api_key=72, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ])

ListClientMetricsResourcesRequest = Message(
    "ListClientMetricsResourcesRequest", api_key=74, valid="0", flexible="0+", fields=[])

ListClientMetricsResourcesResponse = Message(
    "ListClientMetricsResourcesResponse", api_key=74, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("client_metrics_resources", [
            F("name", "string"),
        ]),
    ])
