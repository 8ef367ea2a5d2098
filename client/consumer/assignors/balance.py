"""The balance-then-stickiness solver behind "sticky" and "cooperative-sticky".

Owns: which previous owner a partition counts for (``resolve_owners``) and the assignment
that is as balanced as possible and, among the most balanced ones, keeps as many partitions
with their previous owners as possible (``balanced_sticky_assignment``). The assignors
decide where the previous assignment comes from (user data or subscription fields) and
what to do with the result (the cooperative rule); this module only solves.

What "balanced" and "sticky" mean here, exactly
-----------------------------------------------
Every partition that has at least one subscriber is assigned to exactly one subscriber.
Among all such assignments the solver returns one that

1. minimises the sum over members of (number of partitions)**2. With identical
   subscriptions this means the counts differ by at most one; in general it also means no
   single partition can move to another subscriber with two or more fewer partitions, and
   no chain of moves can make the counts more even; then
2. maximises the number of partitions that stay with their previous owner (the one
   ``resolve_owners`` picks: highest generation, a tie counts for nobody).

Both optima are exact, not heuristic. A consequence worth naming: if some most-balanced
assignment keeps every previously owned partition, the result keeps them all (so after a
member leaves a group with identical subscriptions, every survivor keeps everything).

How
---
Topics with the same set of subscribers are interchangeable for balance, so the solver
works on "classes" (one per distinct subscriber set) and on counts x[k][m]: how many
partitions of class k member m gets. That is a min-cost flow with convex costs:
class -> member arcs cost 0 for each of the first o[k][m] units (m's own partitions) and 1
after; member -> sink costs W*(2c+1) for the (c+1)-th unit (so a member's total is W*c**2),
with W > (number of partitions)/2 so that balance always outweighs stickiness. A greedy
start (keep everything owned, hand out the rest to the least loaded, move single units
from the most to the least loaded) is then made optimal by cancelling negative cycles
(Bellman-Ford) until none is left, which is the optimality condition for such flows.
Finally the counts become partitions: each member keeps min(x, o) of its own partitions
of each class and the rest of the class is dealt, in (topic, partition) order, each to the
member with the fewest partitions so far that still has room.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Mapping, Sequence

from client.consumer.assignors.base import TopicPartition, java_string_key, tp_sort_key

Claims = Mapping[str, "tuple[int, Iterable[TopicPartition]]"]


def resolve_owners(subscriptions: Mapping[str, Iterable[str]],
                   partitions_per_topic: Mapping[str, int],
                   claims: Claims) -> dict[TopicPartition, str]:
    """Which member counts as a partition's previous owner.

    A claim (member -> (generation, partitions)) counts only if the member is in the group,
    still subscribes to the topic and the partition still exists. When several members
    claim one partition, the highest generation wins; if two or more claim it in that same
    highest generation, nobody owns it (Java's sticky assignors invalidate such claims).

    >>> resolve_owners({"a": ["t"], "b": ["t"]}, {"t": 2},
    ...                {"a": (3, [TopicPartition("t", 0)]),
    ...                 "b": (4, [TopicPartition("t", 0), TopicPartition("t", 1)])})
    {TopicPartition(topic='t', partition=0): 'b', TopicPartition(topic='t', partition=1): 'b'}
    """
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for member_id in sorted(claims, key=java_string_key):
        if member_id not in subscriptions:
            continue
        generation, owned = claims[member_id]
        topics = set(subscriptions[member_id])
        for raw in set(owned):
            tp = TopicPartition(raw[0], raw[1])
            size = partitions_per_topic.get(tp.topic, 0)
            if tp.topic not in topics or not 0 <= tp.partition < size:
                continue
            current = best.get(tp)
            if current is None or generation > current[0]:
                best[tp] = (generation, [member_id])
            elif generation == current[0]:
                current[1].append(member_id)
    return {tp: ms[0] for tp, (_, ms) in sorted(best.items(), key=lambda e: tp_sort_key(e[0]))
            if len(ms) == 1}


def balanced_sticky_assignment(subscriptions: Mapping[str, Iterable[str]],
                               partitions_per_topic: Mapping[str, int],
                               claims: Claims,
                               member_order: Sequence[str]) -> dict[str, list[TopicPartition]]:
    """The most balanced assignment that keeps the most previous owners (module docstring).

    ``subscriptions`` maps every member to its topics, ``claims`` maps members to
    (generation, owned partitions) and ``member_order`` lists every member once; it breaks
    ties (earlier members are served first). The result has every member, lists sorted.

    Worked example (StickyAssignor's javadoc, example 2): c0 subscribes to t0, c1 to t0 and
    t1, c2 to t0, t1 and t2, with 1, 2 and 3 partitions. c2 alone can take t2 and c0 can
    only take t0-0, so the one assignment with the smallest sum of squares (1 + 4 + 9) is
    c0: t0-0, c1: t1-0 t1-1, c2: the three t2 partitions. When c0 leaves, c1 and c2 keep
    everything and t0-0 goes to c1 (3 + 3 rather than 2 + 4).

    >>> from client.consumer.assignors.base import format_assignment
    >>> subs = {"c0": ["t0"], "c1": ["t0", "t1"], "c2": ["t0", "t1", "t2"]}
    >>> sizes = {"t0": 1, "t1": 2, "t2": 3}
    >>> first = balanced_sticky_assignment(subs, sizes, {}, ["c0", "c1", "c2"])
    >>> format_assignment(first)
    {'c0': 't0-0', 'c1': 't1-0 t1-1', 'c2': 't2-0 t2-1 t2-2'}
    >>> del subs["c0"]
    >>> claims = {m: (1, first[m]) for m in subs}
    >>> format_assignment(balanced_sticky_assignment(subs, sizes, claims, ["c1", "c2"]))
    {'c1': 't0-0 t1-0 t1-1', 'c2': 't2-0 t2-1 t2-2'}
    """
    solver = _Solver(subscriptions, partitions_per_topic, claims, member_order)
    solver.place_unowned()
    solver.move_single_units()
    solver.cancel_negative_cycles()
    return solver.materialize()


class _Solver:
    """The state of one solve: classes, counts x[k][i], totals c[i] (i = member index)."""

    def __init__(self, subscriptions, partitions_per_topic, claims, member_order):
        self.members: list[str] = list(member_order)
        rank = {m: i for i, m in enumerate(self.members)}
        topics_of = {m: set(subscriptions.get(m, ())) for m in self.members}
        subscribers: dict[str, tuple[int, ...]] = {}
        for topic, count in partitions_per_topic.items():
            subs = tuple(rank[m] for m in self.members if topic in topics_of[m])
            if count > 0 and subs:
                subscribers[topic] = subs
        by_subs: dict[tuple[int, ...], list[str]] = {}
        for topic in sorted(subscribers, key=java_string_key):
            by_subs.setdefault(subscribers[topic], []).append(topic)
        # classes with fewer subscribers first: they have the fewest choices
        ordered = sorted(by_subs.items(), key=lambda e: (len(e[0]), java_string_key(e[1][0])))
        self.subs: list[tuple[int, ...]] = [s for s, _ in ordered]
        self.parts: list[list[TopicPartition]] = [
            [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]
            for _, topics in ordered]
        class_of_topic = {t: k for k, (_, topics) in enumerate(ordered) for t in topics}
        owners = resolve_owners({m: topics_of[m] for m in self.members},
                                partitions_per_topic, claims)
        self.owned: list[dict[int, list[TopicPartition]]] = [{} for _ in self.subs]
        for tp, member_id in owners.items():  # sorted by tp_sort_key
            self.owned[class_of_topic[tp.topic]].setdefault(rank[member_id], []).append(tp)
        self.o: list[dict[int, int]] = [{i: len(tps) for i, tps in owned.items()}
                                        for owned in self.owned]
        self.x: list[dict[int, int]] = [{i: o.get(i, 0) for i in subs}
                                        for subs, o in zip(self.subs, self.o)]
        self.c: list[int] = [0] * len(self.members)
        for x in self.x:
            for i, n in x.items():
                self.c[i] += n
        total = sum(len(parts) for parts in self.parts)
        self.weight = total + 1  # balance (steps of 2*W) outweighs any stickiness (<= total)

    # -- greedy start -------------------------------------------------------------------

    def place_unowned(self) -> None:
        """Give each class's unowned units, one at a time, to its least loaded subscriber."""
        for k, subs in enumerate(self.subs):
            free = len(self.parts[k]) - sum(self.o[k].values())
            heap = [(self.c[i], i) for i in subs]
            heapq.heapify(heap)
            for _ in range(free):
                _, i = heapq.heappop(heap)
                self.x[k][i] += 1
                self.c[i] += 1
                heapq.heappush(heap, (self.c[i], i))

    def move_single_units(self) -> None:
        """Move units within a class from its most to its least loaded subscriber.

        Only moves that take two counts at least two apart closer count, so the sum of
        squares falls with each and the loop ends. Cheap ties first: a donor giving away a
        partition it did not own, a receiver getting back one it did.
        """
        changed = True
        while changed:
            changed = False
            for k, subs in enumerate(self.subs):
                x, o = self.x[k], self.o[k]
                while True:
                    donors = [i for i in subs if x[i] > 0]
                    if not donors:
                        break
                    a = max(donors, key=lambda i: (self.c[i], x[i] > o.get(i, 0), i))
                    b = min(subs, key=lambda i: (self.c[i], x[i] >= o.get(i, 0), i))
                    if self.c[a] - self.c[b] < 2:
                        break
                    x[a] -= 1
                    x[b] += 1
                    self.c[a] -= 1
                    self.c[b] += 1
                    changed = True

    # -- exact optimisation -------------------------------------------------------------

    def _residual_arcs(self) -> list[tuple[int, int, int, tuple]]:
        """Arcs (from, to, marginal cost of one unit, change) of the residual graph.

        Nodes: class k is k, member i is K + i, the sink is K + M.
        """
        n_classes = len(self.subs)
        sink = n_classes + len(self.members)
        w = self.weight
        arcs: list[tuple[int, int, int, tuple]] = []
        for k, subs in enumerate(self.subs):
            x, o = self.x[k], self.o[k]
            for i in subs:
                own = o.get(i, 0)
                arcs.append((k, n_classes + i, 0 if x[i] < own else 1, ("x", k, i, 1)))
                if x[i] > 0:
                    arcs.append((n_classes + i, k, -1 if x[i] > own else 0, ("x", k, i, -1)))
        for i, c in enumerate(self.c):
            arcs.append((n_classes + i, sink, w * (2 * c + 1), ("c", i, 1)))
            if c > 0:
                arcs.append((sink, n_classes + i, -w * (2 * c - 1), ("c", i, -1)))
        return arcs

    def _negative_cycle(self, arcs) -> list[int] | None:
        """Bellman-Ford from a virtual source; a cycle of the parent graph if one appears.

        Every cycle in the parent graph of a label-correcting run is negative; the cost is
        rechecked before use anyway.
        """
        n = len(self.subs) + len(self.members) + 1
        dist = [0] * n
        parent = [-1] * n
        # A negative cycle shows up in the parent graph within about n rounds in practice;
        # the generous limit only turns a bug into an error instead of a hang.
        for _ in range(n * n + 2 * n + 10):
            relaxed = False
            for idx, (u, v, cost, _) in enumerate(arcs):
                if dist[u] + cost < dist[v]:
                    dist[v] = dist[u] + cost
                    parent[v] = idx
                    relaxed = True
            if not relaxed:
                return None
            cycle = self._parent_cycle(arcs, parent)
            if cycle is not None and sum(arcs[idx][2] for idx in cycle) < 0:
                return cycle
        raise AssertionError("Bellman-Ford kept relaxing without a negative cycle")

    @staticmethod
    def _parent_cycle(arcs, parent) -> list[int] | None:
        state = [0] * len(parent)  # 0 unseen, 1 on the current walk, 2 done
        for start in range(len(parent)):
            walk = []
            node = start
            while node != -1 and state[node] == 0:
                state[node] = 1
                walk.append(node)
                node = arcs[parent[node]][0] if parent[node] != -1 else -1
            if node != -1 and state[node] == 1:
                cycle, at = [], node
                while True:
                    idx = parent[at]
                    cycle.append(idx)
                    at = arcs[idx][0]
                    if at == node:
                        return cycle
            for visited in walk:
                state[visited] = 2
        return None

    def cancel_negative_cycles(self) -> None:
        """Push one unit round negative cycles until none is left: then the flow is optimal.

        Each push lowers the integer cost, so this ends. One unit at a time keeps every
        arc's marginal cost exact (a simple cycle uses each class-member pair and each
        member-sink pair at most once).
        """
        while True:
            arcs = self._residual_arcs()
            cycle = self._negative_cycle(arcs)
            if cycle is None:
                return
            for idx in cycle:
                change = arcs[idx][3]
                if change[0] == "x":
                    _, k, i, delta = change
                    self.x[k][i] += delta
                else:
                    _, i, delta = change
                    self.c[i] += delta

    # -- counts to partitions -----------------------------------------------------------

    def materialize(self) -> dict[str, list[TopicPartition]]:
        result: list[list[TopicPartition]] = [[] for _ in self.members]
        room: list[dict[int, int]] = []
        leftovers: list[list[TopicPartition]] = []
        for k, subs in enumerate(self.subs):
            kept_here: set[TopicPartition] = set()
            slots = {}
            for i in subs:
                keep = self.owned[k].get(i, [])[: self.x[k][i]]
                result[i].extend(keep)
                kept_here.update(keep)
                slots[i] = self.x[k][i] - len(keep)
            room.append(slots)
            leftovers.append([tp for tp in self.parts[k] if tp not in kept_here])
        load = [len(tps) for tps in result]
        for k, subs in enumerate(self.subs):
            slots = room[k]
            for tp in leftovers[k]:
                i = min((i for i in subs if slots[i] > 0), key=lambda i: (load[i], i))
                result[i].append(tp)
                slots[i] -= 1
                load[i] += 1
        return {m: sorted(result[i], key=tp_sort_key) for i, m in enumerate(self.members)}

