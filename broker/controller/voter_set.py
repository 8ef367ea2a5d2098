"""The quorum's voter set as KIP-853 keeps it in the metadata log: who votes, each voter's
directory id and endpoints.

Owns: `Endpoint`, `Voter`, `VoterSet` (Kafka's VoterSet: add, remove, update of one voter,
each returning a new set or None when the change is not allowed) and the bytes of the two
control records that carry it, `VotersRecord` and `KRaftVersionRecord`
(`encode_voters` / `decode_voters`, `encode_kraft_version` / `decode_kraft_version`).

kraft.version 0 is the static quorum of `controller.quorum.voters`: no voter set in the
log, every node's configuration names the voters. kraft.version 1 is the dynamic quorum
that `controller.quorum.bootstrap.servers` starts: the voter set is the latest VotersRecord
in the log (or the snapshot's), uncommitted ones included, and only AddRaftVoter and
RemoveRaftVoter change it, one voter at a time.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from protocol.messages.quorum import KRaftVersionRecord, VotersRecord

KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_RECONFIG = 1  # KRaftVersion.KRAFT_VERSION_1: reconfiguration supported
VOTERS_RECORD_VERSION = 0


class VoterSetError(ValueError):
    """Control record bytes that are not a VotersRecord or KRaftVersionRecord."""


@dataclass(frozen=True)
class Endpoint:
    name: str  # the listener's name, e.g. CONTROLLER
    host: str
    port: int


@dataclass(frozen=True)
class Voter:
    voter_id: int
    directory_id: uuid.UUID = uuid.UUID(int=0)
    endpoints: tuple[Endpoint, ...] = ()
    # the kraft.version range the voter supports (VotersRecord's KRaftVersionFeature)
    min_kraft_version: int = 0
    max_kraft_version: int = KRAFT_VERSION_RECONFIG


@dataclass(frozen=True)
class VoterSet:
    voters: tuple[Voter, ...]  # sorted by id

    @staticmethod
    def of(voters) -> "VoterSet":
        return VoterSet(tuple(sorted(voters, key=lambda v: v.voter_id)))

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(v.voter_id for v in self.voters)

    def get(self, voter_id: int) -> Voter | None:
        return next((v for v in self.voters if v.voter_id == voter_id), None)

    def is_voter(self, voter_id: int, directory_id: uuid.UUID | None = None) -> bool:
        voter = self.get(voter_id)
        return voter is not None and (directory_id is None
                                      or voter.directory_id == directory_id)

    def add(self, voter: Voter) -> "VoterSet | None":
        """With `voter` added; None if its id votes already (Kafka's VoterSet.addVoter)."""
        if self.get(voter.voter_id) is not None:
            return None
        return VoterSet.of((*self.voters, voter))

    def remove(self, voter_id: int, directory_id: uuid.UUID) -> "VoterSet | None":
        """Without the voter; None if no voter has that id and directory id, or if it is
        the last one (Kafka's VoterSet.removeVoter): a quorum of nobody commits nothing."""
        voter = self.get(voter_id)
        if voter is None or voter.directory_id != directory_id or len(self.voters) == 1:
            return None
        return VoterSet(tuple(v for v in self.voters if v.voter_id != voter_id))

    def update(self, voter: Voter) -> "VoterSet | None":
        """With the voter's endpoints and version range replaced; None if it is not one."""
        old = self.get(voter.voter_id)
        if old is None or old.directory_id != voter.directory_id:
            return None
        return VoterSet(tuple(voter if v.voter_id == voter.voter_id else v
                              for v in self.voters))

    def with_endpoints(self, voter_id: int, endpoints: tuple[Endpoint, ...]) -> "VoterSet":
        voter = self.get(voter_id)
        assert voter is not None
        return self.update(replace(voter, endpoints=endpoints)) or self


def encode_voters(voters: VoterSet) -> bytes:
    return VotersRecord.build({"version": VOTERS_RECORD_VERSION, "voters": [
        {"voter_id": v.voter_id, "voter_directory_id": v.directory_id,
         "endpoints": [{"name": e.name, "host": e.host, "port": e.port} for e in v.endpoints],
         "k_raft_version_feature": {"min_supported_version": v.min_kraft_version,
                                    "max_supported_version": v.max_kraft_version}}
        for v in voters.voters]}, 0)


def decode_voters(data: bytes) -> VoterSet:
    try:
        body = VotersRecord.parse(data, 0)
        return VoterSet.of(Voter(
            v.voter_id, v.voter_directory_id,
            tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints),
            v.k_raft_version_feature.min_supported_version,
            v.k_raft_version_feature.max_supported_version) for v in body.voters)
    except Exception as e:  # noqa: BLE001  any decoding failure is corrupt data
        raise VoterSetError(f"not a VotersRecord: {e}") from None


def encode_kraft_version(version: int) -> bytes:
    return KRaftVersionRecord.build({"version": 0, "k_raft_version": version}, 0)


def decode_kraft_version(data: bytes) -> int:
    try:
        return KRaftVersionRecord.parse(data, 0).k_raft_version
    except Exception as e:  # noqa: BLE001
        raise VoterSetError(f"not a KRaftVersionRecord: {e}") from None


def static_voter_set(ids) -> VoterSet:
    return VoterSet.of(Voter(i) for i in ids)
