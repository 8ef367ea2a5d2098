"""A stand-in for the transaction runtime in pure tests: carries out a TransactionCoordinator's
effects as the runtime will (appends replayed in order, replies after them, markers kept to
write later), with a plain integer producer id allocator and every partition led here."""

from __future__ import annotations

import itertools

from broker.coordinator.effects import Reply
from broker.transaction.coordinator import TransactionConfig, TransactionCoordinator
from broker.transaction.effects import Append, WriteTxnMarkers
from broker.transaction.records import TransactionLogValue
from protocol.errors import ErrorCode

COORDINATOR_EPOCH = 7


class Runtime:
    def __init__(self, config: TransactionConfig | None = None, first_producer_id: int = 1000):
        self.config = config or TransactionConfig(num_partitions=3)
        self.ids = itertools.count(first_producer_id)
        self.coordinator = TransactionCoordinator(self.config, lambda: next(self.ids))
        for p in range(self.config.num_partitions):
            self.coordinator.begin_load(p, COORDINATOR_EPOCH)
            assert self.coordinator.finish_load(p) == []
        self.log: list[tuple[str, TransactionLogValue | None]] = []  # every record written, in order
        self.markers: list[WriteTxnMarkers] = []  # markers to write, oldest first
        self.now = 0

    def run(self, effects: list, fail_appends: bool = False) -> list:
        """The Reply bodies; an append that fails makes the replies after it
        NOT_COORDINATOR (the runtime's mapping of a lost leadership) and drops the markers."""
        replies: list = []
        failed = False
        for effect in effects:
            if isinstance(effect, Append):
                if fail_appends:
                    self.coordinator.append_failed(effect.transactional_id)
                    failed = True
                elif not failed:
                    self.log.append((effect.transactional_id, effect.value))
                    self.coordinator.replay(effect.transactional_id, effect.value)
            elif isinstance(effect, Reply):
                replies.append({"error_code": ErrorCode.NOT_COORDINATOR} if failed else effect.body)
            elif isinstance(effect, WriteTxnMarkers):
                if not failed:
                    self.markers.append(effect)
            else:
                raise AssertionError(f"unexpected effect {effect!r}")
        return replies

    def one(self, effects: list, **kw) -> dict:
        replies = self.run(effects, **kw)
        assert len(replies) == 1, replies
        return replies[0]

    def init(self, tid: str | None, timeout_ms: int = 60_000, producer_id: int = -1,
             producer_epoch: int = -1, **kw) -> dict:
        return self.one(self.coordinator.handle_init_producer_id(
            None, tid, timeout_ms, producer_id, producer_epoch, self.now), **kw)

    def add(self, tid: str, pid: int, epoch: int, *partitions: tuple[str, int], **kw) -> int:
        return self.one(self.coordinator.handle_add_partitions(
            None, tid, pid, epoch, list(partitions), self.now), **kw)["error_code"]

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str) -> int:
        return self.one(self.coordinator.handle_add_offsets(
            None, tid, pid, epoch, group, self.now))["error_code"]

    def end(self, tid: str, pid: int, epoch: int, commit: bool, **kw) -> dict:
        return self.one(self.coordinator.handle_end_txn(
            None, tid, pid, epoch, commit, self.now), **kw)

    def write_markers(self, index: int = 0) -> WriteTxnMarkers:
        m = self.markers.pop(index)
        self.run(self.coordinator.markers_written(m.transactional_id, m.producer_id,
                                                  m.producer_epoch, m.result, self.now))
        return m

    def metadata(self, tid: str):
        return self.coordinator.transactions[tid]
