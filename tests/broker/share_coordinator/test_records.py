"""__share_group_state records and the persister's request bodies: what is written reads
back as the same state, and a request built for a remote coordinator is one it parses."""

import uuid

import pytest

from broker.share_coordinator import records
from broker.share_coordinator.state import (
    ACKNOWLEDGED, ARCHIVED, SharePartitionKey, ShareGroupOffset, StateBatch)
from protocol import messages as m
from protocol.errors import DecodeError, ErrorCode

KEY = SharePartitionKey("orders", uuid.UUID(int=99), 4)
STATE = ShareGroupOffset(3, 2, 7, 100, (StateBatch(100, 104, ACKNOWLEDGED, 1),
                                        StateBatch(105, 105, ARCHIVED, 5)))


@pytest.mark.parametrize("snapshot", [True, False])
def test_a_record_reads_back_as_written(snapshot):
    key, value = records.encode(KEY, STATE, snapshot)
    back_key, back, was_snapshot = records.decode(key, value)
    assert (back_key, was_snapshot) == (KEY, snapshot)
    # an update carries no state epoch (the snapshot's holds): everything else survives
    assert back == (STATE if snapshot else ShareGroupOffset(3, 0, 7, 100, STATE.state_batches))


def test_snapshot_and_update_keys_carry_kafkas_record_types():
    assert records.encode(KEY, STATE, True)[0][:2] == b"\x00\x00"
    assert records.encode(KEY, STATE, False)[0][:2] == b"\x00\x01"


def test_a_tombstone_and_an_unknown_record_type():
    key, value = records.encode(KEY, None, True)
    assert value is None and records.decode(key, None) == (KEY, None, True)
    assert records.decode(b"\x00\x07" + key[2:], value) is None
    with pytest.raises(DecodeError):
        records.decode(b"\x00", None)


@pytest.mark.parametrize("api_key,args", [
    (m.INITIALIZE_SHARE_GROUP_STATE, (1, 50)),
    (m.READ_SHARE_GROUP_STATE, (3,)),
    (m.WRITE_SHARE_GROUP_STATE, (1, 3, 50, [{"first_offset": 50, "last_offset": 51,
                                             "delivery_state": 2, "delivery_count": 1}])),
    (m.DELETE_SHARE_GROUP_STATE, ()),
    (m.READ_SHARE_GROUP_STATE_SUMMARY, (3,)),
])
def test_persister_requests_parse_as_their_declarations_say(api_key, args):
    body = m.request_body(api_key, 0, records.request_fields(api_key, KEY, *args))
    assert body.group_id == "orders"
    (topic,) = body.topics
    assert topic.topic_id == KEY.topic_id and topic.partitions[0].partition == 4


def test_a_read_answer_comes_back_as_the_coordinator_would_give_it():
    response_decl = m.ALL_APIS[m.READ_SHARE_GROUP_STATE].response
    batches = [{"first_offset": 5, "last_offset": 6, "delivery_state": 0, "delivery_count": 2}]
    raw = response_decl.build({"results": [{"topic_id": KEY.topic_id, "partitions": [{
        "partition": 4, "error_code": 0, "state_epoch": 1, "start_offset": 5,
        "state_batches": batches}]}]}, 0)
    parsed = response_decl.parse(raw, 0)
    assert records.response_result(m.READ_SHARE_GROUP_STATE, parsed) == {
        "error_code": ErrorCode.NONE, "state_epoch": 1, "start_offset": 5,
        "state_batches": batches}
    assert records.response_result(m.WRITE_SHARE_GROUP_STATE, {"results": []}) == {
        "error_code": ErrorCode.UNKNOWN_SERVER_ERROR}
