"""The KRaft state machine's rules one at a time: vote granting, stepping down, truncation
on a diverging epoch, the high watermark's own-epoch rule, persistence across a restart,
snapshots, check quorum, and the quorum-state file."""

from __future__ import annotations

import random

import pytest

from broker.controller import quorum_state
from broker.controller.quorum_state import ElectionState, QuorumStateError
from broker.controller.raft import (AppendEntries, BeginQuorumEpochRequest,
                                    EndQuorumEpochRequest, FetchRequest, FetchResponse,
                                    FetchSnapshotRequest, FetchSnapshotResponse, HighWatermark, IllegalStateError,
                                    InstallSnapshot, LeaderChanged, LeaderIdAndEpoch, NotLeaderError,
                                    PersistElectionState, QuorumConfig, RaftNode, Send,
                                    TruncateTo, VoteRequest, VoteResponse, EpochEndOffset)
from broker.controller.raft_log import Entry, RaftLog, Snapshot, SnapshotId
from protocol.errors import ErrorCode

VOTERS = (0, 1, 2)


def entries(epochs: list[int], start: int = 0) -> list[Entry]:
    return [Entry(start + i, e, b"x%d" % (start + i)) for i, e in enumerate(epochs)]


def make_node(node_id=0, epochs=(), election=None, voters=VOTERS, seed=0, **config):
    quorum = QuorumConfig(voters, **config)
    election = election or ElectionState(voters=voters)
    return RaftNode(node_id, quorum, random.Random(seed), election,
                    RaftLog(entries(list(epochs))))


def sent(effects, kind=None) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)
            and (kind is None or isinstance(e.message, kind))]


def only(effects, kind) -> Send:
    found = sent(effects, kind)
    assert len(found) == 1, effects
    return found[0]


def to_candidate(node: RaftNode, effects: list, now: int = 0) -> list:
    """Grant a prospective node one pre-vote (of the requests in `effects`): a candidate."""
    assert node.role == "Prospective", node.role
    request = sent(effects, VoteRequest)[0]
    assert request.message.pre_vote and request.message.candidate_epoch == node.epoch
    more = node.receive(request.destination, request.correlation_id,
                        VoteResponse(ErrorCode.NONE, -1, node.epoch, True), now)
    assert node.role == "Candidate"
    return more


def elect(node: RaftNode, now: int = 0) -> list:
    """Run node to prospective by its election timeout, grant it one pre-vote and then one
    vote."""
    node.start(now)
    effects = node.tick(node.next_deadline())
    effects += to_candidate(node, effects, now)
    request = [s for s in sent(effects, VoteRequest) if not s.message.pre_vote][0]
    voter = request.destination
    effects += node.receive(voter, request.correlation_id,
                            VoteResponse(ErrorCode.NONE, -1, node.epoch, True), now)
    assert node.is_leader
    return effects


def vote(node, candidate, epoch, last_epoch, last_offset, now=0):
    effects = node.receive(candidate, 7, VoteRequest(epoch, candidate, last_epoch, last_offset,
                                                     node.node_id), now)
    return effects, only(effects, VoteResponse).message


# -- votes ------------------------------------------------------------------------------------

def test_a_vote_goes_only_to_a_log_at_least_as_up_to_date():
    # the voter's log ends at offset 3 in epoch 2
    for last_epoch, last_offset, granted in [(1, 10, False),  # longer but older epoch
                                             (2, 2, False),  # same epoch, shorter
                                             (2, 3, True),  # the same
                                             (3, 1, True)]:  # newer epoch, even if shorter
        node = make_node(epochs=[1, 1, 2], election=ElectionState(2, voters=VOTERS))
        node.start(0)
        effects, answer = vote(node, 1, 3, last_epoch, last_offset)
        assert answer.vote_granted is granted, (last_epoch, last_offset)
        assert answer.leader_epoch == 3 and node.epoch == 3
        persisted = [e.state for e in effects if isinstance(e, PersistElectionState)]
        assert persisted[-1].voted_id == (1 if granted else -1)


