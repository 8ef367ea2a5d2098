"""OffsetForLeaderEpoch (23): where a leader epoch ends, for truncation detection."""

from protocol.schema import F, Message

OffsetForLeaderEpochRequest = Message(
    "OffsetForLeaderEpochRequest", api_key=23, valid="0-4", flexible="4+", fields=[
        F("replica_id", "int32", "3+", default=-2),
        F("topics", [
            F("topic", "string"),
            F("partitions", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "2+", default=-1),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ])

OffsetForLeaderEpochResponse = Message(
    "OffsetForLeaderEpochResponse", api_key=23, valid="0-4", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", [
            F("topic", "string"),
            F("partitions", [
                F("error_code", "int16"),
                F("partition", "int32"),
                F("leader_epoch", "int32", "1+", default=-1),
                F("end_offset", "int64", default=-1),
            ]),
        ]),
    ])

