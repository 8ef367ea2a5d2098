"""Disk faults for broker processes a cluster test starts: test-only, no broker code knows.

Python imports `sitecustomize` at start-up from the first directory on sys.path that has
one, so a test that puts this directory first on a node's PYTHONPATH (the repository root
after it) gets this module loaded into that node. It does nothing unless the environment
names a trigger file in MINIBROKER_TEST_FAULT_TRIGGER; it then patches the os calls the
broker writes through (tests/broker/faults.py's FaultyDisk, mode "eio"), and they behave
as usual until the trigger file exists. From then on, in every node, each write, truncate
and fsync of a file under the directory the trigger file names fails with EIO: the test
writes that file once it knows which node's partition directory it wants to fail, and
only the node whose files those are sees a fault.
"""

from __future__ import annotations

import os
from typing import Any

TRIGGER_ENV = "MINIBROKER_TEST_FAULT_TRIGGER"


class _Patcher:
    """The one method of pytest's monkeypatch that FaultyDisk uses; never undone."""

    @staticmethod
    def setattr(target: Any, name: str, value: Any) -> None:
        setattr(target, name, value)


def _install(trigger: str) -> None:
    from tests.broker.faults import FaultyDisk

    class TriggeredDisk(FaultyDisk):
        """A FaultyDisk whose directory is read from the trigger file once it appears."""

        armed = False

        def _armed(self) -> bool:
            if not self.armed and os.path.exists(trigger):
                with open(trigger) as f:
                    self.root = os.path.realpath(f.read().strip())
                self.armed = True
            return self.armed

        def _ours(self, path: str) -> bool:
            return self._armed() and super()._ours(path)

        def _fd_path(self, fd: int) -> str:
            # until the trigger, no readlink per write
            return super()._fd_path(fd) if self._armed() else ""

    TriggeredDisk(_Patcher(), os.path.dirname(trigger), "eio")


if os.environ.get(TRIGGER_ENV):
    _install(os.environ[TRIGGER_ENV])
