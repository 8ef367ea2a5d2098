"""Partition leader election: the controller's rules for a partition's leader and ISR.

Owns `PartitionRegistration` (a partition's replicas, ISR, leader and epochs, as the
metadata image holds it), `PartitionChangeRecord` (the change the controller writes to the
metadata log, with the fields of the record of that name) and the rules that produce one,
after Kafka's `PartitionChangeBuilder` and `ReplicationControlManager`:

- A clean election (`Election.ONLINE`) keeps the current leader while it is in the ISR
  and active, and otherwise takes the first replica, in replica order, that is.
- An unclean election (`Election.UNCLEAN`, only with unclean.leader.election.enable)
  falls back to the first active replica outside the ISR; the ISR becomes that leader
  alone and its recovery state RECOVERING, since it may lack committed records.
- With no candidate the leader is -1 (the partition is offline) and the ISR keeps its last
  member, so that the replica which has every committed record is known when it returns.
  Kafka 3.7+ also tracks eligible leader replicas (KIP-966); that is out of scope here.
- A preferred election (`Election.PREFERRED`, ElectLeaders and auto.leader.rebalance.enable)
  moves leadership to the first replica when it is in the ISR and active.
- A fenced broker, one in controlled shutdown, and one whose log directory failed leaves
  every ISR it is in (unless it is the last member) and loses every leadership it holds.

"Active" means registered, unfenced, not in controlled shutdown and with a log directory
online (image.BrokerRegistration.active): callers pass the set of active broker ids. Replaying a record (`PartitionRegistration.merge`) bumps the
partition epoch on every change and the leader epoch when the record names a leader, which
it does on every change of leader. An ISR-only change does not bump the leader epoch, as in
Kafka since metadata version 3.6-IV0 (KAFKA-15021). Reassignment (adding and removing
replicas) and assigning replicas to log directories (KIP-858) are out of scope; their
fields stay unset.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

NO_LEADER = -1
NO_LEADER_CHANGE = -2


class LeaderRecoveryState(enum.IntEnum):
    RECOVERED = 0
    RECOVERING = 1


class Election(enum.Enum):
    """Kafka's `PartitionChangeBuilder.Election`."""

    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


@dataclass(frozen=True)
class PartitionChangeRecord:
    """A change to one partition; None and NO_LEADER_CHANGE mean "unchanged"."""

    topic_id: uuid.UUID
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1


def new_partition_isr(replicas: Sequence[int], active: Collection[int]) -> tuple[int, ...]:
    """A new partition's ISR: its active replicas, in replica order (the first leads).
    Placement has already refused a partition with no active replica."""
    isr = tuple(r for r in replicas if r in active)
    if not isr:
        raise ValueError(f"no active broker among replicas {list(replicas)}")
    return isr


@dataclass(frozen=True)
class PartitionRegistration:
    """A partition's state in the metadata image."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED

    @classmethod
    def for_new_partition(cls, replicas: Sequence[int],
                          active: Collection[int]) -> PartitionRegistration:
        """A partition as CreateTopics records it: the ISR is its active replicas, in
        replica order, and the first of them leads. Placement has already refused a
        partition with no active replica."""
        isr = new_partition_isr(replicas, active)
        return cls(replicas=tuple(replicas), isr=isr, leader=isr[0])

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    def offline_replicas(self, active: Collection[int]) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in active)

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after `record`, as replaying the metadata log applies it."""
        changed = replace(self, partition_epoch=self.partition_epoch + 1)
        if record.isr is not None:
            changed = replace(changed, isr=record.isr)
        if record.replicas is not None:
            changed = replace(changed, replicas=record.replicas)
        if record.leader != NO_LEADER_CHANGE:
            changed = replace(changed, leader=record.leader,
                              leader_epoch=self.leader_epoch + 1)
        if record.leader_recovery_state != -1:
            changed = replace(changed, leader_recovery_state=LeaderRecoveryState(
                record.leader_recovery_state))
        return changed


