"""DescribeTopicPartitions (KIP-966) from the committed image, page by page, as Kafka's
DescribeTopicPartitionsRequestHandler answers: name order, the partition limit, the cursor,
unknown and invalid topics, and the requests Kafka refuses."""

from __future__ import annotations

import uuid

from broker.controller.election import NO_LEADER
from protocol import messages as m
from protocol.errors import ErrorCode as E
from tests.broker.handlers.fakes import FakeBroker, call, register, topic

A, B, C = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def broker() -> FakeBroker:
    """b has 3 partitions, a 2 (the second leaderless: its last leader, replica 2, is
    fenced, and replica 1 is an eligible leader replica out of the empty ISR), c 1."""
    return FakeBroker([*register(0), *register(1), *register(2, fenced=True),
                       *topic("b", B, [[0, 1], [1, 0], [0, 1]]),
                       *topic("a", A, [[0, 1], [2, 1]], leaders=[0, NO_LEADER], epochs=[4, 7],
                              isr=[[0, 1], []], elr=[[], [1]], last_known_elr=[[], [2]]),
                       *topic("c", C, [[1]])])


async def page(b: FakeBroker, names: list[str], limit: int, cursor: tuple | None = None):
    body = await call(b, m.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": n} for n in names], "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0],
                                               "partition_index": cursor[1]}})
    nxt = body["next_cursor"]
    return ([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
             for t in body["topics"]],
            None if nxt is None else (nxt["topic_name"], nxt["partition_index"]))


async def test_every_topic_in_name_order_within_the_limit():
    b = broker()
    assert await page(b, [], 2000) == ([("a", E.NONE, [0, 1]), ("b", E.NONE, [0, 1, 2]),
                                        ("c", E.NONE, [0])], None)
    # a page that ends inside a topic points at its next partition ...
    assert await page(b, [], 4) == ([("a", E.NONE, [0, 1]), ("b", E.NONE, [0, 1])], ("b", 2))
    # ... and one that ends with a topic points at the start of the next one
    assert await page(b, [], 2) == ([("a", E.NONE, [0, 1])], ("b", 0))
    assert await page(b, [], 4, ("b", 2)) == ([("b", E.NONE, [2]), ("c", E.NONE, [0])], None)
    # a limit below one is one (Kafka's max(min(server limit, limit), 1))
    assert await page(b, [], 0) == ([("a", E.NONE, [0])], ("a", 1))
    assert await page(b, [], -5, ("c", 0)) == ([("c", E.NONE, [0])], None)


async def test_a_partition_reads_like_metadatas_but_a_missing_leader_is_no_error():
    body = await call(broker(), m.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "a"}], "response_partition_limit": 10})
    [t] = body["topics"]
    assert (t["name"], t["topic_id"], t["is_internal"], t["error_code"]) == ("a", A, False, 0)
    assert [(p["error_code"], p["partition_index"], p["leader_id"], p["leader_epoch"],
             p["replica_nodes"], p["isr_nodes"], p["eligible_leader_replicas"],
             p["last_known_elr"], p["offline_replicas"]) for p in t["partitions"]] == [
        (E.NONE, 0, 0, 4, [0, 1], [0, 1], [], [], []),
        (E.NONE, 1, NO_LEADER, 7, [2, 1], [], [1], [2], [2])]


async def test_named_topics_unknown_and_invalid_ones_and_the_cursor_among_them():
    b = broker()
    assert await page(b, ["c", "zz", "a", "a", "bad/name"], 10) == ([
        ("a", E.NONE, [0, 1]), ("bad/name", E.INVALID_TOPIC_EXCEPTION, []),
        ("c", E.NONE, [0]), ("zz", E.UNKNOWN_TOPIC_OR_PARTITION, [])], None)
    # topics before the cursor's are not described again
    assert await page(b, ["c", "a", "b"], 10, ("b", 1)) == (
        [("b", E.NONE, [1, 2]), ("c", E.NONE, [0])], None)
    # a full page points at the next topic even when that one is unknown
    assert await page(b, ["a", "zz"], 2) == ([("a", E.NONE, [0, 1])], ("zz", 0))


async def test_a_cursor_outside_the_topics_named_or_below_zero_is_an_invalid_request():
    b = broker()
    assert await page(b, ["a", "c"], 10, ("b", 0)) == (
        [("a", E.INVALID_REQUEST, []), ("c", E.INVALID_REQUEST, [])], None)
    assert await page(b, ["a"], 10, ("a", -1)) == ([("a", E.INVALID_REQUEST, [])], None)
    assert await page(b, [], 10, ("a", -1)) == ([], None)
