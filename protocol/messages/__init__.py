"""Every API we declare, by api key: one module per API family.

Owns: `Api` (key, name, request and response declarations) and `APIS`. A module's
declarations cover exactly the versions we implement; protocol.versions decides what is
advertised.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.messages import (
    api_versions, configs, fetch, group, leader_epoch, list_offsets, metadata, offsets, produce,
    producer_id, topics,
)
from protocol.schema import Message


class Api(NamedTuple):
    key: int
    name: str
    request: Message
    response: Message


def _api(request: Message, response: Message) -> Api:
    assert request.api_key == response.api_key and request.valid == response.valid
    assert request.api_key is not None, f"{request.name} declares no api_key"
    return Api(request.api_key, request.name.removesuffix("Request"), request, response)


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
)}

# Kafka's names for the api keys, so that handlers and logs can say what they mean. Each is
# read off its declaration, so a key is written down once (a test checks every name is the
# declaration's name in Kafka's SCREAMING_SNAKE form, as in ApiKeys.java).
PRODUCE = produce.ProduceRequest.api_key
FETCH = fetch.FetchRequest.api_key
LIST_OFFSETS = list_offsets.ListOffsetsRequest.api_key
METADATA = metadata.MetadataRequest.api_key
API_VERSIONS = api_versions.ApiVersionsRequest.api_key
CREATE_TOPICS = topics.CreateTopicsRequest.api_key
DELETE_TOPICS = topics.DeleteTopicsRequest.api_key
INIT_PRODUCER_ID = producer_id.InitProducerIdRequest.api_key
OFFSET_FOR_LEADER_EPOCH = leader_epoch.OffsetForLeaderEpochRequest.api_key
DESCRIBE_CONFIGS = configs.DescribeConfigsRequest.api_key
CREATE_PARTITIONS = topics.CreatePartitionsRequest.api_key
OFFSET_COMMIT = offsets.OffsetCommitRequest.api_key
OFFSET_FETCH = offsets.OffsetFetchRequest.api_key
FIND_COORDINATOR = group.FindCoordinatorRequest.api_key
JOIN_GROUP = group.JoinGroupRequest.api_key
HEARTBEAT = group.HeartbeatRequest.api_key
LEAVE_GROUP = group.LeaveGroupRequest.api_key
SYNC_GROUP = group.SyncGroupRequest.api_key
DESCRIBE_GROUPS = group.DescribeGroupsRequest.api_key
LIST_GROUPS = group.ListGroupsRequest.api_key
DELETE_GROUPS = group.DeleteGroupsRequest.api_key
OFFSET_DELETE = offsets.OffsetDeleteRequest.api_key
