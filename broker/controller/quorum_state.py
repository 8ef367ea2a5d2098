"""The election state a quorum voter must keep across restarts: Kafka's quorum-state file.

Owns: `ElectionState` (leader epoch, elected leader, voted-for candidate, the voters it was
written under) and its encoding as the JSON document Kafka's FileQuorumStateStore writes
(QuorumStateData at data_version 0). Pure: bytes in, bytes out; the runtime writes the
bytes to a temporary file and renames it into place before anything that depends on them
(a granted vote, a BeginQuorumEpoch) is sent.

Why it must survive a restart: a voter that forgot its vote could vote twice in one epoch,
and a leader that forgot its epoch could lead it twice; either breaks "one leader per
epoch" (KIP-595).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

DATA_VERSION = 0
NO_ID = -1


class QuorumStateError(ValueError):
    """The quorum-state bytes are not a document this version understands."""


@dataclass(frozen=True)
class ElectionState:
    epoch: int = 0
    leader_id: int = NO_ID  # the elected leader of `epoch`, or -1 while unknown
    voted_id: int = NO_ID  # the candidate this voter voted for in `epoch`, or -1
    voters: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader_id != NO_ID

    @property
    def has_voted(self) -> bool:
        return self.voted_id != NO_ID


def encode(state: ElectionState) -> bytes:
    doc = {
        "clusterId": "",
        "leaderId": state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": state.voted_id,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": v} for v in state.voters],
        "data_version": DATA_VERSION,
    }
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def decode(data: bytes) -> ElectionState:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QuorumStateError(f"quorum-state is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise QuorumStateError("quorum-state is not a JSON object")
    if doc.get("data_version") != DATA_VERSION:
        raise QuorumStateError(f"quorum-state data_version {doc.get('data_version')!r} is not "
                               f"{DATA_VERSION}")
    try:
        epoch, leader, voted = doc["leaderEpoch"], doc["leaderId"], doc["votedId"]
        voters = doc.get("currentVoters") or []
        voter_ids = tuple(v["voterId"] for v in voters)
    except (KeyError, TypeError) as exc:
        raise QuorumStateError(f"quorum-state lacks a field: {exc}") from None
    if not all(isinstance(x, int) and not isinstance(x, bool)
               for x in (epoch, leader, voted, *voter_ids)):
        raise QuorumStateError("quorum-state ids and epoch must be integers")
    if epoch < 0 or leader < NO_ID or voted < NO_ID:
        raise QuorumStateError(f"quorum-state has a negative epoch or id: {doc}")
    return ElectionState(epoch, leader, voted, voter_ids)
