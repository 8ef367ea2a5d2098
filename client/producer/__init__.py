"""The producer: `Producer` (producer.py), the pure `RecordAccumulator` (accumulator.py),
the trio `Sender` (sender.py), and for a transactional producer the pure
`TransactionManager` (transaction_manager.py) and its requests to the coordinators
(transactions.py). Keyed partitioning is client.partitioner's."""

from client.producer.producer import DeliveryHandle, Producer, RecordMetadata

__all__ = ["DeliveryHandle", "Producer", "RecordMetadata"]
