"""Everything random in a simulated run comes from its seed.

Owns `seeded(seed)`: for the duration of one run, the `random` module's global generator
and every `random.Random()` made without a seed (the controller's placement and topic ids,
Raft's election timeouts, the fetch-session ids) draw from the seed; so do `uuid.uuid4()`
(member ids, incarnation and directory ids) and trio's scheduler, which otherwise orders
each batch of runnable tasks at random (pytest-trio's deterministic mode: the batch sorted
by task creation, then shuffled by a seeded generator). `time.time()` reads the
run's clock (offset to `WALL_EPOCH_S`): the client library stamps records with it (Kafka's
CreateTime), and a wall-clock stamp changed the records' bytes from one run to the next.
The client library's numbering of
client ids ("producer-1", as Kafka's clients number theirs) starts again at 1 for each run.
The product's code is unchanged: these are the process-wide sources it draws from,
replaced while the run lasts.

Not covered, and why it does not matter here: `hash()` of strings differs between
processes (PYTHONHASHSEED), so a set of strings may iterate in another order in another
process; `minibroker sim` re-runs itself with PYTHONHASHSEED=0 so that a printed replay
command replays the same schedule.
"""

from __future__ import annotations

import itertools
import math
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import trio
import trio.testing
from trio._core import _run as trio_run  # the scheduler's own generator and switch
from trio._core import _instrumentation as trio_instrumentation
from trio._core._ki import enable_ki_protection

from client import config as client_config

_REAL_RANDOM = random.Random
_REAL_UUID4 = uuid.uuid4
_REAL_TIME = time.time
WALL_EPOCH_S = 1_800_000_000.0  # what the simulated wall clock reads at the run's start


def simulated_time() -> float:
    """The run's clock as a wall clock; the real one outside a trio run."""
    try:
        return WALL_EPOCH_S + trio.current_time()
    except RuntimeError:
        return _REAL_TIME()


def simulated_clock() -> trio.testing.MockClock:
    """trio's MockClock, autojumping, that never runs on its own (rate 0), reading its
    virtual time alone: MockClock's own `current_time()` reads the real clock to scale it
    by the rate, and a run reads the time about fifty times per request. (trio's run loop
    autojumps only a MockClock, which cannot be subclassed: its instance is given the
    shortcut.)"""
    clock = trio.testing.MockClock(autojump_threshold=0)

    def current_time() -> float:
        return clock._virtual_base

    def deadline_to_sleep_time(deadline: float) -> float:
        return 0 if deadline <= clock._virtual_base else 999999999

    def autojump() -> None:  # MockClock's, without building the run's statistics
        deadline = trio_run.GLOBAL_RUN_CONTEXT.runner.deadlines.next_deadline()
        if clock._virtual_base < deadline < math.inf:
            clock._virtual_base = deadline

    clock.current_time = current_time  # type: ignore[method-assign]
    clock._autojump = autojump  # type: ignore[method-assign]
    clock.deadline_to_sleep_time = deadline_to_sleep_time  # type: ignore[method-assign]
    return clock


@contextmanager
def clock_shortcut() -> Iterator[None]:
    """`trio.current_time()` reads the run's MockClock at once while the block lasts:
    trio's own goes through two more calls (the run's, then the clock's) to the same
    value, and the nodes, the clients and the network read it about 240,000 times a 30 s
    seed. Enter it in the run's first task: outside a run `trio.current_time()` must raise
    again (`simulated_time` falls back to the real clock on that)."""
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)

    def current_time() -> float:
        return clock._virtual_base

    saved = trio.current_time
    trio.current_time = current_time
    try:
        yield
    finally:
        trio.current_time = saved


class _QuietIO:
    """The run's I/O manager, polled once every POLL_EVERY batches of the scheduler
    instead of at each: a simulated run does no real I/O (the network and the disks are
    simulated, no threads), and trio asked epoll for events, with a timeout of 0, once per
    batch, about one batch per task step. What still comes through it, trio's own wake-up
    socket (a Ctrl-C), is seen within POLL_EVERY batches."""

    POLL_EVERY = 64

    def __init__(self, real: object) -> None:
        self._real = real
        self._get_events = real.get_events  # type: ignore[attr-defined]
        self.process_events = real.process_events  # type: ignore[attr-defined]
        self._batches = itertools.count()

    def get_events(self, timeout: float) -> object:
        if timeout > 0 or next(self._batches) % self.POLL_EVERY == 0:
            return self._get_events(timeout)
        return ()

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


