"""ACLs against a real broker process, with real clients: kafka-python's and
confluent-kafka's AdminClient create, describe and delete them; producers, consumers and
Metadata are refused or filtered as Kafka's StandardAuthorizer would.

Until SASL exists every connection is User:ANONYMOUS. The module's broker starts with
allow.everyone.if.no.acl.found=true so the first ACLs can be created; the first test then
grants User:ANONYMOUS everything on the cluster and puts a wildcard topic and group ACL for
another principal in place, so that from then on every topic and group has an ACL and
User:ANONYMOUS needs its own grants, as under the default (deny) rule.
"""

from __future__ import annotations

import io

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
    KafkaAdminClient, ResourcePattern, ResourcePatternFilter,
)
from kafka.admin import ResourceType as KPResourceType

from protocol.messages import METADATA
from tests.interop.group_helpers import wait_for_error
from tests.interop.librdkafka import _admin, create_topic
from tests.interop.raw import Raw
from tests.util import unique, wait_until
from tools import acls
from cli.main import build_parser

pytestmark = pytest.mark.interop

SHARED_BROKER_OVERRIDES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
ANON = "User:ANONYMOUS"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def binding(rtype, name, op, *, principal=ANON, pattern=ResourcePatternType.LITERAL,
            perm=ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def create_acls(bootstrap: str, *bindings: AclBinding) -> None:
    admin = _admin(bootstrap)  # held: a destroyed handle fails its futures
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=10)


@pytest.fixture(scope="module")
def locked(shared_broker):
    """The broker after the ACLs that make User:ANONYMOUS need grants for topics and groups."""
    create_acls(shared_broker.bootstrap,
                binding(ResourceType.BROKER, "kafka-cluster", AclOperation.ALL),
                binding(ResourceType.TOPIC, "*", AclOperation.READ, principal="User:alice"),
                binding(ResourceType.GROUP, "*", AclOperation.READ, principal="User:alice"))
    return shared_broker


