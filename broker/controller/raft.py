"""The KRaft metadata quorum (KIP-595) as a pure state machine: one voter's `RaftNode`.

Owns: the quorum's messages (named field for field after Kafka's VoteRequest,
BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest's replica fields and
FetchSnapshotRequest, and their responses, flattened to the one partition
`__cluster_metadata-0`), the effects a node asks its runtime to carry out, the epoch states
(Kafka's UnattachedState, which also stands for VotedState, FollowerState, ProspectiveState,
CandidateState, LeaderState and ResignedState) and the transitions between them (Kafka's
KafkaRaftClient and QuorumState).

A node never reads a clock, a socket or a file. The runtime calls `start`, `receive` (a
request or a response, with the sender's id and the request's correlation id), `tick` at
`next_deadline()`, `append` (on the leader), `create_snapshot` and `resign`, each with
`now_ms`, and carries out the returned effects in order: `PersistElectionState` before
anything after it is sent, `AppendEntries`/`TruncateTo`/`InstallSnapshot`/`SnapshotTaken` on
the log (flushed before the next effect, as KafkaRaftClient flushes before it answers),
`Send` on the network, `HighWatermark` and `LeaderChanged` to the listener. Randomness (the
election timeout) comes from an injected RNG, so a seeded run replays exactly.

The rules, as Kafka's KRaft applies them:
- Pre-vote (KIP-996): a voter that would stand first becomes prospective and asks the others
  with a Vote request marked pre_vote, at its current epoch. Answering one changes nothing
  on the receiver; a follower that heard from its leader within the fetch timeout refuses,
  as do the leader and a resigned leader; everyone else grants if the log is as up to date.
  Only a majority of pre-votes makes it a candidate; refused by a majority, or timed out, it
  goes back to following the leader it knew (or waits unattached). So a voter that was cut
  off, or whose process stalled past its timers, cannot unseat a healthy leader.
- The voters: controller.quorum.voters (kraft.version 0), or in a dynamic quorum (KIP-853,
  kraft.version 1) the latest VotersRecord entry in the log, uncommitted ones included,
  which the first leader writes from the bootstrap voter set and AddRaftVoter,
  RemoveRaftVoter and UpdateRaftVoter change on the leader, one voter per record, a record
  only once the previous one and an entry of the leader's epoch have committed; a voter is
  added only once it has fetched up to the leader's log end as an observer, and a leader
  whose own removal commits resigns. Majorities are counted among the voters in force.
- A candidate bumps the epoch, votes for itself and asks the others. A voter
  grants at most one vote per epoch (persisted before it answers), and only to a candidate
  whose log is at least as up to date as its own, comparing (last epoch, end offset).
- Any request or response carrying a higher epoch makes the node step down to that epoch;
  one carrying a lower epoch is answered FENCED_LEADER_EPOCH or ignored.
- The leader appends a control entry of its own epoch, tells the voters with
  BeginQuorumEpoch, and replicates by answering Fetch: a follower's Fetch carries
  fetch_offset and last_fetched_epoch; the leader answers records, or a diverging epoch
  (the end offset of the largest epoch it has at or below the follower's) so the follower
  truncates, or a snapshot id when the follower is below the log start offset, which the
  follower then fetches with FetchSnapshot. An empty answer is held up to fetch max wait.
- The high watermark is the offset a majority of voters has fetched up to, and advances
  only past the leader's epoch start offset: entries of older epochs commit only through an
  entry of the leader's own epoch (Raft's commitment rule, LeaderState.maybeUpdateHighWatermark).
- A follower that hears nothing from its leader for controller.quorum.fetch.timeout.ms
  becomes prospective; so does an unattached voter after its randomised election timeout
  (controller.quorum.election.timeout.ms plus up to as much again), and a candidate whose
  election failed, after its backoff; a leader that has not
  been fetched from by a majority for 1.5 fetch timeouts resigns (check quorum), sending
  EndQuorumEpoch with its preferred successors, most caught-up first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from broker.controller.quorum_state import NO_ID, ElectionState
from broker.controller.raft_log import (Entry, RaftLog, Snapshot, SnapshotId,
                                        ValidationKind)
from broker.controller.voter_set import (KRAFT_VERSION_RECONFIG, KRAFT_VERSION_STATIC, Voter,
                                         VoterSet, VoterSetError, decode_voters, encode_voters)
from protocol.errors import ErrorCode
from broker import planted

E = ErrorCode
RETRY_BACKOFF_BASE_MS = 100  # KafkaRaftClient's base for the candidate's election backoff
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5  # LeaderState's, times the fetch timeout
SNAPSHOT_CHUNK_BYTES = 8 * 1024 * 1024  # KafkaRaftClient's MAX_FETCH_SIZE_BYTES
OBSERVER_SESSION_TIMEOUT_MS = 300_000  # LeaderState's: an observer silent this long is dropped


class IllegalStateError(RuntimeError):
    """The quorum broke one of Raft's guarantees (Kafka's IllegalStateException): for
    example a leader asking a follower to truncate below its high watermark."""


class NotLeaderError(Exception):
    """An append to a node that is not the leader of the given epoch (Kafka's
    NotLeaderException from RaftClient.scheduleAppend)."""


# -- messages ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeaderIdAndEpoch:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class EpochEndOffset:
    epoch: int
    end_offset: int


@dataclass(frozen=True)
class VoteRequest:
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset, as KafkaRaftClient sends it
    voter_id: int = NO_ID
    # KIP-996: would you vote for me? Asked at the sender's current epoch, never its next;
    # answering it changes nothing on the receiver (Vote v2's PreVote)
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    voter_id: int = NO_ID


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class FetchRequest:
    replica_id: int  # FetchRequest's replica_state.replica_id
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int = -1
    max_wait_ms: int = 0


@dataclass(frozen=True)
class FetchResponse:
    error_code: ErrorCode
    current_leader: LeaderIdAndEpoch
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None
    records: tuple[Entry, ...] = ()


@dataclass(frozen=True)
class FetchSnapshotRequest:
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int = 0
    max_bytes: int = 0x7FFFFFFF


@dataclass(frozen=True)
class FetchSnapshotResponse:
    error_code: ErrorCode
    current_leader: LeaderIdAndEpoch
    snapshot_id: SnapshotId | None = None
    size: int = 0
    position: int = 0
    unaligned_records: bytes = b""


@dataclass(frozen=True)
class AddRaftVoterRequest:
    """KIP-853: add `voter` (its id, directory id and endpoints) to the voter set."""
    voter: Voter
    timeout_ms: int = 30_000


@dataclass(frozen=True)
class AddRaftVoterResponse:
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True)
class RemoveRaftVoterRequest:
    voter_id: int
    directory_id: Any  # uuid.UUID


@dataclass(frozen=True)
class RemoveRaftVoterResponse:
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True)
class UpdateRaftVoterRequest:
    """A voter tells the leader its endpoints (and kraft.version range) changed."""
    current_leader_epoch: int
    voter: Voter


@dataclass(frozen=True)
class UpdateRaftVoterResponse:
    error_code: ErrorCode
    current_leader: LeaderIdAndEpoch


Request = Union[VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
                FetchSnapshotRequest, AddRaftVoterRequest, RemoveRaftVoterRequest,
                UpdateRaftVoterRequest]
Response = Union[VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse, FetchResponse,
                 FetchSnapshotResponse, AddRaftVoterResponse, RemoveRaftVoterResponse,
                 UpdateRaftVoterResponse]
VOTER_CHANGE_RESPONSES = {AddRaftVoterRequest: AddRaftVoterResponse,
                          RemoveRaftVoterRequest: RemoveRaftVoterResponse}


# -- effects ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Send:
    """A request (with a fresh correlation id) or a response (echoing the request's)."""
    destination: int
    correlation_id: int
    message: Any  # Request | Response


@dataclass(frozen=True)
class PersistElectionState:
    state: ElectionState


@dataclass(frozen=True)
class AppendEntries:
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class TruncateTo:
    offset: int  # entries at and above it are gone


@dataclass(frozen=True)
class InstallSnapshot:
    """Replace the whole log by this snapshot (a follower that was too far behind)."""
    snapshot: Snapshot


@dataclass(frozen=True)
class SnapshotTaken:
    """Store this snapshot; entries below its end offset may be deleted."""
    snapshot: Snapshot


@dataclass(frozen=True)
class HighWatermark:
    """Entries below `offset` are committed: the listener may apply them (handleCommit)."""
    offset: int


@dataclass(frozen=True)
class LeaderChanged:
    leader_id: int  # -1 while no leader is known in `epoch`
    epoch: int


Effect = Union[Send, PersistElectionState, AppendEntries, TruncateTo, InstallSnapshot,
               SnapshotTaken, HighWatermark, LeaderChanged]


# -- configuration and epoch states -----------------------------------------------------------

@dataclass(frozen=True)
class QuorumConfig:
    voters: tuple[int, ...]  # the ids of controller.quorum.voters
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # KafkaRaftClient.MAX_FETCH_WAIT_MS
    fetch_max_bytes: int = 8 * 1024 * 1024  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES
    # kraft.version 1 (KIP-853, controller.quorum.bootstrap.servers): the voter set the
    # quorum starts with, as Kafka's bootstrap checkpoint holds it (empty on a controller
    # that joins later as an observer); the log's VotersRecords take over from it. None:
    # kraft.version 0, `voters` is the static controller.quorum.voters.
    bootstrap_voters: VoterSet | None = None

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def kraft_version(self) -> int:
        return KRAFT_VERSION_STATIC if self.bootstrap_voters is None else KRAFT_VERSION_RECONFIG


@dataclass
class UnattachedState:
    """No leader known in `epoch`; with `voted_id` set this is Kafka's VotedState."""
    epoch: int
    election_deadline: int
    voted_id: int = NO_ID
    name = "Unattached"


@dataclass
class FollowerState:
    epoch: int
    leader_id: int
    fetch_deadline: int  # no successful fetch by then: become a candidate
    request_deadline: int = 0  # resend the fetch (timed out) or send it (after a backoff)
    in_flight: int | None = None  # the correlation id of the one outstanding fetch
    fetching_snapshot: SnapshotId | None = None
    snapshot_bytes: bytearray = field(default_factory=bytearray)
    # when the leader last answered a fetch; None until it has, or once it resigned. A
    # follower that heard from its leader within the fetch timeout refuses pre-votes.
    fetched_at: int | None = None
    name = "Follower"


@dataclass
class ProspectiveState:
    """Kafka's ProspectiveState (KIP-996): the node would stand, and first asks the voters
    whether they would vote for it (pre-votes), still in its current epoch. Only a majority
    of pre-votes makes it a candidate, which bumps the epoch; nothing here is persisted."""
    epoch: int
    election_deadline: int
    leader_id: int = NO_ID  # the leader it followed in this epoch, if any
    voted_id: int = NO_ID  # the vote it gave in this epoch, if any
    retries: int = 1
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    in_flight: set[int] = field(default_factory=set)  # correlation ids of our pre-votes
    resend_deadline: int = 0
    name = "Prospective"


@dataclass
class CandidateState:
    epoch: int
    election_deadline: int
    retries: int = 1
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until: int | None = None
    resend_deadline: int = 0
    name = "Candidate"


@dataclass
class ParkedFetch:
    correlation_id: int
    request: FetchRequest
    deadline: int


@dataclass
class VoterChange:
    """The one voter change a leader has under way (Kafka's AddVoterHandlerState,
    RemoveVoterHandlerState and UpdateVoterHandlerState): answered once its VotersRecord at
    `offset` commits, or with REQUEST_TIMED_OUT at `deadline`."""
    source: int
    correlation_id: int
    request: Any
    offset: int
    deadline: int


@dataclass
class LeaderState:
    epoch: int
    epoch_start_offset: int
    check_quorum_deadline: int
    begin_resend_deadline: int
    high_watermark: int | None = None  # unknown until an entry of this epoch commits
    # every replica that fetched, voter or observer -> its fetch offset (-1: not yet)
    end_offsets: dict[int, int] = field(default_factory=dict)
    # replica -> when a fetch of it last reached our log end offset (Kafka's
    # lastCaughtUpTimestamp): a new voter is added only if it caught up lately
    caught_up_at: dict[int, int] = field(default_factory=dict)
    # when each observer (not a voter) last fetched: one silent for
    # OBSERVER_SESSION_TIMEOUT_MS is forgotten, as Kafka's DescribeQuorum forgets it
    observer_fetched_ms: dict[int, int] = field(default_factory=dict)
    change: VoterChange | None = None
    resign_requested: bool = False  # this leader's removal committed: hand over
    fetched_voters: set[int] = field(default_factory=set)  # since the check-quorum reset
    acked: set[int] = field(default_factory=set)  # voters that know this epoch's leader
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    told_high_watermark: dict[int, int] = field(default_factory=dict)  # in the last answer
    name = "Leader"


@dataclass
class ResignedState:
    epoch: int
    election_deadline: int
    preferred_successors: tuple[int, ...]
    unacked: set[int]
    resend_deadline: int = 0
    name = "Resigned"


EpochState = Union[UnattachedState, FollowerState, ProspectiveState, CandidateState, LeaderState,
                   ResignedState]


# -- the node ---------------------------------------------------------------------------------

class RaftNode:
    """One voter of the metadata quorum. Build it from what was persisted (the election
    state and the log with its snapshot), then call `start`."""

    def __init__(self, node_id: int, config: QuorumConfig, rng: random.Random,
                 election: ElectionState | None = None, log: RaftLog | None = None):
        self.node_id = node_id
        self.config = config
        self.rng = rng
        self.election = election or ElectionState(voters=config.voters)
        self.log = log or RaftLog()
        # known committed; not persisted (KIP-595): a restarted node learns it from the leader
        self.high_watermark = self.log.start_offset
        self._high_watermark_told = False  # a HighWatermark effect has been returned
        self.state: EpochState = UnattachedState(self.election.epoch, 0)
        self._next_correlation_id = 0

    # -- what the node is -----------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        if isinstance(self.state, (FollowerState, ProspectiveState)):
            return self.state.leader_id
        if isinstance(self.state, (LeaderState, ResignedState)):
            return self.node_id
        return NO_ID

    @property
    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    @property
    def voters(self) -> tuple[int, ...]:
        """The voter ids in force: the log's latest VotersRecord (committed or not, as
        KIP-853 has it), else the bootstrap voter set, else controller.quorum.voters."""
        voters = self.log.voters
        if voters is not None:
            return voters.ids
        if self.config.bootstrap_voters is not None:
            return self.config.bootstrap_voters.ids
        return self.config.voters

    @property
    def voter_set(self) -> VoterSet:
        voters = self.log.voters or self.config.bootstrap_voters
        if voters is not None:
            return voters
        return VoterSet.of(Voter(i) for i in self.config.voters)

    @property
    def _majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def may_stand(self) -> bool:
        """Whether this node may stand for election: a voter, or a voter that a VotersRecord
        not known to be committed removed. Raft's dissertation (4.1, Figure 4.6) keeps such a
        node standing, its votes counted among the new voters only: a leader that removed
        itself and lost its leadership before the removal committed may be the one whose
        log holds it, and the remaining voters' stale logs could not win without it."""
        if self.is_voter:
            return True
        offset = self.log.voters_offset
        if offset < self.high_watermark:
            return False
        before = self.log.voters_at(offset) or self.config.bootstrap_voters
        return before is not None and self.node_id in before.ids

    def _votes(self, granted: set[int]) -> int:
        """The votes that count: those of the voters in force (ours only if we are one)."""
        return len(granted & set(self.voters))

    @property
    def role(self) -> str:
        if isinstance(self.state, UnattachedState) and self.state.voted_id != NO_ID:
            return "Voted"
        return self.state.name

    def next_deadline(self) -> int:
        st = self.state
        if isinstance(st, UnattachedState):
            return st.election_deadline
        if isinstance(st, FollowerState):
            return min(st.fetch_deadline, st.request_deadline)
        if isinstance(st, CandidateState):
            if st.backoff_until is not None:
                return st.backoff_until
            return min(st.election_deadline, st.resend_deadline)
        if isinstance(st, ProspectiveState):
            return min(st.election_deadline, st.resend_deadline)
        if isinstance(st, LeaderState):
            deadlines = [st.begin_resend_deadline] + [p.deadline for p in st.parked.values()]
            if len(self.voters) > 1 or not self.is_voter:
                deadlines.append(st.check_quorum_deadline)
            if st.change is not None:
                deadlines.append(st.change.deadline)
            if st.resign_requested:
                deadlines.append(0)
            return min(deadlines)
        return min(st.election_deadline, st.resend_deadline)

    # -- the runtime's calls --------------------------------------------------------------

    def start(self, now_ms: int) -> list:
        """The state to resume in, as Kafka's QuorumState.initialize chooses it."""
        out: list = []
        es = self.election
        if es.epoch < self.log.last_fetched_epoch:
            # the quorum-state file lags the log (written by another tool, or lost): the
            # log's epoch is the least this node has seen
            epoch = self.log.last_fetched_epoch
            self.state = UnattachedState(epoch, now_ms + self._election_timeout())
            self._persist(out, epoch)
        elif es.leader_id == self.node_id:
            # never lead the same epoch twice, nor vote in it: resign and wait for the next
            others = set(self._others())
            self.state = ResignedState(es.epoch, now_ms + self._election_timeout(), (), others)
            self._send_end_quorum_epoch(now_ms, out)
        elif es.voted_id == self.node_id and self.may_stand:
            self.state = CandidateState(es.epoch, now_ms + self._election_timeout(),
                                        granted={self.node_id})
            self._send_vote_requests(now_ms, out)
        elif es.has_voted:
            self.state = UnattachedState(es.epoch, now_ms + self._election_timeout(), es.voted_id)
        elif es.has_leader:
            self.state = FollowerState(es.epoch, es.leader_id, now_ms + self.config.fetch_timeout_ms)
            self._send_fetch(now_ms, out)
        else:
            self.state = UnattachedState(es.epoch, now_ms + self._election_timeout())
        out.append(LeaderChanged(self.leader_id, self.epoch))
        self._maybe_elect_alone(now_ms, out)
        return out

    def tick(self, now_ms: int) -> list:
        out: list = []
        st = self.state
        if isinstance(st, UnattachedState):
            if now_ms >= st.election_deadline:
                if self.may_stand:
                    self._to_prospective(now_ms, out)
                else:  # a non-voter waits to hear of a leader
                    st.election_deadline = now_ms + self._election_timeout()
        elif isinstance(st, FollowerState):
            if now_ms >= st.fetch_deadline:
                if self.may_stand:
                    self._to_prospective(now_ms, out)
                else:
                    self._to_unattached(st.epoch, now_ms, out)
            elif now_ms >= st.request_deadline:
                self._send_fetch(now_ms, out)  # the last one timed out, or a backoff ended
        elif isinstance(st, ProspectiveState):
            if now_ms >= st.election_deadline:
                self._prospective_lost(now_ms, out)
            elif now_ms >= st.resend_deadline:
                self._send_vote_requests(now_ms, out)
        elif isinstance(st, CandidateState):
            if st.backoff_until is not None:
                if now_ms >= st.backoff_until:
                    self._to_prospective(now_ms, out)
            elif now_ms >= st.election_deadline:
                st.backoff_until = now_ms + self._election_backoff(st.retries)
            elif now_ms >= st.resend_deadline:
                self._send_vote_requests(now_ms, out)
        elif isinstance(st, LeaderState):
            if st.resign_requested or (
                    (len(self.voters) > 1 or not self.is_voter)
                    and now_ms >= st.check_quorum_deadline):
                self._to_resigned(now_ms, out)
                return out
            if st.change is not None and now_ms >= st.change.deadline:
                self._answer_change(E.REQUEST_TIMED_OUT, "timed out waiting for the voter "
                                    "change to commit", out)
            for replica, parked in list(st.parked.items()):
                if now_ms >= parked.deadline:
                    del st.parked[replica]
                    self._answer_fetch(replica, parked, out)
            if now_ms >= st.begin_resend_deadline:
                self._send_begin_quorum_epoch(now_ms, out)
        else:
            if now_ms >= st.election_deadline:
                if self.may_stand:
                    self._to_prospective(now_ms, out)
                else:  # no longer a voter: a later epoch must not name it leader again
                    self._to_unattached(st.epoch + 1, now_ms, out)
            elif now_ms >= st.resend_deadline:
                self._send_end_quorum_epoch(now_ms, out)
        return out

    def append(self, epoch: int, records: list[bytes], now_ms: int) -> list:
        """Append records as the leader of `epoch` (RaftClient.scheduleAppend)."""
        st = self.state
        if not isinstance(st, LeaderState) or st.epoch != epoch:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {epoch}")
        start = self.log.end_offset
        entries = tuple(Entry(start + i, epoch, r) for i, r in enumerate(records))
        out: list = []
        self._leader_append(entries, now_ms, out)
        return out

    def create_snapshot(self, end_offset: int, data: bytes) -> list:
        """The listener's image covers every entry below `end_offset` (which must be
        committed): keep the image and let the log drop those entries."""
        if not self.log.start_offset < end_offset <= self.high_watermark:
            raise ValueError(f"snapshot end {end_offset} is not in ({self.log.start_offset}, "
                             f"high watermark {self.high_watermark}]")
        voters = self.log.voters_at(end_offset) or self.config.bootstrap_voters
        snapshot = Snapshot(SnapshotId(end_offset, self.log.epoch_at(end_offset - 1)), data,
                            voters)
        self.log.take_snapshot(snapshot)
        return [SnapshotTaken(snapshot)]

    def observe_leader(self, leader_id: int, epoch: int, now_ms: int) -> list:
        """An observer (a node that is not a voter: a broker-only node, Kafka's observer)
        learned of a leader from a voter's DescribeQuorum answer: follow it and fetch. Voters
        learn leaders from the quorum's own messages and ignore this."""
        out: list = []
        # a dynamic quorum's observer may not know its leader's VotersRecord yet
        known = (leader_id in self.voters if self.config.kraft_version == KRAFT_VERSION_STATIC
                 else leader_id not in (NO_ID, self.node_id))
        if (not self.is_voter and known and epoch >= self.epoch
                and self.leader_id != leader_id):
            self._maybe_transition(leader_id, epoch, now_ms, out)
        return out

    def leader_unreachable(self, leader_id: int, now_ms: int) -> list:
        """The runtime could not reach `leader_id` at all (connection refused or closed: no
        process there): a follower of it stands at once rather than after the rest of its
        fetch timeout. Only liveness depends on when it stands, never safety."""
        st = self.state
        if isinstance(st, FollowerState) and st.leader_id == leader_id and self.may_stand:
            st.fetch_deadline = min(st.fetch_deadline, now_ms)
            return self.tick(now_ms)
        return []

    def resign(self, now_ms: int) -> list:
        """Graceful shutdown of the leader: hand the quorum on (EndQuorumEpoch)."""
        out: list = []
        if isinstance(self.state, LeaderState):
            self._to_resigned(now_ms, out)
        return out

    def receive(self, source: int, correlation_id: int, message: Any, now_ms: int) -> list:
        out: list = []
        handler = self._HANDLERS.get(type(message))
        if handler is None:
            raise TypeError(f"not a quorum message: {type(message).__name__}")
        handler(self, source, correlation_id, message, now_ms, out)
        return out

    # -- transitions ----------------------------------------------------------------------

    def _persist(self, out: list, epoch: int, leader_id: int = NO_ID,
                 voted_id: int = NO_ID) -> None:
        # a dynamic quorum's voters live in the log (quorum-state v1 names none)
        voters = self.config.voters if self.config.kraft_version == KRAFT_VERSION_STATIC else ()
        state = ElectionState(epoch, leader_id, voted_id, voters)
        if state != self.election:
            self.election = state
            out.append(PersistElectionState(state))

    def _leave_state(self, out: list) -> None:
        st = self.state
        if isinstance(st, LeaderState):
            st.parked.clear()  # their fetchers time out and learn the new epoch
            if st.change is not None:
                self._answer_change(E.NOT_LEADER_OR_FOLLOWER, "the leader changed", out)

    def _to_unattached(self, epoch: int, now_ms: int, out: list) -> None:
        self._leave_state(out)
        if isinstance(self.state, UnattachedState):
            # Raft's rule: only hearing from a leader or granting a vote restarts the
            # election timer. A voter that restarted it on every higher epoch could be kept
            # from ever standing by a candidate whose stale log loses each election.
            deadline = self.state.election_deadline
        else:
            deadline = now_ms + self._election_timeout()
        self.state = UnattachedState(epoch, deadline)
        self._persist(out, epoch)
        out.append(LeaderChanged(NO_ID, epoch))

    def _to_voted(self, candidate_id: int, now_ms: int, out: list) -> None:
        epoch = self.epoch
        self.state = UnattachedState(epoch, now_ms + self._election_timeout(), candidate_id)
        self._persist(out, epoch, voted_id=candidate_id)

    def _to_follower(self, epoch: int, leader_id: int, now_ms: int, out: list) -> None:
        self._leave_state(out)
        voted = self.election.voted_id if self.election.epoch == epoch else NO_ID
        self.state = FollowerState(epoch, leader_id, now_ms + self.config.fetch_timeout_ms)
        self._persist(out, epoch, leader_id, voted)
        out.append(LeaderChanged(leader_id, epoch))
        self._send_fetch(now_ms, out)

    def _to_prospective(self, now_ms: int, out: list) -> None:
        """Ask for pre-votes before standing (KIP-996): a voter that was cut off from a
        healthy leader (partitioned, or its process stalled past the fetch timeout) must not
        unseat it by bumping the epoch; the voters still hearing from the leader refuse."""
        st = self.state
        retries = st.retries + 1 if isinstance(st, CandidateState) else 1
        leader_id = st.leader_id if isinstance(st, FollowerState) else NO_ID
        before = self.leader_id
        self._leave_state(out)
        es = self.election
        voted = es.voted_id if es.epoch == self.epoch else NO_ID
        self.state = ProspectiveState(self.epoch, now_ms + self._election_timeout(), leader_id,
                                      voted, retries, granted={self.node_id})
        if before != leader_id:
            out.append(LeaderChanged(leader_id, self.epoch))  # a resigned leader leads no more
        if self._votes(self.state.granted) >= self._majority:
            self._to_candidate(now_ms, out)
        else:
            self._send_vote_requests(now_ms, out)

    def _prospective_lost(self, now_ms: int, out: list) -> None:
        """A majority refused the pre-vote, or it timed out: back to the leader we followed,
        whose fetch answers decide whether we stand again, or wait unattached."""
        st = self.state
        assert isinstance(st, ProspectiveState)
        if st.leader_id != NO_ID:
            self._to_follower(st.epoch, st.leader_id, now_ms, out)
        else:
            self.state = UnattachedState(st.epoch, now_ms + self._election_timeout(),
                                         st.voted_id)

    def _to_candidate(self, now_ms: int, out: list) -> None:
        st = self.state
        retries = st.retries if isinstance(st, (CandidateState, ProspectiveState)) else 1
        self._leave_state(out)
        epoch = self.epoch + 1
        self.state = CandidateState(epoch, now_ms + self._election_timeout(), retries,
                                    granted={self.node_id})
        self._persist(out, epoch, voted_id=self.node_id)
        out.append(LeaderChanged(NO_ID, epoch))
        if not self._maybe_become_leader(now_ms, out):
            self._send_vote_requests(now_ms, out)

    def _maybe_elect_alone(self, now_ms: int, out: list) -> None:
        # the only voter need not wait for an election timeout (KafkaRaftClient does the same)
        if self.voters == (self.node_id,) and not isinstance(
                self.state, (LeaderState, CandidateState)):
            self._to_candidate(now_ms, out)

    def _maybe_become_leader(self, now_ms: int, out: list) -> bool:
        st = self.state
        if not isinstance(st, CandidateState) or self._votes(st.granted) < self._majority:
            return False
        epoch = st.epoch
        start = self.log.end_offset
        self.state = LeaderState(
            epoch, start,
            check_quorum_deadline=now_ms + self._check_quorum_timeout(),
            begin_resend_deadline=now_ms,
            end_offsets={v: -1 for v in self._others()},
            acked={self.node_id})
        self._persist(out, epoch, self.node_id, self.node_id)
        out.append(LeaderChanged(self.node_id, epoch))
        entries = [Entry(start, epoch, b"", control=True)]
        if self.config.bootstrap_voters is not None and self.log.voters is None:
            # the first leader of a dynamic quorum writes the bootstrap voter set into the
            # log (LeaderState.appendStartOfEpochControlRecords), after which the log is
            # where every node reads it
            entries.append(Entry(start + 1, epoch, b"", control=True,
                                 voters=self.config.bootstrap_voters))
        self._leader_append(tuple(entries), now_ms, out)
        self._send_begin_quorum_epoch(now_ms, out)
        return True

    def _to_resigned(self, now_ms: int, out: list) -> None:
        st = self.state
        assert isinstance(st, LeaderState)
        successors = tuple(sorted(self._others(), key=lambda v: -st.end_offsets.get(v, -1)))
        self._leave_state(out)
        self.state = ResignedState(st.epoch, now_ms + self._election_timeout(), successors,
                                   set(self._others()))
        self._send_end_quorum_epoch(now_ms, out)

    def _maybe_transition(self, leader_id: int, epoch: int, now_ms: int, out: list) -> None:
        """Learn of `epoch` and its leader from a peer (KafkaRaftClient.maybeTransition)."""
        if epoch > self.epoch:
            if leader_id != NO_ID and leader_id != self.node_id:
                self._to_follower(epoch, leader_id, now_ms, out)
            else:
                self._to_unattached(epoch, now_ms, out)
        elif (epoch == self.epoch and leader_id not in (NO_ID, self.node_id)
              and isinstance(self.state, (UnattachedState, ProspectiveState, CandidateState))):
            self._to_follower(epoch, leader_id, now_ms, out)

    def _handle_common_response(self, error: ErrorCode, leader_id: int, epoch: int,
                                now_ms: int, out: list) -> bool:
        """True when the response only told us of a newer epoch or leader, or is stale."""
        if epoch > self.epoch or (epoch == self.epoch and leader_id not in (NO_ID, self.node_id)
                                  and self.leader_id == NO_ID):
            self._maybe_transition(leader_id, epoch, now_ms, out)
            return True
        return epoch < self.epoch

    # -- timers and randomness ------------------------------------------------------------

    def _election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(timeout)

    def _election_backoff(self, retries: int) -> int:
        # KafkaRaftClient.binaryExponentialElectionBackoffMs
        return min(RETRY_BACKOFF_BASE_MS * self.rng.randrange(2 << min(20, retries - 1)),
                   self.config.election_backoff_max_ms)

    def _check_quorum_timeout(self) -> int:
        return int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)

    def _others(self) -> list[int]:
        return [v for v in self.voters if v != self.node_id]

    def _correlation_id(self) -> int:
        self._next_correlation_id += 1
        return self._next_correlation_id

    def _leader_info(self) -> LeaderIdAndEpoch:
        return LeaderIdAndEpoch(self.leader_id, self.epoch)

    # -- Vote -----------------------------------------------------------------------------

    def _send_vote_requests(self, now_ms: int, out: list) -> None:
        st = self.state
        assert isinstance(st, (CandidateState, ProspectiveState))
        pre_vote = isinstance(st, ProspectiveState)
        st.resend_deadline = now_ms + self.config.request_timeout_ms
        for voter in self._others():
            if voter not in st.granted and voter not in st.rejected:
                cid = self._correlation_id()
                if isinstance(st, ProspectiveState):
                    st.in_flight.add(cid)
                out.append(Send(voter, cid, VoteRequest(
                    st.epoch, self.node_id, self.log.last_fetched_epoch, self.log.end_offset,
                    voter, pre_vote)))

    def _log_up_to_date(self, last_offset_epoch: int, last_offset: int) -> bool:
        if planted.on("vote-without-log-check"):
            return True
        return (last_offset_epoch, last_offset) >= (self.log.last_fetched_epoch,
                                                    self.log.end_offset)

    def _can_grant_vote(self, candidate_id: int, up_to_date: bool) -> bool:
        st = self.state
        if isinstance(st, (UnattachedState, ProspectiveState)):
            if st.voted_id != NO_ID:
                return st.voted_id == candidate_id
            if isinstance(st, ProspectiveState) and st.leader_id != NO_ID:
                return False
            return up_to_date
        return False  # a follower, leader or resigned leader of this epoch; or a candidate

    def _can_grant_pre_vote(self, up_to_date: bool, now_ms: int) -> bool:
        """Whether we would vote for a replica with such a log if it stood (KIP-996). A
        vote already given this epoch does not matter: a candidate asks in the next one."""
        st = self.state
        if isinstance(st, (LeaderState, ResignedState)):
            return False
        if isinstance(st, FollowerState) and st.fetched_at is not None and (
                now_ms < st.fetched_at + self.config.fetch_timeout_ms):
            return False  # our leader is alive: nobody need stand
        return up_to_date

    def _validate_voter_only(self, remote_id: int, epoch: int) -> ErrorCode:
        if epoch < self.epoch:
            return E.FENCED_LEADER_EPOCH
        if remote_id < 0:
            return E.INVALID_REQUEST
        if self.config.kraft_version == KRAFT_VERSION_STATIC and (
                not self.is_voter or remote_id not in self.voters):
            # a dynamic quorum takes these from anyone: the receiver may not have the
            # latest VotersRecord yet, and only the sender's voter set counts the answer
            return E.INCONSISTENT_VOTER_SET
        return E.NONE

    def _on_vote_request(self, source, cid, req: VoteRequest, now_ms, out) -> None:
        error = self._validate_voter_only(req.candidate_id, req.candidate_epoch)
        if error == E.NONE and req.voter_id not in (NO_ID, self.node_id):
            error = E.INVALID_VOTER_KEY
        if error != E.NONE:
            out.append(Send(source, cid, VoteResponse(error, self.leader_id, self.epoch, False)))
            return
        if req.candidate_epoch > self.epoch:
            # learning of a later epoch is safe whatever the request; a pre-vote is asked
            # at an epoch its sender already is in
            self._to_unattached(req.candidate_epoch, now_ms, out)
        up_to_date = self._log_up_to_date(req.last_offset_epoch, req.last_offset)
        if req.pre_vote:  # answered from our state, which it leaves as it is
            granted = self._can_grant_pre_vote(up_to_date, now_ms)
            out.append(Send(source, cid, VoteResponse(E.NONE, self.leader_id, self.epoch,
                                                      granted)))
            return
        granted = self._can_grant_vote(req.candidate_id, up_to_date)
        st = self.state
        if granted and isinstance(st, (UnattachedState, ProspectiveState)) and (
                st.voted_id == NO_ID):
            self._to_voted(req.candidate_id, now_ms, out)  # persisted before the answer
        out.append(Send(source, cid, VoteResponse(E.NONE, self.leader_id, self.epoch, granted)))

    def _on_vote_response(self, source, cid, resp: VoteResponse, now_ms, out) -> None:
        if self._handle_common_response(resp.error_code, resp.leader_id, resp.leader_epoch,
                                        now_ms, out):
            return
        st = self.state
        if isinstance(st, ProspectiveState):
            self._on_pre_vote_response(source, cid, resp, now_ms, out)
            return
        if resp.error_code != E.NONE or not isinstance(st, CandidateState):
            return
        if resp.leader_epoch != st.epoch or source not in self.voters:
            return
        if resp.vote_granted:
            st.granted.add(source)
            st.rejected.discard(source)
            self._maybe_become_leader(now_ms, out)
        else:
            st.rejected.add(source)
            lost = len(self.voters) - len(st.rejected) < self._majority
            if lost and st.backoff_until is None:
                st.backoff_until = now_ms + self._election_backoff(st.retries)

    def _on_pre_vote_response(self, source, cid, resp: VoteResponse, now_ms, out) -> None:
        st = self.state
        assert isinstance(st, ProspectiveState)
        # only answers to this round's pre-votes count: a late answer to the real vote of
        # an election we lost at this epoch says nothing of the voters' leader now
        if cid not in st.in_flight or source not in self.voters:
            return
        st.in_flight.discard(cid)
        if resp.error_code != E.NONE or resp.leader_epoch != st.epoch:
            return
        if resp.vote_granted:
            st.granted.add(source)
            st.rejected.discard(source)
            if self._votes(st.granted) >= self._majority:
                self._to_candidate(now_ms, out)
        else:
            st.rejected.add(source)
            if len(self.voters) - len(st.rejected) < self._majority:
                self._prospective_lost(now_ms, out)

    # -- BeginQuorumEpoch and EndQuorumEpoch ----------------------------------------------

    def _send_begin_quorum_epoch(self, now_ms: int, out: list) -> None:
        st = self.state
        assert isinstance(st, LeaderState)
        st.begin_resend_deadline = now_ms + self.config.fetch_timeout_ms // 2
        for voter in self._others():
            if voter not in st.acked:
                out.append(Send(voter, self._correlation_id(),
                                BeginQuorumEpochRequest(self.node_id, st.epoch, voter)))

    def _on_begin_quorum_epoch_request(self, source, cid, req: BeginQuorumEpochRequest,
                                       now_ms, out) -> None:
        error = self._validate_voter_only(req.leader_id, req.leader_epoch)
        if error == E.NONE and req.voter_id not in (NO_ID, self.node_id):
            error = E.INVALID_VOTER_KEY
        if error == E.NONE and req.leader_epoch == self.epoch and self.leader_id not in (
                NO_ID, req.leader_id):
            error = E.INVALID_REQUEST  # a second leader of one epoch: never follow it
        if error == E.NONE:
            self._maybe_transition(req.leader_id, req.leader_epoch, now_ms, out)
        out.append(Send(source, cid, BeginQuorumEpochResponse(error, self.leader_id,
                                                              self.epoch)))

    def _on_begin_quorum_epoch_response(self, source, cid, resp: BeginQuorumEpochResponse,
                                        now_ms, out) -> None:
        if self._handle_common_response(resp.error_code, resp.leader_id, resp.leader_epoch,
                                        now_ms, out):
            return
        st = self.state
        if resp.error_code == E.NONE and isinstance(st, LeaderState) and resp.leader_epoch == st.epoch:
            st.acked.add(source)

    def _send_end_quorum_epoch(self, now_ms: int, out: list) -> None:
        st = self.state
        assert isinstance(st, ResignedState)
        st.resend_deadline = now_ms + self.config.request_timeout_ms
        for voter in sorted(st.unacked):
            out.append(Send(voter, self._correlation_id(), EndQuorumEpochRequest(
                self.node_id, st.epoch, st.preferred_successors)))

    def _on_end_quorum_epoch_request(self, source, cid, req: EndQuorumEpochRequest,
                                     now_ms, out) -> None:
        error = self._validate_voter_only(req.leader_id, req.leader_epoch)
        if error == E.NONE and req.leader_epoch == self.epoch and self.leader_id not in (
                NO_ID, req.leader_id):
            error = E.INVALID_REQUEST
        if error == E.NONE:
            self._maybe_transition(req.leader_id, req.leader_epoch, now_ms, out)
            st = self.state
            if isinstance(st, FollowerState) and st.leader_id == req.leader_id:
                # the most caught-up successor stands first (strict exponential backoff)
                st.fetch_deadline = now_ms + self._end_epoch_backoff(req.preferred_successors)
                st.fetched_at = None  # it resigned: grant its successor's pre-vote
        out.append(Send(source, cid, EndQuorumEpochResponse(error, self.leader_id, self.epoch)))

    def _end_epoch_backoff(self, successors: tuple[int, ...]) -> int:
        # KafkaRaftClient.strictExponentialElectionBackoffMs
        max_ms = self.config.election_backoff_max_ms
        if self.node_id not in successors:
            return max_ms
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        return min(max_ms, (max_ms >> (len(successors) - 1)) << (position - 1))

    def _on_end_quorum_epoch_response(self, source, cid, resp: EndQuorumEpochResponse,
                                      now_ms, out) -> None:
        if self._handle_common_response(resp.error_code, resp.leader_id, resp.leader_epoch,
                                        now_ms, out):
            return
        st = self.state
        if isinstance(st, ResignedState) and resp.leader_epoch == st.epoch:
            st.unacked.discard(source)

    # -- Fetch: the leader's side ---------------------------------------------------------

    def _validate_leader_only(self, epoch: int) -> ErrorCode:
        if epoch < self.epoch:
            return E.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return E.UNKNOWN_LEADER_EPOCH
        if not self.is_leader:
            return E.NOT_LEADER_OR_FOLLOWER
        return E.NONE

    def _fetch_error(self, error: ErrorCode) -> FetchResponse:
        return FetchResponse(error, self._leader_info())

    def _on_fetch_request(self, source, cid, req: FetchRequest, now_ms, out) -> None:
        if (req.fetch_offset < 0 or req.last_fetched_epoch < 0
                or req.last_fetched_epoch > req.current_leader_epoch):
            out.append(Send(source, cid, self._fetch_error(E.INVALID_REQUEST)))
            return
        error = self._validate_leader_only(req.current_leader_epoch)
        if error != E.NONE:
            out.append(Send(source, cid, self._fetch_error(error)))
            return
        st = self.state
        assert isinstance(st, LeaderState)
        if source in self.voters:
            st.acked.add(source)  # it fetches from us: it knows this epoch's leader
            st.fetched_voters.add(source)
            if len(st.fetched_voters) + int(self.is_voter) >= self._majority:
                st.check_quorum_deadline = now_ms + self._check_quorum_timeout()
                st.fetched_voters.clear()
        validation = self.log.validate_offset_and_epoch(req.fetch_offset, req.last_fetched_epoch)
        if validation.kind == ValidationKind.DIVERGING:
            assert validation.at is not None
            diverging = EpochEndOffset(validation.at.epoch, validation.at.end_offset)
            out.append(Send(source, cid, self._leader_fetch_response(diverging_epoch=diverging)))
            return
        if validation.kind == ValidationKind.SNAPSHOT:
            out.append(Send(source, cid, self._leader_fetch_response(
                snapshot_id=validation.at)))
            return
        st.parked.pop(source, None)  # a newer fetch supersedes it; its sender moved on
        if req.fetch_offset >= self.log.end_offset:
            st.caught_up_at[source] = now_ms
        st.end_offsets[source] = req.fetch_offset
        advanced = False
        if source in self.voters:
            advanced = self._maybe_update_high_watermark(out)  # answers the parked ones
        elif source >= 0 and source != self.node_id:
            st.observer_fetched_ms[source] = now_ms
            for gone in [o for o, at in st.observer_fetched_ms.items()
                         if at + OBSERVER_SESSION_TIMEOUT_MS < now_ms]:
                del st.observer_fetched_ms[gone]
                if gone not in self.voters:  # an observer added since is a voter now
                    st.end_offsets.pop(gone, None)
                    st.caught_up_at.pop(gone, None)
        parked = ParkedFetch(cid, req, now_ms + req.max_wait_ms)
        # hold an empty answer (Kafka's fetch purgatory), unless its sender has yet to learn
        # the high watermark: this very fetch moved it, or another voter's did since our last
        # answer to this one (else a follower applies a commit only a max wait later)
        hw = st.high_watermark if st.high_watermark is not None else -1
        behind = st.told_high_watermark.get(source, -1) < hw
        if (req.fetch_offset >= self.log.end_offset and req.max_wait_ms > 0 and not advanced
                and not behind):
            st.parked[source] = parked  # nothing to send yet: hold it (Kafka's purgatory)
        else:
            self._answer_fetch(source, parked, out)

    def _leader_fetch_response(self, **kwargs) -> FetchResponse:
        st = self.state
        assert isinstance(st, LeaderState)
        hw = st.high_watermark if st.high_watermark is not None else -1
        return FetchResponse(E.NONE, self._leader_info(), high_watermark=hw,
                             log_start_offset=self.log.start_offset, **kwargs)

    def _answer_fetch(self, replica: int, parked: ParkedFetch, out: list) -> None:
        records = self.log.read(parked.request.fetch_offset, self.config.fetch_max_bytes)
        response = self._leader_fetch_response(records=records)
        st = self.state
        assert isinstance(st, LeaderState)
        st.told_high_watermark[replica] = response.high_watermark
        out.append(Send(replica, parked.correlation_id, response))

    def _answer_parked(self, out: list) -> None:
        st = self.state
        assert isinstance(st, LeaderState)
        for replica, parked in list(st.parked.items()):
            del st.parked[replica]
            self._answer_fetch(replica, parked, out)

    def _leader_append(self, entries: tuple[Entry, ...], now_ms: int, out: list) -> None:
        self.log.append(entries)
        out.append(AppendEntries(entries))
        self._maybe_update_high_watermark(out)
        self._answer_parked(out)

    def _maybe_update_high_watermark(self, out: list) -> bool:
        st = self.state
        assert isinstance(st, LeaderState)
        # over the voters in force, the leader among them unless it is being removed
        offsets = sorted([self.log.end_offset if v == self.node_id else st.end_offsets.get(v, -1)
                          for v in self.voters], reverse=True)
        replicated = offsets[len(offsets) // 2]
        if self._may_commit_to(st, replicated) and (
                st.high_watermark is None or replicated > st.high_watermark):
            st.high_watermark = replicated
            if replicated > self.high_watermark:
                self.high_watermark = replicated
                self._high_watermark_told = True
                out.append(HighWatermark(replicated))
            self._voter_change_committed(out)
            self._answer_parked(out)
            return True
        return False

    def _may_commit_to(self, st: LeaderState, replicated: int) -> bool:
        # Only an entry of this epoch commits by counting replicas (Raft's rule); older
        # entries commit with it. A leader that counted them could expose an entry that a
        # later leader, elected with a log of a newer epoch, overwrites.
        # LeaderState.maybeUpdateHighWatermark.
        return replicated > st.epoch_start_offset

    def _on_fetch_snapshot_request(self, source, cid, req: FetchSnapshotRequest, now_ms,
                                   out) -> None:
        error = self._validate_leader_only(req.current_leader_epoch)
        snapshot = self.log.snapshot
        if error == E.NONE and (snapshot is None or snapshot.snapshot_id != req.snapshot_id):
            error = E.SNAPSHOT_NOT_FOUND
        payload = self._snapshot_payload(snapshot) if snapshot is not None else b""
        if error == E.NONE and snapshot is not None and not 0 <= req.position <= len(payload):
            error = E.POSITION_OUT_OF_RANGE
        if error != E.NONE or snapshot is None:
            out.append(Send(source, cid, FetchSnapshotResponse(error, self._leader_info())))
            return
        chunk = payload[req.position:req.position + max(1, req.max_bytes)]
        out.append(Send(source, cid, FetchSnapshotResponse(
            E.NONE, self._leader_info(), snapshot.snapshot_id, len(payload),
            req.position, chunk)))

    def _snapshot_payload(self, snapshot: Snapshot) -> bytes:
        """The bytes FetchSnapshot serves: the image, and in a dynamic quorum the voter set
        before it (a length and a VotersRecord), as Kafka's snapshots hold their
        VotersRecord ahead of the metadata records."""
        if self.config.kraft_version == KRAFT_VERSION_STATIC:
            return snapshot.data
        voters = encode_voters(snapshot.voters or self.voter_set)
        return len(voters).to_bytes(4, "big") + voters + snapshot.data

    def _snapshot_from_payload(self, snapshot_id: SnapshotId, payload: bytes) -> Snapshot:
        if self.config.kraft_version == KRAFT_VERSION_STATIC:
            return Snapshot(snapshot_id, payload)
        size = int.from_bytes(payload[:4], "big")
        return Snapshot(snapshot_id, payload[4 + size:], decode_voters(payload[4:4 + size]))

    # -- Fetch: the follower's side -------------------------------------------------------

    def _send_fetch(self, now_ms: int, out: list) -> None:
        st = self.state
        assert isinstance(st, FollowerState)
        cid = self._correlation_id()
        st.in_flight = cid
        st.request_deadline = now_ms + self.config.request_timeout_ms
        if st.fetching_snapshot is not None:
            # in chunks, as KafkaRaftClient caps each FetchSnapshot at MAX_FETCH_SIZE_BYTES
            message: Any = FetchSnapshotRequest(self.node_id, st.epoch, st.fetching_snapshot,
                                                len(st.snapshot_bytes), SNAPSHOT_CHUNK_BYTES)
        else:
            message = FetchRequest(self.node_id, st.epoch, self.log.end_offset,
                                   self.log.last_fetched_epoch, self.log.start_offset,
                                   self.config.fetch_max_wait_ms)
        out.append(Send(st.leader_id, cid, message))

    def _accept_fetch_answer(self, cid: int, error: ErrorCode, leader: LeaderIdAndEpoch,
                             now_ms: int, out: list) -> FollowerState | None:
        """The follower state if this answers our outstanding fetch without an error."""
        st = self.state
        if not isinstance(st, FollowerState) or st.in_flight != cid:
            return None  # an answer to a request we gave up on
        st.in_flight = None
        if self._handle_common_response(error, leader.leader_id, leader.leader_epoch,
                                        now_ms, out):
            return None
        if error != E.NONE:
            if error in (E.SNAPSHOT_NOT_FOUND, E.POSITION_OUT_OF_RANGE):
                st.fetching_snapshot = None  # the leader moved on: ask again with a Fetch
            st.request_deadline = now_ms + self.config.retry_backoff_ms
            return None
        st.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        st.fetched_at = now_ms
        return st

    def _on_fetch_response(self, source, cid, resp: FetchResponse, now_ms, out) -> None:
        st = self._accept_fetch_answer(cid, resp.error_code, resp.current_leader, now_ms, out)
        if st is None:
            return
        if resp.diverging_epoch is not None:
            diverging = SnapshotId(resp.diverging_epoch.end_offset, resp.diverging_epoch.epoch)
            offset = self.log.truncate_to_end_offset(diverging)
            if offset < self.high_watermark:
                raise IllegalStateError(
                    f"node {self.node_id} told to truncate to {offset}, below its high "
                    f"watermark {self.high_watermark}")
            if offset < self.log.end_offset:
                self.log.truncate_to(offset)
                out.append(TruncateTo(offset))
        elif resp.snapshot_id is not None:
            st.fetching_snapshot = resp.snapshot_id
            st.snapshot_bytes = bytearray()
        else:
            records = resp.records
            if records and records[0].offset == self.log.end_offset:
                self.log.append(records)
                out.append(AppendEntries(records))
            if resp.high_watermark >= 0:
                self._follower_high_watermark(resp.high_watermark, out)
        self._send_fetch(now_ms, out)

    def _follower_high_watermark(self, leader_hw: int, out: list) -> None:
        hw = min(leader_hw, self.log.end_offset)
        if hw > self.high_watermark or not self._high_watermark_told:
            # the first one is told even when it is no news (a node restarted on a snapshot
            # at the quorum's high watermark): the runtime learns it has caught up
            self.high_watermark = max(hw, self.high_watermark)
            self._high_watermark_told = True
            out.append(HighWatermark(self.high_watermark))

    def _on_fetch_snapshot_response(self, source, cid, resp: FetchSnapshotResponse, now_ms,
                                    out) -> None:
        st = self._accept_fetch_answer(cid, resp.error_code, resp.current_leader, now_ms, out)
        if st is None:
            return
        if (resp.snapshot_id != st.fetching_snapshot or resp.position != len(st.snapshot_bytes)
                or resp.snapshot_id is None):
            st.fetching_snapshot = None
            self._send_fetch(now_ms, out)
            return
        st.snapshot_bytes += resp.unaligned_records
        if len(st.snapshot_bytes) >= resp.size:
            try:
                snapshot = self._snapshot_from_payload(resp.snapshot_id, bytes(st.snapshot_bytes))
            except VoterSetError:  # not what a leader of ours sends: fetch it again
                st.fetching_snapshot, st.snapshot_bytes = None, bytearray()
                self._send_fetch(now_ms, out)
                return
            st.fetching_snapshot, st.snapshot_bytes = None, bytearray()
            self.log.install_snapshot(snapshot)
            out.append(InstallSnapshot(snapshot))
            # a snapshot holds only committed entries
            if snapshot.snapshot_id.end_offset > self.high_watermark:
                self.high_watermark = snapshot.snapshot_id.end_offset
                self._high_watermark_told = True
                out.append(HighWatermark(self.high_watermark))
        self._send_fetch(now_ms, out)

    # -- KIP-853: AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter on the leader -------------

    def _voter_change_error(self, now_ms: int) -> tuple[ErrorCode, str] | None:
        """Why no voter change may start now (the checks Kafka's AddVoterHandler,
        RemoveVoterHandler and UpdateVoterHandler share), or None."""
        st = self.state
        if not isinstance(st, LeaderState):
            return E.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is not the leader"
        if st.change is not None:
            return (E.REQUEST_TIMED_OUT, "timed out waiting for the leader to finish the "
                    "previous voter change")
        if st.high_watermark is None:
            # until an entry of its epoch commits, the leader cannot know that no earlier
            # leader's uncommitted voter change survives (the single-server change bug)
            return (E.REQUEST_TIMED_OUT, "timed out waiting for the leader to establish its "
                    "high watermark")
        if self.config.kraft_version < KRAFT_VERSION_RECONFIG:
            return (E.UNSUPPORTED_VERSION, "the quorum does not support changing voters: "
                    "kraft.version is 0 (started with controller.quorum.voters)")
        if self.log.voters_offset >= st.high_watermark:
            return (E.REQUEST_TIMED_OUT, f"timed out waiting for the voter change at offset "
                    f"{self.log.voters_offset} to commit (high watermark {st.high_watermark})")
        return None

    def _start_change(self, source: int, cid: int, request: Any, voters: VoterSet,
                      timeout_ms: int, now_ms: int, out: list) -> None:
        """Append the new voter set, in force at once, and answer when it commits."""
        st = self.state
        assert isinstance(st, LeaderState)
        offset = self.log.end_offset
        st.change = VoterChange(source, cid, request, offset, now_ms + timeout_ms)
        self._leader_append((Entry(offset, st.epoch, b"", control=True, voters=voters),),
                            now_ms, out)

    def _answer_change(self, error: ErrorCode, message: str | None, out: list) -> None:
        st = self.state
        assert isinstance(st, LeaderState) and st.change is not None
        change, st.change = st.change, None
        out.append(Send(change.source, change.correlation_id,
                        self._change_response(change.request, error, message)))

    def _change_response(self, request: Any, error: ErrorCode, message: str | None) -> Any:
        if isinstance(request, UpdateRaftVoterRequest):
            return UpdateRaftVoterResponse(error, self._leader_info())
        return VOTER_CHANGE_RESPONSES[type(request)](error, message)

    def _voter_change_committed(self, out: list) -> None:
        st = self.state
        assert isinstance(st, LeaderState)
        if st.high_watermark is None or st.high_watermark <= self.log.voters_offset:
            return
        if st.change is not None:
            self._answer_change(E.NONE, None, out)
        if not self.is_voter:
            # our own removal committed: resign so that a voter leads (RemoveVoterHandler)
            st.resign_requested = True

    def _on_add_raft_voter_request(self, source, cid, req: AddRaftVoterRequest, now_ms,
                                   out) -> None:
        refused = self._voter_change_error(now_ms)
        voter = req.voter
        if refused is None and voter.voter_id < 0:
            refused = E.INVALID_REQUEST, f"voter id {voter.voter_id} is not a node id"
        if refused is None and not voter.endpoints:
            refused = E.INVALID_REQUEST, "the new voter has no endpoint"
        if refused is None and voter.voter_id in self.voters:
            refused = (E.DUPLICATE_VOTER, f"voter {voter.voter_id} is already one of the "
                       f"voters {list(self.voters)}")
        st = self.state
        if refused is None and isinstance(st, LeaderState):
            caught_up = st.caught_up_at.get(voter.voter_id)
            if caught_up is None or now_ms - caught_up > self.config.fetch_timeout_ms:
                # it must fetch as an observer first, or it would hold the high watermark
                # back (LeaderState.isReplicaCaughtUp)
                refused = (E.REQUEST_TIMED_OUT, f"node {voter.voter_id} has not caught up "
                           f"with the leader's log as an observer")
        if refused is not None:
            out.append(Send(source, cid, AddRaftVoterResponse(*refused)))
            return
        voters = self.voter_set.add(voter)
        assert voters is not None
        self._start_change(source, cid, req, voters, req.timeout_ms, now_ms, out)

    def _on_remove_raft_voter_request(self, source, cid, req: RemoveRaftVoterRequest, now_ms,
                                      out) -> None:
        refused = self._voter_change_error(now_ms)
        voters = None
        if refused is None:
            voters = self.voter_set.remove(req.voter_id, req.directory_id)
            if voters is None:
                refused = (E.VOTER_NOT_FOUND, f"cannot remove voter {req.voter_id} "
                           f"(directory {req.directory_id}) from the voters "
                           f"{list(self.voters)}")
        if refused is not None or voters is None:
            out.append(Send(source, cid, RemoveRaftVoterResponse(*(refused or (E.NONE, None)))))
            return
        self._start_change(source, cid, req, voters, self.config.request_timeout_ms, now_ms,
                           out)

    def _on_update_raft_voter_request(self, source, cid, req: UpdateRaftVoterRequest, now_ms,
                                      out) -> None:
        refused = self._voter_change_error(now_ms)
        error: ErrorCode | None = refused[0] if refused else None
        if error is None and req.current_leader_epoch not in (-1, self.epoch):
            error = (E.FENCED_LEADER_EPOCH if req.current_leader_epoch < self.epoch
                     else E.UNKNOWN_LEADER_EPOCH)
        voters = None
        if error is None:
            voters = self.voter_set.update(req.voter)
            if voters is None:
                error = E.VOTER_NOT_FOUND
            elif not req.voter.endpoints:
                error = E.INVALID_REQUEST
        if error is not None or voters is None:
            out.append(Send(source, cid, UpdateRaftVoterResponse(error or E.NONE,
                                                                 self._leader_info())))
            return
        self._start_change(source, cid, req, voters, self.config.request_timeout_ms, now_ms,
                           out)

    _HANDLERS: dict[type, Callable[..., None]] = {
        AddRaftVoterRequest: _on_add_raft_voter_request,
        RemoveRaftVoterRequest: _on_remove_raft_voter_request,
        UpdateRaftVoterRequest: _on_update_raft_voter_request,
        VoteRequest: _on_vote_request,
        VoteResponse: _on_vote_response,
        BeginQuorumEpochRequest: _on_begin_quorum_epoch_request,
        BeginQuorumEpochResponse: _on_begin_quorum_epoch_response,
        EndQuorumEpochRequest: _on_end_quorum_epoch_request,
        EndQuorumEpochResponse: _on_end_quorum_epoch_response,
        FetchRequest: _on_fetch_request,
        FetchResponse: _on_fetch_response,
        FetchSnapshotRequest: _on_fetch_snapshot_request,
        FetchSnapshotResponse: _on_fetch_snapshot_response,
    }
