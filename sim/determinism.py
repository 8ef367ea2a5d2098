"""Everything random in a simulated run comes from its seed.

Owns `seeded(seed)`: for the duration of one run, the `random` module's global generator
and every `random.Random()` made without a seed (the controller's placement and topic ids,
Raft's election timeouts, the fetch-session ids) draw from the seed; so do `uuid.uuid4()`
(member ids, incarnation and directory ids) and trio's scheduler, which otherwise orders
each batch of runnable tasks at random (pytest-trio's deterministic mode: the batch sorted
by task creation, then shuffled by a seeded generator). The product's code is unchanged:
these are the process-wide sources it draws from, replaced while the run lasts.

Not covered, and why it does not matter here: `hash()` of strings differs between
processes (PYTHONHASHSEED), so a set of strings may iterate in another order in another
process; `minibroker sim` re-runs itself with PYTHONHASHSEED=0 so that a printed replay
command replays the same schedule.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from trio._core import _run as trio_run  # the scheduler's own generator and switch

_REAL_RANDOM = random.Random
_REAL_UUID4 = uuid.uuid4


@contextmanager
def seeded(seed: int) -> Iterator[random.Random]:
    """The run's root generator; the process-wide sources draw from it meanwhile."""
    root = _REAL_RANDOM(seed)

    class SeededRandom(_REAL_RANDOM):
        def __init__(self, x: int | float | str | bytes | bytearray | None = None) -> None:
            super().__init__(root.getrandbits(64) if x is None else x)

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=root.getrandbits(128), version=4)

    saved_state = random.getstate()
    saved_flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_trio_state = trio_run._r.getstate()
    random.seed(root.getrandbits(64))
    random.Random = SeededRandom  # type: ignore[misc]
    uuid.uuid4 = uuid4
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(root.getrandbits(64))
    try:
        yield root
    finally:
        random.Random = _REAL_RANDOM  # type: ignore[misc]
        uuid.uuid4 = _REAL_UUID4
        random.setstate(saved_state)
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag  # type: ignore[misc]
        trio_run._r.setstate(saved_trio_state)
