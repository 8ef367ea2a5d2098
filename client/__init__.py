"""minibroker's Kafka client library, on trio.

Public names so far: `TopicPartition`, `AdminClient` (with `NewTopic`), `Producer` (with
`RecordMetadata`), `Consumer` (with `ConsumerRecord`; assign mode — group membership through
`subscribe()` is still to come) and the `errors` module (KafkaError and one subclass per
Kafka error code).
"""

from client import errors
from client.admin import AdminClient, NewTopic
from client.consumer.consumer import Consumer, ConsumerRecord
from client.producer import Producer, RecordMetadata
from client.types import TopicPartition

__all__ = ["AdminClient", "Consumer", "ConsumerRecord", "NewTopic", "Producer",
           "RecordMetadata", "TopicPartition", "errors"]