def test_the_vote_is_persisted_before_it_is_answered_and_given_once_per_epoch():
    node = make_node(epochs=[1])
    node.start(0)
    effects, answer = vote(node, 1, 2, 1, 1)
    kinds = [type(e) for e in effects]
    assert answer.vote_granted
    assert kinds.index(PersistElectionState) < kinds.index(Send)
    assert not vote(node, 2, 2, 1, 5)[1].vote_granted  # a better log, but the vote is gone
    assert vote(node, 1, 2, 1, 1)[1].vote_granted  # the same candidate asking again


def test_restart_keeps_the_vote():
    node = make_node(epochs=[1])
    node.start(0)
    effects, _ = vote(node, 1, 2, 1, 1)
    persisted = [e.state for e in effects if isinstance(e, PersistElectionState)][-1]
    # the bytes the runtime writes are what the restarted node reads
    restored = quorum_state.decode(quorum_state.encode(persisted))
    reborn = RaftNode(0, QuorumConfig(VOTERS), random.Random(1), restored, node.log)
    reborn.start(100)
    assert reborn.epoch == 2 and reborn.role == "Voted"
    assert not vote(reborn, 2, 2, 1, 5)[1].vote_granted
    assert vote(reborn, 1, 2, 1, 1)[1].vote_granted


def test_a_restarted_leader_resigns_instead_of_leading_its_epoch_again():
    node = make_node()
    persisted = [e.state for e in elect(node) if isinstance(e, PersistElectionState)][-1]
    reborn = RaftNode(0, QuorumConfig(VOTERS), random.Random(1), persisted, node.log)
    effects = reborn.start(0)
    assert reborn.role == "Resigned" and reborn.epoch == persisted.epoch
    assert {s.destination for s in sent(effects, EndQuorumEpochRequest)} == {1, 2}
    assert not vote(reborn, 1, persisted.epoch, 1, 1)[1].vote_granted


# -- epochs -----------------------------------------------------------------------------------

def test_the_leader_steps_down_on_a_higher_epoch():
    node = make_node(epochs=[1, 1])
    elect(node)
    assert node.epoch == 2
    effects, answer = vote(node, 2, 5, 1, 0)  # a higher epoch but a stale log
    assert not node.is_leader and node.role == "Unattached" and node.epoch == 5
    assert not answer.vote_granted and answer.leader_epoch == 5
    assert [e.state.epoch for e in effects if isinstance(e, PersistElectionState)] == [5]


def test_requests_from_an_older_epoch_are_fenced():
    node = make_node()
    elect(node)
    answer = only(node.receive(1, 3, FetchRequest(1, node.epoch - 1, 0, 0), 0),
                  FetchResponse).message
    assert answer.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert answer.current_leader == LeaderIdAndEpoch(0, node.epoch)
    _, vote_answer = vote(node, 1, node.epoch - 1, 9, 99)
    assert vote_answer.error_code == ErrorCode.FENCED_LEADER_EPOCH and not vote_answer.vote_granted


def test_begin_quorum_epoch_makes_a_voter_follow_and_fetch():
    node = make_node(node_id=1, epochs=[1])
    node.start(0)
    effects = node.receive(0, 4, BeginQuorumEpochRequest(0, 3, 1), 10)
    assert node.role == "Follower" and node.leader_id == 0 and node.epoch == 3
    fetch = only(effects, FetchRequest)
    assert fetch.destination == 0
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch,
            fetch.message.current_leader_epoch) == (1, 1, 3)


def test_the_election_timeout_is_randomised_by_the_injected_rng():
    deadlines = set()
    for seed in range(20):
        node = make_node(seed=seed, election_timeout_ms=1000)
        node.start(0)
        deadline = node.next_deadline()
        assert 1000 <= deadline < 2000
        again = make_node(seed=seed, election_timeout_ms=1000)
        again.start(0)
        assert again.next_deadline() == deadline  # same seed, same schedule
        deadlines.add(deadline)
    assert len(deadlines) > 10


