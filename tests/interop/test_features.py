"""Feature levels (KIP-584): kafka-python's admin reads them from ApiVersions and changes
them with UpdateFeatures, and `minibroker features` (our AdminClient) describes, upgrades
and downgrades them as kafka-features.sh does; a refused update changes nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kafka import KafkaAdminClient
from kafka.admin import UpdateFeatureType

pytestmark = pytest.mark.interop


def features_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "features", "--bootstrap-server",
                           bootstrap, *args], capture_output=True, text=True, timeout=60)


def test_kafka_python_reads_and_updates_feature_levels(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        before = admin.describe_features()
        assert before["metadata.version"]["supported"] == (1, 21)
        assert before["metadata.version"]["finalized"] == (21, 21)
        assert before["group.version"] == {"supported": (0, 1), "finalized": (1, 1),
                                           "finalized_epoch": before["group.version"][
                                               "finalized_epoch"]}
        epoch = before["group.version"]["finalized_epoch"]
        assert epoch >= 0

        assert admin.update_features(
            {"share.version": (UpdateFeatureType.SAFE_DOWNGRADE, 0)}) == {"share.version": "OK"}
        after = admin.describe_features()
        assert "finalized" not in after["share.version"]
        assert after["metadata.version"]["finalized_epoch"] > epoch

        with pytest.raises(Exception, match="only supports versions 0-1"):
            admin.update_features({"transaction.version": 2})
        assert admin.describe_features()["transaction.version"]["finalized"] == (1, 1)
    finally:
        admin.close()


def test_the_tool_describes_upgrades_and_downgrades(broker):
    done = features_cli(broker.bootstrap, "describe")
    assert done.returncode == 0, done.stderr
    lines = {line.split("\t")[0]: line.split("\t") for line in done.stdout.splitlines()}
    assert set(lines) == {"Feature: group.version", "Feature: metadata.version",
                          "Feature: share.version", "Feature: transaction.version"}
    mv = lines["Feature: metadata.version"]
    assert mv[1:4] == ["SupportedMinVersion: 3.0-IV1", "SupportedMaxVersion: 3.9-IV0",
                       "FinalizedVersionLevel: 3.9-IV0"]
    assert mv[4].startswith("Epoch: ") and int(mv[4].split()[1]) >= 0

    done = features_cli(broker.bootstrap, "downgrade", "--metadata", "3.7-IV2",
                        "--feature", "group.version=0", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["metadata.version can be downgraded to 17.",
                                        "group.version can be downgraded to 0."]
    done = features_cli(broker.bootstrap, "downgrade", "--feature", "group.version=0")
    assert done.stdout == "group.version was downgraded to 0.\n", done.stderr
    described = features_cli(broker.bootstrap, "describe").stdout
    assert "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t" \
           "FinalizedVersionLevel: -\t" in described

    # a metadata downgrade across 3.7-IV2 would lose metadata: refused, nothing changed
    done = features_cli(broker.bootstrap, "downgrade", "--metadata", "3.6",
                        "--feature", "group.version=1")
    assert done.returncode == 1
    assert "Could not downgrade metadata.version to 14. INVALID_UPDATE_VERSION" in done.stdout
    assert "2 out of 2 operation(s) failed." in done.stderr

    done = features_cli(broker.bootstrap, "upgrade", "--feature", "group.version=1",
                        "--metadata", "3.9")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["metadata.version was upgraded to 21.",
                                        "group.version was upgraded to 1."]
    assert "FinalizedVersionLevel: 1\t" in features_cli(broker.bootstrap, "describe").stdout

    done = features_cli(broker.bootstrap, "upgrade", "--feature", "group.version")
    assert done.returncode == 1 and "NAME=LEVEL" in done.stderr
