"""A seeded simulation of one partition replicated on three brokers, checking after every
step that what the high watermark covered is never lost.

Pure and deterministic: no trio, no I/O, no clock. Each replica is a log held as a list of
(leader epoch, record id) per offset, with the real `PartitionState`, `LeaderEpochCache`
and `truncation_offset`, driven the way broker.partition, broker.replication.manager and
broker.replication.fetcher drive them: a registration from the metadata makes a replica
leader (the epoch starts at its log end) or follower (it truncates by
OffsetForLeaderEpoch, KIP-101/KIP-279, then fetches from its log end); the leader's fetch
handler reports each follower's fetch offset, its ISR expiration pass proposes shrinks,
AlterPartition carries the proposals to a model controller. The controller holds
(leader, leader epoch, partition epoch, ISR) and applies AlterPartition with Kafka's
checks (ReplicationControlManager): the leader epoch and the partition epoch must match,
a joining replica must be unfenced with its current broker epoch; clean elections only,
from the ISR; a fenced broker leaves the ISR unless it is its last member.

Every message (Fetch, OffsetForLeaderEpoch, ListOffsets, AlterPartition and their
answers) travels through a network that delivers them in any order, late, or never; a
sender may give up waiting (a timeout) while its request or its answer is still on the
way. Only one broker's AlterPartition requests keep their order (see `Sim.deliver`).
Metadata reaches each broker late, one record or a jump to the newest. Brokers crash and
restart (a new broker epoch; the controller fences the old one), the controller fences
brokers whose heartbeats stop (the broker may live on as a zombie leader), unfences them
once they have caught up, and moves leaderships. acks=all produces are acknowledged as
broker.handlers.produce does: when the HW covers them while their broker still leads.

Invariants, with logs that survive crashes:
(a) after every step: *committed* records -- those below some leader's high watermark,
    zombie leaders included -- are never lost: every replica in the controller's ISR
    holds all of them, so the controller's leader does; no two leaders ever show
    different records below their high watermarks; a follower's high watermark only
    covers committed records;
(b) after every step: a leader's HW never exceeds its LEO and never goes down while it
    leads one epoch;
(c) when a follower finishes truncating against a leader, its log is a prefix of that
    leader's log; at the end of each schedule, two logs holding the same record at an
    offset agree on everything before it (Raft's log matching);
(d) at each append, the leader epochs along a log never go down; after each truncation
    and at the end, each epoch cache describes its log (plus at most an epoch begun at
    the log end by a leadership that wrote nothing).
With crashes that lose a random part of the unflushed tail, committed records may be lost
(Kafka assumes a committed record survives on some ISR member), so only (b), (c) and (d)
are checked there.

Where the code around the state could follow another rule than Kafka's, `Rules` names the
choice; the random runs use Kafka's. Scripted histories show what each other choice loses,
and the last test breaks the state's and the truncation's rules one at a time and checks
that the random runs notice.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from broker.replication.leader_epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
    entries_from_headers,
)
from broker.replication.state import PartitionState, PendingIsrChange
from broker.replication.truncation import (
    TruncationDecision,
    epoch_to_request,
    truncation_offset,
)

REPLICAS = (0, 1, 2)
LAG_MS = 100  # replica.lag.time.max.ms

NONE = "NONE"
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
INVALID_UPDATE_VERSION = "INVALID_UPDATE_VERSION"
INVALID_REQUEST = "INVALID_REQUEST"
INELIGIBLE_REPLICA = "INELIGIBLE_REPLICA"
STALE_BROKER_EPOCH = "STALE_BROKER_EPOCH"

Entry = tuple[int, int]  # (leader epoch, record id) at one offset


class Violation(AssertionError):
    pass


@dataclass(frozen=True)
class Rules:
    """How the parts around PartitionState behave; the defaults are Kafka's.

    fetch_progress_before_epoch_check: the leader records a follower's fetch offset before
    checking the fetch's current_leader_epoch (Kafka checks first, then updates).
    drop_pending_on_refusal: an AlterPartition refused for any reason drops the pending
    change (Kafka drops it only on INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED, which
    say the controller did not apply it; on FENCED_LEADER_EPOCH and INVALID_UPDATE_VERSION
    it stays pending until the metadata moves on: a request sent again may be refused
    because its first attempt was applied).
    drop_pending_when_unanswered: an AlterPartition that gets no answer drops the pending
    change (Kafka sends it again: it may have been applied).
    lossy_crash: a crash loses a random part of the unflushed tail of the log."""
    fetch_progress_before_epoch_check: bool = False
    drop_pending_on_refusal: bool = False
    drop_pending_when_unanswered: bool = False
    lossy_crash: bool = False
    min_insync_replicas: int = 1


@dataclass(frozen=True)
class Registration:
    """The controller's image after one record: the partition and the brokers."""
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]
    fenced: frozenset[int]


