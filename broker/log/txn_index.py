"""The aborted-transaction index of a segment (.txnindex).

Owns: `TransactionIndex` (a segment's entries, their file and the search a read_committed
Fetch makes). The file is Kafka's byte for byte, so that ``kafka-dump-log.sh`` reads it:
``AbortedTxn`` entries (protocol/aborted_txn.py: one entry's 34 bytes) in the order of the
markers.

An entry lives in the index of the segment holding its marker, though its transaction may
begin in an earlier segment; its LSO says how far back: no transaction still open at the
time began before it. So a search walks segments from the fetch offset onward and stops
at the first entry whose LSO reaches the end of the fetched range (`is_complete`).

As Kafka does, the file is created with the first entry (most segments never have one);
a load ignores a torn last entry (a crash mid-append) and the next append writes over it.
Entries are kept in memory as well: they are few (one per aborted transaction), and the
search then never reads the disk. Every byte goes through broker/storage.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log.index import CorruptIndexError
from broker.storage import REAL, FileHandle, FileSystem
from protocol.aborted_txn import (
    CURRENT_VERSION,
    ENTRY_SIZE,
    AbortedTxn,
    NewerAbortedTxnVersion,
    encode_aborted_txns,
)
from protocol.aborted_txn import decode_aborted_txns as _decode

__all__ = ["CURRENT_VERSION", "ENTRY_SIZE", "AbortedTxn", "TransactionIndex",
           "TxnIndexSearchResult", "decode_aborted_txns", "encode_aborted_txns"]


def decode_aborted_txns(raw: bytes) -> list[AbortedTxn]:
    """The whole entries in `raw` (protocol/aborted_txn.py); a torn last one is left out.
    An entry of a newer version than ours is CorruptIndexError: its fields may not mean
    what we read."""
    try:
        return _decode(raw)
    except NewerAbortedTxnVersion as e:
        raise CorruptIndexError(str(e)) from None


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """The aborted transactions overlapping a fetched range found in one segment, and
    whether the search may stop there (Kafka's TxnIndexSearchResult)."""

    aborted: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """A segment's aborted transactions, in marker order (Kafka's TransactionIndex)."""

    def __init__(self, path: str, start_offset: int, *, fs: FileSystem = REAL) -> None:
        self.path = path
        self.start_offset = start_offset
        self._fs = fs
        self._file: FileHandle | None = None
        self._txns: list[AbortedTxn] = []

    def load(self) -> None:
        """Read the file, if there is one, and check it (Kafka's sanityCheck): every marker
        inside this segment, in increasing order."""
        if not self._fs.exists(self.path):
            self._txns = []
            return
        handle = self._handle()
        txns = decode_aborted_txns(handle.pread(handle.size(), 0))
        previous = None
        for txn in txns:
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(f"{self.path}: {txn} ends before the segment's start "
                                        f"offset {self.start_offset}")
            if previous is not None and txn.last_offset <= previous:
                raise CorruptIndexError(f"{self.path}: {txn} is not after offset {previous}")
            previous = txn.last_offset
        self._txns = txns

    def _handle(self) -> FileHandle:
        if self._file is None:
            self._file = self._fs.open(self.path)
        return self._file

    @property
    def open_file(self) -> FileHandle | None:
        """The handle, or None when the file was never opened (or is closed)."""
        return self._file

    def __len__(self) -> int:
        return len(self._txns)

    @property
    def last_offset(self) -> int | None:
        """The last entry's marker offset, or None when empty."""
        return self._txns[-1].last_offset if self._txns else None

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return list(self._txns)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; markers come in log order, so its last offset must grow."""
        if self._txns and txn.last_offset <= self._txns[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} "
                             f"is not after {self._txns[-1].last_offset}")
        # positioned at the last whole entry: a torn tail left by a crash is overwritten
        self._handle().pwrite(txn.encode(), len(self._txns) * ENTRY_SIZE)
        self._txns.append(txn)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset): those
        whose marker is at or after the fetch offset and whose data begins before the bound.
        Complete once an entry's LSO reaches the bound: no transaction overlapping the range
        can have its marker in a later segment."""
        aborted = []
        for txn in self._txns:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                aborted.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(aborted, True)
        return TxnIndexSearchResult(aborted, False)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past `offset` (the log is cut there)."""
        keep = next((n for n, txn in enumerate(self._txns) if txn.last_offset >= offset),
                    len(self._txns))
        if keep == len(self._txns):
            return
        del self._txns[keep:]
        self._handle().truncate(keep * ENTRY_SIZE)

    def reset(self) -> None:
        self._txns = []
        if self._file is not None or self._fs.exists(self.path):
            self._handle().truncate(0)

    def to_bytes(self) -> bytes:
        return encode_aborted_txns(self._txns)

    def flush(self) -> None:
        if self._file is not None:
            self._file.fsync()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def rename(self, new_path: str) -> None:
        if self._file is not None or self._fs.exists(self.path):
            self._fs.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            self._fs.remove(self.path)
        except FileNotFoundError:
            pass
