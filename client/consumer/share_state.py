"""The share consumer's pure pieces (KIP-932): no trio, no sockets.

Owns: `AcknowledgeType`; `acquired` (which records of a ShareFetch answer the member may
hand out: only those inside its AcquiredRecords ranges, each with its delivery count);
`acknowledgement_batches` (one partition's acknowledgements as the wire's
AcknowledgementBatches); and `ShareSessionState`, the share session with one leader as
the client keeps it (broker/share/session.py is the leader's side):

- epoch 0 opens a session with the partitions the request names, and may not carry
  acknowledgements; every answered request moves the epoch on (past 2**31 - 1 it wraps
  to 1, as the leader's does); -1 is the last request, which closes it;
- a continuing request names the partitions it adds and those it acknowledges, and
  forgets in ForgottenTopicsData those the member fetches there no more;
- a lost connection, SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH: the leader
  has dropped the session (and handed its records back), so the next request opens a new
  one and the acknowledgements still pending there are void.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Generic, Iterable, Mapping, Sequence, TypeVar

__all__ = ["AcknowledgeType", "GAP", "INITIAL_EPOCH", "FINAL_EPOCH", "ShareSessionState",
           "acquired", "acknowledgement_batches"]

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
GAP = 0  # an acquired offset with no record (a transaction marker, a compacted record)

K = TypeVar("K", bound=tuple)  # a partition key: TopicPartition for the client
R = TypeVar("R")  # a decoded record; its offset is r[2], as ConsumerRecord's


class AcknowledgeType(enum.IntEnum):
    """What a member says of a record it was given (Kafka's AcknowledgeType)."""
    ACCEPT = 1   # processed: never delivered again
    RELEASE = 2  # give it back: delivered again at once (delivery count + 1)
    REJECT = 3   # unprocessable: archived, never delivered again


def acquired(records: Sequence[R], ranges: Iterable[tuple[int, int, int]]
             ) -> tuple[list[tuple[R, int]], list[int]]:
    """The records (sorted by offset) inside the acquired `ranges` ((first offset, last
    offset, delivery count)), each with its delivery count; and the acquired offsets that
    no record has, which the member acknowledges as GAP so their locks do not wait to
    expire. A fetched batch may hold records acquired by other members: they are left out."""
    kept: list[tuple[R, int]] = []
    gaps: list[int] = []
    i = 0
    for first, last, count in sorted(ranges):
        while i < len(records) and records[i][2] < first:  # type: ignore[index]
            i += 1
        expected = first
        while i < len(records) and records[i][2] <= last:  # type: ignore[index]
            offset = records[i][2]  # type: ignore[index]
            gaps.extend(range(expected, offset))
            kept.append((records[i], count))
            expected = offset + 1
            i += 1
        gaps.extend(range(expected, last + 1))
    return kept, gaps


def acknowledgement_batches(acks: Mapping[int, int]) -> list[dict]:
    """offset -> acknowledge type as AcknowledgementBatches: runs of consecutive offsets
    with the same type, one type per run (the shorter of the wire's two forms)."""
    out: list[dict] = []
    for offset in sorted(acks):
        kind = int(acks[offset])
        last = out[-1] if out else None
        if last is not None and last["last_offset"] == offset - 1 \
                and last["acknowledge_types"] == [kind]:
            last["last_offset"] = offset
        else:
            out.append({"first_offset": offset, "last_offset": offset,
                        "acknowledge_types": [kind]})
    return out


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass
class SessionPlan(Generic[K]):
    """One request of a session: its epoch, the partitions it names, those it forgets."""
    epoch: int
    named: list[K]
    forgotten: list[K]


@dataclass
class ShareSessionState(Generic[K]):
    epoch: int = INITIAL_EPOCH  # what the next request carries
    partitions: set[K] = field(default_factory=set)  # in the leader's session

    @property
    def is_open(self) -> bool:
        return self.epoch != INITIAL_EPOCH

    def plan(self, wanted: Iterable[K], acknowledging: Iterable[K] = ()) -> SessionPlan[K]:
        """The next ShareFetch: fetch `wanted`, acknowledge on `acknowledging` (which must
        be empty while the session is not open: an opening request may not acknowledge)."""
        wanted = set(wanted)
        acking = set(acknowledging)
        if not self.is_open:
            if acking:
                raise ValueError("a request that opens a share session cannot acknowledge")
            return SessionPlan(INITIAL_EPOCH, sorted(wanted), [])
        named = (wanted - self.partitions) | acking
        forgotten = (self.partitions | acking) - wanted
        return SessionPlan(self.epoch, sorted(named), sorted(forgotten))

    def answered(self, plan: SessionPlan[K]) -> None:
        """The leader took the request: the session holds what it named, less what it
        forgot, and the epoch moves on."""
        self.partitions = (self.partitions | set(plan.named)) - set(plan.forgotten)
        self.epoch = _next_epoch(plan.epoch)

    def acknowledged(self) -> None:
        """A ShareAcknowledge (epoch n) was answered: the epoch moves on."""
        self.epoch = _next_epoch(self.epoch)

    def reset(self) -> None:
        """The leader dropped the session (or may have): open a new one next time."""
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
