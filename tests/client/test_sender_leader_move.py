"""The idempotent sender keeps a partition's batches in order on the wire: when the
partition's leader moves while a batch is in flight (the next waits for its answer), and
when two requests to one node wait for the same first connection (they leave in drain
order).

Found by `minibroker chaos` (seeds 1 and 6): a later batch reached a leader that knew no
sequence of the producer, which took it at offset 0; the earlier one, refused there as
out of order, was written after it under a new epoch: the producer's records out of send
order. The sender here runs against fakes of the connection pool and the metadata.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from client.config import ProducerConfig
from client.errors import for_code
from client.producer.accumulator import RecordAccumulator
from client.producer.sender import DeliveryHandle, Sender
from client.types import TopicPartition
from protocol.errors import ErrorCode

TP = TopicPartition("t", 0)


class Metadata:
    def __init__(self, leader: int) -> None:
        self.leader = leader

    def leader_for(self, topic: str, partition: int) -> int:
        return self.leader

    def node(self, node_id: int) -> object:
        return object()


class Cluster:
    def __init__(self, leader: int) -> None:
        self.metadata = Metadata(leader)

    def request_update(self) -> None:
        pass

    def note_error(self, code: Any) -> None:
        pass


class Node:
    """A broker that records each Produce and answers when the test says."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.produced: list[int] = []  # base sequences, in arrival order
        self.answers: list[tuple[trio.Event, dict]] = []

    async def request(self, api_key: int, body: dict, expect_response: bool = True) -> Any:
        records = body["topic_data"][0]["partition_data"][0]["records"]
        self.produced.append(int.from_bytes(records[53:57], "big"))  # baseSequence
        done, answer = trio.Event(), {}
        self.answers.append((done, answer))
        await done.wait()
        if "raise" in answer:
            raise answer["raise"]
        part = SimpleNamespace(index=0, error_code=answer["error_code"],
                               base_offset=answer.get("base_offset", -1), get=lambda k, d: d)
        return SimpleNamespace(body=SimpleNamespace(responses=[
            SimpleNamespace(name="t", partition_responses=[part])]))


class Pool:
    def __init__(self, nodes: dict[int, Node]) -> None:
        self.nodes = nodes

    async def get(self, node: int) -> Node:
        return self.nodes[node]


async def test_a_batch_waits_while_an_earlier_one_is_in_flight_to_the_old_leader():
    config = ProducerConfig(bootstrap_servers="x:1", enable_idempotence=True,
                            retry_backoff_ms=1)
    acc = RecordAccumulator(linger_ms=0, retry_backoff_ms=1)
    acc.reset_producer(7, 0)
    nodes = {1: Node(1), 2: Node(2)}
    cluster = Cluster(leader=1)
    now = [0.0]
    sender = Sender(config, Pool(nodes), cluster, acc, clock_ms=lambda: now[0])

    async with trio.open_nursery() as nursery:
        acc.append(TP, 0, None, b"first", [], DeliveryHandle("t", 0), now[0])
        sender._send_ready(nursery, now[0])
        await trio.testing.wait_all_tasks_blocked()
        assert nodes[1].produced == [0]  # the first batch is out to node 1

        cluster.metadata.leader = 2  # the leadership moves while it is out
        acc.append(TP, 0, None, b"second", [], DeliveryHandle("t", 0), now[0])
        now[0] += 10
        sender._send_ready(nursery, now[0])
        await trio.testing.wait_all_tasks_blocked()
        assert nodes[2].produced == []  # the second waits for the first's answer

        done, answer = nodes[1].answers[0]
        answer["raise"] = for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
        done.set()
        await trio.testing.wait_all_tasks_blocked()
        now[0] += 10
        sender._send_ready(nursery, now[0])  # the first again, now to node 2
        await trio.testing.wait_all_tasks_blocked()
        assert nodes[2].produced == [0]
        nodes[2].answers[0][1].update(error_code=0, base_offset=0)
        nodes[2].answers[0][0].set()
        await trio.testing.wait_all_tasks_blocked()
        now[0] += 10
        sender._send_ready(nursery, now[0])  # and only then the second
        await trio.testing.wait_all_tasks_blocked()
        assert nodes[2].produced == [0, 1]
        nodes[2].answers[1][1].update(error_code=0, base_offset=1)
        nodes[2].answers[1][0].set()


class LastInFirstOutPool(Pool):
    """A first connection that wakes its waiters in the reverse order of their arrival:
    two tasks waiting on a node's first connect may wake in either order."""

    def __init__(self, nodes: dict[int, Node]) -> None:
        super().__init__(nodes)
        self.waiting: list[trio.Event] = []

    async def get(self, node: int) -> Node:
        ready = trio.Event()
        self.waiting.append(ready)
        await ready.wait()
        return self.nodes[node]

    def connect(self) -> None:
        for ready in reversed(self.waiting):
            ready.set()


async def test_requests_to_a_node_leave_in_the_order_they_were_drained():
    # which of two new tasks runs first is up to trio; twenty rounds make the unordered
    # case all but certain to show
    for _ in range(20):
        config = ProducerConfig(bootstrap_servers="x:1", enable_idempotence=True)
        acc = RecordAccumulator(linger_ms=0)
        acc.reset_producer(7, 0)
        nodes = {1: Node(1)}
        pool = LastInFirstOutPool(nodes)
        sender = Sender(config, pool, Cluster(leader=1), acc, clock_ms=lambda: 0.0)
        async with trio.open_nursery() as nursery:
            acc.append(TP, 0, None, b"first", [], DeliveryHandle("t", 0), 0.0)
            sender._send_ready(nursery, 0.0)
            acc.append(TP, 0, None, b"second", [], DeliveryHandle("t", 0), 0.0)
            sender._send_ready(nursery, 0.0)
            await trio.testing.wait_all_tasks_blocked()
            pool.connect()
            await trio.testing.wait_all_tasks_blocked()
            assert nodes[1].produced == [0, 1]  # sequence 0's request first
            for i, (done, answer) in enumerate(nodes[1].answers):
                answer.update(error_code=0, base_offset=i)
                done.set()
