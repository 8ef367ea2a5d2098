"""`minibroker dump-log` on what transactions write: a data partition's transactional
batches and their commit and abort markers, and __transaction_state with
--transaction-log-decoder (Kafka's transaction log formatting)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

from cli.main import build_parser
from protocol.control_records import EndTransactionMarker, end_txn_marker_batch
from protocol.messages import transaction_log as tl
from protocol.records import Record, encode_batch
from tools.dump_log import dump, main

T0 = 1_700_000_000_000


def run_dump(path: Path, **options) -> list[str]:
    out = io.StringIO()
    dump([str(path)], out=out, **options)
    return out.getvalue().splitlines()


def write_segment(directory: Path, *batches: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{0:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


def txn_partition_batches() -> list[bytes]:
    data = encode_batch([Record(0, T0, b"k", b"v"), Record(1, T0, None, b"w")],
                        producer_id=4000, producer_epoch=2, base_sequence=0,
                        is_transactional=True)
    commit = end_txn_marker_batch(EndTransactionMarker(True, 7), producer_id=4000,
                                  producer_epoch=2, timestamp_ms=T0 + 1, base_offset=2)
    abort = end_txn_marker_batch(EndTransactionMarker(False, 8), producer_id=4001,
                                 producer_epoch=0, timestamp_ms=T0 + 2, base_offset=3)
    return [data, commit, abort]


def test_markers_of_a_data_partition(tmp_path):
    path = write_segment(tmp_path / "orders-0", *txn_partition_batches())
    lines = run_dump(path, print_data_log=True)[2:]
    assert [line.split(" position: ")[0].split(" isTransactional: ")[1]
            for line in lines if not line.startswith("|")] == [
        "true isControl: false", "true isControl: true", "true isControl: true"]
    records = [line for line in lines if line.startswith("|")]
    assert records[0].endswith("headerKeys: [] key: k payload: v")
    assert records[2] == (f"| offset: 2 CreateTime: {T0 + 1} keySize: 4 valueSize: 6"
                          " sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert records[3] == (f"| offset: 3 CreateTime: {T0 + 2} keySize: 4 valueSize: 6"
                          " sequence: -1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 8")
    controls = [json.loads(line).get("control") for line in run_dump(path, print_data_log=True,
                                                                    as_json=True)]
    assert [c for c in controls if c] == ["endTxnMarker: COMMIT coordinatorEpoch: 7",
                                          "endTxnMarker: ABORT coordinatorEpoch: 8"]


def txn_value(status: tl.TransactionState, partitions, version: int = 1) -> bytes:
    return tl.encode_value({
        "producer_id": 4000, "previous_producer_id": -1, "next_producer_id": -1,
        "producer_epoch": 2, "transaction_timeout_ms": 60_000,
        "transaction_status": status,
        "transaction_partitions": partitions,
        "transaction_last_update_timestamp_ms": T0 + 5,
        "transaction_start_timestamp_ms": T0, "client_transaction_version": 0,
    }, version)


def transaction_state_batch() -> bytes:
    ongoing = [{"topic": "orders", "partition_ids": [1, 0]},
               {"topic": "payments", "partition_ids": [2]}]
    return encode_batch([
        Record(0, T0, tl.encode_key("tx-1"), txn_value(tl.TransactionState.EMPTY, None, 0)),
        Record(1, T0, tl.encode_key("tx-1"), txn_value(tl.TransactionState.ONGOING, ongoing)),
        Record(2, T0, tl.encode_key("tx-1"),
               txn_value(tl.TransactionState.PREPARE_COMMIT, ongoing)),
        Record(3, T0, tl.encode_key("tx-old"), None),
        Record(4, T0, struct.pack(">h", 5) + b"??", b"\x00\x00"),
    ])


def test_transaction_log_decoder(tmp_path):
    path = write_segment(tmp_path / "__transaction_state-3", transaction_state_batch())
    records = [line.split(" headerKeys: [] ", 1)[1]
               for line in run_dump(path, transaction_log_decoder=True) if line.startswith("|")]
    rest = f"txnLastUpdateTimestamp={T0 + 5},txnTimeoutMs=60000"
    assert records == [
        "key: transaction_metadata::transactionalId=tx-1 payload: "
        f"producerId:4000,producerEpoch:2,state=Empty,partitions=[],{rest}",
        "key: transaction_metadata::transactionalId=tx-1 payload: "
        "producerId:4000,producerEpoch:2,state=Ongoing,"
        f"partitions=[orders-0,orders-1,payments-2],{rest}",
        "key: transaction_metadata::transactionalId=tx-1 payload: "
        "producerId:4000,producerEpoch:2,state=PrepareCommit,"
        f"partitions=[orders-0,orders-1,payments-2],{rest}",
        "key: transaction_metadata::transactionalId=tx-old payload: <DELETE>",
        "key: unknown::version=5",
    ]


def test_transaction_log_decoder_json(tmp_path):
    path = write_segment(tmp_path / "__transaction_state-3", transaction_state_batch())
    objs = [json.loads(line)
            for line in run_dump(path, transaction_log_decoder=True, as_json=True)]
    records = [o for o in objs if o["type"] == "record"]
    assert records[1]["key"] == {"type": "transaction_metadata", "transactionalId": "tx-1"}
    assert records[1]["payload"] == {
        "producerId": 4000, "previousProducerId": -1, "nextProducerId": -1,
        "producerEpoch": 2, "state": "Ongoing",
        "partitions": ["orders-0", "orders-1", "payments-2"], "txnTimeoutMs": 60000,
        "txnStartTimestamp": T0, "txnLastUpdateTimestamp": T0 + 5,
        "clientTransactionVersion": 0}
    assert records[3]["payload"] is None


def test_without_the_decoder_the_records_are_raw(tmp_path):
    path = write_segment(tmp_path / "__transaction_state-3", transaction_state_batch())
    assert not any("transaction_metadata" in line
                   for line in run_dump(path, print_data_log=True))


def test_cli_flag():
    args = build_parser().parse_args(["dump-log", "d", "--transaction-log-decoder"])
    assert args.transaction_log_decoder and args.func is main
