"""minibroker's Kafka client library, on trio.

Public names: `TopicPartition`, `AdminClient` (with `NewTopic`), `Producer` (with
`RecordMetadata`), `Consumer` (with `ConsumerRecord` and `ConsumerRebalanceListener`;
assign() or subscribe() with eager or cooperative rebalancing) and the `errors` module
(KafkaError and one subclass per Kafka error code).
"""

from client import errors
from client.admin import AdminClient, NewTopic
from client.consumer.consumer import Consumer, ConsumerRebalanceListener, ConsumerRecord
from client.producer import Producer, RecordMetadata
from client.types import TopicPartition

__all__ = ["AdminClient", "Consumer", "ConsumerRebalanceListener", "ConsumerRecord",
           "NewTopic", "Producer", "RecordMetadata", "TopicPartition", "errors"]