# -- replication ------------------------------------------------------------------------------

def follower_of(leader: RaftNode, node_id: int, epochs: list[int],
                **config) -> tuple[RaftNode, Send]:
    node = make_node(node_id=node_id, epochs=epochs,
                     election=ElectionState(leader.epoch, leader.node_id, voters=VOTERS),
                     **config)
    return node, only(node.start(0), FetchRequest)


def test_a_diverging_follower_truncates_to_the_leaders_epoch_end_and_catches_up():
    leader = make_node(epochs=[1, 1, 2, 2])
    elect(leader)  # epoch 3: its control entry is at offset 4
    follower, fetch = follower_of(leader, 1, [1, 1, 1, 1, 1])
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (5, 1)
    answer = only(leader.receive(1, fetch.correlation_id, fetch.message, 0), FetchResponse)
    assert answer.message.diverging_epoch == EpochEndOffset(epoch=1, end_offset=2)
    assert answer.message.records == ()
    effects = follower.receive(0, answer.correlation_id, answer.message, 0)
    assert TruncateTo(2) in effects and follower.log.end_offset == 2
    fetch = only(effects, FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (2, 1)
    answer = only(leader.receive(1, fetch.correlation_id, fetch.message, 0), FetchResponse)
    effects = follower.receive(0, answer.correlation_id, answer.message, 0)
    assert [e.epoch for e in follower.log.entries] == [1, 1, 2, 2, 3]
    assert [e.offset for e in only_kind(effects, AppendEntries).entries] == [2, 3, 4]


def only_kind(effects, kind):
    found = [e for e in effects if isinstance(e, kind)]
    assert len(found) == 1, effects
    return found[0]


def test_the_high_watermark_moves_only_past_an_entry_of_the_leaders_epoch():
    leader = make_node(epochs=[1, 1, 2, 2])
    elect(leader)  # epoch 3 starts at offset 4
    assert leader.high_watermark == 0
    # entries 0-3 are on a majority (the leader and voter 1), but are older epochs
    effects = leader.receive(1, 1, FetchRequest(1, 3, 4, 2), 10)
    assert leader.high_watermark == 0 and not [e for e in effects if isinstance(e, HighWatermark)]
    # voter 1 now has the leader's own entry at 4: everything up to it commits
    effects = leader.receive(1, 2, FetchRequest(1, 3, 5, 3), 20)
    assert HighWatermark(5) in effects and leader.high_watermark == 5
    answer = only(effects, FetchResponse).message
    assert answer.high_watermark == 5  # answered now, not held, since it moved the HW


def test_a_follower_takes_the_high_watermark_no_further_than_its_log():
    leader = make_node(epochs=[1, 1])
    elect(leader)
    leader.receive(2, 1, FetchRequest(2, 2, 3, 2), 0)  # voter 2 has everything: HW 3
    leader.append(2, [b"a", b"b"], 0)
    follower, fetch = follower_of(leader, 1, [1, 1])
    answer = only(leader.receive(1, fetch.correlation_id,
                                 FetchRequest(1, 2, 2, 1, max_wait_ms=0), 0), FetchResponse)
    assert answer.message.high_watermark == 3
    effects = follower.receive(0, fetch.correlation_id, answer.message, 0)
    assert follower.log.end_offset == 5 and follower.high_watermark == 3
    assert HighWatermark(3) in effects


def test_a_caught_up_fetch_is_held_until_there_is_something_to_answer():
    leader = make_node(epochs=[1])
    elect(leader)
    leader.receive(1, 1, FetchRequest(1, 2, 2, 2, max_wait_ms=500), 0)  # HW 2, answered
    held = leader.receive(1, 2, FetchRequest(1, 2, 2, 2, max_wait_ms=500), 10)
    assert sent(held) == [] and leader.next_deadline() <= 510
    effects = leader.append(2, [b"a"], 20)
    answer = only(effects, FetchResponse)
    assert answer.correlation_id == 2
    assert [e.record for e in answer.message.records] == [b"a"]
    leader.receive(1, 3, FetchRequest(1, 2, 3, 2, max_wait_ms=500), 30)  # HW moves: answered
    leader.receive(1, 4, FetchRequest(1, 2, 3, 2, max_wait_ms=500), 40)  # held
    expired = leader.tick(540)
    assert only(expired, FetchResponse).message.records == ()


def test_appends_only_on_the_leader_of_that_epoch():
    node = make_node()
    node.start(0)
    with pytest.raises(NotLeaderError):
        node.append(1, [b"a"], 0)
    elect(node)
    with pytest.raises(NotLeaderError):
        node.append(node.epoch - 1, [b"a"], 0)
    assert only_kind(node.append(node.epoch, [b"a"], 0), AppendEntries).entries[0].offset == 1


def test_the_only_voter_leads_at_once_and_commits_alone():
    node = make_node(voters=(0,))
    effects = node.start(0)
    assert node.is_leader and node.epoch == 1 and HighWatermark(1) in effects
    assert HighWatermark(3) in node.append(1, [b"a", b"b"], 5)


def test_truncating_below_the_high_watermark_is_refused():
    node = make_node(node_id=1, epochs=[1, 1, 1],
                     election=ElectionState(2, 0, voters=VOTERS))
    fetch = only(node.start(0), FetchRequest)
    node.high_watermark = 3  # as if the leader had said so earlier
    bad = FetchResponse(ErrorCode.NONE, LeaderIdAndEpoch(0, 2), 3, 0,
                        diverging_epoch=EpochEndOffset(1, 1))
    with pytest.raises(IllegalStateError):
        node.receive(0, fetch.correlation_id, bad, 0)


# -- snapshots --------------------------------------------------------------------------------

def test_a_follower_below_the_log_start_fetches_and_installs_the_snapshot():
    leader = make_node(epochs=[1, 1, 1])
    elect(leader)
    leader.append(2, [b"a", b"b"], 0)
    leader.receive(2, 1, FetchRequest(2, 2, 6, 2), 0)  # HW 6
    leader.create_snapshot(5, b"image-of-0-to-4")
    assert leader.log.start_offset == 5
    follower, fetch = follower_of(leader, 1, [1])
    answer = only(leader.receive(1, fetch.correlation_id, fetch.message, 0), FetchResponse)
    assert answer.message.snapshot_id is not None
    assert (answer.message.snapshot_id.end_offset, answer.message.snapshot_id.epoch) == (5, 2)
    effects = follower.receive(0, answer.correlation_id, answer.message, 0)
    request = only(effects, FetchSnapshotRequest)
    assert request.message.snapshot_id == answer.message.snapshot_id
    answer = only(leader.receive(1, request.correlation_id, request.message, 0),
                  FetchSnapshotResponse)
    effects = follower.receive(0, answer.correlation_id, answer.message, 0)
    installed = only_kind(effects, InstallSnapshot).snapshot
    assert installed.data == b"image-of-0-to-4" and follower.high_watermark == 5
    fetch = only(effects, FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (5, 2)
    answer = only(leader.receive(1, fetch.correlation_id, fetch.message, 0), FetchResponse)
    follower.receive(0, answer.correlation_id, answer.message, 0)
    assert [e.record for e in follower.log.entries] == [b"b"] and follower.high_watermark == 6


def test_a_follower_restarted_on_a_snapshot_at_the_high_watermark_is_told_it():
    """Its high watermark does not move (the snapshot's end is the quorum's), but the first
    one it learns is still handed to the runtime, which publishes its image only then."""
    leader = make_node(epochs=[1, 1, 1])
    elect(leader)  # epoch 2: its control entry is at offset 3
    leader.receive(2, 1, FetchRequest(2, 2, 4, 2), 0)
    assert leader.high_watermark == 4
    follower = RaftNode(1, QuorumConfig(VOTERS), random.Random(1),
                        ElectionState(leader.epoch, leader.node_id, voters=VOTERS),
                        RaftLog((), Snapshot(SnapshotId(4, 2), b"image")))
    assert follower.high_watermark == 4
    fetch = only(follower.start(0), FetchRequest)
    answer = only(leader.receive(1, fetch.correlation_id, fetch.message, 0), FetchResponse)
    effects = follower.receive(0, answer.correlation_id, answer.message, 0)
    assert only_kind(effects, HighWatermark).offset == 4
    # from then on, only news
    fetch = only(effects, FetchRequest)
    leader.append(2, [b"more"], 0)
    answer = only(leader.receive(1, fetch.correlation_id, fetch.message, 0), FetchResponse)
    effects = follower.receive(0, answer.correlation_id, answer.message, 0)
    assert [e.offset for e in effects if isinstance(e, HighWatermark)] == []
    assert follower.log.end_offset == 5


def test_a_snapshot_must_be_committed():
    leader = make_node()
    elect(leader)
    leader.append(1, [b"a"], 0)
    with pytest.raises(ValueError):
        leader.create_snapshot(2, b"not committed yet")


# -- check quorum and resignation -------------------------------------------------------------

def test_a_leader_nobody_fetches_from_resigns_and_names_its_successor():
    leader = make_node(fetch_timeout_ms=2000)
    elect(leader)
    leader.receive(2, 1, FetchRequest(2, 1, 1, 1), 100)  # voter 2 is the most caught up
    effects = leader.tick(100 + 3000)
    assert leader.role == "Resigned"
    request = sent(effects, EndQuorumEpochRequest)[0].message
    assert request.preferred_successors == (2, 1)
    follower = make_node(node_id=2, election=ElectionState(1, 0, voters=VOTERS))
    follower.start(3000)
    follower.receive(0, 9, request, 3100)
    assert follower.next_deadline() == 3100  # first in line: stands at once
    effects = follower.tick(3100)
    assert follower.role == "Prospective" and follower.epoch == 1
    # voter 1 heard the resignation too: it grants the pre-vote though it fetched lately
    voter = make_node(node_id=1, election=ElectionState(1, 0, voters=VOTERS))
    fetch = only(voter.start(3000), FetchRequest)
    voter.receive(0, fetch.correlation_id, FetchResponse(
        ErrorCode.NONE, LeaderIdAndEpoch(0, 1), high_watermark=0), 3050)
    voter.receive(0, 10, request, 3100)
    pre_vote = [s for s in sent(effects, VoteRequest) if s.destination == 1][0]
    answer = only(voter.receive(2, pre_vote.correlation_id, pre_vote.message, 3100),
                  VoteResponse)
    assert answer.message.vote_granted and voter.role == "Follower"
    follower.receive(1, pre_vote.correlation_id, answer.message, 3100)
    assert follower.role == "Candidate" and follower.epoch == 2


# -- the quorum-state file --------------------------------------------------------------------

def test_quorum_state_round_trips_in_kafkas_json_shape():
    state = ElectionState(epoch=7, leader_id=2, voted_id=1, voters=(0, 1, 2))
    data = quorum_state.encode(state)
    assert quorum_state.decode(data) == state
    import json
    doc = json.loads(data)
    assert doc["leaderEpoch"] == 7 and doc["votedId"] == 1 and doc["data_version"] == 0
    assert doc["currentVoters"] == [{"voterId": 0}, {"voterId": 1}, {"voterId": 2}]


@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"data_version": 9}',
                                  b'{"data_version": 0, "leaderEpoch": 1}',
                                  b'{"data_version": 0, "leaderEpoch": -1, "leaderId": -1, '
                                  b'"votedId": -1}',
                                  b'{"data_version": 0, "leaderEpoch": "1", "leaderId": -1, '
                                  b'"votedId": -1}', b"\xff\xfe"])
