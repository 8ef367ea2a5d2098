"""The admin APIs of a share group's offsets (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

Owns their declarations; broker.handlers.share_offsets serves them at the group's
coordinator. A share group's "offset" on a partition is its share-partition start offset
(SPSO): every record below it is done with. Kafka 4.1 ships all three at v0, flexible;
Kafka 4.2 adds DescribeShareGroupOffsets v1 with a Lag per partition (KIP-1226), which we do
not declare yet. Our reference copy of Kafka's definitions (October 2024) predates them: the
shapes are those of Kafka 4.1's sources, where AlterShareGroupOffsetsResponse and
DeleteShareGroupOffsetsResponse gained a top-level error and DeleteShareGroupOffsets names
whole topics.
"""

from protocol.schema import F, Message

DescribeShareGroupOffsetsRequest = Message(
    "DescribeShareGroupOffsetsRequest", api_key=90, valid="0", flexible="0+", fields=[
        F("groups", [
            F("group_id", "string"),
            # null: every topic partition the group has state for
            F("topics", [
                F("topic_name", "string"),
                F("partitions", "[]int32"),
            ], nullable="0+"),
        ]),
    ])

DescribeShareGroupOffsetsResponse = Message(
    "DescribeShareGroupOffsetsResponse", api_key=90, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("groups", [
            F("group_id", "string"),
            F("topics", [
                F("topic_name", "string"),
                F("topic_id", "uuid"),
                F("partitions", [
                    F("partition_index", "int32"),
                    F("start_offset", "int64"),
                    F("leader_epoch", "int32"),
                    F("error_code", "int16"),
                    F("error_message", "string", nullable="0+", default=None),
                ]),
            ]),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ])

AlterShareGroupOffsetsRequest = Message(
    "AlterShareGroupOffsetsRequest", api_key=91, valid="0", flexible="0+", fields=[
        F("group_id", "string"),
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("start_offset", "int64"),
            ]),
        ]),
    ])

AlterShareGroupOffsetsResponse = Message(
    "AlterShareGroupOffsetsResponse", api_key=91, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("responses", [
            F("topic_name", "string"),
            F("topic_id", "uuid"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ])

DeleteShareGroupOffsetsRequest = Message(
    "DeleteShareGroupOffsetsRequest", api_key=92, valid="0", flexible="0+", fields=[
        F("group_id", "string"),
        F("topics", [F("topic_name", "string")]),
    ])

DeleteShareGroupOffsetsResponse = Message(
    "DeleteShareGroupOffsetsResponse", api_key=92, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("responses", [
            F("topic_name", "string"),
            F("topic_id", "uuid"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ])
