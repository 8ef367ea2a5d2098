"""The controller's request handling: which QuorumController operation answers each API,
and the NOT_CONTROLLER answer a node gives when it is not the active controller.

Owns: `ADMIN_APIS` / `BROKER_APIS` (the APIs the active controller answers: the admin ones
brokers forward for clients, and the broker life-cycle ones), `ENVELOPE_APIS` (those
that act for the client's principal, which a broker forwards inside an Envelope, KIP-590,
as Kafka does: the delegation token APIs), `handle`, which runs one of them on a
QuorumRuntime, and `not_controller`, the error answer shaped for each API so the sender
(a broker's ControllerChannel) knows to look for the new leader and retry.

The same path serves a request that came over the controller listener and one that a
combined node's broker hands to its own controller in process.
"""

from __future__ import annotations

from typing import Any

from broker.controller.runtime import NotController, QuorumRuntime
from broker.controller.voter_api import VOTER_APIS, handle_voter_change
from protocol import envelope
from protocol.errors import ErrorCode, ProtocolError

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
INCREMENTAL_ALTER_CONFIGS, ELECT_LEADERS = 44, 43
ALTER_PARTITION_REASSIGNMENTS = 45
BROKER_REGISTRATION, BROKER_HEARTBEAT, UNREGISTER_BROKER = 62, 63, 64
ALLOCATE_PRODUCER_IDS = 67
ALTER_PARTITION = 56
ASSIGN_REPLICAS_TO_DIRS = 73
CREATE_ACLS, DELETE_ACLS = 30, 31
ALTER_USER_SCRAM_CREDENTIALS = 51
ALTER_CLIENT_QUOTAS = 49
UPDATE_FEATURES = 57
ENVELOPE = 58
CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN, EXPIRE_DELEGATION_TOKEN = 38, 39, 40
ENVELOPE_APIS = frozenset({CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN,
                           EXPIRE_DELEGATION_TOKEN})

# AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter go to the Raft leader's node rather
# than to the controller's state machine (voter_api)
ADMIN_APIS = frozenset({CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
                        INCREMENTAL_ALTER_CONFIGS, ELECT_LEADERS, CREATE_ACLS, DELETE_ACLS,
                        ALTER_PARTITION_REASSIGNMENTS, UPDATE_FEATURES, ENVELOPE,
                        ALTER_USER_SCRAM_CREDENTIALS, ALTER_CLIENT_QUOTAS}) | VOTER_APIS
BROKER_APIS = frozenset({BROKER_REGISTRATION, BROKER_HEARTBEAT, UNREGISTER_BROKER,
                         ALLOCATE_PRODUCER_IDS, ALTER_PARTITION, ASSIGN_REPLICAS_TO_DIRS})


def _operation(api_key: int, body: Any, *, own_broker: bool = False):
    if api_key == CREATE_TOPICS:
        return lambda c, now, _off: c.create_topics(body, now)
    if api_key == DELETE_TOPICS:
        return lambda c, now, _off: c.delete_topics(body, now)
    if api_key == CREATE_PARTITIONS:
        return lambda c, now, _off: c.create_partitions(body, now)
    if api_key == INCREMENTAL_ALTER_CONFIGS:
        return lambda c, now, _off: c.incremental_alter_configs(body, now)
    if api_key == ELECT_LEADERS:
        return lambda c, now, _off: c.elect_leaders(body, now)
    if api_key == ALTER_PARTITION_REASSIGNMENTS:
        return lambda c, now, _off: c.alter_partition_reassignments(body, now)
    if api_key == CREATE_ACLS:
        return lambda c, now, _off: c.create_acls(body, now)
    if api_key == DELETE_ACLS:
        return lambda c, now, _off: c.delete_acls(body, now)
    if api_key == ALTER_USER_SCRAM_CREDENTIALS:
        return lambda c, now, _off: c.alter_user_scram_credentials(body, now)
    if api_key == ALTER_CLIENT_QUOTAS:
        return lambda c, now, _off: c.alter_client_quotas(body, now)
    if api_key == UPDATE_FEATURES:
        return lambda c, now, _off: c.update_features(body, now)
    if api_key == BROKER_REGISTRATION:
        return lambda c, now, offset: c.register_broker(body, now, offset,
                                                        own_broker=own_broker)
    if api_key == BROKER_HEARTBEAT:
        return lambda c, now, _off: c.broker_heartbeat(body, now)
    if api_key == UNREGISTER_BROKER:
        return lambda c, now, _off: c.unregister_broker(body, now)
    if api_key == ALLOCATE_PRODUCER_IDS:
        return lambda c, now, _off: c.allocate_producer_ids(body.broker_id, body.broker_epoch)
    if api_key == ALTER_PARTITION:
        return lambda c, now, _off: c.alter_partition(body, now)
    if api_key == ASSIGN_REPLICAS_TO_DIRS:
        return lambda c, now, _off: c.assign_replicas_to_dirs(body, now)
    raise ValueError(f"api {api_key} is not a controller operation")