def test_a_bad_quorum_state_is_refused(data):
    with pytest.raises(QuorumStateError):
        quorum_state.decode(data)


def test_a_quorum_state_behind_the_log_resumes_at_the_logs_epoch():
    node = make_node(epochs=[1, 4], election=ElectionState(2, voters=VOTERS))
    effects = node.start(0)
    assert node.epoch == 4 and node.role == "Unattached"
    assert [e.state.epoch for e in effects if isinstance(e, PersistElectionState)] == [4]
    assert node.next_deadline() >= 1000  # a full election timeout, not at once


def test_a_non_voter_never_stands_for_election():
    node = make_node(node_id=9)
    node.start(0)
    for now in (2000, 4000, 8000):
        assert node.tick(now) == [] and node.role == "Unattached"
        assert node.next_deadline() > now


def test_an_answer_to_an_abandoned_fetch_is_ignored():
    leader = make_node(epochs=[1])
    elect(leader)
    follower, first = follower_of(leader, 1, [1], request_timeout_ms=500)
    answer = only(leader.receive(1, first.correlation_id, first.message, 0), FetchResponse)
    assert follower.next_deadline() == 500
    retry = only(follower.tick(500), FetchRequest)  # timed out: sent again
    assert retry.correlation_id != first.correlation_id
    assert follower.receive(0, answer.correlation_id, answer.message, 600) == []
    assert follower.log.end_offset == 1
    answer = only(leader.receive(1, retry.correlation_id, retry.message, 0), FetchResponse)
    follower.receive(0, answer.correlation_id, answer.message, 700)
    assert follower.log.end_offset == 2


