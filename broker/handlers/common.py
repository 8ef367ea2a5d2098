"""Checks several handlers share: partition lookup and leader-epoch fencing (KIP-320)."""

from __future__ import annotations

from broker.broker import Broker
from broker.partition import Partition
from protocol.errors import ErrorCode


def lookup(broker: Broker, topic: str, index: int,
           current_leader_epoch: int = -1) -> tuple[Partition | None, ErrorCode]:
    """The partition (None if unknown) and the error a request naming it gets: unknown, or
    the client's leader epoch disagreeing with ours (`check_leader_epoch`)."""
    partition = broker.partition(topic, index)
    if partition is None:
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return partition, check_leader_epoch(partition, current_leader_epoch)


def check_leader_epoch(partition: Partition, current_leader_epoch: int) -> ErrorCode:
    """A client's view of the leader epoch: older is fenced, newer means our metadata lags."""
    if current_leader_epoch < 0:
        return ErrorCode.NONE
    if current_leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE
