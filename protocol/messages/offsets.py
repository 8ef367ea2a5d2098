"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)."""

from protocol.schema import F, Message

OffsetCommitRequest = Message(
    "OffsetCommitRequest", api_key=8, valid="2-9", flexible="8+", fields=[
        F("group_id", "string"),
        F("generation_id_or_member_epoch", "int32", "1+", default=-1),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", nullable="7+"),
        F("retention_time_ms", "int64", "2-4", default=-1),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "6+", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ])

OffsetCommitResponse = Message(
    "OffsetCommitResponse", api_key=8, valid="2-9", flexible="8+", fields=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ])

OffsetFetchRequest = Message(
    "OffsetFetchRequest", api_key=9, valid="1-9", flexible="6+", fields=[
        F("group_id", "string", "0-7"),
        F("topics", [
            F("name", "string", "0-7"),
            F("partition_indexes", "[]int32", "0-7"),
        ], "0-7", nullable="2-7"),
        F("groups", [
            F("group_id", "string", "8+"),
            # v9 (KIP-848): a consumer group's member asks with its epoch
            F("member_id", "string", "9+", nullable="9+"),
            F("member_epoch", "int32", "9+", default=-1),
            F("topics", [
                F("name", "string", "8+"),
                F("partition_indexes", "[]int32", "8+"),
            ], "8+", nullable="8+"),
        ], "8+"),
        F("require_stable", "bool", "7+"),
    ])

OffsetFetchResponse = Message(
    "OffsetFetchResponse", api_key=9, valid="1-9", flexible="6+", fields=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", [
            F("name", "string", "0-7"),
            F("partitions", [
                F("partition_index", "int32", "0-7"),
                F("committed_offset", "int64", "0-7"),
                F("committed_leader_epoch", "int32", "5-7", default=-1),
                F("metadata", "string", "0-7", nullable="0-7"),
                F("error_code", "int16", "0-7"),
            ], "0-7"),
        ], "0-7"),
        F("error_code", "int16", "2-7"),
        F("groups", [
            F("group_id", "string", "8+"),
            F("topics", [
                F("name", "string", "8+"),
                F("partitions", [
                    F("partition_index", "int32", "8+"),
                    F("committed_offset", "int64", "8+"),
                    F("committed_leader_epoch", "int32", "8+", default=-1),
                    F("metadata", "string", "8+", nullable="8+"),
                    F("error_code", "int16", "8+"),
                ], "8+"),
            ], "8+"),
            F("error_code", "int16", "8+"),
        ], "8+"),
    ])

OffsetDeleteRequest = Message(
    "OffsetDeleteRequest", api_key=47, valid="0-0", flexible="none", fields=[
        F("group_id", "string"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
            ]),
        ]),
    ])

OffsetDeleteResponse = Message(
    "OffsetDeleteResponse", api_key=47, valid="0-0", flexible="none", fields=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ])

