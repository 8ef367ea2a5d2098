"""Where a follower truncates after OffsetForLeaderEpoch (broker.replication.truncation).

The rules one by one, then the divergence scenarios of KIP-101 and KIP-279 played on a
small in-memory model of replicas, then a few hundred seeded random histories of leader
changes, appends and crashes. After every reconciliation the follower's log must be a
prefix of the leader's, and exactly as long as the part the two logs shared: nothing
the leader also holds is lost, nothing it does not hold is kept.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from broker.replication.leader_epochs import EpochEntry, LeaderEpochCache, entries_from_headers
from broker.replication.truncation import (
    TruncationDecision,
    epoch_to_request,
    truncation_offset,
)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(epoch, start) for epoch, start in pairs])


# --- the rules --------------------------------------------------------------------------


def test_epoch_to_request_is_the_latest_epoch_or_undefined():
    assert epoch_to_request(LeaderEpochCache()) == -1
    assert epoch_to_request(cache_of((0, 0), (4, 9))) == 4


@pytest.mark.parametrize("hw, leo, expected", [(5, 10, 5), (12, 10, 10), (0, 0, 0)])
def test_an_undefined_leader_offset_falls_back_to_the_high_watermark(hw, leo, expected):
    cache = cache_of((0, 0), (2, 4))
    assert truncation_offset(cache, leo, hw, -1, -1) == TruncationDecision(expected, True)
    # the offset decides, whatever epoch comes with it
    assert truncation_offset(cache, leo, hw, 2, -1) == TruncationDecision(expected, True)


@pytest.mark.parametrize("leader_end, expected", [(6, 6), (30, 10)])
def test_an_undefined_leader_epoch_with_an_offset_truncates_to_that_offset(leader_end, expected):
    cache = cache_of((0, 0), (2, 4))
    decision = truncation_offset(cache, 10, 3, -1, leader_end)
    assert decision == TruncationDecision(expected, True)


def test_a_follower_without_epochs_takes_the_leaders_offset():
    assert truncation_offset(LeaderEpochCache(), 10, 2, 3, 7) == TruncationDecision(7, True)
    assert truncation_offset(LeaderEpochCache(), 10, 2, 3, 70) == TruncationDecision(10, True)


def test_the_same_epoch_truncates_to_the_earlier_of_the_two_ends():
    cache = cache_of((0, 0), (2, 4), (5, 9))
    # the leader's epoch 2 ended earlier than ours
    assert truncation_offset(cache, 12, 0, 2, 6) == TruncationDecision(6, True)
    # ours ended earlier than the leader's
    assert truncation_offset(cache, 12, 0, 2, 11) == TruncationDecision(9, True)
    # our latest epoch ends at our log end
    assert truncation_offset(cache, 12, 0, 5, 20) == TruncationDecision(12, True)
    assert truncation_offset(cache, 12, 0, 5, 10) == TruncationDecision(10, True)


def test_an_epoch_the_follower_never_held_cuts_to_its_older_epoch_and_asks_again():
    cache = cache_of((0, 0), (1, 4), (3, 9))
    decision = truncation_offset(cache, 12, 0, 2, 11)
    # our largest epoch <= 2 is 1, ending where our epoch 3 starts
    assert decision == TruncationDecision(9, False, next_epoch=1)


def test_an_epoch_older_than_all_the_followers_cuts_to_where_its_history_starts():
    # nothing we hold can be of the leader's epoch 1 (Kafka's endOffsetFor since 2.1)
    cache = cache_of((3, 0), (5, 4))
    assert truncation_offset(cache, 8, 6, 1, 5) == TruncationDecision(0, True)


def test_the_offset_is_never_above_the_log_end():
    cache = cache_of((0, 0), (1, 4), (3, 9))
    for epoch in range(-1, 6):
        for leader_end in (-1, 0, 5, 9, 12, 100):
            for hw in (0, 5, 50):
                decision = truncation_offset(cache, 10, hw, epoch, leader_end)
                assert 0 <= decision.offset <= 10, (epoch, leader_end, hw, decision)


# --- a model of replicas ----------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    offset: int
    epoch: int
    payload: str  # unique, so the same (offset, epoch) never hides different data


@dataclass
class Replica:
    name: str
    log: list[Batch] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw: int = 0

    @property
    def leo(self) -> int:
        return len(self.log)

    def append(self, epoch: int, payload: str) -> None:
        # the epoch is assigned before the batch is written, as the log must
        self.cache.assign(epoch, self.leo)
        self.log.append(Batch(self.leo, epoch, payload))

    def truncate_to(self, offset: int) -> None:
        del self.log[offset:]
        # even when no batch goes: an epoch this replica assigned as leader but never
        # wrote may sit at the log end, and would make the next fetched batch's epoch
        # look like a step back (Kafka's UnifiedLog.truncateTo does the same)
        self.cache.truncate_from_end(self.leo)
        self.hw = min(self.hw, self.leo)

    def answer(self, requested_epoch: int) -> tuple[int, int]:
        """This replica, as leader, answering OffsetForLeaderEpoch."""
        return self.cache.end_offset_for(requested_epoch, self.leo)

    def payloads(self) -> list[str]:
        return [b.payload for b in self.log]


def common_prefix(a: list[Batch], b: list[Batch]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@dataclass
class Stats:
    rounds: list[int] = field(default_factory=list)
    hw_fallbacks: int = 0
    out_of_range: int = 0
    truncated: int = 0


def reconcile(follower: Replica, leader: Replica, stats: Stats | None = None) -> int:
    """The follower's OffsetForLeaderEpoch rounds against the leader, truncating as each
    decision says; then a fetch past the leader's end answers OFFSET_OUT_OF_RANGE and the
    follower truncates to it (Kafka's fetchOffsetAndTruncate). Checks the outcome and
    returns the number of rounds."""
    before = list(follower.log)
    old_hw = follower.hw
    shared = common_prefix(before, leader.log)
    rounds = 0
    requested = epoch_to_request(follower.cache)
    if requested == -1:
        # no epochs (an empty log here): Kafka truncates to the high watermark
        follower.truncate_to(follower.hw)
    while requested != -1:
        rounds += 1
        assert rounds <= 50, "truncation rounds did not converge"
        leader_epoch, leader_end = leader.answer(requested)
        decision = truncation_offset(follower.cache, follower.leo, follower.hw,
                                     leader_epoch, leader_end)
        assert decision.offset <= follower.leo
        if leader_end == -1 and stats is not None:
            stats.hw_fallbacks += 1
        follower.truncate_to(decision.offset)
        if decision.complete:
            break
        assert decision.next_epoch < requested, "each round asks about an older epoch"
        requested = decision.next_epoch
    if follower.leo > leader.leo:
        follower.truncate_to(leader.leo)
        if stats is not None:
            stats.out_of_range += 1
    if stats is not None:
        stats.rounds.append(rounds)
        stats.truncated += follower.leo < len(before)

    assert follower.log == leader.log[:follower.leo], "follower is not a prefix of the leader"
    assert follower.leo == shared, "truncation removed batches the leader also holds"
    # in particular, everything below the old high watermark that the leader holds is kept
    kept = {b.offset for b in follower.log}
    assert all(b.offset in kept for b in before[:old_hw] if b in leader.log)
    # the cache describes the truncated log
    assert follower.cache.entries == entries_from_headers(
        (b.epoch, b.offset) for b in follower.log)
    return rounds


def fetch(follower: Replica, leader: Replica, count: int | None = None) -> None:
    """The follower copies up to `count` of the leader's batches past its log end, learning
    the leader's high watermark as of before this fetch."""
    assert follower.log == leader.log[:follower.leo], "fetching onto a divergent log"
    for batch in leader.log[follower.leo:][:count]:
        follower.cache.assign(batch.epoch, batch.offset)
        follower.log.append(batch)
    follower.hw = min(leader.hw, follower.leo)


# --- KIP-101 ----------------------------------------------------------------------------


def test_kip101_scenario1_a_committed_message_survives_a_restart_and_leader_change():
    a, b = Replica("A"), Replica("B")
    a.append(0, "m1")
    a.append(0, "m2")
    fetch(b, a, 1)
    a.hw = 1
    fetch(b, a, 1)
    a.hw = 2  # B holds m2 too: it is committed, but B learns it on its next fetch
    assert (a.hw, b.hw) == (2, 1)

    # the pre-KIP-101 rule would have B cut back to its high watermark, losing m2
    assert [batch.payload for batch in b.log[: b.hw]] == ["m1"]

    # B restarts and follows A again: its epoch 0 ends where A's does, so m2 stays
    assert reconcile(b, a) == 1
    assert b.payloads() == ["m1", "m2"]

    # A dies; B leads epoch 1 and takes m3; A comes back as a follower
    b.append(1, "m3")
    reconcile(a, b)
    fetch(a, b)
    assert a.payloads() == b.payloads() == ["m1", "m2", "m3"]


def test_kip101_scenario2_logs_do_not_diverge_after_both_restart():
    a, b = Replica("A"), Replica("B")
    a.append(0, "m1")
    a.append(0, "m2")
    fetch(b, a)
    a.hw = 2
    fetch(b, a)
    assert (a.hw, b.hw) == (2, 2)

    # power failure: B loses m2, unflushed; B restarts first, leads epoch 1, takes m3
    b.truncate_to(1)
    b.append(1, "m3")
    assert b.payloads() == ["m1", "m3"]

    # the pre-KIP-101 rule keeps A's log up to its high watermark 2: m2 at offset 1,
    # where the leader holds m3
    assert a.log[: a.hw][1] != b.log[1]

    # A asks about epoch 0; B's epoch 0 ended at 1, so A drops m2 and takes m3
    assert reconcile(a, b) == 1
    assert a.payloads() == ["m1"]
    fetch(a, b)
    assert a.payloads() == b.payloads() == ["m1", "m3"]


# --- KIP-279 ----------------------------------------------------------------------------


def test_kip279_fast_leader_fail_over_converges_in_several_rounds():
    f, lead = Replica("F"), Replica("L")
    # epoch 0, L leads: a is replicated, b is not
    lead.append(0, "a")
    fetch(f, lead)
    lead.append(0, "b")
    # epoch 1, F leads (L unreachable) and writes c, d
    f.append(1, "c")
    f.append(1, "d")
    # epoch 2, L leads (F down) and writes e, g
    lead.append(2, "e")
    lead.append(2, "g")
    # epoch 3, F leads (L down) and writes h, i
    f.append(3, "h")
    f.append(3, "i")
    # epoch 4, L leads and writes j; F comes back as its follower
    lead.append(4, "j")
    assert f.payloads() == ["a", "c", "d", "h", "i"]
    assert lead.payloads() == ["a", "b", "e", "g", "j"]

    # round 1: F asks about 3; L's largest epoch <= 3 is 2, ending at 4. F never held
    # epoch 2: it cuts to where its epoch 1 ends (3) and asks about 1
    assert lead.answer(3) == (2, 4)
    first = truncation_offset(f.cache, f.leo, f.hw, 2, 4)
    assert first == TruncationDecision(3, False, next_epoch=1)

    # KIP-101's single round would stop at min(leader end, log end) = 4, keeping c, d, h
    # where L holds b, e, g
    single_round = min(4, f.leo)
    assert f.log[:single_round] != lead.log[:single_round]

    # the whole exchange: round 2 asks about 1, L answers (0, 2); F's epoch 0 ends at 1
    assert reconcile(f, lead) == 2
    assert f.payloads() == ["a"]
    fetch(f, lead)
    assert f.payloads() == lead.payloads()


def test_a_leader_with_an_empty_log_falls_back_to_the_high_watermark_then_out_of_range():
    f, lead = Replica("F"), Replica("L")
    f.append(0, "a")
    f.append(0, "b")
    f.hw = 2
    stats = Stats()
    reconcile(f, lead, stats)
    assert (stats.hw_fallbacks, stats.out_of_range) == (1, 1)
    assert f.log == []


def test_a_leader_whose_history_starts_after_the_followers_epochs():
    # the leader lost its epoch-0 batches and was elected anyway (unclean): nothing the
    # follower holds can be trusted, and Kafka's endOffsetFor says so
    f, lead = Replica("F"), Replica("L")
    f.append(0, "a")
    f.append(0, "b")
    f.hw = 2
    lead.append(1, "x")
    lead.append(1, "y")
    lead.append(1, "z")
    assert lead.answer(0) == (0, 0)
    reconcile(f, lead)
    assert f.log == []


def test_a_new_leader_that_has_not_written_yet_answers_a_newer_epoch_with_its_log_end():
    # F led epoch 1 alone (L out of sync) and committed c by itself; L was then elected
    # uncleanly for epoch 2 and has written nothing in it. F asks about epoch 1, newer than
    # anything L holds: L's epoch 0 ends at its log end. (Kafka's leaders assign their
    # epoch on election, so it answers UNDEFINED there, and the high watermark would keep c.)
    f, lead = Replica("F"), Replica("L")
    lead.append(0, "a")
    fetch(f, lead)
    lead.append(0, "b")
    f.append(1, "c")
    f.hw = 2
    assert lead.answer(1) == (0, 2)
    reconcile(f, lead)
    assert f.payloads() == ["a"]


# --- random histories -------------------------------------------------------------------


class History:
    """Three replicas, one partition: leaders come and go, batches are appended, replicas
    crash losing an unflushed tail. Every follower reconciles with each new leader before
    it fetches, and `reconcile` checks the outcome."""

    def __init__(self, rng: random.Random, assign_on_election: bool, stats: Stats) -> None:
        self.rng = rng
        self.assign_on_election = assign_on_election
        self.stats = stats
        self.replicas = [Replica(name) for name in "ABC"]
        self.alive = {r.name: True for r in self.replicas}
        self.checkpoints: dict[str, list[EpochEntry]] = {}
        self.epoch = -1
        self.leader: Replica | None = None
        self.reconciled: set[str] = set()
        self.written = 0

    def followers(self) -> list[Replica]:
        return [r for r in self.replicas if self.alive[r.name] and r is not self.leader]

    def elect(self) -> None:
        candidates = [r for r in self.replicas if self.alive[r.name]]
        if not candidates:
            return
        self.epoch += 1
        self.leader = self.rng.choice(candidates)
        self.reconciled = set()
        if self.assign_on_election:
            # Kafka's new leader records its epoch at its log end before writing
            self.leader.cache.assign(self.epoch, self.leader.leo)

    def append(self) -> None:
        if self.leader is not None:
            for _ in range(self.rng.randint(1, 3)):
                self.written += 1
                self.leader.append(self.epoch, f"{self.epoch}:{self.written}")

    def replicate(self, follower: Replica) -> None:
        assert self.leader is not None
        if follower.name not in self.reconciled:
            reconcile(follower, self.leader, self.stats)
            self.reconciled.add(follower.name)
        fetch(follower, self.leader, self.rng.randint(0, 4))
        # the in-sync replicas: the leader and the followers that reconciled with it
        in_sync = [r.leo for r in self.replicas
                   if r is self.leader or (self.alive[r.name] and r.name in self.reconciled)]
        self.leader.hw = max(self.leader.hw, min(in_sync))

    def crash(self, replica: Replica) -> None:
        self.alive[replica.name] = False
        # the checkpoint is as new as the cache (assigned before each append), the log may
        # lose a tail that was never flushed
        self.checkpoints[replica.name] = replica.cache.entries
        lost = self.rng.choice([0, 0, 1, self.rng.randint(0, replica.leo)])
        replica.log = replica.log[: max(0, replica.leo - lost)]
        replica.hw = min(replica.hw, replica.leo)
        if replica is self.leader:
            self.leader = None

    def restart(self, replica: Replica) -> None:
        self.alive[replica.name] = True
        # loading the log: the checkpoint, cut to the recovered log end -- or, when it is
        # missing, the batch headers
        if self.rng.random() < 0.8:
            replica.cache = LeaderEpochCache(self.checkpoints[replica.name])
            replica.cache.truncate_from_end(replica.leo)
        else:
            replica.cache = LeaderEpochCache(
                entries_from_headers((b.epoch, b.offset) for b in replica.log))
        self.reconciled.discard(replica.name)

    def step(self) -> None:
        roll = self.rng.random()
        dead = [r for r in self.replicas if not self.alive[r.name]]
        # elections are frequent: back-to-back ones are what need several rounds
        if self.leader is None or roll < 0.25:
            self.elect()
        elif roll < 0.55:
            self.append()
        elif roll < 0.75:
            if self.followers():
                self.replicate(self.rng.choice(self.followers()))
        elif roll < 0.87:
            self.crash(self.rng.choice([r for r in self.replicas if self.alive[r.name]]))
        elif dead:
            self.restart(self.rng.choice(dead))

    def settle(self) -> None:
        """Everyone back, one leader, every follower caught up: all logs are equal."""
        for replica in self.replicas:
            if not self.alive[replica.name]:
                self.restart(replica)
        if self.leader is None:
            self.elect()
        assert self.leader is not None
        for follower in self.followers():
            self.replicate(follower)
            fetch(follower, self.leader)
        for replica in self.replicas:
            assert replica.log == self.leader.log


@pytest.mark.parametrize("assign_on_election", [False, True])
def test_random_histories_leave_every_follower_a_prefix_of_its_leader(assign_on_election):
    rng = random.Random(20240511)
    stats = Stats()
    for _ in range(300):
        history = History(rng, assign_on_election, stats)
        for _ in range(rng.randint(10, 80)):
            history.step()
        history.settle()
    # the histories reached the paths worth testing, not only the easy ones
    assert stats.truncated > 200
    assert sum(r >= 2 for r in stats.rounds) > 20
    assert max(stats.rounds) >= 3
    if not assign_on_election:
        assert stats.hw_fallbacks > 0 and stats.out_of_range > 0
