"""The producer-state snapshot files of one partition log: ``<20-digit offset>.snapshot``.

Owns their names, listing, writing and deletion in the partition's directory (Kafka's
ProducerStateManager snapshot files, named by LogFileUtils.producerSnapshotFile). A
snapshot at offset N holds the producer state after every batch below N; its bytes are
broker.producer_state's (`ProducerStateManager.snapshot_bytes`), opaque here.

A snapshot is written when the log rolls, at the new segment's base offset, without an
fsync (Kafka flushes it later, off the append path): it is only a shortcut, and one a crash
tore fails its CRC when read and is skipped for an older one or a longer replay. One must
never outlive the log it describes, so those past a truncation point go, and the directory
is fsynced then, lest a deleted snapshot come back after a crash to describe records that
were replaced. Every byte goes through broker/storage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from broker.storage import REAL, FileSystem, write_atomically

SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_UNFINISHED = re.compile(r"^\d{20}\.snapshot\.tmp$")  # a write a crash cut short


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def list_snapshots(directory: str, fs: FileSystem = REAL) -> list[int]:
    """The offsets of the snapshots in `directory`, oldest first."""
    return sorted(int(m.group(1)) for name in fs.listdir(directory)
                  if (m := _SNAPSHOT_FILE.match(name)))


def read_snapshot(directory: str, offset: int, fs: FileSystem = REAL) -> bytes:
    handle = fs.open(snapshot_path(directory, offset), create=False)
    try:
        return handle.pread(handle.size(), 0)
    finally:
        handle.close()


def write_snapshot(directory: str, offset: int, data: bytes, fs: FileSystem = REAL) -> None:
    """Replace the snapshot at `offset` (a temporary file renamed into place: a reader
    never sees half of one unless a crash tears it, which its CRC then shows)."""
    write_atomically(snapshot_path(directory, offset), data, sync=False, fs=fs)


def remove_unfinished(directory: str, fs: FileSystem = REAL) -> None:
    """Delete the temporary files of snapshot writes a crash interrupted."""
    for name in fs.listdir(directory):
        if _UNFINISHED.match(name):
            try:
                fs.remove(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def delete_snapshots(directory: str, doomed: Callable[[int], bool], *, sync: bool = False,
                     fs: FileSystem = REAL) -> list[int]:
    """Delete the snapshots whose offset `doomed` picks (and, with `sync`, make that
    durable); returns their offsets."""
    gone = []
    for offset in list_snapshots(directory, fs):
        if doomed(offset):
            try:
                fs.remove(snapshot_path(directory, offset))
            except FileNotFoundError:
                pass
            gone.append(offset)
    if gone and sync:
        fs.fsync_dir(directory)
    return gone
