"""The replication state of one partition on one broker: leader or follower, the ISR, the
high watermark, and what the leader knows of each follower. Pure: time is an argument.

Owns `PartitionState` (Kafka's `Partition` minus the log: its `maybeIncrementLeaderHW`,
`maybeShrinkIsr`, `maybeExpandIsr` and `updateFollowerFetchState`), `ReplicaProgress` and
`PendingIsrChange`. The trio side (broker.replication.manager) feeds it fetches, appends
and metadata, and carries the ISR changes it proposes to the controller.

The rules, with their triggers and edge cases:

**The high watermark** (HW) is the offset below which every record is on every member of
the ISR. As leader: HW = min(leader LEO, LEO of each follower in the *maximal* ISR), and it
never goes down while this broker leads. It is recomputed when the leader appends (with
only itself in the ISR and a minimum of one, the HW follows the LEO at once), when a
follower's fetch reports a new LEO, and when the ISR changes. It does not advance while
the committed ISR is below the effective min.insync.replicas (the topic's, capped at the
replica count: Kafka's effectiveMinIsr, so a single replica still advances it): Kafka's
"strict min ISR" rule (KAFKA-15583), on which KIP-966's eligible leader replicas rest. A
replica that leaves the ISR while the ISR is below the minimum holds every record below
the HW, since the HW stopped there, so the controller may elect it (broker.controller.
election). The maximal ISR is the committed ISR plus a replica
whose expansion is in flight: the HW waits for a joining replica as soon as the leader
has asked for it, because the controller may commit it at any moment, and a shrink counts
only once committed, because until then the controller still holds the larger ISR and
could elect any of its members (KIP-497's "maximal ISR").
A follower's HW is min(the leader's HW in its last fetch response, its own LEO).

**A follower's progress.** The leader learns a follower's LEO from the fetch offset of
each fetch (the follower has everything below it). The follower is caught up at the fetch
if the fetch offset reaches the leader's LEO at that moment; or, if it reaches the LEO the
leader had at the follower's previous fetch, it was caught up at that previous fetch
(Kafka's `lastCaughtUpTimeMs` rule, which keeps a follower fetching steadily behind a
steady stream of appends in sync).

**Shrinking the ISR.** A follower in the ISR is out of sync when its LEO is below the
leader's and it has not been caught up for more than `replica.lag.time.max.ms`: it is
stuck or dead. The leader proposes the ISR without it; never an empty ISR (the leader
stays).

**Expanding the ISR.** A follower outside the ISR is proposed back when its LEO reaches
both the HW and the offset where the current leader epoch began (so it holds every
record this leader wrote; KIP-101).

**One change in flight.** A proposal carries the partition epoch it was made against;
while it waits for the controller no other is made. The controller's answer (or the
metadata record it commits) settles it. Only a refusal saying the controller did not
apply it (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED) may drop it, to be proposed again
from the state the metadata then shows. Any other outcome -- no answer, or
FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION, which the retry of a request the controller
did apply also gets -- must leave it pending (send it again): a dropped expansion stops
holding the HW while the controller may already count the joining replica in the ISR
and elect it (Kafka's handleAlterPartitionError). A new leader epoch or partition epoch
from the metadata always wins over anything pending.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker import planted

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one follower, from its fetches."""
    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET
    broker_epoch: int = -1  # from the fetch's ReplicaState (v15+); -1 when not sent
    log_start_offset: int = UNKNOWN_OFFSET  # the follower's own, from its fetches


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An AlterPartition the leader has sent (or is about to) and not yet seen settled."""
    kind: str  # "shrink" or "expand"
    leader_epoch: int
    partition_epoch: int
    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class FetchUpdate:
    """What a follower's fetch changed at the leader."""
    high_watermark_changed: bool
    expand: PendingIsrChange | None = None
    log_start_changed: bool = False  # the follower's log start moved (DeleteRecords waits)


