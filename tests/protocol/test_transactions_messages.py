"""Issue 25's wire formats: the transaction APIs (24-28, 61, 65, 66), declared and pending,
the __transaction_state records, and the end-transaction markers of control batches.

Every request and response round-trips at every declared version, through our client and
server connections, with a realistic body and with every field set; the records and the
markers round-trip through their encode and decode functions. The golden bytes are written
out by hand from Kafka's encoding rules (int16-length strings and int32-length arrays up to
a message's first flexible version, compact ones and a tagged-field section ending every
struct from it on), so the layout is checked by something other than our own encoder.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any, Callable

import pytest

from protocol import versions
from protocol.connection import ClientConnection, ServerConnection
from protocol.control_records import (
    ControlRecordType, EndTransactionMarker, decode_control_type, decode_end_txn_marker,
    encode_control_key, end_txn_marker_batch,
)
from protocol.errors import DecodeError
from protocol.messages import ALL_APIS, APIS, PENDING_APIS, transaction_log, transactions
from protocol.messages.transaction_log import TransactionState
from protocol.record_errors import InvalidRecordError
from protocol.records import decode_batch
from tests.protocol.samples import _sample

ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS, TXN_OFFSET_COMMIT = 24, 25, 26, 27, 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
TXN_APIS = {key: ALL_APIS[key] for key in (
    ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS, TXN_OFFSET_COMMIT,
    DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS)}


def _cases():
    for key, api in sorted(TXN_APIS.items()):
        high = api.request.versions.high
        assert high is not None
        for v in range(api.request.versions.low, high + 1):
            yield pytest.param(key, v, id=f"{api.name}-v{v}")


# --- the registry -------------------------------------------------------------------------

SERVED = {ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT, WRITE_MARKERS,
          DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS}


def test_the_transaction_apis_are_declared_and_the_served_ones_advertised():
    declared = {key: (api.name, api.request.versions.low, api.request.versions.high)
                for key, api in TXN_APIS.items()}
    assert declared == {
        24: ("AddPartitionsToTxn", 0, 5), 25: ("AddOffsetsToTxn", 0, 4), 26: ("EndTxn", 0, 5),
        27: ("WriteTxnMarkers", 0, 2), 28: ("TxnOffsetCommit", 0, 5),
        61: ("DescribeProducers", 0, 0), 65: ("DescribeTransactions", 0, 0),
        66: ("ListTransactions", 0, 2)}
    assert TXN_APIS.keys() & APIS.keys() == SERVED
    assert TXN_APIS.keys() - SERVED <= PENDING_APIS.keys()
    advertised = {key: high for key, _low, high in versions.advertised()}
    assert advertised.keys() & TXN_APIS.keys() == SERVED
    # EndTxn v5 is transaction.version 2's (an epoch bump per transaction): not served
    assert advertised[END_TXN] == 4 and versions.implemented(END_TXN) == (0, 4)
    assert all(versions.implemented(key) is None for key in TXN_APIS.keys() - SERVED)
    assert versions.implemented(WRITE_MARKERS) == (0, 2)


# --- realistic bodies ---------------------------------------------------------------------

def _add_partitions(v: int) -> tuple[dict, dict]:
    topics = [{"name": "orders", "partitions": [0, 2]}, {"name": "payments", "partitions": [1]}]
    if v <= 3:  # a producer adds partitions to its own transaction
        return ({"v3_and_below_transactional_id": "checkout-1", "v3_and_below_producer_id": 4001,
                 "v3_and_below_producer_epoch": 3, "v3_and_below_topics": topics},
                {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
                    {"name": "orders", "results_by_partition": [
                        {"partition_index": 0, "partition_error_code": 0},
                        {"partition_index": 2, "partition_error_code": 0}]},
                    {"name": "payments", "results_by_partition": [
                        {"partition_index": 1, "partition_error_code": 3}]}]})
    # a partition leader asks the coordinator about two transactions at once
    return ({"transactions": [
                {"transactional_id": "checkout-1", "producer_id": 4001, "producer_epoch": 3,
                 "verify_only": True, "topics": topics[:1]},
                {"transactional_id": "checkout-2", "producer_id": 4002, "producer_epoch": 0,
                 "verify_only": True, "topics": topics[1:]}]},
            {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": [
                {"transactional_id": "checkout-1", "topic_results": [
                    {"name": "orders", "results_by_partition": [
                        {"partition_index": 0, "partition_error_code": 0},
                        {"partition_index": 2, "partition_error_code": 0}]}]},
                {"transactional_id": "checkout-2", "topic_results": [
                    {"name": "payments", "results_by_partition": [
                        {"partition_index": 1, "partition_error_code": 48}]}]}]})


def _add_offsets(v: int) -> tuple[dict, dict]:
    return ({"transactional_id": "checkout-1", "producer_id": 4001, "producer_epoch": 3,
             "group_id": "billing"},
            {"throttle_time_ms": 0, "error_code": 0})


def _end_txn(v: int) -> tuple[dict, dict]:
    response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0}
    if v >= 5:  # the coordinator bumped the epoch at the transaction's end
        response.update(producer_id=4001, producer_epoch=4)
    return ({"transactional_id": "checkout-1", "producer_id": 4001, "producer_epoch": 3,
             "committed": True}, response)


def _write_markers(v: int) -> tuple[dict, dict]:
    marker: dict[str, Any] = {
        "producer_id": 4001, "producer_epoch": 3, "transaction_result": True,
        "topics": [{"name": "orders", "partition_indexes": [0, 2]}], "coordinator_epoch": 7}
    if v >= 2:
        marker["transaction_version"] = 2
    aborted = dict(marker, producer_id=4002, transaction_result=False,
                   topics=[{"name": "payments", "partition_indexes": [1]}])
    return ({"markers": [marker, aborted]},
            {"markers": [
                {"producer_id": 4001, "topics": [{"name": "orders", "partitions": [
                    {"partition_index": 0, "error_code": 0},
                    {"partition_index": 2, "error_code": 0}]}]},
                {"producer_id": 4002, "topics": [{"name": "payments", "partitions": [
                    {"partition_index": 1, "error_code": 6}]}]}]})


def _txn_offset_commit(v: int) -> tuple[dict, dict]:
    request: dict[str, Any] = {
        "transactional_id": "checkout-1", "group_id": "billing", "producer_id": 4001,
        "producer_epoch": 3, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": 1200, "committed_metadata": None},
            {"partition_index": 2, "committed_offset": 87, "committed_metadata": "batch 9"}]}]}
    if v >= 2:
        request["topics"][0]["partitions"][0]["committed_leader_epoch"] = 5
    if v >= 3:  # the consumer's group membership, so that a zombie is fenced
        request.update(generation_id=12, member_id="consumer-1-8e3f", group_instance_id="host-a")
    return (request, {"throttle_time_ms": 0, "topics": [{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 2, "error_code": 22}]}]})


def _describe_producers(v: int) -> tuple[dict, dict]:
    return ({"topics": [{"name": "orders", "partition_indexes": [0, 1]}]},
            {"throttle_time_ms": 0, "topics": [{"name": "orders", "partitions": [
                {"partition_index": 0, "error_code": 0, "error_message": None,
                 "active_producers": [
                     {"producer_id": 4001, "producer_epoch": 3, "last_sequence": 41,
                      "last_timestamp": 1_700_000_000_000, "coordinator_epoch": 7,
                      "current_txn_start_offset": 1180},
                     {"producer_id": 9, "producer_epoch": 0, "last_sequence": 2,
                      "last_timestamp": 1_700_000_000_500, "coordinator_epoch": -1,
                      "current_txn_start_offset": -1}]},
                {"partition_index": 1, "error_code": 6,
                 "error_message": "not the leader", "active_producers": []}]}]})


def _describe_transactions(v: int) -> tuple[dict, dict]:
    return ({"transactional_ids": ["checkout-1", "gone"]},
            {"throttle_time_ms": 0, "transaction_states": [
                {"error_code": 0, "transactional_id": "checkout-1",
                 "transaction_state": TransactionState.ONGOING.kafka_name,
                 "transaction_timeout_ms": 60000, "transaction_start_time_ms": 1_700_000_000_000,
                 "producer_id": 4001, "producer_epoch": 3,
                 "topics": [{"topic": "orders", "partitions": [0, 2]}]},
                {"error_code": 105, "transactional_id": "gone", "transaction_state": "",
                 "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                 "producer_id": -1, "producer_epoch": -1, "topics": []}]})


def _list_transactions(v: int) -> tuple[dict, dict]:
    request: dict[str, Any] = {"state_filters": ["Ongoing", "Sideways"],
                               "producer_id_filters": [4001, 4002]}
    if v >= 1:
        request["duration_filter"] = 30_000
    if v >= 2:
        request["transactional_id_pattern"] = "checkout-.*"
    return (request, {"throttle_time_ms": 0, "error_code": 0,
                      "unknown_state_filters": ["Sideways"], "transaction_states": [
                          {"transactional_id": "checkout-1", "producer_id": 4001,
                           "transaction_state": "Ongoing"}]})


BODIES: dict[int, Callable[[int], tuple[dict, dict]]] = {
    ADD_PARTITIONS: _add_partitions, ADD_OFFSETS: _add_offsets, END_TXN: _end_txn,
    WRITE_MARKERS: _write_markers, TXN_OFFSET_COMMIT: _txn_offset_commit,
    DESCRIBE_PRODUCERS: _describe_producers, DESCRIBE_TRANSACTIONS: _describe_transactions,
    LIST_TRANSACTIONS: _list_transactions,
}


def _exchange(key: int, version: int, request: dict, response: dict):
    client = ClientConnection("txn", apis=TXN_APIS)
    server = ServerConnection(apis=TXN_APIS)
    cid, raw = client.send_request(key, version, request)
    server.receive_data(raw)
    got_request = server.next_request()
    assert got_request is not None and got_request.api_key == key and got_request.api_version == version
    client.receive_data(server.encode_response(got_request, response))
    got_response = client.next_response()
    assert got_response is not None and got_response.correlation_id == cid and got_response.api_version == version
    return got_request.body, got_response.body


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _holds(got: Any, sent: Any, path: str = "") -> None:
    """Every field sent came back with its value (the decoded side also has the defaults of
    the fields left out)."""
    if isinstance(sent, dict):
        for name, value in sent.items():
            _holds(got[name], value, f"{path}.{name}")
    elif isinstance(sent, list):
        assert len(got) == len(sent), path
        for i, (g, s) in enumerate(zip(got, sent)):
            _holds(g, s, f"{path}[{i}]")
    else:
        assert got == sent, path


@pytest.mark.parametrize("key,version", list(_cases()))
def test_a_realistic_exchange_round_trips(key: int, version: int):
    api = TXN_APIS[key]
    request, response = BODIES[key](version)
    got_request, got_response = _exchange(key, version, request, response)
    _holds(got_request, request)
    _holds(got_response, response)
    assert api.request.build(got_request, version) == api.request.build(request, version)
    assert api.response.build(got_response, version) == api.response.build(response, version)


@pytest.mark.parametrize("key,version", list(_cases()))
def test_every_field_set_round_trips(key: int, version: int):
    api = TXN_APIS[key]
    request = _sample(api.request.fields, version, itertools.count())
    response = _sample(api.response.fields, version, itertools.count(1000))
    got_request, got_response = _exchange(key, version, request, response)
    assert _plain(got_request) == request and _plain(got_response) == response


@pytest.mark.parametrize("key,version", list(_cases()))
def test_every_truncation_is_a_decode_error(key: int, version: int):
    api = TXN_APIS[key]
    for message, body in zip((api.request, api.response), BODIES[key](version)):
        encoded = message.build(body, version)
        for cut in range(len(encoded)):
            with pytest.raises(DecodeError):
                message.parse(encoded[:cut], version)


def test_versions_decide_which_fields_travel():
    """A field is on the wire only in the versions that have it: AddPartitionsToTxn's two
    forms, EndTxn v5's producer id and epoch, the newer optional filters."""
    req = transactions.AddPartitionsToTxnRequest
    v3, v4 = (_add_partitions(3)[0], _add_partitions(4)[0])
    assert "transactions" not in req.parse(req.build(v3, 3), 3)
    assert "v3_and_below_topics" not in req.parse(req.build(v4, 4), 4)
    end = transactions.EndTxnResponse
    assert end.build({"producer_id": 4001, "producer_epoch": 4}, 4) == b"\x00" * 6 + b"\x00"
    assert end.parse(end.build({}, 5), 5).producer_id == -1  # Kafka's default
    listing = transactions.ListTransactionsRequest
    assert listing.parse(listing.build({}, 2), 2).transactional_id_pattern is None
    assert listing.parse(listing.build({}, 1), 1).duration_filter == -1


