"""broker.timeouts: trio's own timeouts without a gate; under a gate, none fires while it is
paused (those set during the pause neither), and at the resume those that came due fire at
once while the others keep their deadlines."""

from __future__ import annotations

import math

import trio
import trio.testing

from broker import timeouts
from broker.timeouts import TimeGate


async def test_without_a_gate_they_are_trios_own(autojump_clock):
    assert isinstance(timeouts.move_on_after(1), trio.CancelScope)
    assert isinstance(timeouts.move_on_at(1), trio.CancelScope)
    start = trio.current_time()
    await timeouts.sleep(2)
    assert trio.current_time() == start + 2
    with timeouts.move_on_after(1) as scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught and trio.current_time() == start + 3


async def test_a_paused_gate_holds_every_timer_until_it_resumes(autojump_clock):
    gate = TimeGate()
    fired: dict[str, float] = {}
    during = trio.Event()

    async def node(name: str, wait) -> None:
        timeouts.install(gate)  # this task's context only, as a simulated node's
        await wait()
        fired[name] = trio.current_time()

    async def sleeper() -> None:
        await timeouts.sleep(5)

    async def bounded() -> None:
        with timeouts.move_on_after(3):
            await trio.sleep_forever()

    async def set_while_paused() -> None:
        await during.wait()
        await timeouts.sleep_until(trio.current_time() + 1)

    async def idle() -> None:
        # a deadline moved after the scope was entered, as a connection's idle limit is
        with timeouts.move_on_at(math.inf) as scope:
            await during.wait()
            timeouts.set_deadline(scope, trio.current_time() + 2)
            await trio.sleep_forever()

    async def later() -> None:
        await timeouts.sleep(100)  # not due at the resume: keeps its deadline

    async with trio.open_nursery() as nursery:
        for name, wait in [("sleeper", sleeper), ("bounded", bounded), ("idle", idle),
                           ("set_while_paused", set_while_paused), ("later", later)]:
            nursery.start_soon(node, name, wait)
        await trio.sleep(1)
        gate.pause()
        during.set()
        await trio.sleep(20)
        assert fired == {}, "a timer fired while the gate was paused"
        assert len(gate) == 5
        gate.resume()
        await trio.testing.wait_all_tasks_blocked()
        assert fired == {"sleeper": 21, "bounded": 21, "idle": 21, "set_while_paused": 21}
        await trio.sleep(100)
        assert fired["later"] == 100
    assert len(gate) == 0, "a scope left registered after it exited"


async def test_a_gate_in_one_task_holds_nothing_of_another(autojump_clock):
    gate = TimeGate()
    gate.pause()

    async def gated() -> None:
        timeouts.install(gate)
        await timeouts.sleep(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(gated)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        await timeouts.sleep(1)  # the test's own task: no gate
        assert trio.current_time() == start + 1
        nursery.cancel_scope.cancel()  # a paused gate never stands in a cancellation's way
