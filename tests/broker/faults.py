"""An injected file system fault for storage tests: a disk that fills up, a directory that
becomes unwritable, a device that returns EIO.

`FaultyDisk` patches the calls the broker's storage writes through (os.pwrite, os.write,
os.open, os.ftruncate, os.fsync, os.rename, os.replace, os.unlink, os.mkdir, and open()
for the text files) so that, for paths under one directory, they fail the way the kernel
would:

* ``full``: writes get ``budget`` more bytes (a short write first, as on a real device),
  then ENOSPC; creating an empty file still works, as on tmpfs;
* ``readonly``: creating, renaming or unlinking files raises PermissionError (EACCES),
  while descriptors already open keep writing -- what chmod 555 on a partition directory
  does to a process that is not root;
* ``eio``: every write, truncate and fsync raises EIO (``then="eio"`` switches a full
  disk to this once its budget is spent, so that undoing a torn write fails too).

`heal()` gives the space or the permission back. Deterministic and fast: no mount, no
sleeping. Tests that need a real file system filling up use tmpfs instead.
"""

from __future__ import annotations

import builtins
import errno as errno_codes
import os
from pathlib import Path

_REAL = {name: getattr(os, name) for name in
         ("pwrite", "write", "open", "ftruncate", "fsync", "rename", "unlink", "replace",
          "mkdir")}
_REAL_OPEN = builtins.open


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
        for name in _REAL:
            monkeypatch.setattr(os, name, getattr(self, f"_{name}"))
        monkeypatch.setattr(builtins, "open", self._builtin_open)

    def heal(self) -> None:
        self.healed = True

    # -- which calls fail -------------------------------------------------------------------

    def _ours(self, path: str) -> bool:
        path = os.path.abspath(path)
        if not (path == self.root or path.startswith(self.root + os.sep)):
            return False
        return self.only_suffix is None or path.endswith(self.only_suffix)

    def _fd_path(self, fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return ""

    def _fail(self, code: int, path: str) -> OSError:
        self.failures += 1
        cls = PermissionError if code == errno_codes.EACCES else OSError
        return cls(code, os.strerror(code), path)

    def _writing(self, fd: int, data) -> int:
        """How many of ``data``'s bytes the write may take (raises when none)."""
        n = len(memoryview(data).cast("B"))
        path = self._fd_path(fd)
        if self.healed or not self._ours(path) or self.mode == "readonly":
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

    # -- the patched calls ------------------------------------------------------------------

    def _pwrite(self, fd, data, offset):
        n = self._writing(fd, data)
        return _REAL["pwrite"](fd, memoryview(data).cast("B")[:n], offset)

    def _write(self, fd, data):
        n = self._writing(fd, data)
        return _REAL["write"](fd, memoryview(data).cast("B")[:n])

    def _open(self, path, flags, mode=0o777, *, dir_fd=None):
        if (not self.healed and self.mode == "readonly" and flags & os.O_CREAT
                and self._ours(os.fspath(path)) and not os.path.exists(path)):
            raise self._fail(errno_codes.EACCES, os.fspath(path))
        return _REAL["open"](path, flags, mode, dir_fd=dir_fd)

    def _builtin_open(self, file, mode="r", *args, **kwargs):
        # text files (checkpoints, the metadata image) are written through io, not os.write
        if (not self.healed and isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+")
                and self._ours(os.fspath(file))):
            if self.mode == "readonly" and not os.path.exists(file):
                raise self._fail(errno_codes.EACCES, os.fspath(file))
            if self.mode in ("full", "eio") and self.budget <= 0:
                # a simplification: a real disk fails the write, not the open
                raise self._fail(errno_codes.ENOSPC if self.mode == "full" else errno_codes.EIO,
                                 os.fspath(file))
        return _REAL_OPEN(file, mode, *args, **kwargs)

    def _mkdir(self, path, mode=0o777, *, dir_fd=None):
        if (not self.healed and self.mode == "readonly" and dir_fd is None
                and self._ours(os.fspath(path))):
            raise self._fail(errno_codes.EACCES, os.fspath(path))
        return _REAL["mkdir"](path, mode, dir_fd=dir_fd)

    def _ftruncate(self, fd, length):
        if not self.healed and self.mode == "eio" and self._ours(self._fd_path(fd)):
            raise self._fail(errno_codes.EIO, self._fd_path(fd))
        return _REAL["ftruncate"](fd, length)

    def _fsync(self, fd):
        if not self.healed and self.mode == "eio" and self._ours(self._fd_path(fd)):
            raise self._fail(errno_codes.EIO, self._fd_path(fd))
        return _REAL["fsync"](fd)

    def _names(self, name, *paths, **kw):
        # relative names with dir_fd (shutil.rmtree) are never under our root
        if (not self.healed and self.mode == "readonly" and "dir_fd" not in kw
                and "src_dir_fd" not in kw
                and any(self._ours(os.fspath(p)) for p in paths)):
            raise self._fail(errno_codes.EACCES, os.fspath(paths[0]))
        return _REAL[name](*paths, **kw)

    def _rename(self, src, dst, **kw):
        return self._names("rename", src, dst, **kw)

    def _replace(self, src, dst, **kw):
        return self._names("replace", src, dst, **kw)

    def _unlink(self, path, **kw):
        return self._names("unlink", path, **kw)
