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

from broker.controller import api
from broker.controller.runtime import QuorumRuntime

log = logging.getLogger("minibroker.controller_channel")

RETRY_BACKOFF_S = 0.05


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
                response = await api.handle(runtime, api_key, body)
                if not api.is_not_controller(api_key, response):
                    return response
                last_error = "the leadership moved during the request"
                continue
            leader = self.leader_id
            if leader < 0 or (runtime is not None and leader == runtime.node.node_id) \
                    or self._peer is None:
                await self._wait_for_leader(deadline)
                continue
            with trio.move_on_at(deadline):
                try:
                    response = await self._peer(leader).request(
                        api_key, api_version, body,
                        timeout_s=max(0.001, deadline - trio.current_time()))
                except Exception as e:  # noqa: BLE001  unreachable: it may have just died
                    last_error = f"controller {leader}: {e}"
                    await self._wait_for_leader(min(deadline, trio.current_time() + 0.5))
                    continue
                if not api.is_not_controller(api_key, response):
                    return response
                last_error = f"node {leader} is no longer the active controller"
                await self._wait_for_leader(min(deadline, trio.current_time() + 0.5))
        raise ControllerUnavailable(last_error)

    async def _wait_for_leader(self, deadline: float) -> None:
        """Until the quorum names a (new) leader, or a short backoff, or the deadline."""
        wait_until = min(deadline, trio.current_time() + RETRY_BACKOFF_S * 4)
        if self.runtime is None:
            await trio.sleep_until(wait_until)
            return
        with trio.move_on_at(wait_until):
            await self.runtime.leader_changed.wait()
        await trio.lowlevel.checkpoint()  # let the new leader's activation run first
