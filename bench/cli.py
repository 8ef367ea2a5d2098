"""`minibroker bench ...`: dispatch to one benchmark by its first word.

    minibroker bench produce|consume ...   throughput with confluent-kafka (bench.throughput)
    minibroker bench groups ...            group formation and commit rate (bench.groups)
    minibroker bench client ...            our client beside aiokafka, kafka-python, confluent-kafka
    minibroker bench rebalance ...         rolling bounce, eager against cooperative
    minibroker bench cluster ...           a three-node cluster's failovers (bench.cluster)
    minibroker bench replication ...       replicated produce, latency, catch-up, broker CPU
                                           (bench.replication)
    minibroker bench compose ...           produce/consume against the Docker Compose cluster,
                                           beside local processes (bench.compose)
    minibroker bench authorizer ...        ns per ACL check, indexed against a scan
                                           (bench.authorizer)
    minibroker bench security ...          produce/consume over SSL and SASL_SSL beside
                                           PLAINTEXT, and with 10,000 ACLs (bench.security)
    minibroker bench metadata-restart ...  a restart after 100,000 metadata records, replayed
                                           or from a snapshot (bench.metadata_restart)
    minibroker bench codec ...             µs per message to encode and decode, the construct
                                           tree beside the generated codec (bench.codec)
    minibroker bench scale ...             thousands of partitions: idle cost, latency beside
                                           them, creating them, a restart (bench.scale)
    minibroker bench transactions ...      transactional produce beside idempotent, commit
                                           latency, read_committed (bench.transactions)
    minibroker bench share-groups ...      share consumers on one partition: 1, 2, 4 slow
                                           members; one fast beside a classic consumer
                                           (bench.share_groups)
    minibroker bench reassignment ...      300 partitions (1 GB) moved onto a new broker under
                                           a 20 MB/s throttle: move time, acks=all p99 before
                                           and during (bench.reassignment)
    minibroker bench quotas ...            a quota-throttled producer and consumer against
                                           their quota, beside unthrottled ones (bench.quotas)

The benchmarks drive other clients and draw charts: they need the `bench` extra. Owns the
dispatch (`run`) and which of the extra's modules the chosen benchmark imports
(`requirements`); the command line (cli.main) checks those before it starts, so that a
missing module is one line naming `pip install 'minibroker[bench]'` and exit status 2.
"""

from __future__ import annotations

import importlib
import sys

_MODULES = {"groups": "bench.groups", "client": "bench.clients", "rebalance": "bench.rebalance",
            "cluster": "bench.cluster", "replication": "bench.replication",
            "compose": "bench.compose", "authorizer": "bench.authorizer",
            "security": "bench.security", "metadata-restart": "bench.metadata_restart",
            "codec": "bench.codec", "scale": "bench.scale", "reassignment": "bench.reassignment",
            "transactions": "bench.transactions", "share-groups": "bench.share_groups",
            "quotas": "bench.quotas"}


def _option(argv: list[str], name: str) -> str | None:
    """The value of `--name V` or `--name=V` in argv (the last one), without parsing."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def requirements(argv: list[str]) -> list[str]:
    """The bench extra's modules the benchmark `argv` names will import."""
    if {"-h", "--help"} & set(argv):
        return []
    which = argv[0] if argv else None
    if which == "client":
        clients = (_option(argv, "--clients") or
                   "minibroker,aiokafka,kafka-python,confluent-kafka").split(",")
        # the consume half prepares its topic with confluent-kafka whatever is compared
        return ["confluent_kafka"] + [module for name, module in
                                      (("aiokafka", "aiokafka"), ("kafka-python", "kafka"))
                                      if name in clients]
    if which in ("authorizer", "metadata-restart", "codec"):
        return []  # nothing beyond the broker and its own protocol codec
    if which == "rebalance":
        needs = []
        if _option(argv, "--client") == "librdkafka":
            needs.append("confluent_kafka")
        if "--compare" not in argv or _option(argv, "--chart") is not None:
            needs.append("matplotlib")  # a run always draws its chart
        return needs
    return ["confluent_kafka"]  # groups, produce, consume


def run(argv: list[str]) -> int:
    """Run the benchmark argv names (produce or consume when its first word names none)."""
    module = _MODULES.get(argv[0]) if argv else None
    if module is not None:
        return importlib.import_module(module).main(argv[1:])
    from bench import throughput
    return throughput.main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
