"""Share groups' data-plane APIs (KIP-932): ShareFetch (78) and ShareAcknowledge (79).

Owns their declarations; broker.handlers.share_fetch serves them.

Both go up to v1, the version Kafka 4.1 made stable and librdkafka 2.16 sends: ShareFetch
v1 drops PartitionMaxBytes and adds MaxRecords and BatchSize to the request, and
AcquisitionLockTimeoutMs to the response (read from librdkafka's writer and parser in
rdkafka_fetcher.c); ShareAcknowledge v1 has v0's fields. Kafka's October 2024 definitions,
our reference copy, have v0 only and mark it unstable.
"""

from protocol.schema import F, Message, Struct


def _acknowledgement_batches() -> F:
    return F("acknowledgement_batches", [
        F("first_offset", "int64"),
        F("last_offset", "int64"),
        F("acknowledge_types", "[]int8"),
    ])


def _current_leader() -> F:
    return F("current_leader", Struct([
        F("leader_id", "int32"),
        F("leader_epoch", "int32"),
    ]))


def _node_endpoints() -> F:
    return F("node_endpoints", [
        F("node_id", "int32"),
        F("host", "string"),
        F("port", "int32"),
        F("rack", "string", nullable="0+"),
    ])


ShareFetchRequest = Message(
    "ShareFetchRequest", api_key=78, valid="0-1", flexible="0+", fields=[
        F("group_id", "string", nullable="0+"),
        F("member_id", "string", nullable="0+"),
        F("share_session_epoch", "int32"),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", default=0x7FFFFFFF),
        F("max_records", "int32", "1+"),
        F("batch_size", "int32", "1+"),
        F("topics", [
            F("topic_id", "uuid"),
            F("partitions", [
                F("partition_index", "int32"),
                F("partition_max_bytes", "int32", "0"),
                _acknowledgement_batches(),
            ]),
        ]),
        F("forgotten_topics_data", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
    ])

ShareFetchResponse = Message(
    "ShareFetchResponse", api_key=78, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("acquisition_lock_timeout_ms", "int32", "1+"),
        F("responses", [
            F("topic_id", "uuid"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("acknowledge_error_code", "int16"),
                F("acknowledge_error_message", "string", nullable="0+"),
                _current_leader(),
                F("records", "records", nullable="0+"),
                F("acquired_records", [
                    F("first_offset", "int64"),
                    F("last_offset", "int64"),
                    F("delivery_count", "int16"),
                ]),
            ]),
        ]),
        _node_endpoints(),
    ])

ShareAcknowledgeRequest = Message(
    "ShareAcknowledgeRequest", api_key=79, valid="0-1", flexible="0+", fields=[
        F("group_id", "string", nullable="0+"),
        F("member_id", "string", nullable="0+"),
        F("share_session_epoch", "int32"),
        F("topics", [
            F("topic_id", "uuid"),
            F("partitions", [
                F("partition_index", "int32"),
                _acknowledgement_batches(),
            ]),
        ]),
    ])

ShareAcknowledgeResponse = Message(
    "ShareAcknowledgeResponse", api_key=79, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("responses", [
            F("topic_id", "uuid"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                _current_leader(),
            ]),
        ]),
        _node_endpoints(),
    ])
