"""Every API we declare, by api key: one module per API family.

Owns: `Api` (key, name, request and response declarations), `APIS`, `CONTROLLER_APIS`,
`PENDING_APIS` and `ALL_APIS` (all three together).
A module's declarations cover exactly the versions we implement; protocol.versions decides
what is advertised.

`APIS` is what the broker serves: ApiVersions advertises every key in it and the broker's
handler table must match it exactly. `CONTROLLER_APIS` holds the KRaft control plane's
messages (KIP-595, KIP-631), declared for every version Kafka defines but not served yet, so
they stay out of ApiVersions: a client that saw them advertised would send them and be
disconnected. `PENDING_APIS` holds client APIs declared ahead of their handlers (KIP-848's
consumer group APIs, then the transaction APIs of issue 25, were there until they were
served; none is now), out of ApiVersions for the same reason. An API moves from either to `APIS` in
the change that gives it a handler.
"""

from __future__ import annotations

from typing import NamedTuple

from construct import Container

from protocol.messages import (
    api_versions, cluster, configs, consumer_group, delegation_tokens, delete_records, envelope,
    features, fetch, group, leader_epoch, list_offsets, log_dirs, metadata, offsets, produce,
    producer_id, quorum, quotas, reassignment, security, share, share_group, share_offsets,
    share_state, telemetry, topics, transactions,
)
from protocol.schema import Message


class Api(NamedTuple):
    key: int
    name: str
    request: Message
    response: Message


def _key(request: Message) -> int:
    assert request.api_key is not None, f"{request.name} declares no api_key"
    return request.api_key


def _api(request: Message, response: Message) -> Api:
    assert request.api_key == response.api_key and request.valid == response.valid
    return Api(_key(request), request.name.removesuffix("Request"), request, response)


