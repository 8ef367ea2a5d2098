"""Partition reassignment (KIP-455): AlterPartitionReassignments (45) starts or cancels moves
of partitions' replicas, ListPartitionReassignments (46) lists those in progress. v0, as
Kafka's reference definitions have them (Kafka 4.1's v1 adds AllowReplicationFactorChange)."""

from protocol.schema import F, Message

AlterPartitionReassignmentsRequest = Message(
    "AlterPartitionReassignmentsRequest", api_key=45, valid="0", flexible="0+", fields=[
        F("timeout_ms", "int32", default=60000),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("replicas", "[]int32", nullable="0+", default=None),  # null: cancel
            ]),
        ]),
    ])

AlterPartitionReassignmentsResponse = Message(
    "AlterPartitionReassignmentsResponse", api_key=45, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("responses", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
            ]),
        ]),
    ])

ListPartitionReassignmentsRequest = Message(
    "ListPartitionReassignmentsRequest", api_key=46, valid="0", flexible="0+", fields=[
        F("timeout_ms", "int32", default=60000),
        F("topics", [  # null: every reassignment in progress
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ], nullable="0+", default=None),
    ])

ListPartitionReassignmentsResponse = Message(
    "ListPartitionReassignmentsResponse", api_key=46, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("replicas", "[]int32"),
                F("adding_replicas", "[]int32"),
                F("removing_replicas", "[]int32"),
            ]),
        ]),
    ])
