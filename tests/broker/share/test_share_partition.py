"""The share-partition state machine: acquiring, acknowledging, locks, the delivery limit,
the in-flight cap, gaps, and the state it persists."""

import pytest

from broker.share.partition import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, Acquired, Expired, SharePartition,
    SharePartitionConfig, parse_auto_offset_reset, share_partition_config)
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


# -- runs: what the range-keeping adds ------------------------------------------------------


def test_a_run_split_by_a_partial_acknowledgement_joins_again():
    p = sp()
    p.acquire("a", 0, [(0, 99)], 100)
    assert p.acknowledge("a", [(40, 59, [RELEASE])], 0) == E.NONE
    assert len(p._runs) == 3
    assert p.release_member("a", 0) is True
    assert len(p._runs) == 1  # all AVAILABLE, delivered once: one run again
    assert p.acquire("a", 0, [(0, 99)], 100) == [Acquired(0, 99, 2)]
    assert p.acknowledge("a", [(0, 39, [ACCEPT]), (60, 99, [ACCEPT])], 0) == E.NONE
    assert (p.start_offset, p.next_fetch_offset(), p.acquired_by("a")) == (40, 100, 20)
    assert p.acknowledge("a", [(40, 59, [ACCEPT])], 0) == E.NONE
    assert (p.start_offset, p.end_offset, p.persisted_state()) == (100, 100, (100, []))


def test_one_type_per_offset_applies_each():
    p = sp()
    p.acquire("a", 0, [(0, 5)], 10)
    types = [ACCEPT, ACCEPT, RELEASE, REJECT, GAP, ACCEPT]
    assert p.acknowledge("a", [(0, 5, types)], 0) == E.NONE
    assert [p.state_of(o) for o in range(2, 6)] == [
        (AVAILABLE, 1, None), (ARCHIVED, 1, None), (ARCHIVED, 1, None), (ACKNOWLEDGED, 1, None)]
    assert p.start_offset == 2 and p.last_archived == [(3, 3, "rejected")]


def test_a_refused_acknowledgement_leaves_its_valid_ranges_unapplied():
    p = sp()
    p.acquire("a", 0, [(0, 3)], 10)
    p.acquire("b", 0, [(4, 7)], 10)
    before = p.persisted_state(), p.acquired_by("a"), p.acquired_by("b"), p.next_deadline()
    for batches in ([(0, 1, [ACCEPT]), (4, 4, [ACCEPT])],       # 4 is b's
                    [(0, 1, [ACCEPT]), (2, 3, [ACCEPT, 9])],    # no type 9
                    [(0, 3, [ACCEPT]), (3, 3, [ACCEPT])],       # overlapping
                    [(0, 2, [RELEASE]), (8, 8, [ACCEPT])]):     # 8 never acquired
        assert p.acknowledge("a", batches, 0) != E.NONE
        assert (p.persisted_state(), p.acquired_by("a"), p.acquired_by("b"),
                p.next_deadline()) == before
        assert p.state_of(0) == (ACQUIRED, 1, "a")


def test_an_empty_acknowledgement_changes_nothing():
    p = sp()
    p.acquire("a", 0, [(0, 3)], 10)
    assert p.acknowledge("a", [], 0) == E.NONE and p.acquired_by("a") == 4


def test_gap_acknowledges_an_acquired_offset_the_log_lacks():
    # a state written by a leader that knew 10-12 only as never delivered; 11 is a marker
    p = SharePartition.from_persisted(CONFIG, 10, [
        {"first_offset": 13, "last_offset": 13, "delivery_state": ACKNOWLEDGED,
         "delivery_count": 1}])
    assert (p.start_offset, p.end_offset, p.state_of(11)) == (10, 14, (AVAILABLE, 0, None))
    assert p.acquire("a", 0, [(10, 10), (12, 14)], 10) == [Acquired(10, 12, 1),
                                                            Acquired(14, 14, 1)]
    assert p.acknowledge("a", [(10, 12, [ACCEPT, GAP, ACCEPT]), (14, 14, [ACCEPT])], 0) \
        == E.NONE
    assert p.start_offset == 15 and p.last_archived == []


def test_a_hole_at_spso_with_nothing_in_flight_is_passed_whole():
    p = sp(config=SharePartitionConfig(1000, 3, 5))
    # compaction removed 0-999: far more than the cap, yet nothing waits for it
    assert p.acquire("a", 0, [(1000, 1002)], 10) == [Acquired(1000, 1002, 1)]
    assert (p.start_offset, p.end_offset) == (1000, 1003)