def test_a_vote_answer_from_an_older_epoch_does_not_count():
    node = make_node()
    node.start(0)
    to_candidate(node, node.tick(node.next_deadline()))  # candidate in epoch 1
    node.tick(node.next_deadline())  # the election timed out: backing off
    to_candidate(node, node.tick(node.next_deadline()))  # candidate in epoch 2
    assert node.role == "Candidate" and node.epoch == 2
    node.receive(1, 1, VoteResponse(ErrorCode.NONE, -1, 1, True), 0)
    assert not node.is_leader
    node.receive(1, 2, VoteResponse(ErrorCode.NONE, -1, 2, True), 0)
    assert node.is_leader and node.epoch == 2


def test_a_fetch_is_answered_at_once_while_its_sender_has_not_heard_the_high_watermark():
    leader = make_node(epochs=[1])  # voters 0, 1, 2
    elect(leader)
    leader.receive(1, 1, FetchRequest(1, 2, 2, 2, max_wait_ms=500), 0)  # HW -> 2, told 1
    # voter 2 is caught up too, but was never told the high watermark: not held
    assert only(leader.receive(2, 1, FetchRequest(2, 2, 2, 2, max_wait_ms=500), 5),
                FetchResponse).message.high_watermark == 2
    assert sent(leader.receive(2, 2, FetchRequest(2, 2, 2, 2, max_wait_ms=500), 6)) == []


