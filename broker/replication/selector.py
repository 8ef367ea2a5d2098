"""Which replica a consumer should read from (KIP-392, Kafka's RackAwareReplicaSelector).

Owns `RACK_AWARE_SELECTOR` (the replica.selector.class value that turns it on) and
`preferred_read_replica`, a pure choice: the leader answers a consumer's Fetch (v11+, which
carries the consumer's `client.rack` as rack_id) with the broker to fetch from instead.

The rule: if the leader is in the consumer's rack, the leader serves it (no preference);
otherwise, among the in-sync replicas in that rack whose log already reaches the fetch
offset (so the consumer does not land on OFFSET_OUT_OF_RANGE), the one with the highest
LEO. None found: the leader serves it.
"""

from __future__ import annotations

from dataclasses import dataclass

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
NO_PREFERENCE = -1


@dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    in_sync: bool


def preferred_read_replica(client_rack: str | None, leader: ReplicaView,
                           followers: list[ReplicaView], fetch_offset: int) -> int:
    if not client_rack or leader.rack == client_rack:
        return NO_PREFERENCE
    near = [r for r in followers
            if r.rack == client_rack and r.in_sync and r.log_end_offset >= fetch_offset]
    if not near:
        return NO_PREFERENCE
    return max(near, key=lambda r: (r.log_end_offset, -r.broker_id)).broker_id
