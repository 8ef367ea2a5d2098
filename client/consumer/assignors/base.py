"""The assignor interface and the domain types every assignor works on.

Owns: TopicPartition, MemberSubscription (one group member as the leader sees it after
decoding its ConsumerProtocolSubscription), the Assignor base class, the member order that
range and roundrobin share with Java and librdkafka, and small helpers for assignors
(eligible partitions, an empty result, a compact printable form).

Assignors are pure: no I/O, no clock, no state kept between calls. Wire structs stay in
protocol/consumer_protocol.py; ``member_from_subscription`` is the one bridge from there
to here (docs/ARCHITECTURE.md §6).

Writing your own assignor
-------------------------
Assignors are pluggable, as Java's ConsumerPartitionAssignor is (partition.assignment.strategy).
Subclass :class:`Assignor`, give it a ``name`` that every member of the group lists under
the same spelling, and implement :meth:`Assignor.assign`. ``resolve_assignors`` (in this
package's __init__, meant for ``partition_assignment_strategy``) takes your class or an
instance next to the built-in names. Only the group leader runs ``assign``; every member
runs ``subscription_user_data`` before each JoinGroup.

A worked example: give every partition to the member whose id sorts first ("hot standby").

>>> class FirstMemberAssignor(Assignor):
...     name = "first-member"
...     def assign(self, members, partitions_per_topic):
...         result = empty_assignment(members)
...         for member_id in sorted(members):
...             result[member_id] = eligible_partitions(members[member_id], partitions_per_topic)
...             break
...         return result
>>> members = {
...     "c1": MemberSubscription("c1", ["t0"], []),
...     "c0": MemberSubscription("c0", ["t0", "t1"], []),
... }
>>> format_assignment(FirstMemberAssignor().assign(members, {"t0": 2, "t1": 1}))
{'c0': 't0-0 t0-1 t1-0', 'c1': ''}

Rules a custom assignor must follow (the built-in ones do, and tests/client checks them):

- return a list for every member id in ``members`` (possibly empty), and nothing else;
- give each partition to at most one member, and only to a member subscribed to its topic;
- ignore topics missing from ``partitions_per_topic`` (no metadata, not assignable);
- to declare ``supported_protocols = ("eager", "cooperative")``, never give a member a
  partition that another member still lists in ``owned_partitions``: leave it out so its
  owner revokes it, and hand it out in the follow-up rebalance (KIP-429; the Java leader
  rejects an assignment that breaks this). ``cooperative_sticky.withhold_transfers``
  applies exactly this rule to any assignment.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Mapping, NamedTuple

TopicPartition = NamedTuple("TopicPartition", [("topic", str), ("partition", int)])

EAGER = "eager"
COOPERATIVE = "cooperative"
#: Rebalance protocols in Java's RebalanceProtocol order: later is preferred when every
#: configured assignor supports it.
REBALANCE_PROTOCOLS: tuple[str, ...] = (EAGER, COOPERATIVE)

#: The generation a member reports before it has been in any (Java DEFAULT_GENERATION).
DEFAULT_GENERATION = -1


@dataclass
class MemberSubscription:
    """One member's subscription, as the leader's assignor sees it.

    ``owned_partitions`` and ``generation`` are ConsumerProtocolSubscription v1/v2 fields
    (what the member owned going into this rebalance, in which generation); ``user_data``
    is the assignor's own opaque bytes (``Assignor.subscription_user_data`` on the member).
    """

    member_id: str
    topics: list[str]
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation: int = DEFAULT_GENERATION
    user_data: bytes | None = None
    rack_id: str | None = None
    group_instance_id: str | None = None


class Assignor(abc.ABC):
    """A partition assignment strategy (Java ConsumerPartitionAssignor, classic protocol).

    ``name`` is the protocol name sent in JoinGroup; the broker picks one name all members
    list. ``supported_protocols`` lists "eager" and/or "cooperative": the consumer uses the
    cooperative protocol only when every configured assignor supports it.
    """

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[str, ...]] = (EAGER,)

    def subscription_user_data(self, topics: Iterable[str], owned: list[TopicPartition],
                               generation: int) -> bytes | None:
        """Bytes this member puts in its subscription's user_data; None writes a null.

        ``owned`` is the member's current assignment and ``generation`` the generation it
        was received in (DEFAULT_GENERATION before the first). The default sends nothing.
        """
        return None

    @abc.abstractmethod
    def assign(self, members: dict[str, MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TopicPartition]]:
        """Map every member id to the partitions it gets; see the module docstring."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