APIS: dict[int, Api] = {a.key: a for a in (
    _api(produce.ProduceRequest, produce.ProduceResponse),
    _api(fetch.FetchRequest, fetch.FetchResponse),
    _api(list_offsets.ListOffsetsRequest, list_offsets.ListOffsetsResponse),
    _api(metadata.MetadataRequest, metadata.MetadataResponse),
    _api(api_versions.ApiVersionsRequest, api_versions.ApiVersionsResponse),
    _api(topics.CreateTopicsRequest, topics.CreateTopicsResponse),
    _api(topics.DeleteTopicsRequest, topics.DeleteTopicsResponse),
    _api(producer_id.InitProducerIdRequest, producer_id.InitProducerIdResponse),
    _api(leader_epoch.OffsetForLeaderEpochRequest, leader_epoch.OffsetForLeaderEpochResponse),
    _api(configs.DescribeConfigsRequest, configs.DescribeConfigsResponse),
    _api(topics.CreatePartitionsRequest, topics.CreatePartitionsResponse),
    _api(offsets.OffsetCommitRequest, offsets.OffsetCommitResponse),
    _api(offsets.OffsetFetchRequest, offsets.OffsetFetchResponse),
    _api(group.FindCoordinatorRequest, group.FindCoordinatorResponse),
    _api(group.JoinGroupRequest, group.JoinGroupResponse),
    _api(group.HeartbeatRequest, group.HeartbeatResponse),
    _api(group.LeaveGroupRequest, group.LeaveGroupResponse),
    _api(group.SyncGroupRequest, group.SyncGroupResponse),
    _api(group.DescribeGroupsRequest, group.DescribeGroupsResponse),
    _api(group.ListGroupsRequest, group.ListGroupsResponse),
    _api(group.DeleteGroupsRequest, group.DeleteGroupsResponse),
    _api(offsets.OffsetDeleteRequest, offsets.OffsetDeleteResponse),
    _api(cluster.ElectLeadersRequest, cluster.ElectLeadersResponse),
    _api(cluster.DescribeClusterRequest, cluster.DescribeClusterResponse),
    _api(quorum.DescribeQuorumRequest, quorum.DescribeQuorumResponse),
    _api(delete_records.DeleteRecordsRequest, delete_records.DeleteRecordsResponse),
    _api(reassignment.AlterPartitionReassignmentsRequest,
         reassignment.AlterPartitionReassignmentsResponse),
    _api(reassignment.ListPartitionReassignmentsRequest,
         reassignment.ListPartitionReassignmentsResponse),
    _api(log_dirs.DescribeLogDirsRequest, log_dirs.DescribeLogDirsResponse),
    _api(features.UpdateFeaturesRequest, features.UpdateFeaturesResponse),
    _api(delegation_tokens.CreateDelegationTokenRequest,
         delegation_tokens.CreateDelegationTokenResponse),
    _api(delegation_tokens.RenewDelegationTokenRequest,
         delegation_tokens.RenewDelegationTokenResponse),
    _api(delegation_tokens.ExpireDelegationTokenRequest,
         delegation_tokens.ExpireDelegationTokenResponse),
    _api(delegation_tokens.DescribeDelegationTokenRequest,
         delegation_tokens.DescribeDelegationTokenResponse),
    _api(log_dirs.AlterReplicaLogDirsRequest, log_dirs.AlterReplicaLogDirsResponse),
    _api(configs.AlterConfigsRequest, configs.AlterConfigsResponse),
    _api(configs.IncrementalAlterConfigsRequest, configs.IncrementalAlterConfigsResponse),
    _api(consumer_group.ConsumerGroupHeartbeatRequest,
         consumer_group.ConsumerGroupHeartbeatResponse),
    _api(consumer_group.ConsumerGroupDescribeRequest,
         consumer_group.ConsumerGroupDescribeResponse),
    _api(security.DescribeAclsRequest, security.DescribeAclsResponse),
    _api(security.CreateAclsRequest, security.CreateAclsResponse),
    _api(security.DeleteAclsRequest, security.DeleteAclsResponse),
    _api(security.SaslHandshakeRequest, security.SaslHandshakeResponse),
    _api(security.SaslAuthenticateRequest, security.SaslAuthenticateResponse),
    _api(security.DescribeUserScramCredentialsRequest,
         security.DescribeUserScramCredentialsResponse),
    _api(security.AlterUserScramCredentialsRequest, security.AlterUserScramCredentialsResponse),
    _api(quotas.DescribeClientQuotasRequest, quotas.DescribeClientQuotasResponse),
    _api(quotas.AlterClientQuotasRequest, quotas.AlterClientQuotasResponse),
    _api(metadata.DescribeTopicPartitionsRequest, metadata.DescribeTopicPartitionsResponse),
    _api(telemetry.GetTelemetrySubscriptionsRequest, telemetry.GetTelemetrySubscriptionsResponse),
    _api(telemetry.PushTelemetryRequest, telemetry.PushTelemetryResponse),
    _api(telemetry.ListClientMetricsResourcesRequest,
         telemetry.ListClientMetricsResourcesResponse),
    _api(transactions.AddPartitionsToTxnRequest, transactions.AddPartitionsToTxnResponse),
    _api(transactions.AddOffsetsToTxnRequest, transactions.AddOffsetsToTxnResponse),
    _api(transactions.EndTxnRequest, transactions.EndTxnResponse),
    _api(transactions.TxnOffsetCommitRequest, transactions.TxnOffsetCommitResponse),
    _api(transactions.DescribeTransactionsRequest, transactions.DescribeTransactionsResponse),
    _api(transactions.ListTransactionsRequest, transactions.ListTransactionsResponse),
    _api(transactions.WriteTxnMarkersRequest, transactions.WriteTxnMarkersResponse),
    _api(transactions.DescribeProducersRequest, transactions.DescribeProducersResponse),
    _api(share_group.ShareGroupHeartbeatRequest, share_group.ShareGroupHeartbeatResponse),
    _api(share_group.ShareGroupDescribeRequest, share_group.ShareGroupDescribeResponse),
    _api(share.ShareFetchRequest, share.ShareFetchResponse),
    _api(share.ShareAcknowledgeRequest, share.ShareAcknowledgeResponse),
    _api(share_state.InitializeShareGroupStateRequest,
         share_state.InitializeShareGroupStateResponse),
    _api(share_state.ReadShareGroupStateRequest, share_state.ReadShareGroupStateResponse),
    _api(share_state.WriteShareGroupStateRequest, share_state.WriteShareGroupStateResponse),
    _api(share_state.DeleteShareGroupStateRequest, share_state.DeleteShareGroupStateResponse),
    _api(share_state.ReadShareGroupStateSummaryRequest,
         share_state.ReadShareGroupStateSummaryResponse),    _api(share_offsets.DescribeShareGroupOffsetsRequest,
         share_offsets.DescribeShareGroupOffsetsResponse),
    _api(share_offsets.AlterShareGroupOffsetsRequest, share_offsets.AlterShareGroupOffsetsResponse),
    _api(share_offsets.DeleteShareGroupOffsetsRequest,
         share_offsets.DeleteShareGroupOffsetsResponse),
    # Kafka's listeners: broker and controller (kafka-cluster.sh unregister asks a broker)
    _api(cluster.UnregisterBrokerRequest, cluster.UnregisterBrokerResponse),
    _api(quorum.AddRaftVoterRequest, quorum.AddRaftVoterResponse),
    _api(quorum.RemoveRaftVoterRequest, quorum.RemoveRaftVoterResponse),
)}

