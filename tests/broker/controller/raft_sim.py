"""A deterministic simulation of a KRaft quorum of pure `RaftNode`s, modelled on Kafka's
RaftEventSimulationTest.

One seed fixes everything: the network's delays (so reordering), drops and duplicates, the
partitions, the crashes and restarts, when the test's client appends to whoever leads and
when a node snapshots, and every node's own RNG. Time is virtual: an event queue ordered by
(time, sequence). A node's disk is what its effects persisted (election state, log entries,
snapshot); a restarted node is rebuilt from its disk alone, and answers to requests its
previous incarnation sent never reach it (its connections died with it).

`InvariantChecker` is called after every step (one delivered message, tick, append,
snapshot or fault) and raises `Violation` when:
- two nodes lead the same epoch;
- an (offset, epoch) names two different entries, or two entries with different
  predecessor epochs (log matching, checked entry by entry as they are appended);
- a node's high watermark covers an entry that differs from the one committed at that
  offset, or goes backwards within one incarnation;
- a committed entry is truncated from a node that held it, or a snapshot's image differs
  from the committed prefix;
- a node becomes leader without every entry committed so far (leader completeness);
- answering a pre-vote changes the receiver's state (role, epoch, leader, persisted
  election state), unless the pre-vote named a later epoch.
After the chaos phase the network heals and every crashed node restarts; the schedule then fails
unless an entry appended after healing is committed and every node's high watermark covers
it within `liveness_bound_ms` of virtual time.

With `SimConfig.membership` the quorum is a dynamic one (KIP-853, kraft.version 1): some
nodes start as observers, which find the leader as the runtime's observers do (asking a
node they can reach who leads), and an administrator sends the leader AddRaftVoter and
RemoveRaftVoter requests at random, sometimes bad ones (an unknown voter, a wrong
directory id, the last voter, a duplicate). Then also:
- every VotersRecord a leader appends differs from the voter set before it by one voter,
  and is appended only once the previous one and an entry of its epoch have committed;
- a bad request is answered with Kafka's error (VOTER_NOT_FOUND, DUPLICATE_VOTER) and
  appends nothing; a good one that is answered NONE has its VotersRecord committed;
- a leader whose removal has committed resigns within its next tick.
"""

from __future__ import annotations

import heapq
from collections import Counter
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import uuid

from broker.controller.quorum_state import ElectionState
from broker.controller.raft import (AddRaftVoterRequest, AppendEntries, BeginQuorumEpochResponse,
                                    EndQuorumEpochResponse, FetchResponse,
                                    FetchSnapshotResponse, IllegalStateError,
                                    InstallSnapshot, NotLeaderError, PersistElectionState,
                                    LeaderState, QuorumConfig, RaftNode,
                                    RemoveRaftVoterRequest, Send, SnapshotTaken, TruncateTo,
                                    VoteRequest, VoteResponse)
from broker.controller.raft_log import Entry, RaftLog, Snapshot
from broker.controller.voter_set import Endpoint, Voter, VoterSet
from protocol.errors import ErrorCode

RESPONSES = (VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse, FetchResponse,
             FetchSnapshotResponse)

Item = tuple[int, bytes, bool]  # (epoch, record, control): an entry without its offset


class Violation(AssertionError):
    pass


def encode_image(items: list[Item]) -> bytes:
    return json.dumps([[e, r.decode(), c] for e, r, c in items]).encode()


@lru_cache(maxsize=256)
def decode_image(data: bytes) -> tuple[Item, ...]:
    return tuple((e, r.encode(), c) for e, r, c in json.loads(data))


ADMIN = -2  # the administrator's "node id": its requests and answers skip the network


def entry_record(e: Entry) -> bytes:
    """What the checker compares of an entry: its record, or the voter set it holds."""
    if e.voters is not None:
        return b"voters:" + ",".join(map(str, e.voters.ids)).encode()
    return e.record


def directory_of(node_id: int) -> uuid.UUID:
    return uuid.UUID(int=1000 + node_id)


