"""The KRaft quorum under a seeded adversary: drops, delays, duplicates and reordering of
messages, network partitions, crashes and restarts, over many schedules, with the
invariants of tests/broker/controller/raft_sim.py checked after every step (Kafka's
RaftEventSimulationTest is the model). Each run prints how many schedules and steps it ran
(visible with `pytest -s`). The soak variant runs ten times as many, behind `make soak`.
The same adversary runs KIP-853's voter changes too (a dynamic quorum with observers, an
administrator's good and bad AddRaftVoter and RemoveRaftVoter requests), with the checks
raft_sim.py lists for them, and two planted voter-change bugs it must catch.
"""

from __future__ import annotations

from collections import Counter

import pytest

from broker.controller.raft import RaftNode, VoteRequest
from broker.controller.voter_set import Voter, VoterSet
from tests.broker.controller.raft_sim import SimConfig, SimResult, Simulation, Violation

CI_SCHEDULES = 300  # per quorum size; about a second or two each on a quiet machine
SOAK_SCHEDULES = 3000
# after healing, in virtual time: a new entry committed, then on every node (the soak run's
# worst so far: about 5 s for each; the election timeout is 1 s, the fetch timeout 2 s)
COMMIT_BOUND_MS = 15_000
CATCH_UP_BOUND_MS = 30_000


def run_schedules(voters: int, seeds: range) -> list[SimResult]:
    config = SimConfig(voters=voters, commit_bound_ms=COMMIT_BOUND_MS,
                       catch_up_bound_ms=CATCH_UP_BOUND_MS)
    return [Simulation(seed, config).run() for seed in seeds]


def report(label: str, voters: int, results: list[SimResult]) -> Counter:
    steps = sum(r.steps for r in results)
    counts: Counter = Counter()
    for r in results:
        counts.update(r.counts)
    print(f"\nraft simulation ({label}), {voters} voters: {len(results)} schedules, "
          f"{steps} steps, {sum(r.elections for r in results)} leaders elected, "
          f"{sum(r.restarts for r in results)} restarts, {counts['TruncateTo']} truncations, "
          f"{counts['SnapshotTaken']} snapshots taken, {counts['InstallSnapshot']} installed, "
          f"{counts['PreVoteGranted']} pre-votes granted, {counts['PreVoteRefused']} refused, "
          f"{sum(r.committed for r in results)} entries committed; after healing, a new "
          f"entry committed within {max(r.commit_ms for r in results)} virtual ms and "
          f"reached every node within {max(r.catch_up_ms for r in results)}")
    return counts


def check(voters: int, results: list[SimResult], schedules: int) -> None:
    counts = report("soak" if schedules == SOAK_SCHEDULES else "ci", voters, results)
    assert len(results) == schedules
    assert all(r.steps > 0 for r in results)
    assert sum(r.steps for r in results) >= 100 * schedules
    assert max(r.commit_ms for r in results) <= COMMIT_BOUND_MS
    assert max(r.catch_up_ms for r in results) <= CATCH_UP_BOUND_MS
    # the adversary did reach the paths that matter: elections, restarts, truncation of
    # divergent entries, snapshots taken and fetched by followers left behind
    assert sum(r.elections for r in results) > schedules
    assert sum(r.restarts for r in results) > schedules
    assert counts["TruncateTo"] > 0
    assert counts["SnapshotTaken"] > 0 and counts["InstallSnapshot"] > 0
    assert counts["PreVoteGranted"] > 0 and counts["PreVoteRefused"] > 0


@pytest.mark.parametrize("voters", [3, 5])
def test_the_quorum_keeps_its_invariants_under_faults(voters):
    check(voters, run_schedules(voters, range(CI_SCHEDULES)), CI_SCHEDULES)


@pytest.mark.soak
@pytest.mark.parametrize("voters", [3, 5])
def test_soak_the_quorum_under_faults(voters):
    seeds = range(1_000_000, 1_000_000 + SOAK_SCHEDULES)  # apart from the CI seeds
    check(voters, run_schedules(voters, seeds), SOAK_SCHEDULES)


class GrantsVotesWithoutLookingAtTheLog(RaftNode):
    """A planted bug: a voter that ignores the candidate's log when voting."""

    def _log_up_to_date(self, last_offset_epoch: int, last_offset: int) -> bool:
        return True


class ForgetsItsVoteOnRestart(RaftNode):
    """A planted bug: a voter that does not persist its vote before answering."""

    def _to_voted(self, candidate_id, now_ms, out):
        super()._to_voted(candidate_id, now_ms, out)
        out.pop()  # the PersistElectionState it appended


class CommitsOlderEpochsByCounting(RaftNode):
    """A planted bug: a leader that commits entries of older epochs by counting replicas
    (the situation of Figure 8 in the Raft paper)."""

    def _may_commit_to(self, st, replicated: int) -> bool:
        return True


class TakesAPreVoteForARealOne(RaftNode):
    """A planted bug: a voter that records the pre-vote it grants as its vote."""

    def receive(self, source, correlation_id, message, now_ms):
        out = super().receive(source, correlation_id, message, now_ms)
        if isinstance(message, VoteRequest) and message.pre_vote and out[-1].message.vote_granted:
            self._to_voted(message.candidate_id, now_ms, out)
        return out


def run_broken(broken, voters: int, seeds: range) -> list[str]:
    caught = []
    for seed in seeds:
        try:
            Simulation(seed, SimConfig(voters=voters), broken).run()
        except Violation as violation:
            caught.append(str(violation))
    print(f"\nplanted bug {broken.__name__}, {voters} voters: caught in {len(caught)} of "
          f"{len(seeds)} schedules; first: {caught[0] if caught else None}")
    return caught