def test_gaps_count_towards_the_cap():
    p = sp(config=SharePartitionConfig(1000, 3, 5))
    assert p.acquire("a", 0, [(0, 1), (5, 9)], 10) == [Acquired(0, 1, 1)]
    assert (p.end_offset, p.state_of(4)) == (5, (ARCHIVED, 0, None))
    assert p.acquire("a", 0, [(5, 9)], 10) == []
    p.acknowledge("a", [(0, 1, [ACCEPT])], 0)
    assert p.start_offset == 5
    assert p.acquire("a", 0, [(5, 9)], 10) == [Acquired(5, 9, 1)]


def test_redeliveries_come_before_new_records_and_only_as_far_as_was_read():
    p = sp()
    p.acquire("a", 0, [(0, 9)], 100)
    p.acknowledge("a", [(2, 3, [RELEASE]), (7, 8, [RELEASE])], 0)
    assert p.acquire("b", 0, [(2, 5)], 100) == [Acquired(2, 3, 2)]  # 7-8 not read this time
    assert p.acquire("b", 0, [(7, 12)], 3) == [Acquired(7, 8, 2), Acquired(10, 10, 1)]


def test_expiry_reports_one_range_per_member_and_outcome():
    p = sp(config=SharePartitionConfig(1000, 2, 100))
    p.acquire("a", 0, [(0, 3)], 10)
    p.acknowledge("a", [(1, 1, [RELEASE])], 0)
    p.acquire("a", 0, [(0, 9)], 10)        # 1 again (count 2), 4-9 new (count 1)
    p.acquire("b", 500, [(0, 12)], 2)      # 10-11, a later deadline
    assert p.next_deadline() == 1000
    assert p.expire_locks(1000) == [Expired("a", 0, 0, False), Expired("a", 1, 1, True),
                                    Expired("a", 2, 9, False)]
    assert p.next_deadline() == 1500
    assert p.expire_locks(2000) == [Expired("b", 10, 11, False)]
    assert p.next_deadline() is None


def test_release_member_leaves_the_others_records_held():
    p = sp()
    p.acquire("a", 0, [(0, 3)], 2)
    p.acquire("b", 0, [(0, 3)], 2)
    assert p.release_member("a", 0) is True
    assert (p.acquired_by("a"), p.acquired_by("b"), p.next_fetch_offset()) == (0, 2, 0)
    assert p.release_member("a", 0) is False


def test_the_log_start_moving_into_a_run_splits_it_and_spso_skips_what_is_done():
    p = sp()
    p.acquire("a", 0, [(0, 9)], 100)
    p.acknowledge("a", [(5, 6, [ACCEPT])], 0)
    p.move_start_offset(3)
    assert (p.start_offset, p.state_of(3), p.acquired_by("a")) == (3, (ACQUIRED, 1, "a"), 5)
    assert p.acknowledge("a", [(0, 2, [ACCEPT])], 0) == E.INVALID_RECORD_STATE
    p.move_start_offset(4)
    p.move_start_offset(5)  # 5-6 were accepted: SPSO goes on to 7
    assert (p.start_offset, p.end_offset, p.acquired_by("a")) == (7, 10, 3)


def test_from_persisted_reads_any_leader_state():
    batches = [
        {"first_offset": 0, "last_offset": 4, "delivery_state": ACKNOWLEDGED,
         "delivery_count": 1},                                   # below SPSO: ignored
        {"first_offset": 8, "last_offset": 9, "delivery_state": ACQUIRED, "delivery_count": 1},
        {"first_offset": 5, "last_offset": 7, "delivery_state": AVAILABLE, "delivery_count": 3},
        {"first_offset": 9, "last_offset": 11, "delivery_state": ARCHIVED, "delivery_count": 2},
    ]
    p = SharePartition.from_persisted(CONFIG, 6, batches)
    # 6-7 at the limit are archived, so SPSO moves to 8; 8-9 held before are available again;
    # 10-11 after an overlap keep their own state
    assert (p.start_offset, p.end_offset) == (8, 12)
    assert p.persisted_state() == (8, [
        {"first_offset": 8, "last_offset": 9, "delivery_state": AVAILABLE, "delivery_count": 1},
        {"first_offset": 10, "last_offset": 11, "delivery_state": ARCHIVED,
         "delivery_count": 2}])


