"""The KIP-932 share group membership APIs: ShareGroupHeartbeat (76) and ShareGroupDescribe
(77).

Owns their declarations; broker.handlers.share_group serves them. (ShareFetch and
ShareAcknowledge, the record-delivery APIs of share groups, are declared elsewhere.)

Both go up to v1. Kafka 4.0 shipped v0 as early access; Kafka 4.1 released v1 as the stable
version with the same fields (v1 marks the KIP-932 release, and a v1 member chooses its own
member id, as KIP-1082 lets a consumer group member do). librdkafka 2.16's share consumer
sends v1 only (rd_kafka_ShareGroupHeartbeatRequest: GroupId, MemberId, MemberEpoch, RackId,
SubscribedTopicNames). Kafka's October 2024 definitions, our reference copy, know v0 only
and still mark it unstable.
"""

from protocol.messages.consumer_group import assignment_struct
from protocol.schema import F, Message, Struct

ShareGroupHeartbeatRequest = Message(
    "ShareGroupHeartbeatRequest", api_key=76, valid="0-1", flexible="0+", fields=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("rack_id", "string", nullable="0+"),
        F("subscribed_topic_names", "[]string", nullable="0+"),
    ])

ShareGroupHeartbeatResponse = Message(
    "ShareGroupHeartbeatResponse", api_key=76, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("member_id", "string", nullable="0+"),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F("assignment", Struct([
            F("topic_partitions", [
                F("topic_id", "uuid"),
                F("partitions", "[]int32"),
            ]),
        ]), nullable="0+"),
    ])

ShareGroupDescribeRequest = Message(
    "ShareGroupDescribeRequest", api_key=77, valid="0-1", flexible="0+", fields=[
        F("group_ids", "[]string"),
        F("include_authorized_operations", "bool"),
    ])

ShareGroupDescribeResponse = Message(
    "ShareGroupDescribeResponse", api_key=77, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("groups", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("group_id", "string"),
            F("group_state", "string"),
            F("group_epoch", "int32"),
            F("assignment_epoch", "int32"),
            F("assignor_name", "string"),
            F("members", [
                F("member_id", "string"),
                F("rack_id", "string", nullable="0+"),
                F("member_epoch", "int32"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("subscribed_topic_names", "[]string"),
                F("assignment", assignment_struct()),
            ]),
            F("authorized_operations", "int32", default=-2147483648),
        ]),
    ])
