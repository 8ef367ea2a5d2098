"""The trio side of replication on one broker (Kafka's ReplicaManager, its ISR expiration
task, AlterPartitionManager and high-watermark checkpoint).

Owns `ReplicaManager`:
- `apply_registration`: a partition's registration in a new metadata image makes the local
  replica a leader (fetching for it stops) or a follower (the fetcher starts over with it,
  truncating first), or updates its ISR;
- `on_follower_fetch`: the leader side of a follower's Fetch; a fetch that advances the HW
  wakes what waits on it (acks=all produces, offset commits, consumers), and one that
  brings a follower back proposes an ISR expansion;
- the ISR expiration loop (every replica.lag.time.max.ms / 2, as Kafka runs it), which
  proposes shrinks;
- the AlterPartition sender: every proposal queued since the last request goes to the
  active controller in one request; the answer settles each. Every committed ISR change
  of a partition this broker leads, asked for or made by the controller, writes one
  `isr_change` event;
- `replication-offset-checkpoint`: every partition's HW, written every
  replica.high.watermark.checkpoint.interval.ms and at shutdown, read at start-up, so a
  restarted leader does not show consumers a HW far behind what they have read.

The rules themselves (HW, lag, one change in flight) are broker.replication.state's.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import trio

from broker import timeouts
from broker import blocking
from broker.controller_channel import ControllerUnavailable
from broker.log.manager import CheckpointError, read_checkpoint, write_checkpoint
from broker.partition import StaleLeaderEpoch
from broker.replication.fetcher import ReplicaFetcherManager
from broker.replication.state import PendingIsrChange
from protocol import messages as m
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.partition import Partition

# the broker (broker.broker.Broker) is typed loosely: it imports this module
Broker = Any

log = logging.getLogger("minibroker.replication")

ALTER_PARTITION_VERSION = 3
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
REFUSED_BACKOFF_S = 0.5
# refusals that mean the change was certainly not applied (Kafka drops the change on these)
_DROP_ON = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})


class ReplicaManager:
    def __init__(self, broker: Broker):
        self.broker = broker
        self.fetchers = ReplicaFetcherManager(broker)
        self._proposals: dict[tuple[str, int], PendingIsrChange] = {}
        self._proposed = trio.Event()
        self._checkpointed: dict[tuple[str, int], int] = {}
        # a refused change is not proposed again before this (trio clock), so a follower the
        # controller will not take yet (still fenced) does not cost a request per fetch
        self._refused_until: dict[tuple[str, int], float] = {}
        self._nursery: trio.Nursery | None = None

    # -- the metadata --------------------------------------------------------------------

    def apply_registration(self, partition: Partition, registration: Any, now_ms: int) -> None:
        """Make the local replica what `registration` (a PartitionRegistration) says."""
        replicas, isr = tuple(registration.replicas), tuple(registration.isr)
        key = (partition.topic, partition.index)
        if registration.leader == self.broker.node_id:
            before, pending = partition.isr, partition.state.pending
            known = partition.partition_epoch_known
            if (not partition.is_leader
                    or partition.leader_epoch != registration.leader_epoch):
                try:
                    moved = partition.make_leader(
                        leader_epoch=registration.leader_epoch,
                        partition_epoch=registration.partition_epoch,
                        replicas=replicas, isr=isr, now_ms=now_ms)
                except StaleLeaderEpoch as e:
                    log.error("%s: the leadership is not taken", e)
                    return
                # synchronous with the role change: no fetch of the old role lands after it
                self.fetchers.remove(key)
                log.debug("%s-%d: leader at epoch %d, ISR %s, HW %d", partition.topic,
                         partition.index, registration.leader_epoch, list(isr),
                         partition.high_watermark)
            else:
                moved = partition.update_isr(partition_epoch=registration.partition_epoch,
                                             replicas=replicas, isr=isr)
            if moved:
                self.broker.notify_data_arrived(*key)
            if known and set(partition.isr) != set(before):
                reason = (pending.reason if pending is not None
                          and set(pending.new_isr) == set(partition.isr)
                          else "changed by the controller (a broker fenced, shut down or "
                               "its log directory failed, or a leader election)")
                self._isr_changed(partition, before, reason)
            return
        if partition.make_follower(leader_id=registration.leader,
                                   leader_epoch=registration.leader_epoch,
                                   partition_epoch=registration.partition_epoch,
                                   replicas=replicas, isr=isr):
            self._proposals.pop(key, None)
            self.fetchers.remove(key)
            if registration.leader >= 0:
                self.fetchers.add(partition, registration.leader)

    def forget(self, topic: str, index: int) -> None:
        self.fetchers.remove((topic, index))
        self._proposals.pop((topic, index), None)
        self._checkpointed.pop((topic, index), None)

    # -- the leader side of a follower's fetch ---------------------------------------------

    def on_follower_fetch(self, partition: Partition, replica_id: int, fetch_offset: int,
                          broker_epoch: int, log_start_offset: int = -1) -> bool:
        """False when `replica_id` holds no replica of this partition."""
        update = partition.follower_fetch(replica_id, fetch_offset, self.broker.now_ms(),
                                          broker_epoch, log_start_offset)
        if update is None:
            return False
        if update.high_watermark_changed or update.log_start_changed:
            self.broker.notify_data_arrived(partition.topic, partition.index,
                                            high_watermark_only=True)
        if update.expand is not None:
            self._propose(partition, update.expand)
        return True

    # -- ISR changes -----------------------------------------------------------------------

    def _propose(self, partition: Partition, change: PendingIsrChange) -> None:
        key = (partition.topic, partition.index)
        if self._refused_until.get(key, 0.0) > trio.current_time():
            partition.state.on_alter_partition_result(change, error=True)
            return
        self._proposals[key] = change
        self._proposed.set()

    def expire_isr(self, now_ms: int) -> None:
        """One pass of Kafka's isr-expiration task over the partitions this broker leads."""
        lag = self.broker.config.replica_lag_time_max_ms
        sessions = self.broker.fetch_sessions
        for partition in list(self.broker.partitions.values()):
            if partition.is_leader:
                # a follower's fetch session holding the partition and not reading it at
                # its last fetch says the follower was caught up then (KIP-227)
                for session, key in sessions.holding(partition.topic, partition.index):
                    follower = session.replica_id
                    if follower < 0:
                        continue
                    if session.partitions[key].read_ms < session.last_used_ms:
                        partition.state.on_follower_idle_fetch(follower, session.last_used_ms,
                                                               session.replica_epoch)
                    # A follower outside the ISR that still fetches the partition and has
                    # caught up is proposed here too, not only when a fetch names it: if
                    # whatever should have brought the partition up at its fetches went
                    # missing, it would otherwise stay out for good (Docker chaos seed 4).
                    if (follower not in partition.isr
                            and now_ms - session.last_used_ms <= lag):
                        expand = partition.state.maybe_expand(follower)
                        if expand is not None:
                            self._propose(partition, expand)
                change = partition.state.maybe_shrink(partition.log_end_offset, now_ms, lag)
                if change is not None:
                    self._propose(partition, change)

    async def _isr_expiration_loop(self) -> None:
        period = max(self.broker.config.replica_lag_time_max_ms / 2000, 0.01)
        while True:
            await timeouts.sleep(period)
            self.expire_isr(self.broker.now_ms())

    def expire_producers(self, now_ms: int) -> int:
        """Kafka's PeriodicProducerExpirationCheck: every replica here forgets the producers
        idle longer than producer.id.expiration.ms, except those with a transaction open
        (broker.producer_state). How many went."""
        expiration = self.broker.config.producer_id_expiration_ms
        return sum(len(partition.producers.expire(now_ms, expiration))
                   for partition in list(self.broker.partitions.values()))

    async def _producer_expiration_loop(self) -> None:
        period = self.broker.config.producer_id_expiration_check_interval_ms / 1000
        while True:
            await timeouts.sleep(period)
            self.expire_producers(self.broker.now_ms())

    async def _alter_partition_loop(self) -> None:
        while True:
            await self._proposed.wait()
            self._proposed = trio.Event()
            batch, self._proposals = self._proposals, {}
            if batch:
                await self._send_alter_partition(batch)

    async def _send_alter_partition(self, batch: dict[tuple[str, int], PendingIsrChange]) -> None:
        broker = self.broker
        cache = broker.metadata_cache
        topics: dict[str, list[dict]] = {}
        for (topic, index), change in batch.items():
            partition = broker.partition(topic, index)
            epochs = [{"broker_id": r, "broker_epoch": self._fetched_epoch(partition, r)}
                      for r in change.new_isr]
            topics.setdefault(topic, []).append({
                "partition_index": index, "leader_epoch": change.leader_epoch,
                "new_isr_with_epochs": epochs, "leader_recovery_state": 0,
                "partition_epoch": change.partition_epoch})
        request_topics = []
        ids = {}
        for name, partitions in topics.items():
            image = cache.topic(name)
            if image is None:
                continue
            ids[image.topic_id] = name
            request_topics.append({"topic_id": image.topic_id, "partitions": partitions})
        body = m.request_body(m.ALTER_PARTITION, ALTER_PARTITION_VERSION, {
            "broker_id": broker.node_id, "broker_epoch": broker.lifecycle.broker_epoch,
            "topics": request_topics})
        try:
            response = await broker.controller_channel.forward(
                m.ALTER_PARTITION, ALTER_PARTITION_VERSION, body)
        except ControllerUnavailable as e:
            # the controller may have committed it: the change stays pending (the HW keeps
            # counting a joining replica) and is sent again
            log.warning("AlterPartition for %d partitions got no answer (%s); sending again",
                        len(batch), e)
            self._resend(batch)
            return
        if response.get("error_code", 0) != ErrorCode.NONE:
            log.warning("AlterPartition refused: %s", ErrorCode(response["error_code"]).name)
            self._resend(batch)
            return
        for t in response["topics"]:
            answered = ids.get(t["topic_id"])
            if answered is None:
                continue
            for a in t["partitions"]:
                settled = batch.pop((answered, a["partition_index"]), None)
                local = broker.partition(answered, a["partition_index"])
                if settled is not None and local is not None:
                    self._settle(local, settled, a)
        self._resend(batch)  # anything the answer left out

    def _fetched_epoch(self, partition: Partition | None, replica: int) -> int:
        """The broker epoch a replica's fetches carried (KIP-903: our fetchers send it in
        Fetch v15+'s ReplicaState), -1 when unknown (a follower not registered yet, or one
        speaking an older Fetch). Never the metadata image's epoch: a follower that just
        restarted fetches before this broker's image shows its new registration, and the
        controller would refuse the stale one as INELIGIBLE_REPLICA; -1 tells it to check
        only that the replica is registered and unfenced."""
        if replica == self.broker.node_id:
            return self.broker.lifecycle.broker_epoch
        progress = partition.state.followers.get(replica) if partition is not None else None
        return progress.broker_epoch if progress is not None else -1

    def _settle(self, partition: Partition, change: PendingIsrChange, answer: Any) -> None:
        code = ErrorCode(answer["error_code"])
        if code != ErrorCode.NONE:
            log.debug("%s-%d: ISR %s of %s to %s refused: %s", partition.topic, partition.index,
                     change.kind, list(change.old_isr), list(change.new_isr), code.name)
            if code in _DROP_ON:
                # certainly not applied: drop it, and do not ask again at once
                self._refused_until[(partition.topic, partition.index)] = (
                    trio.current_time() + REFUSED_BACKOFF_S)
                partition.state.on_alter_partition_result(change, error=True)
            # else (a stale partition or leader epoch, INVALID_UPDATE_VERSION after a retry
            # the controller had applied): the change stays pending until the metadata
            # record with the newer partition epoch settles it, as Kafka's
            # handleAlterPartitionError does
            return
        before = partition.isr
        moved = partition.state.on_alter_partition_result(
            change, error=False, leader_epoch=answer["leader_epoch"],
            partition_epoch=answer["partition_epoch"], isr=tuple(answer["isr"]),
            log_end_offset=partition.log_end_offset)
        if set(partition.isr) != set(before):  # else the metadata brought it first
            self._isr_changed(partition, before, change.reason)
        if moved:
            self.broker.notify_data_arrived(partition.topic, partition.index)

    def _isr_changed(self, partition: Partition, before: tuple[int, ...], reason: str) -> None:
        """One `isr_change` event per change, written by the leader, whichever way the
        change reached it first (its AlterPartition's answer or the metadata record)."""
        after = partition.isr
        kind = "shrink" if len(after) < len(before) else "expand"
        self.broker.metrics.isr_changed(shrink=kind == "shrink")
        log.info("%s-%d: ISR %s %s -> %s (%s)", partition.topic, partition.index, kind,
                 list(before), list(after), reason)
        self.broker.events.emit("isr_change", topic=partition.topic,
                                partition=partition.index, leader_id=self.broker.node_id,
                                kind=kind, old_isr=list(before), new_isr=list(after),
                                high_watermark=partition.high_watermark, reason=reason)

    def _resend(self, batch: dict[tuple[str, int], PendingIsrChange]) -> None:
        """Queue again the changes still pending (unanswered, or the answer left them out),
        after a pause so an unreachable controller is not asked in a tight loop."""
        for key, change in batch.items():
            partition = self.broker.partition(*key)
            if partition is not None and partition.state.pending is change:
                self._proposals.setdefault(key, change)
        if self._proposals and self._nursery is not None:
            self._nursery.start_soon(self._wake_after, REFUSED_BACKOFF_S)

    async def _wake_after(self, seconds: float) -> None:
        await timeouts.sleep(seconds)
        self._proposed.set()

    # -- the high-watermark checkpoint ---------------------------------------------------------

    def read_checkpoint(self) -> dict[tuple[str, int], int]:
        """The HWs written at the last checkpoint, from every log directory's file (Kafka
        keeps one per directory); {} for a directory with none or a damaged one (the HWs
        then start at 0 and catch up with the first fetches). A partition found in two
        (moved between directories since one was written) takes the higher: the HW is
        capped at the log end offset when it is restored."""
        out: dict[tuple[str, int], int] = {}
        for directory in self.broker.data_dirs:
            path = os.path.join(directory, HW_CHECKPOINT_FILE)
            try:
                found = read_checkpoint(path, fs=self.broker.fs)
            except (OSError, CheckpointError) as e:
                log.warning("ignoring %s (%s)", path, e)
                continue
            for key, hw in found.items():
                out[key] = max(hw, out.get(key, hw))
        return out

    def _changed_hws(self) -> dict[tuple[str, int], int] | None:
        hws = {key: p.high_watermark for key, p in self.broker.partitions.items()}
        return None if hws == self._checkpointed else hws

    def _by_dir(self, hws: dict[tuple[str, int], int]) -> dict[str, dict[tuple[str, int], int]]:
        """The HWs by the online log directory holding each partition (on the event loop:
        the log directories' maps are not read from a worker thread)."""
        broker = self.broker
        out: dict[str, dict[tuple[str, int], int]] = {
            m.data_dir: {} for m in broker.logs.online()}
        for key, hw in hws.items():
            directory = broker.logs.dir_of(*key)
            if directory in out:
                out[directory][key] = hw
        return out

    def _write(self, by_dir: dict[str, dict[tuple[str, int], int]]) -> bool:
        ok = True
        for directory, hws in by_dir.items():
            path = os.path.join(directory, HW_CHECKPOINT_FILE)
            try:
                write_checkpoint(path, hws, fs=self.broker.fs)
            except OSError as e:
                log.warning("cannot write %s (%s)", path, e)
                ok = False
        return ok

    def write_checkpoint(self) -> None:
        """Write the checkpoint now, on the calling thread (at shutdown)."""
        hws = self._changed_hws()
        if hws is not None and self._write(self._by_dir(hws)):
            self._checkpointed = hws

    async def _checkpoint_loop(self) -> None:
        # the fsyncs run on a worker thread: on the event loop they stalled every produce
        # and fetch for as long as the disk took (p99 spikes of up to a second)
        period = self.broker.config.replica_high_watermark_checkpoint_interval_ms / 1000
        while True:
            await timeouts.sleep(period)
            hws = self._changed_hws()
            if hws is not None and await blocking.run_disk(self.broker.fs, self._write,
                                                           self._by_dir(hws)):
                self._checkpointed = hws

    # -- background work -------------------------------------------------------------------

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.fetchers.run)
            nursery.start_soon(self._isr_expiration_loop)
            nursery.start_soon(self._producer_expiration_loop)
            nursery.start_soon(self._alter_partition_loop)
            nursery.start_soon(self._checkpoint_loop)
            task_status.started()