def test_a_follower_that_cannot_reach_its_leader_at_all_stands_at_once():
    node = make_node(node_id=1, epochs=[1])
    node.start(0)
    node.receive(0, 4, BeginQuorumEpochRequest(0, 3, 1), 10)
    assert node.leader_unreachable(2, 20) == [] and node.role == "Follower"  # not its leader
    effects = node.leader_unreachable(0, 20)
    assert node.role == "Prospective" and node.epoch == 3
    assert {s.destination for s in sent(effects, VoteRequest)} == {0, 2}


def test_an_observer_follows_a_leader_it_is_told_of_and_fetches():
    observer = make_node(node_id=7, epochs=[1])  # voters 0, 1, 2; 7 is a broker-only node
    observer.start(0)
    assert observer.observe_leader(9, 3, 5) == []  # not a voter: never followed
    effects = observer.observe_leader(1, 3, 10)
    assert observer.role == "Follower" and observer.leader_id == 1 and observer.epoch == 3
    assert only(effects, FetchRequest).destination == 1
    voter = make_node(node_id=2, epochs=[1])
    voter.start(0)
    assert voter.observe_leader(1, 3, 10) == [] and voter.leader_id == -1


# -- pre-vote (KIP-996) -----------------------------------------------------------------------

class Cluster:
    """Voters wired with a lossless, instant network and one injected clock. A stalled node
    neither ticks nor receives: what is sent to it waits, as bytes wait in its socket while
    its event loop is blocked."""

    def __init__(self, **config):
        self.nodes = {i: make_node(i, seed=i, **config) for i in VOTERS}
        self.now = 0
        self.stalled: set[int] = set()
        self.waiting: list[tuple[int, Send]] = []
        for node in self.nodes.values():
            self.deliver(node.node_id, node.start(0))

    def deliver(self, source: int, effects: list) -> None:
        queue = [(source, s) for s in sent(effects)]
        while queue:
            src, send = queue.pop(0)
            if send.destination in self.stalled:
                self.waiting.append((src, send))
                continue
            out = self.nodes[send.destination].receive(src, send.correlation_id,
                                                       send.message, self.now)
            queue += [(send.destination, s) for s in sent(out)]

    def run_until(self, until: int) -> None:
        while True:
            live = [n for i, n in self.nodes.items() if i not in self.stalled]
            node = min(live, key=lambda n: n.next_deadline())
            if node.next_deadline() > until:
                self.now = until
                return
            self.now = max(self.now, node.next_deadline())
            self.deliver(node.node_id, node.tick(self.now))

    def resume(self, node_id: int) -> None:
        """The stalled node's loop runs again: its timers are all overdue, so it ticks
        first, then reads what waited for it."""
        self.stalled.discard(node_id)
        self.deliver(node_id, self.nodes[node_id].tick(self.now))
        waiting, self.waiting = self.waiting, []
        for src, send in waiting:
            self.deliver(src, [send])

    def leader(self) -> RaftNode:
        leaders = [n for n in self.nodes.values() if n.is_leader]
        assert len(leaders) == 1, [(n.node_id, n.role, n.epoch) for n in self.nodes.values()]
        return leaders[0]


