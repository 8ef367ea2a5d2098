"""Fetch (1): record batches out, served as the bytes on disk.

Declared to v17, the versions the KRaft quorum replicates its metadata log with: v13 names
topics by id instead of name, v15 moves the follower's id into the tagged ReplicaState, v16
adds the leaders' endpoints to the response, v17 the follower's log directory. The broker
serves v4-17 to clients and followers; our consumer speaks v12 (topic names, with
incremental fetch sessions): protocol.versions.OUR_CLIENT_MAX.
"""

from protocol.schema import F, Message, Struct

FetchRequest = Message(
    "FetchRequest", api_key=1, valid="4-17", flexible="12+", fields=[
        F("cluster_id", "string", "12+", nullable="12+", tag=0),
        F("replica_id", "int32", "0-14", default=-1),
        F("replica_state", Struct([
            F("replica_id", "int32", "15+", default=-1),
            F("replica_epoch", "int64", "15+", default=-1),
        ]), "15+", tag=1),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=2147483647),
        F("isolation_level", "int8", "4+"),
        F("session_id", "int32", "7+"),
        F("session_epoch", "int32", "7+", default=-1),
        F("topics", [
            F("topic", "string", "0-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("partition_max_bytes", "int32"),
                F("replica_directory_id", "uuid", "17+", tag=0),
            ]),
        ]),
        F("forgotten_topics_data", [
            F("topic", "string", "7-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]int32", "7+"),
        ], "7+"),
        F("rack_id", "string", "11+"),
    ])

FetchResponse = Message(
    "FetchResponse", api_key=1, valid="4-17", flexible="12+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+"),
        F("responses", [
            F("topic", "string", "0-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("diverging_epoch", Struct([
                    F("epoch", "int32", "12+", default=-1),
                    F("end_offset", "int64", "12+", default=-1),
                ]), "12+", tag=0),
                F("current_leader", Struct([
                    F("leader_id", "int32", "12+", default=-1),
                    F("leader_epoch", "int32", "12+", default=-1),
                ]), "12+", tag=1),
                F("snapshot_id", Struct([
                    F("end_offset", "int64", default=-1),
                    F("epoch", "int32", default=-1),
                ]), "12+", tag=2),
                F("aborted_transactions", [
                    F("producer_id", "int64", "4+"),
                    F("first_offset", "int64", "4+"),
                ], "4+", nullable="4+"),
                F("preferred_read_replica", "int32", "11+", default=-1),
                F("records", "records", nullable="0+"),
            ]),
        ]),
        F("node_endpoints", [
            F("node_id", "int32", "16+"),
            F("host", "string", "16+"),
            F("port", "int32", "16+"),
            F("rack", "string", "16+", nullable="16+"),
        ], "16+", tag=0),
    ])

