"""The pure share coordinator: merging written state, fencing by state and leader epoch,
snapshots every N updates, and replay giving back the state that was answered."""

import uuid

import pytest

from broker.coordinator.effects import Reply
from broker.share_coordinator.state import (
    ACKNOWLEDGED, ARCHIVED, AVAILABLE, Append, ShareCoordinator, ShareCoordinatorConfig,
    SharePartitionKey, StateBatch, merge_batches)
from protocol.errors import ErrorCode as E

KEY = SharePartitionKey("g", uuid.UUID(int=7), 0)


def owning(config: ShareCoordinatorConfig | None = None) -> ShareCoordinator:
    c = ShareCoordinator(config or ShareCoordinatorConfig())
    c.begin_load(c.partition_for(KEY), 3)
    c.finish_load(c.partition_for(KEY))
    return c


def run(c: ShareCoordinator, effects: list) -> dict:
    """Apply the effects as the runtime would (append = replay), return the reply body."""
    body = None
    for effect in effects:
        if isinstance(effect, Append):
            c.replay(effect.key, effect.value, effect.snapshot)
        elif isinstance(effect, Reply):
            body = effect.body
    assert body is not None
    return body


def batch(first, last, state, count) -> dict:
    return {"first_offset": first, "last_offset": last, "delivery_state": state,
            "delivery_count": count}


def test_merge_overlays_new_batches_and_cuts_below_the_start():
    old = (StateBatch(0, 9, AVAILABLE, 1), StateBatch(10, 19, ACKNOWLEDGED, 1))
    new = (StateBatch(5, 12, ARCHIVED, 5),)
    assert merge_batches(old, new, 3) == (
        StateBatch(3, 4, AVAILABLE, 1), StateBatch(5, 12, ARCHIVED, 5),
        StateBatch(13, 19, ACKNOWLEDGED, 1))
    assert merge_batches(old, (), 20) == ()


def test_the_key_routes_like_kafka():
    assert KEY.coordinator_key() == "g:AAAAAAAAAAAAAAAAAAAABw:0"
    c = ShareCoordinator(ShareCoordinatorConfig(num_partitions=50))
    assert 0 <= c.partition_for(KEY) < 50


def test_an_unowned_key_is_not_coordinator_and_a_loading_one_says_so():
    c = ShareCoordinator()
    assert run(c, c.handle_read(object(), KEY, 0, 0))["error_code"] == E.NOT_COORDINATOR
    c.begin_load(c.partition_for(KEY), 1)
    assert run(c, c.handle_read(object(), KEY, 0, 0))["error_code"] \
        == E.COORDINATOR_LOAD_IN_PROGRESS


def test_a_fresh_partition_reads_no_state_then_holds_what_was_written():
    c = owning()
    body = run(c, c.handle_read(object(), KEY, 0, 0))
    assert (body["error_code"], body["start_offset"], body["state_batches"]) == (E.NONE, -1, [])
    assert run(c, c.handle_write(object(), KEY, 0, 0, 10, [batch(10, 14, ACKNOWLEDGED, 1)],
                                 0))["error_code"] == E.NONE
    assert run(c, c.handle_write(object(), KEY, 0, 0, -1, [batch(15, 19, ARCHIVED, 5)],
                                 0))["error_code"] == E.NONE
    body = run(c, c.handle_read(object(), KEY, 0, 0))
    assert body["start_offset"] == 10
    assert body["state_batches"] == [batch(10, 14, ACKNOWLEDGED, 1), batch(15, 19, ARCHIVED, 5)]


def test_the_first_write_must_say_where_the_state_starts():
    c = owning()
    assert run(c, c.handle_write(object(), KEY, 0, 0, -1, [], 0))["error_code"] \
        == E.INVALID_REQUEST


@pytest.mark.parametrize("bad", [batch(5, 4, AVAILABLE, 1), batch(1, 2, 1, 1),
                                 batch(-1, 2, AVAILABLE, 1), batch(1, 2, AVAILABLE, -1)])
