"""KIP-853's voter changes in the pure KRaft state machine, one rule at a time: the voter set
read from the log's latest VotersRecord (uncommitted included), the bootstrap voter set
written by the first leader, AddRaftVoter only for an observer that caught up, one change at
a time, Kafka's errors for bad requests (which change nothing), a leader that removed itself
resigning once that commits, snapshots that carry the voter set, and the static quorum
(kraft.version 0) refusing changes."""

from __future__ import annotations

import random
import uuid

from broker.controller.quorum_state import ElectionState
from broker.controller.raft import (AddRaftVoterRequest, AddRaftVoterResponse, AppendEntries,
                                    EndQuorumEpochRequest, FetchRequest, FetchResponse,
                                    FetchSnapshotRequest, FetchSnapshotResponse, QuorumConfig,
                                    RaftNode, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
                                    UpdateRaftVoterRequest, UpdateRaftVoterResponse)
from broker.controller.raft_batches import batches_to_entries, entries_to_batches
from broker.controller.raft_log import Entry, RaftLog
from broker.controller.voter_set import Endpoint, Voter, VoterSet, decode_voters, encode_voters
from protocol.errors import ErrorCode
from tests.broker.controller.test_raft import elect, only, sent

E = ErrorCode
ADMIN = -2


def voter(node_id: int) -> Voter:
    return Voter(node_id, uuid.UUID(int=100 + node_id),
                 (Endpoint("CONTROLLER", "localhost", 9000 + node_id),))


def bootstrap(*ids: int) -> VoterSet:
    return VoterSet.of(voter(i) for i in ids)


def make(node_id: int = 0, voters=(0, 1, 2), log: RaftLog | None = None) -> RaftNode:
    config = QuorumConfig(tuple(voters), bootstrap_voters=bootstrap(*voters))
    return RaftNode(node_id, config, random.Random(0), ElectionState(), log or RaftLog())


def fetch(leader: RaftNode, replica: int, now: int = 0) -> list:
    """`replica` fetches everything the leader has: it is caught up."""
    return leader.receive(replica, 50, FetchRequest(
        replica, leader.epoch, leader.log.end_offset, leader.log.last_fetched_epoch,
        max_wait_ms=0), now)


def committed_leader(voters=(0, 1, 2), now: int = 0) -> RaftNode:
    """Node 0 leading, its epoch's first entries committed by the other voters' fetches."""
    node = make(0, voters)
    elect(node, now)
    for v in voters[1:]:
        fetch(node, v, now)
    st = node.state
    assert st.high_watermark == node.log.end_offset  # type: ignore[union-attr]
    return node


def answer(effects, kind):
    return only(effects, kind).message


def test_the_first_leader_writes_the_bootstrap_voter_set_into_the_log():
    node = make(0)
    effects = elect(node)
    appended = [e for a in effects if isinstance(a, AppendEntries) for e in a.entries]
    assert [e.voters for e in appended] == [None, bootstrap(0, 1, 2)]
    assert node.log.voters_offset == 1 and node.voters == (0, 1, 2)


def test_a_voters_entry_is_a_control_batch_holding_a_voters_record():
    entry = Entry(1, 1, b"", True, bootstrap(0, 3))
    [back] = batches_to_entries(entries_to_batches([entry]))
    assert back == entry
    assert decode_voters(encode_voters(bootstrap(0, 3))) == bootstrap(0, 3)


def test_add_voter_needs_the_observer_caught_up_then_takes_effect_uncommitted():
    leader = committed_leader()
    refused = answer(leader.receive(ADMIN, 1, AddRaftVoterRequest(voter(3)), 0),
                     AddRaftVoterResponse)
    assert refused.error_code == E.REQUEST_TIMED_OUT  # it never fetched
    assert leader.voters == (0, 1, 2)
    end = leader.log.end_offset
    fetch(leader, 3)  # an observer, now caught up
    effects = leader.receive(ADMIN, 2, AddRaftVoterRequest(voter(3)), 0)
    assert not sent(effects, AddRaftVoterResponse)  # answered once committed
    assert leader.log.voters_offset == end and leader.voters == (0, 1, 2, 3)
    # the new set counts at once: 0 and 1 are no longer a majority of four
    fetch(leader, 1)
    assert leader.high_watermark == end
    effects = fetch(leader, 3)
    assert leader.high_watermark == end + 1
    assert answer(effects, AddRaftVoterResponse).error_code == E.NONE


