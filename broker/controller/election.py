"""Partition leader election: the controller's rules for a partition's leader, ISR and
eligible leader replicas.

Owns `PartitionRegistration` (a partition's replicas, ISR, ELR, leader and epochs, as the
metadata image holds it), `PartitionChangeRecord` (the change the controller writes to the
metadata log, with the fields of the record of that name) and the rules that produce one,
after Kafka's `PartitionChangeBuilder` and `ReplicationControlManager`, with KIP-966's
eligible leader replicas (ELR) as Kafka 4 runs them:

- The high watermark only advances while the ISR holds at least min.insync.replicas
  members (the *effective* minimum: the topic's min.insync.replicas, capped at the
  partition's replica count; broker.replication.state keeps that rule), so a replica that
  leaves the ISR while the ISR is below it still holds every record below the HW.
- Every change computes the ELR: when the new ISR is below the minimum, the replicas that
  were in the ISR or the ELR and are not in the new ISR make up the ELR (less a broker that
  registered after an unclean shutdown); when it reaches the minimum, the ELR empties.
  The ISR may become empty: a fenced last member leaves it, and goes into the ELR.
- A clean election (`Election.ONLINE`) keeps the current leader while it is a valid one,
  and otherwise takes the first valid replica in replica order: valid means active and in
  the ISR, or, when the ISR is empty, in the ELR. A leader taken from the ELR makes the ISR
  itself alone and leaves the ELR.
- With the ISR and the ELR both empty, the last known leader (`last_known_elr`, Kafka's
  "balanced recovery" with useLastKnownLeaderInBalancedRecovery, its default) is elected if
  it is active, as an unclean election: its log may lack records, but no replica is known
  to hold more. A registration after an unclean shutdown has taken it out of the ELR, so
  this is the choice when every replica that could be elected lost its unsynced tail.
- An unclean election (`Election.UNCLEAN`, only with unclean.leader.election.enable)
  falls back to the first active replica; the ISR becomes that leader alone, its recovery
  state RECOVERING (it may lack committed records), and the ELR empties.
- With no candidate the leader is -1 (the partition is offline).
- A preferred election (`Election.PREFERRED`, ElectLeaders and auto.leader.rebalance.enable)
  moves leadership to the first replica when it is a valid leader.
- A fenced broker, one in controlled shutdown, and one whose log directory failed leaves
  every ISR it is in, the last member too, and loses every leadership it holds; it stays
  in (or joins) the ELR, since its log is whole. A broker that registers after an unclean
  shutdown (`unclean_shutdown`) leaves the ISRs and the ELRs, since it lost what it had
  not fsynced.
- `last_known_elr` holds the leader the partition had when its ISR first became empty,
  and empties once it has a leader again.

"Active" means registered, unfenced, not in controlled shutdown and with a log directory
online (image.BrokerRegistration.active): callers pass the set of active broker ids, and
the effective min.insync.replicas as `min_isr`. Replaying a record
(`PartitionRegistration.merge`) bumps the partition epoch on every change and the leader
epoch when the record names a leader, which it does on every change of leader. An
ISR-only change does not bump the leader epoch, as in Kafka since metadata version 3.6-IV0
(KAFKA-15021). Reassignment (adding and removing replicas), assigning replicas to log
directories (KIP-858) and KIP-966's unclean recovery by inspecting the replicas' logs are
out of scope; their fields stay unset. A partition that went offline with a non-empty ISR
before these rules (an older metadata log) keeps that ISR member as its candidate.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

NO_LEADER = -1
NO_LEADER_CHANGE = -2
# Kafka's DirectoryId.UNASSIGNED: a replica whose broker has not named its directory yet
UNASSIGNED_DIR = uuid.UUID(int=0)


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
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    directories: tuple[uuid.UUID, ...] | None = None  # KIP-858, one per replica


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
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966)
    last_known_elr: tuple[int, ...] = ()  # the last leader, while the ISR is empty
    # a reassignment in progress (KIP-455): replicas joining, and leaving once they have
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    # the log directory of each replica, in replica order (KIP-858); empty when none is
    # known, UNASSIGNED_DIR for a replica whose broker has not said (image.py)
    directories: tuple[uuid.UUID, ...] = ()

    def directory_of(self, broker_id: int) -> uuid.UUID | None:
        """The directory the metadata places `broker_id`'s replica in, if it says."""
        if broker_id not in self.replicas or len(self.directories) != len(self.replicas):
            return None
        return self.directories[self.replicas.index(broker_id)]

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
        if record.elr is not None:
            changed = replace(changed, elr=record.elr)
        if record.last_known_elr is not None:
            changed = replace(changed, last_known_elr=record.last_known_elr)
        if record.replicas is not None:
            changed = replace(changed, replicas=record.replicas)
            if record.directories is None and self.directories:
                # Kafka's rule: a replica that stays keeps its directory, a new one has
                # none yet until its broker assigns it
                known = dict(zip(self.replicas, self.directories))
                changed = replace(changed, directories=tuple(
                    known.get(r, UNASSIGNED_DIR) for r in record.replicas))
        if record.directories is not None:
            changed = replace(changed, directories=record.directories)
        if record.adding_replicas is not None:
            changed = replace(changed, adding_replicas=record.adding_replicas)
        if record.removing_replicas is not None:
            changed = replace(changed, removing_replicas=record.removing_replicas)
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
    min_isr: int = 1,
    unclean_shutdown: Collection[int] = (),
) -> PartitionChangeRecord | None:
    """The record that moves `partition` to `target_isr` with a leader chosen by
    `election`, or None when nothing would change (Kafka's PartitionChangeBuilder.build).
    `min_isr` is the partition's effective min.insync.replicas; `unclean_shutdown` the
    brokers that may not stay in its ELR. The rules below are built on this."""
    isr = tuple(partition.isr if target_isr is None else target_isr)
    elr = _target_elr(partition, isr, min_isr, unclean_shutdown)
    leader, unclean = _elect(partition, isr, elr, is_acceptable_leader, election)
    new_leader = NO_LEADER_CHANGE
    new_isr: tuple[int, ...] | None = None
    recovery = -1
    if leader != partition.leader:
        new_leader = leader
        if leader in elr:
            # an eligible leader replica holds every record below the HW: it alone is
            # in sync now
            isr = (leader,)
            elr = tuple(r for r in elr if r != leader)
        elif unclean:
            # the new leader may lack records the old ISR committed: it alone is in sync,
            # and no other replica is known to hold what it lacks
            new_isr = (leader,)
            elr = ()
            if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                recovery = LeaderRecoveryState.RECOVERING.value
    new_elr = elr if elr != partition.elr else None
    if new_isr is None and isr != partition.isr:
        new_isr = isr
    last_known = _last_known_elr(partition, new_isr, new_leader)
    if (new_leader == NO_LEADER_CHANGE and new_isr is None and new_elr is None
            and last_known is None and recovery == -1):
        return None
    return PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id, isr=new_isr,
                                 leader=new_leader, leader_recovery_state=recovery,
                                 elr=new_elr, last_known_elr=last_known)