class Controller:
    def __init__(self) -> None:
        self.history = [Registration(leader=0, leader_epoch=0, partition_epoch=0,
                                     isr=REPLICAS, broker_epochs=(1, 1, 1),
                                     fenced=frozenset())]
        self.expands = self.shrinks = self.leader_changes = 0

    @property
    def image(self) -> Registration:
        return self.history[-1]

    def _publish(self, reg: Registration) -> None:
        old = self.image
        if (reg.leader, reg.isr) != (old.leader, old.isr):
            if reg.leader != old.leader:
                reg = replace(reg, leader_epoch=old.leader_epoch + 1)
                self.leader_changes += 1
            reg = replace(reg, partition_epoch=old.partition_epoch + 1)
        self.history.append(reg)

    def alter_partition(self, sender: int, sender_epoch: int, change: PendingIsrChange,
                        member_epochs: dict[int, int]) -> tuple[str, Registration | None]:
        reg = self.image
        if reg.broker_epochs[sender] != sender_epoch:
            return STALE_BROKER_EPOCH, None
        if change.leader_epoch != reg.leader_epoch:
            return FENCED_LEADER_EPOCH, None
        if sender != reg.leader:
            return INVALID_REQUEST, None
        if change.partition_epoch != reg.partition_epoch:
            return INVALID_UPDATE_VERSION, None
        new_isr = change.new_isr
        if not new_isr or sender not in new_isr:
            return INVALID_REQUEST, None
        for r in new_isr:
            if r not in reg.isr and (r in reg.fenced
                                     or member_epochs.get(r) != reg.broker_epochs[r]):
                return INELIGIBLE_REPLICA, None
        if tuple(new_isr) != reg.isr:
            if len(new_isr) > len(reg.isr):
                self.expands += 1
            else:
                self.shrinks += 1
            self._publish(replace(reg, isr=tuple(new_isr)))
        return NONE, self.image

    def fence(self, broker: int) -> None:
        """Heartbeats stopped, or an old incarnation: out of every ISR (unless the last
        member), leadership moves to an active ISR member or nowhere."""
        reg = self.image
        if broker in reg.fenced:
            return
        fenced = reg.fenced | {broker}
        isr = tuple(r for r in reg.isr if r != broker) or reg.isr
        leader = reg.leader
        if leader == broker or leader < 0:
            leader = next((r for r in REPLICAS if r in isr and r not in fenced), -1)
        self._publish(replace(reg, fenced=fenced, isr=isr, leader=leader))

    def unfence(self, broker: int) -> None:
        reg = self.image
        fenced = reg.fenced - {broker}
        leader = reg.leader
        if leader < 0 and broker in reg.isr:
            leader = broker  # an offline partition comes back with its last ISR member
        self._publish(replace(reg, fenced=fenced, leader=leader))

    def register(self, broker: int) -> int:
        """A restarted broker registers a new incarnation; the old one is fenced."""
        self.fence(broker)
        reg = self.image
        epochs = list(reg.broker_epochs)
        epochs[broker] += 1
        self._publish(replace(reg, broker_epochs=tuple(epochs)))
        return epochs[broker]

    def move_leader(self, target: int) -> None:
        reg = self.image
        if target in reg.isr and target not in reg.fenced and target != reg.leader:
            self._publish(replace(reg, leader=target))


@dataclass
class FetchSession:
    """The fetcher's state for the partition (broker.replication.fetcher.FetchState)."""
    leader: int
    leader_epoch: int
    truncating: bool = True
    next_epoch: int = -2
    out_of_range: bool = False
    in_flight: int | None = None


@dataclass
class Message:
    kind: str
    src: int  # -1: the controller
    dst: int
    dst_incarnation: int
    token: int
    body: dict