def test_one_voter_change_at_a_time():
    leader = committed_leader()
    fetch(leader, 3)
    leader.receive(ADMIN, 1, AddRaftVoterRequest(voter(3)), 0)
    for request in (RemoveRaftVoterRequest(1, voter(1).directory_id),
                    AddRaftVoterRequest(voter(4))):
        end = leader.log.end_offset
        effects = leader.receive(ADMIN, 2, request, 0)
        refused = answer(effects, (AddRaftVoterResponse, RemoveRaftVoterResponse))
        assert refused.error_code == E.REQUEST_TIMED_OUT
        assert leader.log.end_offset == end


def test_a_change_waits_for_an_entry_of_the_leaders_epoch_to_commit():
    node = make(0)
    elect(node)
    effects = node.receive(ADMIN, 1, RemoveRaftVoterRequest(2, voter(2).directory_id), 0)
    assert answer(effects, RemoveRaftVoterResponse).error_code == E.REQUEST_TIMED_OUT
    assert node.voters == (0, 1, 2)


def test_bad_requests_answer_kafkas_errors_and_change_nothing():
    leader = committed_leader((0, 1))
    end = leader.log.end_offset
    cases = [
        (RemoveRaftVoterRequest(5, voter(5).directory_id), RemoveRaftVoterResponse,
         E.VOTER_NOT_FOUND),  # not a voter
        (RemoveRaftVoterRequest(1, uuid.UUID(int=9)), RemoveRaftVoterResponse,
         E.VOTER_NOT_FOUND),  # the voter's id, another directory
        (AddRaftVoterRequest(voter(1)), AddRaftVoterResponse, E.DUPLICATE_VOTER),
        (AddRaftVoterRequest(Voter(3, voter(3).directory_id)), AddRaftVoterResponse,
         E.INVALID_REQUEST),  # no endpoint
        (UpdateRaftVoterRequest(leader.epoch, voter(7)), UpdateRaftVoterResponse,
         E.VOTER_NOT_FOUND),
    ]
    for request, kind, error in cases:
        assert answer(leader.receive(ADMIN, 1, request, 0), kind).error_code == error
        assert leader.log.end_offset == end and leader.voters == (0, 1)


def test_removing_the_last_voter_is_refused():
    node = make(0, (0,))
    node.start(0)
    assert node.is_leader and node.high_watermark == node.log.end_offset
    effects = node.receive(ADMIN, 1, RemoveRaftVoterRequest(0, voter(0).directory_id), 0)
    assert answer(effects, RemoveRaftVoterResponse).error_code == E.VOTER_NOT_FOUND
    assert node.voters == (0,) and node.is_leader


def test_a_leader_that_removed_itself_leads_until_it_commits_then_resigns():
    leader = committed_leader()
    end = leader.log.end_offset
    leader.receive(ADMIN, 1, RemoveRaftVoterRequest(0, voter(0).directory_id), 0)
    assert leader.voters == (1, 2) and not leader.is_voter and leader.is_leader
    fetch(leader, 1)
    assert leader.high_watermark == end  # one of two new voters is no majority
    effects = fetch(leader, 2)
    assert answer(effects, RemoveRaftVoterResponse).error_code == E.NONE
    assert leader.next_deadline() == 0
    effects = leader.tick(1)
    assert not leader.is_leader
    assert {s.destination for s in sent(effects, EndQuorumEpochRequest)} == {1, 2}
    # it never stands again: a later epoch names another leader
    effects = leader.tick(leader.next_deadline())
    assert leader.role == "Unattached" and not leader.may_stand


