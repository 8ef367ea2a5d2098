"""The share coordinator's state machine, pure: no I/O, time passed in.

Owns: `ShareCoordinator` (one per broker), the latest state of each share partition
(`ShareGroupOffset`, keyed by `SharePartitionKey`) on the __share_group_state partitions
this broker leads, and the rules for changing it:

- Write merges: the written state batches overlay the stored ones (the newer wins where
  they overlap), batches wholly below the start offset are dropped, and a start offset of
  -1 keeps the stored one. A share-partition leader that sends its whole in-flight state
  thus replaces it, and one that sends only what changed updates it (Kafka's merge).
- Fencing: a write or read carrying an older state epoch than the stored one answers
  FENCED_STATE_EPOCH (the offsets were reset by an admin since that leader loaded them),
  an older leader epoch FENCED_LEADER_EPOCH (a newer leader of the topic partition has
  read the state: the older one must stop writing). A read with a newer leader epoch
  records it, so the older leader's next write is refused.
- Records: every change is one record for the key's __share_group_state partition, a
  ShareUpdate carrying what the request said, or every `snapshot_update_records` updates a
  ShareSnapshot carrying the whole merged state (replay: a snapshot replaces, an update
  merges). Initialize writes a snapshot with a new state epoch; Delete a tombstone.

An operation returns effects for the runtime (broker.share_coordinator.runtime): an
`Append` before the `Reply` it guards, as the other coordinators of the family do.
Partition routing is Kafka's: Utils.abs("groupId:topicId:partition".hashCode()) % the
topic's partition count.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from broker.coordinator.effects import Reply
from broker.coordinator.offsets import partition_of
from broker.log.manager import base64_uuid
from protocol.errors import ErrorCode as E

NO_OFFSET = -1

# DeliveryState codes of persisted state batches (Kafka's RecordState ids): acquired records
# are persisted as available, since a lock does not outlive its leader
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


@dataclass(frozen=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """FindCoordinator's key type 2 (SHARE): groupId:topicId:partition."""
        return f"{self.group_id}:{base64_uuid(self.topic_id)}:{self.partition}"


def valid_coordinator_key(key: str) -> bool:
    """Whether FindCoordinator's key type 2 is groupId:topicId:partition."""
    group, sep, rest = key.rpartition(":")
    group, sep2, topic = group.rpartition(":")
    return bool(sep and sep2 and group and topic and rest.isdigit())


