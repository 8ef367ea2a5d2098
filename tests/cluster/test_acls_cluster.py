"""ACLs live in the metadata log: created through one broker, every broker enforces them.

Three combined nodes on PLAINTEXT listeners, so every connection, the nodes' own included, is
User:ANONYMOUS. The cluster starts with allow.everyone.if.no.acl.found=true (nothing has an
ACL, so the nodes may replicate and the first ACLs may be created); the first ACLs give
User:ANONYMOUS everything on the cluster (the nodes keep their CLUSTER_ACTION) and another
principal a wildcard topic ACL, after which User:ANONYMOUS sees only the topics it is granted.
"""

from __future__ import annotations

import pytest

from harness.raw import call
from protocol import messages as m
from protocol.errors import ErrorCode
from tests.cluster.harness import FAST
from tests.cluster.test_replication import create
from tests.util import unique

pytestmark = pytest.mark.interop

TOPIC, CLUSTER, LITERAL, ALL, DESCRIBE, READ, ALLOW = 2, 4, 3, 2, 8, 3, 3


def acl(rtype: int, name: str, op: int, principal: str = "User:ANONYMOUS") -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": LITERAL,
            "principal": principal, "host": "*", "operation": op, "permission_type": ALLOW}


def test_acls_created_through_one_broker_are_enforced_by_every_broker(make_cluster):
    cluster = make_cluster(overrides={
        **FAST, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    cluster.wait_formed()
    seen, hidden = unique("acl-seen"), unique("acl-hidden")
    create(cluster, seen, 1, 1)
    create(cluster, hidden, 1, 1)
    answer = call(cluster.node(0).port, m.CREATE_ACLS, 3, {"creations": [
        acl(CLUSTER, "kafka-cluster", ALL), acl(TOPIC, "*", READ, "User:alice"),
        acl(TOPIC, seen, DESCRIBE)]})
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * 3

    def listed(node_id: int) -> set[str]:
        return {t.name for t in cluster.metadata(node_id).topics}

    for node in (1, 2):
        cluster.wait_for(lambda n=node: seen in listed(n) and hidden not in listed(n), 15,
                         f"node {node} enforcing the ACLs created through node 0")
        described = call(cluster.node(node).port, m.DESCRIBE_ACLS, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        assert sorted(r.resource_name for r in described.resources) == sorted(
            ["*", "kafka-cluster", seen])
    # the nodes, User:ANONYMOUS with ALL on the cluster, still replicate (the test may
    # describe the new topic: its Metadata is User:ANONYMOUS's too)
    third = unique("acl-after")
    answer = call(cluster.node(2).port, m.CREATE_ACLS, 3, {"creations": [
        acl(TOPIC, third, DESCRIBE)]})
    assert answer.results[0].error_code == ErrorCode.NONE
    create(cluster, third, 1, 1)  # three replicas, waited for in every ISR
