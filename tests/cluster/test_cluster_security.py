"""A three-node cluster whose nodes reach each other only over secured listeners: brokers
replicate over INTERNAL (SASL_SSL, PLAIN as the JAAS admin), voters and broker-to-controller
traffic go over CONTROLLER (SSL with ssl.client.auth=required: each node presents its
certificate). PLAINTEXT stays for the harness's observations. A client logs in with
SCRAM-SHA-512 on INTERNAL and its acks=all writes to a topic that needs all three replicas
in sync are acknowledged: replication works through the secured listeners. Delegation
tokens created through every node (those not the active controller forward them in an
Envelope over the mutual-TLS controller listener) log in on another node as their owner.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid

import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from client import AdminClient as OurAdmin
from client.errors import KafkaError
from harness.certs import make_certs
from tests.cluster.harness import FAST, HOST, Cluster, free_port
from tests.interop.conftest import REPO_ROOT
from tests.util import wait_until

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret";')


def test_a_cluster_replicates_over_sasl_ssl_and_elects_over_mutual_tls(tmp_path):
    certs = make_certs(tmp_path / "certs")
    cluster = Cluster(tmp_path / "cluster", 3, overrides={
        **FAST,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,"
                                          "CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": certs / "broker.pem",
        "ssl.truststore.location": certs / "ca.pem",
        "listener.name.controller.ssl.client.auth": "required",
        "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "delegation.token.secret.key": "cluster-token-secret",
    })
    internal = {}
    for node in cluster.nodes:
        internal[node.node_id] = free_port(HOST)
        node.overrides["listeners"] = (f"PLAINTEXT://{HOST}:{node.port},"
                                       f"INTERNAL://{HOST}:{internal[node.node_id]},"
                                       f"CONTROLLER://{HOST}:{node.controller_port}")
    with cluster:
        cluster.wait_formed()
        plain = cluster.bootstrap
        done = subprocess.run(
            [sys.executable, "-m", "tools.cli", "users", "--bootstrap-server", plain, "alter",
             "--entity-name", "alice", "--add-scram",
             "SCRAM-SHA-512=[iterations=4096,password=alice-secret]"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        topic = f"secure-rf3-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": plain})
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3,
                                      config={"min.insync.replicas": "3"})])[topic].result(20)
        producer = Producer({
            "bootstrap.servers": ",".join(f"{HOST}:{p}" for p in internal.values()),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": "alice-secret", "acks": "all", "linger.ms": 5})
        errors: list = []
        for i in range(30):
            producer.produce(topic, value=b"%d" % i, partition=i % 3,
                             on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert producer.flush(30) == 0 and errors == []
        partitions = cluster.partitions(0, topic)
        assert sorted(partitions) == [0, 1, 2]
        assert all(sorted(p.isr_nodes) == [0, 1, 2] for p in partitions.values())

        # a token created through each node, logged in with on the next one
        tls = {"security_protocol": "SASL_SSL",
               "ssl_truststore_location": str(certs / "ca.pem"),
               "sasl_mechanism": "SCRAM-SHA-512", "default_api_timeout_ms": 10_000}
        nodes = sorted(internal)
        for i, node in enumerate(nodes):
            token = trio.run(_create_token, f"{HOST}:{internal[node]}", tls)
            assert token.owner == "User:alice"
            other = f"{HOST}:{internal[nodes[(i + 1) % len(nodes)]]}"
            jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                    f'username="{token.token_id}" '
                    f'password="{base64.b64encode(token.hmac).decode()}" tokenauth="true";')
            # the other node logs the token in once the metadata reached it
            login = {**tls, "sasl_jaas_config": jaas}
            wait_until(lambda other=other, login=login: trio.run(_logs_in, other, login),
                       20, message=f"a login with the token made through node {node}")


async def _create_token(bootstrap: str, tls: dict):
    async with OurAdmin(bootstrap_servers=bootstrap, sasl_username="alice",
                        sasl_password="alice-secret", **tls) as admin:
        return await admin.create_delegation_token()


async def _logs_in(bootstrap: str, settings: dict) -> bool:
    try:
        async with OurAdmin(bootstrap_servers=bootstrap, **settings) as admin:
            await admin.describe_cluster(timeout_ms=3000)
            return True
    except KafkaError:
        return False