def sim_voter(node_id: int) -> Voter:
    return Voter(node_id, directory_of(node_id), (Endpoint("CONTROLLER", f"n{node_id}", 9093),))


def item_at(log: RaftLog, offset: int) -> Item:
    if offset >= log.start_offset:
        e = log.entries[offset - log.start_offset]
        return (e.epoch, entry_record(e), e.control)
    assert log.snapshot is not None
    return decode_image(log.snapshot.data)[offset]


def items_below(log: RaftLog, end: int) -> list[Item]:
    return [item_at(log, k) for k in range(end)]


@dataclass
class Disk:
    """What a node has persisted; all a restarted node gets back."""
    election: ElectionState
    log: RaftLog = field(default_factory=RaftLog)  # a copy apart from the node's own

    def reopen(self) -> RaftLog:
        return RaftLog(list(self.log.entries), self.log.snapshot)


class InvariantChecker:
    def __init__(self, node_ids: list[int]):
        self.leaders: dict[int, int] = {}  # epoch -> its leader
        self.committed: list[Item] = []
        self.entry_ids: dict[tuple[int, int], tuple[bytes, bool, int]] = {}
        self.last_hw: dict[int, int] = {i: 0 for i in node_ids}
        self.completeness_checked: set[tuple[int, int]] = set()
        self.leader_elections = 0
        self.counts: Counter[str] = Counter()  # effects seen, to show what a run exercised

    def pre_vote_answered(self, node: RaftNode, request: VoteRequest, before: tuple,
                          effects: list) -> None:
        """A pre-vote changes nothing on its receiver (KIP-996), unless it names a later
        epoch, which the receiver then learns as it would from any message."""
        answer = [e.message for e in effects if isinstance(e, Send)][-1]
        self.counts["PreVoteGranted" if answer.vote_granted else "PreVoteRefused"] += 1
        if request.candidate_epoch > before[1]:
            return
        if (node.role, node.epoch, node.leader_id, node.election) != before or any(
                isinstance(e, PersistElectionState) for e in effects):
            raise Violation(f"a pre-vote of epoch {request.candidate_epoch} changed node "
                            f"{node.node_id} from {before} to {(node.role, node.epoch)}")

    def restarted(self, node: RaftNode) -> None:
        self.last_hw[node.node_id] = node.high_watermark

    def before_effect(self, node_id: int, disk: Disk, effect) -> None:
        """Check an effect against the node's disk as it was before the effect."""
        self.counts[type(effect).__name__] += 1
        log = disk.log
        if isinstance(effect, AppendEntries):
            prev = log.last_fetched_epoch
            for entry in effect.entries:
                record = entry_record(entry)
                seen = self.entry_ids.setdefault((entry.offset, entry.epoch),
                                                 (record, entry.control, prev))
                if seen != (record, entry.control, prev):
                    raise Violation(f"log matching: node {node_id} appended a different entry "
                                    f"at offset {entry.offset} epoch {entry.epoch}: "
                                    f"{(record, entry.control, prev)} vs {seen}")
                prev = entry.epoch
        elif isinstance(effect, TruncateTo):
            self._check_removed(node_id, log, effect.offset)
        elif isinstance(effect, InstallSnapshot):
            self._check_image(node_id, effect.snapshot)
            self._check_removed(node_id, log, max(log.start_offset,
                                                  effect.snapshot.snapshot_id.end_offset))
        elif isinstance(effect, SnapshotTaken):
            self._check_image(node_id, effect.snapshot)

    def _check_removed(self, node_id: int, log: RaftLog, offset: int) -> None:
        for k in range(offset, min(log.end_offset, len(self.committed))):
            if item_at(log, k) == self.committed[k]:
                raise Violation(f"node {node_id} lost committed entry {k} {self.committed[k]}")

    def _check_image(self, node_id: int, snapshot: Snapshot) -> None:
        end = snapshot.snapshot_id.end_offset
        image = list(decode_image(snapshot.data))
        if len(image) != end or image != self.committed[:end]:
            raise Violation(f"node {node_id}'s snapshot to {end} is not the committed prefix")

    def after_step(self, nodes: dict[int, RaftNode | None]) -> None:
        for node_id, node in nodes.items():
            if node is None:
                continue
            if node.is_leader:
                leader = self.leaders.setdefault(node.epoch, node_id)
                if leader != node_id:
                    raise Violation(f"two leaders in epoch {node.epoch}: {leader} and {node_id}")
                if (node_id, node.epoch) not in self.completeness_checked:
                    self.completeness_checked.add((node_id, node.epoch))
                    self.leader_elections += 1
                    self._check_completeness(node)
            self._check_high_watermark(node)

    def _check_completeness(self, node: RaftNode) -> None:
        log = node.log
        if log.end_offset < len(self.committed):
            raise Violation(f"leader {node.node_id} of epoch {node.epoch} ends at "
                            f"{log.end_offset}, below {len(self.committed)} committed")
        for k, item in enumerate(self.committed):
            if item_at(log, k) != item:
                raise Violation(f"leader {node.node_id} of epoch {node.epoch} lacks committed "
                                f"entry {k}")

    def _check_high_watermark(self, node: RaftNode) -> None:
        last = self.last_hw[node.node_id]
        hw = node.high_watermark
        if hw < last:
            raise Violation(f"node {node.node_id}'s high watermark went back {last} -> {hw}")
        if hw > node.log.end_offset:
            raise Violation(f"node {node.node_id}'s high watermark {hw} is past its log end")
        for k in range(last, hw):
            item = item_at(node.log, k)
            if k < len(self.committed):
                if item != self.committed[k]:
                    raise Violation(f"node {node.node_id} committed {item} at {k}, but "
                                    f"{self.committed[k]} was committed there")
            else:
                self.committed.append(item)
        self.last_hw[node.node_id] = hw


