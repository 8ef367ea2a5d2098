"""What several handlers share: finding the partition a data request may be served from
(this broker leads it), leader-epoch fencing (KIP-320), the current leader to name in
answers that send a client elsewhere, and forwarding a request to the active controller.

A partition this broker holds no replica of is UNKNOWN_TOPIC_OR_PARTITION when the image
does not know it either, else NOT_LEADER_OR_FOLLOWER (the client's metadata is stale and it
should refresh it); a local replica that does not lead is NOT_LEADER_OR_FOLLOWER too. The
client's current_leader_epoch is checked before leadership, as Kafka's Partition does.
Before either, a replica here on an offline log directory is KAFKA_STORAGE_ERROR, as
Kafka's ReplicaManager answers for an offline partition, led here or not: clients refresh
their metadata on it and find the new leader.
"""

from __future__ import annotations

from typing import Any

from broker.broker import Broker
from broker.partition import Partition
from broker.log.errors import KafkaStorageError
from protocol.errors import ErrorCode
from protocol.messages import APIS


def lookup(broker: Broker, topic: str, index: int, current_leader_epoch: int = -1, *,
           allow_follower: bool = False) -> tuple[Partition | None, ErrorCode]:
    """The partition this broker leads (or, with `allow_follower`, holds a replica of while
    some broker leads it: a consumer reading from a follower, KIP-392), with NONE; or None
    and the error the request naming it gets: UNKNOWN_TOPIC_OR_PARTITION (not in the
    image), NOT_LEADER_OR_FOLLOWER (led elsewhere, or no replica here), KAFKA_STORAGE_ERROR
    (a replica here on an offline log directory, or whose log the disk still refuses to
    make), FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (KIP-320)."""
    partition = broker.partition(topic, index)
    if (topic, index) in broker.offline_partitions:
        return None, ErrorCode.KAFKA_STORAGE_ERROR
    if partition is None:
        if broker.metadata_cache.partition(topic, index) is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if broker.log_dirs.all_offline and _replica_here(broker, partition, topic, index):
            return None, ErrorCode.KAFKA_STORAGE_ERROR
        try:
            partition = broker.reopen_partition(topic, index)
        except KafkaStorageError as e:
            broker.log_dirs.storage_failed(str(e), broker.logs.dir_of(topic, index)
                                           or _chosen_dir(broker))
            return None, ErrorCode.KAFKA_STORAGE_ERROR
        if partition is None:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
    error = check_leader_epoch(partition, current_leader_epoch)
    if error == ErrorCode.NONE and not partition.is_leader and not (
            allow_follower and partition.leader_id >= 0):
        error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return (partition, error) if error == ErrorCode.NONE else (None, error)


def _replica_here(broker: Broker, partition: Partition | None, topic: str,
                  index: int) -> bool:
    if partition is not None:
        return True
    registration = broker.metadata_cache.partition(topic, index)
    return registration is not None and broker.node_id in registration.replicas


def _chosen_dir(broker: Broker) -> str | None:
    """Where a replica whose log could not be made was to go: that directory failed."""
    m = broker.logs.choose_dir()
    return m.data_dir if m is not None else None


def check_leader_epoch(partition: Partition, current_leader_epoch: int) -> ErrorCode:
    """A client's view of the leader epoch: older is fenced, newer means our metadata lags."""
    if current_leader_epoch < 0:
        return ErrorCode.NONE
    if current_leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def current_leader(broker: Broker, topic: str, index: int) -> dict:
    """The leader as the image names it (KIP-951's CurrentLeader), for answers that send a
    client elsewhere; -1s when the image has no leader for it."""
    p = broker.metadata_cache.partition(topic, index)
    if p is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": p.leader, "leader_epoch": p.leader_epoch}


async def forward(broker: Broker, api_key: int, api_version: int, body: Any) -> Any:
    """Send a request to the active controller and return its answer (KIP-590's
    forwarding). A body the broker wrote itself as a dict is first put through the request's
    declaration, so the controller sees what a client's request looks like: every field
    present with its default, attribute access. Raises ControllerUnavailable."""
    if type(body) is dict:
        message = APIS[api_key].request
        body = message.parse(message.build(body, api_version), api_version)
    return await broker.controller_channel.forward(api_key, api_version, body)