def produce_error(bootstrap: str, topic: str):
    """The delivery error of one record (None when delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000,
                         "enable.idempotence": False})
    errors: list = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert len(errors) == 1
    return errors[0]


def test_confluent_admin_creates_describes_and_deletes_acls(locked):
    admin = _admin(locked.bootstrap)
    extra = binding(ResourceType.TOPIC, "tmp-", AclOperation.WRITE, principal="User:bob",
                    pattern=ResourcePatternType.PREFIXED)
    create_acls(locked.bootstrap, extra)
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=10)
    assert extra in described
    assert binding(ResourceType.TOPIC, "*", AclOperation.READ, principal="User:alice") \
        in described
    # a MATCH filter finds the prefixed ACL by a topic name under it
    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "tmp-x", ResourcePatternType.MATCH, "User:bob", None,
        AclOperation.ANY, AclPermissionType.ANY)])
    [future] = deleted.values()
    assert future.result(timeout=10) == [extra]
    left = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=10)
    assert left == []


def test_kafka_python_admin_creates_describes_and_deletes_acls(locked):
    admin = KafkaAdminClient(bootstrap_servers=locked.bootstrap)
    try:
        acl = ACL("User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                  ResourcePattern(KPResourceType.GROUP, "audit",
                                  ACLResourcePatternType.LITERAL))
        result = admin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter("User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KPResourceType.ANY, None,
                                              ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(flt)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name)
                for a in found] == [("User:carol", ACLOperation.DESCRIBE, "audit")]
        [(_filter, matched, error)] = admin.delete_acls([flt])
        assert error.errno == 0 and [a.principal for a in matched] == ["User:carol"]
        assert admin.describe_acls(flt)[0] == []
        # an invalid creation is INVALID_REQUEST for that ACL, not a dead broker
        bad = ACL("User:carol", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(KPResourceType.CLUSTER, "not-the-cluster",
                                  ACLResourcePatternType.LITERAL))
        result = admin.create_acls([bad])
        assert len(result["failed"]) == 1 and result["succeeded"] == []
    finally:
        admin.close()


def test_producer_needs_write_and_a_prefixed_acl_grants_exactly_its_prefix(locked):
    base = unique("pfx")
    for name in (f"{base}-pay-1", f"{base}-pa-1", f"{base}-pay-secret"):
        create_topic(locked.bootstrap, name)  # ANONYMOUS holds ALL on the cluster
    assert produce_error(locked.bootstrap, f"{base}-pay-1").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(locked.bootstrap,
                binding(ResourceType.TOPIC, f"{base}-pay-", AclOperation.WRITE,
                        pattern=ResourcePatternType.PREFIXED),
                binding(ResourceType.TOPIC, f"{base}-pay-secret", AclOperation.WRITE,
                        perm=DENY))
    assert produce_error(locked.bootstrap, f"{base}-pay-1") is None
    assert produce_error(locked.bootstrap, f"{base}-pa-1").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # a deny beats the prefixed allow
    assert produce_error(locked.bootstrap, f"{base}-pay-secret").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_leaves_out_topics_anonymous_may_not_describe(locked):
    base = unique("md")
    create_topic(locked.bootstrap, f"{base}-seen")
    create_topic(locked.bootstrap, f"{base}-hidden")
    create_acls(locked.bootstrap, binding(ResourceType.TOPIC, f"{base}-seen",
                                          AclOperation.DESCRIBE))
    admin = _admin(locked.bootstrap)
    topics = admin.list_topics(timeout=10).topics
    assert f"{base}-seen" in topics and f"{base}-hidden" not in topics


def test_consumer_group_without_read_gets_group_authorization_failed(locked):
    topic = unique("grp")
    create_topic(locked.bootstrap, topic)
    create_acls(locked.bootstrap, binding(ResourceType.TOPIC, topic, AclOperation.READ))
    wait_for_error({"bootstrap.servers": locked.bootstrap, "group.id": unique("g")}, topic,
                   KafkaError.GROUP_AUTHORIZATION_FAILED)


def test_denials_go_to_the_authorizer_log_not_the_main_log(locked):
    # a client that retries a refused request: 300 Metadata requests for a topic
    # User:ANONYMOUS may not describe, each denied and logged
    topic = unique("denied")
    create_topic(locked.bootstrap, topic)
    retries = 300
    with Raw(locked) as raw:
        for _ in range(retries):
            body = raw.call(METADATA, 12, {"topics": [{"name": topic}],
                                           "allow_auto_topic_creation": False})
            assert body.topics[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denials = locked.data_dir / "authorizer.log"
    line = (f"minibroker.authorizer: Principal = User:ANONYMOUS is Denied operation = "
            f"DESCRIBE from host = 127.0.0.1 on resource = TOPIC:{topic} for request = "
            f"Metadata")

    def logged() -> int:
        return sum(line in text for text in denials.read_text().splitlines())
    wait_until(lambda: logged() == retries, 10, message=f"{retries} denials in {denials}")
    main = locked.log_path.read_text()
    assert topic not in main
    assert " is Denied " not in main  # nor anyone else's denial from this module's tests
    assert f"authorization denials are logged to {denials}" in main


def test_default_deny_and_super_users(make_broker):
    strict = make_broker(**{"authorizer.class.name": SHARED_BROKER_OVERRIDES[
        "authorizer.class.name"]})
    # librdkafka's describe_acls drops the top-level error; kafka-python's returns it
    admin = KafkaAdminClient(bootstrap_servers=strict.bootstrap)
    try:
        everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(KPResourceType.ANY, None,
                                                     ACLResourcePatternType.ANY))
        try:
            found, error = admin.describe_acls(everything)
        except Exception as e:  # kafka-python versions differ: raised or returned
            found, error = [], e
        assert found == [] and "ClusterAuthorizationFailed" in type(error).__name__ + repr(error)
    finally:
        admin.close()
    root = make_broker(**{"authorizer.class.name": SHARED_BROKER_OVERRIDES[
        "authorizer.class.name"], "super.users": "User:admin;User:ANONYMOUS"})
    create_topic(root.bootstrap, "anything")
    assert produce_error(root.bootstrap, "anything") is None


def test_the_acls_tool_adds_lists_and_removes(locked):
    def tool(*argv: str) -> str:
        args = build_parser().parse_args(["acls", "--bootstrap-server", locked.bootstrap, *argv])
        out, err = io.StringIO(), io.StringIO()
        assert acls.run(args, out, err) == 0, err.getvalue()
        return out.getvalue()

    group = unique("toolgrp")
    tool("--add", "--allow-principal", "User:dave", "--operation", "Read",
         "--operation", "Describe", "--group", group)
    listed = tool("--list", "--group", group)
    assert f"resourceType=GROUP, name={group}, patternType=LITERAL" in listed
    assert "principal=User:dave, host=*, operation=READ, permissionType=ALLOW" in listed
    assert "operation=DESCRIBE" in listed
    removed = tool("--remove", "--allow-principal", "User:dave", "--operation", "Read",
                   "--group", group)
    assert "operation=READ" in removed and "operation=DESCRIBE" not in removed
    assert "operation=READ" not in tool("--list", "--group", group)
