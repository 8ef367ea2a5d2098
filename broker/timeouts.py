"""Every timeout the broker's tasks wait on: `sleep`, `sleep_until`, `move_on_after`,
`move_on_at`, `set_deadline`, and the `TimeGate` a simulation stops a node's time with.

Outside a simulation these are trio's own, for the price of one ContextVar read. A
simulated node (sim.world) is a set of tasks in one trio run with the other nodes, and its
pause must be a stopped process's (SIGSTOP): no timer of the node fires while it lasts, not
only its network held. So the task that starts a node installs the node's gate
(`install`); trio copies the spawner's context into each task it starts, so every task of
the node, and none of another's, finds it. Each deadline such a task waits on is then
entered with the gate: `TimeGate.pause` holds every deadline off (math.inf), those set
meanwhile too, and `TimeGate.resume` gives them back, so that the ones that passed fire
at once, as after SIGCONT.

A deadline moved on a scope after it was entered goes through `set_deadline`, so that a
pause does not lose it and a move does not undo a pause. trio's time (`trio.current_time`)
runs on through a pause, as a stopped process's clock does.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import TracebackType

import trio

__all__ = ["TimeGate", "install", "move_on_after", "move_on_at", "set_deadline", "sleep",
           "sleep_until"]


class TimeGate:
    """The deadlines of one simulated node's live cancel scopes, which it can hold off."""

    __slots__ = ("paused", "_wanted")

    def __init__(self) -> None:
        self.paused = False
        # every live gated scope and the deadline it wants; insertion-ordered, so that a
        # resume moves them in one order from run to run
        self._wanted: dict[trio.CancelScope, float] = {}

    def __len__(self) -> int:
        return len(self._wanted)

    def scope(self, deadline: float, shield: bool) -> trio.CancelScope:
        """A new scope that wants `deadline`, held off while the gate is paused (made with
        its deadline, not given it after: a setter's bookkeeping less on a hot path)."""
        scope = trio.CancelScope(deadline=math.inf if self.paused else deadline,
                                 shield=shield)
        self._wanted[scope] = deadline
        return scope

    def leave(self, scope: trio.CancelScope) -> None:
        self._wanted.pop(scope, None)

    def move(self, scope: trio.CancelScope, deadline: float) -> None:
        if scope in self._wanted:
            self._wanted[scope] = deadline
            if self.paused:
                return
        scope.deadline = deadline

    def pause(self) -> None:
        self.paused = True
        for scope in self._wanted:
            scope.deadline = math.inf

    def resume(self) -> None:
        """Every deadline back; trio fires those that passed at its next step."""
        self.paused = False
        for scope, deadline in self._wanted.items():
            scope.deadline = deadline


_gate: ContextVar[TimeGate | None] = ContextVar("minibroker_time_gate", default=None)


def install(gate: TimeGate | None) -> None:
    """The current task's gate, and that of every task it starts from now on."""
    _gate.set(gate)


class _Gated:
    """A cancel scope whose deadline the gate holds while the scope is live."""

    __slots__ = ("gate", "at", "after", "shield", "scope")

    def __init__(self, gate: TimeGate, at: float | None, after: float | None,
                 shield: bool) -> None:
        self.gate, self.at, self.after, self.shield = gate, at, after, shield
        self.scope: trio.CancelScope | None = None

    def __enter__(self) -> trio.CancelScope:
        if self.at is None:  # as trio's move_on_after: the deadline counts from the entry
            assert self.after is not None
            deadline = trio.current_time() + self.after
        else:
            deadline = self.at
        scope = self.scope = self.gate.scope(deadline, self.shield)
        return scope.__enter__()

    def __exit__(self, etype: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        assert self.scope is not None
        self.gate.leave(self.scope)
        return self.scope.__exit__(etype, exc, tb)


def move_on_at(deadline: float, *, shield: bool = False
               ) -> AbstractContextManager[trio.CancelScope]:
    """trio.move_on_at, held by the current node's gate if it has one."""
    gate = _gate.get()
    if gate is None:
        return trio.move_on_at(deadline, shield=shield)
    if math.isnan(deadline):
        raise ValueError("deadline must not be NaN")
    return _Gated(gate, deadline, None, shield)


def move_on_after(seconds: float, *, shield: bool = False
                  ) -> AbstractContextManager[trio.CancelScope]:
    """trio.move_on_after, held by the current node's gate if it has one."""
    gate = _gate.get()
    if gate is None:
        return trio.move_on_after(seconds, shield=shield)
    if seconds < 0 or math.isnan(seconds):
        raise ValueError("`seconds` must be non-negative")
    return _Gated(gate, None, seconds, shield)


def set_deadline(scope: trio.CancelScope, deadline: float) -> None:
    """`scope.deadline = deadline`, for a scope entered here (`move_on_at(math.inf)` for
    one whose deadline comes later): held while the gate is paused."""
    gate = _gate.get()
    if gate is None:
        scope.deadline = deadline
    else:
        gate.move(scope, deadline)


async def sleep_until(deadline: float) -> None:
    with move_on_at(deadline):
        await trio.sleep_forever()


async def sleep(seconds: float) -> None:
    if _gate.get() is None or not seconds > 0:  # trio's checkpoint at 0, its errors
        await trio.sleep(seconds)
    else:
        await sleep_until(trio.current_time() + seconds)
