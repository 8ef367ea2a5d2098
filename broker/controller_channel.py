"""How a broker reaches the active controller (Kafka's NodeToControllerChannelManager).

Owns: `ControllerChannel.call`, which sends one controller request (registration,
heartbeat, producer-id block, or an admin request forwarded for a client) to whichever
node is the active controller and returns its answer, and `ControllerUnavailable`.

When this node is itself the active controller the request never leaves the process. Else
it goes over the controller listener of the leader the quorum last named; an answer of
NOT_CONTROLLER, a refused connection or a timeout means the leadership moved: the call
waits for the next leader (or backs off) and tries again until its deadline. The client
sees one answer.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import trio

from broker import timeouts
from broker.controller import api
from broker.controller.runtime import QuorumRuntime

log = logging.getLogger("minibroker.controller_channel")

RETRY_BACKOFF_S = 0.05
_LEADER_MOVED = object()  # _ask's answer when the quorum named another leader meanwhile


class ControllerUnavailable(Exception):
    """No active controller answered before the deadline."""


class ControllerChannel:
    def __init__(self, runtime: QuorumRuntime | None,
                 peer: Callable[[int], Any] | None, request_timeout_s: float):
        self.runtime = runtime
        self._peer = peer  # node id -> PeerChannel to its controller listener
        self.request_timeout_s = request_timeout_s

    def set_peers(self, peer: Callable[[int], Any]) -> None:
        self._peer = peer

    @property
    def leader_id(self) -> int:
        return self.runtime.leader_id if self.runtime is not None else -1

    async def forward(self, api_key: int, api_version: int, body: Any,
                   timeout_s: float | None = None) -> Any:
        deadline = trio.current_time() + (self.request_timeout_s if timeout_s is None
                                          else timeout_s)
        last_error = "no controller is known"
        while trio.current_time() < deadline:
            runtime = self.runtime
            if runtime is not None and runtime.active:
                response = await api.handle(runtime, api_key, body, in_process=True)
                if not api.is_not_controller(api_key, response):
                    return response
                last_error = "the leadership moved during the request"
                continue
            leader = self.leader_id
            if leader < 0 or (runtime is not None and leader == runtime.node.node_id) \
                    or self._peer is None:
                await self._wait_for_leader(deadline)
                continue
            with timeouts.move_on_at(deadline):
                try:
                    response = await self._ask(leader, api_key, api_version, body, deadline)
                except Exception as e:  # noqa: BLE001  unreachable: it may have just died
                    last_error = f"controller {leader}: {e}"
                    await self._wait_for_leader(min(deadline, trio.current_time() + 0.5))
                    continue
                if response is _LEADER_MOVED:
                    last_error = f"the quorum named another leader than {leader}"
                    continue
                if not api.is_not_controller(api_key, response):
                    return response
                last_error = f"node {leader} is no longer the active controller"
                await self._wait_for_leader(min(deadline, trio.current_time() + 0.5))
        raise ControllerUnavailable(last_error)

    async def _ask(self, leader: int, api_key: int, api_version: int, body: Any,
                   deadline: float) -> Any:
        """`leader`'s answer, or _LEADER_MOVED as soon as the quorum names another leader.

        A leader that is paused or cut off never answers: without this a heartbeat sent to
        it waited out the whole request timeout, longer than broker.session.timeout.ms, and
        the new controller fenced every broker that had been heartbeating to the old one
        (a paused controller in a chaos run fenced all three, leadership moved to the
        paused node itself). Kafka's NodeToControllerChannelManager likewise resends its
        queued requests to a new controller as soon as it learns of it."""
        assert self._peer is not None
        changed = self.runtime.leader_changed if self.runtime is not None else None
        answer: Any = _LEADER_MOVED
        failure: Exception | None = None
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                if changed is not None:
                    async def watch() -> None:
                        await changed.wait()
                        scope.cancel()
                    nursery.start_soon(watch)
                try:
                    answer = await self._peer(leader).request(
                        api_key, api_version, body,
                        timeout_s=max(0.001, deadline - trio.current_time()))
                except Exception as e:  # noqa: BLE001  raised below, outside the nursery
                    failure = e
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return answer

    async def _wait_for_leader(self, deadline: float) -> None:
        """Until the quorum names a (new) leader, or a short backoff, or the deadline."""
        wait_until = min(deadline, trio.current_time() + RETRY_BACKOFF_S * 4)
        if self.runtime is None:
            await timeouts.sleep_until(wait_until)
            return
        with timeouts.move_on_at(wait_until):
            await self.runtime.leader_changed.wait()
        await trio.lowlevel.checkpoint()  # let the new leader's activation run first
