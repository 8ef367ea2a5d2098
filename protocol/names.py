"""Names a Kafka cluster gives things on disk and on the wire: legal topic names and the
``<topic>-<partition>`` partition-directory name.

Owns the rules Kafka keeps in its common package (org.apache.kafka.common.internals.Topic
for topic names; UnifiedLog's log-directory naming for partitions), so that the broker
that writes a data directory and the tools that read one agree without importing each
other. Pure functions over strings.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_TOPIC_NAME_LENGTH", "TopicPartition", "topic_name_error", "validate_topic_name",
    "partition_dir_name", "parse_partition_dir",
]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")

TopicPartition = tuple[str, int]


def topic_name_error(name: str | None) -> str | None:
    """Why Kafka would refuse this topic name (Topic.validate), or None if it is legal.

    The same rule keeps a name from escaping the data directory: no '/', and not '.' or '..'.
    """
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_CHARS.match(name):
        return "topic name may only contain ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_topic_name(name: str) -> None:
    """Raise ValueError naming the rule if `name` is not a legal topic name."""
    if (reason := topic_name_error(name)) is not None:
        raise ValueError(f"illegal topic name {name!r}: {reason}")


def partition_dir_name(topic: str, partition: int) -> str:
    """The directory of one partition's log: ``orders-3``."""
    return f"{topic}-{partition}"


# The KRaft metadata log's directory (__cluster_metadata-0) is named like a partition's but
# holds the controller quorum's own log: readers of partition data skip it.
METADATA_LOG_TOPIC = "__cluster_metadata"


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``my-topic-3`` -> ("my-topic", 3). Topic names may contain '-', so split at the
    last one; anything that does not end in ``-<digits>`` after a legal topic name is not
    a partition directory (None)."""
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or topic_name_error(topic) is not None:
        return None
    return topic, int(part)
