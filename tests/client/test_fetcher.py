"""The consumer's fetcher without a broker: SubscriptionState and how a Fetch response is
taken into (or kept out of) the buffers, as the background prefetch needs it.

A response is matched against what the partition was when its Fetch was sent (the same
partition state, the same epoch, the same fetch position): a seek, a reset, a revocation
or a re-assignment while the Fetch was in flight discards it.
"""

from __future__ import annotations

from construct import Container

from client.config import check_config
from client.consumer.fetcher import Fetcher, SubscriptionState
from client.types import TopicPartition
from protocol.errors import ErrorCode
from protocol.records import encode_batch

TP = TopicPartition("t", 0)


def fetcher(state: SubscriptionState, **config) -> Fetcher:
    # the response path uses only the state and the config (and the cluster on errors)
    return Fetcher(None, None, check_config("consumer", **config), state)  # type: ignore[arg-type]


def response(first: int, count: int, high_watermark: int | None = None,
             error: ErrorCode = ErrorCode.NONE) -> Container:
    records = encode_batch([(o, 1000 + o, None, f"v{o}".encode(), []) for o in
                            range(first, first + count)], base_offset=first) if count else b""
    return Container(partition_index=TP.partition, error_code=int(error),
                     high_watermark=high_watermark if high_watermark is not None
                     else first + count, records=records)


def sent_from(state: SubscriptionState, tp: TopicPartition = TP, low_water: int = 1):
    """What send_fetches records for a partition as its Fetch goes out."""
    offset = state.fetchable(low_water)[tp]
    return {tp: (offset, *state.fetch_mark(tp))}


def values(drained) -> list[bytes]:
    return [r.value for records in drained.values() for r in records]


def assigned(position: int = 0) -> SubscriptionState:
    state = SubscriptionState()
    state.assign([TP])
    state.seek(TP, position)
    return state


def test_a_prefetch_continues_after_what_is_buffered():
    state = assigned()
    f = fetcher(state)
    f._handle_partition(TP, response(0, 10), sent_from(state))
    assert state.drain(4) and state.position(TP) == 4
    # 6 still buffered: below a low-water mark of 8 the partition is fetched again, from
    # the end of the buffer, not from the position
    assert state.fetchable(low_water=8) == {TP: 10}
    assert state.fetchable(low_water=6) == {}  # bounded: enough buffered, no Fetch
    sent = sent_from(state, low_water=8)
    f._handle_partition(TP, response(10, 5), sent)
    assert values(state.drain(100)) == [f"v{o}".encode() for o in range(4, 15)]
    assert state.position(TP) == 15


def test_a_seek_while_a_prefetch_is_in_flight_discards_its_response():
    state = assigned()
    f = fetcher(state)
    f._handle_partition(TP, response(0, 10), sent_from(state))
    state.drain(10)
    sent = sent_from(state)  # from 10
    state.seek(TP, 10)  # the same offset, but sought: what was in flight is not used
    f._handle_partition(TP, response(10, 5), sent)
    assert not state.has_buffered() and state.position(TP) == 10
    # sought elsewhere with records buffered: dropped, and so is a prefetch sent before
    f._handle_partition(TP, response(10, 5), sent_from(state))
    sent = sent_from(state, low_water=100)  # from 15, after the buffer
    state.seek(TP, 3)
    f._handle_partition(TP, response(15, 5), sent)
    assert not state.has_buffered()
    f._handle_partition(TP, response(3, 2), sent_from(state))
    assert values(state.drain(100)) == [b"v3", b"v4"]


def test_a_revoked_or_reassigned_partition_discards_the_prefetch_in_flight():
    state = assigned()
    f = fetcher(state)
    sent = sent_from(state)
    state.stop(TP)  # StopFetching: the revocation under way
    f._handle_partition(TP, response(0, 5), sent)
    assert not state.buffered(TP)
    state.assign([])  # revoked ...
    f._handle_partition(TP, response(0, 5), sent)
    state.assign([TP])  # ... and assigned again, at the same offset
    state.seek(TP, 0)
    f._handle_partition(TP, response(0, 5), sent)
    assert not state.has_buffered()


def test_a_paused_partition_keeps_what_was_prefetched_for_it():
    state = assigned()
    f = fetcher(state)
    sent = sent_from(state)
    state.pause(TP)
    f._handle_partition(TP, response(0, 3), sent)
    assert state.drain(10) == {} and state.fetchable() == {}
    state.resume(TP)
    assert values(state.drain(10)) == [b"v0", b"v1", b"v2"]


def test_prefetch_asks_only_for_partitions_behind_the_high_watermark():
    """A partition caught up would make the broker hold the Fetch (a long poll) and keep
    the leader's other partitions waiting behind it."""
    state = SubscriptionState()
    caught_up, behind = TopicPartition("t", 0), TopicPartition("t", 1)
    state.assign([caught_up, behind])
    state.seek(caught_up, 0)
    state.seek(behind, 0)
    assert state.fetchable(behind_only=True) == {}  # no high watermark known yet
    state.state(caught_up).high_watermark = 0
    state.state(behind).high_watermark = 50
    assert state.fetchable(behind_only=True) == {behind: 0}
    assert state.fetchable() == {caught_up: 0, behind: 0}


