"""The replica assignment `minibroker reassign-partitions --generate` proposes: pure, from
the current assignment of the topics to move, the brokers of --broker-list and their racks.

The rule (Kafka's tool proposes a fresh assignment and so moves nearly every replica; this
one moves as few as it can while spreading them evenly):

1. Replica counts. The R replicas of the partitions to move are spread so that each broker
   of the list holds R // n or R // n + 1 of them (n brokers); the brokers holding most
   now keep the R % n larger shares. A replica on a broker outside the list always moves;
   a broker over its share gives up the excess, and every other replica stays where it is.
   So the number of replicas moved is the least that reaches an even spread.
2. Which replicas move off a broker over its share: first from a partition that has given
   up fewest places so far (so that the places freed can all be filled), then one whose
   rack repeats in its partition, then one it is not the preferred leader of, then in
   partition order.
3. Where each freed place goes: a matching of the places to the room under the brokers'
   shares (augmenting paths: a place taken early is moved aside when another broker can
   take it and a later place needs its broker), each to a broker not already in the
   partition, preferring one whose rack the partition does not have yet (when every broker
   has a rack), then the one with most room, then the lowest id; a place the matching
   cannot fill goes to the least loaded broker that can take it.
4. Preferred leaders (the first replica; reordering a partition's replicas copies no data):
   each broker leads at most ceil(P / n) of the P partitions. A partition keeps its first
   replica while that broker is under the cap; the others are led by whichever of their
   replicas leads fewest so far; then a broker over the cap, or leading two more than one
   it can reach, passes a leadership along a chain of replicas (an augmenting path) to
   it, until none does.

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

    # rule 2: each broker over its share gives up its excess
    index = {k: i for i, k in enumerate(order)}
    under = [b for b in brokers if counts[b] < shares[b]]
    for src in brokers:
        while counts[src] > shares[src]:
            key = min((k for k in order if src in kept[k]), key=lambda k: (
                len(current[k]) - len(kept[k]),
                all(b in kept[k] for b in under),  # nowhere for the place to go
                not rack_taken([b for b in kept[k] if b != src], src),
                current[k][:1] == [src], index[k]))
            kept[key].remove(src)
            counts[src] -= 1
    # rule 3: the freed places (off the list, or given up) to brokers under their share
    slots = [key for key in order for _ in range(len(current[key]) - len(kept[key]))]
    room = {b: shares[b] - counts[b] for b in brokers}
    placed = _place(slots, kept, room, brokers, rack_taken)
    for key, broker in placed:
        kept[key].append(broker)
        counts[broker] += 1
    while True:  # what the matching could not place evenly: one replica at a time
        over = sorted((b for b in brokers if counts[b] > shares[b]),
                      key=lambda b: (shares[b] - counts[b], b))
        spare = sorted((b for b in brokers if counts[b] < shares[b]),
                       key=lambda b: (counts[b] - shares[b], b))
        move = next(((src, dst, key) for src in over for dst in spare
                     for key in _movable(kept, order, current, src, dst, rack_taken)), None)
        if move is None:
            break
        src, dst, key = move
        kept[key][kept[key].index(src)] = dst
        counts[src] -= 1
        counts[dst] += 1
    return _balance_leaders(current, kept, brokers)


def _place(slots: list[K], kept: dict[K, list[int]], room: dict[int, int],
           brokers: Sequence[int], rack_taken) -> list[tuple[K, int]]:
    """Rule 3 as a matching of the free places to the brokers' room (augmenting paths, so
    that an early place taking a broker a later one needed is moved aside when another
    broker can take it): each place gets a broker not yet in its partition, preferring one
    whose rack the partition lacks, then the one with most room, then the lowest id. A
    place no matching reaches goes to the least loaded broker that can take it."""
    owner: list[int | None] = [None] * len(slots)

    def taken(i: int) -> set[int]:
        key = slots[i]
        return set(kept[key]) | {b for j, b in enumerate(owner)
                                 if j != i and slots[j] == key and b is not None}

    def candidates(i: int) -> list[int]:
        used = taken(i)
        return sorted((b for b in brokers if b not in used),
                      key=lambda b: (rack_taken(kept[slots[i]], b), -room[b], b))

    def augment(i: int, visited: set[int]) -> bool:
        for b in candidates(i):
            if b in visited:
                continue
            visited.add(b)
            if room[b] > 0:
                owner[i] = b
                room[b] -= 1
                return True
            for j in range(len(slots)):
                if owner[j] == b and j != i:
                    owner[j] = None
                    if augment(j, visited):
                        owner[i] = b
                        return True
                    owner[j] = b
        return False

    for i in range(len(slots)):
        if not augment(i, set()):
            b = min(candidates(i), key=lambda b: (-room[b], b))
            owner[i] = b
            room[b] -= 1
    return [(slots[i], b) for i, b in enumerate(owner) if b is not None]


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
    # then, while a broker leads more than the cap, or two more than another it can reach,
    # move one of its leaderships along a chain of replicas (each partition of the chain
    # led by the next broker of it): an augmenting path, as in a bipartite matching, which
    # finds a way whenever one exists (a hand-over to a direct follower does not). Each
    # shift lowers the sum of squared counts, so this ends.
    while True:
        for start in sorted(brokers, key=lambda b: (-leads[b], b)):
            floor = cap if leads[start] > cap else leads[start] - 1
            if _shift_leadership(proposed, leads, start, floor):
                break
        else:
            return proposed


def _shift_leadership(proposed: dict[K, list[int]], leads: Counter, start: int,
                      floor: int) -> bool:
    """Breadth-first from `start`: a partition led by a broker on the way passes its
    leadership to another of its replicas; at a broker leading fewer than `floor` the chain
    is carried out (every broker on it leads as many as before, `start` one fewer and the
    last one more)."""
    came_from: dict[int, tuple[int, K] | None] = {start: None}
    queue = [start]
    for broker in queue:
        for key, replicas in proposed.items():
            if replicas[0] != broker:
                continue
            for other in replicas[1:]:
                if other in came_from:
                    continue
                came_from[other] = (broker, key)
                if leads[other] < floor:
                    node: int = other
                    while (step := came_from[node]) is not None:
                        previous, k = step
                        leads[previous] -= 1
                        _lead(proposed[k], node, leads)
                        node = previous
                    return True
                queue.append(other)
    return False


def _lead(replicas: list[int], broker: int, leads: Counter) -> None:
    leads[broker] += 1
    replicas.remove(broker)
    replicas.insert(0, broker)
