"""The chaos harness's DockerTarget (bench/chaos/docker_target.py) cuts one broker off with
iptables in the containers' network namespaces, and heals it: `make cluster` from nothing,
an RF 3 topic with every replica in every ISR, then partition([[0, 1]]) isolates node 2.
The majority's own Metadata (asked of node 0's port) drops node 2, fenced by the
controller once its heartbeats stop (broker.session.timeout.ms, 9 s), from its broker list
and from every ISR, and still takes acks=all writes; meanwhile the host reaches every node's
published port, node 2's included (the rules name only the peers' addresses, not the bridge
gateway's). heal_network() brings node 2 back into every ISR.

Marked `docker`: it needs a Docker engine, docker-compose, nsenter and iptables, and it
fails rather than skips without them. It uses the fixed host ports and project name of
docker-compose.yml, so it takes down a cluster a developer left running, and removes the
volumes at the end (VOLUMES=1). About 45 s once the image exists.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

from bench.chaos.docker_target import DockerTarget
from harness.raw import call
from protocol.messages import METADATA
from tests.cluster.confluent import create_topic
from tests.util import WaitTimeout, unique, wait_until

pytestmark = pytest.mark.docker

PARTITIONS = 3
ISOLATED = 2


def _metadata(target: DockerTarget, node: int, topic: str) -> Any:
    """`node`'s own Metadata (brokers and the topic), through its published port."""
    return call(target.client_port(node), METADATA, 12, {
        "topics": [{"topic_id": None, "name": topic}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        timeout_s=2.0)


def _view(target: DockerTarget, node: int, topic: str) -> tuple[list[int], dict[int, list[int]]]:
    """(the live brokers, partition -> ISR) as `node` answers them."""
    md = _metadata(target, node, topic)
    isrs = {p.partition_index: sorted(p.isr_nodes)
            for t in md.topics if t.name == topic and t.error_code == 0 for p in t.partitions}
    return sorted(b.node_id for b in md.brokers), isrs


def _every_isr(target: DockerTarget, topic: str, *, has_isolated: bool) -> bool:
    _, isrs = _view(target, 0, topic)
    return len(isrs) == PARTITIONS and all(
        (ISOLATED in isr) == has_isolated and {0, 1} <= set(isr) for isr in isrs.values())


def _wait_isr(target: DockerTarget, topic: str, *, has_isolated: bool, timeout_s: float,
              what: str) -> None:
    """Wait until node 0 shows node 2 in (or out of) every ISR; on timeout, say what every
    node answers."""
    try:
        wait_until(lambda: _every_isr(target, topic, has_isolated=has_isolated),
                   timeout_s=timeout_s, interval_s=0.2, message=what,
                   ignore_exceptions=(OSError,))
    except WaitTimeout as e:
        views: dict[int, object] = {}
        for node in target.node_ids:
            try:
                views[node] = _view(target, node, topic)
            except OSError as err:
                views[node] = str(err)
        raise WaitTimeout(f"{e}\n(live brokers, ISRs) by node: {views}") from e


def _acks_all(bootstrap: str, topic: str, count: int = 100) -> list[str]:
    """`count` idempotent acks=all sends; the delivery errors (none when all were acked)."""
    errors: list[str] = []
    acked: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 20000})
    for i in range(count):
        p.produce(topic, value=str(i), on_delivery=lambda err, _msg: (
            errors.append(str(err)) if err is not None else acked.append(1)))
        p.poll(0)
    assert p.flush(30) == 0, "sends still in flight after 30 s"
    assert len(acked) + len(errors) == count
    return errors


def test_a_partitioned_node_leaves_the_isr_and_comes_back_when_healed():
    target = DockerTarget()
    try:
        target.start()
        topic = unique("chaos-docker")
        create_topic(target.bootstrap, topic, PARTITIONS, 3,
                     config={"min.insync.replicas": "2"})
        _wait_isr(target, topic, has_isolated=True, timeout_s=30,
                  what="every replica in every ISR")

        target.partition([[0, 1]])  # node 2 in no group: cut from both
        # fenced once broker.session.timeout.ms (9 s) passes without a heartbeat: 7-13 s
        _wait_isr(target, topic, has_isolated=False, timeout_s=45,
                  what=f"node {ISOLATED} out of every ISR, as node 0 answers")
        assert ISOLATED not in _view(target, 0, topic)[0], "fenced: not a live broker"
        for node in target.node_ids:  # the host still reaches node 2 too: it answers
            live, _ = _view(target, node, topic)
            assert {0, 1} <= set(live), (node, live)
        assert target.is_running(ISOLATED)
        majority = ",".join(f"127.0.0.1:{target.client_port(n)}" for n in (0, 1))
        assert _acks_all(majority, topic) == []

        target.heal_network()
        _wait_isr(target, topic, has_isolated=True, timeout_s=30,
                  what=f"node {ISOLATED} back in every ISR after healing")
        assert _acks_all(target.bootstrap, topic) == []
    finally:
        target.destroy()
