"""ACLs live in the metadata log: created through one broker, every broker enforces them.

Three combined nodes on PLAINTEXT listeners, so every connection, the nodes' own included, is
User:ANONYMOUS. The cluster starts with allow.everyone.if.no.acl.found=true (nothing has an
ACL, so the nodes may replicate and the first ACLs may be created); the first ACLs give
User:ANONYMOUS everything on the cluster (the nodes keep their CLUSTER_ACTION) and another
principal a wildcard topic ACL, after which User:ANONYMOUS sees only the topics it is granted.

Moved from tests/cluster (a cluster of three processes of its own): the subject is the
metadata log and every node's authorizer, run here on the simulated cluster.
"""

from __future__ import annotations

from protocol import messages as m
from protocol.errors import ErrorCode
from sim.scenario import Scene, run_scenario

TOPIC, CLUSTER, LITERAL, ALL, DESCRIBE, READ, ALLOW = 2, 4, 3, 2, 8, 3, 3
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}


def acl(rtype: int, name: str, op: int, principal: str = "User:ANONYMOUS") -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": LITERAL,
            "principal": principal, "host": "*", "operation": op, "permission_type": ALLOW}


def test_acls_created_through_one_broker_are_enforced_by_every_broker():
    async def scenario(scene: Scene) -> None:
        seen, hidden = "acl-seen", "acl-hidden"
        for topic in (seen, hidden):
            await scene.create_topic(topic, 1, config={"min.insync.replicas": "1"})
        answer = await scene.call(0, m.CREATE_ACLS, {"creations": [
            acl(CLUSTER, "kafka-cluster", ALL), acl(TOPIC, "*", READ, "User:alice"),
            acl(TOPIC, seen, DESCRIBE)]}, version=3)
        assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * 3

        async def enforced(node_id: int) -> bool:
            body = await scene.call(node_id, m.METADATA, {"topics": None}, version=9)
            names = {t.name for t in body.topics}
            return seen in names and hidden not in names

        for node in (1, 2):
            await scene.wait_for(lambda n=node: enforced(n), 15,
                                 f"node {node} enforcing the ACLs created through node 0")
            described = await scene.call(node, m.DESCRIBE_ACLS, {
                "resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1}, version=3)
            assert sorted(r.resource_name for r in described.resources) == sorted(
                ["*", "kafka-cluster", seen])
        # the nodes, User:ANONYMOUS with ALL on the cluster, still replicate (the scene may
        # describe the new topic: its Metadata is User:ANONYMOUS's too)
        third = "acl-after"
        answer = await scene.call(2, m.CREATE_ACLS, {"creations": [
            acl(TOPIC, third, DESCRIBE)]}, version=3)
        assert answer.results[0].error_code == ErrorCode.NONE
        await scene.create_topic(third, 1, config={"min.insync.replicas": "1"})

    run_scenario(3, 1, scenario, overrides=AUTHORIZER)