def test_a_follower_that_stalls_past_its_timers_does_not_unseat_a_healthy_leader():
    cluster = Cluster()
    cluster.run_until(5000)
    leader = cluster.leader()
    epoch = leader.epoch
    stalled = next(i for i in VOTERS if i != leader.node_id)
    other = next(i for i in VOTERS if i not in (leader.node_id, stalled))
    assert cluster.nodes[stalled].role == "Follower"
    cluster.stalled.add(stalled)
    # its loop is blocked (a long catch-up replay) past the fetch and election timeouts
    cluster.run_until(cluster.now + 3 * cluster.nodes[stalled].config.fetch_timeout_ms)
    assert cluster.nodes[stalled].next_deadline() < cluster.now
    cluster.resume(stalled)
    # it asked for pre-votes, was refused by the leader and by the follower that still
    # hears from it, and went back to following without bumping the epoch
    node = cluster.nodes[stalled]
    assert node.role == "Follower" and node.leader_id == leader.node_id and node.epoch == epoch
    assert cluster.leader() is leader and leader.epoch == epoch
    cluster.run_until(cluster.now + 10_000)
    assert cluster.leader() is leader and leader.epoch == epoch
    assert cluster.nodes[other].epoch == epoch
    assert node.log.end_offset == leader.log.end_offset


