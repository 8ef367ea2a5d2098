"""Replication throttles (broker.replication.quota): the rate measured, which partitions a
broker holds back, the configs followed from the image, and bad throttled-replica lists."""

import pytest

from broker.config import ConfigError, validate_topic_configs
from broker.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.replication.quota import (
    ALL, UNLIMITED, ReplicationQuota, ReplicationQuotas, ThrottledRate, throttled_partitions,
)


def test_a_rate_is_the_bytes_of_its_windows_over_the_time_they_span():
    rate = ThrottledRate(samples=3, window_s=1.0)
    rate.record(1000, 10.0)
    # a young measurement spans at least one window, not the whole of them
    assert rate.rate(10.5) == pytest.approx(1000)
    rate.record(1000, 11.2)
    assert rate.rate(12.0) == pytest.approx(1000)
    # windows older than samples * window are forgotten
    assert rate.rate(13.5) == pytest.approx(1000 / 2.3)
    assert rate.rate(20.0) == 0.0


def test_the_wait_is_how_long_until_the_rate_is_back_under_the_bound():
    rate = ThrottledRate(samples=11, window_s=1.0)
    rate.record(30_000, 0.0)
    assert rate.wait_s(10_000, 1.0) == pytest.approx(2.0)
    assert rate.wait_s(10_000, 4.0) == 0.0


def test_a_throttle_over_time_lets_through_its_bound_and_no_more():
    """A sender that sends whenever the quota is not exceeded moves bound bytes a second."""
    quota = ReplicationQuota(bound=1_000_000, throttled={"t": ALL})
    sent, now = 0, 0.0
    while now < 60.0:
        if not quota.is_exceeded(now):
            quota.record(100_000, now)
            sent += 100_000
        now += 0.01
    assert sent / 60.0 == pytest.approx(1_000_000, rel=0.05)


def test_a_broker_keeps_only_the_throttled_replicas_naming_it():
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) is None
    assert throttled_partitions("*", 3) == ALL
    assert throttled_partitions("", 3) is None


@pytest.mark.parametrize("value", ["0", "a:1", "0:b", "*,0:1", "0;1"])
def test_a_malformed_throttled_replica_list_is_refused(value):
    with pytest.raises(ConfigError):
        validate_topic_configs({"leader.replication.throttled.replicas": value})


def test_a_well_formed_throttled_replica_list_is_taken():
    parsed = validate_topic_configs({"follower.replication.throttled.replicas": "0:1, 1:2"})
    assert parsed["follower.replication.throttled.replicas"] == ("0:1", "1:2")


def _image(configs):
    return MetadataImage(brokers={}, topics_by_id={}, topic_ids_by_name={},
                         configs=configs, features={})


def test_quotas_follow_the_broker_and_topic_configs_of_the_image():
    quotas = ReplicationQuotas(1, {"leader.replication.throttled.rate": UNLIMITED})
    assert not quotas.leader.active and not quotas.follower.active
    image = _image({
        (BROKER_RESOURCE, "1"): {"leader.replication.throttled.rate": "5000"},
        (BROKER_RESOURCE, ""): {"leader.replication.throttled.rate": "9",
                                "follower.replication.throttled.rate": "7000"},
        (TOPIC_RESOURCE, "moving"): {"leader.replication.throttled.replicas": "0:1,1:0",
                                     "follower.replication.throttled.replicas": "2:1"},
        (TOPIC_RESOURCE, "still"): {"retention.ms": "1000"},
    })
    quotas.follow(image)
    assert quotas.leader.bound == 5000  # the broker's own value beats the cluster default
    assert quotas.follower.bound == 7000
    assert quotas.leader.is_throttled("moving", 0) and not quotas.leader.is_throttled("moving", 1)
    assert quotas.follower.is_throttled("moving", 2)
    assert not quotas.leader.is_throttled("still", 0)
    assert quotas.leader.active and quotas.follower.active
    # the throttle removed (as reassign-partitions --verify does once the moves are done)
    quotas.follow(_image({(TOPIC_RESOURCE, "moving"): {"retention.ms": "1"}}))
    assert quotas.leader.bound == UNLIMITED and not quotas.leader.active
    assert not quotas.follower.is_throttled("moving", 2)
