"""Replica placement: which brokers hold the replicas of a new partition, and in what order.

Owns the controller's answer to CreateTopics and CreatePartitions when the request does
not name the replicas itself, and the validation of a manual `replica_assignment` when it
does. Pure: the brokers and a random number generator are arguments, nothing is read.

The algorithm is Kafka's `AdminUtils.assignReplicasToBrokers`:

- Rack-unaware: the first replica of partition p goes to broker (p + start_index) mod n of
  the broker list sorted by id, so first replicas (the preferred leaders) go round-robin and
  n partitions give every broker one leader. The other replicas follow the first at an
  offset of `1 + (replica_shift + j) mod (n - 1)`, and the shift grows by one after every n
  partitions, so that partitions led by the same broker do not all have the same followers.
  Both start_index and replica_shift are random in Kafka (a fixed start would give broker 0
  the first partition of every topic); here they come from the injected RNG unless given.
- Rack-aware, when every usable broker has a rack: the same walk over a rack-alternated
  list (one broker of each rack in turn, racks and brokers sorted), with the followers'
  shift scaled by the number of racks, and a follower skipped while its rack already holds
  a replica and some rack holds none, or while its broker already holds one. So while the
  replication factor is at most the number of racks, every replica lands on its own rack.
  When only some brokers have a rack, placement ignores racks, as Kafka's
  `RackAwareMode.Safe` does.

Fenced brokers are not chosen: the caller passes every registered broker with its `fenced`
flag, as Kafka's `StripedReplicaPlacer` receives `UsableBroker`s. Errors are Kafka's codes,
carried by `PlacementError`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode


@dataclass(frozen=True)
class UsableBroker:
    """A registered broker as placement sees it (Kafka's `UsableBroker`)."""

    id: int
    rack: str | None = None
    fenced: bool = False


class PlacementError(Exception):
    """A placement or manual assignment that cannot be honoured, with the code to answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def assign_replicas_to_brokers(
    brokers: Iterable[UsableBroker],
    num_partitions: int,
    replication_factor: int,
    *,
    rng: random.Random,
    start_partition_id: int = 0,
    start_index: int | None = None,
    replica_shift: int | None = None,
) -> list[tuple[int, ...]]:
    """The replicas of partitions start_partition_id .. start_partition_id+num_partitions-1.

    Element i of the result is the replica list of partition start_partition_id + i; its
    first broker is the preferred leader. start_index and replica_shift are drawn from
    `rng` when not given; CreatePartitions passes start_partition_id (the number of
    existing partitions) so that the round-robin continues where the topic left off.
    """
    if num_partitions <= 0:
        raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                             f"Number of partitions was set to {num_partitions}, "
                             "but it must be greater than 0.")
    if replication_factor <= 0:
        raise PlacementError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor was set to {replication_factor}, "
                             "but it must be greater than 0.")
    registered = _by_id(brokers)
    usable = [b for b in registered if not b.fenced]
    if replication_factor > len(usable):
        raise PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): the target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{len(usable)} broker(s) are registered and unfenced.")
    n = len(usable)
    start = rng.randrange(n) if start_index is None else start_index % n
    shift = rng.randrange(n) if replica_shift is None else replica_shift
    racks = {b.id: b.rack for b in usable if b.rack is not None}
    if len(racks) == n:
        return _rack_aware(racks, num_partitions, replication_factor, start, shift,
                           start_partition_id)
    ids = [b.id for b in usable]
    return _rack_unaware(ids, num_partitions, replication_factor, start, shift,
                         start_partition_id)


def rack_alternated_broker_list(racks: dict[int, str]) -> list[int]:
    """Brokers taken one per rack in turn: racks in name order, each rack's brokers by id.

    {0: r1, 1: r1, 2: r1, 3: r2, 4: r2, 5: r2} gives [0, 3, 1, 4, 2, 5]. A rack that runs
    out of brokers is skipped, so unequal racks still yield every broker once.
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id], []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max((len(c) for c in columns), default=0)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def validate_replica_assignment(
    assignment: Sequence[tuple[int, Sequence[int]]],
    brokers: Iterable[UsableBroker],
    *,
    start_partition_id: int = 0,
    replication_factor: int | None = None,
) -> list[tuple[int, ...]]:
    """Check a manual replica assignment and return it in partition order.

    `assignment` is CreateTopics' (partition_index, broker_ids) pairs; CreatePartitions
    passes start_partition_id (the partitions the topic has) and the topic's replication
    factor, which every new partition must match. Like Kafka's `ReplicationControlManager`:
    a repeated or missing partition, an empty replica list, an unregistered broker, a
    broker named twice, or replica lists of different lengths answer
    INVALID_REPLICA_ASSIGNMENT; a partition whose brokers are all fenced answers
    INVALID_REPLICATION_FACTOR, as the placer would.
    """
    registered = {b.id: b for b in _by_id(brokers)}
    by_partition: dict[int, tuple[int, ...]] = {}
    for partition_index, broker_ids in assignment:
        if partition_index in by_partition:
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Found multiple manual partition assignments for partition {partition_index}.")
        by_partition[partition_index] = tuple(broker_ids)
    if not by_partition:
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "The manual replica assignment names no partition.")
    expected = range(start_partition_id, start_partition_id + len(by_partition))
    if sorted(by_partition) != list(expected):
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Partitions should be a consecutive integer sequence starting at "
            f"{start_partition_id}; got {sorted(by_partition)}.")
    result = []
    for partition_index in expected:
        replicas = by_partition[partition_index]
        if not replicas:
            raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual assignment of partition {partition_index} "
                                 "includes an empty replica list.")
        for broker_id in replicas:
            if broker_id not in registered:
                raise PlacementError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual assignment of partition {partition_index} includes broker "
                    f"{broker_id}, but no such broker is registered.")
        if len(set(replicas)) != len(replicas):
            twice = sorted({b for b in replicas if replicas.count(b) > 1})
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual assignment of partition {partition_index} includes broker(s) "
                f"{twice} more than once.")
        if replication_factor is None:
            replication_factor = len(replicas)
        elif len(replicas) != replication_factor:
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual assignment of partition {partition_index} has {len(replicas)} "
                f"replica(s), but this is not consistent with the other partitions, which "
                f"have {replication_factor} replica(s).")
        if all(registered[b].fenced for b in replicas):
            raise PlacementError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate partition {partition_index} {len(replicas)} time(s): "
                "all of its brokers are fenced.")
        result.append(replicas)
    return result


