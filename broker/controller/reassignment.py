"""Partition reassignment (KIP-455), the controller's side: pure, on a `Batch`.

Owns `alter_partition_reassignments` (AlterPartitionReassignments), `ongoing` (what
ListPartitionReassignments lists) and `maybe_complete` (called after each ISR change).

As Kafka's ReplicationControlManager does it, with the records Kafka writes:

- **Start**: a partition with replicas R moving to target T gets one PartitionChangeRecord:
  replicas T followed by those of R not in T, adding_replicas T - R, removing_replicas
  R - T. The brokers in T - R open the replica and fetch from the leader (broker.broker's
  `_sync_topic` follows any replica set).
- **Complete**: once every replica of T is in the ISR (its leader's AlterPartition says
  so), one record sets replicas T, the ISR less the removed, empty adding and removing
  lists, and a new leader from T when the old one is leaving. The removed brokers drop the
  replica. A target with nothing to add (T within R) completes at once.
- **Cancel** (replicas null): back to R (the replicas less those being added), the ISR
  less the added; NO_REASSIGNMENT_IN_PROGRESS when there is none.
- **A new target for a partition already moving** starts from R, as Kafka does.
- **Bad input**, each refused alone with nothing changed: an empty or duplicated replica
  list, or a broker that is not registered: INVALID_REPLICA_ASSIGNMENT; an unknown topic or
  partition: UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Collection, Sequence

from broker.controller.controller_result import Batch, ControllerResult, error, get
from broker.controller.election import (
    Election, PartitionChangeRecord, PartitionRegistration, build_change,
)
from protocol.errors import ErrorCode

E = ErrorCode


def alter_partition_reassignments(batch: Batch, body: Any, min_isr_of) -> ControllerResult:
    """`min_isr_of(image, topic, partition)`: the partition's effective min.insync.replicas."""
    responses = []
    for t in body.topics:
        out = []
        for p in t.partitions:
            code, message = _alter_one(batch, t.name, p.partition_index,
                                       get(p, "replicas"), min_isr_of)
            out.append({"partition_index": p.partition_index, **error(code, message)})
        responses.append({"name": t.name, "partitions": out})
    return batch.result({"throttle_time_ms": 0, **error(E.NONE), "responses": responses})


def _alter_one(batch: Batch, topic_name: str, index: int, target: Sequence[int] | None,
               min_isr_of) -> tuple[ErrorCode, str | None]:
    image = batch.image
    topic = image.topic(topic_name)
    partition = topic.partitions.get(index) if topic is not None else None
    if topic is None or partition is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION, None
    original = tuple(r for r in partition.replicas if r not in partition.adding_replicas)
    min_isr = min_isr_of(image, topic_name, partition)
    if target is None:
        if not partition.adding_replicas and not partition.removing_replicas:
            return E.NO_REASSIGNMENT_IN_PROGRESS, (
                f"No reassignment is in progress for {topic_name}-{index}.")
        batch.change(_replica_change(partition, topic.topic_id, index, original, (), (),
                                     image.active_broker_ids(), min_isr))
        return E.NONE, None
    target = tuple(target)
    if not target:
        return E.INVALID_REPLICA_ASSIGNMENT, "The replica list is empty."
    if len(set(target)) != len(target):
        return E.INVALID_REPLICA_ASSIGNMENT, f"The replica list {list(target)} repeats a broker."
    unknown = sorted(r for r in target if r not in image.brokers)
    if unknown:
        return E.INVALID_REPLICA_ASSIGNMENT, f"Broker {unknown[0]} is not registered."
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    active = image.active_broker_ids()
    if not adding:  # nothing to copy: the move is done as soon as it is written
        batch.change(_replica_change(partition, topic.topic_id, index, target, (), (),
                                     active, min_isr))
    else:
        replicas = target + removing
        batch.change(_replica_change(partition, topic.topic_id, index, replicas, adding,
                                     removing, active, min_isr))
    return E.NONE, None


def maybe_complete(batch: Batch, topic_id: uuid.UUID, index: int, min_isr_of) -> None:
    """Finish the partition's reassignment if every target replica is in the ISR now."""
    image = batch.image
    topic = image.topics_by_id.get(topic_id)
    partition = topic.partitions.get(index) if topic is not None else None
    if topic is None or partition is None or not partition.adding_replicas:
        return
    target = tuple(r for r in partition.replicas if r not in partition.removing_replicas)
    if not all(r in partition.isr for r in target):
        return
    batch.change(_replica_change(partition, topic_id, index, target, (), (),
                                 image.active_broker_ids(),
                                 min_isr_of(image, topic.name, partition)))


def _replica_change(partition: PartitionRegistration, topic_id: uuid.UUID, index: int,
                    replicas: tuple[int, ...], adding: tuple[int, ...],
                    removing: tuple[int, ...], active: Collection[int],
                    min_isr: int) -> PartitionChangeRecord:
    """The record giving the partition `replicas` (and the reassignment lists): the ISR
    and ELR keep only replicas still there, and the leader stays unless it is leaving."""
    moved = replace(partition, replicas=replicas,
                    elr=tuple(r for r in partition.elr if r in replicas))
    change = build_change(moved, topic_id, index,
                          is_acceptable_leader=lambda r: r in active and r in replicas,
                          election=Election.ONLINE,
                          target_isr=tuple(r for r in partition.isr if r in replicas),
                          min_isr=min_isr)
    return replace(change or PartitionChangeRecord(topic_id=topic_id, partition_id=index),
                   replicas=replicas, adding_replicas=adding, removing_replicas=removing)


def ongoing(image: Any, topics: Any) -> list[dict]:
    """ListPartitionReassignments' topics: the partitions with a reassignment in progress
    (of `topics`, a request's list, or all of them for None)."""
    wanted: dict[str, set[int]] | None = (
        None if topics is None else {t.name: set(t.partition_indexes) for t in topics})
    out = []
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        if wanted is not None and topic.name not in wanted:
            continue
        parts = [{"partition_index": i, "replicas": list(p.replicas),
                  "adding_replicas": list(p.adding_replicas),
                  "removing_replicas": list(p.removing_replicas)}
                 for i, p in sorted(topic.partitions.items())
                 if (p.adding_replicas or p.removing_replicas)
                 and (wanted is None or i in wanted[topic.name])]
        if parts:
            out.append({"name": topic.name, "partitions": parts})
    return out
