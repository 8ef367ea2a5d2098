"""The KIP-848 consumer group protocol's own APIs: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69).

Owns their declarations; broker.handlers.consumer_group serves them.

ConsumerGroupHeartbeat goes up to v1 (SubscribedTopicRegex, and the member id chosen by
the client, KIP-1082), which Kafka 4.0 released and librdkafka requires; Kafka's October
2024 definitions, our reference copy, still mark it unstable.
"""

from protocol.schema import F, Message, Struct

ConsumerGroupHeartbeatRequest = Message(
    "ConsumerGroupHeartbeatRequest", api_key=68, valid="0-1", flexible="0+", fields=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("instance_id", "string", nullable="0+"),
        F("rack_id", "string", nullable="0+"),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("subscribed_topic_names", "[]string", nullable="0+"),
        F("subscribed_topic_regex", "string", "1+", nullable="1+"),
        F("server_assignor", "string", nullable="0+"),
        F("topic_partitions", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ], nullable="0+"),
    ])

ConsumerGroupHeartbeatResponse = Message(
    "ConsumerGroupHeartbeatResponse", api_key=68, valid="0-1", flexible="0+", fields=[
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

ConsumerGroupDescribeRequest = Message(
    "ConsumerGroupDescribeRequest", api_key=69, valid="0", flexible="0+", fields=[
        F("group_ids", "[]string"),
        F("include_authorized_operations", "bool"),
    ])


def assignment_struct() -> Struct:
    """Kafka's common struct Assignment: topic partitions by id and name (also
    ShareGroupDescribe's, protocol.messages.share_group)."""
    return Struct([
        F("topic_partitions", [
            F("topic_id", "uuid"),
            F("topic_name", "string"),
            F("partitions", "[]int32"),
        ]),
    ])


ConsumerGroupDescribeResponse = Message(
    "ConsumerGroupDescribeResponse", api_key=69, valid="0", flexible="0+", fields=[
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
                F("instance_id", "string", nullable="0+"),
                F("rack_id", "string", nullable="0+"),
                F("member_epoch", "int32"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("subscribed_topic_names", "[]string"),
                F("subscribed_topic_regex", "string", nullable="0+"),
                F("assignment", assignment_struct()),
                F("target_assignment", assignment_struct()),
            ]),
            F("authorized_operations", "int32", default=-2147483648),
        ]),
    ])