CONTROLLER_APIS: dict[int, Api] = {a.key: a for a in (
    _api(quorum.VoteRequest, quorum.VoteResponse),
    _api(quorum.BeginQuorumEpochRequest, quorum.BeginQuorumEpochResponse),
    _api(quorum.EndQuorumEpochRequest, quorum.EndQuorumEpochResponse),
    _api(quorum.FetchSnapshotRequest, quorum.FetchSnapshotResponse),
    _api(cluster.BrokerRegistrationRequest, cluster.BrokerRegistrationResponse),
    _api(cluster.BrokerHeartbeatRequest, cluster.BrokerHeartbeatResponse),
    _api(cluster.AllocateProducerIdsRequest, cluster.AllocateProducerIdsResponse),
    _api(cluster.AlterPartitionRequest, cluster.AlterPartitionResponse),
    _api(quorum.UpdateRaftVoterRequest, quorum.UpdateRaftVoterResponse),
    _api(envelope.EnvelopeRequest, envelope.EnvelopeResponse),
    _api(cluster.AssignReplicasToDirsRequest, cluster.AssignReplicasToDirsResponse),
)}

# Client APIs declared, at every version Kafka defines as stable, but not served yet: no
# handler, not advertised, refused by the client-facing listener like any unknown key.
PENDING_APIS: dict[int, Api] = {}
assert not APIS.keys() & CONTROLLER_APIS.keys(), "an API is either served or not"
assert not (APIS.keys() | CONTROLLER_APIS.keys()) & PENDING_APIS.keys(), "an API is in one place"

# Every API declared, at every declared version: what a node speaks to another node's
# controller listener (Raft between voters, broker to controller, forwarded admin requests),
# and what request_body can build.
ALL_APIS: dict[int, Api] = {**APIS, **CONTROLLER_APIS, **PENDING_APIS}

