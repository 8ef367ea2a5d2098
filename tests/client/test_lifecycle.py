"""The clients' `async with`: whatever __aenter__ opened is closed again when entering
fails part way (cancelled by the caller's scope, or no bootstrap address answering), so
the task's trio cancel-scope and nursery stack stay intact and the task can go on using
trio."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.lowlevel

from client import Consumer, Producer, errors
from client.admin import AdminClient
from client.connection import ConnectionPool

# nothing listens here
NOWHERE = "127.0.0.1:1"

CLIENTS = {
    "producer": lambda at=NOWHERE: Producer(at),
    "consumer-subscribed": lambda at=NOWHERE: Consumer("t", bootstrap_servers=at,
                                                       group_id="g"),
    "consumer-assign": lambda at=NOWHERE: Consumer(bootstrap_servers=at),
    "admin": lambda at=NOWHERE: AdminClient(at),
    "pool": lambda at=NOWHERE: ConnectionPool(),
}
# entering these connects to a bootstrap address first, as aiokafka's start()
BOOTSTRAPPING = ("producer", "consumer-subscribed", "consumer-assign")


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
async def test_entered_and_left_twice_in_one_task(name, shared_broker):
    for _ in range(2):
        async with CLIENTS[name](shared_broker.bootstrap):
            await trio.lowlevel.checkpoint()
    await _nursery_works()


@pytest.mark.parametrize("name", BOOTSTRAPPING)
async def test_entering_with_no_broker_fails_at_once_and_leaves_the_task_usable(
        name, caplog):
    # the console tools quieten this logger when a test runs one in process: ask for it
    caplog.set_level(logging.WARNING, logger="minibroker.client")
    with pytest.raises(errors.KafkaConnectionError, match=r"unable to bootstrap from "
                       r"\['127.0.0.1:1'\]: cannot connect to 127.0.0.1:1: ") as failed:
        async with CLIENTS[name]():
            pytest.fail("entered with no broker")
    assert failed.value.retriable
    assert any(r.levelname == "WARNING" and "127.0.0.1:1" in r.getMessage()
               for r in caplog.records)
    await _nursery_works()