@dataclass(frozen=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True)
class ShareGroupOffset:
    """The durable state of one share partition (Kafka's ShareGroupOffset)."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True)
class Append:
    """One __share_group_state record for `key`: a snapshot (`snapshot` True: the whole
    state, replacing) or an update (merged into what is there); `value` None is the
    tombstone of a deleted share partition."""
    key: SharePartitionKey
    value: ShareGroupOffset | None
    snapshot: bool


@dataclass(frozen=True)
class ShareCoordinatorConfig:
    num_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    snapshot_update_records: int = 500  # share.coordinator.snapshot.update.records.per.snapshot


def merge_batches(old: tuple[StateBatch, ...], new: tuple[StateBatch, ...],
                  start_offset: int) -> tuple[StateBatch, ...]:
    """`new` laid over `old` (new wins on every offset it covers), cut below
    `start_offset`, sorted by offset, with no overlaps."""
    out: list[StateBatch] = []
    news = sorted(new, key=lambda b: b.first_offset)
    for b in sorted(old, key=lambda b: b.first_offset):
        pieces = [b]
        for n in news:
            cut: list[StateBatch] = []
            for p in pieces:
                if n.last_offset < p.first_offset or n.first_offset > p.last_offset:
                    cut.append(p)
                    continue
                if p.first_offset < n.first_offset:
                    cut.append(replace(p, last_offset=n.first_offset - 1))
                if p.last_offset > n.last_offset:
                    cut.append(replace(p, first_offset=n.last_offset + 1))
            pieces = cut
        out.extend(pieces)
    out.extend(news)
    kept = []
    for b in sorted(out, key=lambda b: b.first_offset):
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = replace(b, first_offset=start_offset)
        kept.append(b)
    return tuple(kept)


def _batch(d: dict) -> StateBatch:
    return StateBatch(d["first_offset"], d["last_offset"], d["delivery_state"],
                      d["delivery_count"])


def batch_fields(b: StateBatch) -> dict:
    return {"first_offset": b.first_offset, "last_offset": b.last_offset,
            "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}


def valid_batches(batches: list[dict]) -> bool:
    """Each batch in order, first <= last, and a state a leader may persist."""
    return all(b["first_offset"] <= b["last_offset"] and b["first_offset"] >= 0
               and b["delivery_state"] in (AVAILABLE, ACKNOWLEDGED, ARCHIVED)
               and b["delivery_count"] >= 0 for b in batches)


class ShareCoordinator:
    def __init__(self, config: ShareCoordinatorConfig = ShareCoordinatorConfig()):
        self.config = config
        self.states: dict[SharePartitionKey, ShareGroupOffset] = {}
        self._updates_since_snapshot: dict[SharePartitionKey, int] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.coordinator_epochs: dict[int, int] = {}

    # -- routing --------------------------------------------------------------------------------

    def partition_for(self, key: SharePartitionKey | str) -> int:
        """The __share_group_state partition of a share partition, or of FindCoordinator's
        key string for it."""
        text = key if isinstance(key, str) else key.coordinator_key()
        return partition_of(text, self.config.num_partitions)

    def check(self, key: SharePartitionKey) -> E:
        index = self.partition_for(key)
        if index in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.owned:
            return E.NOT_COORDINATOR
        return E.NONE

    # -- operations (one share partition each) --------------------------------------------------

    def handle_initialize(self, waiter: Any, key: SharePartitionKey, state_epoch: int,
                          start_offset: int, now_ms: int) -> list:
        """Start the partition's state afresh at `start_offset` (a new share group, or an
        admin's offset reset): an older state epoch than the stored one is fenced."""
        error = self.check(key)
        old = self.states.get(key)
        if not error and old is not None and state_epoch < old.state_epoch:
            error = E.FENCED_STATE_EPOCH
        if not error and start_offset < 0:
            error = E.INVALID_REQUEST
        if error:
            return [Reply(waiter, {"error_code": error})]
        value = ShareGroupOffset(
            snapshot_epoch=0 if old is None else old.snapshot_epoch + 1,
            state_epoch=state_epoch, leader_epoch=-1 if old is None else old.leader_epoch,
            start_offset=start_offset)
        return [Append(key, value, snapshot=True), Reply(waiter, {"error_code": E.NONE})]

    def handle_write(self, waiter: Any, key: SharePartitionKey, state_epoch: int,
                     leader_epoch: int, start_offset: int, batches: list[dict],
                     now_ms: int) -> list:
        error = self.check(key)
        old = self.states.get(key)
        if not error and not valid_batches(batches):
            error = E.INVALID_REQUEST
        if not error and old is not None:
            if state_epoch < old.state_epoch:
                error = E.FENCED_STATE_EPOCH
            elif leader_epoch < old.leader_epoch:
                error = E.FENCED_LEADER_EPOCH
        if not error and old is None and start_offset < 0:
            error = E.INVALID_REQUEST  # the first state names where it starts
        if error:
            return [Reply(waiter, {"error_code": error})]
        new = tuple(_batch(b) for b in batches)
        if old is None:
            merged = ShareGroupOffset(0, state_epoch, leader_epoch, start_offset,
                                      merge_batches((), new, start_offset))
            return [Append(key, merged, snapshot=True), Reply(waiter, {"error_code": E.NONE})]
        start = start_offset if start_offset >= 0 else old.start_offset
        start = max(start, old.start_offset) if state_epoch == old.state_epoch else start
        merged = ShareGroupOffset(old.snapshot_epoch, max(state_epoch, old.state_epoch),
                                  max(leader_epoch, old.leader_epoch), start,
                                  merge_batches(old.state_batches, new, start))
        return [self._append(key, merged, new, start), Reply(waiter, {"error_code": E.NONE})]

    def _append(self, key: SharePartitionKey, merged: ShareGroupOffset,
                written: tuple[StateBatch, ...], start_offset: int) -> Append:
        if self._updates_since_snapshot.get(key, 0) + 1 >= self.config.snapshot_update_records:
            return Append(key, replace(merged, snapshot_epoch=merged.snapshot_epoch + 1),
                          snapshot=True)
        return Append(key, replace(merged, start_offset=start_offset, state_batches=written),
                      snapshot=False)

    def handle_read(self, waiter: Any, key: SharePartitionKey, leader_epoch: int,
                    now_ms: int) -> list:
        """The stored state for a leader loading the partition. A newer leader epoch is
        written down first (ShareUpdate with no batches), fencing the older leader; a
        partition with no state answers start offset -1, for the leader to initialise."""
        error = self.check(key)
        old = self.states.get(key)
        if not error and old is not None and leader_epoch < old.leader_epoch:
            error = E.FENCED_LEADER_EPOCH
        if error:
            return [Reply(waiter, {"error_code": error})]
        if old is None:
            return [Reply(waiter, _read_body(None))]
        out: list = []
        if leader_epoch > old.leader_epoch:
            out.append(self._append(key, replace(old, leader_epoch=leader_epoch), (),
                                    old.start_offset))
            old = replace(old, leader_epoch=leader_epoch)
        out.append(Reply(waiter, _read_body(old)))
        return out

    def handle_read_summary(self, waiter: Any, key: SharePartitionKey, leader_epoch: int,
                            now_ms: int) -> list:
        error = self.check(key)
        old = self.states.get(key)
        if error:
            return [Reply(waiter, {"error_code": error})]
        return [Reply(waiter, {"error_code": E.NONE,
                               "state_epoch": old.state_epoch if old else 0,
                               "leader_epoch": old.leader_epoch if old else -1,
                               "start_offset": old.start_offset if old else NO_OFFSET})]

    def handle_delete(self, waiter: Any, key: SharePartitionKey, now_ms: int) -> list:
        error = self.check(key)
        if error:
            return [Reply(waiter, {"error_code": error})]
        if key not in self.states:
            return [Reply(waiter, {"error_code": E.NONE})]
        return [Append(key, None, snapshot=True), Reply(waiter, {"error_code": E.NONE})]

    # -- records ------------------------------------------------------------------------------

    def replay(self, key: SharePartitionKey, value: ShareGroupOffset | None,
               snapshot: bool) -> None:
        """Apply one record of the key's partition, appended now or read back on load."""
        if value is None:
            self.states.pop(key, None)
            self._updates_since_snapshot.pop(key, None)
            return
        old = self.states.get(key)
        if snapshot or old is None:
            self.states[key] = value
            self._updates_since_snapshot[key] = 0
            return
        start = value.start_offset if value.start_offset >= 0 else old.start_offset
        self.states[key] = ShareGroupOffset(
            old.snapshot_epoch, old.state_epoch, max(value.leader_epoch, old.leader_epoch),
            start, merge_batches(old.state_batches, value.state_batches, start))
        self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1

    # -- leadership of __share_group_state partitions -------------------------------------------

    def begin_load(self, index: int, leader_epoch: int) -> None:
        self.loading.add(index)
        self.coordinator_epochs[index] = leader_epoch

    def finish_load(self, index: int) -> None:
        self.loading.discard(index)
        self.owned.add(index)

    def unload(self, index: int) -> None:
        self.owned.discard(index)
        self.loading.discard(index)
        self.coordinator_epochs.pop(index, None)
        for key in [k for k in self.states if self.partition_for(k) == index]:
            del self.states[key]
            self._updates_since_snapshot.pop(key, None)

    def next_deadline(self) -> int | None:
        return None  # no timers: the state changes only when its leader writes

    def tick(self, now_ms: int) -> list:
        return []

    def state_of(self, key: SharePartitionKey) -> ShareGroupOffset | None:
        return self.states.get(key)


def _read_body(state: ShareGroupOffset | None) -> dict:
    if state is None:
        return {"error_code": E.NONE, "state_epoch": 0, "start_offset": NO_OFFSET,
                "state_batches": []}
    return {"error_code": E.NONE, "state_epoch": state.state_epoch,
            "start_offset": state.start_offset,
            "state_batches": [batch_fields(b) for b in state.state_batches]}

