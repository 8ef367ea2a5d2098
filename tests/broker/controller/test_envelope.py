"""Envelope (58, KIP-590) on the controller: a delegation-token request wrapped with the
client's principal, encoded as it travels between nodes, runs for that principal; bytes
that do not decode, or an API that is not forwarded this way, are INVALID_REQUEST; a node
that is not the active controller says NOT_CONTROLLER, so the sender looks again."""

from __future__ import annotations

import random

import trio

from broker.controller import api
from broker.controller.quorum_controller import ControllerSettings, QuorumController
from broker.controller.runtime import NotController
from protocol import envelope
from protocol.errors import ErrorCode as E
from protocol.messages import CREATE_DELEGATION_TOKEN, ENVELOPE, METADATA, request_body
from protocol.messages.envelope import EnvelopeRequest

SETTINGS = ControllerSettings(node_id=1, voters=(1,), delegation_token_secret_key="k")


class Runtime:
    """QuorumRuntime.submit's contract: run the operation on the active controller."""

    def __init__(self, active: bool = True):
        self.controller = QuorumController(SETTINGS, random.Random(1))
        self.active = active

    async def submit(self, operation):
        if not self.active:
            raise NotController(2)
        return operation(self.controller, 1_000, 0).response


def over_the_wire(body: dict):
    """The envelope as the controller listener parses it."""
    return EnvelopeRequest.parse(EnvelopeRequest.build(body, 0), 0)


def test_a_wrapped_create_runs_for_the_principal_it_carries():
    wrapped = envelope.wrap_request(CREATE_DELEGATION_TOKEN, 3, {
        "owner_principal_type": None, "owner_principal_name": None,
        "renewers": [{"principal_type": "User", "principal_name": "bob"}],
        "max_lifetime_ms": -1}, "User:alice", False, bytes([127, 0, 0, 1]))
    answer = trio.run(api.handle, Runtime(), ENVELOPE, over_the_wire(wrapped))
    assert answer["error_code"] == E.NONE
    body = envelope.unwrap_response(CREATE_DELEGATION_TOKEN, 3, answer["response_data"])
    assert body.error_code == E.NONE and body.principal_name == "alice"
    assert body.token_requester_principal_name == "alice" and body.issue_timestamp_ms == 1_000


def test_what_is_not_a_wrapped_token_request_is_invalid():
    metadata = envelope.wrap_request(METADATA, 12, request_body(METADATA, 12, {
        "topics": None, "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}), "User:alice")
    for wrapped in (metadata, {**metadata, "request_data": b"\x00\x26junk"}):
        answer = trio.run(api.handle, Runtime(), ENVELOPE, over_the_wire(wrapped))
        assert answer == {"error_code": E.INVALID_REQUEST, "response_data": None}


def test_a_standby_says_not_controller():
    wrapped = envelope.wrap_request(CREATE_DELEGATION_TOKEN, 2, {
        "renewers": [], "max_lifetime_ms": -1}, "User:alice")
    answer = trio.run(api.handle, Runtime(active=False), ENVELOPE, over_the_wire(wrapped))
    assert api.is_not_controller(ENVELOPE, answer)