def test_two_thousand_records_in_flight_stay_a_few_runs():
    p = sp(config=SharePartitionConfig())
    got = []
    for n in range(200):
        got += p.acquire(f"m{n % 4}", n, [(0, 99_999)], 10)
    assert p.in_flight_count() == 2000 and len(got) == 200
    # every member accepts every other fetch of its own
    for n, a in enumerate(got):
        if n % 8 < 4:
            assert p.acknowledge(f"m{n % 4}", [(a.first_offset, a.last_offset, [ACCEPT])],
                                 0) == E.NONE
    start, batches = p.persisted_state()
    assert start == 40 and len(batches) == 2 * (len(got) // 8) - 1
    assert len(p._runs) <= len(got)


@pytest.mark.parametrize("value,kind,ms", [
    ("earliest", "earliest", 0), ("latest", "latest", 0),
    ("by_duration:PT30M", "by_duration", 1_800_000), ("by_duration:P1D", "by_duration",
                                                      86_400_000),
    ("by_duration:PT10S", "by_duration", 10_000)])
def test_auto_offset_reset_is_parsed_here_too(value, kind, ms):
    policy = parse_auto_offset_reset(value)
    assert (policy.kind, policy.duration_ms) == (kind, ms)


def test_auto_offset_reset_refuses_a_negative_duration():
    with pytest.raises(ValueError):
        parse_auto_offset_reset("by_duration:-PT1H")


class _Broker:
    def __init__(self, config, group_configs):
        self.config = config
        self.metadata_cache = type("Cache", (), {"group_configs": lambda _, g: group_configs})()


def test_share_partition_config_uses_kafkas_defaults_when_the_broker_has_none():
    config = share_partition_config(_Broker(object(), {}), "g")
    assert config == SharePartitionConfig(30_000, 5, 2_000, parse_auto_offset_reset("latest"))


def test_share_partition_config_takes_the_broker_settings_and_the_groups_own():
    settings = type("Settings", (), {"group_share_record_lock_duration_ms": 15_000,
                                     "group_share_delivery_count_limit": 3,
                                     "group_share_partition_max_record_locks": 500})()
    assert share_partition_config(_Broker(settings, {}), "g") \
        == SharePartitionConfig(15_000, 3, 500)
    own = {"share.record.lock.duration.ms": "2000", "share.auto.offset.reset": "earliest"}
    assert share_partition_config(_Broker(settings, own), "g") \
        == SharePartitionConfig(2_000, 3, 500, parse_auto_offset_reset("earliest"))
    broken = {"share.record.lock.duration.ms": "soon", "share.auto.offset.reset": "never"}
    assert share_partition_config(_Broker(settings, broken), "g") \
        == SharePartitionConfig(15_000, 3, 500)


def test_state_counts_and_the_acquisition_totals_follow_each_record():
    p = sp()
    p.acquire("a", 0, [(0, 5)], 100)
    assert p.acknowledge("a", [(1, 1, [ACCEPT]), (2, 2, [RELEASE]), (3, 3, [REJECT])],
                         0) == E.NONE
    # 0 still held keeps SPSO at 0: what is done stays in flight behind it
    assert p.state_counts() == {"available": 1, "acquired": 3, "acknowledged": 1,
                                "archived": 1}
    assert (p.acquisitions, p.redeliveries) == (6, 0)
    assert p.acquire("b", 0, [(2, 7)], 100) == [Acquired(2, 2, 2), Acquired(6, 7, 1)]
    assert (p.acquisitions, p.redeliveries) == (9, 1)
    p.expire_locks(CONFIG.record_lock_duration_ms)  # every lock: a's and b's
    assert p.state_counts() == {"available": 6, "acquired": 0, "acknowledged": 1,
                                "archived": 1}
    assert sum(p.state_counts().values()) == p.in_flight_count() == 8


def test_a_member_gone_at_the_delivery_limit_archives_and_says_so():
    p = sp()
    for _ in range(CONFIG.delivery_count_limit - 1):
        p.acquire("a", 0, [(0, 1)], 10)
        p.acknowledge("a", [(0, 1, [RELEASE])], 0)
    p.acquire("a", 0, [(0, 3)], 10)  # 0-1 at the limit now, 2-3 first delivered
    assert p.release_member("a", 0) is True
    assert p.last_archived == [(0, 1, "delivery count limit")]
    assert (p.start_offset, p.next_fetch_offset()) == (2, 2)
    assert p.release_member("a", 0) is False and p.last_archived == []
