"""`minibroker delete-records`: delete every record below given offsets, in the manner of
Kafka's kafka-delete-records.sh, on the client library's AdminClient (DeleteRecords at each
partition's leader).

    minibroker delete-records --offset-json-file offsets.json --bootstrap-server 127.0.0.1:9092

The file is kafka-delete-records.sh's:
`{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}`, an offset of
-1 meaning the high watermark (everything readable now). It prints Kafka's lines: one
`partition: T-P\tlow_watermark: N` per partition. Exit status 0; 1 with one line on stderr
for a file it cannot use, a partition refused (an offset past the high watermark is
OFFSET_OUT_OF_RANGE) or a cluster it cannot reach.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from client.types import TopicPartition
from tools.admin_session import ToolError, open_admin, run_admin_tool

DEFAULT_TIMEOUT_MS = 30_000
PROG = "minibroker delete-records"


def parse_offsets(text: str) -> dict[TopicPartition, int]:
    """The JSON of --offset-json-file -> {partition: offset}; ToolError says what is wrong."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(f"the offset file is not JSON: {e}") from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ToolError('the offset file needs a non-empty "partitions" list')
    out: dict[TopicPartition, int] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not all(
                isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                for k in ("partition", "offset")):
            raise ToolError(f'each partition needs "topic", "partition" and "offset": {entry}')
        tp = TopicPartition(entry["topic"], entry["partition"])
        if tp in out:
            raise ToolError(f"partition {tp.topic}-{tp.partition} is listed twice")
        out[tp] = entry["offset"]
    return out


def add_arguments(parser) -> None:
    parser.description = "Delete records below given offsets (kafka-delete-records)."
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--offset-json-file", required=True, metavar="FILE",
                        help='{"partitions": [{"topic": T, "partition": P, "offset": N}], '
                             '"version": 1}; offset -1 is the high watermark')
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")


async def _run(args: Any, out: TextIO) -> None:
    offsets = args.offsets
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-delete-records") as admin:
        out.write("Executing records delete operation\n")
        low = await admin.delete_records(offsets, timeout_ms=args.timeout)
        out.write("Records delete operation completed:\n")
        for tp, watermark in sorted(low.items()):
            out.write(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {watermark}\n")


def _check(args: Any) -> None:
    try:
        with open(args.offset_json_file) as f:
            args.offsets = parse_offsets(f.read())
    except OSError as e:
        raise ToolError(f"cannot read {args.offset_json_file}: {e.strerror}") from None


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_admin_tool(PROG, _run, args, sys.stdout if out is None else out,
                          sys.stderr if err is None else err, check=_check)


def main(args: Any) -> int:
    return run(args)
