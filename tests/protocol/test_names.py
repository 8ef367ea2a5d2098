"""protocol.names: Kafka's topic-name rule and the <topic>-<partition> directory name."""

from __future__ import annotations

import pytest

from protocol.names import (MAX_TOPIC_NAME_LENGTH, parse_partition_dir, partition_dir_name,
                            topic_name_error, validate_topic_name)


@pytest.mark.parametrize("name", ["orders", "orders-eu", "a.b_c-D9", "__consumer_offsets",
                                  "x" * MAX_TOPIC_NAME_LENGTH, "..."])
def test_legal_topic_names(name):
    assert topic_name_error(name) is None
    validate_topic_name(name)


@pytest.mark.parametrize("name, why", [
    ("", "empty"), (None, "empty"), (".", "'.'"), ("..", "'.'"),
    ("x" * (MAX_TOPIC_NAME_LENGTH + 1), "longer than 249"),
    ("a/b", "ASCII"), ("../etc", "ASCII"), ("sp ace", "ASCII"), ("ключ", "ASCII"),
])
def test_illegal_topic_names_say_why(name, why):
    assert why in topic_name_error(name)
    if name is not None:
        with pytest.raises(ValueError, match="illegal topic name"):
            validate_topic_name(name)


@pytest.mark.parametrize("topic, partition", [
    ("orders", 0), ("orders-eu", 12), ("a-1-2", 3), ("__consumer_offsets", 49),
    ("x" * MAX_TOPIC_NAME_LENGTH, 2**31 - 1),
])
def test_partition_dir_names_round_trip(topic, partition):
    name = partition_dir_name(topic, partition)
    assert name == f"{topic}-{partition}"
    assert parse_partition_dir(name) == (topic, partition)


@pytest.mark.parametrize("name", [
    "events", "orders-", "-3", "orders-x", "orders-+1", "t-0.abc-delete", "t-1-future",
    "lost+found-1", "..-1", ".-0", "x" * (MAX_TOPIC_NAME_LENGTH + 1) + "-0",
])
def test_what_is_not_a_partition_directory(name):
    assert parse_partition_dir(name) is None
