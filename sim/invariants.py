"""What the nodes' own state must never show, checked while a simulated run goes on and
at its end. The clients' view (lost writes, duplicates, order, offsets going backwards) is
the chaos checkers' (harness.chaos.checker); these look inside the nodes, which only a
simulation can do at every step.

Owns `Invariants`: `observe()` (every OBSERVE_S of simulated time) and `at_end()`, each
adding to `violations` (checker name -> examples):

    hw-regression         a leader's high watermark going down within one leader epoch
    two-leaders           two nodes leading one partition in the same leader epoch
    raft-two-leaders      two quorum leaders in the same Raft epoch
    raft-committed-changed  an entry of a metadata log below that node's Raft high
                          watermark (committed) that differs from, or is missing where,
                          the entry first seen committed at that offset (state machine
                          safety: a committed entry never changes nor goes away)
    replicas-diverge      at the end: a replica's records below the leader's HW differing
                          from the leader's (offset, then bytes of each batch)
    raft-log-diverges     at the end: two nodes' metadata logs differing below the
                          quorum's high watermark
    not-whole             at the end: a partition without a leader, or whose ISR lacks a
                          live replica, once the healing time has passed

The leaders judged are every node's replica that believes it leads, serving clients or
not (a fenced node, a restarted one not yet unfenced). A restarted node's replicas take
no leadership before it has registered again and applied its metadata past that
registration (broker.broker's first publish), so it never leads at its previous
incarnation's leader epochs, with the HW of its checkpoint, beside the leaders elected
meanwhile.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from protocol.records import iter_batch_headers
from sim.world import World

OBSERVE_S = 0.05
MAX_EXAMPLES = 5


class Invariants:
    def __init__(self, world: World) -> None:
        self.world = world
        self.violations: dict[str, list[Any]] = defaultdict(list)
        self._hw: dict[tuple[int, str, int, int], int] = {}
        self._leaders: dict[tuple[str, int, int], int] = {}
        self._raft: dict[int, int] = {}
        # offset -> (epoch, record) of every metadata entry seen committed
        self._committed: dict[int, tuple[int, bytes]] = {}
        self._checked_to: dict[int, int] = {}  # node -> committed offsets checked below
        self._nodes_seen: dict[int, Any] = {}  # node -> the RaftNode looked at last
        self._watched: set[Any] = set()  # the QuorumRuntimes whose commits call us

    def _violate(self, name: str, example: Any) -> None:
        found = self.violations[name]
        if len(found) < MAX_EXAMPLES:
            found.append(example)
        elif len(found) == MAX_EXAMPLES:
            found.append("...")

    def observe(self) -> None:
        for node in self.world.running():
            broker = node.broker
            if broker is None:
                continue
            runtime = broker.runtime
            if runtime is not None:
                self._watch_commits(node.node_id, runtime)
                self._raft_committed(node.node_id, runtime.node)
            if runtime is not None and runtime.node.is_leader:
                epoch = runtime.node.epoch
                other = self._raft.setdefault(epoch, node.node_id)
                if other != node.node_id:
                    self._violate("raft-two-leaders", {"epoch": epoch,
                                                       "leaders": [other, node.node_id]})
            for (topic, index), p in list(broker.partitions.items()):
                if not p.is_leader:
                    continue
                epoch = p.leader_epoch
                key = (topic, index, epoch)
                other = self._leaders.setdefault(key, node.node_id)
                if other != node.node_id:
                    self._violate("two-leaders", {"partition": f"{topic}-{index}",
                                                  "leader_epoch": epoch,
                                                  "leaders": [other, node.node_id]})
                hw_key = (node.node_id, topic, index, epoch)
                hw = p.high_watermark
                before = self._hw.get(hw_key, -1)
                if hw < before:
                    self._violate("hw-regression", {"node": node.node_id,
                                                    "partition": f"{topic}-{index}",
                                                    "leader_epoch": epoch, "from": before,
                                                    "to": hw})
                self._hw[hw_key] = hw

    def _watch_commits(self, node_id: int, runtime: Any) -> None:
        """Also look at the node's metadata log each time it applies a commit: an entry a
        leader commits and loses with its process a few milliseconds later (kill -9, a
        power loss) was committed all the same, and 50 ms between looks would miss it."""
        if runtime not in self._watched:
            self._watched.add(runtime)
            runtime.listeners.append(
                lambda _offset, _records, _image: self._raft_committed(node_id, runtime.node))

    def _raft_committed(self, node_id: int, raft: Any) -> None:
        """The entries this node holds committed since the last look, against those seen
        committed before; a restarted node's log (a new RaftNode) is looked at whole."""
        log, hw = raft.log, raft.high_watermark
        start = max(self._checked_to.get(node_id, 0), log.start_offset)
        if raft is not self._nodes_seen.get(node_id):
            self._nodes_seen[node_id] = raft
            start = log.start_offset
        for offset in range(start, min(hw, log.end_offset)):
            entry = log.entries[offset - log.start_offset]
            seen = self._committed.setdefault(offset, (entry.epoch, entry.record))
            if seen != (entry.epoch, entry.record):
                self._violate("raft-committed-changed", {"node": node_id, "offset": offset,
                                                          "epoch": entry.epoch,
                                                          "first_seen_epoch": seen[0]})
                break
        self._checked_to[node_id] = max(start, min(hw, log.end_offset))

    def at_end(self) -> None:
        """After healing: replicas agree below the HW, the metadata logs agree below the
        quorum's HW, and every partition is led with a full ISR."""
        running = self.world.running()
        brokers = {n.node_id: n.broker for n in running if n.broker is not None}
        for node_id, broker in brokers.items():
            for (topic, index), p in broker.partitions.items():
                if not p.is_leader:
                    continue
                for follower in p.state.replicas:
                    other = brokers.get(follower)
                    if follower == node_id or other is None:
                        continue
                    fp = other.partitions.get((topic, index))
                    if fp is None:
                        continue
                    # what both hold below the HW the follower has reached
                    start = max(p.log.log_start_offset, fp.log.log_start_offset)
                    below = min(p.high_watermark, fp.log.log_end_offset)
                    if batches_below(p, start, below) != batches_below(fp, start, below):
                        self._violate("replicas-diverge", {
                            "partition": f"{topic}-{index}", "leader": node_id,
                            "follower": follower, "hw": p.high_watermark})
                live = set(brokers)
                missing = (set(p.state.replicas) & live) - set(p.isr)
                if missing:
                    self._violate("not-whole", {"partition": f"{topic}-{index}",
                                                "isr": list(p.isr), "missing": sorted(missing)})
        self._raft_logs(brokers)

    def _raft_logs(self, brokers: dict[int, Any]) -> None:
        entries: dict[int, dict[int, tuple[int, bytes]]] = {}
        hw = None
        for node_id, broker in brokers.items():
            runtime = broker.runtime
            if runtime is None:
                continue
            log = runtime.node.log
            entries[node_id] = {e.offset: (e.epoch, e.record) for e in log.entries}
            if runtime.node.is_leader:
                hw = runtime.node.high_watermark
        if hw is None:
            return
        reference: dict[int, tuple[int, bytes]] = {}
        for node_id, es in sorted(entries.items()):
            for offset, entry in es.items():
                if offset >= hw:
                    continue
                if reference.setdefault(offset, entry) != entry:
                    self._violate("raft-log-diverges", {"node": node_id, "offset": offset,
                                                        "hw": hw})
                    break


def batches_below(p: Any, start: int, below: int) -> list[tuple[int, bytes]]:
    """The partition's batches from `start` whose records all lie below `below`, as
    (base offset, bytes)."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while offset < below:
        chunk = p.log.read(offset, 1 << 20, max_offset=below)
        if not chunk:
            break
        for position, header in iter_batch_headers(chunk):
            out.append((header.base_offset,
                        bytes(chunk[position:position + header.size])))
            offset = header.base_offset + header.last_offset_delta + 1
    return out
