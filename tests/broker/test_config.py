"""Typed config: Kafka's names and defaults, and one-line refusals naming the key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.config import (
    BrokerConfig, ConfigError, parse_properties, topic_log_config, validate_topic_configs,
)


def test_defaults_are_kafkas():
    c = BrokerConfig.load()
    assert c["num.partitions"] == 1 and c["auto.create.topics.enable"] is True
    assert c["message.max.bytes"] == 1048588 and c["socket.request.max.bytes"] == 104857600
    assert c.retention_ms == 168 * 3_600_000 and c["log.segment.bytes"] == 1073741824


def test_typed_accessors_read_the_property_named_alike():
    c = BrokerConfig.load({"group.initial.rebalance.delay.ms": "250",
                           "delete.topic.enable": "false",
                           "advertised.listeners": "PLAINTEXT://broker-0:9093"})
    assert c.group_initial_rebalance_delay_ms == 250 and c.delete_topic_enable is False
    assert c.advertised_listeners == "PLAINTEXT://broker-0:9093"
    assert BrokerConfig.load().advertised_listeners is None
    accessors = [name for name, attr in vars(BrokerConfig).items() if hasattr(attr, "kind")]
    assert len(accessors) > 20
    for name in accessors:  # each one is the table's value under its Kafka name
        assert getattr(c, name) == c[name.replace("_", ".")]


def test_a_misspelt_or_mistyped_accessor_fails_when_defined():
    from broker.config import _Typed

    with pytest.raises((KeyError, RuntimeError)):
        type("Bad", (BrokerConfig,), {"group_max_sise": _Typed(int)})
    with pytest.raises((TypeError, RuntimeError)):
        type("Bad", (BrokerConfig,), {"group_max_size": _Typed(str)})
    with pytest.raises((TypeError, RuntimeError)):
        type("Bad", (BrokerConfig,), {"advertised_listeners": _Typed(str)})


def test_finer_retention_units_win():
    assert BrokerConfig.load({"log.retention.hours": "1"}).retention_ms == 3_600_000
    c = BrokerConfig.load({"log.retention.hours": "1", "log.retention.minutes": "2"})
    assert c.retention_ms == 120_000
    c = BrokerConfig.load({"log.retention.minutes": "2", "log.retention.ms": "5"})
    assert c.retention_ms == 5


@pytest.mark.parametrize("overrides,fragment", [
    ({"no.such.key": "1"}, "unknown config key 'no.such.key'"),
    ({"num.partitions": "many"}, "invalid value 'many' for num.partitions"),
    ({"num.partitions": "0"}, "num.partitions: must be >= 1"),
    ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
    ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type"),
    ({"message.max.bytes": str(2**31)}, "message.max.bytes: out of int32 range"),
])
def test_bad_keys_and_values_are_refused_naming_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(overrides)
    assert fragment in str(e.value)


def test_properties_file_and_topic_overrides():
    props = parse_properties("# comment\nnum.partitions=3\nlog.retention.ms : 1000\n\n")
    c = BrokerConfig.load(file_text="num.partitions=3\n")
    assert props == {"num.partitions": "3", "log.retention.ms": "1000"}
    assert c["num.partitions"] == 3
    log = topic_log_config(c, validate_topic_configs({"retention.ms": "60000",
                                                      "segment.bytes": "4096"}))
    assert (log.retention_ms, log.segment_bytes) == (60000, 4096)
    with pytest.raises(ConfigError):
        validate_topic_configs({"retention.ms": "soon"})


@pytest.mark.interop  # runs `minibroker serve` as a process
def test_cli_refuses_a_bad_key_with_one_line_and_status_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tools.cli", "serve", "--data-dir",
                           str(tmp_path), "-o", "log.segment.bytes=lots"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "minibroker: config error: invalid value 'lots' for log.segment.bytes: expected int"]
