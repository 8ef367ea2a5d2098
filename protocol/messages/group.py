"""Group membership APIs of the classic protocol: FindCoordinator (10), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16),
DeleteGroups (42).

FindCoordinator v4 batches keys (KIP-699); v5 and v6 add no field: v5 lets the broker answer
TRANSACTION_ABORTABLE (KIP-890), v6 admits the share-group key type 2 (KIP-932)."""

from protocol.schema import F, Message

FindCoordinatorRequest = Message(
    "FindCoordinatorRequest", api_key=10, valid="0-6", flexible="3+", fields=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+"),
        F("coordinator_keys", "[]string", "4+"),
    ])

FindCoordinatorResponse = Message(
    "FindCoordinatorResponse", api_key=10, valid="0-6", flexible="3+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3"),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        F("coordinators", [
            F("key", "string", "4+"),
            F("node_id", "int32", "4+"),
            F("host", "string", "4+"),
            F("port", "int32", "4+"),
            F("error_code", "int16", "4+"),
            F("error_message", "string", "4+", nullable="4+"),
        ], "4+"),
    ])

JoinGroupRequest = Message(
    "JoinGroupRequest", api_key=11, valid="0-9", flexible="6+", fields=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        F("rebalance_timeout_ms", "int32", "1+", default=-1),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+"),
        F("protocol_type", "string"),
        F("protocols", [
            F("name", "string"),
            F("metadata", "bytes"),
        ]),
        F("reason", "string", "8+", nullable="8+"),
    ])

JoinGroupResponse = Message(
    "JoinGroupResponse", api_key=11, valid="0-9", flexible="6+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_type", "string", "7+", nullable="7+"),
        F("protocol_name", "string", nullable="7+"),
        F("leader", "string"),
        F("skip_assignment", "bool", "9+"),
        F("member_id", "string"),
        F("members", [
            F("member_id", "string"),
            F("group_instance_id", "string", "5+", nullable="5+"),
            F("metadata", "bytes"),
        ]),
    ])

HeartbeatRequest = Message(
    "HeartbeatRequest", api_key=12, valid="0-4", flexible="4+", fields=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+"),
    ])

HeartbeatResponse = Message(
    "HeartbeatResponse", api_key=12, valid="0-4", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
    ])

LeaveGroupRequest = Message(
    "LeaveGroupRequest", api_key=13, valid="0-5", flexible="4+", fields=[
        F("group_id", "string"),
        F("member_id", "string", "0-2"),
        F("members", [
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+"),
            F("reason", "string", "5+", nullable="5+"),
        ], "3+"),
    ])

LeaveGroupResponse = Message(
    "LeaveGroupResponse", api_key=13, valid="0-5", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("members", [
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+"),
            F("error_code", "int16", "3+"),
        ], "3+"),
    ])

SyncGroupRequest = Message(
    "SyncGroupRequest", api_key=14, valid="0-5", flexible="4+", fields=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+"),
        F("protocol_type", "string", "5+", nullable="5+"),
        F("protocol_name", "string", "5+", nullable="5+"),
        F("assignments", [
            F("member_id", "string"),
            F("assignment", "bytes"),
        ]),
    ])

SyncGroupResponse = Message(
    "SyncGroupResponse", api_key=14, valid="0-5", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("protocol_type", "string", "5+", nullable="5+"),
        F("protocol_name", "string", "5+", nullable="5+"),
        F("assignment", "bytes"),
    ])

DescribeGroupsRequest = Message(
    "DescribeGroupsRequest", api_key=15, valid="0-5", flexible="5+", fields=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ])

DescribeGroupsResponse = Message(
    "DescribeGroupsResponse", api_key=15, valid="0-5", flexible="5+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("groups", [
            F("error_code", "int16"),
            F("group_id", "string"),
            F("group_state", "string"),
            F("protocol_type", "string"),
            F("protocol_data", "string"),
            F("members", [
                F("member_id", "string"),
                F("group_instance_id", "string", "4+", nullable="4+"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("member_metadata", "bytes"),
                F("member_assignment", "bytes"),
            ]),
            F("authorized_operations", "int32", "3+", default=-2147483648),
        ]),
    ])

ListGroupsRequest = Message(
    "ListGroupsRequest", api_key=16, valid="0-5", flexible="3+", fields=[
        F("states_filter", "[]string", "4+"),
        F("types_filter", "[]string", "5+"),
    ])

ListGroupsResponse = Message(
    "ListGroupsResponse", api_key=16, valid="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("groups", [
            F("group_id", "string"),
            F("protocol_type", "string"),
            F("group_state", "string", "4+"),
            F("group_type", "string", "5+"),
        ]),
    ])

DeleteGroupsRequest = Message(
    "DeleteGroupsRequest", api_key=42, valid="0-2", flexible="2+", fields=[
        F("groups_names", "[]string"),
    ])

DeleteGroupsResponse = Message(
    "DeleteGroupsResponse", api_key=42, valid="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", [
            F("group_id", "string"),
            F("error_code", "int16"),
        ]),
    ])

