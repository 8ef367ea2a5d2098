"""Cluster membership and leadership RPCs: ElectLeaders (43), DescribeCluster (60),
BrokerRegistration (62), BrokerHeartbeat (63), UnregisterBroker (64), AllocateProducerIds (67),
AlterPartition (56), AssignReplicasToDirs (73).

Owns their declarations only. A broker registers with the active controller (KIP-631) and
keeps its session alive with heartbeats, which also carry controlled shutdown
(`want_shut_down`); UnregisterBroker removes a decommissioned node; ElectLeaders asks for
preferred (election_type 0) or unclean (1) leader elections (KIP-460); DescribeCluster
names the brokers, or with v1's endpoint_type 2 the controllers (KIP-919), and the active
controller. A broker asks the active controller for a block of producer ids with
AllocateProducerIds (KIP-730) and hands them out to InitProducerId. A partition leader asks
it to shrink or expand the ISR with AlterPartition (KIP-497; broker epochs from v3, KIP-903).
A broker with several log directories tells it which directory holds each of its replicas
with AssignReplicasToDirs (KIP-858).
Every version Kafka defines is declared.
"""

from protocol.schema import F, Message

ElectLeadersRequest = Message(
    "ElectLeadersRequest", api_key=43, valid="0-2", flexible="2+", fields=[
        F("election_type", "int8", "1+"),
        # null: every partition of the cluster
        F("topic_partitions", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ], nullable="0+"),
        F("timeout_ms", "int32", default=60000),
    ])

ElectLeadersResponse = Message(
    "ElectLeadersResponse", api_key=43, valid="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "1+"),
        F("replica_election_results", [
            F("topic", "string"),
            F("partition_result", [
                F("partition_id", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
            ]),
        ]),
    ])

DescribeClusterRequest = Message(
    "DescribeClusterRequest", api_key=60, valid="0-1", flexible="0+", fields=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),
    ])

DescribeClusterResponse = Message(
    "DescribeClusterResponse", api_key=60, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        F("brokers", [
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+"),
        ]),
        F("cluster_authorized_operations", "int32", default=-2147483648),
    ])

BrokerRegistrationRequest = Message(
    "BrokerRegistrationRequest", api_key=62, valid="0-4", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("cluster_id", "string"),
        # new on every start: a second process with the same broker_id is told apart by it
        F("incarnation_id", "uuid"),
        F("listeners", [
            F("name", "string"),
            F("host", "string"),
            F("port", "uint16"),
            F("security_protocol", "int16"),
        ]),
        F("features", [
            F("name", "string"),
            F("min_supported_version", "int16"),
            F("max_supported_version", "int16"),
        ]),
        F("rack", "string", nullable="0+"),
        F("is_migrating_zk_broker", "bool", "1+"),
        F("log_dirs", "[]uuid", "2+"),
        F("previous_broker_epoch", "int64", "3+", default=-1),
    ])

BrokerRegistrationResponse = Message(
    "BrokerRegistrationResponse", api_key=62, valid="0-4", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("broker_epoch", "int64", default=-1),
    ])

BrokerHeartbeatRequest = Message(
    "BrokerHeartbeatRequest", api_key=63, valid="0-1", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("current_metadata_offset", "int64"),
        F("want_fence", "bool"),
        F("want_shut_down", "bool"),
        F("offline_log_dirs", "[]uuid", "1+", tag=0),
    ])

BrokerHeartbeatResponse = Message(
    "BrokerHeartbeatResponse", api_key=63, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("is_caught_up", "bool"),
        # a broker is fenced until the controller says otherwise
        F("is_fenced", "bool", default=True),
        F("should_shut_down", "bool"),
    ])

UnregisterBrokerRequest = Message(
    "UnregisterBrokerRequest", api_key=64, valid="0", flexible="0+", fields=[
        F("broker_id", "int32"),
    ])

UnregisterBrokerResponse = Message(
    "UnregisterBrokerResponse", api_key=64, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ])

AllocateProducerIdsRequest = Message(
    "AllocateProducerIdsRequest", api_key=67, valid="0", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
    ])

AllocateProducerIdsResponse = Message(
    "AllocateProducerIdsResponse", api_key=67, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id_start", "int64"),  # the first id of the block, inclusive
        F("producer_id_len", "int32"),
    ])

AlterPartitionRequest = Message(
    "AlterPartitionRequest", api_key=56, valid="0-3", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("topics", [
            F("topic_name", "string", "0-1"),
            F("topic_id", "uuid", "2+"),
            F("partitions", [
                F("partition_index", "int32"),
                F("leader_epoch", "int32"),
                F("new_isr", "[]int32", "0-2"),
                F("new_isr_with_epochs", [
                    F("broker_id", "int32", "3+"),
                    F("broker_epoch", "int64", "3+", default=-1),
                ], "3+"),
                F("leader_recovery_state", "int8", "1+"),
                F("partition_epoch", "int32"),
            ]),
        ]),
    ])

AlterPartitionResponse = Message(
    "AlterPartitionResponse", api_key=56, valid="0-3", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("topics", [
            F("topic_name", "string", "0-1"),
            F("topic_id", "uuid", "2+"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("isr", "[]int32"),
                F("leader_recovery_state", "int8", "1+"),
                F("partition_epoch", "int32"),
            ]),
        ]),
    ])

AssignReplicasToDirsRequest = Message(
    "AssignReplicasToDirsRequest", api_key=73, valid="0", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("directories", [
            F("id", "uuid"),
            F("topics", [
                F("topic_id", "uuid"),
                F("partitions", [
                    F("partition_index", "int32"),
                ]),
            ]),
        ]),
    ])

AssignReplicasToDirsResponse = Message(
    "AssignReplicasToDirsResponse", api_key=73, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("directories", [
            F("id", "uuid"),
            F("topics", [
                F("topic_id", "uuid"),
                F("partitions", [
                    F("partition_index", "int32"),
                    F("error_code", "int16"),
                ]),
            ]),
        ]),
    ])
