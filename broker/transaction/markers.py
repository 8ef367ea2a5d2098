"""Writing a transaction's end markers to its partitions' leaders.

Owns: `MarkerWriter`, our counterpart of Kafka's TransactionMarkerChannelManager: for one
`WriteTxnMarkers` effect of the transaction coordinator it sends a WriteTxnMarkers request
to the leader of each partition of the transaction, over the inter-broker listener, and
retries what did not succeed until every partition has its marker. The partitions this
broker leads itself are written in process, by the function that serves the request
(broker.handlers.txn_markers.write_markers, handed over by broker.server.Server), so both
paths append and answer alike. A leader answers once the
marker is replicated to its ISR (acks=all), so a marker once acknowledged survives a
leader change.

What is retried, as Kafka does: a partition whose leader is unknown or moved
(NOT_LEADER_OR_FOLLOWER and friends, or no leader in the image: the next metadata change
wakes the retry), a leader that cannot be reached, an ISR too small (NOT_ENOUGH_REPLICAS),
a timeout. What ends a partition's part: success; a topic or partition that no longer
exists (UNKNOWN_TOPIC_OR_PARTITION: its records went with it); INVALID_PRODUCER_EPOCH
(a newer producer epoch already wrote its marker there, so this one is not needed). What
ends the whole write: this broker is no longer the coordinator of the transaction
(`still_coordinator` says no), or a leader says TRANSACTION_COORDINATOR_FENCED (a newer
coordinator has written markers: it owns the transaction now).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import trio

from broker.net.broker_channels import BrokerChannels
from broker.net.peer import PeerUnavailable
from broker.transaction.effects import WriteTxnMarkers
from broker.transaction.state import TopicPartition, TransactionResult
from protocol import messages as m
from protocol.errors import ErrorCode

log = logging.getLogger("minibroker.transaction")

WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms for the marker channel
REQUEST_TIMEOUT_S = 30.0

_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   ErrorCode.INVALID_PRODUCER_EPOCH})


def marker_request(effect: WriteTxnMarkers, partitions: list[TopicPartition]) -> dict:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return {"markers": [{
        "producer_id": effect.producer_id, "producer_epoch": effect.producer_epoch,
        "transaction_result": effect.result == TransactionResult.COMMIT,
        "topics": [{"name": t, "partition_indexes": ids} for t, ids in by_topic.items()],
        "coordinator_epoch": effect.coordinator_epoch}]}


LocalWriter = Callable[[Any, Any], Awaitable[dict]]  # (broker, request markers) -> response


class MarkerWriter:
    def __init__(self, broker, channels: BrokerChannels,
                 local: Callable[[], LocalWriter | None] = lambda: None):
        self.broker = broker
        self._channels = channels
        self._local = local  # the in-process writer, when the wiring has given one

    async def write(self, effect: WriteTxnMarkers,
                    still_coordinator: Callable[[], bool]) -> bool:
        """Write the effect's markers everywhere; True once every partition has its marker,
        False if this broker stopped being the transaction's coordinator first."""
        remaining = set(effect.partitions)
        while remaining:
            if not still_coordinator():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            leaderless = False
            for tp in sorted(remaining):
                leader = self.broker.metadata_cache.leader(*tp)
                if leader < 0:
                    if self.broker.metadata_cache.topic(tp[0]) is None:
                        remaining.discard(tp)  # deleted with its records
                    else:
                        leaderless = True
                    continue
                by_leader.setdefault(leader, []).append(tp)
            fenced = False

            async def send(leader: int, tps: list[TopicPartition]) -> None:
                nonlocal fenced
                done = await self._send(leader, effect, tps)
                if ErrorCode.TRANSACTION_COORDINATOR_FENCED in done.values():
                    fenced = True
                remaining.difference_update(tp for tp, e in done.items() if e in _DONE)

            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(send, leader, tps)
            if fenced:
                log.info("markers of %r: a newer coordinator wrote them", effect.transactional_id)
                return False
            if remaining:
                # a metadata change (new leader) or the backoff, whichever is first
                seen = self.broker.metadata_cache.offset
                await self.broker.wait_for_metadata(
                    lambda cache, seen=seen: cache.offset != seen,
                    RETRY_BACKOFF_S if not leaderless else 1.0)
        return True

    async def _send(self, leader: int, effect: WriteTxnMarkers,
                    tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        body = m.request_body(m.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                              marker_request(effect, tps))
        local = self._local() if leader == self.broker.node_id else None
        if local is not None:
            # this broker leads them: append here, without a round trip through its own
            # listener (the marker is on the path of the producer's next transaction)
            response = await local(self.broker, body.markers)
        else:
            channel = self._channels.get(leader)
            if channel is None:
                return {}
            try:
                response = await channel.request(m.WRITE_TXN_MARKERS,
                                                 WRITE_TXN_MARKERS_VERSION, body,
                                                 REQUEST_TIMEOUT_S)
            except PeerUnavailable as e:
                log.debug("markers of %r to node %d: %s", effect.transactional_id, leader, e)
                return {}
        out: dict[TopicPartition, ErrorCode] = {}
        for marker in response["markers"]:
            for topic in marker["topics"]:
                for p in topic["partitions"]:
                    error = ErrorCode(p["error_code"])
                    out[(topic["name"], p["partition_index"])] = error
                    if error not in _DONE:
                        log.debug("marker of %r on %s-%d: %s", effect.transactional_id,
                                  topic["name"], p["partition_index"], error.name)
        return out