def test_losing_the_leadership_answers_the_change_not_leader():
    leader = committed_leader()
    fetch(leader, 3)
    leader.receive(ADMIN, 1, AddRaftVoterRequest(voter(3)), 0)
    effects = leader.resign(0)
    assert answer(effects, AddRaftVoterResponse).error_code == E.NOT_LEADER_OR_FOLLOWER


def test_a_change_not_committed_in_time_is_answered_timed_out():
    leader = committed_leader()
    fetch(leader, 3)
    leader.receive(ADMIN, 1, AddRaftVoterRequest(voter(3), timeout_ms=500), 0)
    effects = leader.tick(500)
    assert answer(effects, AddRaftVoterResponse).error_code == E.REQUEST_TIMED_OUT


def test_a_follower_takes_the_voter_set_from_the_log_and_loses_it_on_truncation():
    log = RaftLog([Entry(0, 1, b"", True), Entry(1, 1, b"", True, bootstrap(0, 1, 2)),
                   Entry(2, 2, b"", True, bootstrap(0, 1, 2, 3))])
    node = make(3, (0, 1, 2), log)
    assert node.voters == (0, 1, 2, 3) and node.is_voter
    node.log.truncate_to(2)
    assert node.voters == (0, 1, 2) and not node.is_voter


def test_a_snapshot_carries_the_voter_set_to_a_follower_that_installs_it():
    leader = committed_leader()
    fetch(leader, 3)
    leader.receive(ADMIN, 1, AddRaftVoterRequest(voter(3)), 0)
    fetch(leader, 1)
    fetch(leader, 2)
    end = leader.high_watermark
    [taken] = leader.create_snapshot(end, b"image")
    assert taken.snapshot.voters == bootstrap(0, 1, 2, 3)
    assert leader.log.voters == bootstrap(0, 1, 2, 3) and leader.log.voters_offset == -1
    # a new follower, behind the log start, installs it and knows the voters
    follower = make(4, (0, 1, 2))
    follower.observe_leader(0, leader.epoch, 0)
    [request] = sent(leader.receive(4, 9, FetchRequest(4, leader.epoch, 0, 0), 0))
    sid = request.message.snapshot_id
    follower.receive(0, follower.state.in_flight,  # type: ignore[union-attr]
                     FetchResponse(E.NONE, request.message.current_leader, snapshot_id=sid), 0)
    [chunk] = sent(leader.receive(4, 10, FetchSnapshotRequest(4, leader.epoch, sid), 0))
    assert isinstance(chunk.message, FetchSnapshotResponse)
    follower.receive(0, follower.state.in_flight, chunk.message, 0)  # type: ignore[union-attr]
    assert follower.log.snapshot.data == b"image"  # type: ignore[union-attr]
    assert follower.voters == (0, 1, 2, 3)


def test_a_static_quorum_refuses_voter_changes():
    node = RaftNode(0, QuorumConfig((0,)), random.Random(0), ElectionState(voters=(0,)),
                    RaftLog())
    node.start(0)
    effects = node.receive(ADMIN, 1, AddRaftVoterRequest(voter(1)), 0)
    assert answer(effects, AddRaftVoterResponse).error_code == E.UNSUPPORTED_VERSION
    assert node.log.voters is None and node.voters == (0,)


def test_a_removed_leader_whose_removal_is_uncommitted_may_still_stand():
    """Raft's Figure 4.6: its votes are counted among the new voters only."""
    log = RaftLog([Entry(0, 1, b"", True), Entry(1, 1, b"", True, bootstrap(0, 1)),
                   Entry(2, 2, b"", True, bootstrap(1))])
    node = make(0, (0, 1), log)
    assert not node.is_voter and node.may_stand
    node.start(0)
    effects = node.tick(node.next_deadline())
    assert node.role == "Prospective"
    assert {s.destination for s in sent(effects)} == {1}