@dataclass
class SimConfig:
    voters: int = 3
    chaos_ms: int = 20_000
    commit_bound_ms: int = 15_000  # healing to a new entry committed (by a majority)
    catch_up_bound_ms: int = 30_000  # healing to every node's high watermark covering it
    max_steps: int = 200_000
    # a dynamic quorum (kraft.version 1): `observers` more nodes, and voter changes
    membership: bool = False
    observers: int = 0


@dataclass
class SimResult:
    seed: int
    steps: int
    committed: int
    elections: int
    restarts: int
    commit_ms: int  # from healing to a new entry committed
    catch_up_ms: int  # from healing to every node's high watermark covering one
    counts: Counter[str]  # the disk effects the nodes asked for, by kind
    final_voters: tuple[int, ...] = ()  # the leader's voter set at the end


class Simulation:
    def __init__(self, seed: int, config: SimConfig,
                 node_factory: Callable[..., RaftNode] = RaftNode):
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.node_factory = node_factory
        ids = list(range(config.voters + (config.observers if config.membership else 0)))
        # this schedule's network: how lossy, how late, how often it duplicates
        self.drop = self.rng.choice([0.0, 0.02, 0.1, 0.25])
        self.duplicate = self.rng.choice([0.0, 0.05])
        self.max_delay = self.rng.choice([2, 10, 50, 200])
        # Small fetches leave followers with part of what the leader has, which is needed
        # to reach the states where committing an older epoch's entry by counting replicas
        # would be wrong. Only on a fast network: one entry per round trip over a slow one
        # would take minutes to catch up after healing.
        fetch_max_bytes = self.rng.choice([1, 8, 1 << 20]) if self.max_delay <= 10 else 1 << 20
        initial = tuple(ids[:config.voters])
        bootstrap = (VoterSet.of(sim_voter(i) for i in initial) if config.membership
                     else None)
        self.quorum = QuorumConfig(initial, election_timeout_ms=1000,
                                   fetch_timeout_ms=2000, request_timeout_ms=1000,
                                   fetch_max_wait_ms=500, fetch_max_bytes=fetch_max_bytes,
                                   bootstrap_voters=bootstrap)
        self.disks = {i: Disk(ElectionState(voters=self.quorum.voters)) for i in ids}
        self.nodes: dict[int, RaftNode | None] = {i: None for i in ids}
        self.incarnation = {i: 0 for i in ids}
        self.group = {i: 0 for i in ids}  # nodes talk only within one group
        self.checker = InvariantChecker(ids)
        self.now = 0
        self.steps = 0
        self.restarts = 0
        self._queue: list = []
        self._seq = 0
        self._tick_token = {i: 0 for i in ids}
        self._request_incarnation: dict[tuple[int, int, int], int] = {}
        self._records = 0
        self._healed_at: int | None = None
        self._first_post_heal_record: int | None = None
        self._committed_at: int | None = None
        self._roles: dict[int, str | None] = {}
        self._admin_cid = 0
        # cid -> (leader asked, request, its log end offset and voters when asked)
        self._admin_pending: dict[int, tuple[int, object, int, tuple[int, ...]]] = {}
        self._removed_leader_since: dict[int, int] = {}

    # -- the event queue ------------------------------------------------------------------

    def _push(self, at: int, *event) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, event))

    def _schedule_tick(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node is None:
            return
        self._tick_token[node_id] += 1
        self._push(max(self.now, node.next_deadline()), "tick", node_id,
                   self._tick_token[node_id])

    # -- running --------------------------------------------------------------------------

    def run(self) -> SimResult:
        for node_id in self.nodes:
            self._start(node_id)
        self._push(self.rng.randrange(50, 300), "append")
        self._push(self.rng.randrange(500, 2500), "snapshot")
        self._push(self.rng.randrange(200, 1500), "fault")
        self._push(self.config.chaos_ms, "heal")
        if self.config.membership:
            self._push(self.rng.randrange(500, 3000), "voter_change")
            self._push(100, "discover")
        while True:
            at, _, event = heapq.heappop(self._queue)
            self.now = at
            kind = event[0]
            if kind == "tick" and event[2] != self._tick_token[event[1]]:
                continue  # superseded by a later deadline
            self.steps += 1
            if self.steps > self.config.max_steps:
                raise Violation(f"seed {self.seed}: no end after {self.steps} steps")
            try:
                getattr(self, "_on_" + kind)(*event[1:])
            except (IllegalStateError, Violation) as exc:
                raise Violation(f"seed {self.seed} at {self.now} ms, step {self.steps}: "
                                f"{exc}") from exc
            try:
                self.checker.after_step(self.nodes)
            except Violation as exc:
                raise Violation(f"seed {self.seed} at {self.now} ms, step {self.steps}: "
                                f"{exc}") from exc
            if self._healed_at is None:
                self._maybe_crash_a_new_voter()
            self._check_removed_leaders()
            if self._healed_at is not None:
                if self._committed_at is None and self._post_heal_committed():
                    self._committed_at = self.now
                if self._live():
                    leaders = [n for n in self.nodes.values() if n is not None and n.is_leader]
                    return SimResult(self.seed, self.steps, len(self.checker.committed),
                                     self.checker.leader_elections, self.restarts,
                                     self._committed_at - self._healed_at,
                                     self.now - self._healed_at, self.checker.counts,
                                     leaders[0].voters if leaders else ())
                since = self.now - self._healed_at
                if self._committed_at is None and since > self.config.commit_bound_ms:
                    raise Violation(f"seed {self.seed}: no new entry committed within "
                                    f"{self.config.commit_bound_ms} ms of healing "
                                    f"({self._describe()})")
                if since > self.config.catch_up_bound_ms:
                    raise Violation(f"seed {self.seed}: not every node caught up within "
                                    f"{self.config.catch_up_bound_ms} ms of healing "
                                    f"({self._describe()})")

    def _post_heal_committed(self) -> bool:
        first = self._first_post_heal_record
        for _epoch, record, control in reversed(self.checker.committed):
            if not control:  # the client's records commit in append order
                return first is not None and int(record[1:]) >= first
        return False

    def _live(self) -> bool:
        """Has every node's high watermark passed a record appended after healing?"""
        first = self._first_post_heal_record
        if first is None:
            return False
        below = min(n.high_watermark if n is not None else 0 for n in self.nodes.values())
        for k in range(below - 1, -1, -1):  # the client's records commit in append order
            epoch, record, control = self.checker.committed[k]
            if not control:
                return int(record[1:]) >= first
        return False

    def _describe(self) -> str:
        return ", ".join(f"{i}: {n.role} e{n.epoch} leo {n.log.end_offset} hw "
                         f"{n.high_watermark}" if n else f"{i}: down"
                         for i, n in self.nodes.items())

    # -- nodes ----------------------------------------------------------------------------

    def _start(self, node_id: int) -> None:
        disk = self.disks[node_id]
        node = self.node_factory(node_id, self.quorum, random.Random(self.rng.getrandbits(32)),
                                 disk.election, disk.reopen())
        self.nodes[node_id] = node
        self.incarnation[node_id] += 1
        self.checker.restarted(node)
        self._apply(node_id, node.start(self.now))

    def _crash(self, node_id: int) -> None:
        self.nodes[node_id] = None
        self._tick_token[node_id] += 1

    def _apply(self, node_id: int, effects: list, request: tuple | None = None) -> None:
        """Carry out a node's effects in order; `request` is (source, correlation id,
        source incarnation) of the request being handled, if any."""
        disk = self.disks[node_id]
        for effect in effects:
            if isinstance(effect, Send):
                self._send(node_id, effect, request)
                continue
            self.checker.before_effect(node_id, disk, effect)
            if isinstance(effect, PersistElectionState):
                disk.election = effect.state
            elif isinstance(effect, AppendEntries):
                disk.log.append(effect.entries)  # raises unless contiguous
            elif isinstance(effect, TruncateTo):
                disk.log.truncate_to(effect.offset)
            elif isinstance(effect, InstallSnapshot):
                disk.log.install_snapshot(effect.snapshot)
            elif isinstance(effect, SnapshotTaken):
                disk.log.take_snapshot(effect.snapshot)
        self._schedule_tick(node_id)

    # -- the network ----------------------------------------------------------------------

    def _send(self, source: int, send: Send, request: tuple | None) -> None:
        if send.destination == ADMIN:
            self._admin_answer(source, send.correlation_id, send.message)
            return
        if isinstance(send.message, RESPONSES):
            key = (source, send.destination, send.correlation_id)
            if request is not None and request[:2] == (send.destination, send.correlation_id):
                incarnation = request[2]
            else:  # a held fetch answered later: its request registered who sent it
                incarnation = self._request_incarnation.get(key, -1)
        else:
            incarnation = self.incarnation[source]
        copies = 1
        if self.rng.random() < self.drop:
            copies = 0
        elif self.rng.random() < self.duplicate:
            copies = 2
        for _ in range(copies):
            self._push(self.now + self.rng.randint(1, self.max_delay), "deliver", source,
                       send.destination, send.correlation_id, send.message, incarnation)

    def _on_deliver(self, source, destination, correlation_id, message, incarnation) -> None:
        node = self.nodes[destination]
        if node is None or self.group[source] != self.group[destination]:
            return
        if isinstance(message, RESPONSES):
            if incarnation != self.incarnation[destination]:
                return  # for a process that no longer exists
            self._apply(destination, node.receive(source, correlation_id, message, self.now))
            return
        self._request_incarnation[(destination, source, correlation_id)] = incarnation
        before = (node.role, node.epoch, node.leader_id, node.election)
        effects = node.receive(source, correlation_id, message, self.now)
        if isinstance(message, VoteRequest) and message.pre_vote:
            self.checker.pre_vote_answered(node, message, before, effects)
        self._apply(destination, effects, (source, correlation_id, incarnation))

    def _on_tick(self, node_id: int, token: int) -> None:
        node = self.nodes[node_id]
        if node is not None:
            self._apply(node_id, node.tick(self.now))

    # -- the client, snapshots and faults -------------------------------------------------

    def _on_append(self) -> None:
        self._push(self.now + self.rng.randrange(50, 300), "append")
        for node_id, node in self.nodes.items():
            if node is not None and node.is_leader:
                records = [b"r%d" % (self._records + i)
                           for i in range(self.rng.choice([1, 1, 2, 3]))]
                try:
                    effects = node.append(node.epoch, records, self.now)
                except NotLeaderError:
                    raise Violation(f"node {node_id} refused an append as leader") from None
                if self._healed_at is not None and self._first_post_heal_record is None:
                    self._first_post_heal_record = self._records
                self._records += len(records)
                self._apply(node_id, effects)
                return

    def _on_snapshot(self) -> None:
        self._push(self.now + self.rng.randrange(500, 2500), "snapshot")
        up = [n for n in self.nodes.values()
              if n is not None and n.high_watermark > n.log.start_offset]
        if not up:
            return
        node = self.rng.choice(up)
        end = self.rng.randint(node.log.start_offset + 1, node.high_watermark)
        image = encode_image(items_below(node.log, end))
        self._apply(node.node_id, node.create_snapshot(end, image))

    def _on_fault(self) -> None:
        if self._healed_at is not None:
            return
        self._push(self.now + self.rng.randrange(200, 1500), "fault")
        ids = list(self.nodes)
        choice = self.rng.random()
        if choice < 0.3:
            cut = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
            for i in ids:
                self.group[i] = 1 if i in cut else 0
        elif choice < 0.5:
            for i in ids:
                self.group[i] = 0
        else:
            up = [i for i in ids if self.nodes[i] is not None]
            if not up:
                return
            # leaders are the interesting victims: half the time, crash the leader
            leaders = [i for i in up if self.nodes[i].is_leader]  # type: ignore[union-attr]
            victim = self.rng.choice(leaders if leaders and self.rng.random() < 0.5 else up)
            self._crash(victim)
            if choice < 0.8:
                self._push(self.now + self.rng.randrange(100, 3000), "restart", victim)
            else:
                self._on_restart(victim)

    def _maybe_crash_a_new_voter(self) -> None:
        # A voter that has just granted its vote is an interesting victim: if it forgot the
        # vote on restart, it could vote again in the same epoch.
        for node_id, node in self.nodes.items():
            role = node.role if node is not None else None
            if role == "Voted" and self._roles.get(node_id) != "Voted" \
                    and self.rng.random() < 0.2:
                self._push(self.now + self.rng.randint(0, 5), "crash_restart", node_id)
            self._roles[node_id] = role

    def _on_crash_restart(self, node_id: int) -> None:
        if self.nodes[node_id] is not None:
            self._crash(node_id)
            self._on_restart(node_id)

    def _on_restart(self, node_id: int) -> None:
        if self.nodes[node_id] is None:
            self.restarts += 1
            self._start(node_id)

    # -- KIP-853: the administrator's voter changes, and observers finding the leader -----

    def _on_discover(self) -> None:
        """A node that is no voter hears of leaders from nobody: as the runtime's observers
        ask a node they reach (DescribeQuorum), each asks one it can reach now."""
        self._push(self.now + self.rng.randrange(100, 400), "discover")
        for node_id, node in self.nodes.items():
            if node is None or node.is_voter or node.leader_id >= 0:
                continue
            peers = [n for i, n in self.nodes.items() if n is not None and i != node_id
                     and self.group[i] == self.group[node_id] and n.is_leader]
            if peers:
                peer = peers[0]
                self._apply(node_id, node.observe_leader(peer.node_id, peer.epoch, self.now))

    def _on_voter_change(self) -> None:
        if self._healed_at is not None:
            return
        self._push(self.now + self.rng.randrange(300, 2000), "voter_change")
        leaders = [n for n in self.nodes.values() if n is not None and n.is_leader]
        if not leaders:
            return
        node = leaders[0]
        voters = node.voters
        others = [i for i in self.nodes if i not in voters]
        choice = self.rng.random()
        request: object
        if choice < 0.4 and others:
            request = AddRaftVoterRequest(sim_voter(self.rng.choice(others)), 2000)
        elif choice < 0.75 and len(voters) > 1:
            victim = self.rng.choice(voters)
            request = RemoveRaftVoterRequest(victim, directory_of(victim))
        elif choice < 0.82:
            request = AddRaftVoterRequest(sim_voter(self.rng.choice(voters)), 2000)  # duplicate
        elif choice < 0.89 and others:
            missing = self.rng.choice(others)  # not a voter
            request = RemoveRaftVoterRequest(missing, directory_of(missing))
        elif choice < 0.95:
            victim = self.rng.choice(voters)  # the right id, another directory
            request = RemoveRaftVoterRequest(victim, uuid.UUID(int=7))
        elif len(voters) == 1:
            request = RemoveRaftVoterRequest(voters[0], directory_of(voters[0]))  # the last
        else:
            return
        self._admin_cid += 1
        cid = self._admin_cid
        before_end, before_voters = node.log.end_offset, node.voters
        st = node.state
        assert isinstance(st, LeaderState)
        before_hw, before_voters_offset = st.high_watermark, node.log.voters_offset
        self._admin_pending[cid] = (node.node_id, request, before_end, before_voters)
        effects = node.receive(ADMIN, cid, request, self.now)
        appended = [e for effect in effects if isinstance(effect, AppendEntries)
                    for e in effect.entries if e.voters is not None]
        if appended:
            self.checker.counts["VotersRecordAppended"] += 1
            changed = set(appended[0].voters.ids) ^ set(before_voters)  # type: ignore[union-attr]
            if len(appended) != 1 or len(changed) != 1:
                raise Violation(f"leader {node.node_id} changed the voters {before_voters} "
                                f"to {appended[0].voters.ids} at once")  # type: ignore[union-attr]
            if before_hw is None or before_voters_offset >= before_hw:
                raise Violation(f"leader {node.node_id} appended a VotersRecord with the one at "
                                f"{before_voters_offset} uncommitted (hw {before_hw})")
        elif node.log.end_offset != before_end:
            raise Violation(f"a refused voter change appended to node {node.node_id}'s log")
        self._apply(node.node_id, effects)

    def _check_removed_leaders(self) -> None:
        """A leader whose own removal has committed hands over at once."""
        for node_id, node in self.nodes.items():
            removed = (node is not None and node.is_leader and not node.is_voter
                       and node.high_watermark > node.log.voters_offset)
            if not removed:
                self._removed_leader_since.pop(node_id, None)
                continue
            if node_id not in self._removed_leader_since:
                self.checker.counts["RemovedLeaderResigned"] += 1  # it must, within 50 ms
            since = self._removed_leader_since.setdefault(node_id, self.now)
            if self.now - since > 50:
                raise Violation(f"node {node_id} still leads {self.now - since} ms after its "
                                f"removal committed")

    def _admin_answer(self, source: int, cid: int, message) -> None:
        node_id, request, offset, voters = self._admin_pending.pop(cid)
        code = message.error_code
        self.checker.counts[f"VoterChange{code.name}"] += 1
        expected = None
        if isinstance(request, RemoveRaftVoterRequest) and (
                request.directory_id != directory_of(request.voter_id)
                or request.voter_id not in voters or voters == (request.voter_id,)):
            expected = ErrorCode.VOTER_NOT_FOUND  # unknown, another directory, or the last
        if isinstance(request, AddRaftVoterRequest) and request.voter.voter_id in voters:
            expected = ErrorCode.DUPLICATE_VOTER
        # REQUEST_TIMED_OUT: a change still under way, or the epoch's first commit awaited
        if expected is not None and code not in (expected, ErrorCode.REQUEST_TIMED_OUT):
            raise Violation(f"{request} to voters {voters} answered {code.name}, "
                            f"not {expected.name}")
        if code == ErrorCode.NONE:
            node = self.nodes[node_id]
            assert node is not None
            if node.high_watermark <= offset:
                raise Violation(f"a voter change answered before its VotersRecord at {offset} "
                                f"committed on node {node_id}")

    def _on_heal(self) -> None:
        self._healed_at = self.now
        self.drop = 0.0
        for i in self.nodes:
            self.group[i] = 0
        for i, node in self.nodes.items():
            if node is None:
                self._on_restart(i)