# -- helpers shared by the assignors ------------------------------------------------------

def java_string_key(s: str) -> bytes:
    """A sort key that orders strings as Java's String.compareTo does (UTF-16 code units).

    Python compares code points; the two differ only between a character above U+FFFF and
    one in U+E000..U+FFFF. Comparing big-endian UTF-16 bytes is comparing code units.
    """
    return s.encode("utf-16-be", "surrogatepass")


def member_sort_key(member_id: str, group_instance_id: str | None = None) -> tuple:
    """Java AbstractPartitionAssignor.MemberInfo order, used by range and roundrobin.

    Static members (with a group.instance.id) come first, ordered by instance id; dynamic
    members follow, ordered by member id. librdkafka (``rd_kafka_group_member_cmp``) orders
    two static members by instance id and any other pair by member id, so the two agree
    unless a group mixes static and dynamic members.
    """
    if group_instance_id is not None:
        return (0, java_string_key(group_instance_id), java_string_key(member_id))
    return (1, java_string_key(member_id), b"")


def sorted_member_ids(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Member ids (the dict keys) in ``member_sort_key`` order."""
    return sorted(members, key=lambda m: member_sort_key(m, members[m].group_instance_id))


def tp_sort_key(tp: TopicPartition) -> tuple[bytes, int]:
    """Topic (Java order), then partition number."""
    return (java_string_key(tp.topic), tp.partition)


def sorted_topics(topics: Iterable[str]) -> list[str]:
    return sorted(set(topics), key=java_string_key)


def empty_assignment(members: Mapping[str, MemberSubscription]) -> dict[str, list[TopicPartition]]:
    """An empty list for every member: every assignor's result has all member ids."""
    return {member_id: [] for member_id in members}


def eligible_partitions(member: MemberSubscription,
                        partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    """Every partition of the topics ``member`` subscribes to that metadata knows, sorted."""
    return [TopicPartition(topic, p)
            for topic in sorted_topics(member.topics)
            for p in range(max(partitions_per_topic.get(topic, 0), 0))]


def format_assignment(assignment: Mapping[str, Iterable[TopicPartition]]) -> dict[str, str]:
    """A compact, sorted view for logs and docstrings: ``{'c0': 't0-0 t1-2', ...}``.

    Partitions print as Java's TopicPartition.toString does (``topic-partition``).
    """
    return {member_id: " ".join(f"{tp.topic}-{tp.partition}"
                                for tp in sorted(tps, key=tp_sort_key))
            for member_id, tps in sorted(assignment.items())}


def member_from_subscription(member_id: str, subscription, group_instance_id: str | None = None
                             ) -> MemberSubscription:
    """Build the domain view from a decoded ``protocol.consumer_protocol.Subscription``.

    The leader calls this for each JoinGroup member (member id and group.instance.id come
    from the JoinGroup response, the rest from the member's metadata bytes).
    """
    owned = [TopicPartition(topic, p)
             for topic, parts in subscription.owned_partitions.items() for p in parts]
    return MemberSubscription(
        member_id=member_id,
        topics=list(subscription.topics),
        owned_partitions=sorted(owned, key=tp_sort_key),
        generation=subscription.generation_id,
        user_data=subscription.user_data,
        rack_id=subscription.rack_id,
        group_instance_id=group_instance_id,
    )
