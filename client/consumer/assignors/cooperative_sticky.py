"""The "cooperative-sticky" assignor: sticky balance under the cooperative protocol.

Owns: CooperativeStickyAssignor, its user data (just the int32 generation, as Java's
CooperativeStickyAssignor writes it) and the KIP-429 rule that a partition never goes
straight from one live member to another within one rebalance.

Owned partitions and the generation come from ConsumerProtocolSubscription v1/v2 fields
(MemberSubscription.owned_partitions / generation). A member that reports no generation
(-1, e.g. subscription v0/v1) falls back to its user data: four bytes are Java's int32
generation; a longer payload in the Java sticky layout (what librdkafka sends) gives that
layout's generation; anything else counts as -1.
"""

from __future__ import annotations

import struct

from client.consumer.assignors.balance import balanced_sticky_assignment
from client.consumer.assignors.base import (
    COOPERATIVE, DEFAULT_GENERATION, EAGER, Assignor, MemberSubscription, TopicPartition,
    sorted_member_ids,
)
from client.consumer.assignors.sticky import UserDataError, decode_sticky_user_data

_INT32 = struct.Struct(">i")


def encode_cooperative_user_data(generation: int) -> bytes:
    """Java COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0: the generation as a 4-byte int32."""
    return _INT32.pack(generation)


def member_generation(member: MemberSubscription) -> int:
    """The generation a member's owned partitions belong to (module docstring)."""
    if member.generation >= 0:
        return member.generation
    data = member.user_data
    if not data:
        return DEFAULT_GENERATION
    if len(data) == 4:
        return _INT32.unpack(data)[0]
    try:
        return decode_sticky_user_data(data)[1]
    except UserDataError:
        return DEFAULT_GENERATION


def withhold_transfers(members: dict[str, MemberSubscription],
                       assignment: dict[str, list[TopicPartition]]
                       ) -> dict[str, list[TopicPartition]]:
    """Drop every partition given to a member while another live member still owns it.

    "Owns" means listed in that member's owned_partitions, whatever its generation or
    subscription: exactly what Java's leader checks (validateCooperativeAssignment: no
    partition may be both added to one member and revoked from another). The owner then
    finds the partition missing from its assignment, revokes it and rejoins; in that
    follow-up rebalance nobody owns it and it can be handed out.
    """
    claimed_by: dict[TopicPartition, set[str]] = {}
    for member_id, member in members.items():
        for tp in member.owned_partitions:
            claimed_by.setdefault(TopicPartition(tp[0], tp[1]), set()).add(member_id)
    adjusted = {}
    for member_id, tps in assignment.items():
        adjusted[member_id] = [tp for tp in tps
                               if not claimed_by.get(tp, set()) - {member_id}
                               or member_id in claimed_by[tp]]
    return adjusted


class CooperativeStickyAssignor(Assignor):
    """Java's CooperativeStickyAssignor (KIP-429); also usable under the eager protocol."""

    name = "cooperative-sticky"
    supported_protocols = (EAGER, COOPERATIVE)

    def subscription_user_data(self, topics, owned: list[TopicPartition],
                               generation: int) -> bytes | None:
        """The generation as a 4-byte big-endian int32 (-1 before the first generation)."""
        return encode_cooperative_user_data(generation)

    def assign(self, members: dict[str, MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TopicPartition]]:
        """The sticky assignment, minus the partitions that must first be revoked.

        First the same solve as "sticky" (most balanced, then most partitions kept; the
        higher generation wins a partition two members claim), with previous owners taken
        from owned_partitions and ``member_generation``. Then every partition that would
        go to a member other than a live member that still owns it is left out of this
        rebalance altogether (``withhold_transfers``). Its owner revokes it and rejoins;
        the follow-up rebalance finds it unowned and gives it out, and since the solve is
        the same and the kept partitions are still most balanced, nothing else moves.
        A partition whose owner has left the group moves at once.

        Worked example (KIP-429's scale-out): A owns p0 and p1, B owns p2 of a 3-partition
        topic, and C joins. The balanced, sticky target moves one of A's partitions to C, so
        this rebalance gives A one partition and C nothing; A revokes the other. In the next
        rebalance nobody owns it and C gets it; B is never disturbed.

        >>> from client.consumer.assignors.base import format_assignment
        >>> def member(m, owned):
        ...     return MemberSubscription(m, ["t"], [TopicPartition("t", p) for p in owned], 1)
        >>> first = CooperativeStickyAssignor().assign(
        ...     {"A": member("A", [0, 1]), "B": member("B", [2]), "C": member("C", [])}, {"t": 3})
        >>> format_assignment(first)
        {'A': 't-0', 'B': 't-2', 'C': ''}
        >>> second = CooperativeStickyAssignor().assign(
        ...     {m: member(m, [tp.partition for tp in first[m]]) for m in first}, {"t": 3})
        >>> format_assignment(second)
        {'A': 't-0', 'B': 't-2', 'C': 't-1'}
        """
        order = sorted_member_ids(members)
        claims = {m: (member_generation(members[m]), members[m].owned_partitions) for m in order}
        target = balanced_sticky_assignment({m: members[m].topics for m in order},
                                            partitions_per_topic, claims, order)
        return withhold_transfers(members, target)