def _by_id(brokers: Iterable[UsableBroker]) -> list[UsableBroker]:
    ordered = sorted(brokers, key=lambda b: b.id)
    for a, b in zip(ordered, ordered[1:]):
        if a.id == b.id:
            raise ValueError(f"broker {a.id} is listed twice")
    return ordered


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # the offset is never 0 (that is the first replica) and runs over 1..n-1 as j grows
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(ids: list[int], num_partitions: int, rf: int, start: int, shift: int,
                  start_partition_id: int) -> list[tuple[int, ...]]:
    n = len(ids)
    result = []
    for partition_id in range(start_partition_id, start_partition_id + num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start) % n
        result.append((ids[first],) + tuple(
            ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)))
    return result


def _rack_aware(racks: dict[int, str], num_partitions: int, rf: int, start: int,
                shift: int, start_partition_id: int) -> list[tuple[int, ...]]:
    arranged = rack_alternated_broker_list(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    result = []
    for partition_id in range(start_partition_id, start_partition_id + num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start) % n
        replicas = [arranged[first]]
        racks_used = {racks[arranged[first]]}
        k = 0
        for _ in range(rf - 1):
            # terminates: as k grows the index visits every other broker, and one of them
            # is unused and (while a rack is empty) on an empty rack
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                if rack in racks_used and len(racks_used) < num_racks:
                    continue
                if broker in replicas:
                    continue
                replicas.append(broker)
                racks_used.add(rack)
                break
        result.append(tuple(replicas))
    return result
