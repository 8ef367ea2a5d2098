"""An injected file system fault for storage tests: a disk that fills up, a directory that
becomes unwritable, a device that returns EIO.

`FaultyDisk` hooks the storage seam (broker/storage): the real file system's open, rename,
remove, makedirs and directory fsync, and its open files' writes, truncations and fsyncs,
so that, for paths under one directory, they fail the way the kernel would. Everything the
broker keeps goes through the seam, so nothing else needs patching; and since the hooks
are on the real implementation's classes, brokers and logs opened before the disk went
bad are hit too, as they would be by a real failing device:

* ``full``: writes get ``budget`` more bytes (a short write first, as on a real device),
  then ENOSPC; creating an empty file still works, as on tmpfs;
* ``readonly``: creating, renaming or removing files or making directories raises
  PermissionError (EACCES), while files already open keep writing -- what chmod 555 on
  a partition directory does to a process that is not root;
* ``eio``: every write, truncate and fsync (of a file or a directory) raises EIO
  (``then="eio"`` switches a full disk to this once its budget is spent, so that undoing
  a torn write fails too).

`heal()` gives the space or the permission back. Deterministic and fast: no mount, no
sleeping. Tests that need a real file system filling up use tmpfs instead; tests of a
simulated node use `SimulatedFileSystem`'s own faults.
"""

from __future__ import annotations

import errno as errno_codes
import os
from pathlib import Path

from broker.storage.real import RealFile, RealFileSystem

_FILE_CALLS = ("pwrite", "append", "truncate", "fsync")
_FS_CALLS = ("open", "rename", "remove", "makedirs", "fsync_dir")


class FaultyDisk:
    def __init__(self, monkeypatch, root: str | os.PathLike, mode: str = "full", *,
                 budget: int = 0, only_suffix: str | None = None, then: str | None = None):
        assert mode in ("full", "readonly", "eio")
        self.root = str(Path(root).resolve())
        self.mode = mode
        self.budget = budget
        self.only_suffix = only_suffix  # e.g. ".index": fail writes to those files only
        self.then = then  # "eio": once the budget is spent the device fails outright
        self.failures = 0
        self.healed = False
        for name in _FILE_CALLS:
            monkeypatch.setattr(RealFile, name, self._file_call(name, getattr(RealFile, name)))
        for name in _FS_CALLS:
            monkeypatch.setattr(RealFileSystem, name,
                                self._fs_call(name, getattr(RealFileSystem, name)))

    def heal(self) -> None:
        self.healed = True

    # -- which calls fail -------------------------------------------------------------------

    def _ours(self, path: str) -> bool:
        path = os.path.abspath(path)
        if not (path == self.root or path.startswith(self.root + os.sep)):
            return False
        return self.only_suffix is None or path.endswith(self.only_suffix)

    def _sick(self, path: str) -> bool:
        return not self.healed and self._ours(path)

    def _fail(self, code: int, path: str) -> OSError:
        self.failures += 1
        cls = PermissionError if code == errno_codes.EACCES else OSError
        return cls(code, os.strerror(code), path)

    def _writing(self, path: str, n: int) -> int:
        """How many of ``n`` bytes the write may take (raises when none)."""
        if not self._sick(path) or self.mode == "readonly":
            return n
        if self.mode == "eio":
            raise self._fail(errno_codes.EIO, path)
        if self.budget <= 0:
            raise self._fail(errno_codes.ENOSPC, path)
        allowed = min(n, self.budget)
        self.budget -= allowed
        if self.budget == 0 and self.then:
            self.mode = self.then
        return allowed

    # -- the hooked calls -------------------------------------------------------------------

    def _file_call(self, name, real):
        disk = self

        def pwrite(f: RealFile, data, position: int) -> None:
            view = memoryview(data).cast("B")
            n = disk._writing(f.path, len(view))
            real(f, view[:n], position)
            if n < len(view):  # the short write landed; the next one finds no space
                raise disk._fail(errno_codes.ENOSPC, f.path)

        def append(f: RealFile, data) -> None:
            view = memoryview(data).cast("B")
            n = disk._writing(f.path, len(view))
            real(f, view[:n])
            if n < len(view):
                raise disk._fail(errno_codes.ENOSPC, f.path)

        def truncate_or_fsync(f: RealFile, *args):
            if disk._sick(f.path) and disk.mode == "eio":
                raise disk._fail(errno_codes.EIO, f.path)
            return real(f, *args)

        return {"pwrite": pwrite, "append": append}.get(name, truncate_or_fsync)

    def _fs_call(self, name, real):
        disk = self

        def open_(fs: RealFileSystem, path, *, create: bool = True, append: bool = False):
            path = os.fspath(path)
            if (disk._sick(path) and disk.mode == "readonly" and create
                    and not os.path.exists(path)):
                raise disk._fail(errno_codes.EACCES, path)
            return real(fs, path, create=create, append=append)

        def names(fs: RealFileSystem, *paths):
            if disk.mode == "readonly" and any(disk._sick(os.fspath(p)) for p in paths):
                raise disk._fail(errno_codes.EACCES, os.fspath(paths[0]))
            return real(fs, *paths)

        def makedirs(fs: RealFileSystem, path):
            if disk._sick(os.fspath(path)) and disk.mode == "readonly" and not os.path.isdir(path):
                raise disk._fail(errno_codes.EACCES, os.fspath(path))
            return real(fs, path)

        def fsync_dir(fs: RealFileSystem, path):
            if disk._sick(os.fspath(path)) and disk.mode == "eio":
                raise disk._fail(errno_codes.EIO, os.fspath(path))
            return real(fs, path)

        return {"open": open_, "makedirs": makedirs, "fsync_dir": fsync_dir}.get(name, names)