# --- golden bytes, by hand ----------------------------------------------------------------

def _str(s: str) -> bytes:
    """STRING: int16 length, then UTF-8."""
    return struct.pack(">h", len(s)) + s.encode()


def _cstr(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: uvarint length + 1 (0 for null), then UTF-8."""
    if s is None:
        return b"\x00"
    data = s.encode()
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


def _i16(*values: int) -> bytes:
    return b"".join(struct.pack(">h", v) for v in values)


def _i32(*values: int) -> bytes:
    return b"".join(struct.pack(">i", v) for v in values)


def _i64(*values: int) -> bytes:
    return b"".join(struct.pack(">q", v) for v in values)


TAGS = b"\x00"  # an empty tagged-field section


def test_add_partitions_to_txn_request_bytes_in_all_three_layouts():
    req = transactions.AddPartitionsToTxnRequest
    client = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 7,
              "v3_and_below_producer_epoch": 2,
              "v3_and_below_topics": [{"name": "t", "partitions": [0, 1]}]}
    v2 = _str("tx") + _i64(7) + _i16(2) + _i32(1) + _str("t") + _i32(2) + _i32(0, 1)
    assert req.build(client, 2) == v2
    v3 = (_cstr("tx") + _i64(7) + _i16(2)
          + b"\x02" + _cstr("t") + b"\x03" + _i32(0, 1) + TAGS   # one topic, two partitions
          + TAGS)
    assert req.build(client, 3) == v3
    broker = {"transactions": [{"transactional_id": "tx", "producer_id": 7,
                                "producer_epoch": 2, "verify_only": True,
                                "topics": [{"name": "t", "partitions": [0]}]}]}
    v4 = (b"\x02" + _cstr("tx") + _i64(7) + _i16(2) + b"\x01"    # verify_only
          + b"\x02" + _cstr("t") + b"\x02" + _i32(0) + TAGS      # its one topic
          + TAGS                                                 # the transaction's
          + TAGS)                                                # the request's
    assert req.build(broker, 4) == v4 == req.build(broker, 5)
    assert req.parse(v2, 2).v3_and_below_topics[0].partitions == [0, 1]
    assert req.parse(v4, 4).transactions[0].verify_only is True


def test_end_txn_and_write_txn_markers_bytes():
    end = transactions.EndTxnResponse
    assert end.build({"error_code": 0, "producer_id": 7, "producer_epoch": 3}, 5) == (
        _i32(0) + _i16(0) + _i64(7) + _i16(3) + TAGS)
    markers = transactions.WriteTxnMarkersRequest
    body = {"markers": [{"producer_id": 7, "producer_epoch": 3, "transaction_result": False,
                         "topics": [{"name": "t", "partition_indexes": [4]}],
                         "coordinator_epoch": 9, "transaction_version": 2}]}
    assert markers.build(body, 2) == (
        b"\x02" + _i64(7) + _i16(3) + b"\x00"                       # abort
        + b"\x02" + _cstr("t") + b"\x02" + _i32(4) + TAGS
        + _i32(9) + b"\x02"                                         # transaction_version
        + TAGS + TAGS)
    assert markers.build(body, 0) == (
        _i32(1) + _i64(7) + _i16(3) + b"\x00" + _i32(1) + _str("t") + _i32(1) + _i32(4)
        + _i32(9))


# --- __transaction_state records ----------------------------------------------------------

def _state(**overrides: Any) -> dict:
    return {"producer_id": 4001, "producer_epoch": 3, "transaction_timeout_ms": 60000,
            "transaction_status": TransactionState.ONGOING,
            "transaction_partitions": [{"topic": "orders", "partition_ids": [0, 2]}],
            "transaction_last_update_timestamp_ms": 1_700_000_000_500,
            "transaction_start_timestamp_ms": 1_700_000_000_000, **overrides}


def test_transaction_log_key_bytes_and_round_trip():
    key = transaction_log.encode_key("checkout-1")
    assert key == _i16(0) + _str("checkout-1")
    assert transaction_log.decode_key(key) == "checkout-1"
    assert transaction_log.decode_key(_i16(1) + _str("x")) is None  # a key we do not know
    with pytest.raises(DecodeError):
        transaction_log.decode_key(b"\x00")
    with pytest.raises(DecodeError):
        transaction_log.decode_key(key[:-1])


def test_transaction_log_value_v0_bytes():
    value = transaction_log.encode_value(_state(), version=0)
    assert value == (_i16(0) + _i64(4001) + _i16(3) + _i32(60000) + b"\x01"
                     + _i32(1) + _str("orders") + _i32(2) + _i32(0, 2)
                     + _i64(1_700_000_000_500, 1_700_000_000_000))
    got = transaction_log.decode_value(value)
    _holds(got, _state())
    assert TransactionState(got.transaction_status) is TransactionState.ONGOING


def test_transaction_log_value_v1_bytes_carry_the_tagged_fields_that_are_set():
    empty = _state(transaction_status=TransactionState.EMPTY, transaction_partitions=None,
                   client_transaction_version=2, next_producer_id=4002)
    value = transaction_log.encode_value(empty)  # v1 unless told otherwise
    assert value == (_i16(1) + _i64(4001) + _i16(3) + _i32(60000) + b"\x00"
                     + b"\x00"                                   # null partitions
                     + _i64(1_700_000_000_500, 1_700_000_000_000)
                     + b"\x02"                                   # two tagged fields:
                     + b"\x01\x08" + _i64(4002)                  # tag 1, next_producer_id
                     + b"\x02\x02" + _i16(2))                    # tag 2, client version
    got = transaction_log.decode_value(value)
    assert got.transaction_partitions is None and got.previous_producer_id == -1
    assert (got.next_producer_id, got.client_transaction_version) == (4002, 2)
    # at their defaults they are left out
    assert transaction_log.encode_value(_state())[-1:] == TAGS


@pytest.mark.parametrize("version", [0, 1])
def test_every_state_round_trips(version: int):
    for state in TransactionState:
        body = _state(transaction_status=state)
        got = transaction_log.decode_value(transaction_log.encode_value(body, version))
        assert got.transaction_status == state
        _holds(got, body)


def test_transaction_log_tombstones_and_bad_values():
    assert transaction_log.decode_value(None) is None
    for bad in (b"\x00", _i16(2) + transaction_log.encode_value(_state())[2:],
                transaction_log.encode_value(_state())[:-1]):
        with pytest.raises(DecodeError):
            transaction_log.decode_value(bad)


def test_transaction_states_are_kafkas_ids_and_names():
    assert [(s.value, s.kafka_name) for s in TransactionState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]


# --- end-transaction markers --------------------------------------------------------------

def test_marker_key_and_value_bytes():
    commit = EndTransactionMarker(committed=True, coordinator_epoch=5)
    assert commit.key() == b"\x00\x00\x00\x01" and commit.value() == b"\x00\x00\x00\x00\x00\x05"
    abort = EndTransactionMarker(committed=False, coordinator_epoch=258)
    assert abort.key() == b"\x00\x00\x00\x00" and abort.value() == b"\x00\x00\x00\x00\x01\x02"
    for marker in (commit, abort):
        assert decode_end_txn_marker(marker.key(), marker.value()) == marker


def test_markers_of_a_newer_version_are_read_as_v0():
    """Kafka's rule: later versions may only add fields after the v0 ones."""
    marker = decode_end_txn_marker(b"\x00\x01\x00\x01", b"\x00\x01\x00\x00\x00\x07extra")
    assert marker == EndTransactionMarker(committed=True, coordinator_epoch=7)


def test_what_is_no_marker_is_refused():
    ok_value = EndTransactionMarker(True, 1).value()
    for key, value in ((encode_control_key(ControlRecordType.LEADER_CHANGE), ok_value),
                       (b"\x00\x00\x00\x09", ok_value),     # a type we do not know
                       (b"\xff\xff\x00\x01", ok_value),     # a negative version
                       (b"\x00\x00\x00", ok_value),         # a short key
                       (None, ok_value),
                       (b"\x00\x00\x00\x01", ok_value[:5]),  # a short value
                       (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01"),
                       (b"\x00\x00\x00\x01", None)):
        with pytest.raises(InvalidRecordError):
            decode_end_txn_marker(key, value)
    assert decode_control_type(b"\x00\x00\x00\x02") is ControlRecordType.LEADER_CHANGE
    assert decode_control_type(b"\x00\x00\x00\x09") == 9


def test_a_marker_batch_is_a_transactional_control_batch_of_one_record():
    marker = EndTransactionMarker(committed=False, coordinator_epoch=11)
    batch = end_txn_marker_batch(marker, producer_id=4001, producer_epoch=3,
                                 timestamp_ms=1_700_000_000_000, base_offset=42,
                                 partition_leader_epoch=6)
    header, records = decode_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.base_offset, header.partition_leader_epoch, header.producer_id,
            header.producer_epoch, header.base_sequence) == (42, 6, 4001, 3, -1)
    assert len(records) == 1 and records[0].offset == 42 and records[0].headers == []
    assert records[0].timestamp == 1_700_000_000_000
    assert decode_end_txn_marker(records[0].key, records[0].value) == marker
    # attributes: transactional (bit 4) and control (bit 5), no compression, create time
    assert struct.unpack_from(">h", batch, 21)[0] == 0b110000
