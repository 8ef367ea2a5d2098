"""Server-side partition assignors of KIP-848 consumer groups: "uniform" and "range".

Owns: the pure functions that turn a consumer group's members (subscriptions and the
partitions each member is assigned now) and the topics that exist into the group's next
target assignment, as Kafka 4.0's group coordinator computes it with
org.apache.kafka.coordinator.group.assignor.UniformAssignor (the default, "uniform") and
RangeAssignor ("range"). The consumer-group state machine chooses one by the name a member
sends in ConsumerGroupHeartbeat's ServerAssignor (``ASSIGNORS``), calls it whenever the
group epoch moves past the target assignment epoch, and reconciles members towards the
result; none of that lives here.

Inputs and outputs, in Kafka's vocabulary:

- ``members``: member id -> :class:`MemberSpec` (the GroupSpec's MemberSubscription and
  MemberAssignment). ``current`` should be the member's previous *target* assignment, which
  is what Kafka's TargetAssignmentBuilder passes, not what the member reports as owned:
  see :class:`MemberSpec`.
- ``topics``: topic name -> partition count, only for topics that exist (Kafka's
  SubscribedTopicDescriber). A subscribed topic missing from it is skipped, as Kafka's
  TopicIds skips names it cannot resolve before the assignor sees them.
- the result: member id -> topic -> partitions, with an entry (possibly ``{}``) for every
  member, no empty partition sets, and nothing for members not in ``members``.

Both assignors guarantee:

- every partition of every existing topic that some member subscribes to goes to exactly
  one member that subscribes to that topic; nothing else is assigned;
- determinism: the result depends on the values only, not on the order of either mapping
  (members are taken in member id order, topics in name order);
- stability: assigning again with the result as ``current`` returns the result.

Racks (``MemberSpec.rack``) are accepted and ignored, as Kafka 4.0's builders ignore them:
neither UniformHomogeneousAssignmentBuilder, UniformHeterogeneousAssignmentBuilder nor
RangeAssignor reads a rack. Pure: no I/O, no clock, no state between calls.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable, Mapping

#: topic -> partitions, one member's share
MemberAssignment = dict[str, frozenset[int]]
#: member id -> its share
GroupAssignment = dict[str, MemberAssignment]


@dataclass(frozen=True)
class MemberSpec:
    """One member of a consumer group as an assignor sees it.

    ``subscribed_topics`` are topic names (the coordinator resolves a regex subscription to
    names before calling). ``current`` is topic -> partitions assigned to the member now;
    give the member's current target assignment, as Kafka does. Kafka never hands an
    assignor the partitions a member still owns while it is revoking them: the state
    machine (Kafka's CurrentAssignmentBuilder) handles that by holding a partition back
    from its new owner until the old one has released it. A static member that rejoins
    under a new member id should be given the departed member id's target assignment here
    (TargetAssignmentBuilder does so by group.instance.id).

    ``current`` may be stale: partitions of topics the member no longer subscribes to, of
    topics that are gone, beyond a topic's partition count, or claimed by several members
    are all tolerated (see ``_claims``).
    """

    member_id: str
    subscribed_topics: frozenset[str]
    current: Mapping[str, frozenset[int]] = field(default_factory=dict)
    rack: str | None = None  # accepted for KIP-848's MemberSubscription; ignored
    instance_id: str | None = None  # group.instance.id of a static member


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[str, int]], GroupAssignment]


# -- shared preparation ----------------------------------------------------------------------

def _java_key(s: str) -> bytes:
    """Orders strings as Java's String.compareTo (UTF-16 code units), as Kafka sorts ids."""
    return s.encode("utf-16-be", "surrogatepass")


def _subscribed(spec: MemberSpec, topics: Mapping[str, int]) -> frozenset[str]:
    """The member's subscribed topics that exist and have partitions to assign."""
    return frozenset(t for t in spec.subscribed_topics if topics.get(t, 0) > 0)


def _claims(order: list[str], members: Mapping[str, MemberSpec], subs: Mapping[str, frozenset[str]],
            topics: Mapping[str, int]) -> dict[str, list[tuple[str, int]]]:
    """Each member's usable part of ``current``, sorted by (topic, partition).

    A claim is usable when the member still subscribes to the topic, the topic exists and
    the partition is below its count. Kafka's input is a target assignment, where no
    partition has two owners; ours may be stale, so a partition claimed by several members
    counts for the first of them in member id order only (an arbitrary but fixed choice).
    """
    taken: set[tuple[str, int]] = set()
    claims: dict[str, list[tuple[str, int]]] = {}
    for member_id in order:
        mine: list[tuple[str, int]] = []
        current = members[member_id].current
        for topic in sorted(current, key=_java_key):
            if topic not in subs[member_id]:
                continue
            for partition in sorted(current[topic]):
                tp = (topic, partition)
                if 0 <= partition < topics[topic] and tp not in taken:
                    taken.add(tp)
                    mine.append(tp)
        claims[member_id] = mine
    return claims


def _result(order: Iterable[str],
            owned: Mapping[str, Iterable[tuple[str, int]]]) -> GroupAssignment:
    """member -> [(topic, partition)] as the public shape, members and topics sorted."""
    out: GroupAssignment = {}
    for member_id in order:
        by_topic: dict[str, set[int]] = {}
        for topic, partition in owned.get(member_id, ()):
            by_topic.setdefault(topic, set()).add(partition)
        out[member_id] = {t: frozenset(by_topic[t]) for t in sorted(by_topic, key=_java_key)}
    return out


def format_assignment(assignment: Mapping[str, Mapping[str, Iterable[int]]]) -> dict[str, str]:
    """A compact, sorted view for logs and docstrings: ``{'m1': 't0-0 t0-1 t1-2', ...}``."""
    return {member_id: " ".join(f"{t}-{p}" for t in sorted(parts, key=_java_key)
                                for p in sorted(parts[t]))
            for member_id, parts in sorted(assignment.items())}


# -- uniform ---------------------------------------------------------------------------------

def uniform(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> GroupAssignment:
    """Kafka's UniformAssignor ("uniform", the default): balance first, then stickiness.

    When every member subscribes to the same existing topics, the homogeneous rules apply
    (Kafka's UniformHomogeneousAssignmentBuilder, once OptimizedUniformAssignmentBuilder):
    with P partitions over N members, every member's quota is P // N and P % N members get
    one more, so counts differ by at most one. Each member keeps its current partitions up
    to its quota (lowest topic/partition first); the partitions left over, in
    topic/partition order, fill the members below quota in member id order. The extra
    slots go to the members currently holding the most (Kafka hands them out in hash map
    order), which keeps the most partitions where they are.

    Otherwise the heterogeneous rules apply (UniformHeterogeneousAssignmentBuilder, once
    GeneralUniformAssignmentBuilder):

    1. every member keeps all its current partitions of topics it still subscribes to;
    2. unowned partitions are dealt topic by topic (most partitions per subscriber first,
       then fewer subscribers, then name), each to the subscriber with the fewest
       partitions in total (ties: member id);
    3. balancing: for each topic with two or more subscribers (same order), while the most
       loaded member owning one of its partitions has at least two more partitions in total
       than its least loaded subscriber, the former's highest partition of the topic moves
       to the latter; repeat over all topics until a full pass moves nothing.

    Every move lowers the sum of squared counts, so step 3 ends; Kafka also stops after 16
    passes, which we do not, so that the result is a fixed point (stability). At the end, a
    member holding a partition of a topic that another member subscribes to has at most
    one partition more than that member; in particular members with identical
    subscriptions differ by at most one. Overlapping subscriptions can still leave the
    whole group uneven (Kafka's javadoc: 9/10/11), and that is accepted.

    ``instance_id`` and ``rack`` are not used (give a static member its predecessor's
    ``current`` instead).

    Worked example: three members, two topics of three partitions; then m4 joins, and only
    the partitions that the quota of two takes off m1..m3 move, to m4.

    >>> topics = {"t0": 3, "t1": 3}
    >>> subs = frozenset(topics)
    >>> first = uniform({m: MemberSpec(m, subs) for m in ("m1", "m2", "m3")}, topics)
    >>> format_assignment(first)
    {'m1': 't0-0 t0-1', 'm2': 't0-2 t1-0', 'm3': 't1-1 t1-2'}
    >>> joined = {m: MemberSpec(m, subs, first.get(m, {})) for m in ("m1", "m2", "m3", "m4")}
    >>> format_assignment(uniform(joined, topics))
    {'m1': 't0-0 t0-1', 'm2': 't0-2 t1-0', 'm3': 't1-1', 'm4': 't1-2'}

    Heterogeneous: m1 subscribes to t0 (4 partitions), m2 to t0 and t1 (2 partitions).
    t0 has 2 partitions per subscriber, t1 has 2 per subscriber but one subscriber, so t1
    goes first, to m2; t0 then evens the totals out.

    >>> format_assignment(uniform({"m1": MemberSpec("m1", frozenset({"t0"})),
    ...                            "m2": MemberSpec("m2", frozenset({"t0", "t1"}))},
    ...                           {"t0": 4, "t1": 2}))
    {'m1': 't0-0 t0-1 t0-2', 'm2': 't0-3 t1-0 t1-1'}
    """
    order = sorted(members, key=_java_key)
    subs = {m: _subscribed(members[m], topics) for m in order}
    if not any(subs.values()):
        return _result(order, {})
    claims = _claims(order, members, subs, topics)
    if len(set(subs.values())) == 1:
        owned = _uniform_homogeneous(order, subs[order[0]], topics, claims)
    else:
        owned = _uniform_heterogeneous(order, subs, topics, claims)
    return _result(order, owned)


def _uniform_homogeneous(order: list[str], subscribed: frozenset[str], topics: Mapping[str, int],
                         claims: dict[str, list[tuple[str, int]]]
                         ) -> dict[str, list[tuple[str, int]]]:
    """Every member subscribes to ``subscribed``: quotas, keep up to quota, fill the rest."""
    all_partitions = [(t, p) for t in sorted(subscribed, key=_java_key) for p in range(topics[t])]
    min_quota, extra = divmod(len(all_partitions), len(order))
    # Who gets the P % N extra slots does not change the balance, but it decides how much
    # is kept: giving them to the biggest holders keeps sum(min(held, quota)) largest.
    by_holding = sorted(order, key=lambda m: (-len(claims[m]), _java_key(m)))
    quota = {m: min_quota + (1 if i < extra else 0) for i, m in enumerate(by_holding)}

    owned = {m: claims[m][:quota[m]] for m in order}
    kept = {tp for m in order for tp in owned[m]}
    unassigned = iter([tp for tp in all_partitions if tp not in kept])
    for member_id in order:
        # Consecutive takes from a sorted list: a member's new partitions are contiguous.
        missing = quota[member_id] - len(owned[member_id])
        owned[member_id].extend(next(unassigned) for _ in range(missing))
    return owned


def _uniform_heterogeneous(order: list[str], subs: Mapping[str, frozenset[str]],
                           topics: Mapping[str, int], claims: dict[str, list[tuple[str, int]]]
                           ) -> dict[str, list[tuple[str, int]]]:
    """Keep every valid claim, deal the rest to the least loaded, then even out per topic."""
    index = {m: i for i, m in enumerate(order)}  # member id order, the tie-breaker
    subscribers: dict[str, list[str]] = {}
    for member_id in order:
        for topic in subs[member_id]:
            subscribers.setdefault(topic, []).append(member_id)

    # owner[topic][partition]: member id or None while unassigned
    owner: dict[str, list[str | None]] = {t: [None] * topics[t] for t in subscribers}
    load = dict.fromkeys(order, 0)
    for member_id in order:
        for topic, partition in claims[member_id]:
            owner[topic][partition] = member_id
            load[member_id] += 1

    # Topics with the most partitions per subscriber are the hardest to spread, so they go
    # first, while every subscriber still has room; then fewer subscribers, then the name.
    topic_order = sorted(subscribers, key=lambda t: (-Fraction(topics[t], len(subscribers[t])),
                                                     len(subscribers[t]), _java_key(t)))

    for topic in topic_order:
        heap = [(load[m], index[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        owners = owner[topic]
        for partition, current_owner in enumerate(owners):
            if current_owner is not None:
                continue
            _, _, member_id = heapq.heappop(heap)
            owners[partition] = member_id
            load[member_id] += 1
            heapq.heappush(heap, (load[member_id], index[member_id], member_id))

    movable = [t for t in topic_order if len(subscribers[t]) >= 2]
    while any([_balance_topic(subscribers[t], owner[t], load, index) for t in movable]):
        pass  # a list, not a generator: every topic gets its turn in each pass

    owned: dict[str, list[tuple[str, int]]] = {m: [] for m in order}
    for topic in sorted(owner, key=_java_key):
        for partition, holder in enumerate(owner[topic]):
            assert holder is not None, (topic, partition)
            owned[holder].append((topic, partition))
    return owned


def _balance_topic(subscribers: list[str], owners: list[str | None], load: dict[str, int],
                   index: Mapping[str, int]) -> bool:
    """Moves one topic's partitions from its most to its least loaded subscribers.

    Loads are whole-member totals, as in Kafka: the topic is used to even out the members,
    not to spread itself. Returns whether anything moved.
    """
    mine: dict[str, list[int]] = {m: [] for m in subscribers}
    for partition, member_id in enumerate(owners):
        assert member_id is not None
        mine[member_id].append(partition)  # ascending, so pop() gives up the highest
    moved = False
    while True:
        receiver = min(subscribers, key=lambda m: (load[m], index[m]))
        donor = max((m for m in subscribers if mine[m]), key=lambda m: (load[m], index[m]))
        if load[donor] - load[receiver] <= 1:
            return moved
        partition = mine[donor].pop()
        owners[partition] = receiver
        mine[receiver].append(partition)  # order within a list only matters for pop()
        mine[receiver].sort()
        load[donor] -= 1
        load[receiver] += 1
        moved = True


# -- range -----------------------------------------------------------------------------------

def _range_order_key(member_id: str, instance_id: str | None) -> tuple:
    """Static members first by group.instance.id, then dynamic ones by member id (Kafka)."""
    if instance_id is not None:
        return (0, _java_key(instance_id), _java_key(member_id))
    return (1, _java_key(member_id))


def range_assign(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> GroupAssignment:
    """Kafka's server-side RangeAssignor ("range"), as in Kafka 3.9 and 4.0.

    Members are ordered static first (by instance id), then dynamic (by member id). For each
    topic, its P partitions are split over its S subscribers in that order into contiguous
    ranges: the first P % S get P // S + 1 partitions, the others P // S. When members share
    subscriptions and topics have equal partition counts, each member gets the same
    partition numbers of every topic (co-partitioning, for joins).

    ``current`` is ignored. Kafka 3.7 and 3.8 kept current owners' partitions up to the
    quota and filled the gaps, which lost contiguity and co-partitioning; KAFKA-16944
    (3.9) went back to recomputing the ranges every time. The stickiness range has comes
    from static members: their ranges follow their instance ids, whatever their member ids
    after a restart. A dynamic member joining or leaving shifts the ranges of the members
    after it. Ranges are not balanced across topics (the first members collect the extras
    of every topic); use "uniform" for that. ``rack`` is ignored.

    Worked example (RangeAssignor's javadoc): M0 and M1 subscribe to T1 and T2, three
    partitions each.

    >>> subs = frozenset({"T1", "T2"})
    >>> members = {m: MemberSpec(m, subs) for m in ("M0", "M1")}
    >>> format_assignment(range_assign(members, {"T1": 3, "T2": 3}))
    {'M0': 'T1-0 T1-1 T2-0 T2-1', 'M1': 'T1-2 T2-2'}

    After a rolling bounce the member ids change (M0 -> M3, M1 -> M2) and the ranges swap
    owners, unless the members are static: then instance ids I0 and I1 decide.

    >>> bounced = {m: MemberSpec(m, subs, instance_id=i) for m, i in (("M3", "I0"), ("M2", "I1"))}
    >>> format_assignment(range_assign(bounced, {"T1": 3, "T2": 3}))
    {'M2': 'T1-2 T2-2', 'M3': 'T1-0 T1-1 T2-0 T2-1'}
    """
    member_ids = sorted(members, key=_java_key)
    order = sorted(members, key=lambda m: _range_order_key(m, members[m].instance_id))
    subs = {m: _subscribed(members[m], topics) for m in order}
    owned: dict[str, list[tuple[str, int]]] = {m: [] for m in order}
    for topic in sorted(set[str]().union(*subs.values()), key=_java_key):
        subscribers = [m for m in order if topic in subs[m]]
        per_member, extra = divmod(topics[topic], len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            end = start + per_member + (1 if i < extra else 0)
            owned[member_id].extend((topic, p) for p in range(start, end))
            start = end
    return _result(member_ids, owned)


#: Kafka's names, as sent in ConsumerGroupHeartbeat's ServerAssignor and
#: group.consumer.assignors; the first is the default.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_assign}
DEFAULT_ASSIGNOR = "uniform"