# Kafka's names for the api keys, so that handlers and logs can say what they mean. Each is
# read off its declaration, so a key is written down once (a test checks every name is the
# declaration's name in Kafka's SCREAMING_SNAKE form, as in ApiKeys.java, for APIS and
# CONTROLLER_APIS and PENDING_APIS).
PRODUCE = _key(produce.ProduceRequest)
FETCH = _key(fetch.FetchRequest)
LIST_OFFSETS = _key(list_offsets.ListOffsetsRequest)
METADATA = _key(metadata.MetadataRequest)
API_VERSIONS = _key(api_versions.ApiVersionsRequest)
CREATE_TOPICS = _key(topics.CreateTopicsRequest)
DELETE_TOPICS = _key(topics.DeleteTopicsRequest)
INIT_PRODUCER_ID = _key(producer_id.InitProducerIdRequest)
OFFSET_FOR_LEADER_EPOCH = _key(leader_epoch.OffsetForLeaderEpochRequest)
DESCRIBE_CONFIGS = _key(configs.DescribeConfigsRequest)
DELETE_RECORDS = _key(delete_records.DeleteRecordsRequest)
ALTER_PARTITION_REASSIGNMENTS = _key(reassignment.AlterPartitionReassignmentsRequest)
LIST_PARTITION_REASSIGNMENTS = _key(reassignment.ListPartitionReassignmentsRequest)
DESCRIBE_LOG_DIRS = _key(log_dirs.DescribeLogDirsRequest)
UPDATE_FEATURES = _key(features.UpdateFeaturesRequest)
CREATE_DELEGATION_TOKEN = _key(delegation_tokens.CreateDelegationTokenRequest)
RENEW_DELEGATION_TOKEN = _key(delegation_tokens.RenewDelegationTokenRequest)
EXPIRE_DELEGATION_TOKEN = _key(delegation_tokens.ExpireDelegationTokenRequest)
DESCRIBE_DELEGATION_TOKEN = _key(delegation_tokens.DescribeDelegationTokenRequest)
ALTER_REPLICA_LOG_DIRS = _key(log_dirs.AlterReplicaLogDirsRequest)
ALTER_CONFIGS = _key(configs.AlterConfigsRequest)
INCREMENTAL_ALTER_CONFIGS = _key(configs.IncrementalAlterConfigsRequest)
CREATE_PARTITIONS = _key(topics.CreatePartitionsRequest)
OFFSET_COMMIT = _key(offsets.OffsetCommitRequest)
OFFSET_FETCH = _key(offsets.OffsetFetchRequest)
FIND_COORDINATOR = _key(group.FindCoordinatorRequest)
JOIN_GROUP = _key(group.JoinGroupRequest)
HEARTBEAT = _key(group.HeartbeatRequest)
LEAVE_GROUP = _key(group.LeaveGroupRequest)
SYNC_GROUP = _key(group.SyncGroupRequest)
DESCRIBE_GROUPS = _key(group.DescribeGroupsRequest)
LIST_GROUPS = _key(group.ListGroupsRequest)
DELETE_GROUPS = _key(group.DeleteGroupsRequest)
OFFSET_DELETE = _key(offsets.OffsetDeleteRequest)
ELECT_LEADERS = _key(cluster.ElectLeadersRequest)
VOTE = _key(quorum.VoteRequest)
BEGIN_QUORUM_EPOCH = _key(quorum.BeginQuorumEpochRequest)
END_QUORUM_EPOCH = _key(quorum.EndQuorumEpochRequest)
DESCRIBE_QUORUM = _key(quorum.DescribeQuorumRequest)
FETCH_SNAPSHOT = _key(quorum.FetchSnapshotRequest)
ADD_RAFT_VOTER = _key(quorum.AddRaftVoterRequest)
REMOVE_RAFT_VOTER = _key(quorum.RemoveRaftVoterRequest)
UPDATE_RAFT_VOTER = _key(quorum.UpdateRaftVoterRequest)
DESCRIBE_CLUSTER = _key(cluster.DescribeClusterRequest)
BROKER_REGISTRATION = _key(cluster.BrokerRegistrationRequest)
BROKER_HEARTBEAT = _key(cluster.BrokerHeartbeatRequest)
UNREGISTER_BROKER = _key(cluster.UnregisterBrokerRequest)
ALLOCATE_PRODUCER_IDS = _key(cluster.AllocateProducerIdsRequest)
ALTER_PARTITION = _key(cluster.AlterPartitionRequest)
ENVELOPE = _key(envelope.EnvelopeRequest)
ASSIGN_REPLICAS_TO_DIRS = _key(cluster.AssignReplicasToDirsRequest)
CONSUMER_GROUP_HEARTBEAT = _key(consumer_group.ConsumerGroupHeartbeatRequest)
CONSUMER_GROUP_DESCRIBE = _key(consumer_group.ConsumerGroupDescribeRequest)
DESCRIBE_ACLS = _key(security.DescribeAclsRequest)
CREATE_ACLS = _key(security.CreateAclsRequest)
DELETE_ACLS = _key(security.DeleteAclsRequest)
SASL_HANDSHAKE = _key(security.SaslHandshakeRequest)
SASL_AUTHENTICATE = _key(security.SaslAuthenticateRequest)
DESCRIBE_USER_SCRAM_CREDENTIALS = _key(security.DescribeUserScramCredentialsRequest)
ALTER_USER_SCRAM_CREDENTIALS = _key(security.AlterUserScramCredentialsRequest)
DESCRIBE_CLIENT_QUOTAS = _key(quotas.DescribeClientQuotasRequest)
ALTER_CLIENT_QUOTAS = _key(quotas.AlterClientQuotasRequest)
DESCRIBE_TOPIC_PARTITIONS = _key(metadata.DescribeTopicPartitionsRequest)
GET_TELEMETRY_SUBSCRIPTIONS = _key(telemetry.GetTelemetrySubscriptionsRequest)
PUSH_TELEMETRY = _key(telemetry.PushTelemetryRequest)
LIST_CLIENT_METRICS_RESOURCES = _key(telemetry.ListClientMetricsResourcesRequest)
ADD_PARTITIONS_TO_TXN = _key(transactions.AddPartitionsToTxnRequest)
ADD_OFFSETS_TO_TXN = _key(transactions.AddOffsetsToTxnRequest)
END_TXN = _key(transactions.EndTxnRequest)
WRITE_TXN_MARKERS = _key(transactions.WriteTxnMarkersRequest)
TXN_OFFSET_COMMIT = _key(transactions.TxnOffsetCommitRequest)
DESCRIBE_PRODUCERS = _key(transactions.DescribeProducersRequest)
DESCRIBE_TRANSACTIONS = _key(transactions.DescribeTransactionsRequest)
LIST_TRANSACTIONS = _key(transactions.ListTransactionsRequest)
SHARE_GROUP_HEARTBEAT = _key(share_group.ShareGroupHeartbeatRequest)
SHARE_GROUP_DESCRIBE = _key(share_group.ShareGroupDescribeRequest)
SHARE_FETCH = _key(share.ShareFetchRequest)
SHARE_ACKNOWLEDGE = _key(share.ShareAcknowledgeRequest)
INITIALIZE_SHARE_GROUP_STATE = _key(share_state.InitializeShareGroupStateRequest)
READ_SHARE_GROUP_STATE = _key(share_state.ReadShareGroupStateRequest)
WRITE_SHARE_GROUP_STATE = _key(share_state.WriteShareGroupStateRequest)
DELETE_SHARE_GROUP_STATE = _key(share_state.DeleteShareGroupStateRequest)
READ_SHARE_GROUP_STATE_SUMMARY = _key(share_state.ReadShareGroupStateSummaryRequest)
DESCRIBE_SHARE_GROUP_OFFSETS = _key(share_offsets.DescribeShareGroupOffsetsRequest)
ALTER_SHARE_GROUP_OFFSETS = _key(share_offsets.AlterShareGroupOffsetsRequest)
DELETE_SHARE_GROUP_OFFSETS = _key(share_offsets.DeleteShareGroupOffsetsRequest)


def request_body(api_key: int, version: int, body: dict) -> Container:
    """A request body built from plain dicts, shaped exactly as one decoded off the wire
    (attribute access at every level, defaults filled): for a node that sends itself, or
    hands in process, a request it wrote rather than received."""
    declaration = ALL_APIS[api_key].request
    return declaration.parse(declaration.build(body, version), version)
