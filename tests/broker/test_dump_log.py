"""`minibroker dump-log`: segment files built with protocol.records.encode_batch, dumped
and compared line by line, including __consumer_offsets records, a torn tail and a
corrupt batch."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import build_parser
from tools.dump_log import dump, main
from protocol.codecs import Codec
from protocol.consumer_protocol import (
    Assignment, Subscription, encode_assignment, encode_subscription,
)
from protocol.messages import offsets_topic as ot
from protocol.records import Record, encode_batch, parse_batch_header, refresh_crc

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
SEGMENT = "00000000000000000000.log"


def run_dump(*paths, **options) -> list[str]:
    out = io.StringIO()
    dump([str(p) for p in paths], out=out, **options)
    return out.getvalue().splitlines()


def crc(batch: bytes) -> int:
    return parse_batch_header(batch).crc


def write_segment(directory: Path, base_offset: int, *batches: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


def batch_line(batch: bytes, position: int, *, codec: str = "none", count: int,
               base_offset: int, base_sequence: int = -1, last_sequence: int = -1,
               producer_id: int = -1, producer_epoch: int = -1, leader_epoch: int = -1,
               timestamp: str, valid: bool = True) -> str:
    return (f"baseOffset: {base_offset} lastOffset: {base_offset + count - 1} count: {count}"
            f" baseSequence: {base_sequence} lastSequence: {last_sequence}"
            f" producerId: {producer_id} producerEpoch: {producer_epoch}"
            f" partitionLeaderEpoch: {leader_epoch} isTransactional: false isControl: false"
            f" position: {position} {timestamp} size: {len(batch)} magic: 2"
            f" compresscodec: {codec} crc: {crc(batch)} isvalid: {'true' if valid else 'false'}")


# --- a normal topic ----------------------------------------------------------------

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def codec_batches() -> list[bytes]:
    """One two-record batch per codec, offsets 0-9: a keyed record with headers, then a
    record with a null key."""
    batches = []
    for i, codec in enumerate(CODECS):
        base = 2 * i
        batches.append(encode_batch([
            Record(base, T0 + base, f"key-{base}".encode(), f"value {base}".encode(),
                   [("source", b"web"), ("trace", b"1")]),
            Record(base + 1, T0 + base + 1, None, f"value {base + 1}".encode(), []),
        ], base_offset=base, compression=codec, partition_leader_epoch=0))
    return batches


def test_every_codec_batch_lines(tmp_path):
    batches = codec_batches()
    path = write_segment(tmp_path / "orders-0", 0, *batches)
    lines = run_dump(path)
    expected = [f"Dumping {path}", "Log starting offset: 0"]
    pos = 0
    for i, (b, codec) in enumerate(zip(batches, CODECS)):
        expected.append(batch_line(b, pos, codec=codec.name.lower(), count=2, base_offset=2 * i,
                                   leader_epoch=0, timestamp=f"CreateTime: {T0 + 2 * i + 1}"))
        pos += len(b)
    assert lines == expected


def test_every_codec_records_with_print_data_log(tmp_path):
    path = write_segment(tmp_path / "orders-0", 0, *codec_batches())
    records = [line for line in run_dump(path, print_data_log=True) if line.startswith("|")]
    expected = []
    for base in range(0, 10, 2):
        expected += [
            f"| offset: {base} CreateTime: {T0 + base} keySize: {len(f'key-{base}')}"
            f" valueSize: {len(f'value {base}')} sequence: -1 headerKeys: [source,trace]"
            f" key: key-{base} payload: value {base}",
            f"| offset: {base + 1} CreateTime: {T0 + base + 1} keySize: -1"
            f" valueSize: {len(f'value {base + 1}')} sequence: -1 headerKeys: []"
            f" payload: value {base + 1}",
        ]
    assert records == expected


def test_producer_fields_sequences_and_log_append_time(tmp_path):
    idempotent = encode_batch([(o, T0, b"k", b"v", []) for o in range(3)], producer_id=4000,
                              producer_epoch=2, base_sequence=7, partition_leader_epoch=5)
    append_time = encode_batch([(3, T0 + 50, None, b"x", []), (4, T0 + 60, None, None, [])],
                               base_offset=3, timestamp_type=1)
    path = write_segment(tmp_path / "t-0", 0, idempotent, append_time)
    assert run_dump(path, print_data_log=True)[2:] == [
        batch_line(idempotent, 0, count=3, base_offset=0, base_sequence=7, last_sequence=9,
                   producer_id=4000, producer_epoch=2, leader_epoch=5,
                   timestamp=f"CreateTime: {T0}"),
        f"| offset: 0 CreateTime: {T0} keySize: 1 valueSize: 1 sequence: 7 headerKeys: []"
        f" key: k payload: v",
        f"| offset: 1 CreateTime: {T0} keySize: 1 valueSize: 1 sequence: 8 headerKeys: []"
        f" key: k payload: v",
        f"| offset: 2 CreateTime: {T0} keySize: 1 valueSize: 1 sequence: 9 headerKeys: []"
        f" key: k payload: v",
        batch_line(append_time, len(idempotent), count=2, base_offset=3,
                   timestamp=f"LogAppendTime: {T0 + 60}"),
        # LogAppendTime: every record carries the batch's MaxTimestamp, as in Kafka.
        f"| offset: 3 LogAppendTime: {T0 + 60} keySize: -1 valueSize: 1 sequence: -1"
        f" headerKeys: [] payload: x",
        f"| offset: 4 LogAppendTime: {T0 + 60} keySize: -1 valueSize: -1 sequence: -1"
        f" headerKeys: []",
    ]


def with_attributes(batch: bytes, extra: int) -> bytes:
    """The batch with attribute bits added and its CRC-32C recomputed."""
    out = bytearray(batch)
    attributes = int.from_bytes(out[21:23], "big") | extra
    out[21:23] = attributes.to_bytes(2, "big")
    refresh_crc(out)
    return bytes(out)


def test_control_batch_and_delete_horizon(tmp_path):
    marker = encode_batch([(0, T0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [])],
                          producer_id=9, producer_epoch=1, is_transactional=True,
                          is_control=True)
    # A compacted batch that keeps a tombstone: BaseTimestamp holds the delete horizon.
    compacted = with_attributes(encode_batch([(1, T0 + 86_400_000, b"k", None, [])],
                                             base_offset=1), 0x40)
    path = write_segment(tmp_path / "t-0", 0, marker, compacted)
    lines = run_dump(path, print_data_log=True)[2:]
    assert " isTransactional: true isControl: true position: 0 " in lines[0]
    assert lines[1] == (f"| offset: 0 CreateTime: {T0} keySize: 4 valueSize: 6 sequence: -1"
                        " headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 5")
    assert (f" isControl: false deleteHorizonMs: {T0 + 86_400_000} position: {len(marker)} "
            in lines[2])
    assert lines[3].endswith(" keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: k")
    horizons = [json.loads(line).get("deleteHorizonMs", "absent")
                for line in run_dump(path, as_json=True)]
    assert horizons == ["absent", None, T0 + 86_400_000]


def test_binary_keys_and_payloads_stay_on_one_line(tmp_path):
    batch = encode_batch([(0, T0, b"a\nb\x00", b"\xff\xfe tail\r\n", [])])
    path = write_segment(tmp_path / "t-0", 0, batch)
    assert run_dump(path, print_data_log=True)[3] == (
        f"| offset: 0 CreateTime: {T0} keySize: 4 valueSize: 9 sequence: -1 headerKeys: []"
        r" key: a\x0ab\x00 payload: \xff\xfe tail\x0d\x0a")


def test_a_directory_dumps_its_segments_in_offset_order(tmp_path):
    part = tmp_path / "orders-0"
    first = encode_batch([(0, T0, None, b"a", [])])
    second = encode_batch([(10, T0, None, b"b", [])], base_offset=10)
    # Written in the "wrong" order, with index files and a deleted segment around them.
    write_segment(part, 10, second)
    write_segment(part, 0, first)
    (part / "00000000000000000000.index").write_bytes(b"\0" * 8)
    (part / "00000000000000000000.timeindex").write_bytes(b"\0" * 12)
    (part / "00000000000000000005.log.deleted").write_bytes(b"junk")
    lines = run_dump(part)
    assert [line for line in lines if not line.startswith("baseOffset")] == [
        f"Dumping {part / SEGMENT}", "Log starting offset: 0",
        f"Dumping {part / '00000000000000000010.log'}", "Log starting offset: 10"]
    assert [line.split()[1] for line in lines if line.startswith("baseOffset")] == ["0", "10"]


# --- __consumer_offsets ------------------------------------------------------------

def group_value(protocol_type: str = "consumer") -> bytes:
    members = [
        {"member_id": "consumer-1-aaa", "group_instance_id": None, "client_id": "consumer-1",
         "client_host": "/127.0.0.1", "rebalance_timeout": 300000, "session_timeout": 45000,
         "subscription": encode_subscription(Subscription(["orders", "payments"])),
         "assignment": encode_assignment(Assignment({"orders": [0, 1], "payments": [2]}))},
        {"member_id": "consumer-2-bbb", "group_instance_id": "static-2",
         "client_id": "consumer-2", "client_host": "/127.0.0.2", "rebalance_timeout": 300000,
         "session_timeout": 45000,
         "subscription": encode_subscription(Subscription(["orders"], version=1)),
         "assignment": encode_assignment(Assignment({"orders": [2]}, user_data=b"\x01\x02"))},
    ]
    if protocol_type != "consumer":
        for m in members:
            m["subscription"], m["assignment"] = b"\x00\x01", b"\xab\xcd"
    return ot.encode_group_value({
        "protocol_type": protocol_type, "generation": 4, "protocol": "range",
        "leader": "consumer-1-aaa", "current_state_timestamp": T0, "members": members})


def offsets_batches() -> list[bytes]:
    return [
        encode_batch([
            (0, T0, ot.encode_offset_key("billing", "orders", 0),
             ot.encode_offset_value(42, 3, "", T0), []),
            (1, T0 + 1, ot.encode_offset_key("billing", "orders", 1),
             ot.encode_offset_value(17, -1, "checkpoint-9", T0 + 1), []),
        ], compression=Codec.LZ4),
        encode_batch([(2, T0 + 2, ot.encode_group_key("billing"), group_value(), [])],
                     base_offset=2),
        encode_batch([
            (3, T0 + 3, ot.encode_group_key("connect-cluster"), group_value("connect"), []),
            (4, T0 + 4, ot.encode_offset_key("billing", "orders", 1), None, []),
            (5, T0 + 5, ot.encode_group_key("old-group"), None, []),
            # A KIP-848 record type (ConsumerGroupMetadataKey is type 3): skipped.
            (6, T0 + 6, b"\x00\x03\x00\x01g", b"\x00\x00", []),
        ], base_offset=3),
    ]


def test_offsets_decoder(tmp_path):
    path = write_segment(tmp_path / "__consumer_offsets-7", 0, *offsets_batches())
    records = [line.split(" headerKeys: [] ", 1)[1]
               for line in run_dump(path, offsets_decoder=True) if line.startswith("|")]
    assignment = "{consumer-1-aaa=[orders-0, orders-1, payments-2],consumer-2-bbb=[orders-2]:0102}"
    subscription = "{consumer-1-aaa=[orders, payments],consumer-2-bbb=[orders]}"
    assert records == [
        "key: offset_commit::group=billing,partition=orders-0"
        " payload: offset=42 leaderEpoch=3 metadata=",
        "key: offset_commit::group=billing,partition=orders-1"
        " payload: offset=17 leaderEpoch=-1 metadata=checkpoint-9",
        "key: group_metadata::group=billing payload: "
        '{"protocolType":"consumer","protocol":"range","generationId":4,'
        f'"assignment":"{assignment}","subscription":"{subscription}"}}',
        "key: group_metadata::group=connect-cluster payload: "
        '{"protocolType":"connect","protocol":"range","generationId":4,'
        '"assignment":"{consumer-1-aaa=abcd,consumer-2-bbb=abcd}",'
        '"subscription":"{consumer-1-aaa=0001,consumer-2-bbb=0001}"}',
        "key: offset_commit::group=billing,partition=orders-1 payload: <DELETE>",
        "key: group_metadata::group=old-group payload: <DELETE>",
        "key: Unknown record type 3 at offset 6, skipping.",
    ]


def test_offsets_decoder_json(tmp_path):
    path = write_segment(tmp_path / "__consumer_offsets-7", 0, *offsets_batches())
    objs = [json.loads(line) for line in run_dump(path, offsets_decoder=True, as_json=True)]
    assert [o["type"] for o in objs] == ["file", "batch", "record", "record", "batch",
                                         "record", "batch"] + ["record"] * 4
    commit = objs[2]
    assert commit["key"] == {"type": "offset_commit", "group": "billing", "topic": "orders",
                             "partition": 0}
    assert commit["payload"] == {"offset": 42, "leaderEpoch": 3, "metadata": "",
                                 "commitTimestamp": T0}
    group = objs[5]["payload"]
    assert (group["protocolType"], group["protocol"], group["generationId"], group["leader"]) == (
        "consumer", "range", 4, "consumer-1-aaa")
    first, second = group["members"]
    assert first["subscription"]["topics"] == ["orders", "payments"]
    assert first["assignment"] == {"version": 0, "userData": None,
                                   "partitions": {"orders": [0, 1], "payments": [2]}}
    assert second["groupInstanceId"] == "static-2"
    assert second["assignment"]["userData"] == "0102"
    assert objs[8]["payload"] is None and objs[8]["valueSize"] == -1  # a tombstone
    assert objs[10]["error"] == "Unknown record type 3 at offset 6, skipping."


# --- torn tails and corruption -----------------------------------------------------

def test_torn_tail_inside_a_header(tmp_path):
    good = codec_batches()[:2]
    torn = codec_batches()[2][:40]
    path = write_segment(tmp_path / "t-0", 0, *good, torn)
    lines = run_dump(path, print_data_log=True)
    assert sum(line.startswith("baseOffset") for line in lines) == 2
    assert sum(line.startswith("|") for line in lines) == 4
    assert lines[-1] == (f"Found 40 invalid bytes at the end of {SEGMENT}: an incomplete batch"
                         " header (40 of 61 bytes); a torn write, or a segment still being"
                         " appended to")


def test_torn_tail_inside_a_batch_body(tmp_path):
    good, nxt = codec_batches()[:2]
    path = write_segment(tmp_path / "t-0", 0, good, nxt[:-5])
    lines = run_dump(path, print_data_log=True)
    assert lines[-1] == (
        f"Found {len(nxt) - 5} invalid bytes at the end of {SEGMENT}: a partial batch at"
        f" position {len(good)} (its header says {len(nxt)} bytes, {len(nxt) - 5} are"
        " present); a torn write, or a segment still being appended to")
    tail = json.loads(run_dump(path, as_json=True)[-1])
    assert tail == {"type": "tail", "file": str(path), "position": len(good),
                    "invalidBytes": len(nxt) - 5, "partial": True, "reason": tail["reason"]}


def test_crc_mismatch_is_reported_and_the_dump_goes_on(tmp_path):
    first, middle, last = codec_batches()[:3]
    broken = bytearray(middle)
    broken[-3] ^= 0xFF  # inside the (gzip) records: the CRC no longer matches
    path = write_segment(tmp_path / "t-0", 0, first, bytes(broken), last)
    lines = run_dump(path, print_data_log=True)
    batch_lines = [line for line in lines if line.startswith("baseOffset")]
    assert [line.endswith("isvalid: true") for line in batch_lines] == [True, False, True]
    i = lines.index(batch_lines[1])
    assert lines[i + 1] == "| records not decoded: the batch CRC does not match"
    assert lines[i + 2] == batch_lines[2]
    assert sum(line.startswith("| offset") for line in lines) == 4  # first and last batch
    objs = [json.loads(line) for line in run_dump(path, print_data_log=True, as_json=True)]
    assert [o["crcValid"] for o in objs if o["type"] == "batch"] == [True, False, True]
    assert [o for o in objs if o["type"] == "error"][0]["baseOffset"] == 2


@pytest.mark.parametrize("field, value, problem", [
    (16, b"\x07", "magic 7, expected 2"),
    (8, (20).to_bytes(4, "big"), "batch length 20 is below 49"),
    (23, (-2).to_bytes(4, "big", signed=True), "lastOffsetDelta -2"),
])
def test_a_broken_header_ends_the_walk(tmp_path, field, value, problem):
    first, second, third = codec_batches()[:3]
    bad = bytearray(second)
    bad[field:field + len(value)] = value
    path = write_segment(tmp_path / "t-0", 0, first, bytes(bad), third)
    lines = run_dump(path)
    assert lines[-1] == (
        f"Found {len(bad) + len(third)} invalid bytes at the end of {SEGMENT}: a corrupt"
        f" batch header at position {len(first)} ({problem}); the rest of the file"
        " cannot be walked")
    assert sum(line.startswith("baseOffset") for line in lines) == 1


def test_empty_segment_and_missing_path(tmp_path, capsys):
    path = write_segment(tmp_path / "t-0", 0)
    assert run_dump(path) == [f"Dumping {path}", "Log starting offset: 0"]
    args = build_parser().parse_args(["dump-log", str(tmp_path / "nope.log")])
    assert main(args) == 1
    assert capsys.readouterr().err == (
        f"minibroker dump-log: {tmp_path / 'nope.log'}: no such file or directory\n")
    (tmp_path / "empty-dir").mkdir()
    args = build_parser().parse_args(["dump-log", str(tmp_path / "empty-dir")])
    assert main(args) == 1
    assert "holds no log segments" in capsys.readouterr().err


# --- the command line ----------------------------------------------------------------

def test_cli_subprocess(tmp_path):
    part = tmp_path / "__consumer_offsets-0"
    write_segment(part, 0, *offsets_batches(), b"\0" * 20)
    done = subprocess.run([sys.executable, "-m", "tools.cli", "dump-log", str(part),
                           "--offsets-decoder"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [f"Dumping {part / SEGMENT}", "Log starting offset: 0"]
    assert lines[3].endswith(" key: offset_commit::group=billing,partition=orders-0"
                             " payload: offset=42 leaderEpoch=3 metadata=")
    assert lines[-1].startswith(f"Found 20 invalid bytes at the end of {SEGMENT}")
    assert done.stderr == ""


@pytest.mark.parametrize("flag", ["--json", "--print-data-log"])
def test_cli_parses_flags(flag):
    args = build_parser().parse_args(["dump-log", "a.log", "b", flag])
    assert args.paths == ["a.log", "b"] and args.func is main
