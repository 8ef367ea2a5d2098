"""minibroker's Kafka client library, on trio.

Public names: `TopicPartition`, `AdminClient` (with `NewTopic`), `Producer` (with
`RecordMetadata`; transactional with `transactional_id=`), `Consumer` (with `ConsumerRecord` and `ConsumerRebalanceListener`;
assign() or subscribe() with eager or cooperative rebalancing; `OffsetAndTimestamp` and
`ConsumerGroupMetadata` are what its offsets_for_times and group_metadata return),
`ShareConsumer` (KIP-932 share groups, with `AcknowledgeType` and `ShareConsumerRecord`) and the
`errors` module
(KafkaError and one subclass per Kafka error code).
"""

from client import errors
from client.admin import AdminClient, NewTopic
from client.consumer.consumer import Consumer, ConsumerRebalanceListener, ConsumerRecord
from client.consumer.share_consumer import AcknowledgeType, ShareConsumer, ShareConsumerRecord
from client.producer import Producer, RecordMetadata
from client.types import ConsumerGroupMetadata, OffsetAndTimestamp, TopicPartition

__all__ = ["AcknowledgeType", "AdminClient", "Consumer", "ConsumerGroupMetadata",
           "ConsumerRebalanceListener", "ConsumerRecord", "NewTopic", "OffsetAndTimestamp",
           "Producer", "RecordMetadata", "ShareConsumer", "ShareConsumerRecord",
           "TopicPartition", "errors"]
