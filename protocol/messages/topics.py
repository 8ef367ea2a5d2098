"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37)."""

from protocol.schema import F, Message

CreateTopicsRequest = Message(
    "CreateTopicsRequest", api_key=19, valid="0-7", flexible="5+", fields=[
        F("topics", [
            F("name", "string"),
            F("num_partitions", "int32"),
            F("replication_factor", "int16"),
            F("assignments", [
                F("partition_index", "int32"),
                F("broker_ids", "[]int32"),
            ]),
            F("configs", [
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+"),
    ])

CreateTopicsResponse = Message(
    "CreateTopicsResponse", api_key=19, valid="0-7", flexible="5+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", [
            F("name", "string"),
            F("topic_id", "uuid", "7+"),
            F("error_code", "int16"),
            F("error_message", "string", "1+", nullable="0+"),
            F("topic_config_error_code", "int16", "5+", tag=0),
            F("num_partitions", "int32", "5+", default=-1),
            F("replication_factor", "int16", "5+", default=-1),
            F("configs", [
                F("name", "string", "5+"),
                F("value", "string", "5+", nullable="5+"),
                F("read_only", "bool", "5+"),
                F("config_source", "int8", "5+", default=-1),
                F("is_sensitive", "bool", "5+"),
            ], "5+", nullable="5+"),
        ]),
    ])

DeleteTopicsRequest = Message(
    "DeleteTopicsRequest", api_key=20, valid="0-6", flexible="4+", fields=[
        F("topics", [
            F("name", "string", "6+", nullable="6+"),
            F("topic_id", "uuid", "6+"),
        ], "6+"),
        F("topic_names", "[]string", "0-5"),
        F("timeout_ms", "int32"),
    ])

DeleteTopicsResponse = Message(
    "DeleteTopicsResponse", api_key=20, valid="0-6", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("responses", [
            F("name", "string", nullable="6+"),
            F("topic_id", "uuid", "6+"),
            F("error_code", "int16"),
            F("error_message", "string", "5+", nullable="5+"),
        ]),
    ])

CreatePartitionsRequest = Message(
    "CreatePartitionsRequest", api_key=37, valid="0-3", flexible="2+", fields=[
        F("topics", [
            F("name", "string"),
            F("count", "int32"),
            F("assignments", [
                F("broker_ids", "[]int32"),
            ], nullable="0+"),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ])

CreatePartitionsResponse = Message(
    "CreatePartitionsResponse", api_key=37, valid="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", [
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ])

