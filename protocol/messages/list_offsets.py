"""ListOffsets (2): earliest, latest and by-timestamp offset lookups.

v8 and v9 add no field, only timestamps a client may ask for (-4 earliest local, -5 latest
tiered: KIP-405, KIP-1005); v10 adds the request's timeout_ms (KIP-1075), for lookups in
remote storage."""

from protocol.schema import F, Message

ListOffsetsRequest = Message(
    "ListOffsetsRequest", api_key=2, valid="0-10", flexible="6+", fields=[
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
        F("timeout_ms", "int32", "10+"),
    ])

ListOffsetsResponse = Message(
    "ListOffsetsResponse", api_key=2, valid="0-10", flexible="6+", fields=[
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