def test_out_of_range_behind_buffered_records_keeps_them():
    state = assigned()
    f = fetcher(state)
    f._handle_partition(TP, response(0, 4), sent_from(state))
    sent = sent_from(state, low_water=100)
    f._handle_partition(TP, response(4, 0, error=ErrorCode.OFFSET_OUT_OF_RANGE), sent)
    assert values(state.drain(10)) == [b"v0", b"v1", b"v2", b"v3"]
    # with nothing buffered the reset applies (auto_offset_reset 'latest' by default)
    f._handle_partition(TP, response(4, 0, error=ErrorCode.OFFSET_OUT_OF_RANGE),
                        sent_from(state))
    assert state.position(TP) is None and state.state(TP).reset == "latest"


def test_next_record_moves_the_position_one_record_at_a_time():
    state = assigned()
    fetcher(state)._handle_partition(TP, response(0, 3), sent_from(state))
    taken = []
    while (step := state.next_record()) is not None:
        record, left = step
        taken.append((record.offset, left, state.position(TP)))
    assert taken == [(0, 2, 1), (1, 1, 2), (2, 0, 3)]
    assert state.next_record() is None and state.drain(10) == {}


def test_next_record_takes_turns_between_partitions_and_skips_paused_and_revoked():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    state = SubscriptionState()
    state.assign([a, b])
    f = fetcher(state)
    for tp in (a, b):
        state.seek(tp, 0)
        data = response(0, 6)
        data.partition_index = tp.partition
        f._handle_partition(tp, data, {tp: (0, *state.fetch_mark(tp))})
    order = []
    for _ in range(6):
        record, _ = state.next_record(in_a_row=2)
        order.append(record.partition)
    # two in a row from each, in turn, so that neither starves the other
    assert order in ([0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 1, 1])
    state.pause(a)
    assert {state.next_record(in_a_row=2)[0].partition for _ in range(2)} == {1}
    state.resume(a)
    state.assign([a])  # b revoked: what was buffered for it is not returned
    rest = []
    while (step := state.next_record(in_a_row=2)) is not None:
        rest.append(step[0].partition)
    assert set(rest) == {0} and state.position(a) == 6


def test_next_record_moves_past_a_control_batch_after_the_buffer():
    """As drain: once the buffer is empty, the position moves past batches the response
    held after the last returned record (control batches)."""
    state = assigned()
    f = fetcher(state)
    data = response(0, 2)
    data.records += encode_batch([(2, 0, b"\x00\x00\x00\x01", b"\x00" * 6, [])],
                                 base_offset=2, is_control=True)
    f._handle_partition(TP, data, sent_from(state))
    assert state.next_record()[0].offset == 0 and state.position(TP) == 1
    assert state.next_record()[0].offset == 1 and state.position(TP) == 3


def test_a_corrupt_batch_is_raised_when_reached_and_again_until_sought_past():
    """Batches are decoded as the application reaches them: the records before a corrupt
    batch are returned, then the error comes from every drain (never a silent skip), with
    the position at the corrupt batch, until the application seeks past it."""
    import pytest

    from protocol.records import CorruptRecordError, encode_batch
    state = assigned()
    data = response(0, 5)
    bad = bytearray(encode_batch([(o, 0, None, b"v", []) for o in range(5, 8)],
                                 base_offset=5))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    data.records += bytes(bad) + encode_batch([(8, 0, None, b"w", [])], base_offset=8)
    data.high_watermark = 9
    fetcher(state)._handle_partition(TP, data, sent_from(state))
    assert state.buffered(TP) == 9  # counted from the headers
    assert values(state.drain(3)) == [b"v0", b"v1", b"v2"]
    assert values(state.drain(10)) == [b"v3", b"v4"]
    for _ in range(2):
        with pytest.raises(CorruptRecordError):
            state.drain(10)
        assert state.position(TP) == 5
    state.seek(TP, 8)
    assert state.fetchable() == {TP: 8}


def test_a_partition_is_fetched_again_when_half_its_last_response_is_left():
    state = assigned()
    fetcher(state)._handle_partition(TP, response(0, 100, high_watermark=1000),
                                     sent_from(state))
    assert state.drain(50) and state.fetchable(low_water=10, behind_only=True) == {}
    assert not state.runs_low(TP, 10)
    assert state.drain(1) and state.runs_low(TP, 10)  # 49 of the 100 left
    assert state.fetchable(low_water=10, behind_only=True) == {TP: 100}


def test_a_partitions_first_fetch_asks_for_a_part_of_max_partition_fetch_bytes():
    """The first Fetch of a partition (since assigned or sought) asks for
    max_partition_fetch_bytes // FIRST_FETCH_DIVISOR, so that its first records can be
    decoded while the next, full Fetch is on its way; later ones ask for all of it."""
    import trio

    from client.consumer.fetcher import FIRST_FETCH_DIVISOR

    asked = []

    class Conn:
        def version_for(self, api):
            return 12

        async def request(self, api, body, version=None, timeout_ms=None):
            asked.append(body["topics"][0]["partitions"][0]["partition_max_bytes"])
            return Container(body=Container(error_code=0, responses=[Container(
                topic=TP.topic, partitions=[response(len(asked) * 10 - 10, 10, 1000)])]))

    class Pool:
        async def get(self, node_id):
            return Conn()

    state = assigned()
    f = Fetcher(Pool(), None, check_config("consumer", max_partition_fetch_bytes=80_000),
                state)  # type: ignore[arg-type]

    async def fetch_twice():
        for _ in range(2):
            await f._fetch_from(0, sent_from(state), 0)
            assert state.drain(100)
    trio.run(fetch_twice)
    assert asked == [80_000 // FIRST_FETCH_DIVISOR, 80_000]
    state.seek(TP, 20)
    trio.run(f._fetch_from, 0, sent_from(state), 0)
    assert asked[-1] == 80_000 // FIRST_FETCH_DIVISOR
