"""The share-partition state machine: acquiring, acknowledging, locks, the delivery limit,
the in-flight cap, gaps, and the state it persists."""

import pytest

from broker.share.partition import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, Acquired, Expired, SharePartition,
    SharePartitionConfig)
from protocol.errors import ErrorCode as E

CONFIG = SharePartitionConfig(record_lock_duration_ms=1000, delivery_count_limit=3,
                              partition_max_record_locks=100)
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def sp(start=0, config=CONFIG) -> SharePartition:
    return SharePartition.initial(config, start)


def test_new_records_are_acquired_once_and_spso_moves_on_accept():
    p = sp()
    assert p.acquire("a", 0, [(0, 4), (5, 9)], 100) == [Acquired(0, 9, 1)]
    assert p.acquire("b", 0, [(0, 9)], 100) == []  # all held by a
    assert p.acknowledge("a", [(0, 9, [ACCEPT])], 10) == E.NONE
    assert (p.start_offset, p.end_offset, p.in_flight_count()) == (10, 10, 0)


def test_max_records_bounds_one_acquisition():
    p = sp()
    assert p.acquire("a", 0, [(0, 9)], 4) == [Acquired(0, 3, 1)]
    assert p.next_fetch_offset() == 4
    assert p.acquire("b", 0, [(0, 9)], 100) == [Acquired(4, 9, 1)]


def test_release_redelivers_first_with_a_higher_count():
    p = sp()
    p.acquire("a", 0, [(0, 3)], 100)
    assert p.acknowledge("a", [(1, 1, [RELEASE])], 0) == E.NONE
    assert p.next_fetch_offset() == 1
    assert p.acquire("b", 0, [(1, 5)], 100) == [Acquired(1, 1, 2), Acquired(4, 5, 1)]


def test_reject_archives_and_gap_too():
    p = sp()
    p.acquire("a", 0, [(0, 2)], 100)
    assert p.acknowledge("a", [(0, 2, [REJECT, GAP, ACCEPT])], 0) == E.NONE
    assert p.start_offset == 3 and p.acquire("b", 0, [(0, 2)], 100) == []


def test_the_delivery_limit_archives_a_record_released_every_time():
    p = sp()
    for n in (1, 2, 3):
        assert p.acquire("a", 0, [(0, 0)], 10) == [Acquired(0, 0, n)]
        assert p.acknowledge("a", [(0, 0, [RELEASE])], 0) == E.NONE
    assert p.start_offset == 1 and p.acquire("a", 0, [(0, 0)], 10) == []


def test_a_lock_expires_and_another_member_gets_the_record():
    p = sp()
    p.acquire("a", 0, [(0, 1)], 10)
    assert p.next_deadline() == 1000
    assert p.expire_locks(999) == []
    assert p.expire_locks(1000) == [Expired("a", 0, 1, False)]
    assert p.acknowledge("a", [(0, 0, [ACCEPT])], 1001) == E.INVALID_RECORD_STATE
    assert p.acquire("b", 1001, [(0, 1)], 10) == [Acquired(0, 1, 2)]


def test_expiry_at_the_limit_archives():
    p = sp(config=SharePartitionConfig(1000, 2, 100))
    p.acquire("a", 0, [(0, 0)], 10)
    p.expire_locks(1000)
    p.acquire("a", 1000, [(0, 0)], 10)
    assert p.expire_locks(2000) == [Expired("a", 0, 0, True)]
    assert p.start_offset == 1


def test_a_member_gone_gives_its_records_back():
    p = sp()
    p.acquire("a", 0, [(0, 2)], 10)
    assert p.release_member("b", 0) is False
    assert p.release_member("a", 0) is True
    assert p.acquired_count() == 0 and p.next_fetch_offset() == 0


def test_the_in_flight_cap_stops_new_acquisitions_until_spso_moves():
    p = sp(config=SharePartitionConfig(1000, 3, 5))
    assert p.acquire("a", 0, [(0, 9)], 100) == [Acquired(0, 4, 1)]
    assert p.acquire("b", 0, [(5, 9)], 100) == []
    p.acknowledge("a", [(0, 1, [ACCEPT])], 0)
    assert p.acquire("b", 0, [(5, 9)], 100) == [Acquired(5, 6, 1)]


