"""An entry of the aborted-transaction index (.txnindex), Kafka's AbortedTxn byte for byte.

Owns `AbortedTxn` and the entry's format: int16 version (0), int64 producer id, int64 first
offset, int64 last offset (the ABORT marker's), int64 last stable offset (the LSO once the
transaction was complete); 34 bytes, big-endian. The broker keeps these files
(broker/log/txn_index.py); the analysis reads them (spark_jobs/segments.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["AbortedTxn", "CURRENT_VERSION", "ENTRY_SIZE", "NewerAbortedTxnVersion",
           "decode_aborted_txns", "encode_aborted_txns"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


class NewerAbortedTxnVersion(ValueError):
    """An entry of a version newer than ours: its fields may not mean what we read."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: what Fetch returns in aborted_transactions (the producer id
    and first offset) and what the index search needs (its marker's offset and the LSO)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def encode(self) -> bytes:
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset,
                           self.last_offset, self.last_stable_offset)


def encode_aborted_txns(txns: Iterable[AbortedTxn]) -> bytes:
    return b"".join(txn.encode() for txn in txns)


def decode_aborted_txns(raw: bytes) -> list[AbortedTxn]:
    """The whole entries in `raw`; a torn last one is left out. NewerAbortedTxnVersion for
    an entry of a newer version than ours."""
    txns = []
    for version, producer_id, first, last, lso in _ENTRY.iter_unpack(
            raw[:len(raw) - len(raw) % ENTRY_SIZE]):
        if version > CURRENT_VERSION:
            raise NewerAbortedTxnVersion(f"aborted transaction entry of version {version}, "
                                         f"newer than {CURRENT_VERSION}")
        txns.append(AbortedTxn(producer_id, first, last, lso, version))
    return txns