@dataclass
class PartitionState:
    node_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()  # as committed by the controller
    high_watermark: int = 0
    leader_epoch_start_offset: int = UNKNOWN_OFFSET  # the LEO when this leadership began
    pending: PendingIsrChange | None = None
    followers: dict[int, ReplicaProgress] = field(default_factory=dict)
    min_insync_replicas: int = 1  # the topic's min.insync.replicas

    # -- roles ---------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    def become_leader(self, *, leader_epoch: int, partition_epoch: int,
                      replicas: tuple[int, ...], isr: tuple[int, ...], log_end_offset: int,
                      now_ms: int) -> bool:
        """This broker leads from `leader_epoch`. Returns True when the HW moved.

        Followers start with an unknown LEO. Those in the ISR count as caught up now
        (Kafka resets them so): a member gets a full `replica.lag.time.max.ms` to fetch
        from the new leader before it can be dropped. The HW carries over (a new leader
        may know an older HW than the last one did; it catches up as followers fetch)."""
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_id = self.node_id
        self.leader_epoch = leader_epoch
        self._take_metadata(partition_epoch, replicas, isr)
        if new_epoch:
            self.leader_epoch_start_offset = log_end_offset
            self.pending = None
            self.followers = {
                r: ReplicaProgress(r, last_caught_up_ms=now_ms if r in isr else 0)
                for r in replicas if r != self.node_id}
        self.high_watermark = min(self.high_watermark, log_end_offset)
        return self.maybe_increment_high_watermark(log_end_offset)

    def become_follower(self, *, leader_id: int, leader_epoch: int, partition_epoch: int,
                        replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        """Another broker (or none, -1) leads: what this one knew of followers is dropped."""
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self._take_metadata(partition_epoch, replicas, isr)
        self.pending = None
        self.followers = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET

    def update_metadata(self, *, partition_epoch: int, replicas: tuple[int, ...],
                        isr: tuple[int, ...], log_end_offset: int) -> bool:
        """The same leadership, a new partition epoch (an ISR or replica change committed
        by the controller). Returns True when the HW moved (a shrink can let it advance)."""
        self._take_metadata(partition_epoch, replicas, isr)
        if not self.is_leader:
            return False
        for r in replicas:
            if r != self.node_id and r not in self.followers:
                self.followers[r] = ReplicaProgress(r)
        for r in list(self.followers):
            if r not in replicas:
                del self.followers[r]
        return self.maybe_increment_high_watermark(log_end_offset)

    def _take_metadata(self, partition_epoch: int, replicas: tuple[int, ...],
                       isr: tuple[int, ...]) -> None:
        if partition_epoch < self.partition_epoch:
            return  # an older record replayed after a newer answer: keep the newer
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        if self.pending is not None and partition_epoch > self.pending.partition_epoch:
            self.pending = None  # the controller moved on: what it holds is the truth
        self.partition_epoch = partition_epoch

    # -- the high watermark ----------------------------------------------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is not None and self.pending.kind == "expand":
            return self.pending.new_isr
        return self.isr

    def maybe_increment_high_watermark(self, log_end_offset: int) -> bool:
        """As leader: raise the HW to the least LEO over the maximal ISR, never lower it;
        not at all while the committed ISR is below the effective min.insync.replicas."""
        if not self.is_leader or self.under_min_isr():
            return False
        low = log_end_offset
        for r in (() if planted.on("hw-ignores-isr") else self.maximal_isr):
            if r == self.node_id:
                continue
            progress = self.followers.get(r)
            leo = progress.log_end_offset if progress is not None else UNKNOWN_OFFSET
            if leo == UNKNOWN_OFFSET:
                return False  # a member not heard from yet holds the HW where it is
            low = min(low, leo)
        if low > self.high_watermark:
            self.high_watermark = low
            return True
        return False

    def on_leader_append(self, log_end_offset: int) -> bool:
        return self.maybe_increment_high_watermark(log_end_offset)

    def on_follower_high_watermark(self, leader_high_watermark: int,
                                   log_end_offset: int) -> bool:
        """As follower: the HW from a fetch response, bounded by what this log holds."""
        new = min(leader_high_watermark, log_end_offset)
        if new != self.high_watermark:
            self.high_watermark = new
            return True
        return False

    def on_truncation(self, log_end_offset: int) -> None:
        self.high_watermark = min(self.high_watermark, log_end_offset)

    def restore_high_watermark(self, checkpointed: int, log_end_offset: int) -> None:
        """At start-up, from the checkpoint file: never past the recovered log."""
        self.high_watermark = max(0, min(checkpointed, log_end_offset))

    # -- followers -------------------------------------------------------------------------

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, log_end_offset: int,
                          now_ms: int, broker_epoch: int = -1,
                          log_start_offset: int = UNKNOWN_OFFSET) -> FetchUpdate | None:
        """A fetch from follower `replica_id` at `fetch_offset`, the leader's LEO being
        `log_end_offset`. None when that broker is not a replica of this partition."""
        progress = self.followers.get(replica_id)
        if progress is None or not self.is_leader:
            return None
        if fetch_offset >= log_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif (progress.last_fetch_leader_leo != UNKNOWN_OFFSET
              and fetch_offset >= progress.last_fetch_leader_leo):
            progress.last_caught_up_ms = max(progress.last_caught_up_ms,
                                             progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_leo = log_end_offset
        progress.last_fetch_ms = now_ms
        if broker_epoch >= 0:
            progress.broker_epoch = broker_epoch
        start_changed = log_start_offset > progress.log_start_offset
        if start_changed:
            progress.log_start_offset = log_start_offset
        expand = self.maybe_expand(replica_id)
        return FetchUpdate(self.maybe_increment_high_watermark(log_end_offset), expand,
                           start_changed)

    def low_watermark(self, log_start_offset: int) -> int:
        """The least log start offset of the in-sync replicas, this leader's being
        `log_start_offset` (Kafka's lowWatermarkIfLeader): what DeleteRecords answers once
        it reaches the offset asked. A follower not heard from counts as -1."""
        followers = [self.followers[r].log_start_offset if r in self.followers
                     else UNKNOWN_OFFSET for r in self.isr if r != self.node_id]
        return min([log_start_offset, *followers])

    def on_follower_idle_fetch(self, replica_id: int, fetch_ms: int,
                               broker_epoch: int = -1) -> None:
        """Follower `replica_id` fetched at `fetch_ms` with this partition in its fetch
        session and nothing to read (KIP-227: the fetch did not name it, and it had no
        append since its last read): it was caught up then, at the offset it last gave.
        What Kafka's updateFollowerFetchState records for every partition of a session at
        every fetch, recorded only when needed (before the next fetch that names the
        partition, and before the ISR is checked)."""
        progress = self.followers.get(replica_id)
        if (progress is None or not self.is_leader
                or progress.log_end_offset == UNKNOWN_OFFSET
                or fetch_ms <= progress.last_fetch_ms):
            return
        progress.last_caught_up_ms = max(progress.last_caught_up_ms, fetch_ms)
        progress.last_fetch_ms = fetch_ms
        progress.last_fetch_leader_leo = progress.log_end_offset
        if broker_epoch >= 0:
            progress.broker_epoch = broker_epoch

    def maybe_expand(self, replica_id: int) -> PendingIsrChange | None:
        """Propose the ISR with follower `replica_id` back in, when it is a replica outside
        the ISR whose last fetch reached the HW and this leader's first offset."""
        progress = self.followers.get(replica_id)
        if (progress is None or not self.is_leader or replica_id in self.isr
                or self.pending is not None):
            return None
        if (progress.log_end_offset < self.high_watermark
                or progress.log_end_offset < self.leader_epoch_start_offset):
            return None
        new_isr = tuple(r for r in self.replicas if r in self.isr or r == replica_id)
        self.pending = PendingIsrChange("expand", self.leader_epoch, self.partition_epoch,
                                        self.isr, new_isr,
                                        f"broker {replica_id} caught up to the high watermark")
        return self.pending

    def out_of_sync_replicas(self, log_end_offset: int, now_ms: int,
                             max_lag_ms: int) -> list[int]:
        """Followers in the ISR that are behind and have not been caught up for longer than
        `max_lag_ms` (replica.lag.time.max.ms)."""
        if not self.is_leader:
            return []
        out = []
        for r in self.isr:
            progress = self.followers.get(r)
            if r == self.node_id or progress is None:
                continue
            if (progress.log_end_offset != log_end_offset
                    and now_ms - progress.last_caught_up_ms > max_lag_ms):
                out.append(r)
        return out

    def maybe_shrink(self, log_end_offset: int, now_ms: int,
                     max_lag_ms: int) -> PendingIsrChange | None:
        """Propose the ISR without its out-of-sync followers (one change at a time)."""
        if self.pending is not None:
            return None
        gone = self.out_of_sync_replicas(log_end_offset, now_ms, max_lag_ms)
        if not gone:
            return None
        new_isr = tuple(r for r in self.isr if r not in gone)
        self.pending = PendingIsrChange(
            "shrink", self.leader_epoch, self.partition_epoch, self.isr, new_isr,
            f"brokers {gone} not caught up for over {max_lag_ms} ms")
        return self.pending

    def on_alter_partition_result(self, change: PendingIsrChange, *, error: bool,
                                  leader_epoch: int = -1, partition_epoch: int = -1,
                                  isr: tuple[int, ...] = (), log_end_offset: int = 0) -> bool:
        """The controller's answer to `change`. On success the ISR it returns is taken
        (if the metadata has not already moved past it); on an error the change is dropped
        -- pass `error=True` only when the controller says it did not apply the change
        (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED), never for a missing answer or
        another refusal (see the module's docstring). Returns True when the HW moved."""
        if self.pending is not change:
            return False  # superseded by the metadata meanwhile
        self.pending = None
        if error or leader_epoch != self.leader_epoch:
            return False
        self._take_isr(partition_epoch, tuple(isr))
        return self.maybe_increment_high_watermark(log_end_offset)

    def _take_isr(self, partition_epoch: int, isr: tuple[int, ...]) -> None:
        if partition_epoch >= self.partition_epoch:
            self.isr = isr
            self.partition_epoch = partition_epoch

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas, at most the replica count (Kafka's effectiveMinIsr)."""
        return min(self.min_insync_replicas, max(len(self.replicas), 1))

    def under_min_isr(self) -> bool:
        """The committed ISR is below the effective min.insync.replicas: acks=all produces
        are refused and the HW stays where it is."""
        return len(self.isr) < self.effective_min_isr

    def set_min_insync_replicas(self, min_insync_replicas: int, log_end_offset: int) -> bool:
        """The topic's min.insync.replicas changed. Returns True when the HW moved (a
        lower minimum may let it)."""
        self.min_insync_replicas = min_insync_replicas
        return self.maybe_increment_high_watermark(log_end_offset)