def build_change(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    *,
    is_acceptable_leader: Callable[[int], bool],
    election: Election = Election.ONLINE,
    target_isr: Sequence[int] | None = None,
) -> PartitionChangeRecord | None:
    """The record that moves `partition` to `target_isr` with a leader chosen by
    `election`, or None when nothing would change. The rules below are built on this."""
    isr = tuple(partition.isr if target_isr is None else target_isr)
    if not isr:
        raise ValueError("an ISR is never empty: the last member stays")
    leader, unclean = _elect(partition, isr, is_acceptable_leader, election)
    new_leader = NO_LEADER_CHANGE
    new_isr: tuple[int, ...] | None = None
    recovery = -1
    if leader != partition.leader:
        new_leader = leader
        if unclean:
            # the new leader may lack records the old ISR committed: it alone is in sync
            new_isr = (leader,)
            recovery = LeaderRecoveryState.RECOVERING.value
    if new_isr is None and isr != partition.isr:
        new_isr = isr
    if new_leader == NO_LEADER_CHANGE and new_isr is None and recovery == -1:
        return None
    return PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id, isr=new_isr,
                                 leader=new_leader, leader_recovery_state=recovery)


def elect_leader(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    active: Collection[int],
    *,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """Give the partition a leader if its leader is gone: after a broker is unfenced, or
    for an offline partition when unclean.leader.election.enable is turned on or
    ElectLeaders asks for an UNCLEAN election. A leader that is still in the ISR and
    active stays, so None for a partition that has one (ELECTION_NOT_NEEDED)."""
    return build_change(
        partition, topic_id, partition_id,
        is_acceptable_leader=lambda r: r in active,
        election=Election.UNCLEAN if unclean_leader_election_enable else Election.ONLINE)


def elect_preferred_leader(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    active: Collection[int],
) -> PartitionChangeRecord | None:
    """Move leadership to the preferred (first) replica if it is in the ISR and active.

    None when nothing changes: ElectLeaders answers ELECTION_NOT_NEEDED when the preferred
    replica already leads, and PREFERRED_LEADER_NOT_AVAILABLE otherwise.
    """
    return build_change(partition, topic_id, partition_id,
                        is_acceptable_leader=lambda r: r in active,
                        election=Election.PREFERRED)


def preferred_leader_imbalanced(partition: PartitionRegistration,
                                active: Collection[int]) -> bool:
    """Whether auto.leader.rebalance.enable should run a preferred election here."""
    preferred = partition.preferred_leader
    return partition.leader != preferred and preferred in partition.isr and preferred in active


def fence_broker(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    broker_id: int,
    active: Collection[int],
    *,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """The broker missed its session: it leaves the ISR and, where it led, the leadership."""
    return _remove_broker(partition, topic_id, partition_id, broker_id, active,
                          unclean_leader_election_enable)


def controlled_shutdown(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    broker_id: int,
    active: Collection[int],
    *,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """The broker asked to shut down (want_shut_down): its leaderships move to the other
    active ISR members before it stops, and it leaves the ISRs, as it will stop fetching.
    A partition whose only active ISR member is this broker goes offline rather than
    lose committed records, unless unclean election is enabled."""
    return _remove_broker(partition, topic_id, partition_id, broker_id, active,
                          unclean_leader_election_enable)


def change_isr(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    new_isr: Sequence[int],
    active: Collection[int],
) -> PartitionChangeRecord | None:
    """A leader's AlterPartition: the ISR becomes `new_isr`; the leader stays if it is in
    it, and an ISR-only change bumps the partition epoch alone."""
    return build_change(partition, topic_id, partition_id,
                        is_acceptable_leader=lambda r: r in active, target_isr=new_isr)


def _remove_broker(partition: PartitionRegistration, topic_id: uuid.UUID, partition_id: int,
                   broker_id: int, active: Collection[int], unclean: bool,
                   ) -> PartitionChangeRecord | None:
    isr = tuple(r for r in partition.isr if r != broker_id) or partition.isr
    return build_change(
        partition, topic_id, partition_id,
        is_acceptable_leader=lambda r: r != broker_id and r in active,
        election=Election.UNCLEAN if unclean else Election.ONLINE,
        target_isr=isr)


def _elect(partition: PartitionRegistration, isr: tuple[int, ...],
           acceptable: Callable[[int], bool], election: Election) -> tuple[int, bool]:
    """(leader, whether the election was unclean)."""
    def valid(r: int) -> bool:
        return r in isr and acceptable(r)

    if election is Election.PREFERRED and valid(partition.preferred_leader):
        return partition.preferred_leader, False
    if valid(partition.leader):
        return partition.leader, False
    for replica in partition.replicas:
        if valid(replica):
            return replica, False
    if election is Election.UNCLEAN:
        for replica in partition.replicas:
            if acceptable(replica):
                return replica, True
    return NO_LEADER, False