class _NoInstruments(dict):
    """The run's instruments while it has none. trio asks `hook in instruments` four times
    a task step; on its `Instruments` (a UserDict) that is a Python call, on a dict a C
    one. The first instrument added brings trio's own back."""

    def __init__(self, runner: object) -> None:
        super().__init__({"_all": {}})  # what trio's holds with no instrument
        self._runner = runner

    def add_instrument(self, instrument: trio.abc.Instrument) -> None:
        self._runner.instruments = trio_instrumentation.Instruments(  # type: ignore[attr-defined]
            [instrument])

    def remove_instrument(self, instrument: trio.abc.Instrument) -> None:
        raise KeyError(instrument)  # as trio's, for one that was never added


def quiet_io() -> None:
    """Installs `_QuietIO` and `_NoInstruments` (when the run has no instrument) in the
    current run: call from the run's first task."""
    runner = trio_run.GLOBAL_RUN_CONTEXT.runner
    if not isinstance(runner.io_manager, _QuietIO):
        runner.io_manager = _QuietIO(runner.io_manager)  # type: ignore[assignment]
    if runner.instruments.data == {"_all": {}}:
        runner.instruments = _NoInstruments(runner)  # type: ignore[assignment]


class _SchedulerRandom(random.Random):
    """trio's scheduler's generator: a batch of one task is not shuffled (`shuffle` draws
    nothing for it either; the call was the cost, at one batch per task step)."""

    def shuffle(self, x: list) -> None:  # type: ignore[override]
        if len(x) > 1:
            super().shuffle(x)


class _DeadlineBookkeeping:
    """trio's `CancelScope._might_change_registered_deadline` (trio 0.35, the venv's), the
    same steps as a plain context manager where trio's is a generator one: every cancel
    scope runs it as it is entered and left and as its deadline moves, and a generator
    context manager costs three more Python calls each time (about 200,000 times a 30 s
    seed). After the `with` body, the scope's heap entry in the run's deadlines follows
    its deadline, as trio's does; KeyboardInterrupt-protected as trio's."""

    __slots__ = ("scope",)

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope

    def __enter__(self) -> None:
        return None

    @enable_ki_protection
    def __exit__(self, *exc_info: object) -> None:
        scope = self.scope
        old = scope._registered_deadline
        if scope._cancel_status is None or scope._cancel_called:
            new = math.inf
        else:
            new = scope._deadline
        if old != new:
            scope._registered_deadline = new
            runner = trio_run.GLOBAL_RUN_CONTEXT.runner
            if runner.is_guest:
                old_next_deadline = runner.deadlines.next_deadline()
            if old != math.inf:
                runner.deadlines.remove(old, scope)
            if new != math.inf:
                runner.deadlines.add(new, scope)
            if runner.is_guest and old_next_deadline != runner.deadlines.next_deadline():
                runner.force_guest_tick_asap()
        return None


_BOOKKEEPING_OF = "0.35.0"  # the trio whose steps _DeadlineBookkeeping repeats


def _might_change_registered_deadline(scope: trio.CancelScope) -> _DeadlineBookkeeping:
    return _DeadlineBookkeeping(scope)


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
    saved_trio_random = trio_run._r
    saved_bookkeeping = trio_run.CancelScope._might_change_registered_deadline
    saved_numbers = client_config._client_numbers
    client_config._client_numbers = itertools.count(1)
    random.seed(root.getrandbits(64))
    random.Random = SeededRandom  # type: ignore[misc]
    uuid.uuid4 = uuid4
    time.time = simulated_time
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r = _SchedulerRandom(root.getrandbits(64))
    if trio.__version__ == _BOOKKEEPING_OF:  # another trio keeps its own
        trio_run.CancelScope._might_change_registered_deadline = (  # type: ignore[method-assign]
            _might_change_registered_deadline)  # type: ignore[assignment]
    try:
        yield root
    finally:
        random.Random = _REAL_RANDOM  # type: ignore[misc]
        uuid.uuid4 = _REAL_UUID4
        time.time = _REAL_TIME
        random.setstate(saved_state)
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag  # type: ignore[misc]
        trio_run._r = saved_trio_random
        trio_run.CancelScope._might_change_registered_deadline = (  # type: ignore[method-assign]
            saved_bookkeeping)
        client_config._client_numbers = saved_numbers
