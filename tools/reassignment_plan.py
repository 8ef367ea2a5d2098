"""The replica assignment `minibroker reassign-partitions --generate` proposes: pure, from
the current assignment of the topics to move, the brokers of --broker-list and their racks.

The rule (Kafka's tool proposes a fresh assignment and so moves nearly every replica; this
one moves as few as it can while spreading them evenly):

1. Replica counts. The R replicas of the partitions to move are spread so that each broker
   of the list holds R // n or R // n + 1 of them (n brokers); the brokers holding most
   now keep the R % n larger shares. A replica on a broker outside the list always moves;
   a broker over its share gives up the excess, and every other replica stays where it is.
   So the number of replicas moved is the least that reaches an even spread.
2. Which replicas move off a broker over its share: first one whose rack repeats in its
   partition, then one it is not the preferred leader of, then in partition order.
3. Where each freed place goes: a broker of the list not already in the partition and
   under its share, preferring one whose rack the partition does not have yet (when every
   broker has a rack), then the one furthest below its share, then the lowest id; if no
   broker under its share can take it, the least loaded one that can.
4. Preferred leaders (the first replica; reordering a partition's replicas copies no data):
   each broker leads at most ceil(P / n) of the P partitions. A partition keeps its first
   replica while that broker is under the cap; the others are led by whichever of their
   replicas leads fewest so far; then a broker leading two more than one of its followers
   hands it a leadership, until none does.

A partition keeps its replication factor; one with more replicas than the list has brokers
is refused (PlanError), as Kafka's tool refuses it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=tuple)  # a partition: TopicPartition, or (topic, index)


class PlanError(ValueError):
    """The brokers cannot hold the partitions (a replication factor above their count)."""


def _shares(counts: Counter, brokers: Sequence[int], total: int) -> dict[int, int]:
    """Each broker's share of `total` replicas: the busiest keep the larger ones."""
    base, extra = divmod(total, len(brokers))
    busiest = sorted(brokers, key=lambda b: (-counts[b], b))
    return {b: base + (1 if i < extra else 0) for i, b in enumerate(busiest)}


def propose(current: Mapping[K, Sequence[int]], brokers: Sequence[int],
            racks: Mapping[int, str | None] | None = None) -> dict[K, list[int]]:
    """The proposed replicas of every partition of `current` (see the module docstring)."""
    brokers = sorted(set(brokers))
    if not brokers:
        raise PlanError("--broker-list names no broker")
    racks = dict(racks or {})
    rack_aware = all(racks.get(b) is not None for b in brokers)
    order = sorted(current)  # partition order: every tie is broken the same way
    for key in order:
        if len(current[key]) > len(brokers):
            raise PlanError(f"{key} has {len(current[key])} replicas, more than the "
                            f"{len(brokers)} brokers of --broker-list")
    listed = set(brokers)
    kept: dict[K, list[int]] = {k: [b for b in current[k] if b in listed] for k in order}
    counts = Counter(b for k in order for b in kept[k])
    shares = _shares(counts, brokers, sum(len(current[k]) for k in order))

    def rack_taken(replicas: list[int], broker: int) -> bool:
        return rack_aware and racks.get(broker) in {racks.get(b) for b in replicas}

    for key in order:  # rule 3 for the places of replicas off the list
        replicas = kept[key]
        while len(replicas) < len(current[key]):
            free = [b for b in brokers if b not in replicas]
            best = min(free, key=lambda b: (counts[b] >= shares[b], rack_taken(replicas, b),
                                            counts[b] - shares[b], b))
            replicas.append(best)
            counts[best] += 1

    while True:  # rules 2 and 3: one replica at a time from over its share to under it
        over = sorted((b for b in brokers if counts[b] > shares[b]),
                      key=lambda b: (shares[b] - counts[b], b))
        under = sorted((b for b in brokers if counts[b] < shares[b]),
                       key=lambda b: (counts[b] - shares[b], b))
        move = next(((src, dst, key) for src in over for dst in under
                     for key in _movable(kept, order, current, src, dst, rack_taken)), None)
        if move is None:
            break
        src, dst, key = move
        kept[key][kept[key].index(src)] = dst
        counts[src] -= 1
        counts[dst] += 1
    return _balance_leaders(current, kept, brokers)


def _movable(kept, order, current, src: int, dst: int, rack_taken) -> list:
    """The partitions a replica may move from `src` to `dst` by, best first (rule 2): one
    whose rack repeats on `src`, then one `dst` adds no repeated rack to, then one `src` is
    not the preferred leader of, in partition order."""
    def key(k):
        others = [b for b in kept[k] if b != src]
        return (not rack_taken(others, src), rack_taken(others, dst),
                current[k][:1] == [src])
    found = [k for k in order if src in kept[k] and dst not in kept[k]]
    return sorted(found, key=key)[:1]


def _balance_leaders(current: Mapping[K, Sequence[int]], proposed: dict[K, list[int]],
                     brokers: Sequence[int]) -> dict[K, list[int]]:
    """Rule 4: at most ceil(P / n) preferred leaderships a broker."""
    cap = -(-len(proposed) // len(brokers))
    leads: Counter = Counter()
    undecided = []
    for key, replicas in proposed.items():
        first = current[key][0] if current[key] else None
        if first in replicas and leads[first] < cap:
            _lead(replicas, first, leads)
        else:
            undecided.append(key)
    for key in undecided:
        replicas = proposed[key]
        _lead(replicas, min(replicas, key=lambda b: (leads[b], replicas.index(b))), leads)
    # then hand a leadership from a broker leading two more than one of its followers
    # (each hand-over lowers the sum of squared counts, so this ends)
    while True:
        handover = next(((key, b) for b in sorted(brokers, key=lambda b: (leads[b], b))
                         for key, replicas in proposed.items()
                         if b in replicas[1:] and leads[replicas[0]] > leads[b] + 1), None)
        if handover is None:
            return proposed
        key, broker = handover
        leads[proposed[key][0]] -= 1
        _lead(proposed[key], broker, leads)


def _lead(replicas: list[int], broker: int, leads: Counter) -> None:
    leads[broker] += 1
    replicas.remove(broker)
    replicas.insert(0, broker)
