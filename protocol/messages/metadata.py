"""Metadata (3) and DescribeTopicPartitions (75): brokers, topics, partitions, leaders and
topic ids.

Metadata names topics by id in requests from v12 (v10 and v11 carry the field but Kafka
refuses it there); v13 adds a top-level error code (KIP-1102, Kafka 4.0).
DescribeTopicPartitions (KIP-966) describes topics a page at a time: at most
response_partition_limit partitions, and a cursor where the next page starts.
"""

from protocol.schema import F, Message, Struct

MetadataRequest = Message(
    "MetadataRequest", api_key=3, valid="0-13", flexible="9+", fields=[
        F("topics", [
            F("topic_id", "uuid", "10+"),
            F("name", "string", nullable="10+"),
        ], nullable="1+"),
        F("allow_auto_topic_creation", "bool", "4+", default=True),
        F("include_cluster_authorized_operations", "bool", "8-10"),
        F("include_topic_authorized_operations", "bool", "8+"),
    ])

MetadataResponse = Message(
    "MetadataResponse", api_key=3, valid="0-13", flexible="9+", fields=[
        F("throttle_time_ms", "int32", "3+"),
        F("brokers", [
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", "1+", nullable="1+"),
        ]),
        F("cluster_id", "string", "2+", nullable="2+"),
        F("controller_id", "int32", "1+", default=-1),
        F("topics", [
            F("error_code", "int16"),
            F("name", "string", nullable="12+"),
            F("topic_id", "uuid", "10+"),
            F("is_internal", "bool", "1+"),
            F("partitions", [
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", "7+", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("offline_replicas", "[]int32", "5+"),
            ]),
            F("topic_authorized_operations", "int32", "8+", default=-2147483648),
        ]),
        F("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
        F("error_code", "int16", "13+"),
    ])

_CURSOR = Struct([
    F("topic_name", "string"),
    F("partition_index", "int32"),
])

DescribeTopicPartitionsRequest = Message(
    "DescribeTopicPartitionsRequest", api_key=75, valid="0", flexible="0+", fields=[
        F("topics", [
            F("name", "string"),
        ]),
        F("response_partition_limit", "int32", default=2000),
        F("cursor", _CURSOR, nullable="0+"),
    ])

DescribeTopicPartitionsResponse = Message(
    "DescribeTopicPartitionsResponse", api_key=75, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", [
            F("error_code", "int16"),
            F("name", "string", nullable="0+"),
            F("topic_id", "uuid"),
            F("is_internal", "bool"),
            F("partitions", [
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("eligible_leader_replicas", "[]int32", nullable="0+"),
                F("last_known_elr", "[]int32", nullable="0+"),
                F("offline_replicas", "[]int32"),
            ]),
            F("topic_authorized_operations", "int32", default=-2147483648),
        ]),
        F("next_cursor", _CURSOR, nullable="0+"),
    ])

