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

# Kafka's names for the api keys, so that handlers and logs can say what they mean.
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 18, 19, 20
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 22, 23, 32, 37
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 12, 13, 14, 15, 16
DELETE_GROUPS, OFFSET_DELETE = 42, 47
