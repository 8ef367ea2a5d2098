"""minibroker's Kafka client library, on trio.

Public names so far: `TopicPartition`, `AdminClient` (with `NewTopic`), `Producer` (with
`RecordMetadata`) and the `errors`
module (KafkaError and one subclass per Kafka error code). The producer and consumer join
them here as they land.
"""

from client import errors
from client.admin import AdminClient, NewTopic
from client.producer import Producer, RecordMetadata
from client.types import TopicPartition

__all__ = ["AdminClient", "NewTopic", "Producer", "RecordMetadata", "TopicPartition", "errors"]
