"""The clients' `async with`: whatever __aenter__ opened is closed again when entering
fails part way (here: cancelled by the caller's scope), so the task's trio cancel-scope
and nursery stack stay intact and the task can go on using trio."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from client import Consumer, Producer
from client.admin import AdminClient
from client.connection import ConnectionPool

# nothing listens here: entering must not need a broker
NOWHERE = "127.0.0.1:1"

CLIENTS = {
    "producer": lambda: Producer(NOWHERE),
    "consumer-subscribed": lambda: Consumer("t", bootstrap_servers=NOWHERE, group_id="g"),
    "consumer-assign": lambda: Consumer(bootstrap_servers=NOWHERE),
    "admin": lambda: AdminClient(NOWHERE),
    "pool": lambda: ConnectionPool(),
}


async def _nursery_works() -> None:
    done = trio.Event()

    async def task() -> None:
        await trio.lowlevel.checkpoint()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(task)
    assert done.is_set()


@pytest.mark.parametrize("name", sorted(CLIENTS))
async def test_cancelled_while_entering_leaves_the_task_usable(name):
    client = CLIENTS[name]()
    entered = False
    with trio.CancelScope() as scope:
        scope.cancel()
        async with client:
            entered = True
    assert scope.cancelled_caught or entered
    # the task's cancel scopes are intact: a nursery opens, runs a task and closes
    await _nursery_works()
    with trio.move_on_after(0.01) as later:
        await trio.sleep_forever()
    assert later.cancelled_caught


@pytest.mark.parametrize("name", sorted(CLIENTS))
async def test_entered_and_left_twice_in_one_task(name):
    for _ in range(2):
        async with CLIENTS[name]():
            await trio.lowlevel.checkpoint()
    await _nursery_works()
