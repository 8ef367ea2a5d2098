"""What the pure group coordinator asks of its runtime.

Owns: the effect types `Reply`, `Append` and `Emit`, and their union `Effect`, and the
share groups' `ShareMemberGone`. Every operation of broker.coordinator (the classic protocol
in .membership, the KIP-848 one in .consumer_group, KIP-932's in .share_group, offsets and
administration in .coordinator) returns a list of them instead
of doing I/O; broker.coordinator.runtime carries them out in order, so an `Append` is
written before the `Reply` it guards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    waiter: Any
    body: dict


@dataclass(frozen=True)
class Append:
    """Records for the group's __consumer_offsets partition, written before what follows.
    A TxnOffsetCommit's records are written in a transactional batch of its producer
    (`producer_id` >= 0), which the transaction's marker commits or aborts."""
    group_id: str
    records: list  # list[OffsetRecord]
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class Emit:
    type: str
    fields: dict


@dataclass(frozen=True)
class ShareMemberGone:
    """A share group member left or was fenced (`reason`), after the records that say so:
    the group runtime hands it to its share-group listeners (GroupRuntime.carry_out), so
    that the share-partition leaders on this broker release what it had acquired."""
    group_id: str
    member_id: str
    reason: str


# CoordinatorRuntime.apply_effects handles every member of this union and refuses anything
# else (ShareMemberGone is the group runtime's own, carried out by its carry_out).
Effect = Reply | Append | Emit
