"""The "roundrobin" assignor: every subscribed partition dealt over the sorted members.

Owns: RoundRobinAssignor, the same dealing as Java's RoundRobinAssignor and librdkafka's
rdkafka_roundrobin_assignor.c.
"""

from __future__ import annotations

from client.consumer.assignors.base import (
    EAGER, Assignor, MemberSubscription, TopicPartition, empty_assignment,
    sorted_member_ids, sorted_topics,
)


class RoundRobinAssignor(Assignor):
    name = "roundrobin"
    supported_protocols = (EAGER,)

    def assign(self, members: dict[str, MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TopicPartition]]:
        """Deal all partitions, sorted by topic then number, round-robin over the members.

        Members are sorted as range sorts them (``member_sort_key``). A cursor walks the
        members in a circle; for each partition it skips members not subscribed to the
        partition's topic, gives the partition to the first subscribed one and moves past
        it. With identical subscriptions the counts differ by at most one; with differing
        subscriptions the skipping can leave the result unbalanced.

        Worked example (RoundRobinAssignor's javadoc): c0 subscribes to t0, c1 to t0 and
        t1, c2 to t0, t1 and t2, with 1, 2 and 3 partitions. t0-0 goes to c0; t1-0 skips
        nobody and goes to c1; t1-1 goes to c2; every t2 partition skips c0 and c1.

        >>> from client.consumer.assignors.base import format_assignment
        >>> members = {"c0": MemberSubscription("c0", ["t0"]),
        ...            "c1": MemberSubscription("c1", ["t0", "t1"]),
        ...            "c2": MemberSubscription("c2", ["t0", "t1", "t2"])}
        >>> format_assignment(RoundRobinAssignor().assign(members, {"t0": 1, "t1": 2, "t2": 3}))
        {'c0': 't0-0', 'c1': 't1-0', 'c2': 't1-1 t2-0 t2-1 t2-2'}
        """
        result = empty_assignment(members)
        order = sorted_member_ids(members)
        topics_of = {m: set(members[m].topics) for m in order}
        all_topics = sorted_topics(t for m in order for t in topics_of[m])
        cursor = 0
        for topic in all_topics:
            for p in range(max(partitions_per_topic.get(topic, 0), 0)):
                # some member subscribes to ``topic``, so this stops within len(order) steps
                while topic not in topics_of[order[cursor]]:
                    cursor = (cursor + 1) % len(order)
                result[order[cursor]].append(TopicPartition(topic, p))
                cursor = (cursor + 1) % len(order)
        return result
