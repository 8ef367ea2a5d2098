"""read_committed: which batches of a Fetch response a consumer returns (KIP-98).

Owns: `READ_UNCOMMITTED`, `READ_COMMITTED` (the isolation levels' wire values),
`isolation_level` (the config's name to the wire value) and `committed_batches`, the
filter Java's CompletedFetch applies under isolation.level=read_committed, pure and on
batch headers (only an end-transaction marker's one record is decoded).

The leader answers a read_committed Fetch with records below the last stable offset only
(no open transaction reaches past it) and with the aborted transactions that overlap what
it returns, as (producer id, first offset) pairs. Walking the batches in offset order:

- before each batch that has a producer id, every aborted transaction whose first offset
  is at or below the batch's last offset marks its producer as aborted;
- a control batch holding an ABORT marker of an aborted producer ends that transaction
  (the producer's later batches belong to its next one);
- a transactional data batch of a producer marked aborted is skipped;
- control batches (the markers) are never returned.

What is skipped still moves the position: the offset after the last batch, skipped or not,
is where the next Fetch starts, as for read_uncommitted. Worked example, one producer 7
whose first transaction (offsets 0-1) aborted and second (3-4) committed, and producer 9's
batch at 6 not transactional:

    batches:  [7: 0-1 txn] [7: 2 ABORT] [7: 3-4 txn] [7: 5 COMMIT] [9: 6]
    aborted transactions: [(7, 0)]
    returned: [7: 3-4] [9: 6], next fetch offset 7

A control batch that does not decode (it fails its CRC) is not taken for an ABORT marker.
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable

from protocol.control_records import ControlRecordType, decode_control_type
from protocol.records import BatchHeader, RecordError, decode_batch, row_batches

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "committed_batches", "isolation_level"]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


def isolation_level(name: str) -> int:
    """The wire value of an isolation_level setting."""
    return _LEVELS[name]


def _is_abort_marker(buf: Any, pos: int) -> bool:
    try:
        _, records = decode_batch(buf, pos)
        return bool(records) and decode_control_type(records[0].key) == ControlRecordType.ABORT
    except RecordError:
        return False


def committed_batches(buf: Any, min_offset: int,
                      aborted_transactions: Iterable[tuple[int, int]] | None
                      ) -> tuple[list[tuple[int, BatchHeader]], int]:
    """row_batches for read_committed: the (position, header) of every complete data batch
    in `buf` that may hold records at or after `min_offset` and is not part of an aborted
    transaction, and the offset after the last batch (control and aborted ones included;
    `min_offset` when there is none). `aborted_transactions` are the response's
    (producer id, first offset) pairs, None or empty when none."""
    pending = [(first, pid) for pid, first in aborted_transactions or ()]
    heapq.heapify(pending)
    aborted: set[int] = set()

    def keep(pos: int, header: BatchHeader) -> bool:
        if header.producer_id < 0:
            return True
        while pending and pending[0][0] <= header.last_offset:
            aborted.add(heapq.heappop(pending)[1])
        if header.is_control and header.producer_id in aborted and _is_abort_marker(buf, pos):
            aborted.discard(header.producer_id)  # its aborted transaction ends here
            return False
        return not (header.is_transactional and header.producer_id in aborted)

    return row_batches(buf, min_offset, keep)
