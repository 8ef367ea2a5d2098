"""A three-node cluster whose nodes reach each other only over secured listeners: brokers
replicate over INTERNAL (SASL_SSL, PLAIN as the JAAS admin), voters and broker-to-controller
traffic go over CONTROLLER (SSL with ssl.client.auth=required: each node presents its
certificate). PLAINTEXT stays for the harness's observations. A client logs in with
SCRAM-SHA-512 on INTERNAL and its acks=all writes to a topic that needs all three replicas
in sync are acknowledged: replication works through the secured listeners.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.harness import FAST, HOST, Cluster, free_port
from tests.interop.conftest import REPO_ROOT
from harness.certs import make_certs

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
