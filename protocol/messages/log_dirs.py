"""DescribeLogDirs (35): each log directory of a broker and the replicas it holds, with
their sizes. v1 is v0; v2 is flexible; v3 adds the top-level error, v4 each directory's
total and usable bytes.

AlterReplicaLogDirs (34, KIP-113): move replicas of this broker to another of its log
directories. v1 is v0 (the response's throttle may be honoured first); v2 is flexible."""

from protocol.schema import F, Message

DescribeLogDirsRequest = Message(
    "DescribeLogDirsRequest", api_key=35, valid="0-4", flexible="2+", fields=[
        F("topics", [  # null: every replica
            F("topic", "string"),
            F("partitions", "[]int32"),
        ], nullable="0+"),
    ])

DescribeLogDirsResponse = Message(
    "DescribeLogDirsResponse", api_key=35, valid="0-4", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        F("results", [
            F("error_code", "int16"),
            F("log_dir", "string"),
            F("topics", [
                F("name", "string"),
                F("partitions", [
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+", default=-1),
            F("usable_bytes", "int64", "4+", default=-1),
        ]),
    ])


AlterReplicaLogDirsRequest = Message(
    "AlterReplicaLogDirsRequest", api_key=34, valid="0-2", flexible="2+", fields=[
        F("dirs", [
            F("path", "string"),  # an absolute path of one of the broker's log.dirs
            F("topics", [
                F("name", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ])

AlterReplicaLogDirsResponse = Message(
    "AlterReplicaLogDirsResponse", api_key=34, valid="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ])
