"""The "sticky" assignor (eager protocol) and Java's sticky user data layout.

Owns: StickyAssignor and the codec for Java's STICKY_ASSIGNOR_USER_DATA_V0/V1 (docs/PROTOCOL.md
§5), which is also what librdkafka's cooperative-sticky members send as user data:

    V0: previous_assignment  int32 count of (topic STRING, partitions int32 count of int32)
    V1: V0, then generation  int32

STRING is an int16 length and UTF-8 bytes. An eager member revokes everything before it
joins, so the previous assignment and its generation travel in these bytes, and the leader
reads them from here only (as Java's StickyAssignor does).
"""

from __future__ import annotations

import struct

from client.consumer.assignors.balance import balanced_sticky_assignment
from client.consumer.assignors.base import (
    DEFAULT_GENERATION, EAGER, Assignor, MemberSubscription, TopicPartition,
    sorted_member_ids, sorted_topics,
)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class UserDataError(ValueError):
    """Bytes that are not a sticky user data payload."""


def encode_sticky_user_data(owned: list[TopicPartition], generation: int | None) -> bytes:
    """Java STICKY_ASSIGNOR_USER_DATA_V1 (V0 when ``generation`` is None).

    Topics are written sorted and each topic's partitions ascending (Java writes them in
    hash-map order; readers do not care).
    """
    by_topic: dict[str, list[int]] = {}
    for tp in owned:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [_INT32.pack(len(by_topic))]
    for topic in sorted_topics(by_topic):
        name = topic.encode("utf-8")
        partitions = sorted(set(by_topic[topic]))
        out.append(_INT16.pack(len(name)) + name)
        out.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    if generation is not None:
        out.append(_INT32.pack(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation) from V1 bytes, or generation -1 from V0 bytes.

    Like Java, V1 is tried first and extra trailing bytes are ignored; fewer than four
    bytes after the assignment read as V0. Counts and lengths are checked against the bytes
    left before anything is allocated. Raises UserDataError for anything else.
    """
    view = memoryview(data)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(view):
            raise UserDataError(f"sticky user data: need {n} bytes at offset {pos}, "
                                f"have {len(view) - pos}")
        chunk = view[pos:pos + n]
        pos += n
        return chunk

    (topic_count,) = _INT32.unpack(take(4))
    if topic_count < 0 or topic_count * 6 > len(view) - pos:
        raise UserDataError(f"sticky user data: bad topic count {topic_count}")
    owned: list[TopicPartition] = []
    for _ in range(topic_count):
        (name_len,) = _INT16.unpack(take(2))
        try:
            topic = bytes(take(name_len)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserDataError(f"sticky user data: topic is not UTF-8: {exc}") from None
        (count,) = _INT32.unpack(take(4))
        if count < 0:
            raise UserDataError(f"sticky user data: bad partition count {count}")
        partitions = struct.unpack(f">{count}i", take(4 * count))
        owned.extend(TopicPartition(topic, p) for p in partitions)
    if len(view) - pos >= 4:
        (generation,) = _INT32.unpack(take(4))
    else:
        generation = DEFAULT_GENERATION
    return owned, generation


def claims_from_user_data(user_data: bytes | None) -> tuple[int, list[TopicPartition]]:
    """(generation, previous assignment) for the solver; nothing for empty or bad bytes."""
    if not user_data:
        return DEFAULT_GENERATION, []
    try:
        owned, generation = decode_sticky_user_data(user_data)
    except UserDataError:
        return DEFAULT_GENERATION, []
    return generation, owned


class StickyAssignor(Assignor):
    """Java's StickyAssignor: balanced first, then as little movement as possible."""

    name = "sticky"
    supported_protocols = (EAGER,)

    def subscription_user_data(self, topics, owned: list[TopicPartition],
                               generation: int) -> bytes | None:
        """STICKY_ASSIGNOR_USER_DATA_V1 of the last assignment and its generation.

        Pass the assignment this member last received (the eager protocol has revoked it
        by the time of the JoinGroup, but it is still this member's previous assignment).
        Before the member has been in any generation, and owns nothing, this is None, as
        Java sends null before its first assignment.
        """
        if generation < 0 and not owned:
            return None
        return encode_sticky_user_data(list(owned), generation)

    def assign(self, members: dict[str, MemberSubscription],
               partitions_per_topic: dict[str, int]) -> dict[str, list[TopicPartition]]:
        """Most balanced assignment; among those, the one that moves the fewest partitions.

        Each member's previous assignment and generation come from its user data (V1 or
        V0, see the module docstring); when two members claim one partition the higher
        generation wins, and a tie in the highest generation counts for nobody. Balanced
        means the smallest sum of squared counts (with identical subscriptions: counts
        within one); sticky means the most partitions kept by their previous owner among
        the most balanced assignments. See ``balance.py`` for the exact statement.

        Worked example (StickyAssignor's javadoc, example 1): c0, c1 and c2 subscribe to
        t0..t3, two partitions each. The first assignment is 3/3/2. When c1 leaves, its
        three partitions are dealt to whoever has fewer, and c0 and c2 keep all of theirs
        (4/4).

        >>> from client.consumer.assignors.base import format_assignment
        >>> topics = ["t0", "t1", "t2", "t3"]
        >>> sizes = dict.fromkeys(topics, 2)
        >>> members = {m: MemberSubscription(m, topics) for m in ("c0", "c1", "c2")}
        >>> first = StickyAssignor().assign(members, sizes)
        >>> format_assignment(first)
        {'c0': 't0-0 t1-1 t3-0', 'c1': 't0-1 t2-0 t3-1', 'c2': 't1-0 t2-1'}
        >>> again = {m: MemberSubscription(m, topics, user_data=StickyAssignor()
        ...              .subscription_user_data(topics, first[m], 1)) for m in ("c0", "c2")}
        >>> format_assignment(StickyAssignor().assign(again, sizes))
        {'c0': 't0-0 t1-1 t2-0 t3-0', 'c2': 't0-1 t1-0 t2-1 t3-1'}
        """
        order = sorted_member_ids(members)
        claims = {m: claims_from_user_data(members[m].user_data) for m in order}
        return balanced_sticky_assignment({m: members[m].topics for m in order},
                                          partitions_per_topic, claims, order)
