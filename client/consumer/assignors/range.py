"""The "range" assignor: contiguous ranges of each topic, topic by topic.

Owns: RangeAssignor, the same arithmetic as Java's RangeAssignor and librdkafka's
rdkafka_range_assignor.c (without the rack-aware variant of KIP-881, which needs partition
replica racks that this interface does not carry; member rack ids are ignored).
"""

from __future__ import annotations

from client.consumer.assignors.base import (
    EAGER, Assignor, MemberSubscription, TopicPartition, empty_assignment,
    sorted_member_ids, sorted_topics,
)


class RangeAssignor(Assignor):
    name = "range"
    supported_protocols = (EAGER,)

    def assign(self, members: dict[str, MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TopicPartition]]:
        """Per topic, split its partitions into contiguous ranges over its subscribers.

        For each topic with metadata, the members subscribed to it are sorted (static
        members by group.instance.id first, then the rest by member id: see
        ``member_sort_key``). With P partitions and N subscribers, n = P // N and
        m = P % N: the first m subscribers get n + 1 partitions, the others n, in partition
        order. Topics are independent, so the first members collect the extras of every
        topic, which is why range can be unbalanced across topics.

        Worked example (RangeAssignor's javadoc): c0 and c1 both subscribe to t0 and t1, 3
        partitions each. Per topic n = 1, m = 1, so c0 gets p0-p1 and c1 gets p2 of each
        topic.

        >>> from client.consumer.assignors.base import format_assignment
        >>> members = {m: MemberSubscription(m, ["t0", "t1"]) for m in ("c0", "c1")}
        >>> format_assignment(RangeAssignor().assign(members, {"t0": 3, "t1": 3}))
        {'c0': 't0-0 t0-1 t1-0 t1-1', 'c1': 't0-2 t1-2'}
        """
        result = empty_assignment(members)
        order = sorted_member_ids(members)
        subscribers: dict[str, list[str]] = {}
        for member_id in order:
            for topic in sorted_topics(members[member_id].topics):
                subscribers.setdefault(topic, []).append(member_id)
        for topic in sorted_topics(subscribers):
            count = max(partitions_per_topic.get(topic, 0), 0)
            consumers = subscribers[topic]
            if count == 0:
                continue
            per_member, extra = divmod(count, len(consumers))
            start = 0
            for i, member_id in enumerate(consumers):
                length = per_member + (1 if i < extra else 0)
                result[member_id].extend(TopicPartition(topic, p)
                                         for p in range(start, start + length))
                start += length
        return result