@pytest.mark.parametrize("broken, schedules, at_least, expect", [
    # a stale candidate wins, and the first check of its log finds committed entries missing
    (GrantsVotesWithoutLookingAtTheLog, 30, 15, "committed"),
    # rarer: a restart must fall between two candidates' requests of one epoch
    (ForgetsItsVoteOnRestart, 500, 2, "two leaders in epoch"),
    (TakesAPreVoteForARealOne, 10, 5, "a pre-vote of epoch"),
])
def test_the_checker_catches_a_planted_bug(broken, schedules, at_least, expect):
    caught = run_broken(broken, 3, range(schedules))
    assert len(caught) >= at_least
    assert any(expect in message for message in caught)


@pytest.mark.soak
def test_soak_the_checker_catches_commits_of_older_epochs_by_counting():
    # rare (about one schedule in 400): an old entry must reach a majority only through a
    # later leader, which then fails before an entry of its own epoch does, and a third
    # node with a log of a newer epoch must win next
    caught = run_broken(CommitsOlderEpochsByCounting, 3, range(SOAK_SCHEDULES))
    assert len(caught) >= 2
    assert all("committed" in message for message in caught)


def test_a_schedule_replays_exactly_from_its_seed():
    first, again = (Simulation(42, SimConfig(voters=5)).run() for _ in range(2))
    assert first == again
    assert Simulation(43, SimConfig(voters=5)).run() != first


# -- KIP-853: voter changes under the same adversary ------------------------------------------

MEMBERSHIP_CI_SCHEDULES = 150


def run_membership(voters: int, observers: int, seeds: range, node_factory=RaftNode):
    config = SimConfig(voters=voters, membership=True, observers=observers,
                       commit_bound_ms=COMMIT_BOUND_MS, catch_up_bound_ms=CATCH_UP_BOUND_MS)
    return [Simulation(seed, config, node_factory).run() for seed in seeds]


def check_membership(voters: int, observers: int, results: list[SimResult]) -> None:
    counts: Counter = Counter()
    for r in results:
        counts.update(r.counts)
    sizes = Counter(len(r.final_voters) for r in results)
    print(f"\nraft simulation with voter changes, {voters} voters + {observers} observers: "
          f"{len(results)} schedules, {sum(r.steps for r in results)} steps, "
          f"{counts['VotersRecordAppended']} VotersRecords appended, answers "
          f"{ {k.removeprefix('VoterChange'): v for k, v in counts.items() if k.startswith('VoterChange')} }, "
          f"{counts['RemovedLeaderResigned']} leaders resigned after removing themselves, "
          f"final voter set sizes {dict(sorted(sizes.items()))}")
    assert max(r.commit_ms for r in results) <= COMMIT_BOUND_MS
    assert max(r.catch_up_ms for r in results) <= CATCH_UP_BOUND_MS
    # the schedules did change the quorum, both ways, refused bad requests, and moved the
    # leadership off a leader that removed itself
    assert counts["VoterChangeNONE"] > len(results) // 2
    assert counts["VoterChangeVOTER_NOT_FOUND"] > 0 and counts["VoterChangeDUPLICATE_VOTER"] > 0
    assert counts["VoterChangeREQUEST_TIMED_OUT"] > 0
    assert counts["RemovedLeaderResigned"] > 0
    assert len(sizes) >= 3  # voter sets grew and shrank
    assert counts["InstallSnapshot"] > 0


@pytest.mark.parametrize("voters, observers", [(3, 2), (5, 2), (1, 3)])
def test_voter_changes_keep_the_invariants_under_faults(voters, observers):
    check_membership(voters, observers,
                     run_membership(voters, observers, range(MEMBERSHIP_CI_SCHEDULES)))


@pytest.mark.soak
@pytest.mark.parametrize("voters, observers", [(3, 2), (5, 2), (1, 3)])
def test_soak_voter_changes_under_faults(voters, observers):
    seeds = range(2_000_000, 2_000_000 + SOAK_SCHEDULES)
    check_membership(voters, observers, run_membership(voters, observers, seeds))


class CountsObserversTowardsTheHighWatermark(RaftNode):
    """A planted bug: the leader counts every replica that fetches, observers too (as if a
    voter it added were a voter before its VotersRecord)."""

    def _maybe_update_high_watermark(self, out):
        voters = self.voters
        st = self.state
        try:
            self.log._voter_history.append((-1, VoterSet.of(  # type: ignore[attr-defined]
                Voter(i) for i in {*voters, *st.end_offsets})))  # type: ignore[union-attr]
            return super()._maybe_update_high_watermark(out)
        finally:
            self.log._voter_history.pop()  # type: ignore[attr-defined]


class ChangesVotersBeforeItsEpochCommits(RaftNode):
    """A planted bug: the leader starts a voter change before an entry of its own epoch has
    committed (the bug in Raft's original single-server change)."""

    def _voter_change_error(self, now_ms):
        refused = super()._voter_change_error(now_ms)
        return None if refused and "high watermark" in refused[1] else refused


@pytest.mark.parametrize("broken, expect", [
    (CountsObserversTowardsTheHighWatermark, "committed"),
    (ChangesVotersBeforeItsEpochCommits, "uncommitted"),
])
def test_the_checker_catches_a_planted_voter_change_bug(broken, expect):
    caught = []
    for seed in range(40):
        try:
            run_membership(3, 2, range(seed, seed + 1), broken)
        except Violation as violation:
            caught.append(str(violation))
    print(f"\nplanted bug {broken.__name__}: caught in {len(caught)} of 40 schedules")
    assert len(caught) >= 5
    assert any(expect in message for message in caught)
