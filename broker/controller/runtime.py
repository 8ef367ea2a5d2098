"""The controller quorum at run time: the trio driver of one node's RaftNode and, while
this node leads, of the active QuorumController.

Owns: `QuorumRuntime` — carrying out the pure RaftNode's effects (the quorum-state file
and the `__cluster_metadata` segments through MetadataLogStore, Raft messages to the other
voters through PeerChannel), applying committed entries to the committed image and handing
each one to the commit listeners (the broker's metadata publisher), metadata snapshots
(written, loaded at start, installed from the leader), and `submit`, which runs one
controller operation on the active controller and answers once its records commit.

Large entries, in slices: an operation's entry of more than APPEND_CHUNK records is
encoded, decoded and replayed a slice per turn of the event loop before it is appended,
one operation at a time (the next one, and the controller's timers, wait for it), and its
commit adopts the image so built; a committed large entry this node did not prepare (a
follower's view, or one from before this controller's activation) is decoded and replayed
the same way before it is applied and published, the commits after it waiting their turn.
Committed entries are applied at most COMMIT_SLICE_RECORDS records per turn of the loop, so
a restart's catch-up replay of a long log (published as one delta all the same) leaves the
loop free to answer the other voters meanwhile.

Snapshots, as Kafka's SnapshotGenerator and MetadataLoader: every node, voter or observer,
writes one of its committed image (`broker.controller.snapshot`) when the records committed
since its latest snapshot reach `metadata.log.max.record.bytes.between.snapshots`, or when
`metadata.log.max.snapshot.interval.ms` has passed since the oldest of them; the image is
encoded in a worker thread (an image of thousands of partitions takes a few hundred ms of
CPU), and the log behind the snapshot is then deleted. A node starts from its latest
snapshot: the image is loaded from it and published, with the entries after it, as the
catch-up delta. A node that fetches from a leader whose log starts above its own end gets
the leader's snapshot with FetchSnapshot; its image is replaced by the snapshot's and the
change is published with the snapshot's records (the listener diffs the two images for
what vanished).

Why the controller's image is rebuilt from the log on activation: a new leader's log holds
every committed entry and perhaps some uncommitted ones that it will commit in its own epoch
(Raft's leader completeness), so the image its decisions start from is the whole log, not
only the committed prefix. One controller operation is one entry (raft_batches), so an
operation commits or vanishes whole.

The clock is trio's, in milliseconds, handed to the pure pieces as `now_ms`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import trio

from broker import timeouts
from broker.storage import REAL, FileSystem
from broker import blocking
from broker.chunking import chunks
from broker.controller import raft
from broker.controller.image import MetadataImage
from broker.controller.controller_result import REPLAY_SLICE, ControllerResult
from broker.controller.quorum_controller import QuorumController
from broker.controller.raft_batches import pack_records, unpack_records
from broker.controller.raft_log import Snapshot
from broker.controller.snapshot import encode_snapshot, load_snapshot
from broker.net.peer import PeerTimeout, PeerUnavailable
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

log = logging.getLogger("minibroker.controller")

Records = list[tuple[int, int, Any]]
OBSERVER_RETRY_S = 0.2
CommitListener = Callable[[int, Records, MetadataImage], None]
# Kafka's metadata.log.max.record.bytes.between.snapshots and
# metadata.log.max.snapshot.interval.ms
SNAPSHOT_MAX_BYTES = 20 * 1024 * 1024
SNAPSHOT_INTERVAL_MS = 3_600_000
# records of an entry encoded, decoded and replayed per turn of the event loop
APPEND_CHUNK = REPLAY_SLICE

_RESPONSES = (raft.VoteResponse, raft.BeginQuorumEpochResponse, raft.EndQuorumEpochResponse,
              raft.FetchResponse, raft.FetchSnapshotResponse, raft.AddRaftVoterResponse,
              raft.RemoveRaftVoterResponse, raft.UpdateRaftVoterResponse)


class NotController(Exception):
    """This node is not the active controller; `leader_id` is the one it knows of (-1)."""

    def __init__(self, leader_id: int):
        super().__init__(f"not the active controller (the leader is {leader_id})")
        self.leader_id = leader_id


class QuorumMismatch(Exception):
    """Another voter runs with a different controller.quorum.voters (a different cluster id):
    a node that has never joined its quorum refuses to start."""


class MetadataLogFailure(Exception):
    """The metadata log could not be written: the node stops, as Kafka's controller halts,
    since its Raft state in memory would otherwise claim what the disk does not hold."""


class Transport(Protocol):
    """How Raft requests reach another voter (PeerChannel plus the wire codec)."""

    async def send(self, destination: int, message: Any) -> Any: ...

    async def describe_leader(self, voter: Any) -> tuple[int, int]: ...

    def discovery_targets(self, voters: tuple[int, ...]) -> list[Any]: ...


class LogStore(Protocol):
    def persist_election(self, state: Any) -> None: ...
    def append(self, entries: Any) -> None: ...
    def truncate_to(self, offset: int) -> None: ...
    def install_snapshot(self, snapshot: Any) -> None: ...
    def take_snapshot(self, snapshot: Any) -> None: ...
    def close(self) -> None: ...


@dataclass
class _Inbound:
    done: trio.Event
    response: Any = None


def decode_entry(record: bytes) -> Records:
    return [tuple(decode_metadata_record(r)) for r in unpack_records(record)]


# Records applied to the committed image per turn of the event loop. A restart replaying a
# long log (100,000 records take about a second) would otherwise hold the loop past the
# quorum's timers, and no Fetch answer or Vote would be read meanwhile; between slices
# the loop answers the other voters.
COMMIT_SLICE_RECORDS = 5000


class QuorumRuntime:
    def __init__(self, node: raft.RaftNode, store: LogStore, controller: QuorumController | None,
                 transport: Transport | None, *, legacy: Any = None,
                 on_controller_event: Callable[..., None] | None = None,
                 snapshot_max_bytes: int = SNAPSHOT_MAX_BYTES,
                 snapshot_interval_ms: int = SNAPSHOT_INTERVAL_MS, fs: FileSystem = REAL):
        self.node = node
        self.store = store
        self._fs = fs  # the store's: whether its work may go to a worker thread
        self.controller = controller
        self.transport = transport
        self.legacy = legacy  # metadata of a pre-cluster data directory, migrated once
        self.committed_image = MetadataImage.EMPTY
        self.applied_offset = node.log.start_offset  # entries below it are in the image
        self.active = False  # this node is the active controller
        # True until the first publish: the listeners have seen nothing yet, and the
        # replay of what the log already holds is handed to them as one delta
        self.catching_up = True
        self._catch_up_records: Records = []
        self._catch_up_waiters: list[int] = []
        self._catch_up_s = 0.0  # spent replaying and loading before the first publish
        self._commit_backlog = False  # committed entries left for the loop's next turn
        self.listeners: list[CommitListener] = []
        self.leader_listeners: list[Callable[[int, int], None]] = []
        self._emit = on_controller_event or (lambda *a, **k: None)
        self._inbound: dict[int, _Inbound] = {}
        self._next_inbound = 1 << 30  # apart from the node's own correlation ids
        self._pending: dict[int, tuple[trio.Event, list]] = {}  # entry offset -> waiter
        # entry offset -> (the controller's image before it, after it, its decoded records)
        # of the entries this controller appended: the commit adopts them rather than
        # decoding and replaying the entry again, if the committed image is the one the
        # entry was appended on
        self._appended: dict[int, tuple[MetadataImage, MetadataImage, Records]] = {}
        # set while an operation's large entry is prepared a chunk per turn of the loop:
        # other operations and the controller's timers wait for it (one at a time)
        self._preparing: trio.Event | None = None
        self._decoding: int | None = None  # a committed entry's offset, decoded in chunks
        self._wakeup = trio.Event()
        self._activate_wanted = False
        self._nursery: trio.Nursery | None = None
        self.leader_changed = trio.Event()
        self.fatal: BaseException | None = None
        self.snapshot_max_bytes = snapshot_max_bytes
        self.snapshot_interval_ms = snapshot_interval_ms
        self._bytes_since_snapshot = 0  # of the entries applied since the latest snapshot
        self._unsnapshotted_since_ms: int | None = None  # when the oldest of them was applied
        self._snapshotting = False  # a snapshot is being encoded
        self.snapshots_taken = 0
        if node.log.snapshot is not None:
            self._load(node.log.snapshot)

    # -- what it is ----------------------------------------------------------------------

    @property
    def leader_id(self) -> int:
        return self.node.leader_id

    @property
    def epoch(self) -> int:
        return self.node.epoch

    @staticmethod
    def now_ms() -> int:
        # rounded, not truncated: woken at a deadline of D ms, the clock reads D / 1000 s,
        # and D / 1000 * 1000 may fall just short of D; truncated, the timer was not yet
        # due and the loop woke at once again (on a simulated clock, forever)
        return round(trio.current_time() * 1000)

    # -- running -------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._apply(self.node.start(self.now_ms()))
            if self.transport is not None and (
                    not self.node.is_voter or self.node.config.bootstrap_voters is not None):
                nursery.start_soon(self._find_leader)
            task_status.started()
            while True:
                if self.fatal is not None:
                    raise self.fatal
                deadline = min(self.node.next_deadline(), self._snapshot_deadline())
                if self._controller_ticks():
                    assert self.controller is not None
                    deadline = min(deadline, self.controller.next_deadline())
                with timeouts.move_on_at(deadline / 1000 if deadline < math.inf else math.inf):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                if self._commit_backlog:
                    self._commit_backlog = False
                    self._commit_to(self.node.high_watermark)
                now = self.now_ms()
                if now >= self.node.next_deadline():
                    self._apply(self.node.tick(now))
                self._maybe_snapshot(now)
                controller = self.controller
                if self._controller_ticks() and controller is not None \
                        and now >= controller.next_deadline():
                    for result in controller.tick(now):
                        if result.records and self.active:
                            try:
                                self._append(result.records, now)
                            except NotController:
                                break  # lost the leadership meanwhile: the next one ticks

    def _controller_ticks(self) -> bool:
        """Whether the active controller's timers run now. Only then is its next deadline
        one to wake for: a deadline that came due while nothing may tick it (a batch being
        prepared, the leadership just lost) made this loop spin without waiting, a core
        burnt until the state moved on, and on a simulated clock time never moved on."""
        return (self.active and self.controller is not None and self.node.is_leader
                and self._preparing is None)

    async def _find_leader(self) -> None:
        """An observer hears of leaders from nobody (BeginQuorumEpoch goes to voters only):
        while it knows none, it asks the voters in turn with DescribeQuorum, and in a
        dynamic quorum the bootstrap servers too (a voter removed becomes an observer)."""
        assert self.transport is not None
        turn = 0
        while True:
            targets = self.transport.discovery_targets(self.node.voters)
            if self.node.leader_id < 0 and not self.node.is_voter and targets:
                voter = targets[turn % len(targets)]
                turn += 1
                try:
                    leader, epoch = await self.transport.describe_leader(voter)
                except Exception as e:  # noqa: BLE001  that voter is down: ask the next
                    log.debug("DescribeQuorum to %d failed: %s", voter, e)
                else:
                    if leader >= 0:
                        self._apply(self.node.observe_leader(leader, epoch, self.now_ms()))
            await timeouts.sleep(OBSERVER_RETRY_S)

    def resign(self) -> None:
        """Graceful shutdown of the leader: hand the quorum on before stopping."""
        if self.node.is_leader:
            self._apply(self.node.resign(self.now_ms()))

    def _wake(self) -> None:
        self._wakeup.set()

    # -- carrying out effects ------------------------------------------------------------

    def _apply(self, effects: list) -> None:
        try:
            self._carry_out(effects)
        except OSError as e:
            self.fatal = MetadataLogFailure(f"cannot write the metadata log: {e}")
            self._wake()
            raise self.fatal from e

    def _carry_out(self, effects: list) -> None:
        for effect in effects:
            match effect:
                case raft.PersistElectionState(state=state):
                    self.store.persist_election(state)
                case raft.AppendEntries(entries=entries):
                    self.store.append(entries)
                case raft.TruncateTo(offset=offset):
                    self.store.truncate_to(offset)
                case raft.InstallSnapshot(snapshot=snapshot):
                    self.store.install_snapshot(snapshot)
                    self._install(snapshot)
                case raft.SnapshotTaken(snapshot=snapshot):
                    self.store.take_snapshot(snapshot)
                case raft.HighWatermark(offset=offset):
                    self._commit_to(offset)
                case raft.LeaderChanged(leader_id=leader, epoch=epoch):
                    self._on_leader_changed(leader, epoch)
                case raft.Send(destination=dest, correlation_id=cid, message=message):
                    if isinstance(message, _RESPONSES):
                        inbound = self._inbound.pop(cid, None)
                        if inbound is not None:
                            inbound.response = message
                            inbound.done.set()
                    elif self._nursery is not None and self.transport is not None:
                        self._nursery.start_soon(self._send_request, dest, cid, message)
                case _:
                    raise AssertionError(f"unknown effect {effect!r}")
        if self._activate_wanted:
            self._activate_wanted = False
            self._activate()
        elif self.active and not self.node.is_leader:
            # resigned (check quorum, shutdown) without naming another leader yet
            self._deactivate(-1)
        self._wake()

    async def _send_request(self, destination: int, cid: int, message: Any) -> None:
        assert self.transport is not None
        try:
            response = await self.transport.send(destination, message)
        except QuorumMismatch as e:
            if self.node.epoch == 0 or self.committed_image is MetadataImage.EMPTY:
                self.fatal = e
                self._wake()
            else:
                log.error("%s", e)
            return
        except PeerTimeout as e:  # slow or partitioned away: Raft's timers decide
            log.debug("raft request to %d timed out: %s", destination, e)
            return
        except PeerUnavailable as e:
            # refused or closed: nothing listens there any more (kill -9 of the leader)
            log.debug("raft request to %d failed: %s", destination, e)
            if isinstance(message, raft.FetchRequest):
                self._apply(self.node.leader_unreachable(destination, self.now_ms()))
            return
        except Exception as e:  # noqa: BLE001  a peer's bad answer: Raft's timers resend
            log.debug("raft request to %d failed: %s", destination, e)
            return
        if response is not None:
            self._apply(self.node.receive(destination, cid, response, self.now_ms()))

    async def handle_raft_request(self, source: int, message: Any, timeout_s: float) -> Any:
        """A Raft request from another node; returns the node's answer (a parked Fetch is
        answered when data arrives or its max wait ends)."""
        cid = self._next_inbound
        self._next_inbound += 1
        inbound = self._inbound[cid] = _Inbound(trio.Event())
        self._apply(self.node.receive(source, cid, message, self.now_ms()))
        with timeouts.move_on_after(timeout_s):
            await inbound.done.wait()
        self._inbound.pop(cid, None)
        return inbound.response

    # -- commits -------------------------------------------------------------------------

    def _commit_to(self, high_watermark: int) -> None:
        """Apply the entries below `high_watermark` to the committed image and publish them.

        Until the node has caught up with the quorum's high watermark (a restart replaying
        its own log, or a new node fetching history), nothing is published entry by entry:
        the whole replay goes to the listeners as one delta, from the empty image to the
        image at the high watermark, as Kafka's MetadataLoader publishes its first image.
        Publishing every historical entry instead would hand the local replicas leader
        epochs they have long left behind (a partition's first registration says epoch 0),
        and a replica told to lead at an old epoch would cut its leader-epoch history back
        to it. From then on every entry is published as it commits.

        At most about COMMIT_SLICE_RECORDS records are applied per call; the rest is left
        to the run loop's next turns, so other tasks run in between."""
        started = time.perf_counter()
        start = self.applied_offset
        entries = self.node.log.read(start, 1 << 62) if high_watermark > start else ()
        budget = COMMIT_SLICE_RECORDS
        for entry in entries:
            if entry.offset >= high_watermark:
                break
            if budget <= 0:
                self._commit_backlog = True
                self._wake()
                break
            appended = self._appended.pop(entry.offset, None)
            if entry.control:
                records: Records = []
            elif appended is not None and appended[0] is self.committed_image:
                self.committed_image, records = appended[1], appended[2]
            elif self._decode_later(entry.offset, entry.record):
                break  # a large entry: committed once decoded, a chunk per turn
            else:
                records = decode_entry(entry.record)
                self.committed_image = self.committed_image.replay(records)
            budget -= max(1, len(records))
            if records:
                self._bytes_since_snapshot += len(entry.record)
                # the active controller's NoOpRecords (one each idle interval) change
                # nothing a snapshot would hold: only a change starts the interval's clock
                # (their bytes count, so the log behind them is still cut)
                if self._unsnapshotted_since_ms is None and any(
                        r[0] != T.NO_OP_RECORD for r in records):
                    self._unsnapshotted_since_ms = self.now_ms()
            self.applied_offset = entry.offset + 1
            if self.catching_up:
                self._catch_up_records.extend(records)
                self._catch_up_waiters.append(entry.offset)
            else:
                self._publish(records, [entry.offset])
        if self.catching_up:
            self._catch_up_s += time.perf_counter() - started
        # a node restarted on a snapshot at the quorum's high watermark applies nothing
        # here, and has caught up all the same
        if self.catching_up and self.applied_offset >= self.node.high_watermark:
            records, self._catch_up_records = self._catch_up_records, []
            offsets, self._catch_up_waiters = self._catch_up_waiters, []
            log.info("node %d caught up with the metadata log at offset %d (%d records "
                     "replayed in %.0f ms)", self.node.node_id, self.applied_offset,
                     len(records), self._catch_up_s * 1000)
            self._publish(records, offsets)  # still catching_up: listeners can tell
            self.catching_up = False

    def _decode_later(self, offset: int, record: bytes) -> bool:
        """Whether a committed entry (another controller's, or from before this one's
        activation) is large enough to decode and replay a chunk per turn of the event loop
        rather than at once; its commit, and the commits after it, then wait for that. Not
        while catching up: a restart's replay is published as one delta anyway."""
        if self.catching_up or self._nursery is None:
            return False
        if self._decoding == offset:
            return True
        frames = unpack_records(record)
        if len(frames) <= APPEND_CHUNK:
            return False
        self._decoding = offset
        self._nursery.start_soon(self._decode_committed, offset, frames)
        return True

    async def _decode_committed(self, offset: int, frames: list[bytes]) -> None:
        before = image = self.committed_image
        records: Records = []
        try:
            for chunk in chunks(frames, APPEND_CHUNK):
                await trio.lowlevel.checkpoint()
                decoded: Records = [tuple(decode_metadata_record(f)) for f in chunk]
                image = image.replay(decoded)
                records.extend(decoded)
        finally:
            self._decoding = None
        # a snapshot installed meanwhile replaced the committed image: the commit decodes
        # the entry again if it still needs it, and one past the snapshot never does
        if offset >= self.applied_offset:
            self._appended[offset] = (before, image, records)
        self._commit_to(self.node.high_watermark)
        self._wake()

    def _publish(self, records: Records, offsets: list[int]) -> None:
        for listener in self.listeners:
            listener(self.applied_offset, records, self.committed_image)
        for offset in offsets:
            waiter = self._pending.pop(offset, None)
            if waiter is not None:
                waiter[0].set()

    # -- snapshots -----------------------------------------------------------------------

    def _load(self, snapshot: Snapshot) -> None:
        """Start from the store's latest snapshot: its image is the committed image, and
        its records open the catch-up delta the listeners are handed."""
        started = time.perf_counter()
        image, records = load_snapshot(snapshot.data)
        self.committed_image = image
        self.applied_offset = snapshot.snapshot_id.end_offset
        self._catch_up_records = list(records)
        self._catch_up_s = time.perf_counter() - started
        log.info("node %d loaded the metadata snapshot at offset %d (%d records in %.0f ms)",
                 self.node.node_id, self.applied_offset, len(records), self._catch_up_s * 1000)

    def _install(self, snapshot: Snapshot) -> None:
        """The leader's snapshot replaced our log (we were behind its log start): it
        replaces the committed image too. Decoded here, on the event loop, since the
        entries after it apply on top of it; an install is rare (a node that was away
        while the others snapshotted)."""
        image, records = load_snapshot(snapshot.data)
        self.committed_image = image
        self.applied_offset = snapshot.snapshot_id.end_offset
        self._bytes_since_snapshot, self._unsnapshotted_since_ms = 0, None
        log.info("node %d installed the leader's metadata snapshot at offset %d (%d records)",
                 self.node.node_id, self.applied_offset, len(records))
        if self.catching_up:
            # the listeners have seen nothing: the delta from the empty image starts afresh
            self._catch_up_records = list(records)
        else:
            self._publish(records, [])

    def _snapshot_deadline(self) -> float:
        if self._unsnapshotted_since_ms is None or self.snapshot_interval_ms <= 0 \
                or self._snapshotting:
            return math.inf
        return self._unsnapshotted_since_ms + self.snapshot_interval_ms

    def _maybe_snapshot(self, now_ms: int) -> None:
        """Snapshot the committed image if the records since the latest snapshot are many
        enough or old enough (Kafka's SnapshotGenerator)."""
        if self._snapshotting or self._nursery is None \
                or self.applied_offset <= self.node.log.start_offset:
            return
        if (self._bytes_since_snapshot < self.snapshot_max_bytes
                and now_ms < self._snapshot_deadline()):
            return
        self._snapshotting = True
        self._bytes_since_snapshot, self._unsnapshotted_since_ms = 0, None
        self._nursery.start_soon(self._write_snapshot, self.committed_image,
                                 self.applied_offset)

    async def _write_snapshot(self, image: MetadataImage, end_offset: int) -> None:
        try:
            started = time.perf_counter()
            try:
                # off the loop, as the disk work it feeds is: inline on a simulated disk,
                # whose runs must not depend on a thread's timing
                data = await blocking.run_disk(self._fs, encode_snapshot, image)
            except Exception:  # noqa: BLE001  a bug in the writer: the log stays whole
                log.exception("node %d could not encode a metadata snapshot at offset %d",
                              self.node.node_id, end_offset)
                return
            encoded = time.perf_counter()
            raft_log = self.node.log
            if not raft_log.start_offset < end_offset <= min(raft_log.end_offset,
                                                             self.node.high_watermark):
                return  # a snapshot installed from the leader meanwhile covers it
            # the file written and fsynced, the segment cut: on the event loop, measured
            self._apply(self.node.create_snapshot(end_offset, data))
            self.snapshots_taken += 1
            log.info("node %d wrote a metadata snapshot at offset %d (%d bytes, encoded in "
                     "%.0f ms in a worker thread, stored in %.0f ms)", self.node.node_id,
                     end_offset, len(data), (encoded - started) * 1000,
                     (time.perf_counter() - encoded) * 1000)
        finally:
            self._snapshotting = False
            self._wake()

    def _on_leader_changed(self, leader: int, epoch: int) -> None:
        if leader == self.node.node_id:
            if not self.active:
                self._activate_wanted = True
        elif self.active:
            self._deactivate(leader)
        for listener in self.leader_listeners:
            listener(leader, epoch)
        self.leader_changed.set()
        self.leader_changed = trio.Event()
        if leader >= 0:
            self._emit("controller_elected", leader_id=leader, epoch=epoch,
                       node_id=self.node.node_id)

    def _activate(self) -> None:
        if self.controller is None or not self.node.is_leader:
            return
        image = self.committed_image
        for entry in self.node.log.read(self.applied_offset, 1 << 62):
            if not entry.control:
                image = image.replay(decode_entry(entry.record))
        self.controller.reset(image)
        self.active = True
        log.info("node %d is the active controller (epoch %d)", self.node.node_id, self.epoch)
        result = self.controller.activate(self.now_ms(), self.legacy)
        if result is not None and result.records:
            self._append(result.records, self.now_ms())

    def _deactivate(self, leader: int) -> None:
        self.active = False
        if self.controller is not None:
            self.controller.reset(self.committed_image)
        self._appended = {}
        pending, self._pending = self._pending, {}
        for event, failed in pending.values():
            failed.append(NotController(leader))
            event.set()

    # -- controller operations -----------------------------------------------------------

    def _append(self, records, now_ms: int) -> tuple[int, trio.Event, list]:
        assert self.controller is not None
        framed = [encode_metadata_record(t, v, body) for t, v, body in records]
        # replay what the followers will replay, so the active image cannot drift from theirs
        decoded: Records = [tuple(decode_metadata_record(f)) for f in framed]
        before = self.controller.image
        return self._append_prepared(framed, decoded, before, before.replay(decoded), now_ms)

    def _append_prepared(self, framed: list[bytes], decoded: Records, before: MetadataImage,
                         after: MetadataImage, now_ms: int) -> tuple[int, trio.Event, list]:
        """Append an entry whose records are encoded and decoded already, and whose replay
        takes the controller's image from `before` (its image now) to `after`."""
        assert self.controller is not None
        self.controller.image = after
        offset = self.node.log.end_offset
        try:
            effects = self.node.append(self.epoch, [pack_records(framed)], now_ms)
        except raft.NotLeaderError:
            self._deactivate(self.node.leader_id)
            raise NotController(self.node.leader_id) from None
        waiter: tuple[trio.Event, list] = (trio.Event(), [])
        self._pending[offset] = waiter
        self._appended[offset] = (before, after, decoded)
        self._apply(effects)
        return offset, waiter[0], waiter[1]

    async def _append_large(self, records, now_ms: int) -> tuple[int, trio.Event, list]:
        """`_append` of an entry of many records: encoded, decoded and replayed
        APPEND_CHUNK at a time, the event loop serving other work between chunks (a run of
        records replayed in pieces gives the image one replay of them all would)."""
        assert self.controller is not None
        preparing = self._preparing = trio.Event()
        try:
            before = after = self.controller.image
            framed: list[bytes] = []
            decoded: Records = []
            for chunk in chunks(records, APPEND_CHUNK):
                await trio.lowlevel.checkpoint()
                f = [encode_metadata_record(t, v, body) for t, v, body in chunk]
                d: Records = [tuple(decode_metadata_record(x)) for x in f]
                after = after.replay(d)
                framed.extend(f)
                decoded.extend(d)
            # the leadership lost meanwhile (and perhaps won again, the image rebuilt): the
            # records were decided on an image that is no longer this controller's
            if (not self.active or self.controller is None or not self.node.is_leader
                    or self.controller.image is not before):
                raise NotController(self.leader_id)
            return self._append_prepared(framed, decoded, before, after, now_ms)
        finally:
            self._preparing = None
            preparing.set()
            self._wake()  # the controller's timers that came due meanwhile

    async def submit(self, operation: Callable[[QuorumController, int, int], ControllerResult]
                     ) -> Any:
        """Run `operation(controller, now_ms, next_offset)` on the active controller and
        return its response once its records are committed (at once if it wrote none).

        One operation at a time: one whose entry is large prepares it over several turns
        of the event loop, and the next operation (and the controller's timers) waits until
        it is appended, so that each decides on the image the one before it left."""
        while self._preparing is not None:
            await self._preparing.wait()
        if not self.active or self.controller is None or not self.node.is_leader:
            raise NotController(self.leader_id)
        now = self.now_ms()
        result = operation(self.controller, now, self.node.log.end_offset)
        if not result.records:
            return result.response
        if len(result.records) > APPEND_CHUNK:
            _offset, event, failed = await self._append_large(result.records, now)
        else:
            _offset, event, failed = self._append(result.records, now)
        await event.wait()
        if failed:
            raise failed[0]
        return result.response
