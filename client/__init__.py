"""minibroker's Kafka client library, on trio.

Public names so far: `TopicPartition`, `AdminClient` (with `NewTopic`) and the `errors`
module (KafkaError and one subclass per Kafka error code). The producer and consumer join
them here as they land.
"""

from client import errors
from client.admin import AdminClient, NewTopic
from client.types import TopicPartition

__all__ = ["AdminClient", "NewTopic", "TopicPartition", "errors"]