def test_offsets_the_log_lacks_are_gaps_never_delivered():
    p = sp()
    # a transaction marker at 3 and compacted records 6-7 are not in the batches read
    assert p.acquire("a", 0, [(0, 2), (4, 5), (8, 9)], 100) == [
        Acquired(0, 2, 1), Acquired(4, 5, 1), Acquired(8, 9, 1)]
    assert p.state_of(3) == (ARCHIVED, 0, None)
    p.acknowledge("a", [(0, 2, [ACCEPT]), (4, 5, [ACCEPT]), (8, 9, [ACCEPT])], 0)
    assert p.start_offset == 10


@pytest.mark.parametrize("batches", [
    [(3, 2, [ACCEPT])],                    # first after last
    [(0, 1, [ACCEPT]), (1, 2, [ACCEPT])],  # overlapping
    [(2, 3, [ACCEPT]), (0, 1, [ACCEPT])],  # unsorted
    [(0, 2, [ACCEPT, ACCEPT])],            # neither one type nor one per offset
    [(0, 0, [7])],                         # no such type
    [(-1, 0, [ACCEPT])],
])
def test_a_malformed_acknowledgement_is_invalid_request_and_changes_nothing(batches):
    p = sp()
    p.acquire("a", 0, [(0, 3)], 10)
    before = p.persisted_state()
    assert p.acknowledge("a", batches, 0) \
        == E.INVALID_REQUEST
    assert p.persisted_state() == before and p.acquired_by("a") == 4


@pytest.mark.parametrize("member,batches", [
    ("b", [(0, 0, [ACCEPT])]),                     # another member's record
    ("a", [(0, 1, [ACCEPT]), (5, 5, [ACCEPT])]),  # past what was acquired
])
def test_acknowledging_what_the_member_does_not_hold_is_refused_whole(member, batches):
    p = sp()
    p.acquire("a", 0, [(0, 3)], 10)
    assert p.acknowledge(member, batches, 0) == E.INVALID_RECORD_STATE
    assert p.state_of(0) == (ACQUIRED, 1, "a") and p.acquired_by("a") == 4


def test_an_acknowledged_record_cannot_be_acknowledged_again():
    p = sp()
    p.acquire("a", 0, [(0, 3)], 10)
    assert p.acknowledge("a", [(1, 1, [ACCEPT])], 0) == E.NONE
    assert p.acknowledge("a", [(1, 1, [ACCEPT])], 0) == E.INVALID_RECORD_STATE


def test_persisted_state_reads_back_with_acquired_records_available():
    p = sp(start=10)
    p.acquire("a", 0, [(10, 15)], 100)
    p.acknowledge("a", [(11, 11, [ACCEPT]), (12, 12, [RELEASE]), (13, 13, [REJECT])], 0)
    start, batches = p.persisted_state()
    assert start == 10
    assert batches == [
        {"first_offset": 10, "last_offset": 10, "delivery_state": AVAILABLE, "delivery_count": 1},
        {"first_offset": 11, "last_offset": 11, "delivery_state": ACKNOWLEDGED,
         "delivery_count": 1},
        {"first_offset": 12, "last_offset": 12, "delivery_state": AVAILABLE, "delivery_count": 1},
        {"first_offset": 13, "last_offset": 13, "delivery_state": ARCHIVED, "delivery_count": 1},
        {"first_offset": 14, "last_offset": 15, "delivery_state": AVAILABLE, "delivery_count": 1}]
    back = SharePartition.from_persisted(CONFIG, start, batches)
    assert (back.start_offset, back.end_offset) == (10, 16)
    assert back.persisted_state() == (start, batches)
    # a new leader delivers 10, 12, 14, 15 again, never 11 or 13
    assert back.acquire("b", 0, [(10, 15)], 100) == [
        Acquired(10, 10, 2), Acquired(12, 12, 2), Acquired(14, 15, 2)]


def test_the_log_start_moving_past_spso_drops_what_is_gone():
    p = sp()
    p.acquire("a", 0, [(0, 9)], 100)
    p.move_start_offset(5)
    assert (p.start_offset, p.in_flight_count()) == (5, 5)
    p.move_start_offset(20)
    assert (p.start_offset, p.end_offset) == (20, 20)


def test_the_last_acknowledgement_says_what_it_archived_and_why():
    p = sp(config=SharePartitionConfig(1000, 2, 100))
    p.acquire("a", 0, [(0, 3)], 10)
    p.acknowledge("a", [(0, 1, [RELEASE]), (2, 3, [REJECT])], 0)
    assert p.last_archived == [(2, 3, "rejected")]
    p.acquire("a", 0, [(0, 1)], 10)
    p.acknowledge("a", [(0, 1, [RELEASE])], 0)
    assert p.last_archived == [(0, 1, "delivery count limit")]
