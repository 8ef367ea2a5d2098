"""Each handler's authorization check, with principals other than User:ANONYMOUS (the
RequestContext a SASL connection would give), and the ACL APIs' broker side."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import trio

from broker.handlers import HANDLERS
from broker.handlers.context import RequestContext
from broker.handlers.controller import CONTROLLER_HANDLERS
from broker.security.acls import AclOperation as Op, AclPermissionType as Perm
from broker.security.acls import PatternType as Pat, ResourceType as Res
from protocol import messages as m
from protocol.errors import ErrorCode as E
from protocol.messages import ALL_APIS
from protocol.metadata_records import MetadataRecordType as T
from tests.broker.handlers.fakes import FakeBroker, encode, record, register, request, topic

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE = "User:alice"
_ids = iter(range(1, 10_000))


def grant(name: str, op: Op, *, rtype: Res = Res.TOPIC, principal: str = ALICE,
          pattern: Pat = Pat.LITERAL, perm: Perm = Perm.ALLOW) -> tuple:
    return record(T.ACCESS_CONTROL_ENTRY_RECORD, id=uuid.UUID(int=next(_ids)),
                  resource_type=rtype, resource_name=name, pattern_type=pattern,
                  principal=principal, host="*", operation=op, permission_type=perm)


def cluster(*acls: tuple, config: dict | None = None, nursery=None) -> FakeBroker:
    records = [*register(0), *topic("orders", uuid.UUID(int=1), [[0]]),
               *topic("payments", uuid.UUID(int=2), [[0]]), *acls]
    return FakeBroker(records, config={"authorizer.class.name": STANDARD, **(config or {})},
                      nursery=nursery)


async def call_as(broker: FakeBroker, principal: str, api_key: int, version: int,
                  body: dict, handlers=HANDLERS) -> dict:
    if api_key in m.APIS:
        req = request(api_key, version, body)
    else:  # a controller-listener API
        declaration = ALL_APIS[api_key].request
        parsed = declaration.parse(declaration.build(body, version), version)
        req = SimpleNamespace(header=SimpleNamespace(api_key=api_key, api_version=version,
                                                     correlation_id=1, client_id="t"),
                              body=parsed, size=0, api_key=api_key, api_version=version)
    ctx = RequestContext(broker, req, "10.0.0.1:5000", principal=principal)  # type: ignore[arg-type]
    response = await handlers[api_key](ctx)
    if api_key in m.APIS:
        encode(api_key, version, response)
    return response


def metadata(*names: str | None) -> dict:
    topics = None if names == (None,) else [{"name": n} for n in names]
    return {"topics": topics, "allow_auto_topic_creation": False}


async def test_metadata_leaves_out_what_the_principal_may_not_describe():
    broker = cluster(grant("orders", Op.READ))
    listed = await call_as(broker, ALICE, m.METADATA, 12, metadata(None))
    assert [t["name"] for t in listed["topics"]] == ["orders"]
    named = await call_as(broker, ALICE, m.METADATA, 12, metadata("orders", "payments"))
    assert [(t["name"], t["error_code"]) for t in named["topics"]] == [
        ("orders", E.NONE), ("payments", E.TOPIC_AUTHORIZATION_FAILED)]
    # a super user sees everything
    root = cluster(config={"super.users": "User:root;User:admin"})
    listed = await call_as(root, "User:admin", m.METADATA, 12, metadata(None))
    assert [t["name"] for t in listed["topics"]] == ["orders", "payments"]


async def test_produce_and_fetch_need_write_and_read_on_the_topic():
    broker = cluster(grant("orders", Op.READ))
    produced = await call_as(broker, ALICE, m.PRODUCE, 9, {
        "transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "orders", "partition_data": [{"index": 0, "records": b"x"}]}]})
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == \
        E.TOPIC_AUTHORIZATION_FAILED
    fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1000,
             "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                 {"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0,
                                              "log_start_offset": -1,
                                              "partition_max_bytes": 1000}]}
                 for t in ("orders", "payments")], "forgotten_topics_data": [], "rack_id": ""}
    fetched = await call_as(broker, ALICE, m.FETCH, 11, fetch)
    codes = {r["topic"]: r["partitions"][0]["error_code"] for r in fetched["responses"]}
    # orders is readable (not led here: NOT_LEADER_OR_FOLLOWER), payments is not
    assert codes == {"orders": E.NOT_LEADER_OR_FOLLOWER, "payments": E.TOPIC_AUTHORIZATION_FAILED}
    # a follower's fetch needs CLUSTER_ACTION on the cluster, whatever its topic ACLs
    fetched = await call_as(broker, ALICE, m.FETCH, 11, {**fetch, "replica_id": 1})
    assert {r["partitions"][0]["error_code"] for r in fetched["responses"]} == {
        E.TOPIC_AUTHORIZATION_FAILED}


async def test_group_apis_need_their_group_operation():
    broker = cluster(grant("app", Op.DESCRIBE, rtype=Res.GROUP))
    found = await call_as(broker, ALICE, m.FIND_COORDINATOR, 4,
                          {"key_type": 0, "coordinator_keys": ["other"]})
    assert found["coordinators"][0]["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    joined = await call_as(broker, ALICE, m.JOIN_GROUP, 9, {
        "group_id": "app", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}], "reason": None})
    assert joined["error_code"] == E.GROUP_AUTHORIZATION_FAILED  # DESCRIBE is not READ
    heartbeat = await call_as(broker, ALICE, m.HEARTBEAT, 4, {
        "group_id": "app", "generation_id": 1, "member_id": "m", "group_instance_id": None})
    assert heartbeat["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    deleted = await call_as(broker, ALICE, m.DELETE_GROUPS, 2, {"groups_names": ["app"]})
    assert deleted["results"][0]["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    committed = await call_as(broker, ALICE, m.OFFSET_COMMIT, 8, {
        "group_id": "app", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                               "committed_leader_epoch": -1,
                                               "committed_metadata": ""}]}]})
    assert committed["topics"][0]["partitions"][0]["error_code"] == E.GROUP_AUTHORIZATION_FAILED


async def test_admin_apis_are_refused_without_being_forwarded():
    broker = cluster(grant("orders", Op.DESCRIBE_CONFIGS))
    created = await call_as(broker, ALICE, m.CREATE_TOPICS, 7, {
        "topics": [{"name": "new", "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 1000,
        "validate_only": False})
    assert created["topics"][0]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
    deleted = await call_as(broker, ALICE, m.DELETE_TOPICS, 4,
                            {"topic_names": ["orders"], "timeout_ms": 1000})
    assert deleted["responses"][0]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
    assert broker.controller_channel.requests == []
    described = await call_as(broker, ALICE, m.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": n, "configuration_keys": None}
        for n in ("orders", "payments")] + [
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    assert [r["error_code"] for r in described["results"]] == [
        E.NONE, E.TOPIC_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED]
    pid = await call_as(broker, ALICE, m.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1,
        "producer_epoch": -1})
    assert pid["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    writer = cluster(grant("orders", Op.WRITE))
    pid = await call_as(writer, ALICE, m.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1,
        "producer_epoch": -1})
    assert pid["error_code"] == E.NONE  # WRITE on some topic is enough


DESCRIBE_ALL = {"resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1}


async def test_acl_apis_without_an_authorizer_answer_security_disabled():
    broker = FakeBroker([*register(0)])
    described = await call_as(broker, ALICE, m.DESCRIBE_ACLS, 3, DESCRIBE_ALL)
    assert described["error_code"] == E.SECURITY_DISABLED


async def test_describe_acls_needs_describe_on_the_cluster_and_groups_by_pattern():
    broker = cluster(grant("orders", Op.READ), grant("orders", Op.WRITE),
                     grant("kafka-cluster", Op.DESCRIBE, rtype=Res.CLUSTER,
                           principal="User:ops"))
    refused = await call_as(broker, ALICE, m.DESCRIBE_ACLS, 3, DESCRIBE_ALL)
    assert refused["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    described = await call_as(broker, "User:ops", m.DESCRIBE_ACLS, 3,
                              {**DESCRIBE_ALL, "resource_type_filter": Res.TOPIC})
    assert [(r["resource_name"], sorted(a["operation"] for a in r["acls"]))
            for r in described["resources"]] == [("orders", [Op.READ, Op.WRITE])]
    bad = await call_as(broker, "User:ops", m.DESCRIBE_ACLS, 3,
                        {**DESCRIBE_ALL, "operation": 0})
    assert bad["error_code"] == E.INVALID_REQUEST


async def test_create_acls_is_forwarded_and_answered_once_visible(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = cluster(config={"super.users": "User:admin"}, nursery=nursery)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {
            "throttle_time_ms": 0, "results": [{"error_code": 0, "error_message": None}]}
        controller.commit = [grant("orders", Op.READ)]
        creation = {"creations": [{"resource_type": Res.TOPIC, "resource_name": "orders",
                                   "resource_pattern_type": Pat.LITERAL, "principal": ALICE,
                                   "host": "*", "operation": Op.READ,
                                   "permission_type": Perm.ALLOW}]}
        refused = await call_as(broker, ALICE, m.CREATE_ACLS, 3, creation)
        assert refused["results"][0]["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
        created = await call_as(broker, "User:admin", m.CREATE_ACLS, 3, creation)
        assert created["results"][0]["error_code"] == E.NONE
        assert [k for k, _, _ in controller.requests] == [m.CREATE_ACLS]
        # answered once this broker enforces it
        listed = await call_as(broker, ALICE, m.METADATA, 12, metadata(None))
        assert [t["name"] for t in listed["topics"]] == ["orders"]


async def test_the_controller_listener_needs_cluster_action():
    broker = cluster()
    heartbeat = {"broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 0,
                 "want_fence": False, "want_shut_down": False}
    refused = await call_as(broker, ALICE, m.BROKER_HEARTBEAT, 0, heartbeat,
                            handlers=CONTROLLER_HANDLERS)
    assert refused["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    vote = await call_as(broker, ALICE, m.VOTE, 0, {"cluster_id": None, "topics": []},
                         handlers=CONTROLLER_HANDLERS)
    assert vote["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED


async def test_scram_credential_apis_need_describe_and_alter_on_the_cluster():
    broker = cluster(
        record(T.USER_SCRAM_CREDENTIAL_RECORD, name="bob", mechanism=2, salt=b"s" * 16,
               stored_key=b"k" * 64, server_key=b"v" * 64, iterations=4096),
        grant("kafka-cluster", Op.DESCRIBE, rtype=Res.CLUSTER, principal="User:ops"))
    refused = await call_as(broker, ALICE, m.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                            {"users": None})
    assert (refused["error_code"], refused["results"]) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
    described = await call_as(broker, "User:ops", m.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                              {"users": None})
    assert [(r["user"], r["credential_infos"]) for r in described["results"]] == [
        ("bob", [{"mechanism": 2, "iterations": 4096}])]
    # DESCRIBE is not ALTER: the alteration is refused here, before any controller is asked
    altered = await call_as(broker, "User:ops", m.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": "bob", "mechanism": 2}], "upsertions": []})
    assert [(r["user"], r["error_code"]) for r in altered["results"]] == [
        ("bob", E.CLUSTER_AUTHORIZATION_FAILED)]


async def test_metadata_by_id_refuses_an_undescribable_topic_with_its_id_not_its_name():
    broker = cluster(grant("orders", Op.DESCRIBE))
    body = await call_as(broker, ALICE, m.METADATA, 13, {
        "topics": [{"topic_id": uuid.UUID(int=1), "name": None},
                   {"topic_id": uuid.UUID(int=2), "name": None}],
        "allow_auto_topic_creation": False})
    assert [(t["error_code"], t["name"], t["topic_id"]) for t in body["topics"]] == [
        (E.NONE, "orders", uuid.UUID(int=1)),
        (E.TOPIC_AUTHORIZATION_FAILED, None, uuid.UUID(int=2))]


async def test_describe_topic_partitions_needs_describe_on_each_topic():
    broker = cluster(grant("orders", Op.DESCRIBE))
    every = await call_as(broker, ALICE, m.DESCRIBE_TOPIC_PARTITIONS, 0,
                          {"topics": [], "response_partition_limit": 10})
    assert [t["name"] for t in every["topics"]] == ["orders"]  # the rest left out, silently
    named = await call_as(broker, ALICE, m.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "payments"}, {"name": "orders"}, {"name": "ghost"}],
        "response_partition_limit": 10})
    # a denied topic comes after the page, with no id: its existence is not disclosed
    assert [(t["name"], t["error_code"], t["topic_id"]) for t in named["topics"]] == [
        ("orders", E.NONE, uuid.UUID(int=1)),
        ("ghost", E.TOPIC_AUTHORIZATION_FAILED, uuid.UUID(int=0)),
        ("payments", E.TOPIC_AUTHORIZATION_FAILED, uuid.UUID(int=0))]


async def test_client_telemetry_asks_nothing_and_listing_needs_describe_configs():
    telemetry = {"telemetry.metrics": "*"}
    broker = cluster(grant("kafka-cluster", Op.DESCRIBE_CONFIGS, rtype=Res.CLUSTER),
                     config=telemetry)
    listed = await call_as(broker, ALICE, m.LIST_CLIENT_METRICS_RESOURCES, 0, {})
    assert listed["client_metrics_resources"] == [{"name": "minibroker"}]
    refused = await call_as(broker, "User:bob", m.LIST_CLIENT_METRICS_RESOURCES, 0, {})
    assert refused["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    assert refused["client_metrics_resources"] == []
    # any client may ask for its subscription (and push), as in Kafka
    answer = await call_as(broker, "User:bob", m.GET_TELEMETRY_SUBSCRIPTIONS, 0,
                           {"client_instance_id": uuid.UUID(int=0)})
    assert answer["error_code"] == E.NONE and answer["requested_metrics"] == [""]


async def test_unregister_broker_needs_alter_on_the_cluster():
    broker = cluster(grant("kafka-cluster", Op.ALTER, rtype=Res.CLUSTER, principal="User:ops"))
    controller = broker.controller_channel
    controller.respond = lambda key, version, body: {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None}
    refused = await call_as(broker, ALICE, m.UNREGISTER_BROKER, 0, {"broker_id": 1})
    assert refused["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    assert controller.requests == []  # nothing reached the controller
    done = await call_as(broker, "User:ops", m.UNREGISTER_BROKER, 0, {"broker_id": 1})
    assert done["error_code"] == E.NONE
    assert [k for k, _, _ in controller.requests] == [m.UNREGISTER_BROKER]
