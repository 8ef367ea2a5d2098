"""ListOffsets (2): earliest, latest and by-timestamp offset lookups."""

from protocol.schema import F, Message

ListOffsetsRequest = Message(
    "ListOffsetsRequest", api_key=2, valid="0-7", flexible="6+", fields=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("current_leader_epoch", "int32", "4+", default=-1),
                F("timestamp", "int64"),
                F("max_num_offsets", "int32", "0", default=1),
            ]),
        ]),
    ])

ListOffsetsResponse = Message(
    "ListOffsetsResponse", api_key=2, valid="0-7", flexible="6+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("old_style_offsets", "[]int64", "0"),
                F("timestamp", "int64", "1+", default=-1),
                F("offset", "int64", "1+", default=-1),
                F("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ])