def elect_leader(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    active: Collection[int],
    *,
    min_isr: int = 1,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """Give the partition a leader if its leader is gone: after a broker is unfenced, or
    for an offline partition when unclean.leader.election.enable is turned on or
    ElectLeaders asks for an UNCLEAN election. A leader that is still in the ISR and
    active stays, so None for a partition that has one (ELECTION_NOT_NEEDED)."""
    return build_change(
        partition, topic_id, partition_id,
        is_acceptable_leader=lambda r: r in active, min_isr=min_isr,
        election=Election.UNCLEAN if unclean_leader_election_enable else Election.ONLINE)


def elect_preferred_leader(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    active: Collection[int],
    *,
    min_isr: int = 1,
) -> PartitionChangeRecord | None:
    """Move leadership to the preferred (first) replica if it is a valid leader (in the
    ISR and active).

    None when nothing changes: ElectLeaders answers ELECTION_NOT_NEEDED when the preferred
    replica already leads, and PREFERRED_LEADER_NOT_AVAILABLE otherwise.
    """
    return build_change(partition, topic_id, partition_id,
                        is_acceptable_leader=lambda r: r in active, min_isr=min_isr,
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
    min_isr: int = 1,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """The broker missed its session: it leaves the ISR (into the ELR when the ISR is
    then below `min_isr`) and, where it led, the leadership."""
    return _remove_broker(partition, topic_id, partition_id, broker_id, active, min_isr,
                          unclean_leader_election_enable, lost_its_tail=False)


def controlled_shutdown(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    broker_id: int,
    active: Collection[int],
    *,
    min_isr: int = 1,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """The broker asked to shut down (want_shut_down): its leaderships move to the other
    valid leaders before it stops, and it leaves the ISRs, as it will stop fetching. A
    partition with no other valid leader goes offline rather than lose committed records,
    unless unclean election is enabled; the broker, in its ELR, leads it again when it
    comes back."""
    return _remove_broker(partition, topic_id, partition_id, broker_id, active, min_isr,
                          unclean_leader_election_enable, lost_its_tail=False)


def unclean_shutdown(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    broker_id: int,
    active: Collection[int],
    *,
    min_isr: int = 1,
    unclean_leader_election_enable: bool = False,
) -> PartitionChangeRecord | None:
    """The broker registered again after an unclean shutdown (Kafka's
    handleBrokerUncleanShutdown): it may have lost records it had not fsynced, so it
    leaves the ISR and the ELR, and any leadership it still held."""
    return _remove_broker(partition, topic_id, partition_id, broker_id, active, min_isr,
                          unclean_leader_election_enable, lost_its_tail=True)


def change_isr(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    new_isr: Sequence[int],
    active: Collection[int],
    *,
    min_isr: int = 1,
) -> PartitionChangeRecord | None:
    """A leader's AlterPartition: the ISR becomes `new_isr`; the leader stays if it is in
    it, and an ISR-only change bumps the partition epoch alone. A shrink below `min_isr`
    puts the replicas leaving into the ELR; an expansion to it empties the ELR."""
    return build_change(partition, topic_id, partition_id,
                        is_acceptable_leader=lambda r: r in active, target_isr=new_isr,
                        min_isr=min_isr)


def clear_elr(partition: PartitionRegistration, topic_id: uuid.UUID,
              partition_id: int) -> PartitionChangeRecord | None:
    """min.insync.replicas changed: the ELR was kept under the old minimum, whose HW rule
    no longer holds, so it and the last known leader are forgotten (Kafka 4's
    ClearElrRecord, written here as a PartitionChangeRecord)."""
    if not partition.elr and not partition.last_known_elr:
        return None
    return PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id,
                                 elr=(), last_known_elr=())


def _remove_broker(partition: PartitionRegistration, topic_id: uuid.UUID, partition_id: int,
                   broker_id: int, active: Collection[int], min_isr: int,
                   unclean_election: bool, *, lost_its_tail: bool,
                   ) -> PartitionChangeRecord | None:
    return build_change(
        partition, topic_id, partition_id,
        is_acceptable_leader=lambda r: r != broker_id and r in active,
        election=Election.UNCLEAN if unclean_election else Election.ONLINE,
        target_isr=tuple(r for r in partition.isr if r != broker_id), min_isr=min_isr,
        unclean_shutdown=(broker_id,) if lost_its_tail else ())


def _target_elr(partition: PartitionRegistration, isr: tuple[int, ...], min_isr: int,
                unclean_shutdown: Collection[int]) -> tuple[int, ...]:
    """The ELR that goes with the ISR `isr` (Kafka's maybePopulateTargetElr), in replica
    order: empty once the ISR reaches the minimum; below it, whatever was in the ISR or
    the ELR and is not in the ISR now, less the brokers that shut down uncleanly."""
    if len(isr) >= min_isr:
        return ()
    candidates = set(partition.isr) | set(partition.elr)
    return tuple(r for r in partition.replicas
                 if r in candidates and r not in isr and r not in unclean_shutdown)


def _last_known_elr(partition: PartitionRegistration, new_isr: tuple[int, ...] | None,
                    new_leader: int) -> tuple[int, ...] | None:
    """The last known leader to record, or None to leave it (Kafka's
    maybeUpdateLastKnownLeader): the leader, when the ISR first becomes empty; nothing,
    once the partition has a leader again."""
    if new_isr == () and partition.leader != NO_LEADER:
        return None if partition.last_known_elr == (partition.leader,) else (partition.leader,)
    keeps_a_leader = new_leader >= 0 or (partition.leader != NO_LEADER
                                         and new_leader != NO_LEADER)
    if keeps_a_leader and partition.last_known_elr:
        return ()
    return None


def _elect(partition: PartitionRegistration, isr: tuple[int, ...], elr: tuple[int, ...],
           acceptable: Callable[[int], bool], election: Election) -> tuple[int, bool]:
    """(leader, whether the election was unclean)."""
    def valid(r: int) -> bool:
        return (r in isr or (not isr and r in elr)) and acceptable(r)

    if election is Election.PREFERRED and valid(partition.preferred_leader):
        return partition.preferred_leader, False
    if valid(partition.leader):
        return partition.leader, False
    for replica in partition.replicas:
        if valid(replica):
            return replica, False
    last_known = partition.last_known_elr
    if not isr and not elr and len(last_known) == 1 and acceptable(last_known[0]):
        return last_known[0], True
    if election is Election.UNCLEAN:
        for replica in partition.replicas:
            if acceptable(replica):
                return replica, True
    return NO_LEADER, False