def test_a_malformed_batch_is_refused_and_changes_nothing(bad):
    c = owning()
    run(c, c.handle_write(object(), KEY, 0, 0, 0, [batch(0, 3, ACKNOWLEDGED, 1)], 0))
    before = c.state_of(KEY)
    assert run(c, c.handle_write(object(), KEY, 0, 0, 0, [bad], 0))["error_code"] \
        == E.INVALID_REQUEST
    assert c.state_of(KEY) == before


def test_an_older_leader_epoch_is_fenced_once_a_newer_leader_has_read():
    c = owning()
    run(c, c.handle_write(object(), KEY, 0, 4, 0, [], 0))
    assert run(c, c.handle_read(object(), KEY, 5, 0))["error_code"] == E.NONE
    assert run(c, c.handle_write(object(), KEY, 0, 4, 0, [batch(0, 0, ACKNOWLEDGED, 1)],
                                 0))["error_code"] == E.FENCED_LEADER_EPOCH
    assert run(c, c.handle_read(object(), KEY, 4, 0))["error_code"] == E.FENCED_LEADER_EPOCH
    assert c.state_of(KEY).state_batches == ()


def test_initialize_with_a_newer_state_epoch_resets_and_fences_the_old_state():
    c = owning()
    run(c, c.handle_write(object(), KEY, 0, 1, 0, [batch(0, 4, ACKNOWLEDGED, 1)], 0))
    assert run(c, c.handle_initialize(object(), KEY, 1, 100, 0))["error_code"] == E.NONE
    assert (c.state_of(KEY).start_offset, c.state_of(KEY).state_batches) == (100, ())
    assert run(c, c.handle_write(object(), KEY, 0, 1, 5, [], 0))["error_code"] \
        == E.FENCED_STATE_EPOCH
    assert run(c, c.handle_initialize(object(), KEY, 0, 0, 0))["error_code"] \
        == E.FENCED_STATE_EPOCH


def test_the_start_offset_does_not_go_back_within_a_state_epoch():
    c = owning()
    run(c, c.handle_write(object(), KEY, 0, 0, 50, [], 0))
    run(c, c.handle_write(object(), KEY, 0, 0, 40, [], 0))
    assert c.state_of(KEY).start_offset == 50


def test_every_nth_record_is_a_snapshot_and_replay_from_the_records_agrees():
    c = owning(ShareCoordinatorConfig(snapshot_update_records=3))
    records: list[Append] = []
    for i in range(8):
        effects = c.handle_write(object(), KEY, 0, 0, i, [batch(i, i + 2, ACKNOWLEDGED, 1)], 0)
        records += [e for e in effects if isinstance(e, Append)]
        run(c, effects)
    assert [r.snapshot for r in records] == [True, False, False, True, False, False, True,
                                            False]
    # a new coordinator loading the partition from the records alone gets the same state
    fresh = owning(ShareCoordinatorConfig(snapshot_update_records=3))
    for r in records:
        fresh.replay(r.key, r.value, r.snapshot)
    assert fresh.state_of(KEY) == c.state_of(KEY)
    assert fresh.state_of(KEY).start_offset == 7
    assert fresh.state_of(KEY).state_batches == (StateBatch(7, 9, ACKNOWLEDGED, 1),)


def test_delete_writes_a_tombstone_and_unload_forgets():
    c = owning()
    run(c, c.handle_write(object(), KEY, 0, 0, 0, [], 0))
    effects = c.handle_delete(object(), KEY, 0)
    assert any(isinstance(e, Append) and e.value is None for e in effects)
    run(c, effects)
    assert c.state_of(KEY) is None
    run(c, c.handle_write(object(), KEY, 0, 0, 0, [], 0))
    c.unload(c.partition_for(KEY))
    assert c.state_of(KEY) is None
    assert run(c, c.handle_read(object(), KEY, 0, 0))["error_code"] == E.NOT_COORDINATOR
