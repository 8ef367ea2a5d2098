"""The history of a chaos run: one JSON object per line, in the order things happened.

Each operation is recorded as Jepsen records it, an `invoke` when it starts and one of
`ok` (it happened), `fail` (it certainly did not) or `info` (nobody knows: a send whose
answer was lost may still be in the log) when it ends:

    {"index": 7, "time": 1.234, "process": "producer-0", "type": "invoke", "f": "send",
     "value": {"partition": 2, "value": "0-2-17"}}
    {"index": 9, "time": 1.251, "process": "producer-0", "type": "ok", "f": "send",
     "value": {"partition": 2, "value": "0-2-17", "offset": 16}}

`time` is seconds since the run started (one monotonic clock for the whole run), `index`
the line's position. The operations (`f`) and their values:

  send      producer-N   invoke {partition, value}; ok adds offset; info adds error
  poll      consumer-X   ok {records: [[partition, offset, value], ...]} (one getmany)
  assign    consumer-X   ok {partitions: [p, ...]}: the member's whole assignment from now
                         on (a rebalance); its polls are checked against it
  commit    consumer-X   invoke/ok/fail/info {offsets: {p: next offset to read}}
  offsets   observer     ok {offsets: {p: committed}}: the group's committed offsets as an
                         OffsetFetch answered them
  isr       observer     ok {partitions: {p: {leader, isr}}}: for the charts
  rate      observer     ok {acked: N}: acknowledged sends in the last second
  read      final        ok {partition, records: [[offset, value], ...]}: the whole
                         partition, read after healing
  fault     nemesis      info {fault, target, why, phase: start|end, ...}

Values are "<producer>-<partition>-<sequence>": unique in the run, and a producer's
sequence numbers on one partition grow in the order it sent them.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterator

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


class History:
    """Appends operations to a JSON-lines file, from trio tasks and threads alike (the
    librdkafka consumer runs in a thread). Kept in memory too, for the checkers."""

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.monotonic) -> None:
        """`path`: the file written as operations are recorded (None: memory only, as the
        simulation keeps it); `clock`: seconds (the simulation's is its run's clock)."""
        self.path = None if path is None else Path(path)
        self._file: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w")
        self._lock = threading.Lock()
        self._clock = clock
        self._start = clock()
        self.ops: list[dict[str, Any]] = []

    def now(self) -> float:
        return self._clock() - self._start

    def record(self, process: str, type_: str, f: str, value: Any) -> dict[str, Any]:
        with self._lock:
            op = {"index": len(self.ops), "time": round(self.now(), 6), "process": process,
                  "type": type_, "f": f, "value": value}
            self.ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op, separators=(",", ":")) + "\n")
            return op

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()


def read_history(path: Path) -> list[dict[str, Any]]:
    """The operations of a history file, in order (a torn last line is left out)."""
    return list(iter_history(path))


def iter_history(path: Path) -> Iterator[dict[str, Any]]:
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                return