def _operation_for(api_key: int, body: Any, principal: str):
    """An Envelope's request: an operation acting for the client's principal."""
    if api_key == CREATE_DELEGATION_TOKEN:
        return lambda c, now, _off: c.create_delegation_token(body, principal, now)
    if api_key == RENEW_DELEGATION_TOKEN:
        return lambda c, now, _off: c.renew_delegation_token(body, principal, now)
    if api_key == EXPIRE_DELEGATION_TOKEN:
        return lambda c, now, _off: c.expire_delegation_token(body, principal, now)
    raise ValueError(f"api {api_key} is not forwarded in an Envelope")


async def _handle_envelope(runtime: QuorumRuntime, body: Any) -> dict:
    """Kafka's ControllerApis.handleEnvelopeRequest: the wrapped request run for the
    principal it carries; a request that does not decode, or is not one that needs a
    principal, is INVALID_REQUEST."""
    try:
        request, principal, _token = envelope.unwrap_request(body)
    except ProtocolError:
        return {"error_code": ErrorCode.INVALID_REQUEST, "response_data": None}
    if request.api_key not in ENVELOPE_APIS or request.body is None:
        return {"error_code": ErrorCode.INVALID_REQUEST, "response_data": None}
    try:
        response = await runtime.submit(_operation_for(request.api_key, request.body,
                                                       principal))
    except NotController:
        return not_controller(ENVELOPE, body)
    response.setdefault("throttle_time_ms", 0)
    return {"error_code": ErrorCode.NONE,
            "response_data": envelope.wrap_response(request, response)}


async def handle(runtime: QuorumRuntime, api_key: int, body: Any, *,
                 in_process: bool = False) -> dict:
    """Run one controller API; `in_process` when this node's own broker asks."""
    # The broker of the controller's own process registers: any earlier incarnation of
    # this node id was an earlier run of this process, so it is certainly gone, and its
    # unexpired session (a restarted controller gives every broker a fresh one) must not
    # keep it out. Whether it stopped cleanly is still its previous_broker_epoch's to say.
    if api_key in VOTER_APIS:
        return await handle_voter_change(runtime, api_key, body)
    own_broker = (in_process and api_key == BROKER_REGISTRATION
                  and body.broker_id == runtime.node.node_id)
    if api_key == ENVELOPE:
        return await _handle_envelope(runtime, body)
    try:
        response = await runtime.submit(_operation(api_key, body, own_broker=own_broker))
    except NotController:
        return not_controller(api_key, body)
    response.setdefault("throttle_time_ms", 0)
    return response


def not_controller(api_key: int, body: Any) -> dict:
    """The answer of a node that is not the active controller, in the API's own shape."""
    code = ErrorCode.NOT_CONTROLLER
    out: dict[str, Any] = {"throttle_time_ms": 0}
    if api_key == CREATE_TOPICS:
        out["topics"] = [{"name": t.name, "error_code": code, "error_message": None,
                          "num_partitions": -1, "replication_factor": -1, "configs": None}
                         for t in body.topics]
    elif api_key == DELETE_TOPICS:
        out["responses"] = [{"name": t.get("name"), "topic_id": t.get("topic_id"),
                             "error_code": code} for t in (body.get("topics") or [])]
        out["responses"] += [{"name": n, "error_code": code}
                             for n in (body.get("topic_names") or [])]
    elif api_key == CREATE_PARTITIONS:
        out["results"] = [{"name": t.name, "error_code": code, "error_message": None}
                          for t in body.topics]
    elif api_key == INCREMENTAL_ALTER_CONFIGS:
        out["responses"] = [{"error_code": code, "error_message": None,
                             "resource_type": r.resource_type, "resource_name": r.resource_name}
                            for r in body.resources]
    elif api_key == ELECT_LEADERS:
        out["error_code"] = code
        out["replica_election_results"] = []
    elif api_key == CREATE_ACLS:
        out["results"] = [{"error_code": code, "error_message": None} for _ in body.creations]
    elif api_key == DELETE_ACLS:
        out["filter_results"] = [{"error_code": code, "error_message": None,
                                  "matching_acls": []} for _ in body.filters]
    elif api_key == ALTER_USER_SCRAM_CREDENTIALS:
        users = dict.fromkeys(a.name for a in [*body.deletions, *body.upsertions])
        out["results"] = [{"user": u, "error_code": code, "error_message": None}
                          for u in users]
    elif api_key == ALTER_CLIENT_QUOTAS:
        out["entries"] = [{"error_code": code, "error_message": None,
                           "entity": [{"entity_type": e.entity_type,
                                       "entity_name": e.entity_name} for e in entry.entity]}
                          for entry in body.entries]
    else:
        out["error_code"] = code
    return out


def is_not_controller(api_key: int, response: Any) -> bool:
    """Did the answer come from a node that is not (or no longer) the active controller?"""
    def coded(items: Any) -> bool:
        return any(i.get("error_code") == ErrorCode.NOT_CONTROLLER for i in items or [])
    if response.get("error_code") == ErrorCode.NOT_CONTROLLER:
        return True
    for key in ("topics", "responses", "results", "filter_results", "entries"):
        if coded(response.get(key)):
            return True
    return False