@dataclass
class Broker:
    id: int
    log: list[Entry] = field(default_factory=list)
    epochs: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    state: PartitionState = field(init=False)
    alive: bool = True
    incarnation: int = 1
    view: int = 0  # how much of the controller's history this broker has applied
    session: FetchSession | None = None
    flushed: int = 0
    checkpointed_hw: int = 0
    waiting_acks: list[int] = field(default_factory=list)  # end offsets of acks=all produces
    alter_queue: PendingIsrChange | None = None
    alter_sent: tuple[PendingIsrChange, int] | None = None
    hw_floor: tuple[int, int] = (-1, 0)  # (leader epoch, HW) while leading, for (b)

    def __post_init__(self) -> None:
        self.state = PartitionState(self.id)

    @property
    def leo(self) -> int:
        return len(self.log)

    # -- broker.partition.Partition ---------------------------------------------------------

    def make_leader(self, reg: Registration, now: int) -> bool:
        if reg.leader_epoch >= 0 and reg.leader_epoch != self.epochs.latest_epoch:
            self.epochs.assign(reg.leader_epoch, self.leo)
        return self.state.become_leader(leader_epoch=reg.leader_epoch,
                                        partition_epoch=reg.partition_epoch,
                                        replicas=REPLICAS, isr=reg.isr,
                                        log_end_offset=self.leo, now_ms=now)

    def make_follower(self, reg: Registration) -> bool:
        changed = (reg.leader != self.state.leader_id
                   or reg.leader_epoch != self.state.leader_epoch)
        self.state.become_follower(leader_id=reg.leader, leader_epoch=reg.leader_epoch,
                                   partition_epoch=reg.partition_epoch, replicas=REPLICAS,
                                   isr=reg.isr)
        return changed

    def append_as_leader(self, records: list[int]) -> None:
        base = self.leo
        epoch = self.state.leader_epoch
        self.check_epoch_order(epoch)
        self.log.extend((epoch, rid) for rid in records)
        self.epochs.assign(epoch, base)

    def append_as_follower(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.check_epoch_order(entry[0])
            self.epochs.assign(entry[0], self.leo)
            self.log.append(entry)

    def check_epoch_order(self, epoch: int) -> None:
        if self.log and epoch < self.log[-1][0]:
            raise Violation(f"b{self.id}: leader epoch {epoch} appended after "
                            f"{self.log[-1][0]}")

    def truncate_to(self, offset: int) -> bool:
        removed = offset < self.leo
        del self.log[offset:]
        self.flushed = min(self.flushed, self.leo)
        self.epochs.truncate_from_end(self.leo)
        if removed:
            self.state.on_truncation(self.leo)
        return removed

    def check_leader_epoch(self, current_leader_epoch: int) -> str:
        """broker.handlers.common.lookup for a partition this broker holds."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.state.leader_epoch:
                return FENCED_LEADER_EPOCH
            if current_leader_epoch > self.state.leader_epoch:
                return UNKNOWN_LEADER_EPOCH
        return NONE if self.state.is_leader else NOT_LEADER_OR_FOLLOWER


class Sim:
    def __init__(self, seed: int, rules: Rules = Rules(),
                 state_class: type[PartitionState] = PartitionState,
                 truncate: Callable[..., TruncationDecision] = truncation_offset) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.rules = rules
        self.state_class = state_class
        self.truncation_offset = truncate
        self.now = 0
        self.controller = Controller()
        self.brokers = [Broker(b) for b in REPLICAS]
        self.network: list[Message] = []
        self.tokens = 0
        self.next_record = 0
        self.committed: list[Entry] = []  # what some leader's HW has covered
        self.acked = 0
        self.trace: list[str] = []
        self.counts: dict[str, int] = {}
        for b in self.brokers:
            b.state = state_class(b.id, min_insync_replicas=rules.min_insync_replicas)
            self.apply_metadata(b, len(self.controller.history) - 1)

    # -- bookkeeping -----------------------------------------------------------------------

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.now} {text}")
        if len(self.trace) > 200:
            del self.trace[:100]

    def send(self, kind: str, src: int, dst: int, body: dict, token: int = 0,
             dst_incarnation: int | None = None) -> None:
        """A request goes to the destination's current process; an answer names the
        process that asked (`dst_incarnation`)."""
        if dst_incarnation is None:
            dst_incarnation = self.brokers[dst].incarnation if dst >= 0 else 0
        if src >= 0:
            body["src_incarnation"] = self.brokers[src].incarnation
        self.network.append(Message(kind, src, dst, dst_incarnation, token, body))

    def new_token(self) -> int:
        self.tokens += 1
        return self.tokens

    # -- the metadata (broker.replication.manager.ReplicaManager.apply_registration) --------

    def apply_metadata(self, b: Broker, index: int) -> None:
        b.view = index
        reg = self.controller.history[index]
        was_leader, epoch = b.state.is_leader, b.state.leader_epoch
        if reg.leader == b.id:
            if not b.state.is_leader or b.state.leader_epoch != reg.leader_epoch:
                b.session = None
                moved = b.make_leader(reg, self.now)
                self.note(f"b{b.id} leads epoch {reg.leader_epoch} at LEO {b.leo} "
                          f"HW {b.state.high_watermark} ISR {reg.isr}")
            else:
                moved = b.state.update_metadata(partition_epoch=reg.partition_epoch,
                                                replicas=REPLICAS, isr=reg.isr,
                                                log_end_offset=b.leo)
            if moved:
                self.notify(b)
        elif b.make_follower(reg):
            b.alter_queue = None
            b.session = FetchSession(reg.leader, reg.leader_epoch) if reg.leader >= 0 else None
            self.note(f"b{b.id} follows b{reg.leader} at epoch {reg.leader_epoch}")
        if b.state.is_leader != was_leader or b.state.leader_epoch != epoch:
            self.notify(b)

    def notify(self, b: Broker) -> None:
        """broker.notify_data_arrived: the acks=all produces waiting on this broker look
        again (broker.handlers.produce._wait_for_replicas)."""
        if not b.waiting_acks:
            return
        still = []
        for end in b.waiting_acks:
            if not b.state.is_leader:
                continue  # NOT_LEADER_OR_FOLLOWER
            if b.state.high_watermark >= end:
                if not b.state.under_min_isr():
                    self.acked += 1
            else:
                still.append(end)
        b.waiting_acks = still

    # -- ISR changes (the manager's AlterPartition sender) ---------------------------------

    def propose(self, b: Broker, change: PendingIsrChange) -> None:
        self.note(f"b{b.id} proposes {change.kind} to {change.new_isr} "
                  f"at partition epoch {change.partition_epoch}")
        b.alter_queue = change
        self.send_alter(b)

    def send_alter(self, b: Broker) -> None:
        if b.alter_sent is not None or b.alter_queue is None:
            return
        change, b.alter_queue = b.alter_queue, None
        token = self.new_token()
        b.alter_sent = (change, token)
        epochs = self.controller.history[b.view].broker_epochs
        self.send("alter", b.id, -1, {"change": change, "broker_epoch": b.incarnation,
                                      "member_epochs": {r: epochs[r] for r in change.new_isr}},
                  token)

    def on_alter_answer(self, b: Broker, token: int, error: str,
                        reg: Registration | None) -> None:
        if b.alter_sent is None or b.alter_sent[1] != token:
            return
        change = b.alter_sent[0]
        b.alter_sent = None
        self.note(f"b{b.id} hears {error} for {change.kind} to {change.new_isr}")
        if error == NONE:
            assert reg is not None
            moved = b.state.on_alter_partition_result(
                change, error=False, leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch, isr=reg.isr, log_end_offset=b.leo)
            if moved:
                self.notify(b)
        elif (self.rules.drop_pending_on_refusal
              or error in (INELIGIBLE_REPLICA, STALE_BROKER_EPOCH)):
            b.state.on_alter_partition_result(change, error=True)
        # else Kafka's handleAlterPartitionError: stay pending until the metadata moves on
        self.send_alter(b)

    def alter_timed_out(self, b: Broker) -> None:
        assert b.alter_sent is not None
        change = b.alter_sent[0]
        b.alter_sent = None
        self.note(f"b{b.id} gives up waiting for the answer to {change.new_isr}")
        self.count("alter_timeouts")
        if self.rules.drop_pending_when_unanswered:
            b.state.on_alter_partition_result(change, error=True)
        elif b.state.pending is change and b.alter_queue is None:
            b.alter_queue = change  # unknown outcome: ask again
        self.send_alter(b)

    # -- the leader's request handlers -------------------------------------------------------

    def follower_fetch(self, leader: Broker, follower: int, fetch_offset: int) -> None:
        update = leader.state.on_follower_fetch(follower, fetch_offset, leader.leo, self.now)
        if update is None:
            return
        self.note(f"b{leader.id} (epoch {leader.state.leader_epoch}) takes b{follower}'s "
                  f"fetch at {fetch_offset}: HW {leader.state.high_watermark}")
        if update.high_watermark_changed:
            self.notify(leader)
        if update.expand is not None:
            self.propose(leader, update.expand)

    def handle_fetch(self, b: Broker, msg: Message) -> dict:
        body = msg.body
        if self.rules.fetch_progress_before_epoch_check and b.state.is_leader:
            self.follower_fetch(b, msg.src, body["fetch_offset"])
        error = b.check_leader_epoch(body["current_leader_epoch"])
        if error != NONE:
            return {"error": error}
        offset = body["fetch_offset"]
        if offset > b.leo:
            return {"error": OFFSET_OUT_OF_RANGE}
        if not self.rules.fetch_progress_before_epoch_check:
            self.follower_fetch(b, msg.src, offset)
        records = b.log[offset:offset + self.rng.randint(1, 8)]
        return {"error": NONE, "records": records, "high_watermark": b.state.high_watermark}

    def handle_offset_for_leader_epoch(self, b: Broker, msg: Message) -> dict:
        error = b.check_leader_epoch(msg.body["current_leader_epoch"])
        if error != NONE:
            return {"error": error}
        epoch = msg.body["leader_epoch"]
        if 0 <= epoch <= b.state.leader_epoch:
            leader_epoch, end = b.epochs.end_offset_for(epoch, b.leo)
        else:
            leader_epoch, end = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return {"error": NONE, "leader_epoch": leader_epoch, "end_offset": end,
                "leader_incarnation": b.incarnation}

    def handle_list_offsets(self, b: Broker, msg: Message) -> dict:
        error = b.check_leader_epoch(msg.body["current_leader_epoch"])
        return {"error": error, "offset": b.leo}

    # -- the follower's fetcher ------------------------------------------------------------

    def fetcher_step(self, b: Broker) -> None:
        s = b.session
        if s is None or s.in_flight is not None:
            return
        if s.truncating:
            epoch = epoch_to_request(b.epochs) if s.next_epoch == -2 else s.next_epoch
            if epoch < 0:
                if b.leo > b.state.high_watermark:
                    b.truncate_to(b.state.high_watermark)
                s.truncating = False
                return
            s.in_flight = self.new_token()
            self.send("ofle", b.id, s.leader, {"current_leader_epoch": s.leader_epoch,
                                              "leader_epoch": epoch}, s.in_flight)
        elif s.out_of_range:
            s.in_flight = self.new_token()
            self.send("list_offsets", b.id, s.leader,
                      {"current_leader_epoch": s.leader_epoch}, s.in_flight)
        else:
            s.in_flight = self.new_token()
            self.send("fetch", b.id, s.leader, {"current_leader_epoch": s.leader_epoch,
                                               "fetch_offset": b.leo}, s.in_flight)

    def on_answer(self, b: Broker, msg: Message) -> None:
        s = b.session
        if s is None or s.in_flight != msg.token:
            self.count("stale_answers")
            return
        s.in_flight = None
        body = msg.body
        if body["error"] == OFFSET_OUT_OF_RANGE:
            s.out_of_range = True
            self.count("out_of_range")
            return
        if body["error"] != NONE:
            return  # back off; the metadata will say where to fetch
        if msg.kind == "fetch_answer":
            assert b.leo == body["fetch_offset"], "one fetch in flight, no truncation meanwhile"
            records = body["records"]
            if records:
                b.append_as_follower(records)
                self.count("fetched_records", len(records))
            changed = b.state.on_follower_high_watermark(body["high_watermark"], b.leo)
            if changed or records:
                self.notify(b)
        elif msg.kind == "ofle_answer":
            decision = self.truncation_offset(b.epochs, b.leo, b.state.high_watermark,
                                              body["leader_epoch"], body["end_offset"])
            before = b.leo
            if b.truncate_to(min(decision.offset, b.leo)):
                self.count("truncations")
                self.count("truncated_records", before - b.leo)
                self.note(f"b{b.id} truncated {before} -> {b.leo}")
                self.check_epoch_cache(b)
            if decision.complete:
                s.truncating = False
                s.next_epoch = -2
                self.check_prefix_of_leader(b, s, body["leader_incarnation"])
            else:
                s.next_epoch = decision.next_epoch
                self.count("truncation_rounds")
        elif msg.kind == "list_offsets_answer":
            s.out_of_range = False
            b.truncate_to(min(body["offset"], b.leo))

    # -- the steps -------------------------------------------------------------------------

    def alive_leaders(self) -> list[Broker]:
        return [b for b in self.brokers if b.alive and b.state.is_leader]

    def step_produce(self) -> None:
        leaders = self.alive_leaders()
        if leaders:
            self.produce(self.rng.choice(leaders), self.rng.randint(1, 3))

    def produce(self, b: Broker, n: int) -> None:
        """An acks=all produce of `n` records to `b`, which believes it leads."""
        if b.state.under_min_isr():
            return  # NOT_ENOUGH_REPLICAS
        records = list(range(self.next_record, self.next_record + n))
        self.next_record += n
        b.append_as_leader(records)
        self.note(f"b{b.id} appends {n} at epoch {b.state.leader_epoch}, LEO {b.leo}")
        b.waiting_acks.append(b.leo)
        if b.state.on_leader_append(b.leo):
            self.notify(b)
        self.notify(b)

    def step_fetcher(self) -> None:
        ready = [b for b in self.brokers if b.alive and b.session is not None
                 and b.session.in_flight is None]
        if ready:
            self.fetcher_step(self.rng.choice(ready))

    def step_deliver(self) -> None:
        if self.network:
            self.deliver(self.rng.randrange(len(self.network)))

    def deliver(self, i: int) -> None:
        """Deliver the `i`th message on the way."""
        msg = self.network[i]
        if msg.dst < 0:
            # one broker's AlterPartition requests reach the controller in the order sent
            # (one connection, one event queue): Kafka's trust in INELIGIBLE_REPLICA rests
            # on it, as a copy applied after the refusal of its retry would be unknown
            i = next(j for j, m in enumerate(self.network) if m.dst < 0 and m.src == msg.src)
            msg = self.network[i]
        del self.network[i]
        if msg.dst < 0:
            body = msg.body
            error, reg = self.controller.alter_partition(msg.src, body["broker_epoch"],
                                                         body["change"], body["member_epochs"])
            self.note(f"controller: AlterPartition from b{msg.src} "
                      f"{body['change'].new_isr} -> {error}")
            self.send("alter_answer", -1, msg.src, {"error": error, "reg": reg}, msg.token,
                      dst_incarnation=body["src_incarnation"])
            return
        b = self.brokers[msg.dst]
        if not b.alive or b.incarnation != msg.dst_incarnation:
            return  # the connection died with the process
        if msg.kind == "alter_answer":
            self.on_alter_answer(b, msg.token, msg.body["error"], msg.body["reg"])
            return
        handlers = {"fetch": self.handle_fetch, "ofle": self.handle_offset_for_leader_epoch,
                    "list_offsets": self.handle_list_offsets}
        if msg.kind in handlers:
            answer = handlers[msg.kind](b, msg)
            answer["fetch_offset"] = msg.body.get("fetch_offset")
            self.send(msg.kind + "_answer", b.id, msg.src, answer, msg.token,
                      dst_incarnation=msg.body["src_incarnation"])
            if msg.kind == "fetch":
                self.count("fetches_answered")
        else:
            self.on_answer(b, msg)

    def step_drop(self) -> None:
        if self.network:
            self.network.pop(self.rng.randrange(len(self.network)))
            self.count("dropped")

    def step_timeout(self) -> None:
        b = self.rng.choice(self.brokers)
        if not b.alive:
            return
        if b.session is not None and b.session.in_flight is not None \
                and self.rng.random() < 0.7:
            b.session.in_flight = None  # its request or answer may still be on the way
            self.count("fetch_timeouts")
        elif b.alter_sent is not None:
            self.alter_timed_out(b)

    def step_time(self) -> None:
        self.now += self.rng.randint(1, 60)

    def step_expire_isr(self) -> None:
        for b in self.alive_leaders():
            change = b.state.maybe_shrink(b.leo, self.now, LAG_MS)
            if change is not None:
                self.propose(b, change)

    def step_metadata(self) -> None:
        b = self.rng.choice(self.brokers)
        latest = len(self.controller.history) - 1
        if not b.alive or b.view == latest:
            return
        target = b.view + 1 if self.rng.random() < 0.6 else latest
        self.apply_metadata(b, target)

    def step_crash(self) -> None:
        b = self.rng.choice(self.brokers)
        if not b.alive or sum(x.alive for x in self.brokers) == 1:
            return
        b.alive = False
        if self.rules.lossy_crash and b.leo > b.flushed:
            keep = self.rng.randint(b.flushed, b.leo)
            self.count("lost_records", b.leo - keep)
            del b.log[keep:]
        self.note(f"b{b.id} crashes with LEO {b.leo}")
        self.count("crashes")

    def step_restart(self) -> None:
        b = self.rng.choice(self.brokers)
        if b.alive:
            return
        b.alive = True
        b.incarnation = self.controller.register(b.id)
        b.epochs = LeaderEpochCache(entries_from_headers(
            (epoch, offset) for offset, (epoch, _rid) in enumerate(b.log)))
        b.state = self.state_class(b.id, min_insync_replicas=self.rules.min_insync_replicas)
        b.state.restore_high_watermark(b.checkpointed_hw, b.leo)
        b.session = None
        b.waiting_acks = []
        b.alter_queue = b.alter_sent = None
        b.hw_floor = (-1, 0)
        b.flushed = b.leo
        self.note(f"b{b.id} restarts with LEO {b.leo} HW {b.state.high_watermark}")
        self.apply_metadata(b, len(self.controller.history) - 1)

    def step_fence(self) -> None:
        reg = self.controller.image
        dead = [b.id for b in self.brokers if not b.alive and b.id not in reg.fenced]
        if dead:
            broker = self.rng.choice(dead)
        elif self.rng.random() < 0.15:
            broker = self.rng.choice(REPLICAS)  # alive, cut off from the controller
        else:
            return
        self.controller.fence(broker)
        self.note(f"controller fences b{broker}: {self.controller.image}")

    def step_unfence(self) -> None:
        reg = self.controller.image
        ready = [b.id for b in self.brokers if b.alive and b.id in reg.fenced
                 and b.view == len(self.controller.history) - 1]
        if ready:
            broker = self.rng.choice(ready)
            self.controller.unfence(broker)
            self.note(f"controller unfences b{broker}: {self.controller.image}")

    def step_move_leader(self) -> None:
        self.controller.move_leader(self.rng.choice(REPLICAS))

    def step_checkpoint(self) -> None:
        b = self.rng.choice(self.brokers)
        if b.alive:
            b.checkpointed_hw = b.state.high_watermark
            b.flushed = b.leo

    STEPS: list[tuple[str, float]] = [
        ("produce", 2), ("fetcher", 6), ("deliver", 9), ("drop", 0.3), ("timeout", 0.8),
        ("time", 2.5), ("expire_isr", 1.2), ("metadata", 3), ("crash", 0.15),
        ("restart", 0.6), ("fence", 0.8), ("unfence", 0.8), ("move_leader", 0.25),
        ("checkpoint", 0.6)]

    def run(self, steps: int) -> None:
        names = [name for name, _ in self.STEPS]
        weights = [w for _, w in self.STEPS]
        actions = [getattr(self, "step_" + name) for name in names]
        chosen = self.rng.choices(range(len(actions)), weights, k=steps)
        for i, a in enumerate(chosen):
            actions[a]()
            try:
                self.check()
            except Violation as e:
                trace = "\n  ".join(self.trace[-80:])
                raise Violation(f"seed={self.seed} rules={self.rules} step {i} "
                                f"({names[a]}): {e}\n  {trace}") from None
        for b in self.brokers:
            if b.alive:  # a dead broker's cache is rebuilt from its log at restart
                self.check_epoch_cache(b)

    # -- the invariants --------------------------------------------------------------------

    def check(self) -> None:
        lossless = not self.rules.lossy_crash
        committed = self.committed
        for b in self.brokers:
            if not b.alive:
                continue  # its state goes with the process; its log is checked below
            state, log = b.state, b.log
            hw = state.high_watermark
            if not 0 <= hw <= len(log):
                raise Violation(f"b{b.id}: HW {hw} outside its log [0, {len(log)}]")
            if state.is_leader:
                floor_epoch, floor = b.hw_floor
                if floor_epoch == state.leader_epoch and hw < floor:
                    raise Violation(f"b{b.id}: HW went down from {floor} to {hw} "
                                    f"in epoch {floor_epoch}")
                b.hw_floor = (state.leader_epoch, hw)
                if lossless and hw > len(committed):
                    if log[:len(committed)] != committed:
                        raise Violation(f"b{b.id}: leader HW {hw} over records that differ "
                                        "from the committed ones")
                    self.count("committed", hw - len(committed))
                    committed.extend(log[len(committed):hw])
            if lossless and log[:hw] != committed[:hw]:
                raise Violation(f"b{b.id}: its HW {hw} covers records other than the "
                                f"committed ones (its log {log[:hw]}, committed "
                                f"{committed[:hw]})")
        if lossless:
            for r in self.controller.image.isr:
                if self.brokers[r].log[:len(committed)] != committed:
                    raise Violation(f"ISR member b{r} lacks committed records: "
                                    f"{len(committed)} committed, its LEO "
                                    f"{self.brokers[r].leo}")

    def check_prefix_of_leader(self, b: Broker, s: FetchSession, incarnation: int) -> None:
        leader = self.brokers[s.leader]
        if (leader.alive and leader.incarnation == incarnation and leader.state.is_leader
                and leader.state.leader_epoch == s.leader_epoch):
            if leader.log[:b.leo] != b.log:
                raise Violation(f"b{b.id} finished truncating at {b.leo} but its log is not "
                                f"a prefix of leader b{leader.id}'s")
            self.count("reconciled")

    def check_epoch_cache(self, b: Broker) -> None:
        derived = entries_from_headers((e, o) for o, (e, _r) in enumerate(b.log))
        entries = b.epochs.entries
        while len(entries) > len(derived) and entries[-1].start_offset == b.leo:
            entries.pop()
        if entries != derived:
            raise Violation(f"b{b.id}: epoch cache {b.epochs} does not describe its log "
                            f"{derived}")
        for (prev, _), (epoch, _) in zip(b.log, b.log[1:]):
            if epoch < prev:
                raise Violation(f"b{b.id}: leader epoch {epoch} after {prev} in the log")

    def check_log_matching(self) -> None:
        logs = [b.log for b in self.brokers]
        for i, a in enumerate(logs):
            for c in logs[i + 1:]:
                n = min(len(a), len(c))
                common = next((o for o in range(n) if a[o] != c[o]), n)
                for o in range(common, n):
                    if a[o] == c[o]:
                        raise Violation(f"two logs hold {a[o]} at {o} but differ at {common}")


# --- the simulation notices broken rules -------------------------------------------------


class HighWatermarkOverCommittedIsr(PartitionState):
    """Forgets KIP-497: the HW does not wait for a replica whose expansion is in flight."""

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr


class PendingShrinkCounts(PartitionState):
    """Lets the HW pass a replica as soon as its removal is proposed."""

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.pending.new_isr if self.pending is not None else self.isr


class ExpandBelowEpochStart(PartitionState):
    """Forgets KIP-101's second condition: a follower at the HW joins even if it lacks
    records the leader wrote before its election."""

    def maybe_expand(self, replica_id: int) -> PendingIsrChange | None:
        start, self.leader_epoch_start_offset = self.leader_epoch_start_offset, -1
        try:
            return super().maybe_expand(replica_id)
        finally:
            self.leader_epoch_start_offset = start


class ExpandBelowHighWatermark(PartitionState):
    """Lets a follower join once it reaches the start of the leader's epoch only."""

    def maybe_expand(self, replica_id: int) -> PendingIsrChange | None:
        hw, self.high_watermark = self.high_watermark, 0
        try:
            return super().maybe_expand(replica_id)
        finally:
            self.high_watermark = hw


class UnknownMembersPassedOver(PartitionState):
    """An ISR member not heard from since the election does not hold the HW."""

    def maybe_increment_high_watermark(self, log_end_offset: int) -> bool:
        if not self.is_leader:
            return False
        known = [p.log_end_offset for r, p in self.followers.items()
                 if r in self.maximal_isr and p.log_end_offset >= 0]
        low = min([log_end_offset, *known])
        if low > self.high_watermark:
            self.high_watermark = low
            return True
        return False


class ProgressKeptAcrossLeaderships(PartitionState):
    """A broker leading again remembers what followers fetched when it led before."""

    def become_follower(self, **kwargs) -> None:
        self.__dict__["kept"] = {r: p.log_end_offset for r, p in self.followers.items()}
        super().become_follower(**kwargs)

    def become_leader(self, **kwargs) -> bool:
        moved = super().become_leader(**kwargs)
        for r, leo in self.__dict__.get("kept", {}).items():
            if r in self.followers:
                self.followers[r].log_end_offset = leo
        return self.maybe_increment_high_watermark(kwargs["log_end_offset"]) or moved


class ShrinkReplacesPendingChange(PartitionState):
    """Two changes in flight: an ISR expiration pass does not wait for the pending one."""

    def maybe_shrink(self, log_end_offset: int, now_ms: int,
                     max_lag_ms: int) -> PendingIsrChange | None:
        pending, self.pending = self.pending, None
        change = super().maybe_shrink(log_end_offset, now_ms, max_lag_ms)
        if change is None:
            self.pending = pending
        return change


def truncate_to_high_watermark(cache: LeaderEpochCache, log_end_offset: int,
                               high_watermark: int, leader_epoch: int,
                               leader_end_offset: int) -> TruncationDecision:
    """Before KIP-101: a follower truncates to its HW, whatever the leader says."""
    return TruncationDecision(min(high_watermark, log_end_offset), complete=True)


def truncate_to_leader_end(cache: LeaderEpochCache, log_end_offset: int,
                           high_watermark: int, leader_epoch: int,
                           leader_end_offset: int) -> TruncationDecision:
    """Takes the leader's end offset without comparing epochs (keeps divergent records
    of an epoch the leader never held)."""
    if leader_end_offset < 0:
        return TruncationDecision(min(high_watermark, log_end_offset), complete=True)
    return TruncationDecision(min(leader_end_offset, log_end_offset), complete=True)


def one_round_only(cache: LeaderEpochCache, log_end_offset: int, high_watermark: int,
                   leader_epoch: int, leader_end_offset: int) -> TruncationDecision:
    """KIP-101 without KIP-279: the first answer is final."""
    decision = truncation_offset(cache, log_end_offset, high_watermark, leader_epoch,
                                 leader_end_offset)
    return TruncationDecision(decision.offset, complete=True)


# --- scripted histories ----------------------------------------------------------------------


class Script:
    """One history chosen step by step, the invariants checked after each."""

    def __init__(self, rules: Rules = Rules(), **sim_args) -> None:
        self.sim = Sim(0, rules, **sim_args)

    def broker(self, b: int) -> Broker:
        return self.sim.brokers[b]

    def check(self) -> None:
        self.sim.check()

    def produce(self, b: int, n: int) -> None:
        self.sim.produce(self.broker(b), n)
        self.check()

    def deliver(self, match: Callable[[Message], bool]) -> Message:
        i = next(i for i, m in enumerate(self.sim.network) if match(m))
        msg = self.sim.network[i]
        self.sim.deliver(i)
        self.check()
        return msg

    def drop(self, match: Callable[[Message], bool]) -> None:
        i = next(i for i, m in enumerate(self.sim.network) if match(m))
        del self.sim.network[i]

    def send(self, f: int) -> int | None:
        """The follower's fetcher sends its next request; its token."""
        b = self.broker(f)
        self.sim.fetcher_step(b)
        self.check()
        return b.session.in_flight if b.session is not None else None

    def request(self, f: int, token: int) -> Message:
        return self.deliver(lambda m: m.token == token and m.src == f and m.dst >= 0)

    def answer(self, f: int, token: int) -> Message:
        return self.deliver(lambda m: m.token == token and m.dst == f)

    def round_trip(self, f: int) -> Message | None:
        token = self.send(f)
        if token is None:
            return None
        self.request(f, token)
        return self.answer(f, token)

    def catch_up(self, f: int) -> None:
        """Fetch until the leader knows the follower holds its whole log."""
        b = self.broker(f)
        for _ in range(30):
            self.round_trip(f)
            assert b.session is not None
            leader = self.broker(b.session.leader)
            progress = leader.state.followers.get(f)
            if (not b.session.truncating and b.leo == leader.leo and progress is not None
                    and progress.log_end_offset == b.leo):
                return
        raise AssertionError(f"b{f} does not catch up")

    def metadata(self, *brokers: int) -> None:
        for b in brokers:
            self.sim.apply_metadata(self.broker(b), len(self.sim.controller.history) - 1)
            self.check()

    def alter_to_controller(self) -> Message:
        return self.deliver(lambda m: m.dst < 0)

    def alter_answer(self, b: int) -> Message:
        return self.deliver(lambda m: m.kind == "alter_answer" and m.dst == b)


def isr_without_b2(script: Script) -> None:
    """b0 leads at epoch 0 with the ISR (0, 1); b2 is behind, its LEO 3, b0's HW 3."""
    script.produce(0, 2)
    script.catch_up(1)
    script.catch_up(2)
    script.produce(0, 1)
    script.sim.now += LAG_MS + 1
    script.catch_up(1)
    script.sim.step_expire_isr()
    script.alter_to_controller()
    script.alter_answer(0)
    assert script.broker(0).state.isr == (0, 1)
    script.catch_up(2)  # b2 catches up: b0 proposes to expand the ISR
    pending = script.broker(0).state.pending
    assert pending is not None and pending.new_isr == (0, 1, 2)


@pytest.mark.parametrize("rules, loses", [
    (Rules(), False), (Rules(fetch_progress_before_epoch_check=True), True)])
def test_a_fetch_for_an_older_leader_epoch_does_not_count(rules, loses):
    """b1's metadata lags: it still fetches from b0 for leader epoch 0, its log holding
    epoch-0 records that b0 truncated away while it followed b2. b0 leads again at epoch
    2; counting that fetch's offset as b1's LEO lets the HW cover epoch-1 records b1 lacks
    (Kafka fences the fetch before updateFollowerFetchState)."""
    script = Script(rules)
    script.produce(0, 2)
    script.catch_up(1)
    script.catch_up(2)
    script.produce(0, 2)  # epoch 0 at offsets 2 and 3: only b1 gets them
    script.catch_up(1)
    script.sim.controller.move_leader(2)
    script.metadata(0, 2)  # b1 keeps following b0 at epoch 0
    script.produce(2, 2)  # epoch 1 at offsets 2 and 3
    script.catch_up(0)  # b0 truncates its epoch-0 records, takes b2's
    assert [e for e, _ in script.broker(0).log] == [0, 0, 1, 1]
    script.sim.controller.move_leader(0)
    script.metadata(0, 2)
    script.catch_up(2)
    assert script.broker(0).state.leader_epoch == 2
    assert script.broker(0).state.high_watermark == 2  # b1 not heard from in epoch 2
    token = script.send(1)
    assert token is not None
    if loses:
        with pytest.raises(Violation, match="ISR member b1 lacks committed records"):
            script.request(1, token)
        return
    script.request(1, token)
    assert script.answer(1, token).body["error"] == FENCED_LEADER_EPOCH
    assert script.broker(0).state.high_watermark == 2
    assert script.broker(0).state.followers[1].log_end_offset == -1


@pytest.mark.parametrize("rules, loses", [
    (Rules(), False), (Rules(drop_pending_when_unanswered=True), True)])
def test_an_expansion_whose_answer_is_lost_still_holds_the_high_watermark(rules, loses):
    """The controller commits the ISR (0, 1, 2) but its answer never arrives. Whether or
    not it was applied is unknown: b0 must keep waiting for b2, as the controller may elect
    it (Kafka retries the request; its answer, or the metadata, settles it)."""
    script = Script(rules)
    isr_without_b2(script)
    script.alter_to_controller()
    assert script.sim.controller.image.isr == (0, 1, 2)
    script.drop(lambda m: m.kind == "alter_answer")
    script.sim.alter_timed_out(script.broker(0))
    script.produce(0, 2)
    if loses:
        with pytest.raises(Violation, match="ISR member b2 lacks committed records"):
            script.catch_up(1)
        return
    script.catch_up(1)
    assert script.broker(0).state.high_watermark == 3  # b2 still at 3
    assert script.alter_to_controller().body["change"].new_isr == (0, 1, 2)  # again
    assert script.alter_answer(0).body["error"] == INVALID_UPDATE_VERSION
    assert script.broker(0).state.pending is not None
    script.metadata(0)
    assert script.broker(0).state.pending is None
    assert script.broker(0).state.isr == (0, 1, 2)
    script.catch_up(2)
    assert script.broker(0).state.high_watermark == 5


@pytest.mark.parametrize("rules, loses", [
    (Rules(), False), (Rules(drop_pending_on_refusal=True), True)])
def test_an_expansion_refused_on_retry_stays_pending_until_the_metadata(rules, loses):
    """The first attempt was applied, its answer lost; the retry is refused with
    INVALID_UPDATE_VERSION because of it. Dropping the change on that refusal lets the HW
    pass b2, which the controller already holds in the ISR."""
    script = Script(rules)
    isr_without_b2(script)
    script.alter_to_controller()
    script.drop(lambda m: m.kind == "alter_answer")
    script.sim.alter_timed_out(script.broker(0))
    script.alter_to_controller()
    assert script.alter_answer(0).body["error"] == INVALID_UPDATE_VERSION
    script.produce(0, 2)
    if loses:
        with pytest.raises(Violation, match="ISR member b2 lacks committed records"):
            script.catch_up(1)
        return
    script.catch_up(1)
    assert script.broker(0).state.high_watermark == 3


@pytest.mark.parametrize("state_class, loses", [
    (PartitionState, False), (ExpandBelowEpochStart, True)])
def test_a_follower_joins_only_once_it_holds_the_new_leaders_epoch_start(state_class, loses):
    """b1 becomes leader with a HW (3) older than what b0 committed (5): its epoch starts
    at 5. b2, at 3, reaches that HW but lacks committed records (KIP-101)."""
    script = Script(state_class=state_class)
    isr_without_b2(script)  # b2 joins at 3...
    script.alter_to_controller()
    script.alter_answer(0)
    script.sim.controller.fence(2)  # ...and leaves again
    script.metadata(0, 1, 2)
    assert script.broker(0).state.isr == (0, 1)
    script.produce(0, 2)
    token = script.send(1)
    assert token is not None
    script.request(1, token)
    script.answer(1, token)  # b1 takes [3, 5) with HW 3
    token = script.send(1)
    assert token is not None
    script.request(1, token)  # b0's HW moves to 5 ...
    script.drop(lambda m: m.dst == 1)  # ... but b1 never hears it
    assert script.broker(0).state.high_watermark == 5
    assert script.broker(1).state.high_watermark == 3
    script.sim.controller.unfence(2)
    script.sim.controller.move_leader(1)
    script.metadata(0, 1, 2)
    leader = script.broker(1).state
    assert leader.high_watermark == 3 and leader.leader_epoch_start_offset == 5
    token = script.send(2)  # b2's truncation: its log is a prefix of b1's
    assert token is not None
    script.request(2, token)
    script.answer(2, token)
    token = script.send(2)
    assert token is not None
    script.request(2, token)  # a fetch at 3: b2 reaches b1's HW
    if loses:
        with pytest.raises(Violation, match="ISR member b2 lacks committed records"):
            script.alter_to_controller()
        return
    assert leader.pending is None
    assert not any(m.dst < 0 for m in script.sim.network)  # no AlterPartition


# --- the runs ----------------------------------------------------------------------------------

STEPS = 200


def run_many(rules: Rules, seeds: range, steps: int = STEPS, **sim_args) -> dict[str, int]:
    totals: dict[str, int] = {}
    for seed in seeds:
        sim = Sim(seed, rules, **sim_args)
        sim.run(steps)
        sim.check_log_matching()
        c = sim.controller
        sim.counts.update(expands=c.expands, shrinks=c.shrinks,
                          leader_changes=c.leader_changes, acked=sim.acked)
        for k, v in sim.counts.items():
            totals[k] = totals.get(k, 0) + v
    return totals


def assert_exercised(totals: dict[str, int], *what: str) -> None:
    for name in what:
        assert totals.get(name, 0) > 0, f"the runs never exercised {name}: {totals}"


def test_committed_records_survive_crashes_elections_and_a_lossy_network():
    totals = run_many(Rules(), range(2000))
    assert_exercised(totals, "expands", "shrinks", "leader_changes", "truncations",
                     "truncation_rounds", "acked", "committed", "reconciled", "crashes",
                     "alter_timeouts", "stale_answers", "dropped")


def test_committed_records_survive_with_two_min_insync_replicas():
    totals = run_many(Rules(min_insync_replicas=2), range(2000, 2400))
    assert_exercised(totals, "expands", "shrinks", "leader_changes", "truncations", "acked")


def test_logs_stay_consistent_when_crashes_lose_unflushed_records():
    totals = run_many(Rules(lossy_crash=True), range(4000, 5000))
    assert_exercised(totals, "lost_records", "truncations", "reconciled", "leader_changes",
                     "expands", "shrinks")


@pytest.mark.parametrize("broken", [
    pytest.param(dict(state_class=cls), id=cls.__name__) for cls in (
        HighWatermarkOverCommittedIsr, PendingShrinkCounts, ExpandBelowHighWatermark,
        UnknownMembersPassedOver, ProgressKeptAcrossLeaderships, ShrinkReplacesPendingChange)
] + [
    pytest.param(dict(truncate=f), id=f.__name__) for f in (
        truncate_to_high_watermark, truncate_to_leader_end, one_round_only)
] + [
    pytest.param(dict(rules=Rules(drop_pending_on_refusal=True)),
                 id="drop_pending_on_refusal"),
    pytest.param(dict(rules=Rules(drop_pending_when_unanswered=True)),
                 id="drop_pending_when_unanswered"),
])
def test_the_simulation_notices_a_broken_rule(broken):
    """Random schedules find each broken rule within a few hundred seeds (the rarer
    breakages -- a fetch counted for an older leader epoch, a follower joining below the
    leader's epoch start -- have their scripted histories above)."""
    rules = broken.pop("rules", Rules())
    for seed in range(1000):
        try:
            Sim(seed, rules, **broken).run(STEPS)
        except Violation:
            return
    raise AssertionError("1000 schedules and no violation found")
