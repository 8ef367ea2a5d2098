"""The producer: `Producer` (producer.py), the pure `RecordAccumulator` (accumulator.py) and
the trio `Sender` (sender.py). Keyed partitioning is client.partitioner's."""

from client.producer.producer import DeliveryHandle, Producer, RecordMetadata

__all__ = ["DeliveryHandle", "Producer", "RecordMetadata"]