def test_a_pre_vote_leaves_the_receiver_as_it_was():
    node = make_node(epochs=[1], election=ElectionState(3, voted_id=1, voters=VOTERS))
    node.start(0)
    effects = node.receive(2, 7, VoteRequest(3, 2, 1, 1, 0, pre_vote=True), 10)
    answer = only(effects, VoteResponse).message
    # it voted for 1 in epoch 3, yet would vote for 2 were 2 to stand in epoch 4
    assert answer.vote_granted and answer.leader_epoch == 3
    assert not [e for e in effects if isinstance(e, PersistElectionState)]
    assert node.role == "Voted" and node.election.voted_id == 1
    stale = only(node.receive(2, 8, VoteRequest(3, 2, 0, 0, 0, pre_vote=True), 10),
                 VoteResponse).message
    assert not stale.vote_granted  # a log behind ours: refused, as a vote would be


def test_a_follower_refuses_pre_votes_while_its_leader_answers_its_fetches():
    node = make_node(node_id=1, epochs=[1], fetch_timeout_ms=2000)
    node.start(0)
    fetch = only(node.receive(0, 4, BeginQuorumEpochRequest(0, 3, 1), 10), FetchRequest)
    node.receive(0, fetch.correlation_id, FetchResponse(ErrorCode.NONE, LeaderIdAndEpoch(0, 3),
                                       high_watermark=1), 100)

    def pre_vote(now):
        return only(node.receive(2, 9, VoteRequest(3, 2, 1, 1, 1, pre_vote=True), now),
                    VoteResponse).message

    assert not pre_vote(1500).vote_granted and node.role == "Follower"
    # no answer from the leader for a whole fetch timeout: it grants
    assert pre_vote(2100).vote_granted and node.role == "Follower" and node.epoch == 3


def test_a_leader_refuses_pre_votes():
    leader = make_node()
    elect(leader)
    answer = only(leader.receive(1, 9, VoteRequest(leader.epoch, 1, 5, 5, 0, pre_vote=True),
                                 10), VoteResponse).message
    assert not answer.vote_granted and leader.is_leader


def test_a_prospective_refused_by_a_majority_follows_its_leader_again():
    node = make_node(node_id=1, epochs=[1])
    node.start(0)
    node.receive(0, 4, BeginQuorumEpochRequest(0, 3, 1), 10)
    effects = node.tick(node.next_deadline())
    assert node.role == "Prospective" and node.epoch == 3 and node.leader_id == 0
    assert not [e for e in effects if isinstance(e, (PersistElectionState, LeaderChanged))]
    requests = sent(effects, VoteRequest)
    assert {r.destination for r in requests} == {0, 2}
    assert all(r.message.pre_vote and r.message.candidate_epoch == 3 for r in requests)
    refusal = VoteResponse(ErrorCode.NONE, 0, 3, False)
    node.receive(requests[0].destination, requests[0].correlation_id, refusal, 2100)
    assert node.role == "Prospective"  # one refusal of two: not lost yet
    effects = node.receive(requests[1].destination, requests[1].correlation_id, refusal, 2100)
    assert node.role == "Follower" and node.epoch == 3 and node.leader_id == 0
    assert only(effects, FetchRequest).destination == 0


def test_a_late_answer_to_an_old_vote_does_not_count_as_a_pre_vote():
    node = make_node()
    node.start(0)
    effects = node.tick(node.next_deadline())
    effects += to_candidate(node, effects)  # candidate in epoch 1
    vote_request = [s for s in sent(effects, VoteRequest) if not s.message.pre_vote][0]
    node.tick(node.next_deadline())  # the election timed out: backing off
    node.tick(node.next_deadline())
    assert node.role == "Prospective" and node.epoch == 1
    node.receive(vote_request.destination, vote_request.correlation_id,
                 VoteResponse(ErrorCode.NONE, -1, 1, True), 0)
    assert node.role == "Prospective"
